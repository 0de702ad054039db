/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-limits.c: many connections of one user or process lock out nobody else. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "e2e.h"
#include "helpers.h"

/* Small limits, so that a few processes reach them. */
#define MAX_CLIENTS 16
#define RESERVED 4
#define PER_USER 6
#define PER_PROCESS 5

static int setup(void **state)
{
	/* The other user is let in only where this test can be it (as root). */
	static const char *const args[] = { "--max-clients",
					    "16",
					    "--reserved-clients",
					    "4",
					    "--max-clients-per-user",
					    "6",
					    "--max-clients-per-process",
					    "5",
					    "--admin-clients",
					    "2",
					    "--hello-timeout-ms",
					    "60000",
					    "--busy-hello-timeout-ms",
					    "200",
					    "--allow-group",
					    "65534",
					    NULL };
	const char *const *use = args;
	const char *own[ARRAY_SIZE(args)];
	struct test_env *e;

	if (geteuid() != 0) {
		memcpy(own, args, sizeof(args));
		own[ARRAY_SIZE(args) - 3] = NULL;
		use = own;
	}
	e = test_env_open(use);
	/* Let the other user reach the socket: only gpuxd's own checks stand in the way. */
	assert_int_equal(chmod(e->d.dir, 0755), 0);
	*state = e;
	return 0;
}

static int raw_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	memcpy(sa.sun_path, path, strlen(path));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		(void)close(fd);
		return -errno;
	}
	return fd;
}

/* Say hello (as a client, not an admin) and read the answer: 1 welcomed, 0 refused. */
static int hello(int fd, int32_t *ret_status)
{
	struct ipc_hello h = { .min_version = IPC_VERSION_MIN, .max_version = IPC_VERSION };
	uint8_t buf[IPC_MSG_MAX];
	struct ipc_done_msg d;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct ipc_msg msg;
	int n = ipc_encode(buf, sizeof(buf), IPC_HELLO, 1, 0, &h, sizeof(h), NULL, 0);

	(void)ipc_channel_send(fd, buf, (size_t)n, NULL, 0, 0);
	if (poll(&p, 1, 10000) != 1 || ipc_channel_recv_msg(fd, buf, sizeof(buf), &msg, 0) != 1)
		return 0;
	ipc_msg_close_fds(&msg);
	if (msg.hdr.type == IPC_WELCOME)
		return 1;
	if (msg.hdr.type == IPC_DONE && ipc_decode_done(&msg, &d) == 0)
		*ret_status = d.m.status;
	return 0;
}

struct holder {
	pid_t pid;
	int welcomed;   /* connections gpuxd kept */
	int32_t status; /* why the last one was refused, or 0 */
};

/*
 * A process (of `uid`, or this test's user when 0) that opens `n` connections, says hello
 * on each, reports how many were welcomed, and holds them until killed.
 */
static struct holder hold(struct test_env *e, int n, uid_t uid)
{
	struct holder h = { 0 };
	int p[2];

	assert_int_equal(pipe(p), 0);
	h.pid = fork();
	assert_true(h.pid >= 0);
	if (h.pid == 0) {
		int32_t report[2] = { 0, 0 };

		(void)close(p[0]);
		if (uid && (setgid(uid) < 0 || setuid(uid) < 0))
			_exit(10);
		for (int i = 0; i < n; i++) {
			int fd = raw_connect(e->d.sock);

			if (fd >= 0)
				report[0] += hello(fd, &report[1]);
		}
		(void)write(p[1], report, sizeof(report));
		(void)alarm(60);
		(void)pause();
		_exit(0);
	}
	(void)close(p[1]);
	{
		int32_t report[2];

		assert_int_equal(read(p[0], report, sizeof(report)), (ssize_t)sizeof(report));
		h.welcomed = report[0];
		h.status = report[1];
	}
	(void)close(p[0]);
	return h;
}

static void release(struct holder *h)
{
	int st;

	assert_int_equal(kill(h->pid, SIGKILL), 0);
	assert_int_equal(waitpid(h->pid, &st, 0), h->pid);
}

static uint32_t nclients(struct test_env *e)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return st.nclients;
}

/* gpuxd has let go of everybody but this test's context (and the status query). */
static void wait_released(struct test_env *e)
{
	for (int i = 0; i < 1000 && nclients(e) != 2; i++)
		(void)usleep(10000);
	assert_int_equal(nclients(e), 2);
}

static void connect_and_run(struct test_env *e, gpux_status want)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	gpux_ctx *ctx = NULL;
	gpux_module *m;

	assert_int_equal(gpux_connect(e->d.sock, &ctx), want);
	if (want != GPUX_OK)
		return;
	m = test_load_host_kernels(ctx);
	assert_int_equal(gpux_run(m, "empty", &l, NULL, 0), GPUX_OK);
	gpux_module_free(m);
	gpux_disconnect(ctx);
}

static void test_e2e_one_process_is_capped(void **state)
{
	struct test_env *e = *state;
	struct holder h = hold(e, PER_PROCESS + 2, 0);

	assert_int_equal(h.welcomed, PER_PROCESS);
	assert_int_equal(h.status, GPUX_E_QUOTA);
	connect_and_run(e, GPUX_OK);
	release(&h);
	wait_released(e);
}

