/* SPDX-License-Identifier: MIT */
/* tests/test-gpu-samples.c: CUDA code as published and as C++ programmers write it, on a real GPU
 * (suite gpu). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"
#include "nvrtc-helpers.h"

#include "sample-matrixMul_kernel.h"
#include "sample-reduction_kernel.h"
#include "sample-sharedmem.h"
#include "sample-simpleTemplates_kernel.h"
#include "sample-vectorAdd.h"

/*
 * NVIDIA's CUDA samples (tests/samples: where each comes from, its licence), compiled by
 * gpux from their source unchanged and run with the sizes and launch shapes their host
 * code uses; each result is checked against the CPU. Then the toolkit's headers, and
 * cubins, fatbins and PTX with C++ names, from this process's own NVRTC. Exits 77 without
 * a GPU.
 */

struct env {
	struct test_daemon d;
	char cache[300];
	gpux_ctx *ctx;
	struct gpux_device_info info;
	uint64_t seed;
};

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	const char *args[] = { "--backend", "cuda", "--cache-dir", e->cache, NULL };

	(void)snprintf(e->cache, sizeof(e->cache), "/tmp/gpux-gpu-samples-XXXXXX");
	assert_non_null(mkdtemp(e->cache));
	test_daemon_start(&e->d, args);
	e->ctx = test_connect(&e->d);
	assert_int_equal(gpux_device_info(e->ctx, 0, &e->info), GPUX_OK);
	e->seed = (uint64_t)mono_ns();
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;
	char cmd[400];

	gpux_disconnect(e->ctx);
	test_daemon_stop(&e->d);
	(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", e->cache);
	(void)system(cmd);
	free(e);
	return 0;
}

