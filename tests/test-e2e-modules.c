/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-modules.c: host modules loaded one after another each run their own code; what the caches take for one. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"
#include "helpers.h"

/* Two modules with a kernel of the same name, and one kernel only the second has. */
static const char code_a[] = "GPUX_HOST_PARAMS(f, sizeof(int *));\n"
			     "GPUX_HOST_KERNEL(f) { *GPUX_ARG(int *, 0) = 111; }\n";
static const char code_b[] = "GPUX_HOST_PARAMS(f, sizeof(int *));\n"
			     "GPUX_HOST_KERNEL(f) { *GPUX_ARG(int *, 0) = 222; }\n"
			     "GPUX_HOST_PARAMS(g, sizeof(int *));\n"
			     "GPUX_HOST_KERNEL(g) { *GPUX_ARG(int *, 0) = 333; }\n";
/* Another client's own module. */
static const char code_c[] = "GPUX_HOST_PARAMS(h, sizeof(int *));\n"
			     "GPUX_HOST_KERNEL(h) { *GPUX_ARG(int *, 0) = 444; }\n";

static gpux_module *load(gpux_ctx *ctx, const char *code)
{
	gpux_module *m = NULL;
	char *log = NULL;
	gpux_status st = gpux_module_load(ctx, GPUX_LANG_HOST, code, strlen(code), NULL, &m, &log);

	if (st != GPUX_OK)
		fail_msg("loading a module: %s\n%s", gpux_strerror(st), log ? log : "");
	free(log);
	return m;
}

/* Run kernel k of module m on one int; returns the launch's status, the int in *ret. */
static gpux_status run_one(gpux_ctx *ctx, gpux_module *m, const char *k, int *ret)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	gpux_buf *b;
	struct gpux_arg arg;
	gpux_status st;

	assert_int_equal(gpux_buf_alloc(ctx, sizeof(int), &b), GPUX_OK);
	*(int *)gpux_buf_data(b) = -1;
	arg = gpux_arg_out(b, 0, sizeof(int));
	st = gpux_run(m, k, &l, &arg, 1);
	*ret = *(int *)gpux_buf_data(b);
	gpux_buf_free(b);
	return st;
}

static void expect(gpux_ctx *ctx, gpux_module *m, const char *k, int want)
{
	int got;

	assert_int_equal(run_one(ctx, m, k, &got), GPUX_OK);
	assert_int_equal(got, want);
}

/* A.f writes 111; A is freed; B.f must write 222 and B.g be found; C of another client works. */
static void test_e2e_modules_freed_module_is_not_run_for_the_next(void **state)
{
	struct test_env *e = *state;
	gpux_module *a, *b, *c;
	gpux_ctx *other;
	int got;

	a = load(e->ctx, code_a);
	expect(e->ctx, a, "f", 111);
	gpux_module_free(a);

	b = load(e->ctx, code_b);
	expect(e->ctx, b, "f", 222);
	expect(e->ctx, b, "g", 333);
	assert_int_equal(run_one(e->ctx, b, "h", &got), GPUX_E_NOTFOUND);

	other = test_connect(&e->d);
	c = load(other, code_c);
	expect(other, c, "h", 444);
	expect(e->ctx, b, "f", 222);
	gpux_module_free(c);
	gpux_disconnect(other);
	gpux_module_free(b);
}

/* Different modules loaded at the same time, and the same code loaded twice. */
static void test_e2e_modules_loaded_together_stay_apart(void **state)
{
	struct test_env *e = *state;
	gpux_module *a = load(e->ctx, code_a), *b = load(e->ctx, code_b);
	gpux_module *a2 = load(e->ctx, code_a), *c = load(e->ctx, code_c);

	expect(e->ctx, a, "f", 111);
	expect(e->ctx, b, "f", 222);
	expect(e->ctx, a2, "f", 111);
	expect(e->ctx, c, "h", 444);
	gpux_module_free(a);
	expect(e->ctx, a2, "f", 111);
	expect(e->ctx, b, "g", 333);
	gpux_module_free(a2);
	gpux_module_free(b);
	gpux_module_free(c);
}

/*
 * Many modules built, freed and loaded again, from the memory cache and then, after the
 * worker's restart, from the disk cache: each run is its own module's.
 */
static void test_e2e_modules_reloaded_from_the_caches_stay_apart(void **state)
{
	struct test_env *e = *state;
	char code[8][160];
	pid_t worker;

	for (int round = 0; round < 3; round++) {
		if (round == 2) {
			/* The memory cache goes with the worker; its successor reads the disk. */
			worker = test_worker_pid(&e->d, 0);
			assert_int_equal(kill(worker, SIGKILL), 0);
			test_wait_generation(&e->d, 0, 1);
			/* Take in gpuxd's news of it: the new worker's channel. */
			assert_int_equal(gpux_process(e->ctx), GPUX_OK);
		}
		for (int i = 0; i < 8; i++) {
			gpux_module *m;

			(void)snprintf(code[i], sizeof(code[i]),
				       "GPUX_HOST_PARAMS(f, sizeof(int *));\n"
				       "GPUX_HOST_KERNEL(f) { *GPUX_ARG(int *, 0) = %d; }\n",
				       1000 + i);
			m = load(e->ctx, code[i]);
			expect(e->ctx, m, "f", 1000 + i);
			gpux_module_free(m);
		}
	}
	{
		struct ipc_status st;
		struct ipc_dev_status devs[IPC_DEVICES_MAX];

		assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
		assert_true(devs[0].stats.module_disk_hits >= 8);
	}
}

