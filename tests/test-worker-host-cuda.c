/* SPDX-License-Identifier: MIT */
/* tests/test-worker-host-cuda.c: the host back end's CUDA C++: scan, build, blocks run here. */
#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <gpux/cuda-host/gpux_cuda_abi.h>

#include "helpers.h"
#include "host-cuda.h"
#include "host-cuscan.h"
#include "macro.h"
#include "proto.h"
#include "sandbox.h"
#include "wrk.h"

/* ---- the scan of preprocessed source ---- */

static const char scanned_src[] =
	"# 1 \"/d/src/kernel.cu\"\n"
	"# 1 \"/usr/include/x.h\" 1 3\n"
	"__gpux_global__ void in_system_header(int *p) {}\n"
	"static inline void f() { __asm__(\"nop\"); }\n"
	"# 2 \"/d/src/kernel.cu\" 2\n"
	"__gpux_global__ void plain(const float *__restrict__ a, int n = 3, int m = f(1, 2)) { }\n"
	"namespace a { namespace b {\n"
	"__gpux_global__ void nested(int *p);\n"
	"__gpux_global__ void nested(int *p) { extern __gpux_shared__ float sa[]; if (p) { } }\n"
	"template <class T> __gpux_global__ void tmpl(T *p) { }\n"
	"template __gpux_global__ void tmpl<int>(int *);\n"
	"struct s { void m() { extern __gpux_shared__ int in_member[]; } };\n"
	"} }\n"
	"namespace { __gpux_global__ void anon(int x) { } }\n"
	"extern \"C\" { __gpux_global__ void c_one(int *p)\n"
	"{ extern __gpux_shared__ __attribute__((aligned(16))) char sc[]; } }\n"
	"extern \"C\" __gpux_global__ void c_two(int *p) { }\n"
	"namespace q = a::b;\n"
	"__gpux_global__ void a::b::outside(float x) { extern __gpux_shared__ float sa[]; }\n"
	"const char *raw = R\"x(\n# 1 \"/not/a/marker\"\n)x\";\n"
	"void host_only() { }\n";

static void test_host_cuda_scan_finds_kernels_and_shared_arrays(void **state)
{
	static const struct {
		const char *scope, *name, *params;
		bool c;
	} want[] = {
		{ "", "plain", "const float *__restrict__ a, int n, int m", false },
		{ "a::b", "nested", "int *p", false },
		{ "", "anon", "int x", false },
		{ "", "c_one", "int *p", true },
		{ "", "c_two", "int *p", true },
		{ "", "a::b::outside", "float x", false },
	};
	static const char *const shared[] = { "_ZN1a1b2saE", "_ZN1a1b9in_memberE", "sc", "sa" };
	struct wrk_cuscan sc;

	assert_int_equal(wrk_cuscan_run(scanned_src, strlen(scanned_src), "/d/src/", &sc), 0);
	assert_null(sc.unsupported);
	assert_int_equal(sc.nkernels, ARRAY_SIZE(want));
	for (unsigned i = 0; i < ARRAY_SIZE(want); i++) {
		/* The anonymous namespace is an empty part of the scope. */
		const char *scope = i == 2 ? "" : want[i].scope;

		assert_string_equal(sc.kernels[i].scope, scope);
		assert_string_equal(sc.kernels[i].name, want[i].name);
		assert_string_equal(sc.kernels[i].params, want[i].params);
		assert_int_equal(sc.kernels[i].c_linkage, want[i].c);
	}
	assert_int_equal(sc.nshared, ARRAY_SIZE(shared));
	for (unsigned i = 0; i < ARRAY_SIZE(shared); i++)
		assert_string_equal(sc.shared[i], shared[i]);
	wrk_cuscan_done(&sc);
}

