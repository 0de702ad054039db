/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-compile.c: CUDA C++ as written (headers, C++ names, templates) and checked cubins,
 * on a fake driver. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"
#include "nvrtc-helpers.h"

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
 * gpuxd with the CUDA back end on tests/fake-cuda ($GPUX_CUDA_LIB) and the real NVRTC, in
 * the worker's sandboxed helper. The fake driver runs none of these kernels, but a launch
 * still goes through finding the kernel by its name and checking the arguments against the
 * cubin's own parameter list: a request that gets past both ends GPUX_OK, one that names
 * no kernel or passes the wrong arguments says so. gpux's own kernels (tests/kernels) run
 * for real in test-e2e-kernels, on the host back end and on a GPU.
 */

struct ctx {
	struct test_daemon d;
	gpux_ctx *c;
};

static bool have_landlock(void)
{
	return syscall(SYS_landlock_create_ruleset, NULL, 0, 1u) > 0;
}

static int setup(void **state)
{
	static const char *const args[] = { "--backend", "cuda", NULL };
	struct ctx *t;

	if (!test_have_nvrtc())
		return 0;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -1;
	test_daemon_start(&t->d, args);
	t->c = test_connect(&t->d);
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct ctx *t = *state;

	if (t) {
		gpux_disconnect(t->c);
		test_daemon_stop(&t->d);
		free(t);
	}
	return 0;
}

#define NEED(state)                                                                                \
	do {                                                                                       \
		if (!*(state))                                                                     \
			skip();                                                                    \
	} while (0)

/* Load CUDA C++ with headers and names; the status, with the log in *ret_log (to free). */
static gpux_status load(struct ctx *t, const char *src, const struct gpux_header *h, uint32_t nh,
			const char *const *names, uint32_t nn, gpux_module **ret, char **ret_log)
{
	struct gpux_module_opts o = {
		.size = sizeof(o),
		.nheaders = nh,
		.headers = h,
		.names = names,
		.nnames = nn,
	};
	char *log = NULL;
	gpux_status st = gpux_module_load_ex(t->c, GPUX_LANG_CUDA, src, strlen(src), &o, ret, &log);

	if (ret_log)
		*ret_log = log;
	else
		free(log);
	return st;
}

/* Launch `kernel` with n pointer arguments (to a scratch buffer) and the scalars given. */
static gpux_status run(gpux_ctx *c, gpux_module *m, const char *kernel, unsigned nptrs,
		       const struct gpux_arg *scalars, unsigned nscalars, char *msg, size_t msg_len)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 32, 1, 1 }, .shared_bytes = 1024 };
	struct gpux_arg args[8];
	gpux_buf *b;
	gpux_req *r;
	gpux_status st;

	assert_true(nptrs + nscalars <= 8);
	assert_int_equal(gpux_buf_alloc(c, 4096, &b), GPUX_OK);
	for (unsigned i = 0; i < nptrs; i++)
		args[i] = gpux_arg_inout(b, 512 * i, 512);
	for (unsigned i = 0; i < nscalars; i++)
		args[nptrs + i] = scalars[i];
	st = gpux_submit(m, kernel, &l, args, nptrs + nscalars, &r);
	if (st == GPUX_OK) {
		st = gpux_wait(r, -1);
		(void)snprintf(msg, msg_len, "%s", gpux_req_message(r));
		gpux_req_free(r);
	}
	gpux_buf_free(b);
	return st;
}

static void expect_run(gpux_ctx *c, gpux_module *m, const char *kernel, unsigned nptrs,
		       const struct gpux_arg *scalars, unsigned nscalars, gpux_status want,
		       const char *in_msg)
{
	char msg[2048] = "";
	gpux_status st = run(c, m, kernel, nptrs, scalars, nscalars, msg, sizeof(msg));

	if (st != want || (in_msg && !strstr(msg, in_msg)))
		fail_msg("%s: status %d (%s), wanted %d with \"%s\"", kernel, st, msg, want,
			 in_msg ? in_msg : "");
}

/* ---- the toolkit's headers ---- */

