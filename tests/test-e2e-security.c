/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-security.c: other users, garbage and hostile messages reach nobody else. */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"
#include "ipc/channel.h"
#include "ipc/segment.h"

static int setup(void **state)
{
	static const char *const args[] = { "--socket-mode", "0666", NULL };
	struct test_env *e = test_env_open(args);

	/* Let any user reach the socket: only gpuxd's own check stands in the way. */
	assert_int_equal(chmod(e->d.dir, 0755), 0);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	test_env_close(*state);
	return 0;
}

static void still_serves(struct test_env *e)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };

	assert_int_equal(gpux_run(e->m, "empty", &l, NULL, 0), GPUX_OK);
}

static int raw_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memcpy(sa.sun_path, path, strlen(path));
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Whether the peer closed the socket within a few seconds (reading what it sent first). */
static bool closed_by_peer(int fd)
{
	uint8_t buf[IPC_MSG_MAX];

	for (int i = 0; i < 100; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int fds[IPC_FDS_MAX];
		unsigned nfds;
		ssize_t n;

		if (poll(&p, 1, 100) <= 0)
			continue;
		n = ipc_channel_recv(fd, buf, sizeof(buf), fds, &nfds, MSG_DONTWAIT);
		for (unsigned k = 0; k < nfds && n > 0; k++)
			(void)close(fds[k]);
		if (n == 0 || (n < 0 && n != -EAGAIN))
			return true;
	}
	return false;
}

static void test_e2e_other_user_refused(void **state)
{
	struct test_env *e = *state;
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	pid_t pid;
	int ws;

	if (geteuid() != 0)
		skip();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpux_ctx *ctx = NULL;

		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(10);
		_exit(gpux_connect(e->d.sock, &ctx) == GPUX_E_PERM && !ctx ? 0 : 11);
	}
	assert_int_equal(waitpid(pid, &ws, 0), pid);
	assert_true(WIFEXITED(ws));
	assert_int_equal(WEXITSTATUS(ws), 0);
	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	assert_true(st.clients_refused >= 1);
	still_serves(e);
}

/* A member of --allow-group may connect, but not run native code as gpuxd's user. */
static void test_e2e_group_member_may_not_load_host_kernels(void **state)
{
	static const char *const args[] = { "--allow-group", "65534", NULL };
	struct test_daemon g;
	pid_t pid;
	int ws;

	if (geteuid() != 0)
		skip();
	test_daemon_start(&g, args);
	assert_int_equal(chmod(g.dir, 0755), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpux_ctx *ctx = NULL;
		gpux_module *m = NULL;

		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(10);
		if (gpux_connect(g.sock, &ctx) != GPUX_OK)
			_exit(11);
		_exit(gpux_module_load(ctx, GPUX_LANG_HOST, test_host_kernels,
				       test_host_kernels_len, NULL, &m, NULL) == GPUX_E_PERM ? 0 : 12);
	}
	assert_int_equal(waitpid(pid, &ws, 0), pid);
	assert_true(WIFEXITED(ws));
	assert_int_equal(WEXITSTATUS(ws), 0);
	test_daemon_stop(&g);
}

static void test_e2e_garbage_to_gpuxd_drops_only_that_client(void **state)
{
	struct test_env *e = *state;
	static const char junk[] = "GET / HTTP/1.1\r\n\r\n";
	uint8_t msg[64];
	int fd = raw_connect(e->d.sock);

	assert_true(send(fd, junk, sizeof(junk), 0) > 0);
	assert_true(closed_by_peer(fd));
	(void)close(fd);

	/* A well-formed message of the wrong kind before hello. */
	fd = raw_connect(e->d.sock);
	{
		struct ipc_status_req q = { 0 };
		int n = ipc_encode(msg, sizeof(msg), IPC_STATUS_REQ, 1, 0, &q, sizeof(q), NULL, 0);
		assert_int_equal(ipc_channel_send(fd, msg, (size_t)n, NULL, 0, 0), 0);
	}
	assert_true(closed_by_peer(fd));
	(void)close(fd);
	still_serves(e);
}

