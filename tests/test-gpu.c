/* SPDX-License-Identifier: MIT */
/* tests/test-gpu.c: the CUDA back end on a real GPU (suite gpu; exits 77 without one). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

static const char kernels[] =
	"#define TILE 16\n"
	"extern \"C\" __global__ void saxpy(unsigned long long n, float a, const float *x,\n"
	"                                  const float *y, float *out)\n"
	"{\n"
	"	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
	"	if (i < n)\n"
	"		out[i] = a * x[i] + y[i];\n"
	"}\n"
	"extern \"C\" __global__ void block_sum(unsigned long long n, const float *x, double "
	"*out)\n"
	"{\n"
	"	extern __shared__ double sh[];\n"
	"	unsigned t = threadIdx.x;\n"
	"	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + t;\n"
	"	sh[t] = i < n ? x[i] : 0.0;\n"
	"	__syncthreads();\n"
	"	for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
	"		if (t < s)\n"
	"			sh[t] += sh[t + s];\n"
	"		__syncthreads();\n"
	"	}\n"
	"	if (t == 0)\n"
	"		out[blockIdx.x] = sh[0];\n"
	"}\n"
	"extern \"C\" __global__ void matmul(int M, int N, int K, const float *A, const float *B,\n"
	"                                   float *C)\n"
	"{\n"
	"	__shared__ float As[TILE][TILE], Bs[TILE][TILE];\n"
	"	int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;\n"
	"	float acc = 0;\n"
	"	for (int t = 0; t < (K + TILE - 1) / TILE; t++) {\n"
	"		int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;\n"
	"		As[threadIdx.y][threadIdx.x] = row < M && ka < K ? A[row * K + ka] : "
	"0.0f;\n"
	"		Bs[threadIdx.y][threadIdx.x] = kb < K && col < N ? B[kb * N + col] : "
	"0.0f;\n"
	"		__syncthreads();\n"
	"		for (int k = 0; k < TILE; k++)\n"
	"			acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];\n"
	"		__syncthreads();\n"
	"	}\n"
	"	if (row < M && col < N)\n"
	"		C[row * N + col] = acc;\n"
	"}\n"
	"extern \"C\" __global__ void scale2p1(unsigned long long n, const float *in, float *out)\n"
	"{\n"
	"	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + "
	"threadIdx.x;\n"
	"	     i < n; i += (unsigned long long)gridDim.x * blockDim.x)\n"
	"		out[i] = in[i] * 2.0f + 1.0f;\n"
	"}\n"
	"extern \"C\" __global__ void inc(unsigned long long n, float *p)\n"
	"{\n"
	"	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
	"	if (i < n)\n"
	"		p[i] += 1.0f;\n"
	"}\n"
	"extern \"C\" __global__ void big_shared(unsigned long long n, float *out)\n"
	"{\n"
	"	extern __shared__ float shf[];\n"
	"	for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x)\n"
	"		shf[i] = (float)i;\n"
	"	__syncthreads();\n"
	"	for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x)\n"
	"		out[i] = shf[n - 1 - i];\n"
	"}\n"
	"extern \"C\" __global__ void bad_address(float *p)\n"
	"{\n"
	"	p[1ull << 40] = 1.0f;\n"
	"}\n"
	"extern \"C\" __global__ void add1(unsigned long long n, const float *in, float *out)\n"
	"{\n"
	"	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
	"	if (i < n)\n"
	"		out[i] = in[i] + 1.0f;\n"
	"}\n"
	"extern \"C\" __global__ void xor3(unsigned long long n, const unsigned char *a,\n"
	"                                 const unsigned char *b, const unsigned char *c,\n"
	"                                 unsigned char *out)\n"
	"{\n"
	"	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
	"	if (i < n)\n"
	"		out[i] = a[i] ^ b[i] ^ c[i];\n"
	"}\n"
	"extern \"C\" __global__ void square(unsigned long long n, const float *in, float *out)\n"
	"{\n"
	"	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
	"	if (i < n)\n"
	"		out[i] = in[i] * in[i];\n"
	"}\n"
	"extern \"C\" __global__ void wait_flag(volatile int *flag, int *seen,\n"
	"                                      unsigned long long cycles)\n"
	"{\n"
	"	unsigned long long t0 = clock64();\n"
	"	while (!*flag && clock64() - t0 < cycles)\n"
	"		;\n"
	"	*seen = *flag;\n"
	"}\n"
	"extern \"C\" __global__ void set_flag(volatile int *flag)\n"
	"{\n"
	"	*flag = 1;\n"
	"	__threadfence_system();\n"
	"}\n"
	"extern \"C\" __global__ void slow_add1(unsigned long long n, const float *in, float "
	"*out,\n"
	"                                      unsigned long long cycles)\n"
	"{\n"
	"	unsigned long long t0 = clock64();\n"
	"	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
	"	while (clock64() - t0 < cycles)\n"
	"		;\n"
	"	if (i < n)\n"
	"		out[i] = in[i] + 1.0f;\n"
	"}\n"
	"extern \"C\" __global__ void spin(unsigned long long ns)\n"
	"{\n"
	"	unsigned long long t0 = clock64();\n"
	"	while (clock64() - t0 < ns)\n"
	"		;\n"
	"}\n";

struct env {
	struct test_daemon d;
	char cache[300];
	gpux_ctx *ctx;
	gpux_module *m;
	uint64_t seed;
};

static void start(struct env *e)
{
	const char *const args[] = { "--backend", "cuda", "--cache-dir", e->cache, NULL };

	test_daemon_start(&e->d, args);
}

static gpux_module *load(gpux_ctx *ctx)
{
	gpux_module *m = NULL;
	char *log = NULL;
	gpux_status st = gpux_module_load(ctx, GPUX_LANG_CUDA, kernels, sizeof(kernels) - 1,
					  "-lineinfo", &m, &log);

	if (st != GPUX_OK)
		fail_msg("compiling the GPU test kernels: %s\n%s", gpux_strerror(st),
			 log ? log : "");
	free(log);
	return m;
}

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	(void)snprintf(e->cache, sizeof(e->cache), "/tmp/gpux-gpu-cache-XXXXXX");
	assert_non_null(mkdtemp(e->cache));
	start(e);
	e->ctx = test_connect(&e->d);
	e->m = load(e->ctx);
	e->seed = (uint64_t)mono_ns();
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;
	char cmd[400];

	if (!e)
		return 0;
	gpux_module_free(e->m);
	gpux_disconnect(e->ctx);
	test_daemon_stop(&e->d);
	(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", e->cache);
	(void)system(cmd);
	free(e);
	return 0;
}

static void poison(void *p, size_t bytes)
{
	memset(p, 0xff, bytes); /* NaN as floats */
}

