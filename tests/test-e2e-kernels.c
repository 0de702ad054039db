/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-kernels.c: gpux's own CUDA kernels (tests/kernels), on the host or a GPU. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"
#include "helpers.h"

#include "kernel-atomics.h"
#include "kernel-block_shared.h"
#include "kernel-half_math.h"
#include "kernel-matmul.h"
#include "kernel-misc.h"
#include "kernel-reduce.h"
#include "kernel-scale_shared.h"
#include "kernel-vector_add.h"
#include "kernel-warp.h"

/*
 * The kernels of tests/kernels (README.md there says what each covers), compiled from their
 * source as a client gives it, run, and every result checked against the same work done
 * here. TEST_BACKEND says where, as this file is built: "host" (test-e2e-kernels, suite
 * e2e) or "cuda" (test-gpu-kernels, suite gpu; exits 77 without a GPU). What only the host
 * back end does (refusing what it does not have, a deadlock or an assertion failing the
 * request only) is skipped on a GPU.
 */

struct env {
	struct test_daemon d;
	gpux_ctx *ctx;
	bool host;
	uint64_t seed;
};

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	const char *args[] = { "--backend", TEST_BACKEND, NULL };

	assert_non_null(e);
	e->host = strcmp(TEST_BACKEND, "host") == 0;
	test_daemon_start(&e->d, args);
	e->ctx = test_connect(&e->d);
	e->seed = (uint64_t)mono_ns();
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;

	gpux_disconnect(e->ctx);
	test_daemon_stop(&e->d);
	free(e);
	return 0;
}

/* ---- helpers ---- */

static const struct gpux_header block_shared_h = { "block_shared.cuh", kernel_block_shared };

static gpux_module *load(struct env *e, const char *src, const char *const *names, uint32_t nn)
{
	struct gpux_module_opts o = {
		.size = sizeof(o),
		.nheaders = 1,
		.headers = &block_shared_h,
		.names = names,
		.nnames = nn,
	};
	gpux_module *m = NULL;
	char *log = NULL;
	gpux_status st =
		gpux_module_load_ex(e->ctx, GPUX_LANG_CUDA, src, strlen(src), &o, &m, &log);

	if (st != GPUX_OK)
		fail_msg("compile: %s\n%s", gpux_strerror(st), log ? log : "");
	free(log);
	return m;
}

static gpux_buf *buf(struct env *e, size_t bytes)
{
	gpux_buf *b;

	assert_int_equal(gpux_buf_alloc(e->ctx, bytes, &b), GPUX_OK);
	memset(gpux_buf_data(b), 0xff, bytes);
	return b;
}

/* Run a launch; its status, and the request's message in msg (cut) when msg is not NULL. */
static gpux_status run(gpux_module *m, const char *kernel, const struct gpux_launch *l,
		       const struct gpux_arg *args, uint32_t nargs, char *msg, size_t cap)
{
	gpux_req *r;
	gpux_status st = gpux_submit(m, kernel, l, args, nargs, &r);

	if (st != GPUX_OK)
		return st;
	st = gpux_wait(r, -1);
	if (msg)
		(void)snprintf(msg, cap, "%s", gpux_req_message(r) ? gpux_req_message(r) : "");
	gpux_req_free(r);
	return st;
}

static void run_ok(gpux_module *m, const char *kernel, const struct gpux_launch *l,
		   const struct gpux_arg *args, uint32_t nargs)
{
	char msg[1024];

	if (run(m, kernel, l, args, nargs, msg, sizeof(msg)) != GPUX_OK)
		fail_msg("%s: %s", kernel, msg);
}

static uint32_t rnd(struct env *e)
{
	e->seed = e->seed * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(e->seed >> 33);
}

static void close_enough(double got, double want, double rel, const char *what, unsigned i)
{
	if (!(fabs(got - want) <= rel * fabs(want) + rel * 0.1))
		fail_msg("%s [%u]: %.17g, wanted %.17g", what, i, got, want);
}

/* ---- vector_add.cu ---- */

/* 50000 elements, 256 threads a block: the last block runs past the end. */
static void test_kernels_vector_add(void **state)
{
	struct env *e = *state;
	const int n = 50000;
	gpux_module *m = load(e, kernel_vector_add, NULL, 0);
	gpux_buf *a = buf(e, n * 4), *b = buf(e, n * 4), *c = buf(e, n * 4);
	struct gpux_arg args[] = { gpux_arg_in(a, 0, n * 4), gpux_arg_in(b, 0, n * 4),
				   gpux_arg_out(c, 0, n * 4), GPUX_ARG_VALUE(n) };
	struct gpux_launch l = { .grid = { (n + 255) / 256 }, .block = { 256 } };
	const float *pa = gpux_buf_data(a), *pb = gpux_buf_data(b), *pc = gpux_buf_data(c);

	test_fill_random(gpux_buf_data(a), n, &e->seed);
	test_fill_random(gpux_buf_data(b), n, &e->seed);
	run_ok(m, "vector_add", &l, args, 4);
	for (int i = 0; i < n; i++)
		assert_float_equal(pc[i], pa[i] + pb[i], 0);
	gpux_buf_free(c);
	gpux_buf_free(b);
	gpux_buf_free(a);
	gpux_module_free(m);
}