static gpux_module *load(struct env *e, const char *src, const struct gpux_header *h,
			 uint32_t nh, const char *const *names, uint32_t nn)
{
	struct gpux_module_opts o = {
		.size = sizeof(o), .nheaders = nh, .headers = h, .names = names, .nnames = nn,
	};
	gpux_module *m = NULL;
	char *log = NULL;
	gpux_status st = gpux_module_load_ex(e->ctx, GPUX_LANG_CUDA, src, strlen(src), &o, &m, &log);

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

static void run_ok(gpux_module *m, const char *kernel, const struct gpux_launch *l,
		   const struct gpux_arg *args, uint32_t nargs)
{
	gpux_req *r;

	assert_int_equal(gpux_submit(m, kernel, l, args, nargs, &r), GPUX_OK);
	if (gpux_wait(r, -1) != GPUX_OK)
		fail_msg("%s: %s", kernel, gpux_req_message(r));
	gpux_req_free(r);
}

/* ---- the samples ---- */

/* vectorAdd.cu: 50000 elements, 256 threads a block, as its host code launches it. */
static void test_gpu_sample_vector_add(void **state)
{
	struct env *e = *state;
	const int n = 50000;
	gpux_module *m = load(e, sample_vectorAdd, NULL, 0, NULL, 0);
	gpux_buf *a = buf(e, n * 4), *b = buf(e, n * 4), *c = buf(e, n * 4);
	struct gpux_arg args[] = { gpux_arg_in(a, 0, n * 4), gpux_arg_in(b, 0, n * 4),
				   gpux_arg_out(c, 0, n * 4), GPUX_ARG_VALUE(n) };
	struct gpux_launch l = { .grid = { (n + 255) / 256 }, .block = { 256 } };
	const float *pa = gpux_buf_data(a), *pb = gpux_buf_data(b), *pc = gpux_buf_data(c);

	test_fill_random(gpux_buf_data(a), n, &e->seed);
	test_fill_random(gpux_buf_data(b), n, &e->seed);
	/* A kernel with C++ linkage, asked for as its author names it. */
	run_ok(m, "vectorAdd", &l, args, 4);
	for (int i = 0; i < n; i++)
		assert_float_equal(pc[i], pa[i] + pb[i], 0);
	gpux_buf_free(c);
	gpux_buf_free(b);
	gpux_buf_free(a);
	gpux_module_free(m);
}

/* matrixMul_kernel.cu: both kernels of the module, on matrices of 320x320 and 320x640. */
static void test_gpu_sample_matrix_mul(void **state)
{
	struct env *e = *state;
	const int ha = 320, wa = 320, wb = 640;
	gpux_module *m = load(e, sample_matrixMul_kernel, NULL, 0, NULL, 0);
	gpux_buf *a = buf(e, (size_t)ha * wa * 4), *b = buf(e, (size_t)wa * wb * 4);
	gpux_buf *c = buf(e, (size_t)ha * wb * 4);
	const float *pa = gpux_buf_data(a), *pb = gpux_buf_data(b), *pc = gpux_buf_data(c);

	test_fill_random(gpux_buf_data(a), (size_t)ha * wa, &e->seed);
	test_fill_random(gpux_buf_data(b), (size_t)wa * wb, &e->seed);
	for (unsigned bs = 16; bs <= 32; bs *= 2) {
		struct gpux_arg args[] = { gpux_arg_out(c, 0, (uint64_t)ha * wb * 4),
					   gpux_arg_in(a, 0, (uint64_t)ha * wa * 4),
					   gpux_arg_in(b, 0, (uint64_t)wa * wb * 4), GPUX_ARG_VALUE(wa),
					   GPUX_ARG_VALUE(wb) };
		struct gpux_launch l = { .grid = { wb / bs, ha / bs }, .block = { bs, bs } };

		memset(gpux_buf_data(c), 0xff, (size_t)ha * wb * 4);
		run_ok(m, bs == 16 ? "matrixMulCUDA_block16" : "matrixMulCUDA_block32", &l, args, 5);
		for (int i = 0; i < ha; i += 7)
			for (int j = 0; j < wb; j += 5) {
				double want = 0;

				for (int k = 0; k < wa; k++)
					want += (double)pa[i * wa + k] * pb[k * wb + j];
				assert_float_equal(pc[i * wb + j], want, 1e-3);
			}
	}
	gpux_buf_free(c);
	gpux_buf_free(b);
	gpux_buf_free(a);
	gpux_module_free(m);
}

struct reduction {
	const char *name;
	bool is_int;
	uint32_t n, blocks, shared; /* shared: bytes a block, as the sample's host code gives */
};

static void reduce_one(struct env *e, gpux_module *m, const struct reduction *c)
{
	gpux_buf *in = buf(e, (size_t)c->n * 4), *out = buf(e, (size_t)c->blocks * 4);
	struct gpux_arg args[] = { gpux_arg_in(in, 0, (uint64_t)c->n * 4),
				   gpux_arg_out(out, 0, (uint64_t)c->blocks * 4),
				   GPUX_ARG_VALUE(c->n) };
	struct gpux_launch l = { .grid = { c->blocks }, .block = { 256 }, .shared_bytes = c->shared };
	double want = 0, got = 0;

	if (c->is_int) {
		int32_t *p = gpux_buf_data(in);

		for (uint32_t i = 0; i < c->n; i++) {
			e->seed = e->seed * 6364136223846793005ull + 1442695040888963407ull;
			p[i] = (int32_t)((e->seed >> 33) % 100);
			want += p[i];
		}
	} else {
		float *p = gpux_buf_data(in);

		test_fill_random(p, c->n, &e->seed);
		for (uint32_t i = 0; i < c->n; i++)
			want += p[i];
	}
	run_ok(m, c->name, &l, args, 3);
	for (uint32_t b = 0; b < c->blocks; b++)
		got += c->is_int ? (double)((int32_t *)gpux_buf_data(out))[b]
				 : (double)((float *)gpux_buf_data(out))[b];
	if (c->is_int ? got != want : fabs(got - want) > 1e-3 * sqrt((double)c->n))
		fail_msg("%s: %.6f, wanted %.6f", c->name, got, want);
	gpux_buf_free(out);
	gpux_buf_free(in);
}

/* reduction_kernel.cu: kernel templates by name expression, with dynamic shared memory. */
static void test_gpu_sample_reduction(void **state)
{
	static const struct reduction cases[] = {
		{ "reduce0<float>", false, 1 << 20, (1 << 20) / 256, 256 * 4 },
		{ "reduce2<int>", true, 1 << 20, (1 << 20) / 256, 256 * 4 },
		{ "reduce3<int>", true, 1 << 20, (1 << 20) / 512, 256 * 4 },
		{ "reduce4<float, 256>", false, 1 << 20, (1 << 20) / 512, 256 * 4 },
		{ "reduce5<int, 256>", true, 1 << 20, (1 << 20) / 512, 256 * 4 },
		{ "reduce6<float, 256, true>", false, 1 << 20, 64, 256 * 4 },
		{ "reduce6<int, 256, false>", true, 1000003, 64, 256 * 4 },
		{ "reduce7<int, 256, false>", true, 1000003, 64, (256 / 32 + 1) * 4 },
		{ "cg_reduce<float>", false, 1 << 20, 64, 256 * 4 },
	};
	const char *names[ARRAY_SIZE(cases)];
	struct env *e = *state;
	gpux_module *m;

	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++)
		names[i] = cases[i].name;
	m = load(e, sample_reduction_kernel, NULL, 0, names, ARRAY_SIZE(names));
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++)
		reduce_one(e, m, &cases[i]);
	gpux_module_free(m);
}