static void test_gpu_saxpy(void **state)
{
	struct env *e = *state;
	const uint64_t n = 3000017;
	float a = -1.25f;
	gpux_buf *x, *y, *out;
	const float *px, *py, *po;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, &e->seed);
	test_fill_random(gpux_buf_data(y), n, &e->seed);
	poison(gpux_buf_data(out), n * 4);
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), GPUX_ARG_VALUE(a),
					   gpux_arg_in(x, 0, n * 4), gpux_arg_in(y, 0, n * 4),
					   gpux_arg_out(out, 0, n * 4) };
		struct gpux_launch l = { .grid = { (uint32_t)((n + 255) / 256) },
					 .block = { 256 } };
		assert_int_equal(gpux_run(e->m, "saxpy", &l, args, 5), GPUX_OK);
	}
	px = gpux_buf_data(x);
	py = gpux_buf_data(y);
	po = gpux_buf_data(out);
	for (uint64_t i = 0; i < n; i++)
		assert_float_equal(po[i], a * px[i] + py[i], 1e-5);
	gpux_buf_free(out);
	gpux_buf_free(y);
	gpux_buf_free(x);
}

static void test_gpu_reduction(void **state)
{
	struct env *e = *state;
	const uint64_t n = 1 << 22;
	const uint32_t blocks = (uint32_t)(n / 512);
	gpux_buf *x, *out;
	double want = 0, got = 0;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, blocks * 8, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, &e->seed);
	poison(gpux_buf_data(out), blocks * 8);
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 0, n * 4),
					   gpux_arg_out(out, 0, blocks * 8) };
		struct gpux_launch l = { .grid = { blocks },
					 .block = { 512 },
					 .shared_bytes = 512 * 8 };
		assert_int_equal(gpux_run(e->m, "block_sum", &l, args, 3), GPUX_OK);
	}
	for (uint64_t i = 0; i < n; i++)
		want += ((float *)gpux_buf_data(x))[i];
	for (uint32_t b = 0; b < blocks; b++) {
		double v = ((double *)gpux_buf_data(out))[b];
		assert_false(isnan(v));
		got += v;
	}
	assert_float_equal(got, want, 1e-6 * (double)n);
	gpux_buf_free(out);
	gpux_buf_free(x);
}

static void test_gpu_tiled_matmul(void **state)
{
	struct env *e = *state;
	const int M = 517, N = 389, K = 263;
	gpux_buf *A, *B, *C;
	double num = 0, den = 0;

	assert_int_equal(gpux_buf_alloc(e->ctx, (size_t)M * K * 4, &A), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, (size_t)K * N * 4, &B), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, (size_t)M * N * 4, &C), GPUX_OK);
	test_fill_random(gpux_buf_data(A), (size_t)M * K, &e->seed);
	test_fill_random(gpux_buf_data(B), (size_t)K * N, &e->seed);
	poison(gpux_buf_data(C), (size_t)M * N * 4);
	{
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(M),
			GPUX_ARG_VALUE(N),
			GPUX_ARG_VALUE(K),
			gpux_arg_in(A, 0, (size_t)M * K * 4),
			gpux_arg_in(B, 0, (size_t)K * N * 4),
			gpux_arg_out(C, 0, (size_t)M * N * 4),
		};
		struct gpux_launch l = { .grid = { (N + 15) / 16, (M + 15) / 16 },
					 .block = { 16, 16 } };
		assert_int_equal(gpux_run(e->m, "matmul", &l, args, 6), GPUX_OK);
	}
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double ref = 0, got = ((float *)gpux_buf_data(C))[i * N + j];
			for (int k = 0; k < K; k++)
				ref += (double)((float *)gpux_buf_data(A))[i * K + k] *
				       ((float *)gpux_buf_data(B))[k * N + j];
			num += (got - ref) * (got - ref);
			den += ref * ref;
		}
	/* ||C - ref|| / ||ref|| for float32 arithmetic; NaN (an unwritten element) fails. */
	assert_true(sqrt(num / den) < 1e-5);
	gpux_buf_free(C);
	gpux_buf_free(B);
	gpux_buf_free(A);
}

