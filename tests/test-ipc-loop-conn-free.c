/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-loop-conn-free.c: connections freed in callbacks; send queue caps. */
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

/* ---- connections freed in callbacks, and send queues ---- */

static void test_loop_conn_free_in_own_callback(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct test_rec r;
	int sv[2];

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	r.free_on_msg = true;
	for (uint32_t id = 1; id <= 5; id++) {
		size_t len = test_msg_make(test_sbuf, IPC_HELLO, id, 0, NULL, 0);

		assert_int_equal(ipc_channel_send(sv[1], test_sbuf, len, NULL, 0, 0), 0);
	}
	assert_true(test_loop_until(l, &r.msgs, 1, WAIT_MS));
	test_loop_spin(l, 20);
	assert_int_equal(r.msgs, 1);
	assert_int_equal(r.closes, 0);
	assert_null(r.c);
	assert_true(test_peer_sees_hangup(sv[1]));
	(void)close(sv[1]);
}

struct two {
	struct ipc_conn *c[2];
	unsigned msgs;
};

static void two_on_msg(struct ipc_conn *c, struct ipc_msg *msg, void *userdata)
{
	struct two *t = userdata;
	unsigned other = c == t->c[0] ? 1 : 0;

	assert_ptr_equal(c, t->c[1 - other]);
	t->msgs++;
	ipc_conn_free(t->c[other]);
	t->c[other] = NULL;
}

static void test_loop_conn_free_other_in_callback(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct two t = { { NULL, NULL }, 0 };
	int a[2], b[2];
	size_t len = test_msg_make(test_sbuf, IPC_HELLO, 1, 0, NULL, 0);

	assert_int_equal(ipc_channel_pair(a, false), 0);
	assert_int_equal(ipc_channel_pair(b, false), 0);
	assert_int_equal(ipc_conn_new_take_fd(l, a[0], two_on_msg, test_fail_on_close, &t, &t.c[0]),
			 0);
	assert_int_equal(ipc_conn_new_take_fd(l, b[0], two_on_msg, test_fail_on_close, &t, &t.c[1]),
			 0);
	/* Both ready in the same round: whichever runs first frees the other. */
	assert_int_equal(ipc_channel_send(a[1], test_sbuf, len, NULL, 0, 0), 0);
	assert_int_equal(ipc_channel_send(b[1], test_sbuf, len, NULL, 0, 0), 0);
	assert_int_equal(ipc_channel_send(a[1], test_sbuf, len, NULL, 0, 0), 0);
	assert_int_equal(ipc_channel_send(b[1], test_sbuf, len, NULL, 0, 0), 0);
	assert_true(test_loop_until(l, &t.msgs, 1, WAIT_MS));
	test_loop_spin(l, 20);
	/* The survivor got its second message and freed the (already freed) other: nothing. */
	assert_int_equal(t.msgs, 2);
	assert_true(t.c[0] == NULL || t.c[1] == NULL);
	ipc_conn_free(t.c[0]);
	ipc_conn_free(t.c[1]);
	(void)close(a[1]);
	(void)close(b[1]);
}

static void test_loop_conn_free_before_delivery(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	size_t len = test_msg_make(test_sbuf, IPC_HELLO, 1, 1, NULL, 0);

	/* Freed with a message (and its fd) waiting: before any round, and with a receive under
	 * way (io_uring) that the message completes before the loop looks. */
	for (unsigned started = 0; started < 2; started++) {
		struct ipc_conn *c;
		int sv[2], fd;

		assert_int_equal(ipc_channel_pair(sv, false), 0);
		assert_int_equal(ipc_conn_new_take_fd(l, sv[0], test_fail_on_msg,
						      test_fail_on_close, NULL, &c),
				 0);
		if (started)
			assert_int_equal(ipc_loop_iterate(l, 0), 0);
		test_open_files(&fd, 1);
		assert_int_equal(ipc_channel_send(sv[1], test_sbuf, len, &fd, 1, 0), 0);
		(void)close(fd);
		(void)usleep(1000);
		ipc_conn_free(c);
		test_loop_spin(l, 20);
		assert_true(test_peer_sees_hangup(sv[1]));
		(void)close(sv[1]);
	}
}

static void test_loop_conn_queue_overflow_by_count(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	unsigned sent = 0;
	struct test_rec r;
	int sv[2], ret = 0;
	size_t len = test_msg_make(test_sbuf, IPC_DONE, 1, 0, test_rbuf, 100);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	/* The peer never reads. */
	while (sent < 1000000) {
		ret = ipc_conn_send(r.c, test_sbuf, len, NULL, 0);
		if (ret < 0)
			break;
		sent++;
	}
	assert_int_equal(ret, -ENOBUFS);
	assert_true(sent >= IPC_CONN_QUEUE_MSGS);
	assert_int_equal(ipc_conn_queued(r.c), IPC_CONN_QUEUE_MSGS);
	assert_int_equal(r.closes, 0);
	assert_true(test_loop_until(l, &r.closes, 1, WAIT_MS));
	assert_int_equal(r.error, -ENOBUFS);
	assert_int_equal(ipc_conn_send(r.c, test_sbuf, len, NULL, 0), -EPIPE);
	test_rec_done(&r);
	(void)close(sv[1]);
}