/* gpuxd's own user fills every slot: it is refused more, and gpux status still answers. */
static void test_e2e_status_answers_when_full(void **state)
{
	struct test_env *e = *state;
	struct holder h[3];
	int welcomed = 0;

	/* This test's context holds one slot already. */
	for (int i = 0; i < 3; i++) {
		h[i] = hold(e, PER_PROCESS, 0);
		welcomed += h[i].welcomed;
	}
	assert_int_equal(welcomed, MAX_CLIENTS - 1);
	connect_and_run(e, GPUX_E_QUOTA);
	assert_true(nclients(e) >= MAX_CLIENTS + 1);
	for (int i = 0; i < 3; i++)
		release(&h[i]);
	wait_released(e);
	connect_and_run(e, GPUX_OK);
}

/* Another user gets at most its own share, and never the slots kept for gpuxd's user. */
static void test_e2e_other_user_cannot_lock_out_the_owner(void **state)
{
	struct test_env *e = *state;
	struct holder own[2], other[2];

	if (geteuid() != 0)
		skip();
	other[0] = hold(e, PER_PROCESS, 65534);
	other[1] = hold(e, PER_PROCESS, 65534);
	assert_int_equal(other[0].welcomed + other[1].welcomed, PER_USER);
	assert_int_equal(other[1].status, GPUX_E_QUOTA);
	connect_and_run(e, GPUX_OK);
	assert_true(nclients(e) >= 2 + PER_USER);
	release(&other[0]);
	release(&other[1]);
	wait_released(e);

	/* With 11 slots taken by the owner, the other user may have one: 16 - 4 reserved. */
	own[0] = hold(e, PER_PROCESS, 0);
	own[1] = hold(e, PER_PROCESS, 0);
	assert_int_equal(own[0].welcomed + own[1].welcomed, 2 * PER_PROCESS);
	other[0] = hold(e, PER_PROCESS, 65534);
	assert_int_equal(other[0].welcomed, MAX_CLIENTS - RESERVED - 1 - 2 * PER_PROCESS);
	assert_int_equal(other[0].status, GPUX_E_QUOTA);
	connect_and_run(e, GPUX_OK);
	release(&other[0]);
	release(&own[0]);
	release(&own[1]);
	wait_released(e);
}

/* A process that opens silent connections, and exits 0 once gpuxd has closed every one. */
static pid_t silent(struct test_env *e, int n)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		int fds[PER_PROCESS];

		for (int i = 0; i < n; i++)
			fds[i] = raw_connect(e->d.sock);
		for (int i = 0; i < n; i++)
			if (fds[i] < 0 || !test_closed_by_peer(fds[i]))
				_exit(1);
		_exit(0);
	}
	return pid;
}

/*
 * Connections that never say hello have a minute here; once they hold a quarter of the
 * slots they have 200 ms, and gpuxd is free again long before the minute is over.
 */
static void test_e2e_silent_connections_cut_sooner_under_pressure(void **state)
{
	struct test_env *e = *state;
	pid_t pid[3];
	int fd;

	/* One alone is no pressure: it keeps its minute. */
	fd = raw_connect(e->d.sock);
	assert_true(fd >= 0);
	(void)usleep(1000 * 1000);
	{
		struct pollfd p = { .fd = fd, .events = POLLIN };
		assert_int_equal(poll(&p, 1, 0), 0);
	}
	(void)close(fd);

	for (int i = 0; i < 3; i++)
		pid[i] = silent(e, PER_PROCESS);
	for (int i = 0; i < 3; i++)
		assert_child_ok(pid[i]);
	wait_released(e);
	connect_and_run(e, GPUX_OK);
}

/* gpuxd's exit status with these options, its stderr in err (cap bytes). */
static int gpuxd_exit(const char *max_clients, const char *last, char *err, size_t cap)
{
	char path[] = "/tmp/gpux-limits-err-XXXXXX";
	char *argv[] = { (char *)getenv("GPUX_DAEMON"), "--max-clients", (char *)max_clients,
			 (char *)last, NULL };
	int fd = mkstemp(path), st;
	ssize_t n;
	pid_t pid;

	assert_true(fd >= 0);
	(void)unlink(path);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		(void)dup2(fd, 2);
		(void)execv(argv[0], argv);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	n = pread(fd, err, cap - 1, 0);
	err[n > 0 ? n : 0] = '\0';
	(void)close(fd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * Every client has a channel to every worker, and a worker holds IPC_WORKER_CLIENTS_MAX: more
 * clients than that would have their channels closed. Such a --max-clients is refused.
 */
static void test_e2e_max_clients_within_a_worker_s_channels(void **state)
{
	char err[4096], max[16], over[16];

	(void)snprintf(max, sizeof(max), "%u", IPC_WORKER_CLIENTS_MAX);
	(void)snprintf(over, sizeof(over), "%u", IPC_WORKER_CLIENTS_MAX + 1);
	assert_int_equal(gpuxd_exit(over, "--version", err, sizeof(err)), 2);
	assert_non_null(strstr(err, "--max-clients"));
	assert_non_null(strstr(err, over));
	/* Up to it is fine: parsing goes on to --help, which exits 0. */
	assert_int_equal(gpuxd_exit(max, "--help", err, sizeof(err)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e2e_one_process_is_capped),
		cmocka_unit_test(test_e2e_status_answers_when_full),
		cmocka_unit_test(test_e2e_other_user_cannot_lock_out_the_owner),
		cmocka_unit_test(test_e2e_silent_connections_cut_sooner_under_pressure),
		cmocka_unit_test(test_e2e_max_clients_within_a_worker_s_channels),
	};

	return cmocka_run_group_tests(tests, setup, test_env_teardown);
}