/* simpleTemplates: the client's sharedmem.cuh, testKernel<float> on 32 threads and
 * testKernel<int> on 64, each with as much dynamic shared memory as it has elements. */
static void test_gpu_sample_templates(void **state)
{
	static const char *const names[] = { "testKernel<float>", "testKernel<int>" };
	struct gpux_header h = { "sharedmem.cuh", sample_sharedmem };
	struct env *e = *state;
	gpux_module *m = load(e, sample_simpleTemplates_kernel, &h, 1, names, 2);

	for (unsigned k = 0; k < 2; k++) {
		const uint32_t n = k ? 64 : 32;
		gpux_buf *in = buf(e, n * 4), *out = buf(e, n * 4);
		struct gpux_arg args[] = { gpux_arg_in(in, 0, n * 4), gpux_arg_out(out, 0, n * 4) };
		struct gpux_launch l = { .grid = { 1 }, .block = { n }, .shared_bytes = n * 4 };

		for (uint32_t i = 0; i < n; i++) {
			if (k)
				((int32_t *)gpux_buf_data(in))[i] = (int32_t)i;
			else
				((float *)gpux_buf_data(in))[i] = (float)i;
		}
		run_ok(m, names[k], &l, args, 2);
		for (uint32_t i = 0; i < n; i++) {
			if (k)
				assert_int_equal(((int32_t *)gpux_buf_data(out))[i], (int32_t)(n * i));
			else
				assert_float_equal(((float *)gpux_buf_data(out))[i], (float)(n * i), 0);
		}
		gpux_buf_free(out);
		gpux_buf_free(in);
	}
	gpux_module_free(m);
}

/* ---- the toolkit's headers ---- */

static const char toolkit_src[] =
	"#include <cooperative_groups.h>\n"
	"#include <cooperative_groups/reduce.h>\n"
	"#include <cuda_fp16.h>\n"
	"#include <cuda_bf16.h>\n"
	"#include <cuda/std/array>\n"
	"#include <cub/block/block_reduce.cuh>\n"
	"namespace cg = cooperative_groups;\n"
	"__global__ void tk(int *out, __half *h, __nv_bfloat16 *b)\n"
	"{\n"
	"	typedef cub::BlockReduce<int, 128> R;\n"
	"	__shared__ typename R::TempStorage tmp;\n"
	"	cuda::std::array<int, 2> a{ 3, 4 };\n"
	"	auto tile = cg::tiled_partition<32>(cg::this_thread_block());\n"
	"	int s = R(tmp).Sum((int)threadIdx.x);\n"
	"	int r = cg::reduce(tile, a[1], cg::plus<int>());\n"
	"	if (threadIdx.x == 0)\n"
	"		out[0] = s;\n"
	"	if (threadIdx.x == 32)\n"
	"		out[1] = r;\n"
	"	h[threadIdx.x] = __hadd(__float2half(1.0f), __float2half(0.5f));\n"
	"	b[threadIdx.x] = __float2bfloat16(2.5f);\n"
	"}\n";

static void test_gpu_toolkit_headers(void **state)
{
	struct env *e = *state;
	gpux_module *m = load(e, toolkit_src, NULL, 0, NULL, 0);
	gpux_buf *out = buf(e, 8), *h = buf(e, 256), *b = buf(e, 256);
	struct gpux_arg args[] = { gpux_arg_out(out, 0, 8), gpux_arg_out(h, 0, 256),
				   gpux_arg_out(b, 0, 256) };
	struct gpux_launch l = { .grid = { 1 }, .block = { 128 } };
	const uint16_t *ph = gpux_buf_data(h), *pb = gpux_buf_data(b);

	run_ok(m, "tk", &l, args, 3);
	assert_int_equal(((int32_t *)gpux_buf_data(out))[0], 127 * 128 / 2);
	assert_int_equal(((int32_t *)gpux_buf_data(out))[1], 32 * 4);
	for (unsigned i = 0; i < 128; i++) {
		assert_int_equal(ph[i], 0x3e00); /* 1.5 as a half */
		assert_int_equal(pb[i], 0x4020); /* 2.5 as a bfloat16 */
	}
	gpux_buf_free(b);
	gpux_buf_free(h);
	gpux_buf_free(out);
	gpux_module_free(m);
}

