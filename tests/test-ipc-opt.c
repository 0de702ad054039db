/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-opt.c: command lines from a table: gpux-worker's, parsed and built back. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "macro.h"
#include "options.h"

static const struct ipc_worker_opts defaults = IPC_WORKER_OPTS_DEFAULTS;

/* Parse a NULL-terminated command line (its program first) into *o, from the defaults. */
static int parse(const char *const *args, struct ipc_worker_opts *o, char *why, size_t len)
{
	char *argv[64];
	int argc = 0;

	while (args[argc]) {
		argv[argc] = (char *)args[argc];
		argc++;
	}
	argv[argc] = NULL;
	*o = defaults;
	why[0] = '\0';
	return ipc_opt_parse(&ipc_worker_prog, argc, argv, o, why, len);
}

static void assert_opts_equal(const struct ipc_worker_opts *a, const struct ipc_worker_opts *b)
{
	assert_int_equal(a->device, b->device);
	if (a->backend || b->backend)
		assert_string_equal(a->backend, b->backend);
	assert_int_equal(a->control_fd, b->control_fd);
	assert_int_equal(a->status_fd, b->status_fd);
	assert_int_equal(a->clients_fd, b->clients_fd);
	assert_int_equal(a->parent_pid, b->parent_pid);
	assert_int_equal(a->probe, b->probe);
	assert_int_equal(a->compiler, b->compiler);
	assert_int_equal(a->sandbox, b->sandbox);
	assert_int_equal(a->restart, b->restart);
	if (a->cache_dir || b->cache_dir)
		assert_string_equal(a->cache_dir, b->cache_dir);
	assert_int_equal(a->timeout_ms, b->timeout_ms);
	assert_int_equal(a->max_timeout_ms, b->max_timeout_ms);
	assert_int_equal(a->quota_shared, b->quota_shared);
	assert_int_equal(a->quota_shared_user, b->quota_shared_user);
	assert_int_equal(a->quota_device, b->quota_device);
	assert_int_equal(a->device_reserve, b->device_reserve);
	assert_int_equal(a->cache_bytes, b->cache_bytes);
	assert_int_equal(a->cache_ttl_ms, b->cache_ttl_ms);
	assert_int_equal(a->slots, b->slots);
	assert_int_equal(a->ledger_fd, b->ledger_fd);
	assert_int_equal(a->quota_device_user, b->quota_device_user);
	assert_int_equal(a->reserved_device, b->reserved_device);
	assert_int_equal(a->compile_memory, b->compile_memory);
	assert_int_equal(a->compile_timeout_ms, b->compile_timeout_ms);
}

static void test_opt_parses_a_worker_line(void **state)
{
	static const char *const args[] = {
		"gpux-worker", "--device",     "3",           "--backend",
		"cuda",        "--control-fd", "3",           "--status-fd",
		"4",           "--parent-pid", "77",          "--timeout-ms",
		"0",           "--slots=64",   "--cache-dir", "/var/cache/gpux",
		"--sandbox",   NULL,
	};
	struct ipc_worker_opts o;
	char why[256];

	assert_int_equal(parse(args, &o, why, sizeof(why)), 0);
	assert_int_equal(o.device, 3);
	assert_string_equal(o.backend, "cuda");
	assert_int_equal(o.control_fd, 3);
	assert_int_equal(o.status_fd, 4);
	assert_int_equal(o.parent_pid, 77);
	assert_int_equal(o.timeout_ms, 0);
	assert_int_equal(o.slots, 64);
	assert_string_equal(o.cache_dir, "/var/cache/gpux");
	assert_true(o.sandbox);
	/* What was not given stays as it was. */
	assert_int_equal(o.max_timeout_ms, IPC_OPT_MAX_TIMEOUT_MS);
	assert_int_equal(o.quota_shared, UINT64_MAX);
	assert_false(o.probe);
}

