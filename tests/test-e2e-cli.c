/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-cli.c: the gpux command's conventions, and its JSON read back by a parser. */
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "e2e.h"
#include "helpers.h"

extern char **environ;

struct run {
	int code; /* exit status; 128 + signal */
	char *out, *err;
};

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf = calloc(1, 1 << 20);
	size_t n;

	assert_non_null(f);
	assert_non_null(buf);
	n = fread(buf, 1, (1 << 20) - 1, f);
	buf[n] = '\0';
	(void)fclose(f);
	return buf;
}

/* Run gpux with args (NULL-terminated, without argv[0]); its stdout and stderr. */
static struct run gpux(const struct test_daemon *d, const char *const *args)
{
	char *argv[32], out[320], err[320];
	posix_spawn_file_actions_t fa;
	struct run r;
	unsigned n = 0;
	pid_t pid;
	int st;

	argv[n++] = getenv("GPUX_CLI");
	assert_non_null(argv[0]);
	for (unsigned i = 0; args[i]; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	(void)snprintf(out, sizeof(out), "%s/cli.out", d->dir);
	(void)snprintf(err, sizeof(err), "%s/cli.err", d->dir);
	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	(void)posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
	(void)posix_spawn_file_actions_destroy(&fa);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r.out = slurp(out);
	r.err = slurp(err);
	return r;
}

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
}

/* stdout must be exactly one JSON document: json_loads() refuses anything after it. */
static json_t *parse(const struct run *r)
{
	json_error_t e;
	json_t *j = json_loads(r->out, 0, &e);

	if (!j)
		fail_msg("not JSON: %s (line %d): %s", e.text, e.line, r->out);
	return j;
}

static int setup(void **state)
{
	/* A socket path with a quote and a backslash in it, which JSON must escape. */
	static struct test_daemon d;
	char dir[64], sock[128];

	(void)snprintf(dir, sizeof(dir), "/tmp/gpux-cli-XXXXXX");
	assert_non_null(mkdtemp(dir));
	(void)snprintf(sock, sizeof(sock), "%s/a\"b\\c.sock", dir);
	test_daemon_start_at(&d, sock, NULL);
	*state = &d;
	return 0;
}

