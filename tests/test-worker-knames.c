/* SPDX-License-Identifier: MIT */
/* tests/test-worker-knames.c: kernel names: name expressions, C++ names, and a source's instantiations. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-image.h"
#include "helpers.h"
#include "knames.h"
#include "macro.h"

static int collect(const char *expr, size_t len, void *userdata)
{
	char *list = userdata;

	if (*list)
		strcat(list, "|");
	strncat(list, expr, len);
	return 0;
}

static void scan_is(const char *src, const char *want)
{
	char list[1024] = "";

	assert_int_equal(wrk_knames_scan(src, strlen(src), collect, list), 0);
	if (strcmp(list, want) != 0)
		fail_msg("scan of\n%s\ngave \"%s\", wanted \"%s\"", src, list, want);
}

static void test_knames_scan_finds_kernel_instantiations(void **state)
{
	/* The kernels' templates, then their explicit instantiations in the usual forms. */
	scan_is("template <typename T> __global__ void fill(T *p, int n) { }\n"
		"template __global__ void fill<float>(float *, int);\n"
		"template void fill<double>(double *, int);\n"
		"namespace ns { template <int B> __global__ void __launch_bounds__(256) r(int *p) "
		"{} }\n"
		"template __global__ void ns::r<256>(int *);\n"
		"template __global__ void fill<vec<int, 2>>(vec<int, 2> *, int);\n",
		"fill<float>|fill<double>|ns::r<256>|fill<vec<int, 2>>");
}

static void test_knames_scan_skips_what_is_not_one(void **state)
{
	/* Comments, strings, preprocessor lines, declarations of templates, instantiations of
	 * device functions and classes, extern templates, deduced arguments. */
	scan_is("// template __global__ void fill<float>(float *);\n"
		"/* template __global__ void fill<int>(int *); */\n"
		"#define INST template __global__ void fill<char>(char *);\n"
		"#if 0\n#endif\n"
		"const char *s = \"template __global__ void fill<long>(long *);\";\n"
		"const char *r = R\"x(template __global__ void fill<short>(short *);)x\";\n"
		/* The longest delimiter a raw string may have (16), and quotes inside it. */
		"const char *q = R\"0123456789abcdef(\" template __global__ void fill<int>(int *); "
		"\")0123456789abcdef\";\n"
		"template <typename T> __device__ T twice(T x) { return 2 * x; }\n"
		"template __device__ float twice<float>(float);\n"
		"template <typename T> struct S { };\n"
		"template struct S<int>;\n"
		"template <typename T> __global__ void fill(T *p) { }\n"
		"extern template __global__ void fill<unsigned>(unsigned *);\n"
		"template __global__ void fill(double *);\n"
		"int x = 1'000'000;\n",
		"");
}

static void test_knames_same_as_cpp_reads_it(void **state)
{
	assert_true(wrk_knames_same("reduce<int, 256>", "reduce<int,256>"));
	assert_true(wrk_knames_same(" reduce < int , 256 > ", "reduce<int,256>"));
	assert_true(wrk_knames_same("f<unsigned  int>", "f<unsigned int>"));
	assert_false(wrk_knames_same("f<unsignedint>", "f<unsigned int>"));
	assert_false(wrk_knames_same("f<int>", "f<int >x"));
	assert_false(wrk_knames_same("f<int>", "f<long>"));
	assert_true(wrk_knames_same("", "  "));
}

/* A module image of PTX with these .entry kernels and (expression, symbol) pairs, its names
 * kept in at most max_bytes; NULL when they do not fit. */
static struct wrk_knames *names_max(const char *const *entries, unsigned n, const char *pairs,
				    size_t pairs_len, uint32_t npairs, size_t max_bytes)
{
	char ptx[4096] = ".version 8.0\n.target sm_90\n.address_size 64\n";
	struct wrk_cuimage img;
	struct wrk_knames *k;
	uint8_t *p;
	size_t len;
	int r;

	for (unsigned i = 0; i < n; i++) {
		strcat(ptx, ".visible .entry ");
		strcat(ptx, entries[i]);
		strcat(ptx, "(.param .u64 p)\n{\n\tret;\n}\n");
	}
	assert_int_equal(wrk_cuimage_pack(ptx, strlen(ptx) + 1, pairs, pairs_len, npairs, &p, &len),
			 0);
	assert_int_equal(wrk_cuimage_parse(p, len, &img), 0);
	r = wrk_knames_new(&img, max_bytes, &k);
	assert_true(r == 0 || r == -E2BIG);
	free(p);
	return r == 0 ? k : NULL;
}

static struct wrk_knames *names_of(const char *const *entries, unsigned n, const char *pairs,
				   size_t pairs_len, uint32_t npairs)
{
	struct wrk_knames *k = names_max(entries, n, pairs, pairs_len, npairs, SIZE_MAX);

	assert_non_null(k);
	return k;
}

