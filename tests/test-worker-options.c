/* SPDX-License-Identifier: MIT */
/* tests/test-worker-options.c: the compiler options a module may have, on each back end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "macro.h"
#include "wrk.h"

/* Check options against pattern; returns the status and, when refused, the log (freed here). */
static int check(const char *pattern, const char *options, const char *want_log)
{
	char *log = NULL;
	int rc = wrk_options_check(pattern, options, &log);

	if (rc == 0)
		assert_null(log);
	else if (!log || strcmp(log, want_log) != 0)
		fail_msg("\"%s\": log \"%s\", not \"%s\"", options, log ? log : "(none)", want_log);
	free(log);
	return rc;
}

static void assert_allowed(const char *pattern, const char *const *options, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (check(pattern, options[i], NULL) != 0)
			fail_msg("refused: \"%s\"", options[i]);
}

/* Each of these is refused, and the log names its first option. */
static void assert_refused(const char *pattern, const char *const *options, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char want[256];

		(void)snprintf(want, sizeof(want), "compiler option not allowed: %.*s",
			       (int)strcspn(options[i], " "), options[i]);
		if (check(pattern, options[i], want) != GPUX_E_INVAL)
			fail_msg("allowed: \"%s\"", options[i]);
	}
}

static void test_options_host_allowed(void **state)
{
	static const char *const ok[] = {
		"",
		" \t\n",
		"-O2",
		"-O -O0 -O3 -Os -Og -g",
		"-DN=4 -DNAME -D_X=a.b+c*(d)/e -UNDEBUG",
		"-std=c11 -std=gnu17 -std=c2x -std=c99",
		"-ffast-math -fno-math-errno -funroll-loops -fopenmp-simd",
		"-march=native -mtune=native",
		"-Wall -Wextra -Wno-unused-parameter",
	};

	assert_allowed(wrk_host_options_re, ok, ARRAY_SIZE(ok));
}

/* Nothing that makes the compiler read or write files of the client's choosing. */
static void test_options_host_refused(void **state)
{
	static const char *const bad[] = {
		"-o /tmp/x",
		"-I/etc",
		"-include /etc/passwd",
		"-fplugin=/tmp/evil.so",
		"-Wl,-rpath,/tmp",
		"-Wa,-a=/tmp/listing",
		"-B/tmp",
		"-specs=/tmp/specs",
		"@/tmp/args",
		"-O4",
		"-std=c++17",
		"-march=skylake",
		"-DN=$(x)",
		"-D'x'",
		"-O2x",
		"x-O2",
		"--param=max-inline-insns-auto=1",
		"-save-temps",
		"-O2 -o /tmp/x",
	};

	/* The log names the culprit, the first refused option. */
	assert_refused(wrk_host_options_re, bad, ARRAY_SIZE(bad) - 1);
	assert_int_equal(check(wrk_host_options_re, bad[ARRAY_SIZE(bad) - 1],
			       "compiler option not allowed: -o"),
			 GPUX_E_INVAL);
}

#ifdef GPUX_HAVE_CUDA
static void test_options_cuda_allowed(void **state)
{
	static const char *const ok[] = {
		"",
		"-DN=4 -DNAME -UNDEBUG",
		"--use_fast_math -use_fast_math",
		"-lineinfo --generate-line-info -G --device-debug",
		"--std=c++17 -std=c++11 -std=c++14 --std=c++20",
		"--fmad=false --ftz=true --prec-div=false --prec-sqrt=true",
		"--maxrregcount=32 --extra-device-vectorization -dopt=on --restrict",
		"-default-device --device-as-default-execution-space",
	};

	assert_allowed(wrk_cuda_options_re, ok, ARRAY_SIZE(ok));
}

/* No include paths, no pre-included files, no arch of the client's (the worker adds it). */
static void test_options_cuda_refused(void **state)
{
	static const char *const bad[] = {
		"-I/etc",
		"--include-path=/etc",
		"--pre-include=/etc/passwd",
		"-include=/etc/passwd",
		"-arch=sm_90",
		"--gpu-architecture=compute_90",
		"--std=c++98",
		"-std=c11",
		"--fmad=maybe",
		"--maxrregcount=x",
		"-O2",
		"--dlink-time-opt",
	};

	assert_refused(wrk_cuda_options_re, bad, ARRAY_SIZE(bad));
}
#endif

static void test_options_count_is_capped(void **state)
{
	char options[WRK_OPTIONS_MAX * 4 + 8] = "";

	for (unsigned i = 0; i < WRK_OPTIONS_MAX; i++)
		(void)strcat(options, "-O2 ");
	assert_int_equal(check(wrk_host_options_re, options, NULL), 0);
	(void)strcat(options, "-O2");
	assert_int_equal(check(wrk_host_options_re, options, "too many compiler options"),
			 GPUX_E_INVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_options_host_allowed),
		cmocka_unit_test(test_options_host_refused),
#ifdef GPUX_HAVE_CUDA
		cmocka_unit_test(test_options_cuda_allowed),
		cmocka_unit_test(test_options_cuda_refused),
#endif
		cmocka_unit_test(test_options_count_is_capped),
	};

	return cmocka_run_group_tests_name("worker-options", tests, NULL, NULL);
}