static void test_gpu_256mib_in_out(void **state)
{
	struct env *e = *state;
	const uint64_t n = 64ull << 20;
	gpux_buf *in, *out;
	const float *pi, *po;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &in), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(in), n, &e->seed);
	poison(gpux_buf_data(out), n * 4);
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(in, 0, n * 4),
					   gpux_arg_out(out, 0, n * 4) };
		struct gpux_launch l = { .grid = { 4096 }, .block = { 256 } };
		assert_int_equal(gpux_run(e->m, "scale2p1", &l, args, 3), GPUX_OK);
	}
	pi = gpux_buf_data(in);
	po = gpux_buf_data(out);
	for (uint64_t i = 0; i < n; i++)
		if (po[i] != pi[i] * 2.0f + 1.0f)
			fail_msg("element %llu: %g, want %g", (unsigned long long)i, po[i],
				 pi[i] * 2.0f + 1.0f);
	gpux_buf_free(out);
	gpux_buf_free(in);
}

static void test_gpu_mapped_and_big_shared(void **state)
{
	struct env *e = *state;
	const uint64_t n = 100000, ns = 100 * 1024 / 4;
	gpux_buf *p, *out;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &p), GPUX_OK);
	for (uint64_t i = 0; i < n; i++)
		((float *)gpux_buf_data(p))[i] = (float)i;
	{
		/* The kernel writes the client's own pages through the mapping. */
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_mapped(p, 0, n * 4) };
		struct gpux_launch l = { .grid = { (uint32_t)((n + 255) / 256) },
					 .block = { 256 } };
		assert_int_equal(gpux_run(e->m, "inc", &l, args, 2), GPUX_OK);
	}
	for (uint64_t i = 0; i < n; i++)
		assert_float_equal(((float *)gpux_buf_data(p))[i], (float)i + 1, 0);
	assert_int_equal(gpux_buf_alloc(e->ctx, ns * 4, &out), GPUX_OK);
	poison(gpux_buf_data(out), ns * 4);
	{
		/* 100 KiB of dynamic shared memory: past the default 48 KiB, raised for it. */
		struct gpux_arg args[] = { GPUX_ARG_VALUE(ns), gpux_arg_out(out, 0, ns * 4) };
		struct gpux_launch l = { .grid = { 1 }, .block = { 256 }, .shared_bytes = ns * 4 };
		assert_int_equal(gpux_run(e->m, "big_shared", &l, args, 2), GPUX_OK);
	}
	for (uint64_t i = 0; i < ns; i++)
		assert_float_equal(((float *)gpux_buf_data(out))[i], (float)(ns - 1 - i), 0);
	gpux_buf_free(out);
	gpux_buf_free(p);
}

static void expect(struct env *e, const char *k, const struct gpux_arg *args, uint32_t nargs,
		   const struct gpux_launch *l, gpux_status want, const char *text)
{
	gpux_req *r;

	assert_int_equal(gpux_submit(e->m, k, l, args, nargs, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, 30000), want);
	if (!strstr(gpux_req_message(r), text))
		fail_msg("\"%s\" lacks \"%s\"", gpux_req_message(r), text);
	gpux_req_free(r);
}

static void test_gpu_wrong_arguments_refused(void **state)
{
	struct env *e = *state;
	uint64_t n = 16;
	uint32_t small = 16;
	gpux_buf *b;
	struct gpux_launch l = { .grid = { 1 }, .block = { 32 } };
	struct gpux_launch huge = { .grid = { 1 }, .block = { 2048 } };

	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n) };
		expect(e, "inc", args, 1, &l, GPUX_E_INVAL, "takes 2 arguments, 1 given");
	}
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(small), gpux_arg_inout(b, 0, 64) };
		expect(e, "inc", args, 2, &l, GPUX_E_INVAL, "argument 0");
		args[0] = GPUX_ARG_VALUE(n);
		/* Past the device's threads per block: refused at submit, nothing sent. */
		{
			gpux_req *r = NULL;
			assert_int_equal(gpux_submit(e->m, "inc", &huge, args, 2, &r),
					 GPUX_E_INVAL);
			assert_null(r);
		}
		expect(e, "no_such", args, 2, &l, GPUX_E_NOTFOUND, "no_such");
		assert_int_equal(gpux_run(e->m, "inc", &l, args, 2), GPUX_OK);
	}
	gpux_buf_free(b);
}

