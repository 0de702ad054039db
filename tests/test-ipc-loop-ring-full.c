/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-loop-ring-full.c: the loop when io_uring's submission queue is full. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "loop-helpers.h"
#include "loop-internal.h"
#include "macro.h"

/*
 * The loop takes a submission queue entry for each operation, and submits to make room when
 * the queue is full. A kernel may refuse that submission for a while (-EBUSY while
 * completions overflow, -EAGAIN without memory): the operation must go in later, not be
 * lost, or a watch (pidfd, signalfd, log pipe) or a listener stops without a word and a
 * cancellation leaves its operation running. The test fills the loop's queue from a callback
 * and makes the next io_uring_submit() fail (the program is linked with
 * -Wl,--wrap=io_uring_submit); on epoll there is no queue, and the same steps must work.
 */
static unsigned submit_failures;

int __real_io_uring_submit(struct io_uring *ring);
int __wrap_io_uring_submit(struct io_uring *ring);

int __wrap_io_uring_submit(struct io_uring *ring)
{
	if (submit_failures) {
		submit_failures--;
		return -EBUSY;
	}
	return __real_io_uring_submit(ring);
}

/* Fill l's submission queue with no-ops (their completions are nobody's) and make the next
 * `failures` submissions fail: the loop's next operation finds no room. */
static void ring_fill(struct ipc_loop *l, unsigned failures)
{
	struct io_uring_sqe *sqe;

	if (strcmp(ipc_loop_name(l), "io_uring") != 0)
		return;
	while ((sqe = io_uring_get_sqe(&l->ring))) {
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, 0);
	}
	submit_failures = failures;
}

/* Whether every operation the loop submitted has ended, within WAIT_MS. */
static bool ops_end(struct ipc_loop *l)
{
	uint64_t until = mono_ns() + WAIT_MS * NSEC_PER_MSEC;

	while (l->inflight > 0 && mono_ns() < until)
		assert_int_equal(ipc_loop_iterate(l, 10 * NSEC_PER_MSEC), 0);
	return l->inflight == 0;
}

struct fill_watch {
	struct ipc_watch *w;
	struct ipc_loop *l;
	int fd;
	unsigned calls;
	bool fill; /* fill the ring in the next call, before the watch is armed again */
};

static void fill_watch_cb(struct ipc_watch *w, int fd, uint32_t revents, void *userdata)
{
	struct fill_watch *f = userdata;
	uint64_t v;

	assert_true(revents & POLLIN);
	assert_int_equal(read(fd, &v, sizeof(v)), sizeof(v));
	f->calls++;
	if (f->fill) {
		f->fill = false;
		ring_fill(f->l, 1);
	}
}

static void test_loop_full_ring_watch_rearmed(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct fill_watch f = { .l = l, .fill = true };
	uint64_t one = 1;

	f.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	assert_true(f.fd >= 0);
	assert_int_equal(ipc_watch_new(l, f.fd, POLLIN, fill_watch_cb, &f, &f.w), 0);
	/* The first call fills the ring: its watch finds no room to go on. */
	for (unsigned i = 1; i <= 3; i++) {
		assert_int_equal(write(f.fd, &one, sizeof(one)), sizeof(one));
		assert_true(test_loop_until(l, &f.calls, i, WAIT_MS));
	}
	assert_int_equal(submit_failures, 0);
	ipc_watch_free(f.w);
	assert_true(ops_end(l));
	(void)close(f.fd);
}

static void test_loop_full_ring_watch_started(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct fill_watch f = { .l = l };
	uint64_t one = 1;

	f.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	assert_true(f.fd >= 0);
	ring_fill(l, 1);
	assert_int_equal(ipc_watch_new(l, f.fd, POLLIN, fill_watch_cb, &f, &f.w), 0);
	assert_int_equal(write(f.fd, &one, sizeof(one)), sizeof(one));
	assert_true(test_loop_until(l, &f.calls, 1, WAIT_MS));
	ipc_watch_free(f.w);
	assert_true(ops_end(l));
	(void)close(f.fd);
}

static void test_loop_full_ring_watch_cancelled(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct fill_watch f = { .l = l };
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	assert_true(fd >= 0);
	assert_int_equal(ipc_watch_new(l, fd, POLLIN, fill_watch_cb, &f, &f.w), 0);
	test_loop_spin(l, 5);
	/* Its poll is in the kernel: taking it back needs an entry too. */
	ring_fill(l, 1);
	ipc_watch_free(f.w);
	assert_true(ops_end(l));
	assert_int_equal(f.calls, 0);
	(void)close(fd);
}

static void test_loop_full_ring_watch_cancel_overtaken(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct fill_watch f = { .l = l };
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	uint64_t one = 1;

	assert_true(fd >= 0);
	assert_int_equal(ipc_watch_new(l, fd, POLLIN, fill_watch_cb, &f, &f.w), 0);
	test_loop_spin(l, 5);
	/* The cancellation waits for room for a turn, and its poll completes meanwhile: the
	 * watch goes with it, and nothing refers to it afterwards (ASan would see that). */
	ring_fill(l, 2);
	ipc_watch_free(f.w);
	assert_int_equal(write(fd, &one, sizeof(one)), sizeof(one));
	assert_true(ops_end(l));
	assert_int_equal(f.calls, 0);
	test_loop_spin(l, 5);
	(void)close(fd);
}

struct fill_accept {
	struct ipc_listener *li;
	struct ipc_loop *l;
	unsigned accepted;
	bool fill;
};

static void fill_accept_cb(struct ipc_listener *li, int fd, void *userdata)
{
	struct fill_accept *a = userdata;

	assert_true(test_fd_cloexec(fd));
	(void)close(fd);
	a->accepted++;
	if (a->fill) {
		a->fill = false;
		ring_fill(a->l, 1);
	}
}

static void test_loop_full_ring_listener(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct fill_accept a = { .l = l, .fill = true };
	char *dir = test_mkdtemp(), *path;
	int lfd, clients[3];

	assert_true(asprintf(&path, "%s/sock", dir) > 0);
	lfd = test_listen_unix(path);
	assert_int_equal(ipc_listener_new(l, lfd, fill_accept_cb, &a, &a.li), 0);
	/* The first accept fills the ring: the next one finds no room to go in. */
	for (unsigned i = 0; i < ARRAY_SIZE(clients); i++) {
		clients[i] = test_connect_unix(path);
		assert_true(clients[i] >= 0);
		assert_true(test_loop_until(l, &a.accepted, i + 1, WAIT_MS));
	}
	/* And its cancellation, with the ring full again, is not lost either. */
	ring_fill(l, 1);
	ipc_listener_free(a.li);
	assert_true(ops_end(l));
	test_close_all(clients, ARRAY_SIZE(clients));
	(void)close(lfd);
	test_rmtree(dir);
	free(path);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		LOOP_TEST(test_loop_full_ring_watch_rearmed),
		LOOP_TEST(test_loop_full_ring_watch_started),
		LOOP_TEST(test_loop_full_ring_watch_cancelled),
		LOOP_TEST(test_loop_full_ring_watch_cancel_overtaken),
		LOOP_TEST(test_loop_full_ring_listener),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
