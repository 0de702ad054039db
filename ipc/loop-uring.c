/* SPDX-License-Identifier: MIT */
/* ipc/loop-uring.c: the event loop on io_uring: receives, sends, accepts and polls as operations. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "loop-internal.h"
#include "macro.h"

#define RING_ENTRIES 256
/* How long freeing the loop waits for cancelled operations to complete. */
#define DRAIN_NS (1 * NSEC_PER_SEC)
/* How long the loop sleeps at most while operations wait for room in the ring. */
#define WAITING_RETRY_NS (1 * NSEC_PER_MSEC)

static const unsigned needed_ops[] = {
	IORING_OP_RECVMSG,  IORING_OP_SENDMSG,     IORING_OP_ACCEPT,
	IORING_OP_POLL_ADD, IORING_OP_POLL_REMOVE, IORING_OP_ASYNC_CANCEL,
};

static int uring_init(struct ipc_loop *l)
{
	struct io_uring_params p = { 0 };
	struct io_uring_probe *probe;
	int r;

	/* A plain ring: it runs on every kernel since 5.6 that has the operations below (with
	 * IPC_LOOP_SQPOLL, one whose submissions a kernel thread takes, where the kernel
	 * grants it: unprivileged since 5.11). Note that a process killed with operations in
	 * flight may keep their sockets alive in its ring for seconds after its death (seen on
	 * Linux 6.18): peers must not count on seeing the end of such a socket promptly. */
	if (l->sqpoll_wanted) {
		struct io_uring_params sq = { .flags = IORING_SETUP_SQPOLL,
					      .sq_thread_idle = IPC_LOOP_SQPOLL_IDLE_MS };

		l->sqpoll = io_uring_queue_init_params(RING_ENTRIES, &l->ring, &sq) == 0;
	}
	r = l->sqpoll ? 0 : io_uring_queue_init_params(RING_ENTRIES, &l->ring, &p);
	if (r < 0)
		return r;

	probe = io_uring_get_probe_ring(&l->ring);
	for (unsigned i = 0; probe && i < ARRAY_SIZE(needed_ops); i++)
		if (!io_uring_opcode_supported(probe, (int)needed_ops[i])) {
			io_uring_free_probe(probe);
			probe = NULL;
		}
	if (!probe) {
		io_uring_queue_exit(&l->ring);
		l->sqpoll = false;
		return -EINVAL;
	}
	io_uring_free_probe(probe);
	l->waiting = NULL;
	l->waiting_tail = &l->waiting;
	l->ring_ready = true;
	return 0;
}

/* ---- operations: submitted now, or when the ring has room ---- */

/* An entry, submitting what the ring holds to make room; NULL when the kernel takes none. */
static struct io_uring_sqe *get_sqe(struct ipc_loop *l)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);

	if (!sqe) {
		(void)io_uring_submit(&l->ring);
		sqe = io_uring_get_sqe(&l->ring);
	}
	return sqe;
}

/* The entry of op, by its kind; what it needs (buffers, flags) was set when it was armed. */
static void prep_op(struct io_uring_sqe *sqe, struct uring_op *op)
{
	switch (op->kind) {
	case UOP_RECV: {
		struct ipc_conn *c = (struct ipc_conn *)op->obj;

		io_uring_prep_recvmsg(sqe, c->fd, &c->rmh, MSG_CMSG_CLOEXEC);
		break;
	}
	case UOP_SEND: {
		struct ipc_conn *c = (struct ipc_conn *)op->obj;

		io_uring_prep_sendmsg(sqe, c->fd, &c->smh, MSG_NOSIGNAL);
		break;
	}
	case UOP_POLL: {
		struct ipc_watch *w = (struct ipc_watch *)op->obj;

		io_uring_prep_poll_add(sqe, w->fd, w->events);
		break;
	}
	case UOP_ACCEPT: {
		struct ipc_listener *li = (struct ipc_listener *)op->obj;

		io_uring_prep_accept(sqe, li->fd, NULL, NULL, SOCK_CLOEXEC);
		break;
	}
	}
	io_uring_sqe_set_data(sqe, op);
	op->obj->loop->inflight++;
}