static void test_gpu_compile_errors(void **state)
{
	static const char bad[] = "extern \"C\" __global__ void k() { undefined_thing(); }\n";
	static const char sneaky[] =
		"#include \"/etc/passwd\"\nextern \"C\" __global__ void k() {}\n";
	struct env *e = *state;
	gpux_module *m = NULL;
	char *log = NULL;

	assert_int_equal(
		gpux_module_load(e->ctx, GPUX_LANG_CUDA, bad, sizeof(bad) - 1, NULL, &m, &log),
		GPUX_E_COMPILE);
	assert_non_null(strstr(log, "undefined_thing"));
	free(log);
	log = NULL;
	assert_int_equal(gpux_module_load(e->ctx, GPUX_LANG_CUDA, sneaky, sizeof(sneaky) - 1, NULL,
					  &m, &log),
			 GPUX_E_COMPILE);
	assert_non_null(strstr(log, "/etc/passwd"));
	assert_null(strstr(log, "root:"));
	free(log);
}

static uint32_t generation(struct env *e)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[0].generation;
}

static void test_gpu_illegal_address_restarts_worker(void **state)
{
	struct env *e = *state;
	uint32_t gen = generation(e);
	gpux_buf *b;
	gpux_req *r;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };

	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	{
		struct gpux_arg arg = gpux_arg_inout(b, 0, 64);
		assert_int_equal(gpux_submit(e->m, "bad_address", &l, &arg, 1, &r), GPUX_OK);
	}
	assert_int_equal(gpux_wait(r, 30000), GPUX_E_KERNEL_FAULT);
	assert_non_null(strstr(gpux_req_message(r), "CUDA_ERROR_ILLEGAL_ADDRESS"));
	gpux_req_free(r);
	test_wait_generation(&e->d, 0, gen);
	{
		uint64_t n = 16;
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_inout(b, 0, 64) };
		assert_int_equal(gpux_run(e->m, "inc", &l, args, 2), GPUX_OK);
	}
	gpux_buf_free(b);
}

#define INNOCENTS 16u

/*
 * A neighbour's fault costs innocents only a delay: another client's slow kernels with IN and
 * OUT (and INOUT, in place) arguments are in flight and queued when this client's kernel
 * writes an illegal address. Only the faulting request fails; the other client's run again
 * on the restarted worker, each once, with the right results (a request whose results were
 * being copied back at that very moment cannot run again: at most one such, told so). A
 * device buffer kept in host memory keeps its bytes across the restart.
 */