/* Each kind of option refuses what it cannot take, saying why, and nothing is written. */
static void test_opt_refusals_say_why(void **state)
{
	static const struct {
		const char *args[4];
		const char *why;
	} bad[] = {
		/* numbers */
		{ { "--device", "x" }, "--device: \"x\" is not a number" },
		{ { "--device", "-1" }, "--device: \"-1\" is not a number" },
		{ { "--device", " 1" }, "--device: \" 1\" is not a number" },
		{ { "--device", "1k" }, "--device: \"1k\" is not a number" },
		{ { "--device", "" }, "--device: \"\" is not a number" },
		{ { "--device", "64" }, "--device: 64 is more than 63" },
		{ { "--slots", "65" }, "--slots: 65 is more than 64" },
		{ { "--control-fd", "2147483648" },
		  "--control-fd: 2147483648 is more than 2147483647" },
		{ { "--timeout-ms", "18446744073709551616" },
		  "--timeout-ms: \"18446744073709551616\" is not a number" },
		{ { "--timeout-ms", "18446744073710" },
		  "--timeout-ms: 18446744073710 is more than 18446744073709" },
		/* words */
		{ { "--backend", "gpu" }, "--backend: \"gpu\" is not auto, cuda or host" },
		{ { "--backend", "" }, "--backend: \"\" is not auto, cuda or host" },
		{ { "--backend", "hos" }, "--backend: \"hos\" is not auto, cuda or host" },
		/* texts */
		{ { "--cache-dir", "" }, "--cache-dir: an empty value" },
		/* flags, and the command line itself */
		{ { "--sandbox=yes" }, "--sandbox takes no value" },
		{ { "--help=me" }, "--help takes no value" },
		{ { "--device" }, "--device needs a value" },
		{ { "--frobnicate" }, "unknown option --frobnicate" },
		{ { "-x" }, "unknown option -x" },
		{ { "--version" }, "unknown option --version" },
		{ { "--probe", "extra" }, "unexpected argument \"extra\"" },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		const char *args[6] = { "gpux-worker" };
		struct ipc_worker_opts o;
		char why[256];

		for (unsigned k = 0; k < 4 && bad[i].args[k]; k++)
			args[k + 1] = bad[i].args[k];
		if (parse(args, &o, why, sizeof(why)) != -EINVAL || strcmp(why, bad[i].why) != 0)
			fail_msg("%s: \"%s\", not \"%s\"", bad[i].args[0], why, bad[i].why);
		assert_opts_equal(&o, &defaults);
	}
}

static void test_opt_help(void **state)
{
	static const char *const args[] = { "gpux-worker", "--device", "1", "-h", NULL };
	struct ipc_worker_opts o;
	char why[256];

	assert_int_equal(parse(args, &o, why, sizeof(why)), IPC_OPT_HELP);
	assert_opts_equal(&o, &defaults);
}

/* Every option the worker takes, none at its default, each as long as it can be. */
static struct ipc_worker_opts every_option(void)
{
	struct ipc_worker_opts o = {
		.device = IPC_DEVICES_MAX - 1,
		.backend = "cuda",
		.control_fd = INT_MAX,
		.status_fd = 0,
		.parent_pid = INT_MAX,
		.probe = true,
		.compiler = true,
		.sandbox = true,
		.restart = true,
		.cache_dir = "/a/cache/dir",
		.timeout_ms = IPC_OPT_MS_MAX,
		.max_timeout_ms = 1,
		.quota_shared = UINT64_MAX - 1,
		.quota_shared_user = 0,
		.quota_device = UINT64_MAX,
		.device_reserve = UINT64_MAX - 4,
		.cache_bytes = UINT64_MAX,
		.cache_ttl_ms = IPC_OPT_MS_MAX,
		.slots = IPC_STATUS_SLOTS,
		.ledger_fd = 5,
		.quota_device_user = UINT64_MAX,
		.reserved_device = 1,
		.compile_memory = UINT64_MAX,
		.compile_timeout_ms = 1,
	};

	return o;
}

/* gpuxd builds a worker's argv from the table in storage of fixed size; the worker reads it
 * back to the same values. */
static void test_opt_argv_round_trip(void **state)
{
	struct ipc_worker_opts in = every_option(), out;
	char *v[IPC_WORKER_ARGV_MAX], text[IPC_WORKER_ARGV_TEXT], why[256];
	struct ipc_argv a;
	size_t words = 1;

	for (size_t i = 0; i < ipc_worker_prog.nopts; i++)
		words += ipc_worker_prog.opts[i].kind == IPC_OPT_FLAG ? 1 : 2;
	ipc_argv_init(&a, v, ARRAY_SIZE(v), text, sizeof(text));
	assert_int_equal(ipc_argv_add(&a, "gpux-worker"), 0);
	assert_int_equal(ipc_opt_argv(&ipc_worker_prog, &in, &defaults, &a), 0);
	/* All of them: flags one word, the rest two. */
	assert_int_equal(a.n, words);
	assert_null(v[a.n]);
	assert_string_equal(v[1], "--device");
	assert_int_equal(parse((const char *const *)v, &out, why, sizeof(why)), 0);
	assert_opts_equal(&out, &in);

	/* And nothing at all when everything is at its default. */
	ipc_argv_init(&a, v, ARRAY_SIZE(v), text, sizeof(text));
	assert_int_equal(ipc_opt_argv(&ipc_worker_prog, &defaults, &defaults, &a), 0);
	assert_int_equal(a.n, 0);
	assert_null(v[0]);
}

