/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-service.c: gpuxd as a service: draining on SIGTERM, and what clients are told. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

extern char **environ;

static int raw_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memcpy(sa.sun_path, path, strlen(path));
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

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
	/* The message says what the status does not, for "gpuxd is stopping: ..." */
	assert_non_null(strstr(gpux_req_message(refused), "takes no new work"));
	assert_null(strstr(gpux_req_message(refused), gpux_strerror(GPUX_E_STOPPING)));
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

/*
 * A worker that comes back (after a crash) while gpuxd drains is told to drain too: new work
 * on it is refused, and gpuxd does not wait all of --drain-ms for it.
 */
static bool ready_again(const struct ipc_dev_status *s, void *arg)
{
	return s->state == GPUX_DEVICE_READY && s->generation > *(uint32_t *)arg;
}

static bool not_ready(const struct ipc_dev_status *s, void *arg)
{
	return s->state != GPUX_DEVICE_READY;
}

static void test_service_worker_back_during_drain_drains(void **state)
{
	static const char *const args[] = { "--drain-ms", "60000", "--host-devices", "2", NULL };
	struct test_env *e = test_env_open(args);
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .device = 1 };
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	gpux_req *running, *late = NULL;
	uint64_t t0;
	uint32_t gen;
	int ws, rc = GPUX_OK;

	running = spin(e->m, 1500);
	test_wait_stats(&e->d, 0, one_inflight, NULL);
	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	gen = devs[1].generation;
	/* Device 1's worker dies; gpuxd is told to stop while it is restarting. */
	assert_int_equal(kill(test_worker_pid(&e->d, 1), SIGKILL), 0);
	test_wait_stats(&e->d, 1, not_ready, NULL);
	t0 = mono_ns();
	assert_int_equal(kill(e->d.pid, SIGTERM), 0);
	test_wait_stats(&e->d, 1, ready_again, &gen);
	/* New work on the worker that came back is refused as on any other. */
	for (int i = 0; i < 200; i++) {
		assert_int_equal(gpux_submit(e->m, "empty", &l, NULL, 0, &late), GPUX_OK);
		rc = gpux_wait(late, -1);
		gpux_req_free(late);
		if (rc != GPUX_E_WORKER_LOST && rc != GPUX_E_CONNECT)
			break;
		(void)usleep(5000);
	}
	assert_int_equal(rc, GPUX_E_STOPPING);
	assert_int_equal(gpux_wait(running, -1), GPUX_OK);
	gpux_req_free(running);
	ws = daemon_exit(&e->d);
	assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	/* Once the request ended nothing was left to drain: gpuxd did not wait for the
	 * deadline (a bound far from both the 1.5 s request and the 60 s deadline). */
	assert_true(mono_ns() - t0 < 30 * NSEC_PER_SEC);
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

/* Stop the private gpuxd at sock, which ctx used, and wait until it is gone. */
static void stop_private(const char *sock, gpux_ctx *ctx)
{
	pid_t pid = test_daemon_pid_at(sock);

	gpux_disconnect(ctx);
	test_stop_pid(pid);
}