/* __device__ and __constant__ variables at namespace scope, each once; nothing else. */
static void test_host_cuda_scan_finds_variables(void **state)
{
	static const char src[] =
		"# 1 \"/usr/include/x.h\" 1 3\n"
		"__gpux_device__ int in_system_header;\n"
		"# 1 \"/d/src/kernel.cu\"\n"
		"__gpux_constant__ float coeffs[4] = { 1, 2, 3, 4 };\n"
		"__gpux_device__ __gpux_constant__ int both;\n"
		"static __gpux_device__ unsigned long long a = 1, *b, c[2] { 3, 4 };\n"
		"__gpux_device__ __attribute__((aligned(16))) pair<int, float> pr;\n"
		"namespace ns { __gpux_device__ double scale = 2.5; }\n"
		"namespace { __gpux_device__ int anon; }\n"
		"extern \"C\" { __gpux_device__ int c_var; }\n"
		"__gpux_device__ float twice(float x) { return 2 * x; }\n"
		"__gpux_host__ __gpux_device__ int both_sides(int);\n"
		"extern __gpux_device__ int declared_only;\n"
		"extern \"C\" __gpux_device__ int declared_c;\n"
		"template <class T> __gpux_device__ T tvar;\n"
		"__gpux_device__ __gpux_shared__ int in_shared;\n"
		"__gpux_device__ struct S { int v; } s_var;\n"
		"__gpux_device__ int (*fptr)(int);\n"
		"struct K { __gpux_device__ static int member; };\n"
		"__gpux_global__ void k(int *p) { __gpux_device__ int local; }\n";
	static const struct {
		const char *scope, *name, *symbol;
	} want[] = {
		{ "", "coeffs", "coeffs" },
		{ "", "both", "both" },
		{ "", "a", "a" },
		{ "", "b", "b" },
		{ "", "c", "c" },
		{ "", "pr", "pr" },
		{ "ns", "scale", "_ZN2ns5scaleE" },
		{ "", "anon", "_ZN12_GLOBAL__N_14anonE" },
		{ "", "c_var", "c_var" },
	};
	struct wrk_cuscan sc;

	assert_int_equal(wrk_cuscan_run(src, strlen(src), "/d/src/", &sc), 0);
	assert_null(sc.unsupported);
	assert_int_equal(sc.nglobals, ARRAY_SIZE(want));
	for (unsigned i = 0; i < ARRAY_SIZE(want); i++) {
		assert_string_equal(sc.globals[i].scope, want[i].scope);
		assert_string_equal(sc.globals[i].name, want[i].name);
		assert_string_equal(sc.globals[i].symbol, want[i].symbol);
	}
	wrk_cuscan_done(&sc);
}

static void test_host_cuda_scan_names_what_the_host_lacks(void **state)
{
	static const struct {
		const char *text, *what;
	} cases[] = {
		{ "# 1 \"/d/src/kernel.cu\"\n\nvoid f() { asm(\"x\"); }\n",
		  "inline assembly (asm) at /d/src/kernel.cu:2" },
		{ "# 1 \"/d/src/lib/h.cuh\"\nvoid f() { __asm__ volatile(\"\"); }\n",
		  "inline assembly" },
		{ "# 1 \"/d/src/kernel.cu\"\nvoid f() { k<<<1, 2>>>(); }\n",
		  "dynamic parallelism" },
		{ "# 1 \"/d/src/kernel.cu\"\n# 1 \"/usr/local/include/cub/cub.cuh\" 1 3\nint x;\n",
		  "CUB" },
		{ "# 1 \"/d/src/kernel.cu\"\n# 1 \"/opt/t/include/thrust/sort.h\" 1 3\nint x;\n",
		  "Thrust" },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		struct wrk_cuscan sc;

		assert_int_equal(
			wrk_cuscan_run(cases[i].text, strlen(cases[i].text), "/d/src/", &sc), 0);
		if (!sc.unsupported || !strstr(sc.unsupported, cases[i].what))
			fail_msg("case %u: %s", i, sc.unsupported ? sc.unsupported : "nothing");
		wrk_cuscan_done(&sc);
	}
	/* Not in a client's file, or not three '<' together: nothing. */
	{
		static const char ok[] = "# 1 \"/d/inc/x.h\" 3\nvoid f() { asm(\"x\"); }\n"
					 "# 1 \"/d/src/kernel.cu\"\nint a = 1 << < 2;\n";
		struct wrk_cuscan sc;

		assert_int_equal(wrk_cuscan_run(ok, strlen(ok), "/d/src/", &sc), 0);
		assert_null(sc.unsupported);
		wrk_cuscan_done(&sc);
	}
}

