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
	int fd = test_raw_connect(&e->d);

	assert_true(send(fd, junk, sizeof(junk), 0) > 0);
	assert_true(test_closed_by_peer(fd));
	(void)close(fd);

	/* A well-formed message of the wrong kind before hello. */
	fd = test_raw_connect(&e->d);
	{
		struct ipc_status_req q = { 0 };
		int n = ipc_encode(msg, sizeof(msg), IPC_STATUS_REQ, 1, 0, &q, sizeof(q), NULL, 0);
		assert_int_equal(ipc_channel_send(fd, msg, (size_t)n, NULL, 0, 0), 0);
	}
	assert_true(test_closed_by_peer(fd));
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
	int fd = test_raw_connect(&e->d), n;
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
	assert_true(test_closed_by_peer(fd));
	(void)close(fd);
	still_serves(e);
}

static void test_e2e_garbage_on_a_channel_drops_only_it(void **state)
{
	struct test_env *e = *state;
	pid_t worker = test_worker_pid(&e->d, 0);
	uint8_t junk[300];
	int sup, chan;

	memset(junk, 0xa5, sizeof(junk));
	chan = test_raw_channel(&e->d, &sup);
	assert_true(send(chan, junk, sizeof(junk), 0) > 0);
	assert_true(test_closed_by_peer(chan));
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

	chan = test_raw_channel(&e->d, &sup);
	assert_int_equal(ipc_segment_create("seg", 4096, &fd), 0);
	test_send_seg(chan, 1, 4096, 0, fd);
	(void)close(fd);
	n = ipc_encode_mod_load(buf, sizeof(buf), 1, &ml, "", code);
	assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, NULL, 0, 0), 0);
	/* What the module is comes first, then the DONE. */
	assert_int_equal(ipc_channel_recv_msg(chan, buf, sizeof(buf), &msg, 0), 1);
	{
		struct ipc_mod_info mi;

		assert_int_equal(ipc_decode_mod_info(&msg, &mi), 0);
		assert_int_equal(msg.hdr.id, 1);
		assert_int_equal(mi.source, IPC_MOD_COMPILED);
	}
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
		cmocka_unit_test(test_e2e_out_of_range_argument_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
