/* SPDX-License-Identifier: MIT */
/* ipc/loop.c: the event loop's objects, timers and message delivery, shared by both back ends. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "loop-internal.h"
#include "macro.h"
#include "spin.h"

/* After EMFILE and the like, accept nothing for this long: the failing call would spin. */
#define ACCEPT_PAUSE_NS (100 * NSEC_PER_MSEC)

static int loop_open(struct ipc_loop *l, const struct ipc_loop_ops *ops)
{
	int r;

	l->ops = ops;
	r = ops->init(l);
	if (r < 0)
		l->ops = NULL;
	return r;
}

int ipc_loop_new(enum ipc_loop_kind kind, struct ipc_loop **ret)
{
	return ipc_loop_new_ex(kind, 0, ret);
}

int ipc_loop_new_ex(enum ipc_loop_kind kind, unsigned flags, struct ipc_loop **ret)
{
	struct ipc_loop *l;
	int r;

	if (kind == IPC_LOOP_AUTO) {
		const char *e = getenv("GPUX_LOOP");

		if (e && strcmp(e, "epoll") == 0)
			kind = IPC_LOOP_EPOLL;
		else if (e && strcmp(e, "io_uring") == 0)
			kind = IPC_LOOP_URING;
		else if (e && *e)
			return -EINVAL;
	}

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->epfd = -1;
	l->closing_tail = &l->closing;
	l->sqpoll_wanted = flags & IPC_LOOP_SQPOLL;

	if (kind == IPC_LOOP_EPOLL)
		r = loop_open(l, &ipc_loop_epoll_ops);
	else {
		r = loop_open(l, &ipc_loop_uring_ops);
		if (kind == IPC_LOOP_AUTO && (r == -ENOSYS || r == -EPERM || r == -EINVAL)) {
			l->fallback = r;
			r = loop_open(l, &ipc_loop_epoll_ops);
		}
	}
	if (r < 0) {
		free(l);
		return r;
	}
	*ret = l;
	return 0;
}

static void obj_destroy(struct ipc_obj *o)
{
	switch (o->type) {
	case OBJ_WATCH:
		free(o);
		break;
	case OBJ_CONN: {
		struct ipc_conn *c = (struct ipc_conn *)o;

		while (c->out_head)
			ipc_conn_pop_sent(c);
		(void)safe_close(c->fd);
		free(c->rbuf);
		free(c);
		break;
	}
	case OBJ_LISTENER:
		free(o);
		break;
	}
}

static void bury_dead(struct ipc_loop *l)
{
	while (l->graveyard) {
		struct ipc_obj *o = l->graveyard;

		l->graveyard = o->next_dead;
		obj_destroy(o);
	}
}

static void run_closing(struct ipc_loop *l)
{
	while (l->closing) {
		struct ipc_conn *c = l->closing;

		l->closing = c->next_closing;
		if (!l->closing)
			l->closing_tail = &l->closing;
		if (!c->obj.dead)
			c->on_close(c, c->close_error, c->userdata);
	}
}

void ipc_obj_release(struct ipc_obj *o)
{
	if (!o->dead || o->inflight > 0 || o->buried)
		return;
	o->buried = true;
	o->next_dead = o->loop->graveyard;
	o->loop->graveyard = o;
}

void ipc_loop_free(struct ipc_loop *l)
{
	if (!l)
		return;
	/* Let cancelled operations complete so that their objects can go. */
	if (l->ops && l->ops->done)
		l->ops->done(l);
	bury_dead(l);
	free(l->timers);
	free(l);
}

const char *ipc_loop_name(const struct ipc_loop *l)
{
	return l->ops->name;
}

bool ipc_loop_sqpoll(const struct ipc_loop *l)
{
	return l->sqpoll;
}

int ipc_loop_fallback(const struct ipc_loop *l)
{
	return l->fallback;
}

void ipc_loop_set_spin(struct ipc_loop *l, uint64_t spin_ns, ipc_loop_poll_fn *poll, void *userdata)
{
	l->spin_ns = spin_ns;
	l->poll = poll;
	l->poll_data = userdata;
}

bool ipc_loop_spinning(struct ipc_loop *l)
{
	return atomic_load(&l->spinning);
}

void ipc_loop_exit(struct ipc_loop *l, int code)
{
	l->exit = true;
	l->exit_code = code;
}

static void timer_unlink(struct ipc_timer *t);

/* How many timers of the heap from node i down are due at `now`: those and their children. */
static unsigned timers_due(const struct ipc_loop *l, unsigned i, uint64_t now)
{
	if (i >= l->ntimers || l->timers[i]->when > now)
		return 0;
	return 1 + timers_due(l, 2 * i + 1, now) + timers_due(l, 2 * i + 2, now);
}