static void test_gpu_neighbour_fault_replays_innocents(void **state)
{
	struct env *e = *state;
	uint32_t gen = generation(e);
	gpux_ctx *other = test_connect(&e->d);
	gpux_module *om = load(other);
	gpux_queue *q;
	gpux_buf *in, *out[INNOCENTS], *acc, *b, *pat, *back;
	gpux_req *r[INNOCENTS], *incs[4], *bad;
	gpux_dbuf *kept;
	uint64_t n = 4096, cycles = 40ull * 1000 * 1000; /* about 20 ms */
	unsigned lost = 0;

	assert_int_equal(gpux_queue_open(other, 0, &q), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(other, n * 4, &in), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(other, n * 4, &acc), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(other, 4096, &pat), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(other, 4096, &back), GPUX_OK);
	test_fill_random(gpux_buf_data(in), n, &e->seed);
	memset(gpux_buf_data(acc), 0, n * 4);
	for (unsigned i = 0; i < 4096; i++)
		((uint8_t *)gpux_buf_data(pat))[i] = (uint8_t)(i * 13 + 1);
	assert_int_equal(gpux_dbuf_alloc_ex(other, 0, 4096, GPUX_DBUF_HOST, &kept, NULL), GPUX_OK);
	{
		gpux_req *w;

		assert_int_equal(gpux_dbuf_write(kept, 0, pat, 0, 4096, q, &w), GPUX_OK);
		assert_int_equal(gpux_wait(w, 30000), GPUX_OK);
		gpux_req_free(w);
	}
	for (unsigned i = 0; i < INNOCENTS; i++) {
		struct gpux_launch l = { .grid = { (uint32_t)(n / 256) },
					 .block = { 256 },
					 .queue = q };
		struct gpux_arg a[4];

		assert_int_equal(gpux_buf_alloc(other, n * 4, &out[i]), GPUX_OK);
		poison(gpux_buf_data(out[i]), n * 4);
		a[0] = GPUX_ARG_VALUE(n);
		a[1] = gpux_arg_in(in, 0, n * 4);
		a[2] = gpux_arg_out(out[i], 0, n * 4);
		a[3] = GPUX_ARG_VALUE(cycles);
		assert_int_equal(gpux_submit(om, "slow_add1", &l, a, 4, &r[i]), GPUX_OK);
		if (i % 4 == 3) {
			struct gpux_launch li = { .grid = { (uint32_t)(n / 256) },
						  .block = { 256 },
						  .queue = q };
			struct gpux_arg ai[] = { GPUX_ARG_VALUE(n), gpux_arg_inout(acc, 0, n * 4) };

			assert_int_equal(gpux_submit(om, "inc", &li, ai, 2, &incs[i / 4]), GPUX_OK);
		}
	}
	(void)usleep(50 * 1000);
	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	{
		struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
		struct gpux_arg arg = gpux_arg_inout(b, 0, 64);

		assert_int_equal(gpux_submit(e->m, "bad_address", &l, &arg, 1, &bad), GPUX_OK);
	}
	assert_int_equal(gpux_wait(bad, 30000), GPUX_E_KERNEL_FAULT);
	for (unsigned i = 0; i < INNOCENTS; i++) {
		gpux_status st = gpux_wait(r[i], 60000);

		if (st == GPUX_E_WORKER_LOST) {
			assert_non_null(strstr(gpux_req_message(r[i]), "copy its results back"));
			lost++;
		} else {
			const float *pi = gpux_buf_data(in), *po = gpux_buf_data(out[i]);

			assert_int_equal(st, GPUX_OK);
			for (uint64_t k = 0; k < n; k++)
				assert_float_equal(po[k], pi[k] + 1.0f, 0);
		}
		gpux_req_free(r[i]);
		gpux_buf_free(out[i]);
	}
	assert_true(lost <= 1);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(gpux_wait(incs[i], 60000), GPUX_OK);
		gpux_req_free(incs[i]);
	}
	for (uint64_t k = 0; k < n; k++)
		assert_float_equal(((float *)gpux_buf_data(acc))[k], 4.0f, 0);
	test_wait_generation(&e->d, 0, gen);
	{
		gpux_req *rd;

		assert_int_equal(gpux_dbuf_read(back, 0, kept, 0, 4096, NULL, &rd), GPUX_OK);
		assert_int_equal(gpux_wait(rd, 30000), GPUX_OK);
		gpux_req_free(rd);
		assert_memory_equal(gpux_buf_data(back), gpux_buf_data(pat), 4096);
	}
	gpux_req_free(bad);
	gpux_dbuf_free(kept);
	gpux_buf_free(b);
	gpux_buf_free(in);
	gpux_buf_free(acc);
	gpux_buf_free(pat);
	gpux_buf_free(back);
	gpux_queue_free(q);
	gpux_module_free(om);
	gpux_disconnect(other);
}

static uint64_t stat_of(struct env *e, size_t off)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	uint64_t v;

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	memcpy(&v, (const uint8_t *)&devs[0].stats + off, sizeof(v));
	return v;
}

/* A kernel past its deadline: gpuxd kills the worker, the client is told, it comes back. */
static void test_gpu_deadline(void **state)
{
	struct env *e = *state;
	uint32_t gen = generation(e);
	uint64_t cycles = 100ull * 1000 * 1000 * 1000;
	struct gpux_arg arg = GPUX_ARG_VALUE(cycles);
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .timeout_ms = 300 };
	gpux_req *r;

	assert_int_equal(gpux_submit(e->m, "spin", &l, &arg, 1, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, 30000), GPUX_E_TIMEOUT);
	gpux_req_free(r);
	test_wait_generation(&e->d, 0, gen);
	cycles = 1000;
	l.timeout_ms = 0;
	assert_int_equal(gpux_run(e->m, "spin", &l, &arg, 1), GPUX_OK);
}

