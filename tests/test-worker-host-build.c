/* SPDX-License-Identifier: MIT */
/* tests/test-worker-host-build.c: the host back end's compiler, with the system's cc. */
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "host-build.h"
#include "macro.h"
#include "wrk.h"

/* The compiler of these tests: the system's, unless the test makes one. */
static const char *cc = "cc";

/* What the worker's host back end gives its compiler by default: 4 GiB, 256 MiB files, 120 s. */
static void cage_init(struct wrk_host_cage *cg)
{
	assert_int_equal(
		wrk_host_cage_init(cg, 4ull << 30, WRK_CLIENT_MOD_BYTES, 120 * NSEC_PER_SEC), 0);
	assert_int_equal(wrk_host_cage_add_compiler(cg, cc), 0);
}

/* Build source in cage cg: the status; the image (to free) in *ret_image when it built. */
static int build_in(const struct wrk_host_cage *cg, const char *source, uint8_t **ret_image,
		    size_t *ret_len, char **ret_log)
{
	struct wrk_build b = {
		.lang = GPUX_LANG_HOST,
		.code = (const uint8_t *)source,
		.code_len = strlen(source),
		.options = "",
	};
	int fds = test_fd_count(), r;

	*ret_image = NULL;
	*ret_log = NULL;
	r = wrk_host_build(cg, cc, &b, ret_image, ret_len, ret_log);
	assert_no_fd_leak(fds);
	if (r != 0)
		assert_null(*ret_image);
	return r;
}

/* Build source with the system's cc in the default cage. */
static int build(const char *source, uint8_t **ret_image, size_t *ret_len, char **ret_log)
{
	struct wrk_host_cage cg;
	int r;

	cage_init(&cg);
	r = build_in(&cg, source, ret_image, ret_len, ret_log);
	wrk_host_cage_done(&cg);
	return r;
}

/* A source that fails to build, and the log that says why (asserted to say `says`). */
static void fails(const struct wrk_host_cage *cg, const char *source, const char *says,
		  char **ret_log)
{
	uint8_t *image;
	size_t len;
	char *log;

	assert_int_equal(build_in(cg, source, &image, &len, &log), GPUX_E_COMPILE);
	assert_non_null(log);
	if (!strstr(log, says))
		fail_msg("the log does not say \"%s\":\n%s", says, log);
	if (ret_log)
		*ret_log = log;
	else
		free(log);
}

/*
 * A compiler of the test's: a shell script in a directory of its own (to remove), which says
 * nothing when asked where it reads, and runs `script` to build.
 */
static char *fake_cc(const char *script, char **ret_dir)
{
	static const char asked[] = "#!/bin/sh\n"
				    "case \"$1\" in -print-*|-E|--version) exit 0;; esac\n";
	char *dir = test_mkdtemp(), *path = NULL;
	int fd;

	assert_true(asprintf(&path, "%s/cc", dir) > 0);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, asked, strlen(asked)), (ssize_t)strlen(asked));
	assert_int_equal(write(fd, script, strlen(script)), (ssize_t)strlen(script));
	assert_int_equal(close(fd), 0);
	*ret_dir = dir;
	return path;
}

static void test_host_build_makes_a_shared_object(void **state)
{
	uint8_t *image;
	size_t len;
	char *log;

	assert_int_equal(build("int gpux_test_k(void) { return 1; }\n", &image, &len, &log), 0);
	assert_non_null(image);
	assert_true(len > SELFMAG);
	assert_memory_equal(image, ELFMAG, SELFMAG);
	free(image);
	free(log);
}

static void test_host_build_refuses_a_module_past_the_clients_cap(void **state)
{
	char source[256];
	uint8_t *image;
	size_t len;
	char *log;

	/* A source that makes a shared object one MiB larger than a client's modules may be. */
	(void)snprintf(source, sizeof(source),
		       "__asm__(\".section .data.big,\\\"aw\\\"\\n.skip %llu\\n.previous\");\n"
		       "int gpux_test_k(void) { return 1; }\n",
		       (unsigned long long)(WRK_CLIENT_MOD_BYTES + MiB));
	assert_int_equal(build(source, &image, &len, &log), GPUX_E_QUOTA);
	assert_null(image);
	assert_non_null(log);
	assert_non_null(strstr(log, "MiB a client's modules may"));
	free(log);
}

/* The compiler reads the toolchain, the source and nothing else: not even what the worker's
 * user could read, and never into the log. */
static void test_host_build_reads_nothing_outside_the_toolchain(void **state)
{
	static const char *const files[] = { "/etc/passwd", "/etc/shadow", "/proc/self/environ" };
	struct wrk_host_cage cg;

	cage_init(&cg);
	if (!cg.landlock_abi)
		skip();
	for (unsigned i = 0; i < ARRAY_SIZE(files); i++) {
		char source[128], first[64] = "", *log;
		FILE *f = fopen(files[i], "re");

		if (!f)
			continue;
		if (!fgets(first, sizeof(first), f))
			first[0] = '\0';
		(void)fclose(f);
		first[strcspn(first, "\n")] = '\0';
		(void)snprintf(source, sizeof(source), "#include \"%s\"\nint k;\n", files[i]);
		fails(&cg, source, "Permission denied", &log);
		if (first[0] && strstr(log, first))
			fail_msg("%s: its first line is in the log:\n%s", files[i], log);
		free(log);
	}
	wrk_host_cage_done(&cg);
}

