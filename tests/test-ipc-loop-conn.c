/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-loop-conn.c: connections: messages and fds, hang-ups, bad peers. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "loop-helpers.h"
#include "macro.h"

/* ---- connections ---- */

static void test_loop_conn_echo_with_fds(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct ipc_conn *server;
	struct test_rec client;
	int sv[2];

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	assert_int_equal(
		ipc_conn_new_take_fd(l, sv[0], test_echo_on_msg, test_fail_on_close, NULL, &server),
		0);
	test_rec_init(&client, l, sv[1]);
	assert_int_equal(ipc_conn_fd(client.c), sv[1]);
	assert_ptr_equal(ipc_conn_userdata(client.c), &client);
	assert_null(ipc_conn_userdata(server));
	ipc_conn_set_userdata(server, test_sbuf);
	assert_ptr_equal(ipc_conn_userdata(server), test_sbuf);

	for (unsigned nfds = 0; nfds <= IPC_FDS_MAX; nfds++) {
		int fds[IPC_FDS_MAX];
		uint8_t payload[200];
		size_t len;

		test_random_fill(payload, sizeof(payload), nfds);
		len = test_msg_make(test_sbuf, IPC_SEG_ADD, nfds + 1, nfds, payload,
				    sizeof(payload));
		test_open_files(fds, nfds);
		assert_int_equal(ipc_conn_send(client.c, test_sbuf, len, fds, nfds), 0);
		/* The message was copied: the caller's buffer is its own again. */
		memset(test_sbuf, 0, len);
		assert_true(test_loop_until(l, &client.msgs, nfds + 1, WAIT_MS));
		assert_int_equal(client.hdr.type, IPC_SEG_ADD);
		assert_int_equal(client.hdr.nfds, nfds);
		assert_int_equal(client.hdr.len, sizeof(payload));
		assert_memory_equal(client.payload, payload, sizeof(payload));
		assert_int_equal(client.nfds, nfds);
		for (unsigned i = 0; i < nfds; i++) {
			assert_true(test_fd_cloexec(client.fds[i]));
			assert_true(test_same_file(client.fds[i], fds[i]));
		}
		test_close_all(fds, nfds);
	}
	assert_false(client.out_of_order);
	assert_int_equal(ipc_conn_queued(client.c), 0);
	test_rec_done(&client);
	ipc_conn_free(server);
}

static void test_loop_conn_fds_are_the_same_files(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct test_rec r;
	int sv[2], fds[IPC_FDS_MAX];
	size_t len = test_msg_make(test_sbuf, IPC_DEVICE, 1, IPC_FDS_MAX, "x", 1);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	test_open_files(fds, IPC_FDS_MAX);
	assert_int_equal(ipc_channel_send(sv[1], test_sbuf, len, fds, IPC_FDS_MAX, 0), 0);
	assert_true(test_loop_until(l, &r.msgs, 1, WAIT_MS));
	assert_int_equal(r.nfds, IPC_FDS_MAX);
	for (unsigned i = 0; i < IPC_FDS_MAX; i++) {
		assert_true(test_same_file(r.fds[i], fds[i]));
		assert_true(test_fd_cloexec(r.fds[i]));
	}
	test_close_all(fds, IPC_FDS_MAX);
	test_rec_done(&r);
	(void)close(sv[1]);
}

static void test_loop_conn_untaken_fds_are_closed(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	int sv[2], fds[3], got[IPC_FDS_MAX], before;
	struct ipc_conn *c;
	unsigned n;
	size_t len = test_msg_make(test_sbuf, IPC_DEVICE, 1, 3, "x", 1);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	assert_int_equal(
		ipc_conn_new_take_fd(l, sv[0], test_echo_on_msg, test_fail_on_close, NULL, &c), 0);
	before = test_fd_count();
	test_open_files(fds, 3);
	assert_int_equal(ipc_channel_send(sv[1], test_sbuf, len, fds, 3, 0), 0);
	test_close_all(fds, 3);
	assert_int_equal(test_loop_recv(l, sv[1], test_rbuf, sizeof(test_rbuf), got, &n, WAIT_MS),
			 (ssize_t)len);
	assert_int_equal(n, 3);
	test_close_all(got, 3);
	/* The echo callback took no fd: the loop closed what arrived, and what it sent. */
	test_loop_spin(l, 20);
	assert_int_equal(test_fd_count(), before);
	ipc_conn_free(c);
	(void)close(sv[1]);
}