static const char toolkit_src[] =
	"#include <cooperative_groups.h>\n"
	"#include <cooperative_groups/reduce.h>\n"
	"#include <cuda_fp16.h>\n"
	"#include <cuda_bf16.h>\n"
	"#include <cuda/std/array>\n"
	"#include <cuda/std/type_traits>\n"
	"#include <cub/block/block_reduce.cuh>\n"
	"namespace cg = cooperative_groups;\n"
	"extern \"C\" __global__ void tk(int *out, __half *h, __nv_bfloat16 *b)\n"
	"{\n"
	"	typedef cub::BlockReduce<int, 32> R;\n"
	"	__shared__ typename R::TempStorage tmp;\n"
	"	cuda::std::array<int, 2> a{ 1, 2 };\n"
	"	auto tile = cg::tiled_partition<32>(cg::this_thread_block());\n"
	"	int s = R(tmp).Sum((int)threadIdx.x);\n"
	"	int r = cg::reduce(tile, a[1], cg::plus<int>());\n"
	"	if (threadIdx.x == 0)\n"
	"		out[0] = s + r + cuda::std::is_same<int, int>::value;\n"
	"	h[threadIdx.x] = __float2half(1.5f);\n"
	"	b[threadIdx.x] = __float2bfloat16(2.5f);\n"
	"}\n";

static void test_compile_toolkit_headers(void **state)
{
	struct ctx *t = *state;
	gpux_module *m = NULL;
	char *log = NULL;

	NEED(state);
	if (!have_landlock())
		skip();
	if (load(t, toolkit_src, NULL, 0, NULL, 0, &m, &log) != GPUX_OK)
		fail_msg("the toolkit's headers did not compile: %s", log ? log : "");
	free(log);
	expect_run(t->c, m, "tk", 3, NULL, 0, GPUX_OK, NULL);
	gpux_module_free(m);
}

/* Whatever the path, nothing outside the toolkit's headers is read. */
static void test_compile_no_file_outside_the_toolkit(void **state)
{
	static const char *const sneaky[] = {
		"#include \"/etc/passwd\"\n",
		"#include \"../../../../etc/passwd\"\n",
		"#include <../../../../../../../../etc/passwd>\n",
		"#include <cooperative_groups/../../../../../../../../etc/passwd>\n",
		"#include \"etc/passwd\"\n",
		"#include \"/proc/self/environ\"\n",
	};
	struct ctx *t = *state;

	NEED(state);
	for (unsigned i = 0; i < ARRAY_SIZE(sneaky); i++) {
		char src[256], *log = NULL;
		gpux_module *m = NULL;

		(void)snprintf(src, sizeof(src), "%sextern \"C\" __global__ void k() {}\n",
			       sneaky[i]);
		assert_int_equal(load(t, src, NULL, 0, NULL, 0, &m, &log), GPUX_E_COMPILE);
		assert_non_null(log);
		if (strstr(log, "root:") || !strstr(log, "cannot open source file"))
			fail_msg("%s: %s", sneaky[i], log);
		free(log);
	}
	/* Options that would add a directory are refused before any compile. */
	{
		struct gpux_module_opts o = { .size = sizeof(o), .options = "-I/etc" };
		gpux_module *m = NULL;
		char *log = NULL;

		assert_int_equal(gpux_module_load_ex(t->c, GPUX_LANG_CUDA, toolkit_src,
						     sizeof(toolkit_src) - 1, &o, &m, &log),
				 GPUX_E_INVAL);
		free(log);
	}
}

/* ---- the client's headers and C++ names ---- */

static const char names_src[] =
	"#include \"util.cuh\"\n"
	"template <typename T> __global__ void fill(T *p, int n, T v) { if (n) *p = v; }\n"
	"template __global__ void fill<float>(float *, int, float);\n"
	"template <typename T, int B> __global__ void reduce(const T *in, T *out)\n"
	"{ __shared__ T s[B]; s[threadIdx.x] = in[threadIdx.x]; __syncthreads(); *out = s[0]; }\n"
	"__global__ void saxpy(const float *x, float *y, float a, unsigned long long n)\n"
	"{ y[0] = a * x[0] + twice(1.0f) + (float)n; }\n"
	"__global__ void over(int *p) { *p = 1; }\n"
	"__global__ void over(float *p) { *p = 1; }\n"
	"namespace ns { __global__ void inner(double d, char c) { } }\n"
	"extern \"C\" __global__ void plain(int a, double b) { }\n";