/* ---- cubins, fatbins and PTX made by the client ---- */

static const char client_src[] =
	"namespace lib { __global__ void scale(float *p, float a, int n)\n"
	"{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] *= a; } }\n"
	"__global__ void over(int *p) { p[threadIdx.x] = 1; }\n"
	"__global__ void over(float *p) { p[threadIdx.x] = 1; }\n";

static void scale_check(struct env *e, uint32_t lang, const void *code, size_t len)
{
	const int n = 1000;
	float a = 3;
	gpux_module *m = NULL;
	char *log = NULL;
	gpux_buf *p = buf(e, n * 4);
	struct gpux_arg args[] = { gpux_arg_inout(p, 0, n * 4), GPUX_ARG_VALUE(a),
				   GPUX_ARG_VALUE(n) };
	struct gpux_launch l = { .grid = { (n + 127) / 128 }, .block = { 128 } };
	gpux_req *r;

	if (gpux_module_load(e->ctx, lang, code, len, NULL, &m, &log) != GPUX_OK)
		fail_msg("load: %s", log ? log : "");
	free(log);
	for (int i = 0; i < n; i++)
		((float *)gpux_buf_data(p))[i] = (float)i;
	run_ok(m, "lib::scale", &l, args, 3);
	for (int i = 0; i < n; i++)
		assert_float_equal(((float *)gpux_buf_data(p))[i], 3.0f * (float)i, 0);
	/* An overloaded name: an error naming both; each by its symbol runs. */
	assert_int_equal(gpux_submit(m, "over", &l, args, 1, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_E_INVAL);
	assert_non_null(strstr(gpux_req_message(r), "_Z4overPi"));
	assert_non_null(strstr(gpux_req_message(r), "_Z4overPf"));
	gpux_req_free(r);
	run_ok(m, "_Z4overPf", &l, args, 1);
	gpux_buf_free(p);
	gpux_module_free(m);
}

static void test_gpu_client_cubin_fatbin_ptx(void **state)
{
	struct env *e = *state;
	unsigned sm = e->info.cc_major * 10 + e->info.cc_minor;
	char arch[32];
	size_t len, flen, other_len;
	_cleanup_(freep) uint8_t *cubin = NULL, *fb = NULL, *ptx = NULL, *other = NULL;
	gpux_module *m = NULL;
	char *log = NULL;

	(void)snprintf(arch, sizeof(arch), "sm_%u", sm);
	cubin = test_nvrtc_compile(client_src, arch, false, &len);
	scale_check(e, GPUX_LANG_CUBIN, cubin, len);
	fb = test_fatbin(cubin, len, sm, &flen);
	scale_check(e, GPUX_LANG_CUBIN, fb, flen);
	(void)snprintf(arch, sizeof(arch), "compute_%u", sm);
	ptx = test_nvrtc_compile(client_src, arch, true, &len);
	scale_check(e, GPUX_LANG_PTX, ptx, len);
	/* A cubin of another major version is refused by gpux before the driver sees it. */
	other = test_nvrtc_compile(client_src, e->info.cc_major == 8 ? "sm_90" : "sm_80", false,
				   &other_len);
	assert_int_equal(gpux_module_load(e->ctx, GPUX_LANG_CUBIN, other, other_len, NULL, &m, &log),
			 GPUX_E_INVAL);
	assert_non_null(log);
	assert_non_null(strstr(log, "does not run on this device"));
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_sample_vector_add),
		cmocka_unit_test(test_gpu_sample_matrix_mul),
		cmocka_unit_test(test_gpu_sample_reduction),
		cmocka_unit_test(test_gpu_sample_templates),
		cmocka_unit_test(test_gpu_toolkit_headers),
		cmocka_unit_test(test_gpu_client_cubin_fatbin_ptx),
	};

	test_gpu_require(1);
	return cmocka_run_group_tests(tests, setup, teardown);
}