static int teardown(void **state)
{
	struct test_daemon *d = *state;
	char dir[sizeof(d->sock)], cmd[sizeof(d->sock) + 16];

	(void)snprintf(dir, sizeof(dir), "%s", d->sock);
	*strrchr(dir, '/') = '\0';
	test_daemon_stop(d);
	(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	(void)system(cmd);
	return 0;
}

static void test_cli_status_json_parses(void **state)
{
	struct test_daemon *d = *state;
	const char *args[] = { "status", "--json", "--socket", d->sock, NULL };
	struct run r = gpux(d, args);
	json_t *j, *dev;

	assert_int_equal(r.code, 0);
	j = parse(&r);
	assert_string_equal(json_string_value(json_object_get(j, "socket")), d->sock);
	assert_true(json_is_false(json_object_get(j, "stopping")));
	assert_int_equal(json_array_size(json_object_get(j, "devices")), 1);
	dev = json_array_get(json_object_get(j, "devices"), 0);
	assert_string_equal(json_string_value(json_object_get(dev, "state")), "ready");
	assert_true(json_is_integer(json_object_get(dev, "inflight")));
	assert_true(json_is_object(json_object_get(dev, "latency")));
	/* The host back end: priorities are the worker's, and there are no compute shares. */
	{
		json_t *s = json_object_get(dev, "scheduling");

		assert_true(json_is_object(s));
		assert_int_equal(json_array_size(json_object_get(s, "priorities")), 4);
		assert_true(json_is_false(json_object_get(s, "shares")));
		assert_non_null(strstr(json_string_value(json_object_get(s, "shares_note")),
				       "host back end"));
	}
	json_decref(j);
	run_free(&r);
}

/* The table says there are no compute shares here, and why. */
static void test_cli_status_says_no_shares(void **state)
{
	struct test_daemon *d = *state;
	const char *args[] = { "status", "--socket", d->sock, NULL };
	struct run r = gpux(d, args);

	assert_int_equal(r.code, 0);
	assert_non_null(
		strstr(r.out, "compute shares: none, shares are ignored: the host back end"));
	assert_non_null(strstr(r.out, "priorities (-1..2): -1: 0 requests"));
	run_free(&r);
}

static void test_cli_status_prometheus(void **state)
{
	struct test_daemon *d = *state;
	const char *args[] = { "status", "--prometheus", "--socket", d->sock, NULL };
	struct run r = gpux(d, args);

	assert_int_equal(r.code, 0);
	assert_non_null(strstr(r.out, "# TYPE gpux_requests_total counter\n"));
	assert_non_null(strstr(r.out, "\ngpux_device_state{device=\"0\",state=\"ready\"} 1\n"));
	run_free(&r);
}

static void write_file(const struct test_daemon *d, const char *name, const char *text,
		       char *ret_path, size_t len)
{
	FILE *f;

	(void)snprintf(ret_path, len, "%s/%s", d->dir, name);
	f = fopen(ret_path, "we");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* gpux compile: the log, where the module came from, its cache key, the file in the cache. */
static void test_cli_compile(void **state)
{
	struct test_daemon *d = *state;
	char good[320], bad[320], cached[400];
	const char *args[] = { "compile", "--json", "--socket", d->sock, good, NULL };
	struct run r;
	json_t *j;
	const char *key;
	struct stat st;

	write_file(d, "k.c", "GPUX_HOST_KERNEL(k)\n{\n}\n", good, sizeof(good));
	write_file(d, "bad.c", "GPUX_HOST_KERNEL(k)\n{\n\tthis is not C;\n}\n", bad, sizeof(bad));
	r = gpux(d, args);
	assert_int_equal(r.code, 0);
	j = parse(&r);
	assert_string_equal(json_string_value(json_object_get(j, "status")), "ok");
	assert_string_equal(json_string_value(json_object_get(j, "source")), "compiled");
	key = json_string_value(json_object_get(j, "key"));
	assert_non_null(key);
	assert_int_equal(strlen(key), 32);
	/* The key names the image in the worker's cache directory. */
	(void)snprintf(cached, sizeof(cached), "%s/%s.so", d->cache, key);
	assert_int_equal(stat(cached, &st), 0);
	json_decref(j);
	run_free(&r);

	/* Again: the worker has it. Without --json, one line says so. */
	args[1] = "--lang=host";
	r = gpux(d, args);
	assert_int_equal(r.code, 0);
	assert_non_null(strstr(r.out, "worker memory"));
	assert_non_null(strstr(r.out, "cache key "));
	run_free(&r);

	args[4] = bad;
	r = gpux(d, args);
	assert_int_equal(r.code, 1);
	assert_non_null(strstr(r.out, "error"));
	assert_non_null(strstr(r.err, "compile error"));
	run_free(&r);

	/* A log that is not UTF-8 (the compiler quotes a Latin-1 line) is in the JSON, each
	 * such byte escaped, not left out. */
	write_file(d, "latin1.c", "GPUX_HOST_KERNEL(k)\n{\n}\n#error caf\xe9 au lait\n", bad,
		   sizeof(bad));
	args[1] = "--json";
	r = gpux(d, args);
	assert_int_equal(r.code, 1);
	j = parse(&r);
	assert_string_equal(json_string_value(json_object_get(j, "status")),
			    gpux_strerror(GPUX_E_COMPILE));
	assert_non_null(json_string_value(json_object_get(j, "log")));
	assert_non_null(strstr(json_string_value(json_object_get(j, "log")), "caf\\xe9 au lait"));
	json_decref(j);
	run_free(&r);

	/* An empty file and a directory are refused as such, before gpuxd is asked. */
	write_file(d, "empty.c", "", bad, sizeof(bad));
	r = gpux(d, args);
	assert_int_equal(r.code, 1);
	assert_non_null(strstr(r.err, "not a file with something in it"));
	run_free(&r);
	(void)snprintf(bad, sizeof(bad), "%s", d->dir);
	args[1] = "--lang=host";
	r = gpux(d, args);
	assert_int_equal(r.code, 1);
	assert_non_null(strstr(r.err, "not a file with something in it"));
	run_free(&r);
}

/* --json prints one JSON document and nothing else: the table and progress go to stderr. */
static void test_cli_bench_json_is_json(void **state)
{
	struct test_daemon *d = *state;
	const char *args[] = { "bench", "--json",   "--quick", "--only",
			       "rtt",   "--socket", d->sock,   NULL };
	struct run r = gpux(d, args);
	json_t *j, *res;

	assert_int_equal(r.code, 0);
	j = parse(&r);
	res = json_object_get(j, "results");
	assert_true(json_array_size(res) >= 1);
	/* No baseline on the host back end: null, never nan. */
	assert_true(json_is_null(json_object_get(json_array_get(res, 0), "baseline")));
	/* The worker's hand-offs per request, from gpuxd's counters: a number each. */
	{
		bool woken = false;

		for (size_t i = 0; i < json_array_size(res); i++) {
			json_t *row = json_array_get(res, i);

			if (strcmp(json_string_value(json_object_get(row, "scenario")),
				   "  per request: clients woken") == 0)
				woken = json_is_number(json_object_get(row, "gpux"));
		}
		assert_true(woken);
	}
	assert_non_null(strstr(r.err, "[1/1] rtt"));
	assert_non_null(strstr(r.err, "scenario"));
	json_decref(j);
	run_free(&r);
}

/*
 * On the host back end: the targets are GPU targets, judged nowhere (no MISSED); IN and OUT
 * ranges are not copied there, so no bandwidth is made of them.
 */
static void test_cli_bench_host_judges_no_gpu_target(void **state)
{
	struct test_daemon *d = *state;
	const char *args[] = { "bench",   "--json",   "--quick", "--only",
			       "bw,fork", "--socket", d->sock,   NULL };
	struct run r = gpux(d, args);
	json_t *j, *res;
	bool note = false, targets = false;

	assert_int_equal(r.code, 0);
	j = parse(&r);
	assert_true(json_is_false(json_object_get(j, "targets_judged")));
	res = json_object_get(j, "results");
	for (size_t i = 0; i < json_array_size(res); i++) {
		json_t *row = json_array_get(res, i);
		const char *name = json_string_value(json_object_get(row, "scenario"));

		assert_true(strncmp(name, "IN  ", 4) != 0 && strncmp(name, "OUT ", 4) != 0);
		note |= strstr(name, "no copy on the host back end") != NULL;
		targets |= *json_string_value(json_object_get(row, "target")) != '\0';
		assert_true(json_is_null(json_object_get(row, "met")));
	}
	assert_true(note);
	assert_true(targets);
	assert_null(strstr(r.err, "MISSED"));
	assert_non_null(strstr(r.err, "n/a: GPU target"));
	json_decref(j);
	run_free(&r);
}

/* A client that runs empty kernels until its parent closes stop[1] (it reads stop[0]). */
static pid_t busy_client(const struct test_daemon *d, const int stop[2])
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
		struct pollfd p = { .fd = stop[0], .events = POLLIN };

		(void)close(stop[1]);
		gpux_ctx *ctx;
		gpux_module *m;

		ctx = test_connect(d);
		m = test_load_host_kernels(ctx);
		while (poll(&p, 1, 0) == 0)
			if (gpux_run(m, "empty", &l, NULL, 0) != GPUX_OK)
				_exit(1);
		gpux_module_free(m);
		gpux_disconnect(ctx);
		_exit(0);
	}
	return pid;
}