/*
 * #include "/dev/zero" fails at once: the cage refuses the file; without Landlock, the
 * compiler meets its memory limit (the first report: cc1 at 24 GB, then the OOM killer).
 */
static void test_host_build_of_an_endless_include_fails_fast(void **state)
{
	static const char source[] = "#include \"/dev/zero\"\n";
	struct wrk_host_cage cg;
	uint64_t t0;

	cage_init(&cg);
	if (cg.landlock_abi)
		fails(&cg, source, "/dev/zero: Permission denied", NULL);
	cg.landlock_abi = 0;
	cg.memory = 256 * MiB;
	t0 = mono_ns();
	fails(&cg, source, "the compiler ran out of its 256 MiB of memory", NULL);
	assert_true(mono_ns() - t0 < 60 * NSEC_PER_SEC);
	wrk_host_cage_done(&cg);
}

/* A source whose macros expand past the bound on files the compiler writes: said so. */
static void test_host_build_bounds_the_preprocessed_source(void **state)
{
	char source[2048];
	struct wrk_host_cage cg;
	size_t n = 0;

	n += (size_t)snprintf(source + n, sizeof(source) - n, "#define X0 1+\n");
	for (int i = 1; i <= 24; i++)
		n += (size_t)snprintf(source + n, sizeof(source) - n, "#define X%d X%d X%d\n", i,
				      i - 1, i - 1);
	(void)snprintf(source + n, sizeof(source) - n, "int v = X24 1;\n");
	cage_init(&cg);
	cg.file_max = 1 * MiB;
	fails(&cg, source, "the preprocessed source passed its 1 MiB limit", NULL);
	wrk_host_cage_done(&cg);
}

/* A compile past its time is killed, with what it started, and says what limit it met. */
static void test_host_build_past_its_time_says_so(void **state)
{
	static const char script[] = "sleep 30 &\necho \"child $!\"\nwait\n";
	struct wrk_host_cage cg;
	char *dir, *fake = fake_cc(script, &dir), *log, *child, stat[256], path[64];
	const char *st, *system_cc = cc;
	uint64_t t0;

	cc = fake;
	cage_init(&cg);
	cg.timeout_ns = 500 * NSEC_PER_MSEC;
	t0 = mono_ns();
	fails(&cg, "int k;\n", "the compiler ran past its 0.5 s limit", &log);
	assert_true(mono_ns() - t0 < 10 * NSEC_PER_SEC);
	child = strstr(log, "child ");
	assert_non_null(child);
	(void)snprintf(path, sizeof(path), "/proc/%d/stat", atoi(child + 6));
	for (int i = 0; i < 200 && (st = proc_stat_fields(path, stat, sizeof(stat))) && *st != 'Z';
	     i++)
		(void)usleep(10000);
	st = proc_stat_fields(path, stat, sizeof(stat));
	if (st && *st != 'Z')
		fail_msg("the compiler's child lives on: %s", st);
	free(log);
	wrk_host_cage_done(&cg);
	cc = system_cc;
	test_rmtree(dir);
	free(dir);
	free(fake);
}

/*
 * The compiler runs with the memory limit (its address space), and without a capability
 * (a root worker's would let it chown a file of its own to another user).
 */
static void test_host_build_runs_the_compiler_limited(void **state)
{
	static const char script[] = "echo \"as $(ulimit -v)\"\ntouch mine\n"
				     "chown 1 mine 2>/dev/null && echo chowned\nexit 1\n";
	struct wrk_host_cage cg;
	char *dir, *fake = fake_cc(script, &dir), *log, want[64];
	const char *system_cc = cc;

	cc = fake;
	cage_init(&cg);
	cg.memory = 300 * MiB;
	(void)snprintf(want, sizeof(want), "as %llu\n", (unsigned long long)(300 * MiB / 1024));
	fails(&cg, "int k;\n", want, &log);
	if (strstr(log, "chowned"))
		fail_msg("the compiler has capabilities:\n%s", log);
	free(log);
	wrk_host_cage_done(&cg);
	cc = system_cc;
	test_rmtree(dir);
	free(dir);
	free(fake);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_build_makes_a_shared_object),
		cmocka_unit_test(test_host_build_refuses_a_module_past_the_clients_cap),
		cmocka_unit_test(test_host_build_reads_nothing_outside_the_toolchain),
		cmocka_unit_test(test_host_build_of_an_endless_include_fails_fast),
		cmocka_unit_test(test_host_build_bounds_the_preprocessed_source),
		cmocka_unit_test(test_host_build_past_its_time_says_so),
		cmocka_unit_test(test_host_build_runs_the_compiler_limited),
	};

	if (getenv("GPUX_HOST_CC") && *getenv("GPUX_HOST_CC"))
		cc = getenv("GPUX_HOST_CC");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