static void test_compile_headers_and_names(void **state)
{
	static const struct gpux_header headers[] = {
		{ "util.cuh", "#pragma once\n#include \"lib/detail.h\"\n" },
		{ "lib/detail.h", "__device__ inline float twice(float x) { return 2 * x; }\n" },
	};
	static const char *const names[] = { "reduce<int, 256>", "fill<double>" };
	struct ctx *t = *state;
	float a = 2;
	uint64_t n = 4;
	int32_t i = 1;
	double dbl = 1;
	char c = 'c';
	struct gpux_arg saxpy_args[] = { GPUX_ARG_VALUE(a), GPUX_ARG_VALUE(n) };
	struct gpux_arg fill_f[] = { GPUX_ARG_VALUE(i), GPUX_ARG_VALUE(a) };
	struct gpux_arg fill_d[] = { GPUX_ARG_VALUE(i), GPUX_ARG_VALUE(dbl) };
	struct gpux_arg inner[] = { GPUX_ARG_VALUE(dbl), GPUX_ARG_VALUE(c) };
	struct gpux_arg plain[] = { GPUX_ARG_VALUE(i), GPUX_ARG_VALUE(dbl) };
	gpux_module *m = NULL;
	char *log = NULL;

	NEED(state);
	if (load(t, names_src, headers, 2, names, 2, &m, &log) != GPUX_OK)
		fail_msg("did not compile: %s", log ? log : "");
	free(log);
	/* A kernel with C++ linkage by its plain name, its qualified one, its mangled one; the
	 * parameters come from the cubin, so a wrong argument is still caught. */
	expect_run(t->c, m, "saxpy", 2, saxpy_args, 2, GPUX_OK, NULL);
	expect_run(t->c, m, "saxpy", 2, saxpy_args, 1, GPUX_E_INVAL, "takes 4 arguments");
	expect_run(t->c, m, "_Z5saxpyPKfPffy", 2, saxpy_args, 2, GPUX_OK, NULL);
	expect_run(t->c, m, "ns::inner", 0, inner, 2, GPUX_OK, NULL);
	expect_run(t->c, m, "ns::inner", 0, fill_d, 2, GPUX_E_INVAL, "argument 0");
	expect_run(t->c, m, "_ZN2ns5innerEdc", 0, inner, 2, GPUX_OK, NULL);
	expect_run(t->c, m, "plain", 0, plain, 2, GPUX_OK, NULL);
	/* Templates: an explicit instantiation and the listed expressions, however spaced. */
	expect_run(t->c, m, "fill<float>", 1, fill_f, 2, GPUX_OK, NULL);
	expect_run(t->c, m, "fill< float >", 1, fill_f, 2, GPUX_OK, NULL);
	expect_run(t->c, m, "fill<double>", 1, fill_d, 2, GPUX_OK, NULL);
	expect_run(t->c, m, "fill<double>", 1, fill_f, 2, GPUX_E_INVAL, "argument 2");
	expect_run(t->c, m, "reduce<int,256>", 2, NULL, 0, GPUX_OK, NULL);
	expect_run(t->c, m, "reduce<int, 128>", 2, NULL, 0, GPUX_E_NOTFOUND, "name expression");
	/* A template's bare name, an overload, nothing at all: each says what there is. */
	expect_run(t->c, m, "fill", 1, fill_f, 2, GPUX_E_NOTFOUND, "it is a template");
	expect_run(t->c, m, "over", 1, NULL, 0, GPUX_E_INVAL, "_Z4overPf");
	expect_run(t->c, m, "over", 1, NULL, 0, GPUX_E_INVAL, "_Z4overPi");
	expect_run(t->c, m, "_Z4overPi", 1, NULL, 0, GPUX_OK, NULL);
	expect_run(t->c, m, "nothing", 1, NULL, 0, GPUX_E_NOTFOUND, "plain");
	gpux_module_free(m);
}

/* Where a load's module came from (GPUX_MODULE_*); asserts it loaded. */
static uint32_t source_of(struct ctx *t, const char *src, const struct gpux_header *h,
			  const char *const *names, uint32_t nn, const char *options)
{
	struct gpux_module_opts o = {
		.size = sizeof(o),
		.options = options,
		.nheaders = h ? 1 : 0,
		.headers = h,
		.names = names,
		.nnames = nn,
	};
	struct gpux_module_info info;
	gpux_module *m = NULL;
	char *log = NULL;

	if (gpux_module_load_ex(t->c, GPUX_LANG_CUDA, src, strlen(src), &o, &m, &log) != GPUX_OK)
		fail_msg("did not compile: %s", log ? log : "");
	free(log);
	assert_int_equal(gpux_module_info(m, &info), GPUX_OK);
	gpux_module_free(m);
	return info.source;
}

/*
 * The module cache: a source that differs only in comments and spacing is the module loaded
 * before; one whose header, options or name expressions differ is compiled again.
 */