static void fire_timers(struct ipc_loop *l)
{
	uint64_t now = mono_ns();
	unsigned due = timers_due(l, 0, now);

	/* Fire at most the timers that were due when this began: one that its callback arms
	 * again for a time already past waits for the next round, instead of running here over
	 * and over while no fd is served. */
	for (; due > 0 && l->ntimers && l->timers[0]->when <= now; due--) {
		struct ipc_timer *t = l->timers[0];

		timer_unlink(t);
		t->fn(t, t->userdata);
	}
}

/* One round; returns how many events were served, or -errno. */
static int loop_turn(struct ipc_loop *l, int64_t timeout_ns)
{
	int r;

	if (l->closing)
		timeout_ns = 0;
	if (l->ntimers) {
		uint64_t now = mono_ns();
		uint64_t when = l->timers[0]->when;
		int64_t until = when > now ? (int64_t)(when - now) : 0;

		if (timeout_ns < 0 || until < timeout_ns)
			timeout_ns = until;
	}
	r = l->ops->wait(l, timeout_ns);
	if (r >= 0)
		fire_timers(l);
	run_closing(l);
	bury_dead(l);
	return r;
}

int ipc_loop_iterate(struct ipc_loop *l, int64_t timeout_ns)
{
	int r = loop_turn(l, timeout_ns);

	return r < 0 ? r : 0;
}

static bool loop_poll(struct ipc_loop *l, bool sleeping)
{
	return l->poll && l->poll(l->poll_data, sleeping);
}

int ipc_loop_run(struct ipc_loop *l)
{
	uint64_t busy_until = 0;

	while (!l->exit) {
		bool spin = l->spin_ns && mono_ns() < busy_until, found = false;
		int r;

		if (!spin) {
			atomic_store(&l->spinning, false);
			/* What was handed over while the flag was up came without a wake-up. */
			found = loop_poll(l, true);
			if (found) {
				busy_until = mono_ns() + l->spin_ns;
				atomic_store(&l->spinning, l->spin_ns > 0);
			}
		}
		/* Found work or not, the fds are served each time round. */
		r = loop_turn(l, spin || found ? 0 : -1);
		if (r < 0) {
			atomic_store(&l->spinning, false);
			return r;
		}
		r += loop_poll(l, false);
		if (r > 0 && l->spin_ns) {
			busy_until = mono_ns() + l->spin_ns;
			atomic_store(&l->spinning, true);
		} else if (spin) {
			cpu_relax();
		}
	}
	atomic_store(&l->spinning, false);
	/* Ready to run again; an exit asked for before running is not lost. */
	l->exit = false;
	return l->exit_code;
}

/* ---- watches ---- */

int ipc_watch_new(struct ipc_loop *l, int fd, uint32_t events, ipc_watch_fn *fn, void *userdata,
		  struct ipc_watch **ret)
{
	struct ipc_watch *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return -ENOMEM;
	w->obj = (struct ipc_obj){ .loop = l, .type = OBJ_WATCH };
	w->fd = fd;
	w->events = events;
	w->fn = fn;
	w->userdata = userdata;
	w->op = (struct uring_op){ .kind = UOP_POLL, .obj = &w->obj };
	r = l->ops->watch_start(w);
	if (r < 0) {
		free(w);
		return r;
	}
	*ret = w;
	return 0;
}

void ipc_watch_free(struct ipc_watch *w)
{
	if (!w || w->obj.dead)
		return;
	w->obj.dead = true;
	w->obj.loop->ops->watch_stop(w);
	ipc_obj_release(&w->obj);
}

/* ---- timers ---- */

/* Armed timers are a binary heap (as sd-event's prioq): arming, disarming and the next
 * deadline cost O(log n) with thousands of clients' timers. */