/* ---- matmul.cu ---- */

/* 320x320 times 320x640, in tiles of 16 and of 32 (1024 threads a block). */
static void test_kernels_matmul(void **state)
{
	struct env *e = *state;
	const int h = 320, k = 320, w = 640;
	gpux_module *m = load(e, kernel_matmul, NULL, 0);
	gpux_buf *a = buf(e, (size_t)h * k * 4), *b = buf(e, (size_t)k * w * 4);
	gpux_buf *c = buf(e, (size_t)h * w * 4);
	const float *pa = gpux_buf_data(a), *pb = gpux_buf_data(b), *pc = gpux_buf_data(c);

	test_fill_random(gpux_buf_data(a), (size_t)h * k, &e->seed);
	test_fill_random(gpux_buf_data(b), (size_t)k * w, &e->seed);
	for (unsigned tile = 16; tile <= 32; tile *= 2) {
		struct gpux_arg args[] = { gpux_arg_out(c, 0, (uint64_t)h * w * 4),
					   gpux_arg_in(a, 0, (uint64_t)h * k * 4),
					   gpux_arg_in(b, 0, (uint64_t)k * w * 4),
					   GPUX_ARG_VALUE(k), GPUX_ARG_VALUE(w) };
		struct gpux_launch l = { .grid = { w / tile, h / tile }, .block = { tile, tile } };

		memset(gpux_buf_data(c), 0xff, (size_t)h * w * 4);
		run_ok(m, tile == 16 ? "matmul_tile16" : "matmul_tile32", &l, args, 5);
		for (int i = 0; i < h; i++)
			for (int j = 0; j < w; j++) {
				double want = 0, mag = 0;

				for (int t = 0; t < k; t++) {
					double p = (double)pa[i * k + t] * pb[t * w + j];

					want += p;
					mag += fabs(p);
				}
				/* A float sum of k products is off by at most k units of
				 * rounding of the sum of their sizes, in any order: a bound
				 * relative to the result itself fails where terms cancel. */
				if (!(fabs(pc[i * w + j] - want) <= k * (FLT_EPSILON / 2) * mag))
					fail_msg("matmul [%d]: %.9g, wanted %.9g (sizes %.9g)",
						 i * w + j, pc[i * w + j], want, mag);
			}
	}
	gpux_buf_free(c);
	gpux_buf_free(b);
	gpux_buf_free(a);
	gpux_module_free(m);
}

/* ---- reduce.cu ---- */

enum elem { F32, I32, F64 };

struct reduction {
	const char *name;
	enum elem type;
	uint32_t n, grid,
		per_block; /* per_block: elements a block starts from (grid-striding: 0) */
	uint32_t shared;   /* elements of dynamic shared memory */
};

static void reduce_one(struct env *e, gpux_module *m, const struct reduction *c)
{
	size_t size = c->type == F64 ? 8 : 4;
	gpux_buf *in = buf(e, c->n * size), *out = buf(e, c->grid * size);
	struct gpux_arg args[] = { gpux_arg_in(in, 0, c->n * size),
				   gpux_arg_out(out, 0, c->grid * size), GPUX_ARG_VALUE(c->n) };
	struct gpux_launch l = { .grid = { c->grid },
				 .block = { 256 },
				 .shared_bytes = (uint32_t)(c->shared * size) };
	double want = 0, got = 0;

	for (uint32_t i = 0; i < c->n; i++) {
		int32_t v = (int32_t)(rnd(e) % 201) - 100;

		if (c->type == I32)
			((int32_t *)gpux_buf_data(in))[i] = v;
		else if (c->type == F32)
			((float *)gpux_buf_data(in))[i] = (float)v / 64.0f;
		else
			((double *)gpux_buf_data(in))[i] = v / 1024.0;
		want += c->type == I32 ? v : c->type == F32 ? v / 64.0 : v / 1024.0;
	}
	run_ok(m, c->name, &l, args, 3);
	for (uint32_t b = 0; b < c->grid; b++)
		got += c->type == I32   ? ((int32_t *)gpux_buf_data(out))[b]
		       : c->type == F32 ? ((float *)gpux_buf_data(out))[b]
					: ((double *)gpux_buf_data(out))[b];
	/* Values of few bits: every sum is exact, in any order. */
	if (got != want)
		fail_msg("%s: %.6f, wanted %.6f", c->name, got, want);
	gpux_buf_free(out);
	gpux_buf_free(in);
}