static void test_loop_conn_many_in_order(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct ipc_conn *server;
	struct test_rec client;
	int sv[2];

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	assert_int_equal(
		ipc_conn_new_take_fd(l, sv[0], test_echo_on_msg, test_fail_on_close, NULL, &server),
		0);
	test_rec_init(&client, l, sv[1]);
	for (uint32_t id = 1; id <= 3000; id++) {
		size_t len = test_msg_make(test_sbuf, IPC_DONE, id, 0, test_rbuf, id % 256);

		assert_int_equal(ipc_conn_send(client.c, test_sbuf, len, NULL, 0), 0);
	}
	assert_true(test_loop_until(l, &client.msgs, 3000, 10 * WAIT_MS));
	assert_false(client.out_of_order);
	assert_int_equal(client.hdr.id, 3000);
	test_rec_done(&client);
	ipc_conn_free(server);
}

static void test_loop_conn_hangup_calls_on_close(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct test_rec r;
	int sv[2];

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	r.free_on_close = true;
	for (uint32_t id = 1; id <= 3; id++) {
		size_t len = test_msg_make(test_sbuf, IPC_HELLO, id, 0, NULL, 0);

		assert_int_equal(ipc_channel_send(sv[1], test_sbuf, len, NULL, 0, 0), 0);
	}
	(void)close(sv[1]);
	assert_true(test_loop_until(l, &r.closes, 1, WAIT_MS));
	/* What was sent before the hang-up arrived first, in order. */
	assert_int_equal(r.msgs_at_close, 3);
	assert_false(r.out_of_order);
	assert_int_equal(r.error, 0);
	assert_int_equal(r.send_in_close, -EPIPE);
	assert_null(r.c);
	test_loop_spin(l, 20);
	assert_int_equal(r.closes, 1);
}

static void test_loop_conn_send_after_close_is_epipe(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct test_rec r;
	int sv[2];
	size_t len = test_msg_make(test_sbuf, IPC_HELLO, 1, 0, NULL, 0);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	(void)close(sv[1]);
	assert_true(test_loop_until(l, &r.closes, 1, WAIT_MS));
	assert_int_equal(r.error, 0);
	assert_int_equal(ipc_conn_send(r.c, test_sbuf, len, NULL, 0), -EPIPE);
	assert_int_equal(ipc_conn_send(r.c, test_sbuf, len, NULL, 0), -EPIPE);
	test_loop_spin(l, 20);
	assert_int_equal(r.closes, 1);
	test_rec_done(&r);
}

static void test_loop_conn_send_rejects_bad_args(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	int sv[2], fds[IPC_FDS_MAX + 1];
	struct test_rec r;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	test_open_files(fds, IPC_FDS_MAX + 1);
	assert_int_equal(ipc_conn_send(r.c, test_sbuf, 16, fds, IPC_FDS_MAX + 1), -EINVAL);
	assert_int_equal(ipc_conn_send(r.c, test_sbuf, IPC_MSG_MAX + 1, NULL, 0), -EINVAL);
	test_close_all(fds, IPC_FDS_MAX + 1);
	/* A bad fd to duplicate: refused, the connection still up. */
	fds[0] = sv[1];
	(void)close(sv[1]);
	assert_int_equal(ipc_conn_send(r.c, test_sbuf, 16, fds, 1), -EBADF);
	assert_int_equal(ipc_conn_queued(r.c), 0);
	test_rec_done(&r);
}