/* Storage too small is refused, never written past (ASan watches). */
static void test_opt_argv_is_bounded(void **state)
{
	struct ipc_worker_opts in = every_option();
	char *all[IPC_WORKER_ARGV_MAX], text[IPC_WORKER_ARGV_TEXT];
	struct ipc_argv a;
	size_t words, bytes;

	ipc_argv_init(&a, all, ARRAY_SIZE(all), text, sizeof(text));
	assert_int_equal(ipc_argv_add(&a, "gpux-worker"), 0);
	assert_int_equal(ipc_opt_argv(&ipc_worker_prog, &in, &defaults, &a), 0);
	words = a.n + 1;
	bytes = a.text_used;
	for (size_t cap = 1; cap < words; cap++) {
		char **v = calloc(cap, sizeof(*v));

		assert_non_null(v);
		ipc_argv_init(&a, v, cap, text, sizeof(text));
		if (ipc_argv_add(&a, "gpux-worker") == 0)
			assert_int_equal(ipc_opt_argv(&ipc_worker_prog, &in, &defaults, &a),
					 -E2BIG);
		assert_true(a.n < cap);
		assert_null(v[a.n]);
		free(v);
	}
	for (size_t len = 0; len < bytes; len++) {
		char *t = malloc(len ? len : 1);

		assert_non_null(t);
		ipc_argv_init(&a, all, ARRAY_SIZE(all), t, len);
		assert_int_equal(ipc_opt_argv(&ipc_worker_prog, &in, &defaults, &a), -E2BIG);
		assert_true(a.text_used <= len);
		free(t);
	}
}

/* A value the worker would refuse never goes into its argv. */
static void test_opt_argv_refuses_what_parse_would(void **state)
{
	char *v[IPC_WORKER_ARGV_MAX], text[IPC_WORKER_ARGV_TEXT];
	struct ipc_worker_opts in;
	struct ipc_argv a;

	in = defaults;
	in.slots = IPC_STATUS_SLOTS + 1;
	ipc_argv_init(&a, v, ARRAY_SIZE(v), text, sizeof(text));
	assert_int_equal(ipc_opt_argv(&ipc_worker_prog, &in, &defaults, &a), -EINVAL);
	in = defaults;
	in.backend = "gpu";
	ipc_argv_init(&a, v, ARRAY_SIZE(v), text, sizeof(text));
	assert_int_equal(ipc_opt_argv(&ipc_worker_prog, &in, &defaults, &a), -EINVAL);
	in = defaults;
	in.cache_dir = "";
	ipc_argv_init(&a, v, ARRAY_SIZE(v), text, sizeof(text));
	assert_int_equal(ipc_opt_argv(&ipc_worker_prog, &in, &defaults, &a), -EINVAL);
}

/* The usage text has every option, with its help. */
static void test_opt_usage_lists_every_option(void **state)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	ipc_opt_usage(&ipc_worker_prog, f);
	assert_int_equal(fclose(f), 0);
	assert_true(strncmp(text, "usage: gpux-worker ", 19) == 0);
	for (size_t i = 0; i < ipc_worker_prog.nopts; i++) {
		const struct ipc_opt *o = &ipc_worker_prog.opts[i];
		char want[128], help[128];

		(void)snprintf(want, sizeof(want), "\n  --%s%s%s ", o->name, o->arg ? " " : "",
			       o->arg ? o->arg : "");
		(void)snprintf(help, sizeof(help), "%.*s\n", (int)strcspn(o->help, "\n"), o->help);
		if (!strstr(text, want) || !strstr(text, help))
			fail_msg("no \"%s\" with its help in:\n%s", want + 1, text);
	}
	assert_non_null(strstr(text, "\n  -h, --help "));
	assert_null(strstr(text, "--version"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_opt_parses_a_worker_line),
		cmocka_unit_test(test_opt_refusals_say_why),
		cmocka_unit_test(test_opt_help),
		cmocka_unit_test(test_opt_argv_round_trip),
		cmocka_unit_test(test_opt_argv_is_bounded),
		cmocka_unit_test(test_opt_argv_refuses_what_parse_would),
		cmocka_unit_test(test_opt_usage_lists_every_option),
	};

	return cmocka_run_group_tests_name("ipc-opt", tests, NULL, NULL);
}