/* The entry that cancels op; its own completion is nobody's. */
static void prep_cancel(struct io_uring_sqe *sqe, struct uring_op *op)
{
	if (op->kind == UOP_POLL)
		io_uring_prep_poll_remove(sqe, (__u64)(uintptr_t)op);
	else
		io_uring_prep_cancel(sqe, op, 0);
	io_uring_sqe_set_data64(sqe, 0);
}

static void wait_for_room(struct ipc_loop *l, struct uring_op *op)
{
	if (op->listed)
		return;
	op->listed = true;
	op->next_waiting = NULL;
	*l->waiting_tail = op;
	l->waiting_tail = &op->next_waiting;
}

/* Off the list: op's object may go once op completes. */
static void waiting_unlink(struct ipc_loop *l, struct uring_op *op)
{
	struct uring_op **p = &l->waiting;

	while (*p != op)
		p = &(*p)->next_waiting;
	*p = op->next_waiting;
	if (l->waiting_tail == &op->next_waiting)
		l->waiting_tail = p;
	op->listed = false;
}

/* Start op; its object is held (inflight) until op completes, submitted or not. */
static void submit_op(struct uring_op *op)
{
	struct ipc_loop *l = op->obj->loop;
	struct io_uring_sqe *sqe = get_sqe(l);

	op->obj->inflight++;
	if (!sqe) {
		op->arm_waiting = true;
		wait_for_room(l, op);
		return;
	}
	prep_op(sqe, op);
}

/* Take op back: it completes with -ECANCELED (or with what it got first). */
static void cancel_op(struct ipc_loop *l, struct uring_op *op)
{
	struct io_uring_sqe *sqe;

	/* Not submitted yet: the next turn completes it without the kernel. */
	if (op->arm_waiting) {
		op->cancel_waiting = true;
		return;
	}
	sqe = get_sqe(l);
	if (!sqe) {
		op->cancel_waiting = true;
		wait_for_room(l, op);
		return;
	}
	prep_cancel(sqe, op);
}

static void op_done(struct uring_op *op, int res);

/*
 * Submit what waits for room, oldest first, as far as the ring takes it. An operation
 * cancelled before it was submitted completes here with -ECANCELED, as it would from the
 * kernel. (One whose cancellation waits and that completes meanwhile leaves the list then.)
 */
static void submit_waiting(struct ipc_loop *l)
{
	struct uring_op *op = l->waiting;

	l->waiting = NULL;
	l->waiting_tail = &l->waiting;
	while (op) {
		struct uring_op *next = op->next_waiting;
		struct io_uring_sqe *sqe;

		op->listed = false;
		if (op->arm_waiting && op->cancel_waiting) {
			op->arm_waiting = op->cancel_waiting = false;
			op->obj->inflight--;
			op_done(op, -ECANCELED);
		} else if (!(sqe = get_sqe(l))) {
			wait_for_room(l, op);
		} else if (op->arm_waiting) {
			op->arm_waiting = false;
			prep_op(sqe, op);
		} else {
			op->cancel_waiting = false;
			prep_cancel(sqe, op);
		}
		op = next;
	}
}

/* ---- connections ---- */

static void arm_recv(struct ipc_conn *c)
{
	c->riov = (struct iovec){ c->rbuf, IPC_MSG_MAX };
	c->rmh = (struct msghdr){
		.msg_iov = &c->riov,
		.msg_iovlen = 1,
		.msg_control = c->rctl.buf,
		.msg_controllen = sizeof(c->rctl.buf),
	};
	c->recv_armed = true;
	submit_op(&c->recv_op);
}