/* Kernel templates by name expression, however spaced; one instantiated in the source. */
static void test_kernels_reduce(void **state)
{
	static const struct reduction cases[] = {
		{ "reduce_tree<float>", F32, 100003, (100003 + 255) / 256, 256, 256 },
		{ "reduce_tree<int>", I32, 1 << 16, 256, 256, 256 },
		{ "reduce_shfl<float, 256>", F32, 100003, (100003 + 511) / 512, 512, 256 },
		{ "reduce_shfl<int,256>", I32, 1 << 17, 256, 512, 256 },
		{ "reduce_stride<float, 256, true>", F32, 1 << 18, 64, 0, 256 },
		{ "reduce_stride<int, 256, false>", I32, 100003, 64, 0, 256 },
		{ "reduce_cg<float>", F32, 100003, 64, 0, 8 },
		{ "reduce_cg<double>", F64, 1 << 16, 32, 0, 8 },
		{ "reduce_tree<double>", F64, 1 << 15, 128, 256, 256 },
	};
	const char *names[ARRAY_SIZE(cases) - 1];
	struct env *e = *state;
	gpux_module *m;

	for (unsigned i = 0; i < ARRAY_SIZE(names); i++)
		names[i] = cases[i].name;
	m = load(e, kernel_reduce, names, ARRAY_SIZE(names));
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++)
		reduce_one(e, m, &cases[i]);
	gpux_module_free(m);
}

/* ---- scale_shared.cu ---- */

/* The client's header, a kernel template, dynamic shared memory as large as the block. */
static void test_kernels_templates(void **state)
{
	static const char *const names[] = { "reverse_scale<float>", "reverse_scale<int>" };
	struct env *e = *state;
	gpux_module *m = load(e, kernel_scale_shared, names, 2);

	for (unsigned k = 0; k < 2; k++) {
		const uint32_t n = k ? 64 : 32, blocks = 3;
		gpux_buf *in = buf(e, blocks * n * 4), *out = buf(e, blocks * n * 4);
		struct gpux_arg args[] = { gpux_arg_in(in, 0, blocks * n * 4),
					   gpux_arg_out(out, 0, blocks * n * 4) };
		struct gpux_launch l = { .grid = { blocks },
					 .block = { n },
					 .shared_bytes = n * 4 };

		for (uint32_t i = 0; i < blocks * n; i++) {
			if (k)
				((int32_t *)gpux_buf_data(in))[i] = (int32_t)i;
			else
				((float *)gpux_buf_data(in))[i] = (float)i;
		}
		run_ok(m, names[k], &l, args, 2);
		for (uint32_t i = 0; i < blocks * n; i++) {
			uint32_t src = i / n * n + (n - 1 - i % n);

			if (k)
				assert_int_equal(((int32_t *)gpux_buf_data(out))[i],
						 (int32_t)(n * src));
			else
				assert_float_equal(((float *)gpux_buf_data(out))[i],
						   (float)(n * src), 0);
		}
		gpux_buf_free(out);
		gpux_buf_free(in);
	}
	gpux_module_free(m);
}

/* ---- atomics.cu ---- */

/* As the kernel lays it out. */
struct atomic_results {
	int32_t isum, isub, imin, imax;
	uint32_t umin, umax, inc, dec;
	int32_t casmax, exch;
	float fsum, pad;
	double dsum;
	uint64_t usum;
};

static void test_kernels_atomics(void **state)
{
	struct env *e = *state;
	const uint32_t n = 100000, nbins = 17, grid = 37;
	gpux_module *m = load(e, kernel_atomics, NULL, 0);
	gpux_buf *v = buf(e, n * 4), *bins = buf(e, nbins * 4);
	gpux_buf *res = buf(e, sizeof(struct atomic_results));
	gpux_buf *partial = buf(e, grid * 4), *done = buf(e, 4), *total = buf(e, 4);
	int32_t *pv = gpux_buf_data(v);
	struct atomic_results *r = gpux_buf_data(res), want = {
		.imin = INT32_MAX,
		.imax = INT32_MIN,
		.umin = UINT32_MAX,
		.casmax = INT32_MIN,
	};
	uint32_t hist[17] = { 0 };
	struct gpux_launch l = { .grid = { grid }, .block = { 128 } };
	bool seen = false;

	for (uint32_t i = 0; i < n; i++) {
		pv[i] = (int32_t)(rnd(e) % 201) - 100;
		hist[(uint32_t)pv[i] % nbins]++;
		want.isum += pv[i];
		want.imin = MIN(want.imin, pv[i]);
		want.imax = MAX(want.imax, pv[i]);
		want.umin = MIN(want.umin, (uint32_t)(pv[i] + 1000));
		want.umax = MAX(want.umax, (uint32_t)(pv[i] + 1000));
		want.inc = want.inc >= 9 ? 0 : want.inc + 1;
		want.dec = want.dec == 0 || want.dec > 6 ? 6 : want.dec - 1;
		want.dsum += pv[i] * 0.5;
		want.usum += (uint64_t)(pv[i] + 1000) << 20;
	}
	memset(gpux_buf_data(bins), 0, nbins * 4);
	{
		struct gpux_arg args[] = { gpux_arg_in(v, 0, n * 4), GPUX_ARG_VALUE(n),
					   gpux_arg_inout(bins, 0, nbins * 4),
					   GPUX_ARG_VALUE(nbins) };

		run_ok(m, "histogram", &l, args, 4);
		assert_memory_equal(gpux_buf_data(bins), hist, sizeof(hist));
	}
	*r = (struct atomic_results){
		.imin = INT32_MAX, .imax = INT32_MIN, .umin = UINT32_MAX, .casmax = INT32_MIN
	};
	{
		struct gpux_arg args[] = { gpux_arg_in(v, 0, n * 4), GPUX_ARG_VALUE(n),
					   gpux_arg_inout(res, 0, sizeof(*r)) };

		run_ok(m, "atomics", &l, args, 3);
	}
	assert_int_equal(r->isum, want.isum);
	assert_int_equal(r->isub, -want.isum);
	assert_int_equal(r->imin, want.imin);
	assert_int_equal(r->imax, want.imax);
	assert_int_equal(r->umin, want.umin);
	assert_int_equal(r->umax, want.umax);
	assert_int_equal(r->inc, want.inc);
	assert_int_equal(r->dec, want.dec);
	assert_int_equal(r->casmax, want.imax);
	assert_true(r->fsum == (float)want.isum); /* exact: every partial sum fits a float */
	assert_true(r->dsum == want.dsum);
	assert_true(r->usum == want.usum);
	for (uint32_t i = 0; i < n && !seen; i++)
		seen = pv[i] == r->exch;
	assert_true(seen);
	*(uint32_t *)gpux_buf_data(done) = 0;
	{
		struct gpux_arg args[] = { gpux_arg_in(v, 0, n * 4), GPUX_ARG_VALUE(n),
					   gpux_arg_out(partial, 0, grid * 4),
					   gpux_arg_inout(done, 0, 4), gpux_arg_out(total, 0, 4) };

		run_ok(m, "sum_last_block", &l, args, 5);
	}
	assert_int_equal(*(int32_t *)gpux_buf_data(total), want.isum);
	assert_int_equal(*(uint32_t *)gpux_buf_data(done),
			 grid); /* atomicInc stopped at gridDim.x */
	gpux_buf_free(total);
	gpux_buf_free(done);
	gpux_buf_free(partial);
	gpux_buf_free(res);
	gpux_buf_free(bins);
	gpux_buf_free(v);
	gpux_module_free(m);
}