/* A client of an older protocol is told, in its own version, that none is in common. */
static void test_e2e_old_client_told_why(void **state)
{
	struct test_env *e = *state;
	struct ipc_hello h = { .min_version = 1, .max_version = 1 };
	uint8_t buf[IPC_MSG_MAX];
	struct ipc_hdr hdr;
	struct ipc_done d;
	int fd = raw_connect(e->d.sock), n;
	ssize_t got;

	n = ipc_encode(buf, sizeof(buf), IPC_HELLO, 9, 0, &h, sizeof(h), NULL, 0);
	assert_true(n > 0);
	memcpy(&hdr, buf, sizeof(hdr));
	hdr.version = 1;
	memcpy(buf, &hdr, sizeof(hdr));
	assert_int_equal(ipc_channel_send(fd, buf, (size_t)n, NULL, 0, 0), 0);
	got = recv(fd, buf, sizeof(buf), 0);
	assert_true(got >= (ssize_t)(sizeof(hdr) + sizeof(d)));
	memcpy(&hdr, buf, sizeof(hdr));
	memcpy(&d, buf + sizeof(hdr), sizeof(d));
	assert_int_equal(hdr.magic, IPC_MAGIC);
	assert_int_equal(hdr.version, 1);
	assert_int_equal(hdr.type, IPC_DONE);
	assert_int_equal(hdr.id, 9);
	assert_int_equal(d.status, GPUX_E_VERSION);
	assert_true(closed_by_peer(fd));
	(void)close(fd);
	still_serves(e);
}