static void test_compile_cache_keys(void **state)
{
	static const char src[] = "#include \"scale.h\"\n"
				  "template <typename T> __global__ void k(T *p) "
				  "{ p[0] *= SCALE; }\n";
	static const char commented[] = "#include \"scale.h\"   // how much\n"
					"template <typename T>  __global__ void k(T *p) "
					"{ p[0] *= SCALE; /* in place */ }\n\n// done\n";
	static const struct gpux_header h = { "scale.h", "#define SCALE 2\n" };
	static const struct gpux_header h3 = { "scale.h", "#define SCALE 3\n" };
	static const char *const names[] = { "k<float>" }, *const other[] = { "k<double>" };
	struct ctx *t = *state;

	NEED(state);
	assert_int_equal(source_of(t, src, &h, names, 1, NULL), GPUX_MODULE_COMPILED);
	assert_int_equal(source_of(t, commented, &h, names, 1, NULL), GPUX_MODULE_MEMORY);
	assert_int_equal(source_of(t, commented, &h3, names, 1, NULL), GPUX_MODULE_COMPILED);
	assert_int_equal(source_of(t, commented, &h, other, 1, NULL), GPUX_MODULE_COMPILED);
	assert_int_equal(source_of(t, commented, &h, names, 1, "-DSCALE2"), GPUX_MODULE_COMPILED);
	assert_int_equal(source_of(t, commented, &h, names, 1, "-lineinfo"), GPUX_MODULE_COMPILED);
	assert_int_equal(source_of(t, src, &h, names, 1, "-lineinfo"), GPUX_MODULE_COMPILED);
	assert_int_equal(source_of(t, src, &h3, names, 1, NULL), GPUX_MODULE_MEMORY);
}

/* The precompiled headers (*.pch) in the worker's directory for them, or -1 without one. */
static int pch_files(struct ctx *t)
{
	char dir[512];
	struct dirent *de;
	int n = 0;
	DIR *d;

	(void)snprintf(dir, sizeof(dir), "%s/pch-%d", t->d.cache, (int)test_worker_pid(&t->d, 0));
	d = opendir(dir);
	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += strstr(de->d_name, ".pch") != NULL;
	(void)closedir(d);
	return n;
}

/*
 * Two different kernels that begin with the same #include: the first leaves NVRTC's
 * precompiled header in the helper's directory, the second compiles from it; neither's log
 * says a word of it. A source with named headers of its own makes none (NVRTC would not see
 * another text of a header of the same name). The directory goes with the worker.
 */
static void test_compile_precompiled_headers(void **state)
{
	static const char a[] = "#include <cooperative_groups.h>\n"
				"namespace cg = cooperative_groups;\n"
				"extern \"C\" __global__ void a(int *p)\n"
				"{ p[cg::this_thread_block().thread_rank()] = 1; }\n";
	static const char b[] = "#include <cooperative_groups.h>\n"
				"namespace cg = cooperative_groups;\n"
				"extern \"C\" __global__ void b(float *p)\n"
				"{ auto g = cg::tiled_partition<32>(cg::this_thread_block());\n"
				"  p[g.thread_rank()] = 2.0f; }\n";
	static const char c[] = "#include <cuda_fp16.h>\n#include \"mine.h\"\n"
				"extern \"C\" __global__ void c(__half *p) "
				"{ p[0] = __float2half(V); }\n";
	static const struct gpux_header h = { "mine.h", "#define V 1.5f\n" };
	struct ctx *t = *state;
	char dir[512];
	gpux_module *m;
	char *log;

	NEED(state);
	if (!have_landlock() || pch_files(t) < 0)
		skip();
	assert_int_equal(pch_files(t), 0);
	for (int i = 0; i < 2; i++) {
		log = NULL;
		if (load(t, i ? b : a, NULL, 0, NULL, 0, &m, &log) != GPUX_OK)
			fail_msg("did not compile: %s", log ? log : "");
		assert_true(!log || !strstr(log, "precompiled"));
		free(log);
		gpux_module_free(m);
		assert_int_equal(pch_files(t), 1);
	}
	assert_int_equal(load(t, c, &h, 1, NULL, 0, &m, NULL), GPUX_OK);
	gpux_module_free(m);
	assert_int_equal(pch_files(t), 1);
	(void)snprintf(dir, sizeof(dir), "%s/pch-%d", t->d.cache, (int)test_worker_pid(&t->d, 0));
	gpux_disconnect(t->c);
	test_daemon_stop(&t->d);
	t->c = NULL;
	assert_int_equal(access(dir, F_OK), -1);
	free(t);
	*state = NULL;
}