/* ---- warp.cu ---- */

static void test_kernels_warp(void **state)
{
	struct env *e = *state;
	const uint32_t n = 4 * 96; /* blocks of 3 warps */
	gpux_module *m = load(e, kernel_warp, NULL, 0);
	gpux_buf *in = buf(e, n * 4), *o1 = buf(e, n * 4 * 5), *o2 = buf(e, n * 4),
		 *o3 = buf(e, n * 4);
	gpux_buf *o4 = buf(e, n * 4), *din = buf(e, n * 8), *dout = buf(e, n * 8);
	struct gpux_launch l = { .grid = { n / 96 }, .block = { 96 } };
	int32_t *pin = gpux_buf_data(in), *p1 = gpux_buf_data(o1), *p2 = gpux_buf_data(o2);
	int32_t *p3 = gpux_buf_data(o3);
	uint32_t *u1 = gpux_buf_data(o1), *u4 = gpux_buf_data(o4);
	double *pd = gpux_buf_data(din), *qd = gpux_buf_data(dout);

	for (uint32_t i = 0; i < n; i++) {
		pin[i] = (int32_t)(rnd(e) % 110) - 10;
		pd[i] = i * 1.25 - 7;
	}
	{
		struct gpux_arg args[] = { gpux_arg_in(in, 0, n * 4), gpux_arg_out(o1, 0, n * 4),
					   gpux_arg_out(o2, 0, n * 4), gpux_arg_out(o3, 0, n * 4),
					   gpux_arg_out(o4, 0, n * 4) };

		run_ok(m, "votes", &l, args, 5);
	}
	for (uint32_t w = 0; w < n / 32; w++) {
		uint32_t ballot = 0;
		int any = 0, all = 1;

		for (uint32_t k = 0; k < 32; k++) {
			ballot |= (uint32_t)(pin[w * 32 + k] & 1) << k;
			any |= pin[w * 32 + k] > 90;
			all &= pin[w * 32 + k] >= 0;
		}
		for (uint32_t k = 0; k < 32; k++) {
			assert_int_equal(u1[w * 32 + k], ballot);
			assert_int_equal(p2[w * 32 + k] != 0, any);
			assert_int_equal(p3[w * 32 + k] != 0, all);
			assert_int_equal(u4[w * 32 + k], 0xffffffffu);
		}
	}
	{
		struct gpux_arg args[] = { gpux_arg_in(in, 0, n * 4), gpux_arg_out(o1, 0, n * 20),
					   GPUX_ARG_VALUE(n) };

		run_ok(m, "shuffles", &l, args, 3);
	}
	for (uint32_t w = 0; w < n / 32; w++) {
		const int32_t *v = pin + w * 32;
		int32_t r[32], scan = 0, max = INT32_MIN;

		for (uint32_t k = 0; k < 32; k++) {
			r[k] = v[k];
			max = MAX(max, v[k]);
		}
		/* As the lanes do it: all at once, a lane past the end taking its own value. */
		for (uint32_t d = 16; d > 0; d /= 2) {
			int32_t next[32];

			for (uint32_t k = 0; k < 32; k++)
				next[k] = r[k] + (k + d < 32 ? r[k + d] : r[k]);
			memcpy(r, next, sizeof(r));
		}
		for (uint32_t k = 0; k < 32; k++) {
			uint32_t i = w * 32 + k;

			scan += v[k];
			assert_int_equal(p1[i], v[7]);
			assert_int_equal(p1[n + i], scan);
			assert_int_equal(p1[2 * n + i], r[k]);
			assert_int_equal(p1[3 * n + i], max);
			assert_int_equal(p1[4 * n + i], k % 8 + 3 < 8 ? v[k + 3] : v[k]);
		}
	}
	{
		struct gpux_arg args[] = { gpux_arg_in(din, 0, n * 8),
					   gpux_arg_out(dout, 0, n * 8) };

		run_ok(m, "shuffle_double", &l, args, 2);
		for (uint32_t i = 0; i < n; i++)
			assert_true(qd[i] == pd[i ^ 1]);
	}
	{
		struct gpux_arg args[] = { gpux_arg_in(in, 0, n * 4), gpux_arg_out(o2, 0, n * 4),
					   gpux_arg_out(o4, 0, n * 4) };

		run_ok(m, "tiles16", &l, args, 3);
		for (uint32_t t = 0; t < n / 16; t++) {
			int32_t sum = 0;
			uint32_t ballot = 0;

			for (uint32_t k = 0; k < 16; k++) {
				sum += pin[t * 16 + k];
				ballot |= (uint32_t)(pin[t * 16 + k] & 1) << k;
			}
			for (uint32_t k = 0; k < 16; k++) {
				assert_int_equal(p2[t * 16 + k], sum);
				assert_int_equal(u4[t * 16 + k], ballot);
			}
		}
	}
	gpux_buf_free(dout);
	gpux_buf_free(din);
	gpux_buf_free(o4);
	gpux_buf_free(o3);
	gpux_buf_free(o2);
	gpux_buf_free(o1);
	gpux_buf_free(in);
	gpux_module_free(m);
}

