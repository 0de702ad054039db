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

static const unsigned needed_ops[] = {
	IORING_OP_RECVMSG, IORING_OP_SENDMSG, IORING_OP_ACCEPT,
	IORING_OP_POLL_ADD, IORING_OP_POLL_REMOVE, IORING_OP_ASYNC_CANCEL,
};

static int uring_init(struct ipc_loop *l)
{
	struct io_uring_params p = { 0 };
	struct io_uring_probe *probe;
	int r;

	/* A plain ring: it runs on every kernel since 5.6 that has the operations below. Note
	 * that a process killed with operations in flight may keep their sockets alive in its
	 * ring for seconds after its death (seen on Linux 6.18): peers must not count on
	 * seeing the end of such a socket promptly. */
	r = io_uring_queue_init_params(RING_ENTRIES, &l->ring, &p);
	if (r < 0)
		return r;

	probe = io_uring_get_probe_ring(&l->ring);
	if (!probe) {
		io_uring_queue_exit(&l->ring);
		return -EINVAL;
	}
	for (unsigned i = 0; i < ARRAY_SIZE(needed_ops); i++)
		if (!io_uring_opcode_supported(probe, (int)needed_ops[i])) {
			io_uring_free_probe(probe);
			io_uring_queue_exit(&l->ring);
			return -EINVAL;
		}
	io_uring_free_probe(probe);
	l->ring_ready = true;
	return 0;
}

static struct io_uring_sqe *get_sqe(struct ipc_loop *l)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);

	if (!sqe) {
		(void)io_uring_submit(&l->ring);
		sqe = io_uring_get_sqe(&l->ring);
	}
	return sqe;
}

static int submit_op(struct ipc_obj *o, struct io_uring_sqe *sqe, struct uring_op *op)
{
	io_uring_sqe_set_data(sqe, op);
	o->inflight++;
	o->loop->inflight++;
	return 0;
}

static void cancel_op(struct ipc_loop *l, struct uring_op *op)
{
	struct io_uring_sqe *sqe = get_sqe(l);

	if (!sqe)
		return;
	io_uring_prep_cancel(sqe, op, 0);
	io_uring_sqe_set_data64(sqe, 0);
}

/* ---- connections ---- */

static int arm_recv(struct ipc_conn *c)
{
	struct io_uring_sqe *sqe = get_sqe(c->obj.loop);

	if (!sqe)
		return -EBUSY;
	c->riov = (struct iovec){ c->rbuf, IPC_MSG_MAX };
	c->rmh = (struct msghdr){
		.msg_iov = &c->riov,
		.msg_iovlen = 1,
		.msg_control = c->rctl.buf,
		.msg_controllen = sizeof(c->rctl.buf),
	};
	io_uring_prep_recvmsg(sqe, c->fd, &c->rmh, MSG_CMSG_CLOEXEC);
	c->recv_armed = true;
	return submit_op(&c->obj, sqe, &c->recv_op);
}

static int arm_send(struct ipc_conn *c)
{
	struct ipc_out *o = c->out_head;
	struct io_uring_sqe *sqe = get_sqe(c->obj.loop);

	if (!sqe)
		return -EBUSY;
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
	io_uring_prep_sendmsg(sqe, c->fd, &c->smh, MSG_NOSIGNAL);
	c->send_armed = true;
	return submit_op(&c->obj, sqe, &c->send_op);
}

static int uring_conn_start(struct ipc_conn *c)
{
	return arm_recv(c);
}

static void uring_conn_kick(struct ipc_conn *c)
{
	int r;

	if (c->send_armed || c->closed)
		return;
	r = arm_send(c);
	if (r < 0)
		ipc_conn_fail(c, r);
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
	if (!c->closed) {
		int r = arm_recv(c);
		if (r < 0)
			ipc_conn_fail(c, r);
	}
}

static void on_send(struct ipc_conn *c, int res)
{
	c->send_armed = false;
	if (res < 0) {
		ipc_conn_fail(c, res);
		return;
	}
	ipc_conn_pop_sent(c);
	if (c->out_head && !c->closed) {
		int r = arm_send(c);
		if (r < 0)
			ipc_conn_fail(c, r);
	}
}

/* ---- watches ---- */

static int arm_poll(struct ipc_watch *w)
{
	struct io_uring_sqe *sqe = get_sqe(w->obj.loop);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, w->fd, w->events);
	return submit_op(&w->obj, sqe, &w->op);
}

static int uring_watch_start(struct ipc_watch *w)
{
	/* epoll_ctl() refuses a bad fd at once; a poll operation would only fail later. */
	if (fcntl(w->fd, F_GETFD) < 0)
		return -errno;
	return arm_poll(w);
}

static void uring_watch_stop(struct ipc_watch *w)
{
	struct io_uring_sqe *sqe;

	if (w->obj.inflight == 0)
		return;
	sqe = get_sqe(w->obj.loop);
	if (!sqe)
		return;
	io_uring_prep_poll_remove(sqe, (__u64)(uintptr_t)&w->op);
	io_uring_sqe_set_data64(sqe, 0);
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
		(void)arm_poll(w);
}

/* ---- listeners ---- */

static int uring_listener_start(struct ipc_listener *li)
{
	struct io_uring_sqe *sqe;

	if (li->armed)
		return 0;
	sqe = get_sqe(li->obj.loop);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_accept(sqe, li->fd, NULL, NULL, SOCK_CLOEXEC);
	li->armed = true;
	return submit_op(&li->obj, sqe, &li->op);
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

static void dispatch(struct ipc_loop *l, struct io_uring_cqe *cqe)
{
	struct uring_op *op = io_uring_cqe_get_data(cqe);
	struct ipc_obj *o;

	if (!op || cqe->user_data == LIBURING_UDATA_TIMEOUT)
		return;
	o = op->obj;
	o->inflight--;
	l->inflight--;
	switch (op->kind) {
	case UOP_RECV:
		on_recv((struct ipc_conn *)o, cqe->res);
		break;
	case UOP_SEND:
		on_send((struct ipc_conn *)o, cqe->res);
		break;
	case UOP_POLL:
		on_poll((struct ipc_watch *)o, cqe->res);
		break;
	case UOP_ACCEPT:
		on_accept((struct ipc_listener *)o, cqe->res);
		break;
	}
	ipc_obj_release(o);
}

static int reap(struct ipc_loop *l)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;

	io_uring_for_each_cqe(&l->ring, head, cqe)
	{
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
	while (l->inflight > 0 && mono_ns() < until) {
		struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 10 * NSEC_PER_MSEC };
		struct io_uring_cqe *cqe;
		int r = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);

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