/* Whether the file holds `what`. */
static bool file_has(const char *path, const char *what)
{
	char line[4096];
	bool found = false;
	FILE *f = fopen(path, "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	(void)fclose(f);
	return found;
}

/*
 * --log-file: gpuxd's messages and its workers' lines go there, a fault names the client's
 * pid and uid, and SIGHUP opens the file anew after it was moved away (log rotation).
 */
static void test_service_log_file_reopened_on_sighup(void **state)
{
	char dir[64], log[96], moved[100], who[64];
	const char *args[] = { "--log-file", log, "--log-level", "info", NULL };
	struct test_daemon d;
	int fd;

	(void)snprintf(dir, sizeof(dir), "/tmp/gpux-log-XXXXXX");
	assert_non_null(mkdtemp(dir));
	(void)snprintf(log, sizeof(log), "%s/sub/gpuxd.log", dir);
	(void)snprintf(moved, sizeof(moved), "%s.1", log);
	/* Five and a half hours east of UTC (POSIX counts west). */
	assert_int_equal(setenv("TZ", "GPX-5:30", 1), 0);
	test_daemon_start(&d, args);
	assert_int_equal(unsetenv("TZ"), 0);
	assert_true(file_has(log, "ready (worker"));
	/* Each line starts with when, and the time's offset from UTC. */
	{
		FILE *f = fopen(log, "re");
		char line[256];
		int y, mo, dd, h, mi, se, ms;
		char zone[8];

		assert_non_null(f);
		assert_non_null(fgets(line, sizeof(line), f));
		(void)fclose(f);
		assert_int_equal(sscanf(line, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%6s ", &y, &mo, &dd, &h,
					&mi, &se, &ms, zone),
				 8);
		assert_string_equal(zone, "+05:30");
	}

	/* A client that says nonsense is dropped, and the message says who it was. */
	fd = raw_connect(d.sock);
	assert_true(send(fd, "nonsense", 8, 0) == 8);
	(void)snprintf(who, sizeof(who), "pid %d uid %u", (int)getpid(), (unsigned)getuid());
	for (int i = 0; i < 1000 && !file_has(log, who); i++)
		(void)usleep(5000);
	assert_true(file_has(log, who));
	(void)close(fd);

	assert_int_equal(rename(log, moved), 0);
	assert_int_equal(kill(d.pid, SIGHUP), 0);
	for (int i = 0; i < 1000 && !file_has(log, "log reopened"); i++)
		(void)usleep(5000);
	assert_true(file_has(log, "log reopened"));
	assert_false(file_has(moved, "log reopened"));
	test_daemon_stop(&d);
	/* The worker's own lines came through gpuxd, named by device and pid. */
	assert_true(file_has(log, "device 0: worker "));
	assert_true(file_has(log, "draining"));
	{
		char cmd[96];
		(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		(void)system(cmd);
	}
}

/* --daemonize lets go of the terminal: nothing of gpuxd keeps its starter's output open. */
static void test_service_daemonize_lets_go_of_the_terminal(void **state)
{
	char dir[64], sock[96], log[96];
	char *argv[] = { (char *)getenv("GPUX_DAEMON"),
			 "--daemonize",
			 "--backend",
			 "host",
			 "--socket",
			 sock,
			 "--log-file",
			 log,
			 NULL };
	posix_spawn_file_actions_t fa;
	int out[2];
	char c;
	pid_t pid;

	(void)snprintf(dir, sizeof(dir), "/tmp/gpux-dmn-XXXXXX");
	assert_non_null(mkdtemp(dir));
	(void)snprintf(sock, sizeof(sock), "%s/gpuxd.sock", dir);
	(void)snprintf(log, sizeof(log), "%s/gpuxd.log", dir);
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	(void)posix_spawn_file_actions_adddup2(&fa, out[1], 2);
	assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
	(void)posix_spawn_file_actions_destroy(&fa);
	(void)close(out[1]);
	assert_child_ok(pid);
	/* Ready: it listens; and the pipe is at its end, nobody holds it. */
	assert_int_equal(access(sock, F_OK), 0);
	assert_int_equal(read(out[0], &c, 1), 0);
	(void)close(out[0]);
	pid = test_daemon_pid_at(sock);
	{
		char cwd[64], link[64];
		ssize_t n;

		(void)snprintf(link, sizeof(link), "/proc/%d/cwd", (int)pid);
		n = readlink(link, cwd, sizeof(cwd) - 1);
		assert_true(n > 0);
		cwd[n] = '\0';
		assert_string_equal(cwd, "/");
	}
	test_stop_pid(pid);
	assert_true(file_has(log, "serving"));
	{
		char cmd[96];
		(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		(void)system(cmd);
	}
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

	/* A new context, with no shared gpuxd around, gets a private one (kept out of HOME),
	 * which logs where GPUX_LOG_FILE says. */
	(void)snprintf(d.cache, sizeof(d.cache), "%s/cache", rt);
	(void)snprintf(d.log, sizeof(d.log), "%s/private.log", rt);
	assert_int_equal(setenv("GPUX_CACHE_DIR", d.cache, 1), 0);
	assert_int_equal(setenv("GPUX_LOG_FILE", d.log, 1), 0);
	assert_int_equal(gpux_connect(NULL, &ctx), GPUX_OK);
	assert_string_equal(gpux_connect_error(), "");
	assert_int_equal(access(sock, F_OK), 0);
	stop_private(sock, ctx);
	assert_true(file_has(d.log, "private"));
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
	/* An attempt that fails before it reaches for a socket says so, not the last one's
	 * reason. */
	assert_int_equal(gpux_connect(sock, NULL), GPUX_E_INVAL);
	assert_null(strstr(gpux_connect_error(), "no such socket"));
	assert_string_not_equal(gpux_connect_error(), "");
	/* One that fails for want of an fd of its own (its epoll fd), after one that failed for
	 * want of a socket: its own reason. */
	assert_int_equal(gpux_connect(sock, &ctx), GPUX_E_CONNECT);
	assert_non_null(strstr(gpux_connect_error(), "no such socket"));
	{
		struct rlimit saved, low;
		int next = dup(0);
		gpux_status st;

		assert_true(next >= 0);
		(void)close(next);
		assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
		low = saved;
		low.rlim_cur = (rlim_t)next;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
		st = gpux_connect(sock, &ctx);
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
		assert_int_not_equal(st, GPUX_OK);
	}
	assert_null(ctx);
	assert_null(strstr(gpux_connect_error(), "no such socket"));
	assert_string_not_equal(gpux_connect_error(), "");
	assert_int_equal(rmdir(dir), 0);
}

/* Read one notification (within 20 s) into buf; asserts one came. */
static void notify_recv(int fd, char *buf, size_t cap)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;

	assert_int_equal(poll(&p, 1, 20000), 1);
	n = recv(fd, buf, cap - 1, 0);
	assert_true(n > 0);
	buf[n] = '\0';
}

/*
 * Under systemd: gpuxd takes the listening socket systemd passed (LISTEN_FDS), says READY=1
 * once it serves, STOPPING=1 when it drains, and leaves the socket, which is systemd's.
 */
static void test_service_systemd_notify_and_socket_activation(void **state)
{
	char dir[64], sock[96], notify[96], cache[96], msg[512];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd, nfd;
	gpux_ctx *ctx;
	pid_t pid;

	(void)snprintf(dir, sizeof(dir), "/tmp/gpux-sd-XXXXXX");
	assert_non_null(mkdtemp(dir));
	(void)snprintf(sock, sizeof(sock), "%s/gpuxd.sock", dir);
	(void)snprintf(notify, sizeof(notify), "%s/notify", dir);
	(void)snprintf(cache, sizeof(cache), "%s/cache", dir);
	nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	memcpy(sa.sun_path, notify, strlen(notify) + 1);
	assert_int_equal(bind(nfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 16), 0);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char lp[16];
		char *argv[] = { (char *)getenv("GPUX_DAEMON"),
				 "--backend",
				 "host",
				 "--cache-dir",
				 cache,
				 NULL };

		/* What systemd does: the socket as fd 3, LISTEN_PID naming the process. */
		if (dup2(lfd, 3) != 3)
			_exit(127);
		(void)snprintf(lp, sizeof(lp), "%d", (int)getpid());
		(void)setenv("LISTEN_PID", lp, 1);
		(void)setenv("LISTEN_FDS", "1", 1);
		(void)setenv("NOTIFY_SOCKET", notify, 1);
		execv(argv[0], argv);
		_exit(127);
	}
	(void)close(lfd);
	notify_recv(nfd, msg, sizeof(msg));
	assert_non_null(strstr(msg, "READY=1"));
	assert_non_null(strstr(msg, "STATUS=serving"));
	assert_int_equal(gpux_connect(sock, &ctx), GPUX_OK);
	gpux_disconnect(ctx);

	assert_int_equal(kill(pid, SIGTERM), 0);
	notify_recv(nfd, msg, sizeof(msg));
	assert_non_null(strstr(msg, "STOPPING=1"));
	assert_child_ok(pid);
	assert_int_equal(access(sock, F_OK), 0);
	(void)close(nfd);
	{
		char cmd[96];
		(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		(void)system(cmd);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_service_sigterm_drains),
		cmocka_unit_test(test_service_drain_has_a_deadline),
		cmocka_unit_test(test_service_worker_back_during_drain_drains),
		cmocka_unit_test(test_service_shared_gpuxd_gone_is_not_replaced),
		cmocka_unit_test(test_service_connect_errors_say_where_and_why),
		cmocka_unit_test(test_service_log_file_reopened_on_sighup),
		cmocka_unit_test(test_service_daemonize_lets_go_of_the_terminal),
		cmocka_unit_test(test_service_systemd_notify_and_socket_activation),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
