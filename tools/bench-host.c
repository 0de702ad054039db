/* SPDX-License-Identifier: MIT */
/* tools/bench-host.c: gpux bench's host scenario: CUDA C++ on the CPU against plain C loops. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "macro.h"

/*
 * What the host back end's fallback costs: the same CUDA C++ a GPU runs (one thread an
 * element; tiles of 32x32 in shared memory with barriers), against the same work written as
 * a plain C loop, compiled as this program is (-O2), split over as many threads as the
 * worker runs a launch's blocks on ($GPUX_HOST_THREADS, else the CPUs this process may run
 * on). The targets are DESIGN's: 0.5x for vectorAdd, 0.25x for matrixMul. The loop on one
 * thread, and the matrix product in i-k-j order (vectorizable), are shown beside them.
 */

static const char host_kernels[] =
	"__global__ void vector_add(const float *a, const float *b, float *c, int n)\n"
	"{\n"
	"	int i = blockDim.x * blockIdx.x + threadIdx.x;\n"
	"	if (i < n)\n"
	"		c[i] = a[i] + b[i];\n"
	"}\n"
	"__global__ void matmul(float *c, const float *a, const float *b, int n)\n"
	"{\n"
	"	__shared__ float ta[32][32];\n"
	"	__shared__ float tb[32][32];\n"
	"	int tx = threadIdx.x, ty = threadIdx.y;\n"
	"	int row = blockIdx.y * 32 + ty, col = blockIdx.x * 32 + tx;\n"
	"	float acc = 0.0f;\n"
	"	for (int t = 0; t < n; t += 32) {\n"
	"		ta[ty][tx] = a[row * n + t + tx];\n"
	"		tb[ty][tx] = b[(t + ty) * n + col];\n"
	"		__syncthreads();\n"
	"		for (int i = 0; i < 32; i++)\n"
	"			acc += ta[ty][i] * tb[i][tx];\n"
	"		__syncthreads();\n"
	"	}\n"
	"	c[row * n + col] = acc;\n"
	"}\n";

#define VEC_N (16u << 20)
#define MAT_N 1024u

struct part {
	pthread_t thread;
	const float *a, *b;
	float *c;
	uint32_t from, to, n; /* elements (vector) or rows (matrix) */
	bool ikj;
};

static void *vec_part(void *arg)
{
	struct part *p = arg;

	for (uint32_t i = p->from; i < p->to; i++)
		p->c[i] = p->a[i] + p->b[i];
	return NULL;
}

static void *mat_part(void *arg)
{
	struct part *p = arg;
	const uint32_t n = p->n;

	for (uint32_t i = p->from; i < p->to; i++) {
		if (p->ikj) {
			memset(p->c + (size_t)i * n, 0, n * sizeof(float));
			for (uint32_t k = 0; k < n; k++) {
				float aik = p->a[(size_t)i * n + k];

				for (uint32_t j = 0; j < n; j++)
					p->c[(size_t)i * n + j] += aik * p->b[(size_t)k * n + j];
			}
			continue;
		}
		for (uint32_t j = 0; j < n; j++) {
			float acc = 0.0f;

			for (uint32_t k = 0; k < n; k++)
				acc += p->a[(size_t)i * n + k] * p->b[(size_t)k * n + j];
			p->c[(size_t)i * n + j] = acc;
		}
	}
	return NULL;
}

/* The plain loop over `total` items on `threads` threads: its time (ns), or 0. */
static uint64_t loop_ns(void *(*fn)(void *), unsigned threads, uint32_t total, const float *a,
			const float *b, float *c, uint32_t n, bool ikj)
{
	struct part parts[256];
	uint64_t t0 = tool_now();
	unsigned started = 0;

	for (unsigned t = 0; t < threads; t++) {
		parts[t] = (struct part){ .a = a,
					  .b = b,
					  .c = c,
					  .n = n,
					  .ikj = ikj,
					  .from = (uint32_t)((uint64_t)total * t / threads),
					  .to = (uint32_t)((uint64_t)total * (t + 1) / threads) };
		if (t + 1 == threads)
			(void)fn(&parts[t]);
		else if (pthread_create(&parts[t].thread, NULL, fn, &parts[t]) == 0)
			started++;
		else
			break;
	}
	for (unsigned t = 0; t < started; t++)
		(void)pthread_join(parts[t].thread, NULL);
	return started + 1 == threads ? tool_now() - t0 : 0;
}