/* CPU time (user and system, all threads) that process pid has used, in seconds. */
static double cpu_seconds(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long utime = 0, stime = 0;
	const char *fields;

	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fields = proc_stat_fields(path, buf, sizeof(buf));
	assert_non_null(fields);
	/* From the state (field 3) on: utime is field 14, stime 15. */
	assert_int_equal(sscanf(fields, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
				&utime, &stime),
			 2);
	return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/*
 * A kernel that runs for a second or more: its waiter naps between looks at its event instead
 * of spinning (a plain event's synchronize would spin for as long as the kernel runs), so the
 * worker uses a small part of a CPU meanwhile.
 */
static void test_gpu_long_kernel_leaves_the_cpu(void **state)
{
	struct env *e = *state;
	uint64_t cycles = 3ull * 1000 * 1000 * 1000; /* 1.5 s at 2 GHz */
	struct gpux_arg arg = GPUX_ARG_VALUE(cycles);
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint64_t naps = stat_of(e, offsetof(struct ipc_stats, blocking_waits));
	pid_t worker = test_worker_pid(&e->d, 0);
	double cpu = cpu_seconds(worker), wall = (double)mono_ns();

	assert_int_equal(gpux_run(e->m, "spin", &l, &arg, 1), GPUX_OK);
	wall = ((double)mono_ns() - wall) / 1e9;
	cpu = cpu_seconds(worker) - cpu;
	assert_true(wall >= 0.5);
	/* Spinning would cost the whole wall time; naps of up to 100 us, a few per cent. */
	if (cpu > wall / 4)
		fail_msg("the worker used %.2f s of CPU during a %.2f s kernel", cpu, wall);
	assert_true(stat_of(e, offsetof(struct ipc_stats, blocking_waits)) > naps);
}

/* The device's own time, with timing events, only when asked for. */
static void test_gpu_device_time_when_asked(void **state)
{
	struct env *e = *state;
	uint64_t cycles = 10ull * 1000 * 1000; /* a few ms at any clock */
	struct gpux_arg arg = GPUX_ARG_VALUE(cycles);
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	struct gpux_times t;
	gpux_req *r;

	for (int timed = 0; timed < 2; timed++) {
		l.flags = timed ? GPUX_LAUNCH_TIMED : 0;
		assert_int_equal(gpux_submit(e->m, "spin", &l, &arg, 1, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, 30000), GPUX_OK);
		assert_int_equal(gpux_req_times(r, &t), GPUX_OK);
		if (timed) {
			assert_true(t.device_ns >= 1000000ull && t.device_ns <= 1000000000ull);
			assert_true(t.device_ns <= t.run_ns);
		} else {
			assert_int_equal(t.device_ns, 0);
		}
		gpux_req_free(r);
	}
}

/* A new gpuxd on the same cache directory loads the cubin from disk, without NVRTC. */
static void test_gpu_module_from_disk_after_restart(void **state)
{
	struct env *e = *state;

	gpux_module_free(e->m);
	gpux_disconnect(e->ctx);
	test_daemon_stop(&e->d);
	start(e);
	e->ctx = test_connect(&e->d);
	e->m = load(e->ctx);
	assert_int_equal(stat_of(e, offsetof(struct ipc_stats, module_disk_hits)), 1);
	assert_int_equal(stat_of(e, offsetof(struct ipc_stats, module_compiles)), 0);
}

static void test_gpu_32_forked_children(void **state)
{
	struct env *e = *state;
	const uint64_t n = 1 << 18;
	gpux_buf *x, *y, *out;
	pid_t pids[32];

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, 32 * n * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, &e->seed);
	test_fill_random(gpux_buf_data(y), n, &e->seed);
	poison(gpux_buf_data(out), 32 * n * 4);
	for (unsigned k = 0; k < 32; k++) {
		pids[k] = fork();
		assert_true(pids[k] >= 0);
		if (pids[k] == 0) {
			float a = (float)k + 0.5f;
			struct gpux_arg args[] = {
				GPUX_ARG_VALUE(n),
				GPUX_ARG_VALUE(a),
				gpux_arg_in(x, 0, n * 4),
				gpux_arg_in(y, 0, n * 4),
				gpux_arg_out(out, k * n * 4, n * 4),
			};
			struct gpux_launch l = { .grid = { (uint32_t)(n / 256) },
						 .block = { 256 } };
			_exit(gpux_run(e->m, "saxpy", &l, args, 5) == GPUX_OK ? 0 : 1);
		}
	}
	for (unsigned k = 0; k < 32; k++)
		assert_child_ok(pids[k]);
	for (unsigned k = 0; k < 32; k++)
		for (uint64_t i = 0; i < n; i++) {
			float want = ((float)k + 0.5f) * ((float *)gpux_buf_data(x))[i] +
				     ((float *)gpux_buf_data(y))[i];
			assert_float_equal(((float *)gpux_buf_data(out))[k * n + i], want, 1e-5);
		}
	gpux_buf_free(out);
	gpux_buf_free(y);
	gpux_buf_free(x);
}

static void test_gpu_cached_input_hits(void **state)
{
	struct env *e = *state;
	const uint64_t n = 64ull << 20;
	gpux_buf *in, *out;
	uint64_t hits0 = stat_of(e, offsetof(struct ipc_stats, cache_hits));

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &in), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(in), n, &e->seed);
	assert_int_equal(gpux_buf_freeze(in), GPUX_OK);
	for (int round = 0; round < 3; round++) {
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_cached(in, 0, n * 4),
					   gpux_arg_out(out, 0, n * 4) };
		struct gpux_launch l = { .grid = { 4096 }, .block = { 256 } };
		const float *pi = gpux_buf_data(in), *po = gpux_buf_data(out);

		poison(gpux_buf_data(out), n * 4);
		assert_int_equal(gpux_run(e->m, "scale2p1", &l, args, 3), GPUX_OK);
		for (uint64_t i = 0; i < n; i += 4093)
			assert_float_equal(po[i], pi[i] * 2.0f + 1.0f, 0);
		assert_float_equal(po[n - 1], pi[n - 1] * 2.0f + 1.0f, 0);
	}
	assert_int_equal(stat_of(e, offsetof(struct ipc_stats, cache_hits)) - hits0, 2);
	gpux_buf_free(out);
	gpux_buf_free(in);
}

