/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-service.c: gpuxd as a service: draining on SIGTERM, and what clients are told. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

static gpux_req *spin(gpux_module *m, uint32_t ms)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	struct gpux_arg arg = GPUX_ARG_VALUE(ms);
	gpux_req *r = NULL;

	assert_int_equal(gpux_submit(m, "spin", &l, &arg, 1, &r), GPUX_OK);
	return r;
}

static bool one_inflight(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.inflight == 1;
}

/* Wait for gpuxd to exit by itself; its exit status. */
static int daemon_exit(struct test_daemon *d)
{
	int st;

	assert_int_equal(waitpid(d->pid, &st, 0), d->pid);
	d->pid = 0;
	return st;
}

/*
 * SIGTERM with a request running: it finishes, while new clients and new requests are
 * refused with GPUX_E_STOPPING and gpux status still answers, showing the drain.
 */
static void test_service_sigterm_drains(void **state)
{
	static const char *const args[] = { "--drain-ms", "20000", NULL };
	struct test_env *e = test_env_open(args);
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	gpux_ctx *late = NULL;
	gpux_req *running, *refused = NULL;
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	int ws;

	running = spin(e->m, 1500);
	/* What the worker holds shows as it comes, not when something finishes. */
	test_wait_stats(&e->d, 0, one_inflight, NULL);
	assert_int_equal(kill(e->d.pid, SIGTERM), 0);
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
		if (st.flags & IPC_STATUS_STOPPING)
			break;
		(void)usleep(1000);
	}
	assert_true(st.flags & IPC_STATUS_STOPPING);

	assert_int_equal(gpux_connect(e->d.sock, &late), GPUX_E_STOPPING);
	assert_null(late);
	assert_non_null(strstr(gpux_connect_error(), e->d.sock));
	assert_non_null(strstr(gpux_connect_error(), "stopping"));
	/* New work on an existing connection: refused, once the worker has been told. */
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(gpux_submit(e->m, "empty", &l, NULL, 0, &refused), GPUX_OK);
		if (gpux_wait(refused, -1) == GPUX_E_STOPPING)
			break;
		gpux_req_free(refused);
		refused = NULL;
		(void)usleep(1000);
	}
	assert_non_null(refused);
	assert_int_equal(gpux_test(refused), GPUX_E_STOPPING);
	assert_non_null(strstr(gpux_req_message(refused), "stopping"));
	gpux_req_free(refused);
	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	assert_int_equal(devs[0].stats.inflight, 1);

	assert_int_equal(gpux_wait(running, -1), GPUX_OK);
	gpux_req_free(running);
	ws = daemon_exit(&e->d);
	assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	/* The socket went with it; this shared gpuxd is not replaced behind our back. */
	assert_int_equal(access(e->d.sock, F_OK), -1);
	assert_int_equal(gpux_run(e->m, "empty", &l, NULL, 0), GPUX_E_CONNECT);
	assert_non_null(strstr(gpux_connect_error(), "went away"));
	test_env_close(e);
}

/* A request that outlives --drain-ms is cut short: gpuxd does not wait for ever. */
static void test_service_drain_has_a_deadline(void **state)
{
	static const char *const args[] = { "--drain-ms", "100", NULL };
	struct test_env *e = test_env_open(args);
	gpux_req *running = spin(e->m, 8000);
	int ws;

	test_wait_stats(&e->d, 0, one_inflight, NULL);
	assert_int_equal(kill(e->d.pid, SIGTERM), 0);
	assert_int_equal(gpux_wait(running, -1), GPUX_E_WORKER_LOST);
	gpux_req_free(running);
	ws = daemon_exit(&e->d);
	assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	test_env_close(e);
}

/* Stop the private gpuxd at sock (its worker's parent) and wait until it is gone. */
static void stop_private(const char *sock, gpux_ctx *ctx)
{
	struct test_daemon p = { 0 };
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	char path[64], buf[512], *close_paren;
	FILE *f;
	int ppid = 0;

	(void)snprintf(p.sock, sizeof(p.sock), "%s", sock);
	assert_int_equal(test_daemon_status(&p, &st, devs), 0);
	(void)snprintf(path, sizeof(path), "/proc/%u/stat", devs[0].pid);
	f = fopen(path, "re");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof(buf), f));
	(void)fclose(f);
	close_paren = strrchr(buf, ')');
	assert_non_null(close_paren);
	assert_int_equal(sscanf(close_paren + 2, "%*c %d", &ppid), 1);
	gpux_disconnect(ctx);
	assert_int_equal(kill(ppid, SIGTERM), 0);
	for (int i = 0; i < 2000 && kill(ppid, 0) == 0; i++)
		(void)usleep(5000);
	assert_int_equal(kill(ppid, 0), -1);
}