/* Load code with options; where the module came from (GPUX_MODULE_*), the module in *ret. */
static uint32_t load_from(gpux_ctx *ctx, const char *code, const char *options, gpux_module **ret)
{
	struct gpux_module_info info;
	char *log = NULL;
	gpux_status st =
		gpux_module_load(ctx, GPUX_LANG_HOST, code, strlen(code), options, ret, &log);

	if (st != GPUX_OK)
		fail_msg("loading a module: %s\n%s", gpux_strerror(st), log ? log : "");
	free(log);
	assert_int_equal(gpux_module_info(*ret, &info), GPUX_OK);
	return info.source;
}

/*
 * A source that differs from a loaded one only in comments, or in how much whitespace there
 * is, is that module (from memory, or from disk after a restart); one that differs in code,
 * in a line more before its code, or in its options is built again and runs its own code.
 */
static void test_e2e_modules_comment_change_is_a_cache_hit(void **state)
{
	static const char orig[] = "GPUX_HOST_PARAMS(f, sizeof(int *));\n"
				   "GPUX_HOST_KERNEL(f) { *GPUX_ARG(int *, 0) = 7 * __LINE__; }\n";
	static const char commented[] = "GPUX_HOST_PARAMS(f, sizeof(int *)); /* f's */\n"
					"GPUX_HOST_KERNEL(f)  {  *GPUX_ARG(int *, 0) = "
					"7  *  __LINE__;   }"
					" // seven\n/* the end */\n";
	static const char changed[] = "GPUX_HOST_PARAMS(f, sizeof(int *));\n"
				      "GPUX_HOST_KERNEL(f) "
				      "{ *GPUX_ARG(int *, 0) = 8 * __LINE__; }\n";
	static const char moved[] = "/* a line more */\n"
				    "GPUX_HOST_PARAMS(f, sizeof(int *));\n"
				    "GPUX_HOST_KERNEL(f) { *GPUX_ARG(int *, 0) = 7 * __LINE__; }\n";
	struct test_env *e = *state;
	gpux_module *m[6];
	int got;

	assert_int_equal(load_from(e->ctx, orig, NULL, &m[0]), GPUX_MODULE_COMPILED);
	assert_int_equal(load_from(e->ctx, commented, NULL, &m[1]), GPUX_MODULE_MEMORY);
	expect(e->ctx, m[1], "f", 7 * 2);
	assert_int_equal(load_from(e->ctx, changed, NULL, &m[2]), GPUX_MODULE_COMPILED);
	expect(e->ctx, m[2], "f", 8 * 2);
	/* __LINE__ moved: another module, which says so. */
	assert_int_equal(load_from(e->ctx, moved, NULL, &m[3]), GPUX_MODULE_COMPILED);
	assert_int_equal(run_one(e->ctx, m[3], "f", &got), GPUX_OK);
	assert_int_equal(got, 7 * 3);
	assert_int_equal(load_from(e->ctx, commented, "-DX=1", &m[4]), GPUX_MODULE_COMPILED);
	/* Debug information writes down columns: then only the bytes count. */
	assert_int_equal(load_from(e->ctx, orig, "-g", &m[5]), GPUX_MODULE_COMPILED);
	for (unsigned i = 0; i < 6; i++)
		gpux_module_free(m[i]);
	assert_int_equal(load_from(e->ctx, commented, "-g", &m[0]), GPUX_MODULE_COMPILED);
	gpux_module_free(m[0]);
}

static uint64_t compiles(struct test_env *e)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[0].stats.module_compiles;
}

/* A new worker, whose memory cache is empty: the next loads read the disk cache. */
static void restart_worker(struct test_env *e, uint32_t generation)
{
	assert_int_equal(kill(test_worker_pid(&e->d, 0), SIGKILL), 0);
	test_wait_generation(&e->d, 0, generation);
	/* Take in gpuxd's news of it: the new worker's channel. */
	assert_int_equal(gpux_process(e->ctx), GPUX_OK);
}

/*
 * A cache file whose bytes were changed, or that was cut short, is compiled again (never
 * loaded), and the worker's log says which file and what is wrong with it.
 */
static void test_e2e_modules_damaged_cache_file_is_rebuilt_and_said(void **state)
{
	static const char code[] = "GPUX_HOST_PARAMS(f, sizeof(int *));\n"
				   "GPUX_HOST_KERNEL(f) { *GPUX_ARG(int *, 0) = 5150; }\n";
	static const struct {
		const char *damage, *says;
	} cases[] = {
		{ "printf garbage | dd of=$f bs=1 seek=100 conv=notrunc 2>/dev/null",
		  "its checksum does not match; compiling the module again" },
		{ "truncate -s -16 $f", "it is truncated; compiling the module again" },
	};
	struct test_env *e = *state;
	char cmd[600];
	gpux_module *m = load(e->ctx, code);

	expect(e->ctx, m, "f", 5150);
	gpux_module_free(m);
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		uint64_t before;

		(void)snprintf(cmd, sizeof(cmd), "for f in %s/*.so; do %s; done", e->d.cache,
			       cases[i].damage);
		assert_int_equal(system(cmd), 0);
		restart_worker(e, 1 + i);
		before = compiles(e);
		m = load(e->ctx, code);
		expect(e->ctx, m, "f", 5150);
		gpux_module_free(m);
		assert_true(compiles(e) > before);
		if (!test_log_wait(&e->d, cases[i].says))
			fail_msg("the log (%s) does not say \"%s\"", e->d.log, cases[i].says);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST_WITH_ENV(test_e2e_modules_freed_module_is_not_run_for_the_next),
		TEST_WITH_ENV(test_e2e_modules_loaded_together_stay_apart),
		TEST_WITH_ENV(test_e2e_modules_reloaded_from_the_caches_stay_apart),
		TEST_WITH_ENV(test_e2e_modules_comment_change_is_a_cache_hit),
		TEST_WITH_ENV(test_e2e_modules_damaged_cache_file_is_rebuilt_and_said),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