/* The client of pid in gpux top's JSON, or NULL. */
static json_t *top_client(json_t *j, pid_t pid)
{
	json_t *clients = json_object_get(j, "clients");

	for (size_t i = 0; i < json_array_size(clients); i++) {
		json_t *c = json_array_get(clients, i);

		if (json_integer_value(json_object_get(c, "pid")) == pid)
			return c;
	}
	return NULL;
}

/*
 * gpux top: each device's state and rates, each client's pid, command, requests per second,
 * requests in flight and memory, from gpuxd and its worker's table of clients; as JSON, and
 * as plain frames for a script.
 */
static void test_cli_top_shows_devices_and_clients(void **state)
{
	struct test_daemon *d = *state;
	const char *json_args[] = {
		"top", "--json", "--interval", "0.5", "--socket", d->sock, NULL
	};
	const char *batch_args[] = { "top", "--batch",  "--count", "2", "--interval",
				     "0.2", "--socket", d->sock,   NULL };
	gpux_ctx *ctx = test_connect(d);
	gpux_module *m = test_load_host_kernels(ctx);
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	uint32_t ms = 3000;
	struct gpux_arg arg = GPUX_ARG_VALUE(ms);
	gpux_req *spinning;
	gpux_buf *buf;
	gpux_dbuf *dbuf;
	json_t *j, *dev, *me, *busy;
	int stop[2];
	struct run r;
	char pid[32];
	pid_t child;

	/* This process: 1 MiB shared with the worker, 4 MiB on the device, a request running. */
	assert_int_equal(gpux_buf_alloc(ctx, 1 << 20, &buf), GPUX_OK);
	{
		uint64_t n = 16;
		struct gpux_arg a[] = { GPUX_ARG_VALUE(n), gpux_arg_in(buf, 0, 64),
					gpux_arg_out(buf, 64, 64) };

		assert_int_equal(gpux_run(m, "add1",
					  &(struct gpux_launch){ .grid = { 1, 1, 1 },
								 .block = { 16, 1, 1 } },
					  a, 3),
				 GPUX_OK);
	}
	assert_int_equal(gpux_dbuf_alloc(ctx, 0, 4 << 20, &dbuf), GPUX_OK);
	assert_int_equal(gpux_submit(m, "spin", &l, &arg, 1, &spinning), GPUX_OK);
	/* Another, busy with requests all along. */
	assert_int_equal(pipe2(stop, O_CLOEXEC), 0);
	child = busy_client(d, stop);
	(void)close(stop[0]);
	(void)usleep(300000);

	r = gpux(d, json_args);
	assert_int_equal(r.code, 0);
	j = parse(&r);
	dev = json_array_get(json_object_get(j, "devices"), 0);
	assert_string_equal(json_string_value(json_object_get(dev, "state")), "ready");
	assert_true(json_number_value(json_object_get(dev, "requests_per_second")) > 0);
	assert_true(json_integer_value(json_object_get(dev, "queue")) >= 1);
	me = top_client(j, getpid());
	assert_non_null(me);
	assert_string_equal(json_string_value(json_object_get(me, "command")), "test-e2e-cli");
	assert_int_equal(json_integer_value(json_object_get(me, "uid")), getuid());
	assert_int_equal(json_integer_value(json_object_get(me, "shared_bytes")), 1 << 20);
	assert_int_equal(json_integer_value(json_object_get(me, "device_bytes")), 4 << 20);
	assert_int_equal(json_integer_value(json_object_get(me, "inflight")), 1);
	assert_int_equal(json_integer_value(json_object_get(me, "devices")), 1);
	assert_true(json_integer_value(json_object_get(me, "requests")) >= 1);
	busy = top_client(j, child);
	assert_non_null(busy);
	assert_true(json_number_value(json_object_get(busy, "requests_per_second")) > 10);
	/* gpux top itself is no client of the devices. */
	assert_int_equal(json_array_size(json_object_get(j, "clients")), 2);
	json_decref(j);
	run_free(&r);

	r = gpux(d, batch_args);
	assert_int_equal(r.code, 0);
	(void)snprintf(pid, sizeof(pid), "%8d ", (int)getpid());
	assert_non_null(strstr(r.out, "gpux top - "));
	assert_non_null(strstr(strstr(r.out, "gpux top - ") + 1, "gpux top - "));
	assert_non_null(strstr(r.out, " ready "));
	assert_non_null(strstr(r.out, pid));
	assert_non_null(strstr(r.out, "test-e2e-cli"));
	assert_non_null(strstr(r.out, "1.0 MiB"));
	assert_null(strstr(r.out, "\033"));
	run_free(&r);

	(void)close(stop[1]);
	assert_child_ok(child);
	assert_int_equal(gpux_wait(spinning, -1), GPUX_OK);
	gpux_req_free(spinning);
	gpux_dbuf_free(dbuf);
	gpux_buf_free(buf);
	gpux_module_free(m);
	gpux_disconnect(ctx);
}