/* ---- half_math.cu ---- */

/* A float's nearest binary16 (ties to even), as bits, and back: the reference for __half. */
static uint16_t to_half(double x)
{
	uint16_t sign = signbit(x) ? 0x8000 : 0;
	double a = fabs(x);
	int ex;

	if (a == 0)
		return sign;
	if (a >= 65520.0)
		return sign | 0x7c00;
	(void)frexp(a, &ex);
	ex -= 1; /* a = 1.m * 2^ex */
	if (ex < -14)
		return sign | (uint16_t)nearbyint(ldexp(a, 24)); /* subnormal: units of 2^-24 */
	{
		double mant = nearbyint(ldexp(a, 10 - ex)); /* 1024 .. 2048 */

		if (mant == 2048) {
			mant = 1024;
			ex++;
		}
		return sign | (uint16_t)((ex + 15) << 10) | (uint16_t)(mant - 1024);
	}
}

static double from_half(uint16_t h)
{
	int ex = (h >> 10) & 0x1f;
	double m = h & 0x3ff, v = ex ? ldexp(1024 + m, ex - 25) : ldexp(m, -24);

	return h & 0x8000 ? -v : v;
}

static void test_kernels_half_math(void **state)
{
	struct env *e = *state;
	const uint32_t n = 256;
	gpux_module *m = load(e, kernel_half_math, NULL, 0);
	gpux_buf *x = buf(e, n * 4), *h = buf(e, n * 2), *back = buf(e, n * 4),
		 *fma_ = buf(e, n * 4);
	gpux_buf *out = buf(e, n * 16 * 8), *xd = buf(e, n * 8), *ux = buf(e, n * 4);
	float *px = gpux_buf_data(x), *pf = gpux_buf_data(out);
	double *pxd = gpux_buf_data(xd), *pd = gpux_buf_data(out);
	uint32_t *pu = gpux_buf_data(ux), *po = gpux_buf_data(out);
	struct gpux_launch l = { .grid = { n / 64 }, .block = { 64 } };

	test_fill_random(px, n, &e->seed);
	for (uint32_t i = 0; i < n; i++) {
		px[i] *= 4.0f;
		pxd[i] = px[i] * 1.000001;
		pu[i] = rnd(e) ^ (i < 8 ? 0u : rnd(e) << 1);
	}
	pu[0] = 0;
	{
		struct gpux_arg args[] = { gpux_arg_in(x, 0, n * 4), gpux_arg_out(h, 0, n * 2),
					   gpux_arg_out(back, 0, n * 4),
					   gpux_arg_out(fma_, 0, n * 4) };

		run_ok(m, "halves", &l, args, 4);
	}
	for (uint32_t i = 0; i < n; i++) {
		uint16_t a = to_half(px[i]), s = to_half(from_half(a) + 1.5);

		assert_int_equal(((uint16_t *)gpux_buf_data(h))[i], a);
		assert_true(((float *)gpux_buf_data(back))[i] == (float)from_half(a));
		assert_true(((float *)gpux_buf_data(fma_))[i] ==
			    (float)from_half(to_half(from_half(a) * 1.5 + from_half(s))));
	}
	{
		struct gpux_arg args[] = { gpux_arg_in(x, 0, n * 4),
					   gpux_arg_out(out, 0, n * 16 * 4), GPUX_ARG_VALUE(n) };

		run_ok(m, "math_float", &l, args, 3);
	}
	for (uint32_t i = 0; i < n; i++) {
		double v = px[i], a = fabs(v);
		double want[16] = {
			sin(v),
			cos(v),
			tan(v),
			exp(v),
			log(a + 1),
			sqrt(a),
			1 / sqrt(a + 1),
			pow(a, 1.5),
			tanh(v),
			erf(v),
			atan2(v, 1.5),
			fmaf(px[i], 2.0f, 1.0f),
			cbrt(v),
			exp2(v),
			floorf(px[i] * 10.0f),
			fminf(px[i], 0.25f),
		};

		for (uint32_t k = 0; k < 16; k++)
			close_enough(pf[k * n + i], want[k], 2e-6, "math_float", k * 1000 + i);
	}
	{
		struct gpux_arg args[] = { gpux_arg_in(xd, 0, n * 8),
					   gpux_arg_out(out, 0, n * 12 * 8), GPUX_ARG_VALUE(n) };

		run_ok(m, "math_double", &l, args, 3);
	}
	for (uint32_t i = 0; i < n; i++) {
		double v = pxd[i], a = fabs(v);
		double want[12] = {
			sin(v),  cos(v), exp(v),        log(a + 1),       sqrt(a), pow(a, 1.5),
			tanh(v), erf(v), atan2(v, 1.5), fma(v, 2.0, 1.0), cbrt(v), hypot(v, 2.0),
		};

		for (uint32_t k = 0; k < 12; k++)
			close_enough(pd[k * n + i], want[k], 1e-14, "math_double", k * 1000 + i);
	}
	{
		struct gpux_arg args[] = { gpux_arg_in(ux, 0, n * 4),
					   gpux_arg_out(out, 0, n * 10 * 4), GPUX_ARG_VALUE(n) };

		run_ok(m, "bits", &l, args, 3);
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t v = pu[i], rev = 0, perm = 0;
		uint64_t both = (uint64_t)0x11223344u << 32 | v;
		float f = (float)(v & 0xffffu);
		int32_t fi;

		for (uint32_t b = 0; b < 32; b++)
			rev |= (v >> b & 1) << (31 - b);
		for (uint32_t b = 0; b < 4; b++)
			perm |= (uint32_t)(both >> (8 * ((0x5140u >> (4 * b)) & 7)) & 0xff)
				<< (8 * b);
		memcpy(&fi, &f, 4);
		assert_int_equal(po[i], (uint32_t)__builtin_popcount(v));
		assert_int_equal(po[n + i], v ? (uint32_t)__builtin_clz(v) : 32);
		assert_int_equal(po[2 * n + i], rev);
		assert_int_equal(po[3 * n + i], (uint32_t)__builtin_ffs((int)v));
		assert_int_equal(po[4 * n + i], perm);
		assert_int_equal(po[5 * n + i], (uint32_t)(((uint64_t)v * 0x9e3779b9u) >> 32));
		assert_int_equal(po[6 * n + i], (uint32_t)fi);
		assert_int_equal(po[7 * n + i], MIN(v, 1000u));
		assert_int_equal(po[8 * n + i], MAX((int32_t)v, -5) < 0);
		assert_int_equal(po[9 * n + i], 2u * (uint32_t)__builtin_popcount(v));
	}
	gpux_buf_free(ux);
	gpux_buf_free(xd);
	gpux_buf_free(out);
	gpux_buf_free(fma_);
	gpux_buf_free(back);
	gpux_buf_free(h);
	gpux_buf_free(x);
	gpux_module_free(m);
}