static void arm_send(struct ipc_conn *c)
{
	struct ipc_out *o = c->out_head;

	c->siov = (struct iovec){ o->data, o->len };
	c->smh = (struct msghdr){ .msg_iov = &c->siov, .msg_iovlen = 1 };
	if (o->nfds) {
		struct cmsghdr *cm;

		memset(&c->sctl, 0, sizeof(c->sctl));
		c->smh.msg_control = c->sctl.buf;
		c->smh.msg_controllen = CMSG_SPACE(sizeof(int) * o->nfds);
		cm = CMSG_FIRSTHDR(&c->smh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * o->nfds);
		memcpy(CMSG_DATA(cm), o->fds, sizeof(int) * o->nfds);
	}
	c->send_armed = true;
	submit_op(&c->send_op);
}

static int uring_conn_start(struct ipc_conn *c)
{
	arm_recv(c);
	return 0;
}

static void uring_conn_kick(struct ipc_conn *c)
{
	if (c->send_armed || c->closed)
		return;
	arm_send(c);
}

static void uring_conn_stop(struct ipc_conn *c)
{
	/* Shutting the reading side completes a pending receive (0), and the peer's sends now
	 * fail; the writing side stays open for a last word of the owner's (the peer must read
	 * why it is dropped before it sees the end). The pending send is cancelled. */
	(void)shutdown(c->fd, SHUT_RD);
	if (c->recv_armed)
		cancel_op(c->obj.loop, &c->recv_op);
	if (c->send_armed)
		cancel_op(c->obj.loop, &c->send_op);
}

static void on_recv(struct ipc_conn *c, int res)
{
	c->recv_armed = false;
	if (res > 0) {
		int fds[IPC_FDS_MAX];
		unsigned nfds;
		ssize_t n = ipc_channel_take_fds(&c->rmh, res, fds, &nfds);

		if (n < 0)
			ipc_conn_fail(c, (int)n);
		else
			ipc_conn_deliver(c, n, fds, nfds);
	} else if (res == 0) {
		ipc_conn_fail(c, 0);
	} else if (res == -ECONNRESET) {
		/* The peer closed with our messages unread: reported once, before what it had sent
		 * us (as in ipc_channel_recv()). The next receive gets that, then the end. */
	} else if (res != -ECANCELED || !c->closed) {
		ipc_conn_fail(c, res);
	}
	if (!c->closed)
		arm_recv(c);
}

static void on_send(struct ipc_conn *c, int res)
{
	c->send_armed = false;
	if (res < 0) {
		ipc_conn_fail(c, res);
		return;
	}
	ipc_conn_pop_sent(c);
	if (c->out_head && !c->closed)
		arm_send(c);
}

/* ---- watches ---- */

static int uring_watch_start(struct ipc_watch *w)
{
	/* epoll_ctl() refuses a bad fd at once; a poll operation would only fail later. */
	if (fcntl(w->fd, F_GETFD) < 0)
		return -errno;
	submit_op(&w->op);
	return 0;
}

static void uring_watch_stop(struct ipc_watch *w)
{
	if (w->obj.inflight > 0)
		cancel_op(w->obj.loop, &w->op);
}

static void on_poll(struct ipc_watch *w, int res)
{
	if (w->obj.dead)
		return;
	/* A poll that fails (the fd was closed under the watch) would fail again at once: say
	 * so once, as POLLNVAL, and stop watching. */
	if (res < 0) {
		w->fn(w, w->fd, POLLNVAL, w->userdata);
		return;
	}
	if (res > 0)
		w->fn(w, w->fd, (uint32_t)res, w->userdata);
	if (!w->obj.dead)
		submit_op(&w->op);
}

/* ---- listeners ---- */

static int uring_listener_start(struct ipc_listener *li)
{
	if (li->armed)
		return 0;
	li->armed = true;
	submit_op(&li->op);
	return 0;
}

static void uring_listener_stop(struct ipc_listener *li)
{
	if (li->armed)
		cancel_op(li->obj.loop, &li->op);
}

static void on_accept(struct ipc_listener *li, int res)
{
	li->armed = false;
	if (res == -ECANCELED && li->obj.dead)
		return;
	if (ipc_listener_accepted(li, res) && !li->obj.dead)
		(void)uring_listener_start(li);
}