/* Usage errors: one line naming the culprit, the usage, exit 2; --help exits 0. */
static void test_cli_conventions(void **state)
{
	struct test_daemon *d = *state;
	static const char *const helps[][3] = {
		{ "--help" },           { "-h" },
		{ "status", "--help" }, { "compile", "-h" },
		{ "demo", "--help" },   { "bench", "--help" },
		{ "soak", "--help" },   { "help", "status" },
		{ "--version" },
	};
	/* soak's numbers are read whole, each bad one named (never atoi()'s 0 or prefix). */
	static const char *const soak_bad[][4] = {
		{ "soak", "--clients", "x", "--clients" },
		{ "soak", "--clients", "65", "--clients" },
		{ "soak", "--minutes", "0.5x", "--minutes" },
		{ "soak", "--watchdog-s", "-1", "--watchdog-s" },
		{ "soak", "--rss-slack-mib", "", "--rss-slack-mib" },
		{ "soak", "--ops", "run,frob", "--ops" },
	};
	struct run r;

	for (unsigned i = 0; i < ARRAY_SIZE(helps); i++) {
		r = gpux(d, helps[i]);
		assert_int_equal(r.code, 0);
		assert_true(strstr(r.out, "usage: gpux") || strstr(r.out, "gpux 0."));
		assert_string_equal(r.err, "");
		run_free(&r);
	}
	for (unsigned i = 0; i < ARRAY_SIZE(soak_bad); i++) {
		const char *args[] = { soak_bad[i][0], soak_bad[i][1], soak_bad[i][2], NULL };
		char quoted[32];

		r = gpux(d, args);
		assert_int_equal(r.code, 2);
		assert_non_null(strstr(r.err, soak_bad[i][3]));
		(void)snprintf(quoted, sizeof(quoted), "\"%s\"", soak_bad[i][2]);
		assert_non_null(strstr(r.err, quoted));
		assert_non_null(strstr(r.err, "usage: gpux soak"));
		run_free(&r);
	}
	/* A list too long to read whole is refused, not cut short to what fitted. */
	{
		char ops[160] = "";
		const char *args[] = { "soak", "--ops", ops, "--minutes", "0.001", NULL };

		for (unsigned i = 0; i < 31; i++)
			(void)strcat(ops, "run,");
		(void)strcat(ops, "run,frob");
		r = gpux(d, args);
		assert_int_equal(r.code, 2);
		assert_non_null(strstr(r.err, "--ops"));
		assert_non_null(strstr(r.err, "usage: gpux soak"));
		run_free(&r);
	}
	{
		const char *args[] = { "bench", "--only", "rtt,nope", NULL };
		r = gpux(d, args);
		assert_int_equal(r.code, 2);
		assert_non_null(strstr(r.err, "\"nope\""));
		assert_non_null(strstr(r.err, "usage: gpux bench"));
		run_free(&r);
	}
	{
		const char *args[] = { "status", "--frob", NULL };
		r = gpux(d, args);
		assert_int_equal(r.code, 2);
		assert_non_null(strstr(r.err, "--frob"));
		run_free(&r);
	}
	{
		const char *args[] = { "demo", "--children", "lots", NULL };
		r = gpux(d, args);
		assert_int_equal(r.code, 2);
		assert_non_null(strstr(r.err, "\"lots\""));
		run_free(&r);
	}
	{
		const char *args[] = { "frobnicate", NULL };
		r = gpux(d, args);
		assert_int_equal(r.code, 2);
		assert_non_null(strstr(r.err, "frobnicate"));
		run_free(&r);
	}
	{
		const char *args[] = { "status", "--socket", "/nonexistent/gpuxd.sock", NULL };
		r = gpux(d, args);
		assert_int_equal(r.code, 1);
		assert_non_null(strstr(r.err, "/nonexistent/gpuxd.sock"));
		assert_non_null(strstr(r.err, "no such socket"));
		run_free(&r);
	}
}