/* A name expression that names nothing fails the compile, as with NVRTC; limits hold. */
static void test_compile_bad_names_and_headers(void **state)
{
	static const char src[] = "template <typename T> __global__ void fill(T *p) { *p = 0; }\n";
	static const char *const bad[] = { "nosuch<int>" };
	struct gpux_header h = { "x.h", "" };
	struct ctx *t = *state;
	gpux_module *m = NULL;
	char *log = NULL, long_name[300];
	const char *names[1] = { long_name };

	NEED(state);
	assert_int_equal(load(t, src, NULL, 0, bad, 1, &m, &log), GPUX_E_COMPILE);
	assert_non_null(log);
	assert_non_null(strstr(log, "nosuch"));
	free(log);
	/* An instantiation inside a namespace reads as "g<int>", which names nothing at file
	 * scope: the source still compiles (again, without it), and ns::g<int> is found once
	 * listed. */
	{
		static const char ns_src[] =
			"namespace ns { template <typename T> __global__ void g(T *p) { *p = 0; }\n"
			"template __global__ void g<int>(int *); }\n";
		static const char *const listed[] = { "ns::g<int>" };

		log = NULL;
		if (load(t, ns_src, NULL, 0, NULL, 0, &m, &log) != GPUX_OK)
			fail_msg("did not compile: %s", log ? log : "");
		free(log);
		expect_run(t->c, m, "g<int>", 1, NULL, 0, GPUX_E_NOTFOUND, NULL);
		gpux_module_free(m);
		assert_int_equal(load(t, ns_src, NULL, 0, listed, 1, &m, NULL), GPUX_OK);
		expect_run(t->c, m, "ns::g<int>", 1, NULL, 0, GPUX_OK, NULL);
		gpux_module_free(m);
	}
	memset(long_name, 'a', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	assert_int_equal(load(t, src, NULL, 0, names, 1, &m, NULL), GPUX_E_INVAL);
	assert_int_equal(load(t, src, &h, GPUX_MODULE_HEADERS_MAX + 1, NULL, 0, &m, NULL),
			 GPUX_E_INVAL);
	h.name = "";
	assert_int_equal(load(t, src, &h, 1, NULL, 0, &m, NULL), GPUX_E_INVAL);
	/* Headers are for CUDA C++ only. */
	{
		struct gpux_module_opts o = { .size = sizeof(o), .nheaders = 1, .headers = &h };

		h.name = "x.h";
		assert_int_equal(
			gpux_module_load_ex(t->c, GPUX_LANG_PTX, ".version 8.0", 12, &o, &m, NULL),
			GPUX_E_INVAL);
	}
}

/* ---- gpux's own kernels (tests/kernels), as test-e2e-kernels runs them ---- */

static void test_compile_kernels(void **state)
{
	static const char *const red_names[] = {
		"reduce_tree<float>",
		"reduce_shfl<float, 256>",
		"reduce_stride<int,256,false>",
		"reduce_cg<double>",
	};
	static const char *const tmpl_names[] = { "reverse_scale<float>", "reverse_scale<int>" };
	static const char *const others[] = { kernel_atomics, kernel_half_math };
	struct gpux_header shared = { "block_shared.cuh", kernel_block_shared };
	struct ctx *t = *state;
	int32_t w = 32;
	uint32_t n = 1024;
	struct gpux_arg mm[] = { GPUX_ARG_VALUE(w), GPUX_ARG_VALUE(w) };
	struct gpux_arg red[] = { GPUX_ARG_VALUE(n) };
	struct gpux_arg va[] = { GPUX_ARG_VALUE(w) };
	gpux_module *m;
	char *log = NULL;

	NEED(state);
	if (!have_landlock())
		skip();
	/* vector_add: a plain C++ kernel. */
	assert_int_equal(load(t, kernel_vector_add, NULL, 0, NULL, 0, &m, NULL), GPUX_OK);
	expect_run(t->c, m, "vector_add", 3, va, 1, GPUX_OK, NULL);
	expect_run(t->c, m, "vector_add", 3, NULL, 0, GPUX_E_INVAL, "takes 4 arguments");
	gpux_module_free(m);
	/* matmul: cooperative groups, two kernels in one module. */
	assert_int_equal(load(t, kernel_matmul, NULL, 0, NULL, 0, &m, NULL), GPUX_OK);
	expect_run(t->c, m, "matmul_tile16", 3, mm, 2, GPUX_OK, NULL);
	expect_run(t->c, m, "matmul_tile32", 3, mm, 2, GPUX_OK, NULL);
	gpux_module_free(m);
	/* reduce: templates by name expression and one instantiated, the client's header. */
	if (load(t, kernel_reduce, &shared, 1, red_names, ARRAY_SIZE(red_names), &m, &log))
		fail_msg("reduce: %s", log ? log : "");
	free(log);
	for (unsigned i = 0; i < ARRAY_SIZE(red_names); i++)
		expect_run(t->c, m, red_names[i], 2, red, 1, GPUX_OK, NULL);
	expect_run(t->c, m, "reduce_tree<double>", 2, red, 1, GPUX_OK, NULL);
	expect_run(t->c, m, "reduce_cg<float>", 2, red, 1, GPUX_E_NOTFOUND, NULL);
	expect_run(t->c, m, "reduce_cg<double>", 2, NULL, 0, GPUX_E_INVAL, "takes 3 arguments");
	gpux_module_free(m);
	/* scale_shared: the client's header, a template kernel. */
	log = NULL;
	if (load(t, kernel_scale_shared, &shared, 1, tmpl_names, 2, &m, &log))
		fail_msg("scale_shared: %s", log ? log : "");
	free(log);
	expect_run(t->c, m, "reverse_scale<float>", 2, NULL, 0, GPUX_OK, NULL);
	expect_run(t->c, m, "reverse_scale<int>", 2, NULL, 0, GPUX_OK, NULL);
	gpux_module_free(m);
	/* misc: a namespace, overloads, extern "C"; warp: five pointers. */
	assert_int_equal(load(t, kernel_misc, NULL, 0, NULL, 0, &m, NULL), GPUX_OK);
	expect_run(t->c, m, "lib::coords", 1, NULL, 0, GPUX_OK, NULL);
	expect_run(t->c, m, "over", 1, NULL, 0, GPUX_E_INVAL, "_Z4overPf");
	expect_run(t->c, m, "c_linkage", 1, NULL, 0, GPUX_OK, NULL);
	gpux_module_free(m);
	assert_int_equal(load(t, kernel_warp, NULL, 0, NULL, 0, &m, NULL), GPUX_OK);
	expect_run(t->c, m, "votes", 5, NULL, 0, GPUX_OK, NULL);
	gpux_module_free(m);
	/* The others compile as they are. */
	for (unsigned i = 0; i < ARRAY_SIZE(others); i++) {
		log = NULL;
		if (load(t, others[i], NULL, 0, NULL, 0, &m, &log))
			fail_msg("kernel %u: %s", i, log ? log : "");
		free(log);
		gpux_module_free(m);
	}
}

/* ---- cubins, fatbins and PTX from the client ---- */

static const char cubin_src[] =
	"__global__ void saxpy(const float *x, float *y, float a) { y[0] = a * x[0]; }\n"
	"__global__ void over(int *p) { *p = 1; }\n"
	"__global__ void over(float *p) { *p = 1; }\n";

/* Load code of a language; the status, with a log that must hold `in_log` if not NULL. */
static void expect_load(struct ctx *t, uint32_t lang, const void *code, size_t len,
			gpux_status want, const char *in_log, gpux_module **ret)
{
	gpux_module *m = NULL;
	char *log = NULL;
	gpux_status st = gpux_module_load(t->c, lang, code, len, NULL, &m, &log);

	if (st != want || (in_log && (!log || !strstr(log, in_log))))
		fail_msg("status %d, wanted %d; log: %s", st, want, log ? log : "none");
	free(log);
	if (ret)
		*ret = m;
	else
		gpux_module_free(m);
}

static void test_compile_cubins_checked(void **state)
{
	struct ctx *t = *state;
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	float a = 1;
	struct gpux_arg sa[] = { GPUX_ARG_VALUE(a) };
	size_t len, len80, flen;
	_cleanup_(freep) uint8_t *c90 = NULL, *c80 = NULL, *bad = NULL, *fb = NULL;
	gpux_module *m;
	uint32_t gen;

	NEED(state);
	assert_int_equal(test_daemon_status(&t->d, &st, devs), 0);
	gen = devs[0].generation;
	c90 = test_nvrtc_compile(cubin_src, "sm_90", false, &len);
	c80 = test_nvrtc_compile(cubin_src, "sm_80", false, &len80);
	bad = malloc(len);
	assert_non_null(bad);

	/* The fake device is 9.0: its own cubin loads, its kernels found by their C++ names. */
	expect_load(t, GPUX_LANG_CUBIN, c90, len, GPUX_OK, NULL, &m);
	expect_run(t->c, m, "saxpy", 2, sa, 1, GPUX_OK, NULL);
	expect_run(t->c, m, "over", 1, NULL, 0, GPUX_E_INVAL, "is ambiguous");
	expect_run(t->c, m, "_Z4overPf", 1, NULL, 0, GPUX_OK, NULL);
	gpux_module_free(m);
	/* Another architecture's, or a broken one: refused before the driver sees it. */
	expect_load(t, GPUX_LANG_CUBIN, c80, len80, GPUX_E_INVAL, "made for sm_80", NULL);
	expect_load(t, GPUX_LANG_CUBIN, c90, len / 2, GPUX_E_INVAL, "outside the file", NULL);
	expect_load(t, GPUX_LANG_CUBIN, c90, 40, GPUX_E_INVAL, "not an ELF file", NULL);
	memcpy(bad, c90, len);
	bad[18] = 62; /* e_machine: x86-64 */
	expect_load(t, GPUX_LANG_CUBIN, bad, len, GPUX_E_INVAL, "machine 62", NULL);
	memcpy(bad, c90, len);
	bad[4] = 1; /* ELFCLASS32 */
	expect_load(t, GPUX_LANG_CUBIN, bad, len, GPUX_E_INVAL, "64-bit", NULL);
	memcpy(bad, c90, len);
	memset(bad + 0x28, 0x7f, 8); /* e_shoff far away */
	expect_load(t, GPUX_LANG_CUBIN, bad, len, GPUX_E_INVAL, "outside the file", NULL);
	expect_load(t, GPUX_LANG_CUBIN, "garbage, not a cubin", 20, GPUX_E_INVAL, "not a cubin",
		    NULL);
	/* Fatbins: one with code for the device loads, one without names what it has. */
	fb = test_fatbin(c90, len, 90, &flen);
	expect_load(t, GPUX_LANG_CUBIN, fb, flen, GPUX_OK, NULL, &m);
	expect_run(t->c, m, "saxpy", 2, sa, 1, GPUX_OK, NULL);
	gpux_module_free(m);
	free(fb);
	fb = test_fatbin(c80, len80, 80, &flen);
	expect_load(t, GPUX_LANG_CUBIN, fb, flen, GPUX_E_INVAL, "no code for sm_90 (it has: sm_80",
		    NULL);
	expect_load(t, GPUX_LANG_CUBIN, fb, flen - 8, GPUX_E_INVAL, "fatbin", NULL);
	/* None of that hurt the worker. */
	assert_int_equal(test_daemon_status(&t->d, &st, devs), 0);
	assert_int_equal(devs[0].generation, gen);
}

static void test_compile_ptx_names(void **state)
{
	static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
				  ".visible .entry _Z4overPf(.param .u64 p0)\n{\n\tret;\n}\n"
				  ".visible .entry _Z4overPi(.param .u64 p0)\n{\n\tret;\n}\n"
				  ".visible .entry _ZN2ns4stepEPf(.param .u64 p0)\n{\n\tret;\n}\n";
	struct ctx *t = *state;
	gpux_module *m;

	NEED(state);
	expect_load(t, GPUX_LANG_PTX, ptx, sizeof(ptx), GPUX_OK, NULL, &m);
	expect_run(t->c, m, "ns::step", 1, NULL, 0, GPUX_OK, NULL);
	expect_run(t->c, m, "over", 1, NULL, 0, GPUX_E_INVAL, "_Z4overPf, _Z4overPi");
	expect_run(t->c, m, "_Z4overPi", 1, NULL, 0, GPUX_OK, NULL);
	expect_run(t->c, m, "step", 1, NULL, 0, GPUX_E_NOTFOUND, "_ZN2ns4stepEPf");
	gpux_module_free(m);
}

/* ---- the helper's death ---- */

/* CPU time (ticks) a process has used. */
static long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024];
	long utime = 0, stime = 0;
	const char *fields;

	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fields = proc_stat_fields(path, buf, sizeof(buf));
	if (!fields)
		return -1;
	if (sscanf(fields, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime) !=
	    2)
		utime = -1;
	return utime + stime;
}

