/* SPDX-License-Identifier: MIT */
/* ipc/loop-epoll.c: the event loop on epoll: readiness, then non-blocking system calls. */
#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "loop-internal.h"
#include "macro.h"

#define EVENTS_MAX 64
/* Messages taken from one connection per round, so that one busy peer cannot starve others. */
#define RECV_BATCH 16
#define ACCEPT_BATCH 16

static int epoll_init(struct ipc_loop *l)
{
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0)
		return -errno;
	return 0;
}

static void epoll_done(struct ipc_loop *l)
{
	l->epfd = safe_close(l->epfd);
}

static int ctl(struct ipc_loop *l, int op, int fd, uint32_t events, struct ipc_obj *o)
{
	struct epoll_event ev = { .events = events, .data.ptr = o };

	if (epoll_ctl(l->epfd, op, fd, &ev) < 0)
		return -errno;
	return 0;
}

/* ---- connections ---- */

static int epoll_conn_start(struct ipc_conn *c)
{
	c->ep_events = EPOLLIN;
	return ctl(c->obj.loop, EPOLL_CTL_ADD, c->fd, c->ep_events, &c->obj);
}

static void conn_want_out(struct ipc_conn *c, bool want)
{
	uint32_t ev = EPOLLIN | (want ? EPOLLOUT : 0);

	if (ev == c->ep_events)
		return;
	c->ep_events = ev;
	if (ctl(c->obj.loop, EPOLL_CTL_MOD, c->fd, ev, &c->obj) < 0)
		ipc_conn_fail(c, -errno);
}

/* Send what is queued until the socket is full. */
static void conn_flush(struct ipc_conn *c)
{
	while (c->out_head && !c->closed) {
		struct ipc_out *o = c->out_head;
		int r = ipc_channel_send(c->fd, o->data, o->len, o->fds, o->nfds, MSG_DONTWAIT);

		if (r == -EAGAIN) {
			conn_want_out(c, true);
			return;
		}
		if (r < 0) {
			ipc_conn_fail(c, r);
			return;
		}
		ipc_conn_pop_sent(c);
	}
	if (!c->closed)
		conn_want_out(c, false);
}

static void epoll_conn_kick(struct ipc_conn *c)
{
	conn_flush(c);
}

static void epoll_conn_stop(struct ipc_conn *c)
{
	/* As with io_uring: the peer's sends fail from now on, the owner may say a last word. */
	(void)shutdown(c->fd, SHUT_RD);
	(void)epoll_ctl(c->obj.loop->epfd, EPOLL_CTL_DEL, c->fd, NULL);
}

static void conn_event(struct ipc_conn *c, uint32_t events)
{
	if (events & EPOLLOUT)
		conn_flush(c);
	for (unsigned i = 0; i < RECV_BATCH && !c->closed; i++) {
		int fds[IPC_FDS_MAX];
		unsigned nfds;
		ssize_t n = ipc_channel_recv(c->fd, c->rbuf, IPC_MSG_MAX, fds, &nfds, MSG_DONTWAIT);

		if (n == -EAGAIN)
			break;
		if (n <= 0) {
			ipc_conn_fail(c, (int)n);
			break;
		}
		ipc_conn_deliver(c, n, fds, nfds);
	}
}

/* ---- watches ---- */

static int epoll_watch_start(struct ipc_watch *w)
{
	return ctl(w->obj.loop, EPOLL_CTL_ADD, w->fd, w->events, &w->obj);
}

static void epoll_watch_stop(struct ipc_watch *w)
{
	(void)epoll_ctl(w->obj.loop->epfd, EPOLL_CTL_DEL, w->fd, NULL);
}

/* ---- listeners ---- */

static int epoll_listener_start(struct ipc_listener *li)
{
	int fl = fcntl(li->fd, F_GETFL);

	if (fl < 0 || fcntl(li->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	if (li->armed)
		return 0;
	li->armed = true;
	return ctl(li->obj.loop, EPOLL_CTL_ADD, li->fd, EPOLLIN, &li->obj);
}

static void epoll_listener_stop(struct ipc_listener *li)
{
	if (!li->armed)
		return;
	li->armed = false;
	(void)epoll_ctl(li->obj.loop->epfd, EPOLL_CTL_DEL, li->fd, NULL);
}

static void listener_event(struct ipc_listener *li)
{
	for (unsigned i = 0; i < ACCEPT_BATCH && !li->obj.dead && li->armed; i++) {
		int fd = accept4(li->fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (!ipc_listener_accepted(li, fd < 0 ? -errno : fd))
			return;
	}
}

/* ---- the loop ---- */

static int epoll_wait_dispatch(struct ipc_loop *l, int64_t timeout_ns)
{
	struct epoll_event ev[EVENTS_MAX];
	int timeout_ms = -1, n;

	if (timeout_ns >= 0) {
		int64_t ms = (timeout_ns + (int64_t)NSEC_PER_MSEC - 1) / (int64_t)NSEC_PER_MSEC;
		timeout_ms = ms > INT32_MAX ? INT32_MAX : (int)ms;
	}
	n = epoll_wait(l->epfd, ev, EVENTS_MAX, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;

	for (int i = 0; i < n; i++) {
		struct ipc_obj *o = ev[i].data.ptr;

		/* Freed by an earlier callback of this round: still allocated, never called. */
		if (o->dead)
			continue;
		switch (o->type) {
		case OBJ_CONN: {
			struct ipc_conn *c = (struct ipc_conn *)o;
			if (!c->closed)
				conn_event(c, ev[i].events);
			break;
		}
		case OBJ_WATCH: {
			struct ipc_watch *w = (struct ipc_watch *)o;
			w->fn(w, w->fd, ev[i].events, w->userdata);
			break;
		}
		case OBJ_LISTENER:
			listener_event((struct ipc_listener *)o);
			break;
		}
	}
	return n;
}

const struct ipc_loop_ops ipc_loop_epoll_ops = {
	.name = "epoll",
	.init = epoll_init,
	.done = epoll_done,
	.wait = epoll_wait_dispatch,
	.watch_start = epoll_watch_start,
	.watch_stop = epoll_watch_stop,
	.conn_start = epoll_conn_start,
	.conn_kick = epoll_conn_kick,
	.conn_stop = epoll_conn_stop,
	.listener_start = epoll_listener_start,
	.listener_stop = epoll_listener_stop,
};