static void test_loop_conn_bad_header_drops_peer(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct test_rec r;
	int sv[2], fds[2], open_fds;
	struct ipc_hdr h;
	size_t len;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	open_fds = test_fd_count();
	test_open_files(fds, 2);
	len = test_msg_make(test_sbuf, IPC_HELLO, 1, 2, NULL, 0);
	h = test_hdr_get(test_sbuf);
	h.magic = 0xdead;
	test_hdr_set(test_sbuf, &h);
	assert_int_equal(ipc_channel_send(sv[1], test_sbuf, len, fds, 2, 0), 0);
	/* A good message after it is never delivered. */
	len = test_msg_make(test_sbuf, IPC_HELLO, 1, 0, NULL, 0);
	assert_int_equal(ipc_channel_send(sv[1], test_sbuf, len, NULL, 0, 0), 0);
	test_close_all(fds, 2);

	assert_true(test_loop_until(l, &r.closes, 1, WAIT_MS));
	assert_int_equal(r.error, -EBADMSG);
	assert_int_equal(r.msgs, 0);
	/* The fds that came with it are closed already. */
	assert_int_equal(test_fd_count(), open_fds);
	test_loop_spin(l, 20);
	assert_int_equal(r.msgs, 0);
	assert_int_equal(r.closes, 1);
	test_rec_done(&r);
	assert_int_equal(ipc_loop_iterate(l, 0), 0);
	assert_true(test_peer_sees_hangup(sv[1]));
	(void)close(sv[1]);
}

/*
 * A connection that fails leaves its socket open for writing until it is freed: what its
 * owner says last (a worker tells a client why it drops it) reaches the peer before the end.
 */
static void test_loop_conn_last_word_comes_before_the_end(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct test_rec r;
	int sv[2], fds[IPC_FDS_MAX];
	unsigned nfds;
	size_t len;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	r.last_word = true;
	memset(test_sbuf, 0xa5, 64);
	test_send_raw(sv[1], test_sbuf, 64, NULL, 0);
	assert_true(test_loop_until(l, &r.closes, 1, WAIT_MS));
	assert_int_equal(r.error, -EBADMSG);
	assert_int_equal(r.last_word_sent, 0);
	/* The peer's own sends are refused now: nobody reads them. */
	len = test_msg_make(test_sbuf, IPC_HELLO, 1, 0, NULL, 0);
	assert_int_equal(ipc_channel_send(sv[1], test_sbuf, len, NULL, 0, MSG_DONTWAIT), -EPIPE);
	assert_int_equal(test_recv_wait(sv[1], test_rbuf, sizeof(test_rbuf), fds, &nfds, WAIT_MS),
			 (ssize_t)sizeof(struct ipc_hdr));
	test_rec_done(&r);
	assert_int_equal(ipc_loop_iterate(l, 0), 0);
	assert_true(test_peer_sees_hangup(sv[1]));
	(void)close(sv[1]);
}

static void test_loop_conn_too_many_fds_drops_peer(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	int sv[2], fds[IPC_FDS_MAX + 3], open_fds;
	struct test_rec r;
	size_t len = test_msg_make(test_sbuf, IPC_HELLO, 1, 0, NULL, 0);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	open_fds = test_fd_count();
	test_open_files(fds, IPC_FDS_MAX + 3);
	test_send_raw(sv[1], test_sbuf, len, fds, IPC_FDS_MAX + 3);
	test_close_all(fds, IPC_FDS_MAX + 3);
	assert_true(test_loop_until(l, &r.closes, 1, WAIT_MS));
	assert_int_equal(r.error, -ETOOMANYREFS);
	assert_int_equal(r.msgs, 0);
	assert_int_equal(test_fd_count(), open_fds);
	test_rec_done(&r);
	(void)close(sv[1]);
}