static bool timer_before(const struct ipc_timer *a, const struct ipc_timer *b)
{
	return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

static void heap_put(struct ipc_loop *l, unsigned i, struct ipc_timer *t)
{
	l->timers[i] = t;
	t->idx = i;
}

static void heap_up(struct ipc_loop *l, unsigned i)
{
	struct ipc_timer *t = l->timers[i];

	while (i > 0 && timer_before(t, l->timers[(i - 1) / 2])) {
		heap_put(l, i, l->timers[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_put(l, i, t);
}

static void heap_down(struct ipc_loop *l, unsigned i)
{
	struct ipc_timer *t = l->timers[i];

	for (;;) {
		unsigned c = 2 * i + 1;

		if (c >= l->ntimers)
			break;
		if (c + 1 < l->ntimers && timer_before(l->timers[c + 1], l->timers[c]))
			c++;
		if (!timer_before(l->timers[c], t))
			break;
		heap_put(l, i, l->timers[c]);
		i = c;
	}
	heap_put(l, i, t);
}

int ipc_timer_new(struct ipc_loop *l, ipc_timer_fn *fn, void *userdata, struct ipc_timer **ret)
{
	struct ipc_timer *t;

	if (l->timers_made == l->timers_room) {
		unsigned room = l->timers_room ? 2 * l->timers_room : 16;
		struct ipc_timer **heap =
			room > l->timers_room ? reallocarray(l->timers, room, sizeof(*heap)) : NULL;

		if (!heap)
			return -ENOMEM;
		l->timers = heap;
		l->timers_room = room;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->loop = l;
	t->fn = fn;
	t->userdata = userdata;
	l->timers_made++;
	*ret = t;
	return 0;
}

static void timer_unlink(struct ipc_timer *t)
{
	struct ipc_loop *l = t->loop;
	struct ipc_timer *last = l->timers[--l->ntimers];

	if (last != t) {
		heap_put(l, t->idx, last);
		heap_up(l, last->idx);
		heap_down(l, last->idx);
	}
	t->when = 0;
}

void ipc_timer_arm(struct ipc_timer *t, uint64_t when_ns)
{
	struct ipc_loop *l = t->loop;

	if (t->when)
		timer_unlink(t);
	if (when_ns == 0)
		return;
	t->when = when_ns;
	t->seq = ++l->timer_seq;
	heap_put(l, l->ntimers++, t);
	heap_up(l, t->idx);
}

uint64_t ipc_timer_when(const struct ipc_timer *t)
{
	return t->when;
}

void ipc_timer_free(struct ipc_timer *t)
{
	if (!t)
		return;
	if (t->when)
		timer_unlink(t);
	t->loop->timers_made--;
	free(t);
}

/* ---- connections ---- */

int ipc_conn_new_take_fd(struct ipc_loop *l, int fd, ipc_conn_msg_fn *on_msg,
			 ipc_conn_close_fn *on_close, void *userdata, struct ipc_conn **ret)
{
	struct ipc_conn *c = calloc(1, sizeof(*c));
	int r;

	if (!c) {
		(void)safe_close(fd);
		return -ENOMEM;
	}
	c->obj = (struct ipc_obj){ .loop = l, .type = OBJ_CONN };
	c->fd = fd;
	c->on_msg = on_msg;
	c->on_close = on_close;
	c->userdata = userdata;
	c->out_fds_max = IPC_CONN_QUEUE_FDS;
	c->recv_op = (struct uring_op){ .kind = UOP_RECV, .obj = &c->obj };
	c->send_op = (struct uring_op){ .kind = UOP_SEND, .obj = &c->obj };
	c->rbuf = malloc(IPC_MSG_MAX);
	if (!c->rbuf) {
		r = -ENOMEM;
		goto err_free;
	}
	r = l->ops->conn_start(c);
	if (r < 0)
		goto err_free;
	*ret = c;
	return 0;

err_free:
	free(c->rbuf);
	free(c);
	(void)safe_close(fd);
	return r;
}

void ipc_conn_pop_sent(struct ipc_conn *c)
{
	struct ipc_out *o = c->out_head;

	c->out_head = o->next;
	if (!c->out_head)
		c->out_tail = NULL;
	c->out_msgs--;
	c->out_bytes -= o->len;
	c->out_fds -= o->nfds;
	for (unsigned i = 0; i < o->nfds; i++)
		(void)safe_close(o->fds[i]);
	free(o);
}

void ipc_conn_fail(struct ipc_conn *c, int error)
{
	struct ipc_loop *l = c->obj.loop;

	if (c->closed)
		return;
	c->closed = true;
	c->close_error = error;
	l->ops->conn_stop(c);
	/* on_close runs from the loop itself, never inside a call such as ipc_conn_send(), so
	 * that it may free what its caller still uses. */
	c->next_closing = NULL;
	*l->closing_tail = c;
	l->closing_tail = &c->next_closing;
}

void ipc_conn_deliver(struct ipc_conn *c, ssize_t n, int *fds, unsigned nfds)
{
	struct ipc_msg msg;
	int r;

	if (c->closed) {
		for (unsigned i = 0; i < nfds; i++)
			(void)safe_close(fds[i]);
		return;
	}
	r = ipc_msg_parse(c->rbuf, (size_t)n, fds, nfds, &msg);
	if (r < 0) {
		for (unsigned i = 0; i < nfds; i++)
			(void)safe_close(fds[i]);
		ipc_conn_fail(c, r);
		return;
	}
	c->on_msg(c, &msg, c->userdata);
	ipc_msg_close_fds(&msg);
}

int ipc_conn_send(struct ipc_conn *c, const void *buf, size_t len, const int *fds, unsigned nfds)
{
	struct ipc_out *o;
	bool idle;
	int r;

	if (c->closed)
		return -EPIPE;
	if (nfds > IPC_FDS_MAX || len > IPC_MSG_MAX)
		return -EINVAL;
	/* Each queued fd is one of this process's: a peer that does not read must not hold
	 * them all. */
	if (c->out_msgs >= IPC_CONN_QUEUE_MSGS || c->out_bytes + len > IPC_CONN_QUEUE_BYTES ||
	    c->out_fds + nfds > c->out_fds_max) {
		ipc_conn_fail(c, -ENOBUFS);
		return -ENOBUFS;
	}
	o = malloc(sizeof(*o) + len);
	if (!o)
		return -ENOMEM;
	r = ipc_fds_dup(fds, nfds, o->fds);
	if (r < 0) {
		free(o);
		return r;
	}
	o->next = NULL;
	o->len = len;
	o->nfds = nfds;
	memcpy(o->data, buf, len);

	idle = c->out_head == NULL;
	if (c->out_tail)
		c->out_tail->next = o;
	else
		c->out_head = o;
	c->out_tail = o;
	c->out_msgs++;
	c->out_bytes += len;
	c->out_fds += o->nfds;
	if (idle)
		c->obj.loop->ops->conn_kick(c);
	return 0;
}

void ipc_conn_free(struct ipc_conn *c)
{
	if (!c || c->obj.dead)
		return;
	c->obj.dead = true;
	if (!c->closed) {
		c->closed = true;
		c->obj.loop->ops->conn_stop(c);
	}
	ipc_obj_release(&c->obj);
}

int ipc_conn_fd(const struct ipc_conn *c)
{
	return c->fd;
}

void *ipc_conn_userdata(const struct ipc_conn *c)
{
	return c->userdata;
}

void ipc_conn_set_userdata(struct ipc_conn *c, void *userdata)
{
	c->userdata = userdata;
}

size_t ipc_conn_queued(const struct ipc_conn *c)
{
	return c->out_msgs;
}

void ipc_conn_set_queue_fds(struct ipc_conn *c, size_t max)
{
	c->out_fds_max = max;
}

/* ---- listeners ---- */

static void listener_resume(struct ipc_timer *t, void *userdata)
{
	struct ipc_listener *li = userdata;

	if (!li->obj.dead)
		(void)li->obj.loop->ops->listener_start(li);
}

int ipc_listener_new(struct ipc_loop *l, int listen_fd, ipc_accept_fn *fn, void *userdata,
		     struct ipc_listener **ret)
{
	struct ipc_listener *li = calloc(1, sizeof(*li));
	int r;

	if (!li)
		return -ENOMEM;
	li->obj = (struct ipc_obj){ .loop = l, .type = OBJ_LISTENER };
	li->fd = listen_fd;
	li->fn = fn;
	li->userdata = userdata;
	li->op = (struct uring_op){ .kind = UOP_ACCEPT, .obj = &li->obj };
	r = ipc_timer_new(l, listener_resume, li, &li->resume);
	if (r < 0)
		goto err_free;
	r = l->ops->listener_start(li);
	if (r < 0)
		goto err_free;
	*ret = li;
	return 0;

err_free:
	ipc_timer_free(li->resume);
	free(li);
	return r;
}

bool ipc_listener_accepted(struct ipc_listener *li, int fd_or_error)
{
	if (li->obj.dead) {
		(void)safe_close(fd_or_error);
		return false;
	}
	if (fd_or_error >= 0) {
		li->fn(li, fd_or_error, li->userdata);
		return !li->obj.dead;
	}
	/* Out of fds or memory: the next accept would fail at once and spin, so pause. A
	 * connection that went away before it was accepted is nothing to pause for. */
	if (fd_or_error == -EMFILE || fd_or_error == -ENFILE || fd_or_error == -ENOBUFS ||
	    fd_or_error == -ENOMEM) {
		li->obj.loop->ops->listener_stop(li);
		ipc_timer_arm(li->resume, mono_ns() + ACCEPT_PAUSE_NS);
		return false;
	}
	return true;
}

void ipc_listener_free(struct ipc_listener *li)
{
	if (!li || li->obj.dead)
		return;
	li->obj.dead = true;
	ipc_timer_free(li->resume);
	li->resume = NULL;
	li->obj.loop->ops->listener_stop(li);
	ipc_obj_release(&li->obj);
}