/* ---- misc.cu ---- */

struct params {
	int32_t scale;
	float offset;
	double factor;
};

static void test_kernels_misc(void **state)
{
	struct env *e = *state;
	gpux_module *m = load(e, kernel_misc, NULL, 0);
	gpux_buf *b = buf(e, 4096 * 4), *in = buf(e, 3 * 128 * 4);
	uint32_t *pu = gpux_buf_data(b);
	int32_t *pi = gpux_buf_data(b), *pin = gpux_buf_data(in);
	float *pf = gpux_buf_data(b);
	struct params p = { 3, 0.5f, 0.25 };
	char msg[1024];

	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(p), gpux_arg_out(b, 0, 256 * 4) };
		struct gpux_launch l = { .grid = { 2 }, .block = { 128 } };

		run_ok(m, "by_value", &l, args, 2);
		for (uint32_t i = 0; i < 256; i++)
			assert_true(pf[i] ==
				    (float)p.scale * (float)i + p.offset + (float)p.factor);
	}
	{
		struct gpux_arg args[] = { gpux_arg_out(b, 0, 3 * 2 * 2 * 4 * 3 * 2 * 4) };
		struct gpux_launch l = { .grid = { 3, 2, 2 }, .block = { 4, 3, 2 } };
		uint32_t i = 0;

		run_ok(m, "lib::coords", &l, args, 1);
		for (uint32_t bz = 0; bz < 2; bz++)
			for (uint32_t by = 0; by < 2; by++)
				for (uint32_t bx = 0; bx < 3; bx++)
					for (uint32_t tz = 0; tz < 2; tz++)
						for (uint32_t ty = 0; ty < 3; ty++)
							for (uint32_t tx = 0; tx < 4; tx++)
								assert_int_equal(pu[i++],
										 tx | ty << 8 |
											 tz << 14 |
											 bx << 17 |
											 by << 22 |
											 bz << 27);
	}
	{
		struct gpux_arg args[] = { gpux_arg_out(b, 0, 32 * 4) };
		struct gpux_launch l = { .grid = { 1 }, .block = { 32 } };

		/* Two overloads: an error naming both; each by its symbol runs. */
		assert_int_equal(run(m, "over", &l, args, 1, msg, sizeof(msg)), GPUX_E_INVAL);
		assert_non_null(strstr(msg, "_Z4overPi"));
		assert_non_null(strstr(msg, "_Z4overPf"));
		run_ok(m, "_Z4overPf", &l, args, 1);
		assert_true(pf[31] == 2.0f);
		run_ok(m, "_Z4overPi", &l, args, 1);
		assert_int_equal(pi[31], 1);
		run_ok(m, "c_linkage", &l, args, 1);
		assert_int_equal(pi[31], 3);
	}
	for (uint32_t i = 0; i < 3 * 128; i++)
		pin[i] = i < 128 ? (int32_t)i + 1 : i < 256 ? -1 : (int32_t)(i % 2);
	{
		struct gpux_arg args[] = { gpux_arg_in(in, 0, 3 * 128 * 4),
					   gpux_arg_out(b, 0, 9 * 4) };
		struct gpux_launch l = { .grid = { 3 }, .block = { 128 } };
		static const int32_t want[9] = { 128, 1, 1, 0, 0, 0, 64, 0, 1 };

		run_ok(m, "sync_counts", &l, args, 2);
		assert_memory_equal(pi, want, sizeof(want));
	}
	{
		struct gpux_arg args[] = { gpux_arg_out(b, 0, 2 * 64 * 4) };
		struct gpux_launch l = { .grid = { 2 }, .block = { 64 } };

		run_ok(m, "clocks", &l, args, 1);
		for (uint32_t i = 0; i < 128; i++)
			assert_int_equal(pi[i], 1);
	}
	gpux_buf_free(in);
	gpux_buf_free(b);
	gpux_module_free(m);
}