/* Wait (up to 10 s) until a process has exited: gone, or a zombie (its fds closed). */
static void wait_dead(pid_t pid)
{
	char path[64], buf[1024];
	const char *fields;

	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (int i = 0; i < 1000; i++) {
		fields = proc_stat_fields(path, buf, sizeof(buf));
		if (!fields || fields[0] == 'Z' || fields[0] == 'X')
			return;
		(void)usleep(10000);
	}
	fail_msg("process %d did not die", (int)pid);
}

struct killer {
	pid_t helper;
	long from;
};

/*
 * Once the helper is busy compiling, it gets SIGSYS, as a call its sandbox forbids would
 * give it (test-worker-compile-sandbox shows that such calls do): the worker must tell the client
 * why, stay up, and compile the next module with a new helper.
 */
static void *kill_when_busy(void *arg)
{
	struct killer *k = arg;

	for (int i = 0; i < 20000; i++) {
		long now = cpu_ticks(k->helper);

		if (now < 0 || now >= k->from + 3) {
			(void)kill(k->helper, SIGSYS);
			break;
		}
		(void)usleep(1000);
	}
	return NULL;
}

static const char small_src[] = "__global__ void k(int *p) { *p = 1; }\n";

static void test_compile_helper_death_is_not_the_worker(void **state)
{
	struct ctx *t = *state;
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct killer k;
	pthread_t th;
	uint32_t gen;
	gpux_module *m = NULL;
	char *log = NULL;

	NEED(state);
	if (!have_landlock())
		skip();
	assert_int_equal(test_daemon_status(&t->d, &st, devs), 0);
	gen = devs[0].generation;
	/* A first compile: the helper has warmed up, and waits. */
	assert_int_equal(load(t, small_src, NULL, 0, NULL, 0, &m, NULL), GPUX_OK);
	gpux_module_free(m);
	k.helper = test_compiler_of(test_worker_pid(&t->d, 0));
	assert_true(k.helper > 0);
	k.from = cpu_ticks(k.helper);
	/* A compile of a few hundred ms at least, killed in the middle. */
	assert_int_equal(pthread_create(&th, NULL, kill_when_busy, &k), 0);
	assert_int_equal(load(t, toolkit_src, NULL, 0, NULL, 0, &m, &log), GPUX_E_COMPILE);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_non_null(log);
	assert_non_null(strstr(log, "killed by its sandbox"));
	free(log);
	/* The worker lives on, and the next compile gets a new helper. */
	assert_int_equal(load(t, "__global__ void k() { oops; }", NULL, 0, NULL, 0, &m, NULL),
			 GPUX_E_COMPILE);
	assert_int_equal(
		load(t, "__global__ void k2(int *p) { *p = 2; }", NULL, 0, NULL, 0, &m, NULL),
		GPUX_OK);
	gpux_module_free(m);
	assert_int_equal(test_daemon_status(&t->d, &st, devs), 0);
	assert_int_equal(devs[0].generation, gen);
	/* An idle helper killed: the next compile does not even notice. */
	k.helper = test_compiler_of(test_worker_pid(&t->d, 0));
	assert_true(k.helper > 0);
	assert_int_equal(kill(k.helper, SIGSYS), 0);
	wait_dead(k.helper);
	assert_int_equal(load(t, toolkit_src, NULL, 0, NULL, 0, &m, NULL), GPUX_OK);
	gpux_module_free(m);
}

