/* SPDX-License-Identifier: MIT */
/* tools/bench-base.c: gpux-bench-base, the in-process CUDA baseline that gpux bench runs beside it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-kernels.h"
#include "worker/cuda-driver.h"
#include "worker/nvrtc-loader.h"

/*
 * What gpux competes with: a process that uses the Driver API itself. gpux bench execs this
 * program (so that it never initialises CUDA itself) and reads "key value" lines from it.
 *
 *   gpux-bench-base compile CUBIN     NVRTC in this process: write the cubin, its time
 *   gpux-bench-base rtt CUBIN N       empty kernel, launch and synchronise, N times
 *   gpux-bench-base rate CUBIN N      N launches back to back, one synchronisation
 *   gpux-bench-base bw BYTES REPS     copies from and to pinned memory, from pageable
 *   gpux-bench-base startup CUBIN     cuInit, context, module, first result, from main()
 */

#define CHECK(call)                                                                                \
	do {                                                                                       \
		CUresult _r = (call);                                                              \
		if (_r != CUDA_SUCCESS) {                                                          \
			(void)fprintf(stderr, "gpux-bench-base: %s: %s\n", #call,                  \
				      cu_err_name(&cu, _r));                                       \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static struct cu_driver cu;
static CUcontext ctx;
static CUdevice dev;
static CUstream stream;

static uint64_t now(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void init(void)
{
	char *msg = NULL;

	if (cu_driver_load(&cu, &msg) < 0) {
		(void)fprintf(stderr, "gpux-bench-base: %s\n", msg ? msg : "no CUDA driver");
		exit(1);
	}
	CHECK(cu.cuInit(0));
	CHECK(cu.cuDeviceGet(&dev, 0));
	CHECK(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cu.cuCtxSetCurrent(ctx));
	CHECK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
}

static void *read_file(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	void *p;
	long n;

	if (!f || fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) < 0) {
		(void)fprintf(stderr, "gpux-bench-base: cannot read %s\n", path);
		exit(1);
	}
	p = malloc((size_t)n);
	if (!p || fread(p, 1, (size_t)n, f) != (size_t)n)
		exit(1);
	(void)fclose(f);
	*ret_len = (size_t)n;
	return p;
}

static CUfunction load(const char *cubin, const char *name)
{
	size_t len;
	void *img = read_file(cubin, &len);
	CUmodule m;
	CUfunction f;

	CHECK(cu.cuModuleLoadData(&m, img));
	CHECK(cu.cuModuleGetFunction(&f, m, name));
	free(img);
	return f;
}

static int do_compile(const char *out)
{
	struct nvrtc nv = { 0 };
	char why[256], arch[48];
	int major, minor;
	nvrtcProgram prog;
	size_t len;
	char *cubin;
	const char *opts[1];
	uint64_t t0;
	FILE *f;

	init();
	major = 0;
	minor = 0;
	(void)cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
	(void)cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
	(void)snprintf(arch, sizeof(arch), "--gpu-architecture=sm_%d%d", major, minor);
	opts[0] = arch;
	if (nvrtc_load(&nv, why, sizeof(why)) < 0) {
		(void)fprintf(stderr, "gpux-bench-base: %s\n", why);
		return 1;
	}
	t0 = now();
	if (nv.create(&prog, bench_kernels, "bench.cu", 0, NULL, NULL) != NVRTC_SUCCESS ||
	    nv.compile(prog, 1, opts) != NVRTC_SUCCESS || nv.cubin_size(prog, &len) != NVRTC_SUCCESS)
		return 1;
	cubin = malloc(len);
	if (!cubin || nv.cubin(prog, cubin) != NVRTC_SUCCESS)
		return 1;
	printf("compile_ns %llu\n", (unsigned long long)(now() - t0));
	f = fopen(out, "wb");
	if (!f || fwrite(cubin, 1, len, f) != len || fclose(f) != 0)
		return 1;
	{
		CUmodule m;
		t0 = now();
		CHECK(cu.cuModuleLoadData(&m, cubin));
		printf("module_load_ns %llu\n", (unsigned long long)(now() - t0));
	}
	return 0;
}

static int do_rtt(const char *cubin, unsigned n)
{
	uint64_t *t = calloc(n, sizeof(*t));
	CUfunction f;

	init();
	f = load(cubin, "empty");
	for (unsigned i = 0; i < n + n / 10; i++) {
		uint64_t t0 = now();
		CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
		CHECK(cu.cuStreamSynchronize(stream));
		if (i >= n / 10)
			t[i - n / 10] = now() - t0;
	}
	qsort(t, n, sizeof(*t), cmp);
	printf("rtt_p50_ns %llu\nrtt_p99_ns %llu\n", (unsigned long long)t[n / 2],
	       (unsigned long long)t[n * 99 / 100]);
	return 0;
}

static int do_rate(const char *cubin, unsigned n)
{
	CUfunction f;
	uint64_t t0;

	init();
	f = load(cubin, "empty");
	for (unsigned i = 0; i < 1000; i++)
		CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
	CHECK(cu.cuStreamSynchronize(stream));
	t0 = now();
	for (unsigned i = 0; i < n; i++)
		CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
	CHECK(cu.cuStreamSynchronize(stream));
	printf("launches_per_s %.0f\n", (double)n / ((double)(now() - t0) / 1e9));
	return 0;
}

/* The median time of reps copies of `bytes`, host to device or back. */
static uint64_t copy_ns(void *host, CUdeviceptr d, size_t bytes, unsigned reps, int to_device)
{
	uint64_t *t = calloc(reps, sizeof(*t)), m;

	for (unsigned i = 0; i < reps + 1; i++) {
		uint64_t t0 = now();
		if (to_device)
			CHECK(cu.cuMemcpyHtoDAsync(d, host, bytes, stream));
		else
			CHECK(cu.cuMemcpyDtoHAsync(host, d, bytes, stream));
		CHECK(cu.cuStreamSynchronize(stream));
		if (i > 0)
			t[i - 1] = now() - t0;
	}
	qsort(t, reps, sizeof(*t), cmp);
	m = t[reps / 2];
	free(t);
	return m;
}

static int do_bw(size_t bytes, unsigned reps)
{
	CUmemoryPool pool;
	CUdeviceptr d;
	void *pinned, *pageable;
	uint64_t h2d, d2h, page;

	init();
	CHECK(cu.cuDeviceGetDefaultMemPool(&pool, dev));
	CHECK(cu.cuMemAllocFromPoolAsync(&d, bytes, pool, stream));
	pageable = malloc(bytes);
	if (!pageable || posix_memalign(&pinned, 4096, bytes) != 0)
		return 1;
	memset(pinned, 1, bytes);
	memset(pageable, 1, bytes);
	/* Registered host memory, as gpux registers its segments (= cuMemAllocHost's speed). */
	CHECK(cu.cuMemHostRegister(pinned, bytes, 0));
	h2d = copy_ns(pinned, d, bytes, reps, 1);
	d2h = copy_ns(pinned, d, bytes, reps, 0);
	page = copy_ns(pageable, d, bytes, reps, 1);
	printf("pinned_h2d_ns %llu\npinned_d2h_ns %llu\npageable_h2d_ns %llu\n",
	       (unsigned long long)h2d, (unsigned long long)d2h, (unsigned long long)page);
	return 0;
}

static int do_startup(const char *cubin)
{
	uint64_t t0 = now();
	CUfunction f;

	init();
	f = load(cubin, "empty");
	CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
	CHECK(cu.cuStreamSynchronize(stream));
	printf("startup_ns %llu\n", (unsigned long long)(now() - t0));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "compile") == 0)
		return do_compile(argv[2]);
	if (argc == 4 && strcmp(argv[1], "rtt") == 0)
		return do_rtt(argv[2], (unsigned)strtoul(argv[3], NULL, 10));
	if (argc == 4 && strcmp(argv[1], "rate") == 0)
		return do_rate(argv[2], (unsigned)strtoul(argv[3], NULL, 10));
	if (argc == 4 && strcmp(argv[1], "bw") == 0)
		return do_bw(strtoull(argv[2], NULL, 10), (unsigned)strtoul(argv[3], NULL, 10));
	if (argc == 3 && strcmp(argv[1], "startup") == 0)
		return do_startup(argv[2]);
	(void)fprintf(stderr, "usage: gpux-bench-base compile|rtt|rate|bw|startup ...\n");
	return 2;
}