static void test_loop_conn_free_after_failure_skips_on_close(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	int sv[2], ret = 0;
	struct test_rec r;
	size_t len = test_msg_make(test_sbuf, IPC_DONE, 1, 0, test_rbuf, 100);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	for (unsigned sent = 0; ret == 0 && sent < 1000000; sent++)
		ret = ipc_conn_send(r.c, test_sbuf, len, NULL, 0);
	assert_int_equal(ret, -ENOBUFS);
	/* The failure's on_close is pending; freeing the connection first cancels it. */
	test_rec_done(&r);
	test_loop_spin(l, 20);
	assert_int_equal(r.closes, 0);
	(void)close(sv[1]);
}

static void test_loop_conn_queue_overflow_by_bytes(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	int sv[2], fd, ret = 0;
	unsigned sent = 0;
	struct test_rec r;
	size_t len = test_msg_make(test_sbuf, IPC_DONE, 1, 1, test_rbuf, IPC_PAYLOAD_MAX);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	test_open_files(&fd, 1);
	while (sent < 10000) {
		ret = ipc_conn_send(r.c, test_sbuf, len, &fd, 1);
		if (ret < 0)
			break;
		sent++;
	}
	(void)close(fd);
	assert_int_equal(ret, -ENOBUFS);
	assert_true(ipc_conn_queued(r.c) * len <= IPC_CONN_QUEUE_BYTES);
	assert_true((ipc_conn_queued(r.c) + 1) * len > IPC_CONN_QUEUE_BYTES);
	assert_true(test_loop_until(l, &r.closes, 1, WAIT_MS));
	assert_int_equal(r.error, -ENOBUFS);
	/* Freeing it drops the queue, with the fds each queued message held. */
	test_rec_done(&r);
	(void)close(sv[1]);
}

/* Fds count on their own: a few messages, each with fds, fill a small cap; sent ones leave it. */
static void test_loop_conn_queue_overflow_by_fds(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	uint64_t until = mono_ns() + WAIT_MS * NSEC_PER_MSEC;
	size_t len = test_msg_make(test_sbuf, IPC_DONE, 1, 2, test_rbuf, 100);
	size_t bare = test_msg_make(test_rbuf, IPC_DONE, 1, 0, NULL, 0);
	struct test_rec r;
	int sv[2], fds[2];

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	ipc_conn_set_queue_fds(r.c, 4);
	test_open_files(fds, 2);
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(ipc_conn_send(r.c, test_sbuf, len, fds, 2), 0);
		while (ipc_conn_queued(r.c) > 0 && mono_ns() < until)
			assert_int_equal(ipc_loop_iterate(l, 1 * NSEC_PER_MSEC), 0);
		assert_int_equal(ipc_conn_queued(r.c), 0);
	}
	/* From here on messages stay queued (io_uring: the loop does not run; epoll: the
	 * socket is full), and their fds with them. */
	while (ipc_conn_queued(r.c) == 0)
		assert_int_equal(ipc_conn_send(r.c, test_rbuf, bare, NULL, 0), 0);
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(ipc_conn_send(r.c, test_sbuf, len, fds, 2), 0);
	assert_int_equal(ipc_conn_send(r.c, test_sbuf, len, fds, 1), -ENOBUFS);
	assert_true(test_loop_until(l, &r.closes, 1, WAIT_MS));
	assert_int_equal(r.error, -ENOBUFS);
	test_close_all(fds, 2);
	test_rec_done(&r);
	(void)close(sv[1]);
}

static void test_loop_conn_queue_drains_when_peer_reads(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	uint64_t until = mono_ns() + 5 * WAIT_MS * NSEC_PER_MSEC;
	int sv[2], fds[IPC_FDS_MAX];
	uint32_t got = 0;
	unsigned n;
	struct test_rec r;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	for (uint32_t id = 0; id < 2000; id++) {
		size_t len = test_msg_make(test_sbuf, IPC_DONE, id, 0, test_rbuf, 1000);

		assert_int_equal(ipc_conn_send(r.c, test_sbuf, len, NULL, 0), 0);
	}
	/* More than the socket holds: the loop sends the rest as the peer reads. */
	while (got < 2000 && mono_ns() < until) {
		assert_int_equal(ipc_loop_iterate(l, 1 * NSEC_PER_MSEC), 0);
		while (ipc_channel_recv(sv[1], test_rbuf, sizeof(test_rbuf), fds, &n,
					MSG_DONTWAIT) > 0)
			assert_int_equal(test_hdr_get(test_rbuf).id, got++);
	}
	assert_int_equal(got, 2000);
	assert_int_equal(ipc_conn_queued(r.c), 0);
	assert_int_equal(r.closes, 0);
	test_rec_done(&r);
	(void)close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		LOOP_TEST(test_loop_conn_free_in_own_callback),
		LOOP_TEST(test_loop_conn_free_other_in_callback),
		LOOP_TEST(test_loop_conn_free_before_delivery),
		LOOP_TEST(test_loop_conn_queue_overflow_by_count),
		LOOP_TEST(test_loop_conn_free_after_failure_skips_on_close),
		LOOP_TEST(test_loop_conn_queue_overflow_by_bytes),
		LOOP_TEST(test_loop_conn_queue_overflow_by_fds),
		LOOP_TEST(test_loop_conn_queue_drains_when_peer_reads),
	};

	return cmocka_run_group_tests_name("ipc-loop-conn-free", tests, NULL, NULL);
}
