/* SPDX-License-Identifier: MIT */
/* tools/bench-base.c: gpux-bench-base, the in-process CUDA baseline that gpux bench runs beside it. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench-kernels.h"
#include "cuda-driver.h"
#include "macro.h"
#include "nvrtc-loader.h"

/*
 * What gpux competes with: a process that uses the Driver API itself. gpux bench execs this
 * program (so that it never initialises CUDA itself) and reads "key value" lines from it.
 *
 *   gpux-bench-base compile CUBIN     NVRTC in this process: write the cubin; the times of its
 *                                     first compile and of later ones (other sources), without
 *                                     the driver's JIT cache
 *   gpux-bench-base compile-jit-cache CUBIN
 *                                     the same with the JIT cache (~/.nv/ComputeCache)
 *   gpux-bench-base compile-headers   NVRTC in this process: two kernels of cooperative_groups.h,
 *                                     then two of CUB (bench-kernels.h), each compiled after
 *                                     the first of its pair, without the JIT cache
 *   gpux-bench-base rtt CUBIN N       empty kernel, launch and synchronise, N times
 *   gpux-bench-base rate CUBIN N      N launches back to back, one synchronisation
 *   gpux-bench-base threads CUBIN T N N launches from T threads of one context, a stream each
 *   gpux-bench-base graph CUBIN L N   N launches as graphs of L kernel nodes in a chain, every
 *                                     node's parameters set before each launch of its graph
 *   gpux-bench-base bw CUBIN BYTES REPS
 *                                     copies from and to pinned memory, from pageable; and a
 *                                     copy in, the touch kernel, a copy out (what gpux's IN and
 *                                     OUT arguments do)
 *   gpux-bench-base costs CUBIN       what single driver calls cost, and round trips that end
 *                                     in different ways (for choosing how gpux waits)
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

/* One NVRTC compile of src for opts; its time, and the cubin in *ret (to free). */
static uint64_t compile_once(struct nvrtc *nv, const char *src, const char *opt, char **ret,
			     size_t *ret_len)
{
	const char *opts[] = { opt };
	nvrtcProgram prog;
	uint64_t t0 = now();

	if (nv->create(&prog, src, "bench.cu", 0, NULL, NULL) != NVRTC_SUCCESS ||
	    nv->compile(prog, 1, opts) != NVRTC_SUCCESS ||
	    nv->cubin_size(prog, ret_len) != NVRTC_SUCCESS)
		exit(1);
	*ret = malloc(*ret_len);
	if (!*ret || nv->cubin(prog, *ret) != NVRTC_SUCCESS)
		exit(1);
	t0 = now() - t0;
	(void)nv->destroy(&prog);
	return t0;
}

/*
 * The first compile in a process (NVRTC loaded; its first compile loads its built-in headers
 * and code generator), then the median of three more, each of a source never seen (the
 * kernels with another comment), as gpux bench compiles them.
 *
 * NVRTC keeps the code it generates in the driver's JIT cache (~/.nv/ComputeCache) and finds
 * it there again for the same PTX: a source that differs only in a comment compiles in a
 * fifth of the time (measured on an H200: 13 ms against 62-65 ms). gpux's compiler helper
 * may not read or write that cache (its sandbox), so the like-for-like baseline runs without
 * it; `jit_cache` keeps it, for the row that shows what it is worth.
 */