/*
 * Copies in that go by gpux's copy-in kernel (more than 4 KiB, at most 256 KiB in all, each
 * from a 16-byte aligned place), and some that do not, of every length: each byte arrives.
 * The kernel is compiled by the driver on a thread of the worker's (about 120 ms): requests go
 * by cuMemcpyHtoDAsync until it is there.
 */
static void test_gpu_copies_in_by_kernel(void **state)
{
	struct env *e = *state;
	static const struct {
		uint64_t n, off[3];
	} cases[] = {
		{ 4097, { 0, 16, 32 } }, { 5000, { 16, 4096, 48 } },
		{ 16387, { 0, 0, 0 } },  { 65536, { 4096, 16, 8192 } },
		{ 65541, { 4, 0, 0 } },  { 87381, { 0, 16, 160 } },
		{ 87382, { 0, 0, 0 } },  { 1365, { 0, 16, 32 } },
		{ 100000, { 1, 2, 3 } },
	};
	const uint64_t cap = 128 << 10;
	uint64_t before, want = 0, until = mono_ns() + 20 * 1000000000ull;
	gpux_buf *in[3], *out;

	for (int k = 0; k < 3; k++)
		assert_int_equal(gpux_buf_alloc(e->ctx, cap, &in[k]), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, cap, &out), GPUX_OK);
	/* Until the kernel is there (64 KiB in: one range). */
	before = stat_of(e, offsetof(struct ipc_stats, copyin_requests));
	while (stat_of(e, offsetof(struct ipc_stats, copyin_requests)) == before) {
		const uint64_t n = 16384;
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(in[0], 0, n * 4),
					   gpux_arg_out(out, 0, n * 4) };
		struct gpux_launch l = { .grid = { (uint32_t)(n / 256) }, .block = { 256 } };
		const float *pi = gpux_buf_data(in[0]), *po = gpux_buf_data(out);

		test_fill_random(gpux_buf_data(in[0]), n, &e->seed);
		assert_int_equal(gpux_run(e->m, "add1", &l, args, 3), GPUX_OK);
		for (uint64_t i = 0; i < n; i++)
			assert_float_equal(po[i], pi[i] + 1.0f, 0);
		assert_true(mono_ns() < until);
	}
	before = stat_of(e, offsetof(struct ipc_stats, copyin_requests));
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint64_t n = cases[c].n;
		const uint64_t *off = cases[c].off;
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(in[0], off[0], n),
					   gpux_arg_in(in[1], off[1], n),
					   gpux_arg_in(in[2], off[2], n), gpux_arg_out(out, 0, n) };
		struct gpux_launch l = { .grid = { (uint32_t)((n + 255) / 256) },
					 .block = { 256 } };
		const uint8_t *a = (const uint8_t *)gpux_buf_data(in[0]) + off[0];
		const uint8_t *b = (const uint8_t *)gpux_buf_data(in[1]) + off[1];
		const uint8_t *cc = (const uint8_t *)gpux_buf_data(in[2]) + off[2];
		const uint8_t *po = gpux_buf_data(out);

		for (int k = 0; k < 3; k++)
			test_fill_random(gpux_buf_data(in[k]), cap / 4, &e->seed);
		poison(gpux_buf_data(out), cap);
		assert_int_equal(gpux_run(e->m, "xor3", &l, args, 5), GPUX_OK);
		for (uint64_t i = 0; i < n; i++)
			if (po[i] != (uint8_t)(a[i] ^ b[i] ^ cc[i]))
				fail_msg("case %zu (%llu bytes): byte %llu", c,
					 (unsigned long long)n, (unsigned long long)i);
		want += 3 * n > 4096 && 3 * n <= (256u << 10) &&
			(off[0] | off[1] | off[2]) % 16 == 0;
	}
	assert_int_equal(stat_of(e, offsetof(struct ipc_stats, copyin_requests)) - before, want);
	for (int k = 0; k < 3; k++)
		gpux_buf_free(in[k]);
	gpux_buf_free(out);
}