/*
 * At the default path, a client served by a shared gpuxd is told it went away: no private
 * gpuxd is started in its place. A client that never met a shared one starts one.
 */
static void test_service_shared_gpuxd_gone_is_not_replaced(void **state)
{
	char rt[64], dir[96], sock[128];
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	gpux_module *m;
	const char *old = getenv("XDG_RUNTIME_DIR");
	char *saved = old ? strdup(old) : NULL;
	struct test_daemon d;
	gpux_ctx *ctx;
	int ws;

	(void)snprintf(rt, sizeof(rt), "/tmp/gpux-rt-XXXXXX");
	assert_non_null(mkdtemp(rt));
	(void)snprintf(dir, sizeof(dir), "%s/gpux", rt);
	(void)snprintf(sock, sizeof(sock), "%s/gpuxd.sock", dir);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(setenv("XDG_RUNTIME_DIR", rt, 1), 0);
	(void)unsetenv("GPUX_SOCKET");

	test_daemon_start_at(&d, sock, NULL);
	assert_int_equal(gpux_connect(NULL, &ctx), GPUX_OK);
	m = test_load_host_kernels(ctx);
	assert_int_equal(gpux_run(m, "empty", &l, NULL, 0), GPUX_OK);
	assert_int_equal(kill(d.pid, SIGTERM), 0);
	ws = daemon_exit(&d);
	assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	assert_int_equal(gpux_run(m, "empty", &l, NULL, 0), GPUX_E_CONNECT);
	assert_non_null(strstr(gpux_connect_error(), "went away"));
	assert_non_null(strstr(gpux_connect_error(), sock));
	assert_int_equal(access(sock, F_OK), -1);
	gpux_module_free(m);
	gpux_disconnect(ctx);

	/* A new context, with no shared gpuxd around, gets a private one (kept out of HOME). */
	(void)snprintf(d.cache, sizeof(d.cache), "%s/cache", rt);
	(void)snprintf(d.log, sizeof(d.log), "%s/private.log", rt);
	assert_int_equal(setenv("GPUX_CACHE_DIR", d.cache, 1), 0);
	assert_int_equal(setenv("GPUX_LOG_FILE", d.log, 1), 0);
	assert_int_equal(gpux_connect(NULL, &ctx), GPUX_OK);
	assert_string_equal(gpux_connect_error(), "");
	assert_int_equal(access(sock, F_OK), 0);
	stop_private(sock, ctx);
	(void)unsetenv("GPUX_CACHE_DIR");
	(void)unsetenv("GPUX_LOG_FILE");

	test_daemon_stop(&d);
	if (saved)
		(void)setenv("XDG_RUNTIME_DIR", saved, 1);
	else
		(void)unsetenv("XDG_RUNTIME_DIR");
	free(saved);
	{
		char cmd[160];
		(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", rt);
		(void)system(cmd);
	}
}

/* Connect errors name the path and the reason. */
static void test_service_connect_errors_say_where_and_why(void **state)
{
	char dir[64], sock[96];
	gpux_ctx *ctx = NULL;

	(void)snprintf(dir, sizeof(dir), "/tmp/gpux-none-XXXXXX");
	assert_non_null(mkdtemp(dir));
	(void)snprintf(sock, sizeof(sock), "%s/nobody.sock", dir);
	assert_int_equal(gpux_connect(sock, &ctx), GPUX_E_CONNECT);
	assert_null(ctx);
	assert_non_null(strstr(gpux_connect_error(), sock));
	assert_non_null(strstr(gpux_connect_error(), "no such socket"));
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_service_sigterm_drains),
		cmocka_unit_test(test_service_drain_has_a_deadline),
		cmocka_unit_test(test_service_shared_gpuxd_gone_is_not_replaced),
		cmocka_unit_test(test_service_connect_errors_say_where_and_why),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