/* ---- the loop ---- */

/* op has completed with res (its object's inflight already counted down). */
static void op_done(struct uring_op *op, int res)
{
	struct ipc_obj *o = op->obj;

	switch (op->kind) {
	case UOP_RECV:
		on_recv((struct ipc_conn *)o, res);
		break;
	case UOP_SEND:
		on_send((struct ipc_conn *)o, res);
		break;
	case UOP_POLL:
		on_poll((struct ipc_watch *)o, res);
		break;
	case UOP_ACCEPT:
		on_accept((struct ipc_listener *)o, res);
		break;
	}
	ipc_obj_release(o);
}

static void dispatch(struct ipc_loop *l, struct io_uring_cqe *cqe)
{
	struct uring_op *op = io_uring_cqe_get_data(cqe);

	if (!op || cqe->user_data == LIBURING_UDATA_TIMEOUT)
		return;
	op->obj->inflight--;
	l->inflight--;
	/* Done before its cancellation could be submitted: there is nothing left to cancel. */
	if (op->listed) {
		op->cancel_waiting = false;
		waiting_unlink(l, op);
	}
	op_done(op, cqe->res);
}

static int reap(struct ipc_loop *l)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;

	io_uring_for_each_cqe (&l->ring, head, cqe) {
		dispatch(l, cqe);
		n++;
	}
	io_uring_cq_advance(&l->ring, n);
	return (int)n;
}

static int uring_wait(struct ipc_loop *l, int64_t timeout_ns)
{
	struct io_uring_cqe *cqe;
	int r;

	/* What found no room last time goes in first; while some still waits, the loop comes
	 * back soon to try again rather than sleeping on what the kernel has. */
	submit_waiting(l);
	if (l->waiting && (timeout_ns < 0 || timeout_ns > (int64_t)WAITING_RETRY_NS))
		timeout_ns = WAITING_RETRY_NS;

	/* A look without waiting enters the kernel only to submit: on a plain ring, completions
	 * are posted without it (task work interrupts the task). */
	if (timeout_ns == 0 && !io_uring_cq_has_overflow(&l->ring)) {
		if (io_uring_sq_ready(&l->ring) > 0) {
			r = io_uring_submit(&l->ring);
			if (r < 0 && r != -EINTR && r != -EBUSY && r != -EAGAIN)
				return r;
		}
		return reap(l);
	}
	if (timeout_ns < 0) {
		r = io_uring_submit_and_wait(&l->ring, 1);
	} else {
		struct __kernel_timespec ts = {
			.tv_sec = timeout_ns / (int64_t)NSEC_PER_SEC,
			.tv_nsec = timeout_ns % (int64_t)NSEC_PER_SEC,
		};
		r = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
	}
	if (r < 0 && r != -ETIME && r != -EINTR && r != -EBUSY)
		return r;
	/* Callbacks may queue operations: they are submitted by the next wait. */
	return reap(l);
}

static void uring_done(struct ipc_loop *l)
{
	uint64_t until = mono_ns() + DRAIN_NS;

	if (!l->ring_ready)
		return;
	/* Objects freed just before the loop still wait for their cancellations. */
	while ((l->inflight > 0 || l->waiting) && mono_ns() < until) {
		struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 10 * NSEC_PER_MSEC };
		struct io_uring_cqe *cqe;
		int r;

		submit_waiting(l);
		r = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
		if (r == -ETIME || reap(l) == 0)
			break;
	}
	io_uring_queue_exit(&l->ring);
	l->ring_ready = false;
}

const struct ipc_loop_ops ipc_loop_uring_ops = {
	.name = "io_uring",
	.init = uring_init,
	.done = uring_done,
	.wait = uring_wait,
	.watch_start = uring_watch_start,
	.watch_stop = uring_watch_stop,
	.conn_start = uring_conn_start,
	.conn_kick = uring_conn_kick,
	.conn_stop = uring_conn_stop,
	.listener_start = uring_listener_start,
	.listener_stop = uring_listener_stop,
};
