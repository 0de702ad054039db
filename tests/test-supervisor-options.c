/* SPDX-License-Identifier: MIT */
/* tests/test-supervisor-options.c: gpuxd's command line, and the one it gives each worker. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "macro.h"
#include "sup.h"

#ifndef MAN_PAGE
#error "MAN_PAGE: man/gpuxd.8.scd"
#endif

/* Parse gpuxd's options given after the program's name (NULL-terminated) into *o, which
 * starts from gpuxd's defaults. */
static int parse(const char *const *args, struct sup_opts *o, char *why, size_t len)
{
	char *argv[160] = { "gpuxd" };
	int argc = 1;

	for (; args[argc - 1]; argc++)
		argv[argc] = (char *)args[argc - 1];
	argv[argc] = NULL;
	why[0] = '\0';
	return sup_opts_parse(o, argc, argv, why, len);
}

/* Each kind of option refuses what it cannot take, saying why, and *o is left alone. */
static void test_options_refusals_say_why(void **state)
{
	static const struct {
		const char *args[5];
		const char *why;
	} bad[] = {
		/* numbers; before, these were cut to the limit, or taken mod 01000 */
		{ { "--host-devices", "0" }, "--host-devices: 0 is less than 1" },
		{ { "--host-devices", "65" }, "--host-devices: 65 is more than 64" },
		{ { "--slots", "1000" }, "--slots: 1000 is more than 64" },
		{ { "--max-clients", "16385" }, "--max-clients: 16385 is more than 16384" },
		{ { "--max-clients-per-user", "1000001" },
		  "--max-clients-per-user: 1000001 is more than 1000000" },
		{ { "--drain-ms", "5s" }, "--drain-ms: \"5s\" is not a number" },
		{ { "--quota-shared", "-1" }, "--quota-shared: \"-1\" is not a number" },
		/* a mode: octal, a mode's bits only */
		{ { "--socket-mode", "7777" }, "--socket-mode: 07777 is more than 0777" },
		{ { "--socket-mode", "1000" }, "--socket-mode: 01000 is more than 0777" },
		{ { "--socket-mode", "0698" }, "--socket-mode: \"0698\" is not an octal mode" },
		{ { "--socket-mode", "rw" }, "--socket-mode: \"rw\" is not an octal mode" },
		/* words */
		{ { "--backend", "gpu" }, "--backend: \"gpu\" is not auto, cuda or host" },
		{ { "--host-sandbox", "yes" }, "--host-sandbox: \"yes\" is not auto, on or off" },
		/* texts */
		{ { "--socket", "" }, "--socket: an empty value" },
		{ { "--metrics", "" }, "--metrics: an empty value" },
		/* an address: its form and port here, its host when gpuxd starts */
		{ { "--metrics", "127.0.0.1:99999" },
		  "--metrics: port 99999 is not from 1 to 65535" },
		{ { "--metrics", ":0" }, "--metrics: port 0 is not from 1 to 65535" },
		{ { "--metrics", ":notaport" }, "--metrics: \"notaport\" is not a port number" },
		{ { "--metrics", "localhost:" },
		  "--metrics: \"localhost:\" has no port after the ':'" },
		{ { "--metrics", "9464" },
		  "--metrics: \"9464\" is not HOST:PORT, [V6]:PORT or :PORT" },
		{ { "--metrics", "::1:9464" },
		  "--metrics: \"::1:9464\": an IPv6 address goes in brackets ([::1]:9464)" },
		{ { "--metrics", "[::1]" },
		  "--metrics: \"[::1]\": [V6]:PORT has no port after the ']'" },
		/* parsed by gpuxd's own parsers */
		{ { "--log-level", "loud" },
		  "--log-level: \"loud\" is not err, warning, notice, info or debug" },
		{ { "--allow-group", "no-such-group-of-gpux" },
		  "--allow-group: no group \"no-such-group-of-gpux\"" },
		{ { "--allow-group", "4294967295" }, "--allow-group: 4294967295 is no group id" },
		{ { "--allow-group", "99999999999" }, "--allow-group: 99999999999 is no group id" },
		{ { "--priority", "alice=2" },
		  "--priority: \"alice\" is not user:NAME, group:NAME or *" },
		{ { "--priority", "user:no-such-user-of-gpux=1" },
		  "--priority: no user \"no-such-user-of-gpux\"" },
		{ { "--priority", "group:no-such-group-of-gpux=1" },
		  "--priority: no group \"no-such-group-of-gpux\"" },
		{ { "--priority", "*=3" }, "--priority: *=3: a priority is a number from -1 to 2" },
		{ { "--priority", "*=-2" },
		  "--priority: *=-2: a priority is a number from -1 to 2" },
		{ { "--priority", "*=1/x" },
		  "--priority: *=1/x: a priority is a number from -1 to 2" },
		{ { "--priority", "*=" }, "--priority: *=: a priority is a number from -1 to 2" },
		{ { "--priority", "*=0/1" },
		  "--priority: *=0/1: the default is above the highest" },
		{ { "--priority", "*" }, "--priority: \"*\" is not WHO=MAX[/DEFAULT]" },
		{ { "--priority", "user:0=1,,*=0" },
		  "--priority: \"user:0=1,,*=0\": an empty or overlong rule" },
		{ { "--priority", "user:=1" },
		  "--priority: \"user:\" is not user:NAME, group:NAME or *" },
		/* what options decide together */
		{ { "--max-clients", "16", "--reserved-clients", "16" },
		  "--reserved-clients: 16 leaves none of --max-clients 16 to others" },
		/* the command line */
		{ { "--private=1" }, "--private takes no value" },
		{ { "--version=2" }, "--version takes no value" },
		{ { "--timeout-ms" }, "--timeout-ms needs a value" },
		{ { "--sandbox" }, "unknown option --sandbox" },
		{ { "--probe" }, "unknown option --probe" },
		{ { "now" }, "unexpected argument \"now\"" },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		struct sup_opts o, before;
		char why[256];

		sup_opts_init(&o);
		memcpy(&before, &o, sizeof(o));
		if (parse(bad[i].args, &o, why, sizeof(why)) != -EINVAL ||
		    strcmp(why, bad[i].why) != 0)
			fail_msg("%s: \"%s\", not \"%s\"", bad[i].args[0], why, bad[i].why);
		assert_memory_equal(&o, &before, sizeof(o));
	}
}

