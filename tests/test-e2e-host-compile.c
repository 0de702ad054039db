/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-host-compile.c: a host compile reads only its toolchain, within its limits. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/* Load code as a host module: the status, and the log (to free) in *ret_log. */
static gpux_status load(gpux_ctx *ctx, const char *code, char **ret_log)
{
	gpux_module *m = NULL;
	gpux_status st;

	*ret_log = NULL;
	st = gpux_module_load(ctx, GPUX_LANG_HOST, code, strlen(code), NULL, &m, ret_log);
	gpux_module_free(m);
	return st;
}

/* A file of gpuxd's user (world-readable even) is not the compiler's to read, nor to print. */
static void test_e2e_host_compile_reads_nothing_outside_its_toolchain(void **state)
{
	static const char code[] = "#include \"/etc/passwd\"\nGPUX_HOST_KERNEL(k) {}\n";
	struct test_env *e = *state;
	char first[64] = "", *log;
	FILE *f = fopen("/etc/passwd", "re");

	assert_non_null(f);
	if (!fgets(first, sizeof(first), f))
		first[0] = '\0';
	(void)fclose(f);
	first[strcspn(first, "\n")] = '\0';
	assert_int_equal(load(e->ctx, code, &log), GPUX_E_COMPILE);
	assert_non_null(log);
	if (first[0] && strstr(log, first))
		fail_msg("the log shows /etc/passwd's first line:\n%s", log);
	if (!strstr(log, "Permission denied"))
		fail_msg("the log does not say the file was refused:\n%s", log);
	free(log);
	test_env_still_serves(e);
}

/* An include that never ends fails at once, with a message (it drove cc1 to 24 GB). */
static void test_e2e_host_compile_of_an_endless_include_fails(void **state)
{
	static const char code[] = "#include \"/dev/zero\"\nGPUX_HOST_KERNEL(k) {}\n";
	struct test_env *e = *state;
	char *log;

	assert_int_equal(load(e->ctx, code, &log), GPUX_E_COMPILE);
	assert_non_null(log);
	if (!strstr(log, "/dev/zero") && !strstr(log, "ran out of its"))
		fail_msg("the log says neither the file nor the limit:\n%s", log);
	free(log);
	test_env_still_serves(e);
}

/* A compile past --compile-timeout-ms says so (it said "Connection timed out"). */
static void test_e2e_host_compile_past_its_time_says_so(void **state)
{
	static const char script[] = "#!/bin/sh\n"
				     "case \"$1\" in -print-*|-E|--version) exit 0;; esac\n"
				     "exec sleep 30\n";
	static const char *const args[] = { "--compile-timeout-ms", "300", NULL };
	struct test_daemon *d = *state;
	char *dir = test_mkdtemp(), cc[300], *log;
	gpux_ctx *ctx;
	int fd;

	(void)snprintf(cc, sizeof(cc), "%s/cc", dir);
	fd = open(cc, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, script, sizeof(script) - 1), (ssize_t)sizeof(script) - 1);
	assert_int_equal(close(fd), 0);
	assert_int_equal(setenv("GPUX_HOST_CC", cc, 1), 0);
	test_daemon_start(d, args);
	assert_int_equal(unsetenv("GPUX_HOST_CC"), 0);
	ctx = test_connect(d);
	assert_int_equal(load(ctx, "GPUX_HOST_KERNEL(k) {}\n", &log), GPUX_E_COMPILE);
	if (!log || !strstr(log, "the compiler ran past its 0.3 s limit"))
		fail_msg("the log does not say the limit: %s", log ? log : "(none)");
	free(log);
	gpux_disconnect(ctx);
	test_rmtree(dir);
	free(dir);
}

/*
 * A library preloaded into gpuxd and its workers (a sanitizer's runtime, say) is not the
 * compiler's: one that cannot be loaded, which the dynamic loader names on stderr in every
 * process it is given to, is not named in a compile's log.
 */
static void test_e2e_host_compile_without_the_daemons_preload(void **state)
{
	struct test_daemon *d = *state;
	gpux_ctx *ctx;
	char *log;

	assert_int_equal(setenv("LD_PRELOAD", "/nonexistent/gpux-test-preload.so", 1), 0);
	test_daemon_start(d, NULL);
	assert_int_equal(unsetenv("LD_PRELOAD"), 0);
	ctx = test_connect(d);
	assert_int_equal(load(ctx, "GPUX_HOST_KERNEL(k) { not C }\n", &log), GPUX_E_COMPILE);
	if (!log || strstr(log, "gpux-test-preload") || strstr(log, "LD_PRELOAD"))
		fail_msg("the compiler had the daemon's LD_PRELOAD: %s", log ? log : "(no log)");
	if (!strstr(log, "not"))
		fail_msg("the log is not the compiler's: %s", log);
	free(log);
	gpux_disconnect(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST_WITH_ENV(test_e2e_host_compile_reads_nothing_outside_its_toolchain),
		TEST_WITH_ENV(test_e2e_host_compile_of_an_endless_include_fails),
		TEST_WITH_DAEMON(test_e2e_host_compile_past_its_time_says_so),
		TEST_WITH_DAEMON(test_e2e_host_compile_without_the_daemons_preload),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