static void test_loop_conn_oversized_record_drops_peer(void **state)
{
	static uint8_t big[IPC_MSG_MAX + 1];
	struct ipc_loop *l = test_loop_of(state);
	int sv[2], fds[2], open_fds;
	struct test_rec r;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	open_fds = test_fd_count();
	test_open_files(fds, 2);
	test_send_raw(sv[1], big, sizeof(big), fds, 2);
	test_close_all(fds, 2);
	assert_true(test_loop_until(l, &r.closes, 1, WAIT_MS));
	assert_int_equal(r.error, -EMSGSIZE);
	assert_int_equal(test_fd_count(), open_fds);
	test_rec_done(&r);
	(void)close(sv[1]);
}

static void test_loop_conn_reply_after_peer_reset(void **state)
{
	struct ipc_loop *l = test_loop_of(state);

	/*
	 * The peer answers a message of ours that it never reads, and closes: the kernel reports
	 * ECONNRESET once, before the answer, which must still be delivered. Our message is sent
	 * before the loop serves the socket (the first receive meets the reset at once), or by
	 * the loop (the peer's answer and close race with a receive under way).
	 */
	for (unsigned by_loop = 0; by_loop < 2; by_loop++) {
		size_t len = test_msg_make(test_sbuf, IPC_HELLO, 1, 0, NULL, 0);
		int sv[2], fds[2];
		struct test_rec r;

		assert_int_equal(ipc_channel_pair(sv, false), 0);
		if (by_loop) {
			uint64_t until = mono_ns() + WAIT_MS * NSEC_PER_MSEC;

			test_rec_init(&r, l, sv[0]);
			assert_int_equal(ipc_conn_send(r.c, test_sbuf, len, NULL, 0), 0);
			while (ipc_conn_queued(r.c) > 0 && mono_ns() < until)
				assert_int_equal(ipc_loop_iterate(l, 1 * NSEC_PER_MSEC), 0);
			assert_int_equal(ipc_conn_queued(r.c), 0);
		} else {
			assert_int_equal(ipc_channel_send(sv[0], test_sbuf, len, NULL, 0, 0), 0);
		}
		test_open_files(fds, 2);
		len = test_msg_make(test_sbuf, IPC_DONE, 1, 2, "refused", 7);
		assert_int_equal(ipc_channel_send(sv[1], test_sbuf, len, fds, 2, 0), 0);
		(void)close(sv[1]);
		if (!by_loop)
			test_rec_init(&r, l, sv[0]);
		assert_true(test_loop_until(l, &r.closes, 1, WAIT_MS));
		assert_int_equal(r.msgs_at_close, 1);
		assert_int_equal(r.hdr.type, IPC_DONE);
		assert_memory_equal(r.payload, "refused", 7);
		assert_int_equal(r.nfds, 2);
		for (unsigned i = 0; i < 2; i++)
			assert_true(test_same_file(r.fds[i], fds[i]));
		/* A peer that closed is a hang-up, whatever it left unread. */
		assert_int_equal(r.error, 0);
		test_close_all(fds, 2);
		test_rec_done(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		LOOP_TEST(test_loop_conn_echo_with_fds),
		LOOP_TEST(test_loop_conn_fds_are_the_same_files),
		LOOP_TEST(test_loop_conn_untaken_fds_are_closed),
		LOOP_TEST(test_loop_conn_many_in_order),
		LOOP_TEST(test_loop_conn_hangup_calls_on_close),
		LOOP_TEST(test_loop_conn_send_after_close_is_epipe),
		LOOP_TEST(test_loop_conn_send_rejects_bad_args),
		LOOP_TEST(test_loop_conn_bad_header_drops_peer),
		LOOP_TEST(test_loop_conn_last_word_comes_before_the_end),
		LOOP_TEST(test_loop_conn_too_many_fds_drops_peer),
		LOOP_TEST(test_loop_conn_oversized_record_drops_peer),
		LOOP_TEST(test_loop_conn_reply_after_peer_reset),
	};

	return cmocka_run_group_tests_name("ipc-loop-conn", tests, NULL, NULL);
}
