/* SPDX-License-Identifier: MIT */
/* tests/test-gpu-toolkit.c: the toolkit's headers, and the client's cubins, fatbins and PTX, on a
 * real GPU (suite gpu). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"
#include "nvrtc-helpers.h"

/*
 * The toolkit's headers (cooperative groups, CUB, cuda_fp16, libcu++) in a kernel that runs,
 * and cubins, fatbins and PTX with C++ names from this process's own NVRTC. gpux's own
 * kernels run in test-gpu-kernels (tests/test-e2e-kernels.c). Exits 77 without a GPU.
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

	(void)snprintf(e->cache, sizeof(e->cache), "/tmp/gpux-gpu-toolkit-XXXXXX");
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

static gpux_module *load(struct env *e, const char *src, const struct gpux_header *h, uint32_t nh,
			 const char *const *names, uint32_t nn)
{
	struct gpux_module_opts o = {
		.size = sizeof(o),
		.nheaders = nh,
		.headers = h,
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

static void run_ok(gpux_module *m, const char *kernel, const struct gpux_launch *l,
		   const struct gpux_arg *args, uint32_t nargs)
{
	gpux_req *r;

	assert_int_equal(gpux_submit(m, kernel, l, args, nargs, &r), GPUX_OK);
	if (gpux_wait(r, -1) != GPUX_OK)
		fail_msg("%s: %s", kernel, gpux_req_message(r));
	gpux_req_free(r);
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
	assert_int_equal(
		gpux_module_load(e->ctx, GPUX_LANG_CUBIN, other, other_len, NULL, &m, &log),
		GPUX_E_INVAL);
	assert_non_null(log);
	assert_non_null(strstr(log, "does not run on this device"));
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_toolkit_headers),
		cmocka_unit_test(test_gpu_client_cubin_fatbin_ptx),
	};

	test_gpu_require(1);
	return cmocka_run_group_tests(tests, setup, teardown);
}