static int do_compile(const char *out, bool jit_cache)
{
	struct nvrtc nv = { 0 };
	char why[256], arch[48], src[sizeof(bench_kernels) + 64];
	uint64_t later[3];
	int major, minor;
	size_t len;
	char *cubin;
	FILE *f;

	/* Read by the driver when it starts, NVRTC's use of it included. */
	if (!jit_cache && setenv("CUDA_CACHE_DISABLE", "1", 1) < 0)
		return 1;
	init();
	major = 0;
	minor = 0;
	(void)cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
	(void)cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
	(void)snprintf(arch, sizeof(arch), "--gpu-architecture=sm_%d%d", major, minor);
	if (nvrtc_load(&nv, why, sizeof(why)) < 0) {
		(void)fprintf(stderr, "gpux-bench-base: %s\n", why);
		return 1;
	}
	(void)snprintf(src, sizeof(src), "%s\n/* bench */\n", bench_kernels);
	printf("compile_ns %llu\n", (unsigned long long)compile_once(&nv, src, arch, &cubin, &len));
	for (unsigned i = 0; i < 3; i++) {
		char *c;
		size_t l;

		(void)snprintf(src, sizeof(src), "%s\n/* later %u */\n", bench_kernels, i);
		later[i] = compile_once(&nv, src, arch, &c, &l);
		free(c);
	}
	qsort(later, 3, sizeof(later[0]), cmp);
	printf("compile_later_ns %llu\n", (unsigned long long)later[1]);
	f = fopen(out, "wb");
	if (!f || fwrite(cubin, 1, len, f) != len || fclose(f) != 0)
		return 1;
	{
		CUmodule m;
		uint64_t t0 = now();
		CHECK(cu.cuModuleLoadData(&m, cubin));
		printf("module_load_ns %llu\n", (unsigned long long)(now() - t0));
	}
	return 0;
}

/* -I options for the toolkit's headers beside NVRTC (its lib64/../include, and cccl). */
static unsigned toolkit_opts(struct nvrtc *nv, char opts[2][600])
{
	const char *lib = nvrtc_file(nv);
	char dir[512];
	char *slash;
	unsigned n = 0;

	if (!lib || snprintf(dir, sizeof(dir), "%s", lib) >= (int)sizeof(dir) ||
	    !(slash = strrchr(dir, '/')))
		return 0;
	*slash = '\0';
	(void)snprintf(opts[n++], sizeof(opts[0]), "-I%s/../include", dir);
	(void)snprintf(opts[n], sizeof(opts[0]), "%s/../include/cccl", dir);
	if (access(opts[n], F_OK) == 0)
		(void)snprintf(opts[n++], sizeof(opts[0]), "-I%s/../include/cccl", dir);
	return n;
}

/* The time of one compile of src with opts (which succeed, or exit 1). */
static uint64_t compile_opts(struct nvrtc *nv, const char *src, const char **opts, unsigned n)
{
	nvrtcProgram prog;
	uint64_t t0 = now();
	size_t len;

	if (nv->create(&prog, src, "bench.cu", 0, NULL, NULL) != NVRTC_SUCCESS ||
	    nv->compile(prog, (int)n, opts) != NVRTC_SUCCESS ||
	    nv->cubin_size(prog, &len) != NVRTC_SUCCESS)
		exit(1);
	t0 = now() - t0;
	(void)nv->destroy(&prog);
	return t0;
}