/* ---- names ---- */

/* A kernel the module lacks, a template nobody instantiated, the wrong arguments: said. */
static void test_kernels_names(void **state)
{
	struct env *e = *state;
	gpux_module *m = load(e, kernel_reduce, NULL, 0);
	gpux_buf *b = buf(e, 1024);
	uint32_t n = 16;
	struct gpux_arg args[] = { gpux_arg_in(b, 0, 512), gpux_arg_out(b, 512, 512),
				   GPUX_ARG_VALUE(n) };
	struct gpux_launch l = { .grid = { 1 }, .block = { 64 }, .shared_bytes = 64 * 8 };
	char msg[1024];

	assert_int_equal(run(m, "reduce_tree", &l, args, 3, msg, sizeof(msg)), GPUX_E_NOTFOUND);
	assert_non_null(strstr(msg, "template"));
	assert_int_equal(run(m, "reduce_cg<float>", &l, args, 3, msg, sizeof(msg)),
			 GPUX_E_NOTFOUND);
	assert_int_equal(run(m, "no_such_kernel", &l, args, 3, msg, sizeof(msg)), GPUX_E_NOTFOUND);
	/* The source's own instance, by its expression however spaced. */
	run_ok(m, "reduce_tree< double >", &l, args, 3);
	assert_int_equal(run(m, "reduce_tree<double>", &l, args, 2, msg, sizeof(msg)),
			 GPUX_E_INVAL);
	assert_non_null(strstr(msg, "takes 3 arguments"));
	gpux_module_free(m);
	/* A module without a kernel: nothing to find in it. */
	m = load(e, "__device__ int twice(int x) { return 2 * x; }\n", NULL, 0);
	assert_int_equal(run(m, "twice", &l, args, 3, msg, sizeof(msg)), GPUX_E_NOTFOUND);
	gpux_buf_free(b);
	gpux_module_free(m);
}

/* ---- what only the host back end does ---- */

