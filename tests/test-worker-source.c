/* SPDX-License-Identifier: MIT */
/* tests/test-worker-source.c: sources alike but for comments and spacing have one canonical form; others do not. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "wrk.h"

/* The canonical form of s (NUL-terminated, to free), or NULL when it is refused. */
static char *canon(const char *s)
{
	size_t n = strlen(s);
	char *out = malloc(n + 1);
	ssize_t r;

	assert_non_null(out);
	r = wrk_source_canon(s, n, out);
	if (r < 0) {
		assert_int_equal(r, -EINVAL);
		free(out);
		return NULL;
	}
	assert_true((size_t)r <= n);
	out[r] = '\0';
	return out;
}

static bool same(const char *a, const char *b)
{
	char *ca = canon(a), *cb = canon(b);
	bool eq;

	assert_non_null(ca);
	assert_non_null(cb);
	eq = strcmp(ca, cb) == 0;
	free(ca);
	free(cb);
	return eq;
}

static void refused(const char *s)
{
	char *c = canon(s);

	if (c)
		fail_msg("not refused: \"%s\" as \"%s\"", s, c);
}

static const char base[] = "#include <cuda_fp16.h>\n"
			   "#define SCALE(x) ((x) * 2)\n"
			   "extern \"C\" __global__ void k(float *p, int n)\n"
			   "{\n"
			   "\tint i = threadIdx.x;\n"
			   "\tif (i < n)\n"
			   "\t\tp[i] = SCALE(p[i]) + 1.5e-3f;\n"
			   "}\n";

/* Comments (anywhere, of the same lines), spacing within lines, trailing blank lines. */
static void test_source_comments_and_spacing_are_alike(void **state)
{
	/* Comments on the lines there are, or after the last; how much whitespace there is
	 * where there is some (indentation, alignment, at the end of a line). */
	assert_true(same(base, "#include <cuda_fp16.h>   /* halves */\n"
			       "#define SCALE(x)     ((x)  *  2)   // twice\n"
			       "extern \"C\"  __global__ void k(float *p,   int n) // k\n"
			       "{   \n"
			       "    int i = threadIdx.x;   \n"
			       "        if (i < n)\n"
			       "\t\tp[i] =\tSCALE(p[i]) + 1.5e-3f; /* one and a half */\n"
			       "}\n"
			       "\n\n/* the end,\n over two lines */\n"));
	assert_true(same("int a;/* x */int b;\n", "int a; int b;"));
	assert_true(same("a\n", "a\r\n"));
}

/* What a compiler reads otherwise: tokens, whether there is whitespace between them, lines. */
static void test_source_other_readings_differ(void **state)
{
	assert_false(same("int a = 1;\n", "int a = 2;\n"));
	/* A function-like macro and an object-like one. */
	assert_false(same("#define F(x) x\n", "#define F (x) x\n"));
	assert_true(same("#define F (x) x\n", "#define F/**/(x) x\n"));
	/* Tokens joined or not. */
	assert_false(same("a+ +b\n", "a++b\n"));
	assert_false(same("a /**/ b\n", "ab\n"));
	/* A line more before the code moves __LINE__ and the log's line numbers. */
	assert_false(same("int a;\nint b;\n", "int a;\n\nint b;\n"));
	assert_false(same("int a;\nint b;\n", "int a;\n/* one\n */ int b;\n"));
	/* A comment's newline carries a directive on; a real one ends it. */
	assert_false(same("#define X 1 /*\n*/ + 2\n", "#define X 1\n + 2\n"));
	/* Literals as written, comments in them included. */
	assert_false(same("char *s = \"a  b\";\n", "char *s = \"a b\";\n"));
	assert_false(same("char *s = \"/* x */\";\n", "char *s = \"/* y */\";\n"));
	assert_false(same("char c = '\\'';int x; // a\n", "char c = '\\'';int x; // b\nint y;\n"));
	/* Header names as written: // in one is no comment. */
	assert_false(same("#include <a//b.h>\n", "#include <a//c.h>\n"));
	assert_false(same("#  include <a/*b*/c>\n", "#  include <a/*d*/c>\n"));
	/* A digit separator is no quote: what follows is read as code. */
	assert_false(same("int a = 1'000; char *s = \"//\"; int b;\n",
			  "int a = 1'000; char *s = \"//\"; int c;\n"));
	assert_true(same("int a = 1'000; // x\n", "int a = 1'000; // y\n"));
	/* Line splices as written, and whitespace around them kept. */
	assert_false(same("#define A a \\\nb\n", "#define A a\\\nb\n"));
	assert_false(same("in\\\nt x;\n", "int x;\n"));
}

/* What this reading does not follow exactly is keyed by its bytes. */
static void test_source_refuses_what_it_cannot_read(void **state)
{
	refused("const char *s = R\"(/* not a comment */)\";\n");
	refused("const char *s = u8R\"x(a)x\";\n");
	refused("int x = a ?"
		"?/\n+ b;\n");
	refused("%:include <a//b>\n");
	refused("// comment \\\nint hidden;\n");
	refused("/\\\n/ comment\n");
	refused("/* a *\\\n/ int x;\n");
	refused("#define A a \\  \nb\n");
	refused("#if __has_include(<a//b>)\n#endif\n");
	refused("char *s = \"open\n\";\n");
	refused("/* never closed\n");
	refused("#if 0\ndon't\n#endif\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_source_comments_and_spacing_are_alike),
		cmocka_unit_test(test_source_other_readings_differ),
		cmocka_unit_test(test_source_refuses_what_it_cannot_read),
	};

	return cmocka_run_group_tests_name("worker-source", tests, NULL, NULL);
}