/* gpux bench's "modules": what the second kernel of a pair costs in a process of its own. */
static int do_compile_headers(void)
{
	struct nvrtc nv = { 0 };
	char why[256], arch[48], inc[2][600];
	const char *opts[3] = { arch, inc[0], inc[1] };
	int major = 0, minor = 0;
	unsigned n;

	if (setenv("CUDA_CACHE_DISABLE", "1", 1) < 0)
		return 1;
	init();
	(void)cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
	(void)cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
	(void)snprintf(arch, sizeof(arch), "--gpu-architecture=sm_%d%d", major, minor);
	if (nvrtc_load(&nv, why, sizeof(why)) < 0) {
		(void)fprintf(stderr, "gpux-bench-base: %s\n", why);
		return 1;
	}
	n = 1 + toolkit_opts(&nv, inc);
	printf("cg_first_ns %llu\n",
	       (unsigned long long)compile_opts(&nv, bench_cg_kernels[0], opts, n));
	printf("cg_second_ns %llu\n",
	       (unsigned long long)compile_opts(&nv, bench_cg_kernels[1], opts, n));
	printf("cub_first_ns %llu\n",
	       (unsigned long long)compile_opts(&nv, bench_cub_kernels[0], opts, n));
	printf("cub_second_ns %llu\n",
	       (unsigned long long)compile_opts(&nv, bench_cub_kernels[1], opts, n));
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

struct launcher {
	CUfunction f;
	unsigned n;
	pthread_barrier_t *start;
	uint64_t ns;
};

static void *launcher_main(void *arg)
{
	struct launcher *l = arg;
	CUstream st;
	uint64_t t0;

	CHECK(cu.cuCtxSetCurrent(ctx));
	CHECK(cu.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	for (unsigned i = 0; i < 1000; i++)
		CHECK(cu.cuLaunchKernel(l->f, 1, 1, 1, 1, 1, 1, 0, st, NULL, NULL));
	CHECK(cu.cuStreamSynchronize(st));
	(void)pthread_barrier_wait(l->start);
	t0 = now();
	for (unsigned i = 0; i < l->n; i++)
		CHECK(cu.cuLaunchKernel(l->f, 1, 1, 1, 1, 1, 1, 0, st, NULL, NULL));
	CHECK(cu.cuStreamSynchronize(st));
	l->ns = now() - t0;
	return NULL;
}

/* T threads of one context, a stream each: the rate of all of them together. */
static int do_threads(const char *cubin, unsigned t, unsigned n)
{
	pthread_t th[64];
	struct launcher l[64];
	pthread_barrier_t start;
	uint64_t slowest = 0;
	CUfunction f;

	if (t == 0 || t > 64)
		return 2;
	init();
	f = load(cubin, "empty");
	(void)pthread_barrier_init(&start, NULL, t);
	for (unsigned i = 0; i < t; i++) {
		l[i] = (struct launcher){ .f = f, .n = n / t, .start = &start };
		if (pthread_create(&th[i], NULL, launcher_main, &l[i]) != 0)
			return 1;
	}
	for (unsigned i = 0; i < t; i++) {
		(void)pthread_join(th[i], NULL);
		if (l[i].ns > slowest)
			slowest = l[i].ns;
	}
	printf("launches_per_s %.0f\n", (double)(n / t * t) / ((double)slowest / 1e9));
	return 0;
}

/* A chain of len kernel nodes of f, instantiated. */
static CUgraphExec chain(CUfunction f, unsigned len, CUgraphNode *nodes)
{
	CUDA_KERNEL_NODE_PARAMS p = { .func = f,
				      .gridDimX = 1,
				      .gridDimY = 1,
				      .gridDimZ = 1,
				      .blockDimX = 1,
				      .blockDimY = 1,
				      .blockDimZ = 1 };
	CUgraphExec exec;
	CUgraph g;

	CHECK(cu.cuGraphCreate(&g, 0));
	for (unsigned i = 0; i < len; i++)
		CHECK(cu.cuGraphAddKernelNode(&nodes[i], g, i ? &nodes[i - 1] : NULL, i ? 1 : 0,
					      &p));
	CHECK(cu.cuGraphInstantiateWithFlags(&exec, g, 0));
	return exec;
}

/* Graphs of len nodes, every node's parameters set before each launch: launches per second. */
static int do_graph(const char *cubin, unsigned len, unsigned n)
{
	CUgraphNode nodes[512];
	CUgraphExec exec;
	CUfunction f;
	uint64_t t0;

	if (len == 0 || len > 512)
		return 2;
	init();
	f = load(cubin, "empty");
	exec = chain(f, len, nodes);
	for (unsigned round = 0; round < 2; round++) {
		CUDA_KERNEL_NODE_PARAMS p = { .func = f,
					      .gridDimX = 1,
					      .gridDimY = 1,
					      .gridDimZ = 1,
					      .blockDimX = 1,
					      .blockDimY = 1,
					      .blockDimZ = 1 };
		unsigned graphs = round ? n / len : 1000 / len + 1;

		t0 = now();
		for (unsigned i = 0; i < graphs; i++) {
			for (unsigned k = 0; k < len; k++)
				CHECK(cu.cuGraphExecKernelNodeSetParams(exec, nodes[k], &p));
			CHECK(cu.cuGraphLaunch(exec, stream));
		}
		CHECK(cu.cuStreamSynchronize(stream));
		if (round)
			printf("launches_per_s %.0f\n",
			       (double)(graphs * len) / ((double)(now() - t0) / 1e9));
	}
	return 0;
}

/* An entry point of the driver that gpux itself does not use. */
static void *driver_fn(const char *name)
{
	CUresult (*get)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
		(CUresult(*)(const char *, void **, int, cuuint64_t,
			     CUdriverProcAddressQueryResult *))dlsym(cu.lib, "cuGetProcAddress_v2");
	CUdriverProcAddressQueryResult found;
	void *fn = NULL;

	if (!get || get(name, &fn, cu.version, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS)
		return NULL;
	return fn;
}

static uint64_t median_of(uint64_t *t, unsigned n)
{
	qsort(t, n, sizeof(*t), cmp);
	return t[n / 2];
}

/*
 * What single calls cost (ns each, averaged over many), and round trips of an empty kernel
 * that end in five ways: cuStreamSynchronize; an event, spun on with cuEventQuery; an event,
 * waited for with cuEventSynchronize; a 64-bit word the stream writes to mapped host memory,
 * spun on (cuStreamWriteValue64); the stream, spun on with cuStreamQuery. And three with the
 * kernel in a graph of one node instead of cuLaunchKernel: launched as it is, its node set
 * before each launch, each ended by an event spun on; and the same without the event, ended
 * by cuStreamSynchronize.
 */
static int do_costs(const char *cubin)
{
	enum { N = 20000, RTT = 2000 };
	static const char *const ends[] = { "sync",
					    "event_spin",
					    "event_sync",
					    "word_spin",
					    "stream_spin",
					    "graph1_event_spin",
					    "graph1_set_event_spin",
					    "graph1_sync" };
	static uint64_t t[RTT];
	CUresult (*write64)(CUstream, CUdeviceptr, cuuint64_t, unsigned);
	CUresult (*host_alloc)(void **, size_t, unsigned);
	CUresult (*stream_query)(CUstream);
	volatile uint64_t *word = NULL;
	CUdeviceptr word_dev = 0;
	CUgraphNode nodes[64], node1;
	CUgraphExec exec, one;
	CUfunction f;
	CUevent ev;
	uint64_t t0;

	init();
	f = load(cubin, "empty");
	write64 = driver_fn("cuStreamWriteValue64");
	host_alloc = driver_fn("cuMemHostAlloc");
	stream_query = driver_fn("cuStreamQuery");
	CHECK(cu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	if (write64 && host_alloc &&
	    host_alloc((void **)&word, 4096, CU_MEMHOSTALLOC_DEVICEMAP) == CUDA_SUCCESS)
		CHECK(cu.cuMemHostGetDevicePointer(&word_dev, (void *)word, 0));
	t0 = now();
	for (unsigned i = 0; i < N; i++)
		CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
	CHECK(cu.cuStreamSynchronize(stream));
	printf("launch_ns %.1f\n", (double)(now() - t0) / N);
	t0 = now();
	for (unsigned i = 0; i < N; i++)
		CHECK(cu.cuEventRecord(ev, stream));
	CHECK(cu.cuStreamSynchronize(stream));
	printf("event_record_ns %.1f\n", (double)(now() - t0) / N);
	t0 = now();
	for (unsigned i = 0; i < N; i++)
		(void)cu.cuEventQuery(ev);
	printf("event_query_ns %.1f\n", (double)(now() - t0) / N);
	if (stream_query) {
		t0 = now();
		for (unsigned i = 0; i < N; i++)
			(void)stream_query(stream);
		printf("stream_query_ns %.1f\n", (double)(now() - t0) / N);
	}
	exec = chain(f, 64, nodes);
	{
		CUDA_KERNEL_NODE_PARAMS p = { .func = f,
					      .gridDimX = 1,
					      .gridDimY = 1,
					      .gridDimZ = 1,
					      .blockDimX = 1,
					      .blockDimY = 1,
					      .blockDimZ = 1 };
		t0 = now();
		for (unsigned i = 0; i < N; i++)
			CHECK(cu.cuGraphExecKernelNodeSetParams(exec, nodes[i % 64], &p));
		printf("graph_node_set_ns %.1f\n", (double)(now() - t0) / N);
	}
	t0 = now();
	for (unsigned i = 0; i < N / 64; i++)
		CHECK(cu.cuGraphLaunch(exec, stream));
	CHECK(cu.cuStreamSynchronize(stream));
	printf("graph64_launch_ns %.1f\n", (double)(now() - t0) / (N / 64));
	one = chain(f, 1, &node1);
	t0 = now();
	for (unsigned i = 0; i < N; i++)
		CHECK(cu.cuGraphLaunch(one, stream));
	CHECK(cu.cuStreamSynchronize(stream));
	printf("graph1_launch_ns %.1f\n", (double)(now() - t0) / N);
	if (word_dev) {
		t0 = now();
		for (unsigned i = 0; i < N; i++)
			CHECK(write64(stream, word_dev, i, 0));
		CHECK(cu.cuStreamSynchronize(stream));
		printf("write_value_ns %.1f\n", (double)(now() - t0) / N);
	}
	{
		/* A request's temporary, as a worker takes it: from the default pool, which keeps
		 * what is freed. */
		cuuint64_t keep = UINT64_MAX;
		CUmemoryPool pool;
		CUdeviceptr p;

		CHECK(cu.cuDeviceGetDefaultMemPool(&pool, dev));
		CHECK(cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
		t0 = now();
		for (unsigned i = 0; i < N; i++) {
			CHECK(cu.cuMemAllocFromPoolAsync(&p, 65536, pool, stream));
			CHECK(cu.cuMemFreeAsync(p, stream));
		}
		CHECK(cu.cuStreamSynchronize(stream));
		printf("pool_alloc_free_ns %.1f\n", (double)(now() - t0) / N);
	}
	for (unsigned how = 0; how < ARRAY_SIZE(ends); how++) {
		if ((how == 3 && !word_dev) || (how == 4 && !stream_query))
			continue;
		for (unsigned i = 0; i < RTT; i++) {
			uint64_t a = now();

			if (how >= 5) {
				if (how == 6) {
					CUDA_KERNEL_NODE_PARAMS p = { .func = f,
								      .gridDimX = 1,
								      .gridDimY = 1,
								      .gridDimZ = 1,
								      .blockDimX = 1,
								      .blockDimY = 1,
								      .blockDimZ = 1 };

					CHECK(cu.cuGraphExecKernelNodeSetParams(one, node1, &p));
				}
				CHECK(cu.cuGraphLaunch(one, stream));
			} else {
				CHECK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, NULL,
							NULL));
			}
			if (how == 0 || how == 7) {
				CHECK(cu.cuStreamSynchronize(stream));
			} else if (how == 1 || how == 5 || how == 6) {
				CHECK(cu.cuEventRecord(ev, stream));
				while (cu.cuEventQuery(ev) == CUDA_ERROR_NOT_READY)
					;
			} else if (how == 2) {
				CHECK(cu.cuEventRecord(ev, stream));
				CHECK(cu.cuEventSynchronize(ev));
			} else if (how == 3) {
				CHECK(write64(stream, word_dev, i + 1, 0));
				while (*word != i + 1)
					;
			} else {
				while (stream_query(stream) == CUDA_ERROR_NOT_READY)
					;
			}
			t[i] = now() - a;
		}
		printf("rtt_%s_p50_ns %llu\n", ends[how],
		       (unsigned long long)median_of(t + RTT / 10, RTT - RTT / 10));
	}
	return 0;
}

/* The median time of reps of a copy of `bytes`, host to device or back; with `touch` (not
 * NULL), the kernel on the device's copy after a copy in, or before a copy out. */
static uint64_t copy_ns(CUfunction touch, void *host, CUdeviceptr d, size_t bytes, unsigned reps,
			int to_device)
{
	uint64_t *t = calloc(reps, sizeof(*t)), m;
	void *params[] = { &d };

	for (unsigned i = 0; i < reps + 1; i++) {
		uint64_t t0 = now();
		if (to_device)
			CHECK(cu.cuMemcpyHtoDAsync(d, host, bytes, stream));
		if (touch)
			CHECK(cu.cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
		if (!to_device)
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

static int do_bw(const char *cubin, size_t bytes, unsigned reps)
{
	CUmemoryPool pool;
	CUdeviceptr d;
	CUfunction touch;
	void *pinned, *pageable;
	uint64_t h2d, d2h, page, in_k, out_k;

	init();
	touch = load(cubin, "touch");
	CHECK(cu.cuDeviceGetDefaultMemPool(&pool, dev));
	CHECK(cu.cuMemAllocFromPoolAsync(&d, bytes, pool, stream));
	pageable = malloc(bytes);
	if (!pageable || posix_memalign(&pinned, 4096, bytes) != 0)
		return 1;
	memset(pinned, 1, bytes);
	memset(pageable, 1, bytes);
	/* Registered host memory, as gpux registers its segments (= cuMemAllocHost's speed). */
	CHECK(cu.cuMemHostRegister(pinned, bytes, 0));
	h2d = copy_ns(NULL, pinned, d, bytes, reps, 1);
	d2h = copy_ns(NULL, pinned, d, bytes, reps, 0);
	page = copy_ns(NULL, pageable, d, bytes, reps, 1);
	in_k = copy_ns(touch, pinned, d, bytes, reps, 1);
	out_k = copy_ns(touch, pinned, d, bytes, reps, 0);
	printf("pinned_h2d_ns %llu\npinned_d2h_ns %llu\npageable_h2d_ns %llu\n"
	       "h2d_kernel_ns %llu\nkernel_d2h_ns %llu\n",
	       (unsigned long long)h2d, (unsigned long long)d2h, (unsigned long long)page,
	       (unsigned long long)in_k, (unsigned long long)out_k);
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
		return do_compile(argv[2], false);
	if (argc == 3 && strcmp(argv[1], "compile-jit-cache") == 0)
		return do_compile(argv[2], true);
	if (argc == 2 && strcmp(argv[1], "compile-headers") == 0)
		return do_compile_headers();
	if (argc == 4 && strcmp(argv[1], "rtt") == 0)
		return do_rtt(argv[2], (unsigned)strtoul(argv[3], NULL, 10));
	if (argc == 4 && strcmp(argv[1], "rate") == 0)
		return do_rate(argv[2], (unsigned)strtoul(argv[3], NULL, 10));
	if (argc == 5 && strcmp(argv[1], "threads") == 0)
		return do_threads(argv[2], (unsigned)strtoul(argv[3], NULL, 10),
				  (unsigned)strtoul(argv[4], NULL, 10));
	if (argc == 5 && strcmp(argv[1], "graph") == 0)
		return do_graph(argv[2], (unsigned)strtoul(argv[3], NULL, 10),
				(unsigned)strtoul(argv[4], NULL, 10));
	if (argc == 5 && strcmp(argv[1], "bw") == 0)
		return do_bw(argv[2], strtoull(argv[3], NULL, 10),
			     (unsigned)strtoul(argv[4], NULL, 10));
	if (argc == 3 && strcmp(argv[1], "costs") == 0)
		return do_costs(argv[2]);
	if (argc == 3 && strcmp(argv[1], "startup") == 0)
		return do_startup(argv[2]);
	(void)fprintf(stderr, "usage: gpux-bench-base compile|compile-jit-cache|compile-headers|"
			      "rtt|rate|threads|graph|bw|costs|startup ...\n");
	return 2;
}