/* What the host does not have fails the compile with a message naming it. */
static void test_kernels_host_refuses(void **state)
{
	static const struct {
		const char *src, *what;
	} cases[] = {
		{ "__global__ void k(int *p) { asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(p[0])); }\n",
		  "inline assembly" },
		{ "__global__ void k(cudaTextureObject_t t, float *o) { o[0] = "
		  "tex1Dfetch<float>(t, 0); }\n",
		  "texture objects" },
		{ "__global__ void k(float *o) { o[0] = tex2D<float>(0ull, 0.5f, 0.5f); }\n",
		  "texture" },
		{ "#include <cub/block/block_reduce.cuh>\n__global__ void k() {}\n", "CUB" },
		{ "#include <cuda_bf16.h>\n__global__ void k() {}\n", "__nv_bfloat16" },
		{ "__global__ void child() {}\n__global__ void parent() { child<<<1, 1>>>(); }\n",
		  "dynamic parallelism" },
		{ "#include <cooperative_groups.h>\n"
		  "__global__ void k() { cooperative_groups::this_grid().sync(); }\n",
		  "grid-wide" },
	};
	struct env *e = *state;

	if (!e->host)
		skip();
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		gpux_module *m = NULL;
		char *log = NULL;
		gpux_status st = gpux_module_load(e->ctx, GPUX_LANG_CUDA, cases[i].src,
						  strlen(cases[i].src), NULL, &m, &log);

		if (st != GPUX_E_COMPILE || !log ||
		    !strstr(log, "not supported by gpux's host back end") ||
		    !strstr(log, cases[i].what))
			fail_msg("case %u: status %d, log: %s", i, st, log ? log : "none");
		free(log);
	}
}

static const char failing_src[] =
	"#include <assert.h>\n"
	"__global__ void stuck(int *p)\n"
	"{\n"
	"	if (threadIdx.x % 32 == 0)\n"
	"		__syncthreads();\n"
	"	else\n"
	"		__syncwarp();\n"
	"	p[threadIdx.x] = 1;\n"
	"}\n"
	"__global__ void checks(const int *p) { assert(p[threadIdx.x] == 0); }\n"
	"__global__ void traps() { if (threadIdx.x == 5) __trap(); }\n"
	"__global__ void prints(int *p) { printf(\"thread %u\\n\", threadIdx.x); p[threadIdx.x] = "
	"7; }\n"
	"__global__ void dyn(int *p) { extern __shared__ int s[]; s[threadIdx.x] = 1; p[0] = s[0]; "
	"}\n";

/* A deadlock, an assertion, __trap() fail their request with why; the worker goes on. */
static void test_kernels_host_failures(void **state)
{
	struct env *e = *state;
	gpux_module *m;
	gpux_buf *b;
	struct gpux_arg args[1];
	struct gpux_launch l = { .grid = { 2 }, .block = { 64 } };
	pid_t pid;
	char msg[1024];

	if (!e->host)
		skip();
	pid = test_worker_pid(&e->d, 0);
	m = load(e, failing_src, NULL, 0);
	b = buf(e, 64 * 4);
	args[0] = gpux_arg_inout(b, 0, 64 * 4);
	assert_int_equal(run(m, "stuck", &l, args, 1, msg, sizeof(msg)), GPUX_E_KERNEL_FAULT);
	assert_non_null(strstr(msg, "deadlock"));
	memset(gpux_buf_data(b), 0, 64 * 4);
	((int32_t *)gpux_buf_data(b))[9] = 1;
	assert_int_equal(run(m, "checks", &l, args, 1, msg, sizeof(msg)), GPUX_E_KERNEL_FAULT);
	assert_non_null(strstr(msg, "assertion \"p[threadIdx.x] == 0\" failed"));
	assert_non_null(strstr(msg, "thread (9,0,0)"));
	assert_int_equal(run(m, "traps", &l, NULL, 0, msg, sizeof(msg)), GPUX_E_KERNEL_FAULT);
	assert_non_null(strstr(msg, "__trap()"));
	run_ok(m, "prints", &l, args, 1);
	assert_int_equal(((int32_t *)gpux_buf_data(b))[63], 7);
	/* More dynamic shared memory than a block has here: refused. */
	l.shared_bytes = 128 * 1024;
	assert_int_equal(run(m, "dyn", &l, args, 1, msg, sizeof(msg)), GPUX_E_INVAL);
	assert_non_null(strstr(msg, "dynamic shared memory"));
	l.shared_bytes = 64 * 4;
	run_ok(m, "dyn", &l, args, 1);
	assert_int_equal(test_worker_pid(&e->d, 0), pid);
	gpux_buf_free(b);
	gpux_module_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kernels_vector_add),
		cmocka_unit_test(test_kernels_matmul),
		cmocka_unit_test(test_kernels_reduce),
		cmocka_unit_test(test_kernels_templates),
		cmocka_unit_test(test_kernels_atomics),
		cmocka_unit_test(test_kernels_warp),
		cmocka_unit_test(test_kernels_half_math),
		cmocka_unit_test(test_kernels_misc),
		cmocka_unit_test(test_kernels_names),
		cmocka_unit_test(test_kernels_host_refuses),
		cmocka_unit_test(test_kernels_host_failures),
	};
	if (strcmp(TEST_BACKEND, "cuda") == 0)
		test_gpu_require(1);
	return cmocka_run_group_tests(tests, setup, teardown);
}