/* As the worker counts them (worker/host-exec.c). */
static unsigned host_threads(void)
{
	const char *e = getenv("GPUX_HOST_THREADS");
	cpu_set_t set;

	if (e && *e)
		return (unsigned)MAX(1ul, MIN(strtoul(e, NULL, 10), 256ul));
	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 1;
	return (unsigned)MAX(1, MIN(CPU_COUNT(&set), 256));
}

/* The median of reps runs of a launch (ns), or 0. */
static uint64_t gpux_ns(gpux_module *m, const char *k, const struct gpux_launch *l,
			const struct gpux_arg *args, uint32_t nargs, unsigned reps)
{
	uint64_t t[16];

	for (unsigned i = 0; i < reps; i++) {
		uint64_t t0 = tool_now();

		if (gpux_run(m, k, l, args, nargs) != GPUX_OK)
			return 0;
		t[i] = tool_now() - t0;
	}
	return (uint64_t)bench_median(t, reps);
}

static uint64_t median_of(uint64_t (*one)(void *), void *arg, unsigned reps)
{
	uint64_t t[16];

	for (unsigned i = 0; i < reps; i++)
		if (!(t[i] = one(arg)))
			return 0;
	return (uint64_t)bench_median(t, reps);
}

struct loop_args {
	void *(*fn)(void *);
	unsigned threads;
	uint32_t total, n;
	const float *a, *b;
	float *c;
	bool ikj;
};

static uint64_t loop_once(void *arg)
{
	struct loop_args *x = arg;

	return loop_ns(x->fn, x->threads, x->total, x->a, x->b, x->c, x->n, x->ikj);
}

/* Whether got matches want to a relative tolerance. */
static bool same(const float *got, const float *want, size_t n, float tol)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabsf(got[i] - want[i]) <= tol * (fabsf(want[i]) + 1.0f)))
			return false;
	return true;
}