/* A client's own channel to the worker, obtained as the library would. */
static int raw_channel(struct test_env *e, int *ret_sup)
{
	struct ipc_hello h = { .min_version = 1, .max_version = IPC_VERSION };
	uint8_t buf[IPC_MSG_MAX];
	struct ipc_msg msg;
	int sup = raw_connect(e->d.sock), chan = -1, n;

	n = ipc_encode(buf, sizeof(buf), IPC_HELLO, 1, 0, &h, sizeof(h), NULL, 0);
	assert_int_equal(ipc_channel_send(sup, buf, (size_t)n, NULL, 0, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(msg.hdr.type, IPC_WELCOME);
	assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(msg.hdr.type, IPC_DEVICE);
	assert_int_equal(msg.nfds, 2);
	chan = ipc_msg_take_fd(&msg, 0);
	ipc_msg_close_fds(&msg);
	/* The worker offers its rings first; a client that ignores them has the socket. */
	assert_int_equal(ipc_channel_recv_msg(chan, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(msg.hdr.type, IPC_RINGS);
	ipc_msg_close_fds(&msg);
	*ret_sup = sup;
	return chan;
}

static void test_e2e_garbage_on_a_channel_drops_only_it(void **state)
{
	struct test_env *e = *state;
	pid_t worker = test_worker_pid(&e->d, 0);
	uint8_t junk[300];
	int sup, chan;

	memset(junk, 0xa5, sizeof(junk));
	chan = raw_channel(e, &sup);
	assert_true(send(chan, junk, sizeof(junk), 0) > 0);
	assert_true(closed_by_peer(chan));
	(void)close(chan);
	(void)close(sup);
	assert_int_equal(test_worker_pid(&e->d, 0), worker);
	still_serves(e);
}

static void send_seg(int chan, uint64_t id, uint64_t size, int fd)
{
	uint8_t buf[128];
	struct ipc_seg_add a = { .seg_id = id, .size = size };
	int n = ipc_encode(buf, sizeof(buf), IPC_SEG_ADD, 0, 1, &a, sizeof(a), NULL, 0);

	assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, &fd, 1, 0), 0);
}

static void test_e2e_bad_segments_drop_the_client(void **state)
{
	struct test_env *e = *state;
	pid_t worker = test_worker_pid(&e->d, 0);
	int sup, chan, p[2], fd;

	/* A pipe. */
	chan = raw_channel(e, &sup);
	assert_int_equal(pipe(p), 0);
	send_seg(chan, 1, 4096, p[0]);
	assert_true(closed_by_peer(chan));
	(void)close(p[0]);
	(void)close(p[1]);
	(void)close(chan);
	(void)close(sup);

	/* A memfd that could still shrink (a SIGBUS waiting to happen). */
	chan = raw_channel(e, &sup);
	fd = memfd_create("unsealed", MFD_CLOEXEC);
	assert_int_equal(ftruncate(fd, 4096), 0);
	send_seg(chan, 1, 4096, fd);
	assert_true(closed_by_peer(chan));
	(void)close(fd);
	(void)close(chan);
	(void)close(sup);

	/* A sealed memfd shorter than it claims. */
	chan = raw_channel(e, &sup);
	assert_int_equal(ipc_segment_create("short", 4096, &fd), 0);
	send_seg(chan, 1, 1 << 20, fd);
	assert_true(closed_by_peer(chan));
	(void)close(fd);
	(void)close(chan);
	(void)close(sup);

	assert_int_equal(test_worker_pid(&e->d, 0), worker);
	still_serves(e);
}

/* A request that names bytes outside its segment is refused, and the client stays. */
static void test_e2e_out_of_range_argument_refused(void **state)
{
	struct test_env *e = *state;
	static const char code[] = "GPUX_HOST_KERNEL(k)\n{\n}\n";
	uint8_t buf[IPC_MSG_MAX];
	struct ipc_msg msg;
	struct ipc_done_msg done;
	int sup, chan, fd, n;
	struct ipc_mod_load ml = { .mod_id = 7, .lang = GPUX_LANG_HOST, .code_len = sizeof(code) - 1 };
	struct ipc_arg arg = { .kind = GPUX_ARG_IN, .ref = 1, .offset = 4000, .size = 200 };
	struct ipc_submit s = { .mod_id = 7, .nargs = 1, .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };

	chan = raw_channel(e, &sup);
	assert_int_equal(ipc_segment_create("seg", 4096, &fd), 0);
	send_seg(chan, 1, 4096, fd);
	(void)close(fd);
	n = ipc_encode_mod_load(buf, sizeof(buf), 1, &ml, "", code);
	assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, NULL, 0, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(chan, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(ipc_decode_done(&msg, &done), 0);
	assert_int_equal(done.m.status, GPUX_OK);

	n = ipc_encode_submit(buf, sizeof(buf), 2, &s, &arg, "k", NULL);
	assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, NULL, 0, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(chan, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(ipc_decode_done(&msg, &done), 0);
	assert_int_equal(msg.hdr.id, 2);
	assert_int_equal(done.m.status, GPUX_E_INVAL);
	assert_non_null(memmem(done.text, done.m.text_len, "outside", 7));

	/* The same channel still works. */
	arg.offset = 0;
	n = ipc_encode_submit(buf, sizeof(buf), 3, &s, &arg, "k", NULL);
	assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, NULL, 0, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(chan, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(ipc_decode_done(&msg, &done), 0);
	assert_int_equal(msg.hdr.id, 3);
	assert_int_equal(done.m.status, GPUX_OK);
	(void)close(chan);
	(void)close(sup);
	still_serves(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e2e_other_user_refused),
		cmocka_unit_test(test_e2e_group_member_may_not_load_host_kernels),
		cmocka_unit_test(test_e2e_garbage_to_gpuxd_drops_only_that_client),
		cmocka_unit_test(test_e2e_old_client_told_why),
		cmocka_unit_test(test_e2e_garbage_on_a_channel_drops_only_it),
		cmocka_unit_test(test_e2e_bad_segments_drop_the_client),
		cmocka_unit_test(test_e2e_out_of_range_argument_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