/* --priority: rules in the order given, from several options and lists; names and numbers;
 * the default 0, or the highest when it is below 0. */
static void test_options_priority_rules(void **state)
{
	static const char *const args[] = { "--priority", "user:root=2/1,group:0=1",
					    "--priority", "*=-1",
					    "--priority", "user:12345=-1/-1",
					    NULL };
	struct sup_opts o;
	char why[256];

	sup_opts_init(&o);
	assert_int_equal(o.nprio_rules, 0);
	assert_int_equal(parse(args, &o, why, sizeof(why)), 0);
	assert_int_equal(o.nprio_rules, 4);
	assert_int_equal(o.prio_rules[0].who, SUP_PRIO_USER);
	assert_int_equal(o.prio_rules[0].id, 0);
	assert_int_equal(o.prio_rules[0].max, 2);
	assert_int_equal(o.prio_rules[0].def, 1);
	assert_int_equal(o.prio_rules[1].who, SUP_PRIO_GROUP);
	assert_int_equal(o.prio_rules[1].id, 0);
	assert_int_equal(o.prio_rules[1].max, 1);
	assert_int_equal(o.prio_rules[1].def, 0);
	assert_int_equal(o.prio_rules[2].who, SUP_PRIO_ALL);
	assert_int_equal(o.prio_rules[2].max, -1);
	assert_int_equal(o.prio_rules[2].def, -1);
	assert_int_equal(o.prio_rules[3].who, SUP_PRIO_USER);
	assert_int_equal(o.prio_rules[3].id, 12345);
	assert_int_equal(o.prio_rules[3].def, -1);
}