int bench_host(struct bench *b)
{
	const unsigned threads = host_threads(), reps = b->quick ? 3 : 9, mreps = b->quick ? 1 : 3;
	const int vn = (int)VEC_N, mn = (int)MAT_N;
	const size_t vbytes = (size_t)VEC_N * 4, mbytes = (size_t)MAT_N * MAT_N * 4;
	gpux_buf *a = NULL, *bb = NULL, *c = NULL, *ref = NULL;
	gpux_module *m = NULL;
	char *log = NULL, name[64];
	uint64_t g, l1, lt, lk;
	float *pa, *pb, *pc, *pr;
	int rc = -1;

	if (b->cuda) {
		bench_add(b, "CUDA C++ on the host: the device is a GPU", NAN, NAN, "", "", NAN,
			  true);
		return 0;
	}
	if (gpux_module_load(b->ctx, GPUX_LANG_CUDA, host_kernels, sizeof(host_kernels) - 1, NULL,
			     &m, &log) != GPUX_OK) {
		(void)fprintf(stderr, "%s", log ? log : "");
		goto out;
	}
	if (gpux_buf_alloc(b->ctx, vbytes, &a) < 0 || gpux_buf_alloc(b->ctx, vbytes, &bb) < 0 ||
	    gpux_buf_alloc(b->ctx, vbytes, &c) < 0 || gpux_buf_alloc(b->ctx, vbytes, &ref) < 0)
		goto out;
	pa = gpux_buf_data(a);
	pb = gpux_buf_data(bb);
	pc = gpux_buf_data(c);
	pr = gpux_buf_data(ref);
	for (uint32_t i = 0; i < VEC_N; i++) {
		pa[i] = (float)(i % 1000) * 0.5f;
		pb[i] = (float)(i % 777) * 0.25f;
	}
	memset(pc, 0, vbytes);
	memset(pr, 0, vbytes);

	/* vectorAdd: one thread an element, 256 a block. */
	{
		struct gpux_arg args[] = { gpux_arg_in(a, 0, vbytes), gpux_arg_in(bb, 0, vbytes),
					   gpux_arg_out(c, 0, vbytes), GPUX_ARG_VALUE(vn) };
		struct gpux_launch l = { .grid = { VEC_N / 256 }, .block = { 256 } };
		struct loop_args x = { vec_part, threads, VEC_N, 0, pa, pb, pr, false };

		(void)gpux_ns(m, "vector_add", &l, args, 4, 1);
		g = gpux_ns(m, "vector_add", &l, args, 4, reps);
		lt = median_of(loop_once, &x, reps);
		x.threads = 1;
		l1 = median_of(loop_once, &x, reps);
		if (!g || !lt || !l1 || !same(pc, pr, VEC_N, 0))
			goto out;
		(void)snprintf(name, sizeof(name), "vectorAdd 16M floats, CUDA vs C, %u threads",
			       threads);
		bench_add(b, name, (double)g / 1e6, (double)lt / 1e6, "ms", ">= 0.5x",
			  (double)lt / (double)g, (double)lt / (double)g >= 0.5);
		bench_add(b, "  (the C loop on one thread)", NAN, (double)l1 / 1e6, "ms", "",
			  (double)l1 / (double)g, true);
	}

	/* matrixMul: tiles of 32x32, 1024 threads a block. */
	for (uint32_t i = 0; i < MAT_N * MAT_N; i++) {
		pa[i] = (float)((i * 7) % 13) * 0.125f - 0.75f;
		pb[i] = (float)((i * 5) % 11) * 0.25f - 1.25f;
	}
	{
		struct gpux_arg args[] = { gpux_arg_out(c, 0, mbytes), gpux_arg_in(a, 0, mbytes),
					   gpux_arg_in(bb, 0, mbytes), GPUX_ARG_VALUE(mn) };
		struct gpux_launch l = { .grid = { MAT_N / 32, MAT_N / 32 }, .block = { 32, 32 } };
		struct loop_args x = { mat_part, threads, MAT_N, MAT_N, pa, pb, pr, false };

		(void)gpux_ns(m, "matmul", &l, args, 4, 1);
		g = gpux_ns(m, "matmul", &l, args, 4, mreps);
		lt = median_of(loop_once, &x, mreps);
		if (!g || !lt || !same(pc, pr, (size_t)MAT_N * MAT_N, 1e-4f))
			goto out;
		x.ikj = true;
		lk = median_of(loop_once, &x, mreps);
		if (!lk)
			goto out;
		(void)snprintf(name, sizeof(name), "matrixMul 1024x1024, CUDA vs C, %u threads",
			       threads);
		bench_add(b, name, (double)g / 1e6, (double)lt / 1e6, "ms", ">= 0.25x",
			  (double)lt / (double)g, (double)lt / (double)g >= 0.25);
		bench_add(b, "  (the C loop in i-k-j order)", NAN, (double)lk / 1e6, "ms", "",
			  (double)lk / (double)g, true);
	}
	rc = 0;
out:
	if (rc < 0)
		(void)fprintf(stderr, "gpux: bench: host: %s\n",
			      m ? "a launch failed, or its result is wrong"
				: "the kernels do not build");
	free(log);
	gpux_buf_free(ref);
	gpux_buf_free(c);
	gpux_buf_free(bb);
	gpux_buf_free(a);
	gpux_module_free(m);
	return rc;
}