/* ---- the build ---- */

/* Build CUDA C++ with c++: the status, the image (to free) when it built, the log. */
static int build(const char *source, const char *options, const struct gpux_header *h, unsigned nh,
		 const char *const *names, unsigned nn, uint8_t **ret_image, size_t *ret_len,
		 char **ret_log)
{
	const char *cxx = getenv("GPUX_HOST_CXX") ? getenv("GPUX_HOST_CXX") : "c++";
	uint8_t extra[8192];
	size_t elen = 0;
	struct wrk_build b = {
		.lang = GPUX_LANG_CUDA,
		.code = (const uint8_t *)source,
		.code_len = strlen(source),
		.options = options,
		.extra = extra,
		.nheaders = nh,
		.nnames = nn,
	};
	int fds = test_fd_count(), r;

	/* The block after the code as the protocol has it (ipc/proto.h): headers { name_len,
	 * text_len, name, text }, then expressions { len, expression }. */
	for (unsigned i = 0; i < nh + nn; i++) {
		const char *name = i < nh ? h[i].name : names[i - nh];
		const char *text = i < nh ? h[i].text : NULL;
		uint32_t nl = (uint32_t)strlen(name), tl = text ? (uint32_t)strlen(text) : 0;

		assert_true(elen + 8 + nl + tl <= sizeof(extra));
		memcpy(extra + elen, &nl, 4);
		elen += 4;
		if (text) {
			memcpy(extra + elen, &tl, 4);
			elen += 4;
		}
		memcpy(extra + elen, name, nl);
		elen += nl;
		if (text) {
			memcpy(extra + elen, text, tl);
			elen += tl;
		}
	}
	b.extra_len = elen;
	assert_int_equal(ipc_mod_extra_check(extra, elen, nh, nn), 0);
	*ret_image = NULL;
	*ret_log = NULL;
	/* In the cage the worker gives it (worker/host/host-cage.h): 4 GiB, 256 MiB files, 120 s.
	 */
	{
		struct wrk_host_cage cg;

		assert_int_equal(wrk_host_cage_init(&cg, 4ull << 30, WRK_CLIENT_MOD_BYTES,
						    120 * NSEC_PER_SEC),
				 0);
		assert_int_equal(wrk_host_cage_add_compiler(&cg, cxx), 0);
		r = wrk_host_cuda_build(&cg, cxx, &b, ret_image, ret_len, ret_log);
		wrk_host_cage_done(&cg);
	}
	assert_no_fd_leak(fds);
	return r;
}

static const char module_src[] =
	"#include \"util.cuh\"\n"
	"namespace ns {\n"
	"__global__ void scale(float *p, float a, unsigned n)\n"
	"{\n"
	"	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
	"	if (i < n)\n"
	"		p[i] = twice(p[i]) * a;\n"
	"}\n"
	"}\n"
	"/* Each lane of each warp: the warp's sum; then the block's through shared memory. */\n"
	"__global__ void sums(const int *in, int *out)\n"
	"{\n"
	"	extern __shared__ int part[];\n"
	"	unsigned t = threadIdx.x;\n"
	"	int v = in[t];\n"
	"	for (int d = 16; d > 0; d /= 2)\n"
	"		v += __shfl_xor_sync(0xffffffffu, v, d);\n"
	"	if (t % 32 == 0)\n"
	"		part[t / 32] = v;\n"
	"	__syncthreads();\n"
	"	out[t] = v + 1000 * part[blockDim.x / 32 - 1];\n"
	"}\n"
	"template <class T> __global__ void fill(T *p, T v) { p[threadIdx.x] = v; }\n";

static const struct gpux_header util_h = { "util.cuh",
					   "__device__ float twice(float x) { return 2 * x; }\n" };

