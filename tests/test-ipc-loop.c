/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-loop.c: the loop itself: io_uring or epoll, listeners, freeing. */
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

/* ---- loops ---- */

/* $GPUX_LOOP as the test found it, to put back: the suite may run under GPUX_LOOP=epoll. */
static char *env_save(void)
{
	const char *e = getenv("GPUX_LOOP");
	char *copy = e ? strdup(e) : NULL;

	assert_true(!e || copy);
	return copy;
}

static void env_restore(char *saved)
{
	if (saved)
		assert_int_equal(setenv("GPUX_LOOP", saved, 1), 0);
	else
		assert_int_equal(unsetenv("GPUX_LOOP"), 0);
	free(saved);
}

static void test_loop_kind_and_name(void **state)
{
	struct test_loop_fixture *f = *state;
	struct ipc_loop *l = test_loop_of(state);

	assert_string_equal(ipc_loop_name(l), f->kind == IPC_LOOP_URING ? "io_uring" : "epoll");
	assert_int_equal(ipc_loop_fallback(l), 0);
	/* Nothing to wait for: a round with a timeout just returns. */
	assert_int_equal(ipc_loop_iterate(l, 0), 0);
	assert_int_equal(ipc_loop_iterate(l, 1 * NSEC_PER_MSEC), 0);
}

static void test_loop_env_selects_kind(void **state)
{
	struct test_loop_fixture *f = *state;
	char *saved = env_save();
	struct ipc_loop *l;

	(void)test_loop_of(state);
	assert_int_equal(setenv("GPUX_LOOP", f->kind == IPC_LOOP_URING ? "io_uring" : "epoll", 1),
			 0);
	assert_int_equal(ipc_loop_new(IPC_LOOP_AUTO, &l), 0);
	env_restore(saved);
	assert_string_equal(ipc_loop_name(l), f->kind == IPC_LOOP_URING ? "io_uring" : "epoll");
	assert_int_equal(ipc_loop_fallback(l), 0);
	ipc_loop_free(l);
}

static void test_loop_env_rejects_unknown(void **state)
{
	int before = test_fd_count();
	char *saved = env_save();
	struct ipc_loop *l = NULL;

	assert_int_equal(setenv("GPUX_LOOP", "select", 1), 0);
	assert_int_equal(ipc_loop_new(IPC_LOOP_AUTO, &l), -EINVAL);
	assert_null(l);
	/* An explicit kind does not look at the environment. */
	assert_int_equal(ipc_loop_new(IPC_LOOP_EPOLL, &l), 0);
	ipc_loop_free(l);
	env_restore(saved);
	ipc_loop_free(NULL);
	assert_no_fd_leak(before);
}

static void test_loop_auto_prefers_uring(void **state)
{
	int before = test_fd_count();
	char *saved = env_save();
	struct ipc_loop *l;

	assert_int_equal(setenv("GPUX_LOOP", "", 1), 0);
	assert_int_equal(ipc_loop_new(IPC_LOOP_AUTO, &l), 0);
	env_restore(saved);
	if (test_uring_available()) {
		assert_string_equal(ipc_loop_name(l), "io_uring");
		assert_int_equal(ipc_loop_fallback(l), 0);
	} else {
		assert_string_equal(ipc_loop_name(l), "epoll");
		assert_true(ipc_loop_fallback(l) < 0);
	}
	ipc_loop_free(l);
	assert_no_fd_leak(before);
}

/* ---- listeners ---- */

struct accept_rec {
	struct ipc_loop *l;
	struct ipc_listener *li;
	unsigned accepted;
	struct test_rec conns[8];
	bool free_self;
};

static void on_accept(struct ipc_listener *li, int fd, void *userdata)
{
	struct accept_rec *a = userdata;

	assert_ptr_equal(li, a->li);
	assert_true(test_fd_cloexec(fd));
	assert_true(a->accepted < ARRAY_SIZE(a->conns));
	test_rec_init(&a->conns[a->accepted++], a->l, fd);
	if (a->free_self) {
		ipc_listener_free(li);
		a->li = NULL;
	}
}

