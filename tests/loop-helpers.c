/* SPDX-License-Identifier: MIT */
/* tests/loop-helpers.c: what the tests of ipc/loop share: a loop of each kind, and recorders. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "channel.h"
#include "loop-helpers.h"
#include "macro.h"

uint8_t test_sbuf[IPC_MSG_MAX], test_rbuf[IPC_MSG_MAX];

/* ---- fixture: a loop of the test's kind, and an fd count taken before it ---- */

enum ipc_loop_kind test_kind_uring = IPC_LOOP_URING;
enum ipc_loop_kind test_kind_epoll = IPC_LOOP_EPOLL;

int test_loop_setup(void **state)
{
	struct test_loop_fixture *f = calloc(1, sizeof(*f));
	bool sqpoll = getenv("GPUX_TEST_SQPOLL") != NULL;

	assert_non_null(f);
	f->kind = *(enum ipc_loop_kind *)*state;
	f->fds_before = test_fd_count();
	/* $GPUX_TEST_SQPOLL: io_uring loops ask for a kernel thread to take their submissions;
	 * where the kernel refuses, their tests are skipped, not run on a plain ring. */
	if (f->kind != IPC_LOOP_URING || test_uring_available())
		assert_int_equal(ipc_loop_new_ex(f->kind, sqpoll ? IPC_LOOP_SQPOLL : 0, &f->l), 0);
	if (f->l && f->kind == IPC_LOOP_URING && sqpoll && !ipc_loop_sqpoll(f->l)) {
		ipc_loop_free(f->l);
		f->l = NULL;
	}
	*state = f;
	return 0;
}

int test_loop_teardown(void **state)
{
	struct test_loop_fixture *f = *state;

	ipc_loop_free(f->l);
	assert_no_fd_leak(f->fds_before);
	free(f);
	return 0;
}

struct ipc_loop *test_loop_of(void **state)
{
	struct test_loop_fixture *f = *state;

	if (!f->l)
		skip();
	return f->l;
}

/* ---- a connection that records what happens to it ---- */

static void rec_on_msg(struct ipc_conn *c, struct ipc_msg *msg, void *userdata)
{
	struct test_rec *r = userdata;

	assert_ptr_equal(c, r->c);
	r->msgs++;
	if (msg->hdr.id != r->next_id)
		r->out_of_order = true;
	r->next_id = msg->hdr.id + 1;
	r->hdr = msg->hdr;
	memcpy(r->payload, msg->payload, MIN(msg->len, sizeof(r->payload)));
	test_close_all(r->fds, r->nfds);
	r->nfds = msg->nfds;
	for (unsigned i = 0; i < msg->nfds; i++)
		r->fds[i] = ipc_msg_take_fd(msg, i);
	if (r->free_on_msg) {
		ipc_conn_free(c);
		r->c = NULL;
	}
}

static void rec_on_close(struct ipc_conn *c, int error, void *userdata)
{
	struct test_rec *r = userdata;

	assert_ptr_equal(c, r->c);
	r->closes++;
	r->error = error;
	r->msgs_at_close = r->msgs;
	r->send_in_close = ipc_conn_send(c, test_sbuf, sizeof(struct ipc_hdr), NULL, 0);
	if (r->last_word)
		r->last_word_sent = ipc_channel_send(ipc_conn_fd(c), test_sbuf,
						     sizeof(struct ipc_hdr), NULL, 0, MSG_DONTWAIT);
	if (r->free_on_close) {
		ipc_conn_free(c);
		r->c = NULL;
	}
}

void test_rec_init(struct test_rec *r, struct ipc_loop *l, int fd)
{
	*r = (struct test_rec){ .next_id = 1, .fds = { -1, -1, -1, -1 } };
	assert_int_equal(ipc_conn_new_take_fd(l, fd, rec_on_msg, rec_on_close, r, &r->c), 0);
}

void test_rec_done(struct test_rec *r)
{
	test_close_all(r->fds, r->nfds);
	ipc_conn_free(r->c);
	r->c = NULL;
}

void test_echo_on_msg(struct ipc_conn *c, struct ipc_msg *msg, void *userdata)
{
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_part part = { msg->payload, msg->len };
	int n = ipc_encode(buf, sizeof(buf), msg->hdr.type, msg->hdr.id, msg->nfds, NULL, 0, &part,
			   1);

	assert_true(n > 0);
	assert_int_equal(ipc_conn_send(c, buf, (size_t)n, msg->fds, msg->nfds), 0);
}

void test_fail_on_close(struct ipc_conn *c, int error, void *userdata)
{
	fail_msg("unexpected on_close(%d)", error);
}

void test_fail_on_msg(struct ipc_conn *c, struct ipc_msg *msg, void *userdata)
{
	fail_msg("unexpected message of type %u", msg->hdr.type);
}

bool test_peer_sees_hangup(int sock)
{
	int fds[IPC_FDS_MAX];
	unsigned n;
	ssize_t r = test_recv_wait(sock, test_rbuf, sizeof(test_rbuf), fds, &n, WAIT_MS);

	return r == 0 || r == -ECONNRESET;
}

/* ---- a watch and a timer that record their calls ---- */

void test_watch_cb(struct ipc_watch *w, int fd, uint32_t revents, void *userdata)
{
	struct test_watch_rec *r = userdata;

	assert_ptr_equal(w, r->w);
	assert_int_equal(fd, r->fd);
	r->calls++;
	r->revents = revents;
	if (r->drain) {
		struct signalfd_siginfo si;
		ssize_t n = read(fd, &si, sizeof(si));

		if (n == sizeof(si))
			r->signo = si.ssi_signo;
		else
			assert_int_equal(n, sizeof(uint64_t));
	}
	if (r->free_self) {
		ipc_watch_free(w);
		r->w = NULL;
	}
	if (r->free_other && *r->free_other) {
		ipc_watch_free(*r->free_other);
		*r->free_other = NULL;
	}
}

void test_timer_cb(struct ipc_timer *t, void *userdata)
{
	struct test_timer_rec *r = userdata;

	assert_ptr_equal(t, r->t);
	r->at = mono_ns();
	assert_true(r->at >= r->due);
	r->order[(*r->fired)++] = r->number;
	if (r->rearm) {
		r->rearm--;
		r->due = mono_ns() + 1 * NSEC_PER_MSEC;
		ipc_timer_arm(t, r->due);
	}
	if (r->free_other && *r->free_other) {
		ipc_timer_free(*r->free_other);
		*r->free_other = NULL;
	}
	if (r->exit_loop)
		ipc_loop_exit(r->exit_loop, 42);
}