static void *stack_top(uint32_t i)
{
	static char *stacks[64];

	if (i >= 64)
		return NULL;
	if (!stacks[i])
		stacks[i] = mmap(NULL, GPUX_CU_STACK_BYTES, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return stacks[i] == MAP_FAILED ? NULL : stacks[i] + GPUX_CU_STACK_BYTES;
}

/* The kernel of table mi named (as the table has it) name. */
static const struct gpux_cu_kernel *kernel(const struct gpux_cu_module *mi, const char *name)
{
	for (uint32_t i = 0; i < mi->nkernels; i++) {
		const struct gpux_cu_kernel *k = mi->kernels[i];

		if (strcmp(k->name, name) == 0)
			return k;
	}
	fail_msg("no kernel %s", name);
	return NULL;
}

/* Built with a header and a name expression, the module passes the sandbox's check and runs
 * its blocks here as the worker would. */
static void test_host_cuda_build_makes_a_module_that_runs(void **state)
{
	static const char *const names[] = { "fill<float>" };
	_cleanup_(freep) uint8_t *image = NULL;
	char path[] = "/tmp/gpux-test-module-XXXXXX";
	const struct gpux_cu_module *mi;
	const struct gpux_cu_kernel *k;
	struct gpux_cu_launch l = { .abi = GPUX_CU_ABI, .stack = stack_top };
	float p[64], a = 3, v = 7;
	int in[64], out[64];
	unsigned n = 60;
	void *pp = p, *pin = in, *pout = out;
	void *scale_args[] = { &pp, &a, &n }, *sum_args[] = { &pin, &pout },
	     *fill_args[] = { &pp, &v };
	size_t len;
	char *log, *msg = NULL;
	void *dl;
	int fd;

	if (build(module_src, "-DX=1 --use_fast_math -std=c++17 -lineinfo", &util_h, 1, names, 1,
		  &image, &len, &log) != 0)
		fail_msg("build: %s", log ? log : "");
	free(log);
	assert_memory_equal(image, ELFMAG, SELFMAG);
	if (wrk_sandbox_image_check(image, len, &msg) < 0)
		fail_msg("the sandbox refuses it: %s", msg);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, image, len), (ssize_t)len);
	(void)close(fd);
	dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	(void)unlink(path);
	assert_non_null(dl);
	mi = dlsym(dl, "gpux_cu_module_info");
	assert_non_null(mi);
	assert_int_equal(mi->abi, GPUX_CU_ABI);
	assert_int_equal(mi->nexprs, 1);
	assert_int_equal(mi->nkernels, 3); /* fill<float>, ns::scale, sums */

	k = kernel(mi, "ns::scale");
	assert_int_equal(k->nparams, 3);
	assert_int_equal(k->param_size[0], sizeof(float *));
	assert_int_equal(k->param_size[1], sizeof(float));
	for (unsigned i = 0; i < 64; i++)
		p[i] = (float)i;
	l.grid_dim = (struct gpux_cu_dim3){ 2, 1, 1 };
	l.block_dim = (struct gpux_cu_dim3){ 32, 1, 1 };
	for (uint32_t b = 0; b < 2; b++) {
		l.block_idx.x = b;
		assert_int_equal(k->run(&l, scale_args), 0);
	}
	for (unsigned i = 0; i < 64; i++)
		assert_true(p[i] == (i < n ? 6.0f * (float)i : (float)i));

	/* Shuffles and a barrier: fibers. */
	k = kernel(mi, "sums");
	for (unsigned i = 0; i < 64; i++)
		in[i] = (int)i;
	l.grid_dim.x = 1;
	l.block_dim.x = 64;
	l.block_idx.x = 0;
	l.shared_bytes = 8;
	assert_int_equal(k->run(&l, sum_args), 0);
	for (unsigned i = 0; i < 64; i++)
		assert_int_equal(out[i], (i < 32 ? 496 : 1520) + 1000 * 1520);
	/* More dynamic shared memory than a block has: refused. */
	l.shared_bytes = GPUX_CU_DYN_SHARED_MAX + 1;
	assert_int_equal(k->run(&l, sum_args), GPUX_CU_REFUSED);
	assert_non_null(strstr(l.error, "dynamic shared memory"));
	l.shared_bytes = 0;

	k = kernel(mi, "fill<float>");
	assert_int_equal(k->run(&l, fill_args), 0);
	assert_true(p[63] == 7.0f);
	(void)dlclose(dl);
}