/*
 * A few seconds of soak: it passes, and its summary names the seed it was given, the one
 * that repeats the run (not its random state at the end). Sanitizer builds keep freed
 * memory: room for that in the RSS check.
 */
static void test_cli_soak_briefly(void **state)
{
	struct test_daemon *d = *state;
	const char *args[] = { "soak", "--minutes",       "0.05", "--clients", "2", "--seed",
			       "4242", "--rss-slack-mib", "512",  NULL };
	struct run r = gpux(d, args);

	assert_int_equal(r.code, 0);
	assert_non_null(strstr(r.out, ", seed 4242\n"));
	assert_non_null(strstr(r.out, "wrong results: 0;"));
	assert_non_null(strstr(r.out, "gpux soak: passed"));
	run_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli_status_json_parses),
		cmocka_unit_test(test_cli_status_says_no_shares),
		cmocka_unit_test(test_cli_status_prometheus),
		cmocka_unit_test(test_cli_compile),
		cmocka_unit_test(test_cli_bench_json_is_json),
		cmocka_unit_test(test_cli_bench_host_judges_no_gpu_target),
		cmocka_unit_test(test_cli_top_shows_devices_and_clients),
		cmocka_unit_test(test_cli_conventions),
		cmocka_unit_test(test_cli_soak_briefly),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
