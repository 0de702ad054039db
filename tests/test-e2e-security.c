/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-security.c: other users, garbage and hostile messages reach nobody else. */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "e2e.h"
#include "helpers.h"
#include "segment.h"

static int setup(void **state)
{
	static const char *const args[] = { "--socket-mode", "0666", NULL };
	struct test_env *e = test_env_open(args);

	/* Let any user reach the socket: only gpuxd's own check stands in the way. */
	assert_int_equal(chmod(e->d.dir, 0755), 0);
	*state = e;
	return 0;
}

static void test_e2e_other_user_refused(void **state)
{
	struct test_env *e = *state;
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	pid_t pid;

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
	assert_child_ok(pid);
	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	assert_true(st.clients_refused >= 1);
	test_env_still_serves(e);
}

/* A member of --allow-group may connect, but not run native code as gpuxd's user. */
static void test_e2e_group_member_may_not_load_host_kernels(void **state)
{
	static const char *const args[] = { "--allow-group", "65534", NULL };
	struct test_daemon g;
	pid_t pid;

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
				       test_host_kernels_len, NULL, &m, NULL) == GPUX_E_PERM
			      ? 0
			      : 12);
	}
	assert_child_ok(pid);
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
	test_env_still_serves(e);
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
	test_env_still_serves(e);
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
	test_env_still_serves(e);
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
	struct ipc_mod_load ml = { .mod_id = 7,
				   .lang = GPUX_LANG_HOST,
				   .code_len = sizeof(code) - 1 };
	struct ipc_arg arg = { .kind = GPUX_ARG_IN, .ref = 1, .offset = 4000, .size = 200 };
	struct ipc_submit s = {
		.mod_id = 7, .nargs = 1, .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }
	};

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
	test_env_still_serves(e);
}

/* How many fds a process has open. */
/* Read what gpuxd sent on sup until nothing comes for 200 ms: how many channels it gave. */
static unsigned channels_read(int sup)
{
	static uint8_t buf[IPC_MSG_MAX];
	unsigned channels = 0;
	struct ipc_msg msg;
	struct pollfd p = { .fd = sup, .events = POLLIN };

	while (poll(&p, 1, 200) == 1) {
		assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, MSG_DONTWAIT),
				 1);
		channels += msg.hdr.type == IPC_DEVICE && msg.nfds == 2;
		ipc_msg_close_fds(&msg);
	}
	return channels;
}

/*
 * CHANNEL_REQ again and again, reading nothing. Each would make gpuxd a socketpair, an
 * ATTACH to the worker and a DEVICE with two fds queued for the client: what one client
 * makes gpuxd hold must stay small, and others still get in. The client that asked is
 * answered, once more for all its later requests once it has read that, and again when it
 * asks again.
 */
static void test_e2e_channel_req_flood_is_capped(void **state)
{
	struct test_env *e = *state;
	struct ipc_channel_req q = { .device = 0 };
	static uint8_t buf[256];
	pid_t worker = test_worker_pid(&e->d, 0);
	unsigned before = (unsigned)test_fd_count_of(e->d.pid), peak = before;
	int sup, chan = test_raw_channel(&e->d, &sup), n, rc;
	gpux_ctx *other = NULL;

	n = ipc_encode(buf, sizeof(buf), IPC_CHANNEL_REQ, 0, 0, &q, sizeof(q), NULL, 0);
	for (int i = 0; i < 3000; i++) {
		if (ipc_channel_send(sup, buf, (size_t)n, NULL, 0, MSG_DONTWAIT) < 0)
			break;
		if (i % 100 == 0) {
			(void)usleep(2000);
			peak = MAX(peak, (unsigned)test_fd_count_of(e->d.pid));
		}
	}
	(void)usleep(200000);
	peak = MAX(peak, (unsigned)test_fd_count_of(e->d.pid));
	rc = gpux_connect(e->d.sock, &other);
	if (other)
		gpux_disconnect(other);
	assert_int_equal(rc, GPUX_OK);
	if (peak >= before + 16)
		fail_msg("gpuxd's fds: %u before, %u at the peak", before, peak);
	/* The first answer, then (if more were asked after it) one for all the rest once it
	 * was read. */
	assert_in_range(channels_read(sup), 1, 2);
	assert_int_equal(ipc_channel_send(sup, buf, (size_t)n, NULL, 0, 0), 0);
	assert_int_equal(channels_read(sup), 1);
	assert_int_equal(test_worker_pid(&e->d, 0), worker);
	(void)close(chan);
	(void)close(sup);
	test_env_still_serves(e);
}

/* gpuxd has all the fds it may (systemd gives 1024 unless raised; main() lowers ours). */
static void test_e2e_gpuxd_takes_its_hard_fd_limit(void **state)
{
	struct test_env *e = *state;
	char path[64], line[256];
	unsigned long long soft = 0, hard = 0;
	struct rlimit rl;
	FILE *f;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	(void)snprintf(path, sizeof(path), "/proc/%d/limits", (int)e->d.pid);
	f = fopen(path, "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Max open files %llu %llu", &soft, &hard) == 2)
			break;
	(void)fclose(f);
	assert_int_equal(hard, rl.rlim_max);
	assert_int_equal(soft, hard);
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
		cmocka_unit_test(test_e2e_channel_req_flood_is_capped),
		cmocka_unit_test(test_e2e_gpuxd_takes_its_hard_fd_limit),
	};
	struct rlimit rl;

	/* As under systemd: a soft limit of 1024 (or less), a higher hard one. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 1024) {
		rl.rlim_cur = 1024;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}

	return cmocka_run_group_tests(tests, setup, test_env_teardown);
}