/* A block whose threads wait for each other forever fails, saying so. */
static void test_host_cuda_block_deadlock_fails_it(void **state)
{
	static const char src[] =
		"__global__ void k(int *p)\n"
		"{\n"
		"	if (threadIdx.x == 3)\n"
		"		__syncthreads();\n"
		"	else\n"
		"		__shfl_sync(0xffffffffu, 1, 0);\n"
		"	p[threadIdx.x] = 1;\n"
		"}\n"
		"__global__ void mixed(int *p)\n"
		"{\n"
		"	p[threadIdx.x] = threadIdx.x < 16 ? __ballot_sync(0xffffffffu, 1)\n"
		"					    : __any_sync(0xffffffffu, 1);\n"
		"}\n";
	_cleanup_(freep) uint8_t *image = NULL;
	char path[] = "/tmp/gpux-test-module-XXXXXX";
	const struct gpux_cu_module *mi;
	struct gpux_cu_launch l = { .abi = GPUX_CU_ABI,
				    .stack = stack_top,
				    .grid_dim = { 1, 1, 1 },
				    .block_dim = { 32, 1, 1 } };
	int p[32];
	void *pp = p, *args[] = { &pp };
	size_t len;
	char *log;
	void *dl;
	int fd;

	if (build(src, "", NULL, 0, NULL, 0, &image, &len, &log) != 0)
		fail_msg("build: %s", log ? log : "");
	free(log);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, image, len), (ssize_t)len);
	(void)close(fd);
	dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	(void)unlink(path);
	assert_non_null(dl);
	mi = dlsym(dl, "gpux_cu_module_info");
	assert_non_null(mi);
	assert_int_equal(kernel(mi, "k")->run(&l, args), GPUX_CU_FAILED);
	assert_non_null(strstr(l.error, "deadlock"));
	assert_int_equal(kernel(mi, "mixed")->run(&l, args), GPUX_CU_FAILED);
	assert_non_null(strstr(l.error, "different warp operations"));
	(void)dlclose(dl);
}

static void test_host_cuda_build_refuses_what_it_must(void **state)
{
	static const struct gpux_header bad[] = {
		{ "../up.h", "int x;\n" },
		{ "/abs.h", "int x;\n" },
		{ "a//b.h", "int x;\n" },
	};
	static const char *const bad_names[] = { "f<int>); int evil(" };
	static const char src[] = "__global__ void k() {}\n";
	uint8_t *image;
	size_t len;
	char *log;

	/* NVRTC's options only. */
	assert_int_equal(build(src, "-I/etc", NULL, 0, NULL, 0, &image, &len, &log), GPUX_E_INVAL);
	assert_non_null(strstr(log, "-I/etc"));
	free(log);
	assert_int_equal(build(src, "-fplugin=x.so", NULL, 0, NULL, 0, &image, &len, &log),
			 GPUX_E_INVAL);
	free(log);
	/* A header must be a file in the build's own folder. */
	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(build(src, "", &bad[i], 1, NULL, 0, &image, &len, &log),
				 GPUX_E_COMPILE);
		assert_non_null(strstr(log, bad[i].name));
		free(log);
	}
	/* A name expression is template arguments, not code. */
	assert_int_equal(build(src, "", NULL, 0, bad_names, 1, &image, &len, &log), GPUX_E_COMPILE);
	assert_non_null(strstr(log, "name expression"));
	free(log);
	/* What needs the C++ run time does not link. */
	assert_int_equal(build("__global__ void k(int **p) { *p = new int; }\n", "", NULL, 0, NULL,
			       0, &image, &len, &log),
			 GPUX_E_COMPILE);
	assert_non_null(strstr(log, "operator new"));
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_cuda_scan_finds_kernels_and_shared_arrays),
		cmocka_unit_test(test_host_cuda_scan_finds_variables),
		cmocka_unit_test(test_host_cuda_scan_names_what_the_host_lacks),
		cmocka_unit_test(test_host_cuda_build_makes_a_module_that_runs),
		cmocka_unit_test(test_host_cuda_block_deadlock_fails_it),
		cmocka_unit_test(test_host_cuda_build_refuses_what_it_must),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