static void match_is(struct wrk_knames *k, const char *name, int want, const char *in)
{
	const char *sym = NULL;
	char *msg = NULL;
	int r = wrk_knames_match(k, name, &sym, &msg);

	if (r != want)
		fail_msg("%s: %d (%s), wanted %d", name, r, msg ? msg : "", want);
	if (r == 0 && strcmp(sym, in) != 0)
		fail_msg("%s: %s, wanted %s", name, sym, in);
	if (r < 0 && (!msg || !strstr(msg, in)))
		fail_msg("%s: \"%s\" lacks \"%s\"", name, msg ? msg : "", in);
	free(msg);
}

static void test_knames_match_cpp_names(void **state)
{
	static const char *const entries[] = {
		"_Z5saxpyPKfPffy",     "_Z4overPi",          "_Z4overPf",
		"_ZN2ns5innerEdc",     "_ZN2ns3sub5innerEv", "_Z4fillIfEvPT_i",
		"_ZN2ns4fillIiEEvPT_", "_ZL4statPi",         "plain",
	};
	static const char pairs[] = "fill<float>\0_Z4fillIfEvPT_i\0";
	struct wrk_knames *k = names_of(entries, ARRAY_SIZE(entries), pairs, sizeof(pairs) - 1, 1);

	assert_string_equal(wrk_knames_lowered(k, "fill< float >"), "_Z4fillIfEvPT_i");
	assert_null(wrk_knames_lowered(k, "fill<double>"));
	match_is(k, "saxpy", 0, "_Z5saxpyPKfPffy");
	match_is(k, "::saxpy", 0, "_Z5saxpyPKfPffy");
	match_is(k, "ns::inner", 0, "_ZN2ns5innerEdc");
	match_is(k, "ns::sub::inner", 0, "_ZN2ns3sub5innerEv");
	match_is(k, "stat", 0, "_ZL4statPi");
	match_is(k, "over", -ENOTUNIQ, "_Z4overPi, _Z4overPf");
	match_is(k, "fill", -ENOENT, "_Z4fillIfEvPT_i");
	match_is(k, "ns::fill", -ENOENT, "it is a template");
	match_is(k, "inner", -ENOENT, "_ZN2ns5innerEdc, _ZN2ns3sub5innerEv");
	match_is(k, "sax", -ENOENT, "no kernel \"sax\"");
	match_is(k, "fill<double>", -ENOENT, "name expression");
	match_is(k, "9lives", -ENOENT, "no kernel");
	wrk_knames_free(k);
}

/* A variable's symbol from its C++ name, as a compiler mangles it. */
static void test_knames_variable_symbols(void **state)
{
	static const struct {
		const char *name, *symbol;
	} ok[] = {
		{ "x", "x" },
		{ "::x", "x" },
		{ "ns::scale", "_ZN2ns5scaleE" },
		{ "::a::b::c_9", "_ZN1a1b3c_9E" },
	};
	static const char *const bad[] = { "",      "::",     "ns::", "a:b", "9x",
					   "a::9b", "f<int>", "a b",  "&x" };
	char buf[64];

	for (unsigned i = 0; i < ARRAY_SIZE(ok); i++) {
		assert_int_equal(wrk_knames_variable(ok[i].name, buf, sizeof(buf)), 0);
		assert_string_equal(buf, ok[i].symbol);
	}
	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++)
		if (wrk_knames_variable(bad[i], buf, sizeof(buf)) != -EINVAL)
			fail_msg("\"%s\" taken", bad[i]);
	/* What does not fit is refused, not cut. */
	assert_int_equal(wrk_knames_variable("ns::scale", buf, 13), -EINVAL);
	assert_int_equal(wrk_knames_variable("ns::scale", buf, 14), 0);
	assert_int_equal(wrk_knames_variable("scale", buf, 5), -EINVAL);
}

/* What the names hold is counted, and capped: copies of names and what points at them. */
static void test_knames_bytes_counted_and_capped(void **state)
{
	static const char *const entries[] = { "_Z5saxpyPKfPffy", "plain" };
	static const char pairs[] = "fill<float>\0_Z4fillIfEvPT_i\0";
	const size_t want = sizeof("_Z5saxpyPKfPffy") + sizeof("plain") + sizeof(pairs) - 1 +
			    4 * sizeof(char *);
	struct wrk_knames *k = names_of(entries, 2, pairs, sizeof(pairs) - 1, 1);

	assert_int_equal(wrk_knames_bytes(k), want);
	wrk_knames_free(k);
	k = names_max(entries, 2, pairs, sizeof(pairs) - 1, 1, want);
	assert_non_null(k);
	wrk_knames_free(k);
	assert_null(names_max(entries, 2, pairs, sizeof(pairs) - 1, 1, want - 1));
	assert_null(names_max(entries, 2, NULL, 0, 0, sizeof("_Z5saxpyPKfPffy") + 2));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_knames_scan_finds_kernel_instantiations),
		cmocka_unit_test(test_knames_scan_skips_what_is_not_one),
		cmocka_unit_test(test_knames_same_as_cpp_reads_it),
		cmocka_unit_test(test_knames_match_cpp_names),
		cmocka_unit_test(test_knames_bytes_counted_and_capped),
		cmocka_unit_test(test_knames_variable_symbols),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