static void test_loop_listener_accepts(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct accept_rec a = { .l = l };
	unsigned msgs = 0;
	char *dir = test_mkdtemp(), *path;
	int lfd, clients[5];

	assert_true(asprintf(&path, "%s/sock", dir) > 0);
	lfd = test_listen_unix(path);
	assert_int_equal(ipc_listener_new(l, lfd, on_accept, &a, &a.li), 0);
	for (unsigned i = 0; i < ARRAY_SIZE(clients); i++) {
		size_t len = test_msg_make(test_sbuf, IPC_HELLO, 1, 0, &i, sizeof(i));

		clients[i] = test_connect_unix(path);
		assert_true(clients[i] >= 0);
		assert_int_equal(ipc_channel_send(clients[i], test_sbuf, len, NULL, 0, 0), 0);
	}
	assert_true(test_loop_until(l, &a.accepted, ARRAY_SIZE(clients), WAIT_MS));
	for (unsigned tries = 0; msgs < ARRAY_SIZE(clients) && tries < 400; tries++) {
		msgs = 0;
		test_loop_spin(l, 5);
		for (unsigned i = 0; i < a.accepted; i++)
			msgs += a.conns[i].msgs;
	}
	assert_int_equal(msgs, ARRAY_SIZE(clients));
	/* Each connection got exactly its own client's message. */
	for (unsigned i = 0; i < a.accepted; i++) {
		assert_int_equal(a.conns[i].msgs, 1);
		assert_int_equal(a.conns[i].hdr.len, sizeof(unsigned));
	}
	ipc_listener_free(a.li);
	/* No longer accepting: a new client waits in the backlog. */
	clients[0] = safe_close(clients[0]);
	clients[0] = test_connect_unix(path);
	assert_true(clients[0] >= 0);
	test_loop_spin(l, 20);
	assert_int_equal(a.accepted, ARRAY_SIZE(clients));
	for (unsigned i = 0; i < a.accepted; i++)
		test_rec_done(&a.conns[i]);
	test_close_all(clients, ARRAY_SIZE(clients));
	(void)close(lfd);
	test_rmtree(dir);
	free(path);
	free(dir);
}

static void test_loop_listener_free_in_callback(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct accept_rec a = { .l = l, .free_self = true };
	char *dir = test_mkdtemp(), *path;
	int lfd, clients[3];

	assert_true(asprintf(&path, "%s/sock", dir) > 0);
	lfd = test_listen_unix(path);
	assert_int_equal(ipc_listener_new(l, lfd, on_accept, &a, &a.li), 0);
	for (unsigned i = 0; i < ARRAY_SIZE(clients); i++) {
		clients[i] = test_connect_unix(path);
		assert_true(clients[i] >= 0);
	}
	assert_true(test_loop_until(l, &a.accepted, 1, WAIT_MS));
	test_loop_spin(l, 30);
	assert_int_equal(a.accepted, 1);
	assert_null(a.li);
	test_rec_done(&a.conns[0]);
	test_close_all(clients, ARRAY_SIZE(clients));
	(void)close(lfd);
	test_rmtree(dir);
	free(path);
	free(dir);
}

/* ---- freeing everything ---- */

static void test_loop_free_with_work_pending(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct test_watch_rec wr = { 0 };
	struct accept_rec a = { .l = l };
	char *dir = test_mkdtemp(), *path;
	struct ipc_timer *t;
	struct test_rec r;
	int sv[2], lfd, fd, client;
	size_t len = test_msg_make(test_sbuf, IPC_DONE, 1, 1, test_rbuf, 30000);

	assert_true(asprintf(&path, "%s/sock", dir) > 0);
	lfd = test_listen_unix(path);
	assert_int_equal(ipc_listener_new(l, lfd, on_accept, &a, &a.li), 0);
	client = test_connect_unix(path);
	assert_true(test_loop_until(l, &a.accepted, 1, WAIT_MS));

	/* A connection with a full socket and a queue of messages holding fds. */
	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_rec_init(&r, l, sv[0]);
	test_open_files(&fd, 1);
	for (unsigned i = 0; i < 64; i++)
		assert_int_equal(ipc_conn_send(r.c, test_sbuf, len, &fd, 1), 0);
	(void)close(fd);
	assert_int_equal(ipc_loop_iterate(l, 0), 0);
	assert_true(ipc_conn_queued(r.c) > 0);

	wr.fd = eventfd(0, EFD_CLOEXEC);
	assert_true(wr.fd >= 0);
	assert_int_equal(ipc_watch_new(l, wr.fd, POLLIN, test_watch_cb, &wr, &wr.w), 0);
	assert_int_equal(ipc_timer_new(l, test_timer_cb, NULL, &t), 0);
	ipc_timer_arm(t, mono_ns() + NSEC_PER_SEC);
	assert_int_equal(ipc_loop_iterate(l, 0), 0);

	/* Freed with operations under way and no round in between; the teardown frees the loop. */
	test_rec_done(&r);
	test_rec_done(&a.conns[0]);
	ipc_watch_free(wr.w);
	ipc_timer_free(t);
	ipc_listener_free(a.li);
	(void)close(sv[1]);
	(void)close(wr.fd);
	(void)close(client);
	(void)close(lfd);
	test_rmtree(dir);
	free(path);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		LOOP_TEST(test_loop_kind_and_name),
		LOOP_TEST(test_loop_env_selects_kind),
		cmocka_unit_test(test_loop_env_rejects_unknown),
		cmocka_unit_test(test_loop_auto_prefers_uring),
		LOOP_TEST(test_loop_listener_accepts),
		LOOP_TEST(test_loop_listener_free_in_callback),
		LOOP_TEST(test_loop_free_with_work_pending),
	};

	return cmocka_run_group_tests_name("ipc-loop", tests, NULL, NULL);
}