/* The helper's address space is limited (the default: 4 GiB, or half the machine's), and a
 * root worker's helper has no capabilities. */
static void test_compile_helper_is_limited(void **state)
{
	struct ctx *t = *state;
	char path[64], line[256], want[64] = "";
	struct sysinfo si;
	uint64_t mem;
	bool seen = false;
	FILE *f;
	pid_t helper;

	NEED(state);
	/* No limit under the sanitizers, whose shadow memory takes terabytes of address space. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	skip();
#endif
	assert_int_equal(sysinfo(&si), 0);
	mem = (uint64_t)si.totalram * si.mem_unit;
	(void)snprintf(want, sizeof(want), " %llu ", (unsigned long long)MIN(4ull << 30, mem / 2));
	helper = test_compiler_of(test_worker_pid(&t->d, 0));
	assert_true(helper > 0);
	(void)snprintf(path, sizeof(path), "/proc/%d/limits", (int)helper);
	f = fopen(path, "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "Max address space", 17) == 0) {
			seen = true;
			if (!strstr(line, want))
				fail_msg("the helper's limit is not%s: %s", want, line);
		}
	(void)fclose(f);
	assert_true(seen);
	(void)snprintf(path, sizeof(path), "/proc/%d/status", (int)helper);
	f = fopen(path, "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "CapEff:", 7) == 0 && !strstr(line, "0000000000000000"))
			fail_msg("the helper has capabilities: %s", line);
	(void)fclose(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_compile_toolkit_headers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compile_no_file_outside_the_toolkit, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_compile_headers_and_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compile_bad_names_and_headers, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_compile_cache_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compile_precompiled_headers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compile_kernels, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compile_cubins_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compile_ptx_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compile_helper_death_is_not_the_worker, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_compile_helper_is_limited, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