/* x -> device buffer -> add1 -> square -> saxpy, never through the host, against the CPU. */
static void test_gpu_dbuf_chain(void **state)
{
	struct env *e = *state;
	const uint64_t n = 1 << 22;
	gpux_buf *x, *y;
	gpux_dbuf *a, *b, *c;
	gpux_req *r;
	float alpha = 0.5f;
	struct gpux_launch l = { .grid = { (uint32_t)(n / 256) },
				 .block = { 256 },
				 .device = GPUX_ANY };

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &y), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, &e->seed);
	poison(gpux_buf_data(y), n * 4);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, n * 4, &a), GPUX_OK);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, n * 4, &b), GPUX_OK);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, n * 4, &c), GPUX_OK);
	assert_int_equal(gpux_dbuf_write(a, 0, x, 0, n * 4, NULL, &r), GPUX_OK);
	gpux_req_free(r);
	{
		struct gpux_arg k1[] = { GPUX_ARG_VALUE(n), gpux_arg_dbuf(a, 0, n * 4),
					 gpux_arg_dbuf(b, 0, n * 4) };
		struct gpux_arg k2[] = { GPUX_ARG_VALUE(n), gpux_arg_dbuf(b, 0, n * 4),
					 gpux_arg_dbuf(c, 0, n * 4) };
		struct gpux_arg k3[] = { GPUX_ARG_VALUE(n), GPUX_ARG_VALUE(alpha),
					 gpux_arg_dbuf(c, 0, n * 4), gpux_arg_dbuf(a, 0, n * 4),
					 gpux_arg_dbuf(b, 0, n * 4) };
		gpux_req *q[3];

		/* In order on the default queue; only the last is waited for. */
		assert_int_equal(gpux_submit(e->m, "add1", &l, k1, 3, &q[0]), GPUX_OK);
		assert_int_equal(gpux_submit(e->m, "square", &l, k2, 3, &q[1]), GPUX_OK);
		assert_int_equal(gpux_submit(e->m, "saxpy", &l, k3, 5, &q[2]), GPUX_OK);
		assert_int_equal(gpux_wait(q[2], 30000), GPUX_OK);
		for (int i = 0; i < 3; i++) {
			assert_int_equal(gpux_wait(q[i], 0), GPUX_OK);
			gpux_req_free(q[i]);
		}
	}
	assert_int_equal(gpux_dbuf_read(y, 0, b, 0, n * 4, NULL, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, 30000), GPUX_OK);
	gpux_req_free(r);
	for (uint64_t i = 0; i < n; i++) {
		float xi = ((float *)gpux_buf_data(x))[i], t = xi + 1.0f;
		assert_float_equal(((float *)gpux_buf_data(y))[i], alpha * (t * t) + xi,
				   1e-5 * (1 + fabsf(alpha * t * t + xi)));
	}
	gpux_dbuf_free(c);
	gpux_dbuf_free(b);
	gpux_dbuf_free(a);
	gpux_buf_free(y);
	gpux_buf_free(x);
}

/* Two queues run at once: a kernel waits for a flag in mapped memory that only the other
 * queue's kernel sets (it gives up after some seconds of clock cycles). */
static void test_gpu_queues_overlap(void **state)
{
	struct env *e = *state;
	gpux_queue *q1, *q2;
	gpux_buf *flag;
	gpux_req *w, *s;
	uint64_t cycles = 20ull * 1000 * 1000 * 1000;
	int *f;

	assert_int_equal(gpux_queue_open(e->ctx, 0, &q1), GPUX_OK);
	assert_int_equal(gpux_queue_open(e->ctx, 0, &q2), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, 8, &flag), GPUX_OK);
	f = gpux_buf_data(flag);
	f[0] = 0;
	f[1] = -1;
	{
		struct gpux_launch l1 = { .grid = { 1 }, .block = { 1 }, .queue = q1 };
		struct gpux_launch l2 = { .grid = { 1 }, .block = { 1 }, .queue = q2 };
		struct gpux_arg wa[] = { gpux_arg_mapped(flag, 0, 4), gpux_arg_mapped(flag, 4, 4),
					 GPUX_ARG_VALUE(cycles) };
		struct gpux_arg sa[] = { gpux_arg_mapped(flag, 0, 4) };

		assert_int_equal(gpux_submit(e->m, "wait_flag", &l1, wa, 3, &w), GPUX_OK);
		assert_int_equal(gpux_submit(e->m, "set_flag", &l2, sa, 1, &s), GPUX_OK);
	}
	assert_int_equal(gpux_wait(w, 60000), GPUX_OK);
	assert_int_equal(gpux_wait(s, 60000), GPUX_OK);
	assert_int_equal(f[1], 1);
	gpux_req_free(w);
	gpux_req_free(s);
	gpux_buf_free(flag);
	gpux_queue_free(q2);
	gpux_queue_free(q1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_saxpy),
		cmocka_unit_test(test_gpu_reduction),
		cmocka_unit_test(test_gpu_tiled_matmul),
		cmocka_unit_test(test_gpu_256mib_in_out),
		cmocka_unit_test(test_gpu_mapped_and_big_shared),
		cmocka_unit_test(test_gpu_wrong_arguments_refused),
		cmocka_unit_test(test_gpu_compile_errors),
		cmocka_unit_test(test_gpu_illegal_address_restarts_worker),
		cmocka_unit_test(test_gpu_neighbour_fault_replays_innocents),
		cmocka_unit_test(test_gpu_deadline),
		cmocka_unit_test(test_gpu_long_kernel_leaves_the_cpu),
		cmocka_unit_test(test_gpu_device_time_when_asked),
		cmocka_unit_test(test_gpu_module_from_disk_after_restart),
		cmocka_unit_test(test_gpu_32_forked_children),
		cmocka_unit_test(test_gpu_cached_input_hits),
		cmocka_unit_test(test_gpu_copies_in_by_kernel),
		cmocka_unit_test(test_gpu_dbuf_chain),
		cmocka_unit_test(test_gpu_queues_overlap),
	};

	test_gpu_require(1);
	return cmocka_run_group_tests(tests, setup, teardown);
}