/* At most SUP_PRIO_RULES_MAX rules. */
static void test_options_priority_rules_capped(void **state)
{
	static char list[SUP_PRIO_RULES_MAX + 1][16];
	const char *args[2 * (SUP_PRIO_RULES_MAX + 1) + 1];
	struct sup_opts o;
	char why[256];

	for (unsigned i = 0; i <= SUP_PRIO_RULES_MAX; i++) {
		(void)snprintf(list[i], sizeof(list[i]), "user:%u=1", i);
		args[2 * i] = "--priority";
		args[2 * i + 1] = list[i];
	}
	args[2 * SUP_PRIO_RULES_MAX] = NULL;
	sup_opts_init(&o);
	assert_int_equal(parse(args, &o, why, sizeof(why)), 0);
	assert_int_equal(o.nprio_rules, SUP_PRIO_RULES_MAX);
	args[2 * SUP_PRIO_RULES_MAX] = "--priority";
	args[2 * SUP_PRIO_RULES_MAX + 2] = NULL;
	sup_opts_init(&o);
	assert_int_equal(parse(args, &o, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "--priority: more than 64 rules");
}

static void test_options_good_values(void **state)
{
	static const char *const group[] = { "--allow-group",
					     "0",
					     "--socket-mode",
					     "0640",
					     "--host-devices",
					     "64",
					     "--log-level",
					     "debug",
					     "--reserved-clients",
					     "0",
					     NULL };
	static const char *const none[] = { NULL };
	static const char *const by_name[] = { "--allow-group",      "root",
					       "--host-sandbox",     "off",
					       "--metrics",          "[::1]:9464",
					       "--metrics-per-user", NULL };
	struct sup_opts o;
	char why[256];

	sup_opts_init(&o);
	assert_int_equal(parse(none, &o, why, sizeof(why)), 0);
	assert_int_equal(o.socket_mode, 0600);
	assert_false(o.allow_group);
	assert_int_equal(o.reserved_clients, IPC_OPT_MAX_CLIENTS / 16);
	assert_int_equal(o.host_sandbox, geteuid() == 0);
	assert_int_equal(o.log_level, LOG_INFO);

	sup_opts_init(&o);
	assert_int_equal(parse(group, &o, why, sizeof(why)), 0);
	assert_true(o.allow_group);
	assert_int_equal(o.allow_gid, 0);
	assert_int_equal(o.socket_mode, 0640);
	assert_int_equal(o.host_devices, 64);
	assert_int_equal(o.log_level, LOG_DEBUG);
	assert_int_equal(o.reserved_clients, 0);
	assert_true(o.host_sandbox);

	/* A group, and no mode: the group may connect. */
	sup_opts_init(&o);
	assert_int_equal(parse(by_name, &o, why, sizeof(why)), 0);
	assert_true(o.allow_group);
	assert_int_equal(o.allow_gid, 0);
	assert_int_equal(o.socket_mode, 0660);
	assert_false(o.host_sandbox);
	assert_string_equal(o.metrics, "[::1]:9464");
	assert_true(o.metrics_per_user);
}

static void test_options_help_and_version(void **state)
{
	static const char *const help[] = { "--slots", "1", "--help", "--slots", "x", NULL };
	static const char *const version[] = { "--version", NULL };
	struct sup_opts o;
	char why[256];

	sup_opts_init(&o);
	assert_int_equal(parse(help, &o, why, sizeof(why)), IPC_OPT_HELP);
	assert_int_equal(parse(version, &o, why, sizeof(why)), IPC_OPT_VERSION);
}

/* A worker's argv from every option gpuxd hands on, each far from its default: it fits its
 * fixed storage, and the worker reads back what gpuxd meant. */
static void test_options_worker_argv_every_option(void **state)
{
	static const char *const args[] = {
		"--cache-dir",
		"/var/cache/gpux",
		"--timeout-ms",
		"18446744073709",
		"--max-timeout-ms",
		"18446744073709",
		"--quota-shared",
		"18446744073709551615",
		"--quota-shared-user",
		"18446744073709551614",
		"--quota-device",
		"18446744073709551613",
		"--device-reserve",
		"18446744073709551611",
		"--cache-bytes",
		"18446744073709551612",
		"--cache-ttl-ms",
		"18446744073709",
		"--slots",
		"64",
		"--host-sandbox",
		"on",
		"--worker",
		"/usr/libexec/gpux-worker",
		NULL,
	};
	static struct sup s;
	struct sup_worker *w = &s.workers[IPC_DEVICES_MAX - 1];
	struct ipc_worker_opts wo = IPC_WORKER_OPTS_DEFAULTS;
	struct sup_argv argv;
	char why[256];

	sup_opts_init(&s.opts);
	assert_int_equal(parse(args, &s.opts, why, sizeof(why)), 0);
	w->index = IPC_DEVICES_MAX - 1;
	(void)snprintf(w->backend, sizeof(w->backend), "cuda");
	assert_int_equal(sup_worker_argv(&s, w, &argv), 0);
	assert_string_equal(argv.v[0], "/usr/libexec/gpux-worker");
	assert_string_equal(argv.v[1], "--device");
	assert_true(argv.a.n < IPC_WORKER_ARGV_MAX);
	assert_null(argv.v[argv.a.n]);

	assert_int_equal(
		ipc_opt_parse(&ipc_worker_prog, (int)argv.a.n, argv.v, &wo, why, sizeof(why)), 0);
	assert_int_equal(wo.device, IPC_DEVICES_MAX - 1);
	assert_string_equal(wo.backend, "cuda");
	assert_int_equal(wo.control_fd, 3);
	assert_int_equal(wo.status_fd, 4);
	assert_int_equal(wo.clients_fd, 5);
	assert_int_equal(wo.parent_pid, getpid());
	assert_true(wo.sandbox);
	assert_false(wo.probe);
	assert_string_equal(wo.cache_dir, "/var/cache/gpux");
	assert_int_equal(wo.timeout_ms, 18446744073709ull);
	assert_int_equal(wo.max_timeout_ms, 18446744073709ull);
	assert_int_equal(wo.quota_shared, UINT64_MAX);
	assert_int_equal(wo.quota_shared_user, UINT64_MAX - 1);
	assert_int_equal(wo.quota_device, UINT64_MAX - 2);
	assert_int_equal(wo.device_reserve, UINT64_MAX - 4);
	assert_int_equal(wo.cache_bytes, UINT64_MAX - 3);
	assert_int_equal(wo.cache_ttl_ms, 18446744073709ull);
	assert_int_equal(wo.slots, 64);
}

/* The probe's: the back end asked for, nothing else. */
static void test_options_probe_argv(void **state)
{
	static const char *const args[] = { "--worker", "gpux-worker", "--slots", "3", NULL };
	static struct sup s;
	struct sup_argv argv;
	char why[256];

	sup_opts_init(&s.opts);
	assert_int_equal(parse(args, &s.opts, why, sizeof(why)), 0);
	assert_int_equal(sup_worker_argv(&s, NULL, &argv), 0);
	assert_int_equal(argv.a.n, 4);
	assert_string_equal(argv.v[1], "--backend");
	assert_string_equal(argv.v[2], "auto");
	assert_string_equal(argv.v[3], "--probe");
	assert_null(argv.v[4]);
}

/* The usage text has every option of gpuxd's, --help and --version. */
static void test_options_usage_lists_every_option(void **state)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	unsigned sections = 0;

	assert_non_null(f);
	ipc_opt_usage(&sup_prog, f);
	assert_int_equal(fclose(f), 0);
	assert_true(strncmp(text, "usage: gpuxd [options]\n", 23) == 0);
	for (size_t i = 0; i < sup_prog.nopts; i++) {
		const struct ipc_opt *o = &sup_prog.opts[i];
		char want[160], help[128];

		(void)snprintf(help, sizeof(help), "%.*s\n", (int)strcspn(o->help, "\n"), o->help);
		if (o->kind == IPC_OPT_SECTION) {
			(void)snprintf(want, sizeof(want), "\n%s", help);
			sections++;
		} else {
			(void)snprintf(want, sizeof(want), "\n  --%s%s%s ", o->name,
				       o->arg ? " " : "", o->arg ? o->arg : "");
		}
		if (!strstr(text, want) || !strstr(text, help))
			fail_msg("no \"%s\" with its help in:\n%s", want + 1, text);
	}
	assert_int_equal(sections, 4);
	assert_non_null(strstr(text, "\n  -h, --help "));
	assert_non_null(strstr(text, "\n  --version "));
	assert_null(strstr(text, "--control-fd"));
	free(text);
}

/* So does its man page. */
static void test_options_man_page_lists_every_option(void **state)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = fopen(MAN_PAGE, "re");

	assert_non_null(f);
	assert_true(getdelim(&text, &len, '\0', f) > 0);
	(void)fclose(f);
	for (size_t i = 0; i < sup_prog.nopts; i++) {
		const struct ipc_opt *o = &sup_prog.opts[i];
		char want[128];

		if (o->kind == IPC_OPT_SECTION)
			continue;
		(void)snprintf(want, sizeof(want), "*--%s*", o->name);
		if (!strstr(text, want))
			fail_msg("%s has no %s", MAN_PAGE, want);
	}
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_options_refusals_say_why),
		cmocka_unit_test(test_options_good_values),
		cmocka_unit_test(test_options_priority_rules),
		cmocka_unit_test(test_options_priority_rules_capped),
		cmocka_unit_test(test_options_help_and_version),
		cmocka_unit_test(test_options_worker_argv_every_option),
		cmocka_unit_test(test_options_probe_argv),
		cmocka_unit_test(test_options_usage_lists_every_option),
		cmocka_unit_test(test_options_man_page_lists_every_option),
	};

	return cmocka_run_group_tests_name("supervisor-options", tests, NULL, NULL);
}
