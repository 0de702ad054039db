/* SPDX-License-Identifier: MIT */
/* worker/core/server.c: the worker's loop: its control socket from gpuxd, client channels, completions. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/signalfd.h>

#include "channel.h"
#include "macro.h"
#include "wrk.h"

/* How long a worker that must exit keeps sending what it owes its clients. */
#define FLUSH_NS (200 * NSEC_PER_MSEC)
/* Records taken from one client's ring at a time, for fairness between clients; fewer from
 * clients below an active latency-critical one, so that its urgent turns come sooner. */
#define RING_TAKE_MAX 64u
#define RING_TAKE_URGENT 16u

/*
 * Forget a client: its conn, segments, modules and queues. Of its requests handed to the
 * back end, those running finish; the others are not started (wrk_req_cancelled()).
 */
void wrk_client_drop(struct wrk_client *c)
{
	struct wrk *w = c->w;
	struct wrk_modref *ref;

	if (c->gone)
		return;
	c->gone = true;
	atomic_store(&c->dropped, true);
	ipc_conn_free(c->conn);
	c->conn = NULL;
	if (c->rings)
		(void)munmap(c->rings, IPC_RINGS_BYTES);
	c->rings = NULL;
	if (c->prev)
		c->prev->next = c->next;
	else
		w->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->spare)
		w->nspares--;
	else
		w->nclients--;
	wrk_active_leave(&w->active, &c->act);

	wrk_queues_free(c);
	wrk_segments_free(c);
	wrk_dbufs_free(c);
	while ((ref = ipc_map_pop(&c->mods))) {
		wrk_module_unref(w, ref->mod);
		free(ref);
	}
	ipc_map_done(&c->mods);
	wrk_client_row_put(c);
	wrk_status_publish(w);
	wrk_client_unref(c);
}

/*
 * Drop a client that broke the protocol, telling it why first: a DONE without an id, as the
 * channel's last message (what is still queued is dropped with the channel). It goes on the
 * ring, which the client reads once more when the channel ends, and on the socket, at once,
 * unless that is shut already (a receive that failed shuts it). The client then knows that
 * the worker lives, and asks gpuxd for a new channel.
 */
void wrk_client_refuse(struct wrk_client *c, const char *why)
{
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_done d = { .status = GPUX_E_PROTO };
	int n;

	if (c->gone)
		return;
	wrk_log_client(c->w, c->uid, "client %llu (pid %u uid %u): %s; dropped",
		       (unsigned long long)c->id, c->pid, c->uid, why);
	n = ipc_encode_done(buf, sizeof(buf), 0, &d, why);
	if (n > 0) {
		if (c->rings_used && !c->ring_bad)
			(void)ipc_ring_put(&c->down, buf, (uint32_t)n, c->sock_out);
		(void)ipc_channel_send(ipc_conn_fd(c->conn), buf, (size_t)n, NULL, 0, MSG_DONTWAIT);
	}
	wrk_client_drop(c);
}

/*
 * A message that could not be taken: it does not decode (-EBADMSG), has no business on a
 * channel (`stray`), or the worker lacked memory for it. A request (a message with an id) is
 * answered with why, and the client stays. One that nobody waits an answer for cannot be
 * tied to anything the client will ask about later: the client is dropped.
 */
static void client_refuse(struct wrk_client *c, const struct ipc_msg *msg, int err, bool stray)
{
	const char *type = ipc_type_name(msg->hdr.type);
	const char *what = msg->hdr.type == IPC_SUBMIT ? ipc_submit_refusal(msg) : NULL;
	_cleanup_(freep) char *text = NULL;

	if (stray)
		text = wrk_strdup_printf("a %s message is not for a worker", type);
	else if (err != -EBADMSG)
		text = wrk_strdup_printf("%s message: %s", type, strerror(-err));
	else
		text = wrk_strdup_printf("malformed %s message%s%s", type, what ? ": " : "",
					 what ? what : "");
	if (msg->hdr.id != 0)
		wrk_reply(c, msg->hdr.id, wrk_status_from_errno(err, GPUX_E_INVAL),
			  text ? text : "refused");
	else
		wrk_client_refuse(c, text ? text : "refused");
}

/*
 * While gpuxd stops, what would start new work is answered GPUX_E_STOPPING; what frees or
 * adds no work (drops, closes, segments, kicks) goes on as usual. True when refused.
 */
static bool refuse_new_work(struct wrk_client *c, const struct ipc_msg *msg)
{
	struct wrk *w = c->w;
	uint16_t t = msg->hdr.type;

	if (!w->draining || (t != IPC_SUBMIT && t != IPC_COPY && t != IPC_MOD_LOAD &&
			     t != IPC_QUEUE_OPEN && t != IPC_DBUF_ALLOC && t != IPC_DBUF_HOST))
		return false;
	if (t == IPC_SUBMIT || t == IPC_COPY)
		wrk_count_finished(w, GPUX_E_STOPPING);
	wrk_reply(c, msg->hdr.id, GPUX_E_STOPPING, "it finishes what it has and takes no new work");
	return true;
}

/*
 * A message from a client, by its socket or its ring. Each handler answers what it refuses
 * itself; a negative return means the message could not be read at all.
 */
static void client_msg(struct wrk_client *c, struct ipc_msg *msg)
{
	struct ipc_seg_drop sd;
	struct ipc_mod_drop md;
	int r = 0;

	if (c->w->fatal)
		return;
	/* Whatever it is, the counters may change: the page is written before the loop sleeps. */
	c->w->status_dirty = true;
	if (refuse_new_work(c, msg))
		return;
	switch (msg->hdr.type) {
	case IPC_SEG_ADD:
		r = wrk_segment_add(c, msg);
		break;
	case IPC_SEG_DROP:
		r = ipc_decode_seg_drop(msg, &sd);
		if (r == 0)
			wrk_segment_drop(c, sd.seg_id);
		break;
	case IPC_MOD_LOAD:
		r = wrk_module_load(c, msg);
		break;
	case IPC_MOD_DROP:
		r = ipc_decode_mod_drop(msg, &md);
		if (r == 0)
			wrk_module_drop(c, md.mod_id);
		break;
	case IPC_QUEUE_OPEN:
	case IPC_QUEUE_CLOSE:
		r = wrk_queue_msg(c, msg);
		break;
	case IPC_QUEUE_CONFIG:
		r = wrk_queue_config(c, msg);
		break;
	case IPC_SUBMIT:
		r = wrk_submit(c, msg);
		break;
	case IPC_DBUF_ALLOC:
	case IPC_DBUF_HOST:
	case IPC_DBUF_FREE:
		r = wrk_dbuf_msg(c, msg);
		break;
	case IPC_COPY:
		r = wrk_copy(c, msg);
		break;
	case IPC_KERNEL_ATTRS_REQ:
	case IPC_GLOBAL_REQ:
		r = wrk_symbol_msg(c, msg);
		break;
	case IPC_KICK:
		/* Its ring was looked at before this message was taken. */
		r = ipc_decode_kick(msg);
		c->rings_used = c->rings != NULL;
		break;
	default:
		client_refuse(c, msg, -EBADMSG, true);
		return;
	}
	if (r < 0)
		client_refuse(c, msg, r, false);
}

/*
 * Take what the client's ring holds that was sent after fewer than `seq_ok` socket messages:
 * up to `max` records (the loop comes back for the rest), or, with `all`, every record
 * published by now (all those stamped seq_ok or less, since they were published before the
 * socket message that made seq_ok). Returns how many.
 */
static unsigned ring_take(struct wrk_client *c, uint32_t seq_ok, bool all, unsigned max)
{
	static uint8_t buf[IPC_RING_REC_MAX];
	uint32_t mark = c->rings ? ipc_ring_published(&c->up) : 0;
	unsigned n = 0;

	while (c->rings && !c->gone && (all ? ipc_ring_before(&c->up, mark) : n < max)) {
		struct ipc_msg msg;
		int len = ipc_ring_get(&c->up, buf, sizeof(buf), seq_ok);

		if (len == 0)
			break;
		n++;
		c->rings_used = true;
		if (len < 0 || ipc_msg_parse(buf, (size_t)len, NULL, 0, &msg) < 0) {
			wrk_client_refuse(c, "its shared ring is corrupt");
			break;
		}
		client_msg(c, &msg);
	}
	return n;
}

static void on_client_msg(struct ipc_conn *conn, struct ipc_msg *msg, void *userdata)
{
	struct wrk_client *c = userdata;

	c->w->stats.socket_msgs++;
	/* A kick, or a message with fds: the client is at work. */
	wrk_active_touch(&c->w->active, &c->act);

	/* Records sent before this message come first, all of them. */
	c->refs++;
	(void)ring_take(c, c->sock_in, true, 0);
	c->sock_in++;
	if (!c->gone)
		client_msg(c, msg);
	wrk_client_unref(c);
}

static void client_kick(struct wrk_client *c)
{
	c->w->stats.kicks_sent++;
	if (ipc_conn_send(c->conn, &ipc_kick, sizeof(ipc_kick), NULL, 0) == 0)
		c->sock_out++;
}

void wrk_client_wake(struct wrk_client *c)
{
	if (!c->gone && c->rings_used && !c->ring_bad && !atomic_load(&c->down.ctl->polling))
		client_kick(c);
}

void wrk_client_send(struct wrk_client *c, const void *buf, size_t len)
{
	int r;

	if (c->gone)
		return;
	/* An answer: the client will most likely answer back soon. */
	wrk_active_touch(&c->w->active, &c->act);
	if (c->rings_used && !c->ring_bad) {
		r = ipc_ring_put(&c->down, buf, (uint32_t)len, c->sock_out);
		if (r == 1)
			client_kick(c);
		if (r >= 0)
			return;
		/* The client broke its ring: dropped at the loop's next look (poll_work()), not
		 * here, in the middle of what its callers are doing. */
		if (r == -EPROTO)
			c->ring_bad = true;
	}
	if (ipc_conn_send(c->conn, buf, len, NULL, 0) == 0)
		c->sock_out++;
}

/* Give a new client its rings; without them (out of memory) it uses the socket alone. */
static void client_rings(struct wrk_client *c)
{
	static uint8_t buf[64];
	struct ipc_rings_offer o = { .size = IPC_RINGS_BYTES };
	int fd, n;

	if (ipc_rings_create(&fd, &c->rings) < 0)
		return;
	ipc_ring_init(&c->up, c->rings, IPC_RING_UP);
	ipc_ring_init(&c->down, c->rings, IPC_RING_DOWN);
	c->act.up = &c->up;
	n = ipc_encode_rings(buf, sizeof(buf), 0, &o);
	if (n < 0 || ipc_conn_send(c->conn, buf, (size_t)n, &fd, 1) < 0) {
		(void)munmap(c->rings, IPC_RINGS_BYTES);
		c->rings = NULL;
		c->act.up = NULL;
	} else {
		c->sock_out++;
	}
	(void)safe_close(fd);
}

static void on_client_close(struct ipc_conn *conn, int error, void *userdata)
{
	struct wrk_client *c = userdata;
	char why[128];

	/* A client that went away hears nothing; one whose message could not be read, or
	 * that did not read its own, is told why. */
	if (error < 0 && error != -ECONNRESET && error != -EPIPE) {
		(void)snprintf(why, sizeof(why), "its channel failed: %s", strerror(-error));
		wrk_client_refuse(c, why);
		return;
	}
	wrk_client_drop(c);
}

static void client_attach(struct wrk *w, const struct ipc_attach *a, int fd)
{
	struct wrk_client *c;
	int r;

	/* A client that asked gpuxd for a new channel has one channel here, not two. */
	for (c = w->clients; c; c = c->next)
		if (c->id == a->client_id) {
			wrk_client_drop(c);
			break;
		}
	if (w->nclients + w->nspares >= IPC_WORKER_CLIENTS_MAX || w->stopping || w->draining) {
		(void)safe_close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		(void)safe_close(fd);
		return;
	}
	c->refs = 1;
	c->w = w;
	c->marks_page = WRK_NO_MARKS;
	c->id = a->client_id;
	c->uid = a->uid;
	c->gid = a->gid;
	c->pid = a->pid;
	c->prio_max = a->prio_max;
	c->prio_default = c->dq_prio = a->prio_default;
	c->act.level = wrk_prio_level(a->prio_default);
	c->spare = a->flags & IPC_ATTACH_SPARE;
	r = ipc_conn_new_take_fd(w->loop, fd, on_client_msg, on_client_close, c, &c->conn);
	if (r < 0) {
		free(c);
		return;
	}
	c->next = w->clients;
	if (w->clients)
		w->clients->prev = c;
	w->clients = c;
	/* A spare is nobody's yet: not among the clients, the active ones or gpux top's rows
	 * (its adoption puts it there). */
	if (c->spare) {
		w->nspares++;
	} else {
		w->nclients++;
		wrk_client_row_take(c);
	}
	client_rings(c);
	wrk_marks_give(c);
	wrk_status_publish(w);
}

/*
 * A client attached ahead, for a forked child, is the child's now: its pid, for the log; it
 * counts among the clients, has a row in gpux top's table, and is active (its first request
 * comes soon: while the loop spins its ring's word is up, and that request needs no kick).
 */
static void client_adopt(struct wrk *w, const struct ipc_adopt *a)
{
	for (struct wrk_client *c = w->clients; c; c = c->next)
		if (c->id == a->client_id && !c->gone) {
			c->pid = a->pid;
			if (c->spare) {
				c->spare = false;
				w->nspares--;
				w->nclients++;
				wrk_client_row_take(c);
				wrk_status_publish(w);
			}
			wrk_active_touch(&w->active, &c->act);
			return;
		}
}

static void on_control_msg(struct ipc_conn *conn, struct ipc_msg *msg, void *userdata)
{
	struct wrk *w = userdata;
	struct ipc_attach a;
	struct ipc_adopt ad;

	if (msg->hdr.type == IPC_ATTACH && ipc_decode_attach(msg, &a) == 0) {
		client_attach(w, &a, ipc_msg_take_fd(msg, 0));
		return;
	}
	if (msg->hdr.type == IPC_ADOPT && ipc_decode_adopt(msg, &ad) == 0) {
		client_adopt(w, &ad);
		return;
	}
	if (msg->hdr.type == IPC_DRAIN && ipc_decode_drain(msg) == 0) {
		if (!w->draining)
			wrk_log(w, "draining: %llu request%s to finish, no new ones taken",
				(unsigned long long)w->stats.inflight,
				w->stats.inflight == 1 ? "" : "s");
		w->draining = true;
		ipc_status_write_begin(w->status);
		w->status->draining = 1;
		ipc_status_write_end(w->status);
		return;
	}
	wrk_log(w, "gpuxd sent a bad %s message", ipc_type_name(msg->hdr.type));
}

static void on_control_close(struct ipc_conn *conn, int error, void *userdata)
{
	struct wrk *w = userdata;

	/* gpuxd is gone: nobody can reach us any more. */
	w->stopping = true;
	ipc_loop_exit(w->loop, WRK_EXIT_OK);
}

static void take_done(struct wrk *w)
{
	wrk_drain_done(w);
	if (w->fatal && !w->stopping) {
		struct ipc_fault f;

		/* The drain's answers may have let a request start that met the error at once
		 * (one run alone, after the one before it ended): its end, and its blame, first.
		 * Nothing starts once the device is broken, so this drain starts nothing. */
		wrk_drain_done(w);
		wrk_log(w, "sticky device error: failing what is in flight and exiting%s",
			ipc_status_fault_get(w->status, &f) == IPC_FAULT_UNKNOWN
				? " (several requests that may have caused it ran: none is blamed, "
				  "their clients send them again to run alone)"
				: "");
		w->stopping = true;
		w->exit_code = WRK_EXIT_FAULT;
		wrk_fail_all(w, GPUX_E_WORKER_LOST, "the worker hit a sticky device error");
		ipc_loop_exit(w->loop, WRK_EXIT_FAULT);
	}
}

static void on_done(struct ipc_watch *watch, int fd, uint32_t revents, void *userdata)
{
	struct wrk *w = userdata;
	uint64_t v;

	(void)read(fd, &v, sizeof(v));
	take_done(w);
}

static struct wrk_client *client_of(struct wrk_act *a)
{
	return (struct wrk_client *)((char *)a - offsetof(struct wrk_client, act));
}

/*
 * Between two clients of level `level` (or two slots' batches of it): the active clients of
 * the levels above with records waiting are served at once, what they moved into slots is
 * handed over, and the ends of their requests are answered, so that a round busy with lower
 * work holds up none of theirs. A client that joins or changes level meanwhile is found by
 * the round's own pass, or the next round's.
 */
static void urgent_turn(struct wrk *w, unsigned level)
{
	bool found = false;

	if (!wrk_active_above(&w->active, level))
		return;
	for (unsigned l = IPC_PRIO_LEVELS - 1; l > level; l--) {
		struct wrk_act *a = w->active.head[l], *next;

		for (; a; a = next) {
			struct wrk_client *c = client_of(a);

			/* Taking a client's messages may drop that client, never another. */
			next = a->next;
			if (c->ring_bad || !a->up || !ipc_ring_pending(a->up))
				continue;
			c->refs++;
			if (ring_take(c, c->sock_in, false, RING_TAKE_MAX) > 0) {
				a->touched = true;
				found = true;
			}
			wrk_client_unref(c);
		}
	}
	if (found)
		wrk_slots_flush_above(w, (int)level + IPC_PRIO_MIN);
	if (atomic_load(&w->done_urgent))
		wrk_drain_urgent(w);
}

/* Between chunks of other work the loop does at once (completions): an urgent turn of the
 * levels above the default one. */
static void urgent_between(struct wrk *w)
{
	urgent_turn(w, wrk_prio_level(0));
}

/*
 * The rings of the active clients (worker/core/active.h), the highest level first, each
 * level's in turn: what each holds, up to RING_TAKE_MAX records, with an urgent turn of the
 * levels above after each; a client quiet for a while leaves the set, and before the loop
 * sleeps every client with nothing left does. A client that joins meanwhile (the loop
 * answered it) is looked at from the next round. Returns whether any record was taken.
 */
static bool take_active(struct wrk *w, bool sleeping, uint64_t now)
{
	bool found = false;

	w->active.polling = !sleeping && w->spin_ns > 0;
	w->urgent_active = wrk_active_above(&w->active, wrk_prio_level(0));
	for (unsigned l = IPC_PRIO_LEVELS; l-- > 0;) {
		struct wrk_act *a = w->active.head[l];
		unsigned max = wrk_active_above(&w->active, l) ? RING_TAKE_URGENT : RING_TAKE_MAX;

		while (a) {
			/* Taking a client's messages may drop that client, never another; one
			 * that changes level goes to another list, its `next` still to be seen. */
			struct wrk_act *next = a->next;
			struct wrk_client *c = client_of(a);
			unsigned n;

			if (c->ring_bad) {
				wrk_client_refuse(c, "its shared ring is corrupt");
				a = next;
				continue;
			}
			wrk_active_sync(&w->active, a);
			c->refs++;
			n = ring_take(c, c->sock_in, false, max);
			if (!c->gone && sleeping && n == 0)
				(void)wrk_active_rest(&w->active, a, now);
			else if (!c->gone)
				(void)wrk_active_settle(&w->active, a, n > 0, now);
			wrk_client_unref(c);
			found |= n > 0;
			a = next;
			if (n > 0)
				urgent_turn(w, l);
		}
	}
	return found;
}

/*
 * What this round moved into the slots starts now, one batch per slot, the highest priority
 * first, with an urgent turn of the levels above after each batch. Returns whether a batch
 * went, or is left: an urgent turn takes a latency-critical client's records, which may be for
 * one of its queues of a lower priority, whose slot's batch went already. Either way the loop
 * does not sleep now: the back end may hold a lone group for the loop to watch
 * (wrk_backend_ops.poll), and what is left goes next round.
 */
static bool flush_slots(struct wrk *w)
{
	bool any = false;

	for (int p = IPC_PRIO_MAX; p >= IPC_PRIO_MIN; p--)
		for (unsigned i = 0; i < w->nslots; i++)
			if (w->slots[i].prio == p) {
				any |= wrk_slot_flush(w, i);
				urgent_turn(w, wrk_prio_level(p));
			}
	for (unsigned i = 0; i < w->nslots && !any; i++)
		any = w->slots[i].nunlaunched > 0;
	return any;
}

/*
 * After each round of the loop and before it sleeps: the active clients' rings, and
 * completions handed over without a wake-up. While the loop spins, the rings say so (no
 * kicks needed); before it sleeps, they say it no longer does, then are looked at once more.
 */
static bool poll_work(void *userdata, bool sleeping)
{
	struct wrk *w = userdata;
	uint64_t now = mono_ns();
	bool found = take_active(w, sleeping, now);

	/* Before the completions: what it ends is answered this round. */
	if (w->be->poll)
		found |= w->be->poll(w->dev, sleeping);
	if (atomic_load(&w->done_any)) {
		take_done(w);
		found = true;
	}
	found |= flush_slots(w);
	/* Requests that came or were refused this round show at once (gpux status, draining). */
	if (w->status_dirty || w->stats.clients_active != w->active.n) {
		w->status_dirty = false;
		wrk_status_refresh(w);
	}
	/* A request about to end: be there for it, not asleep. */
	found |= w->awake_until && now < w->awake_until;
	if (sleeping && !found)
		w->stats.loop_sleeps++;
	return found;
}

static void on_signal(struct ipc_watch *watch, int fd, uint32_t revents, void *userdata)
{
	struct wrk *w = userdata;
	struct signalfd_siginfo si;

	if (read(fd, &si, sizeof(si)) != (ssize_t)sizeof(si))
		return;
	w->stopping = true;
	ipc_loop_exit(w->loop, WRK_EXIT_OK);
}

int wrk_server_start(struct wrk *w)
{
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_ready ready = { .info = w->info };
	sigset_t mask;
	int r, n;

	w->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->done_fd < 0)
		return -errno;
	r = ipc_watch_new(w->loop, w->done_fd, POLLIN, on_done, w, &w->done_watch);
	if (r < 0)
		return r;
	ipc_loop_set_spin(w->loop, w->spin_ns, poll_work, w);
	w->between = urgent_between;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	w->signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (w->signal_fd < 0)
		return -errno;
	r = ipc_watch_new(w->loop, w->signal_fd, POLLIN, on_signal, w, &w->signal_watch);
	if (r < 0)
		return r;

	r = ipc_conn_new_take_fd(w->loop, TAKE_FD(w->opts.control_fd), on_control_msg,
				 on_control_close, w, &w->control);
	if (r < 0)
		return r;
	n = ipc_encode_ready(buf, sizeof(buf), 0, &ready);
	if (n < 0)
		return n;
	return ipc_conn_send(w->control, buf, (size_t)n, NULL, 0);
}

static bool anything_queued(struct wrk *w)
{
	for (struct wrk_client *c = w->clients; c; c = c->next)
		if (c->conn && ipc_conn_queued(c->conn) > 0)
			return true;
	return false;
}

void wrk_server_stop(struct wrk *w)
{
	uint64_t until = mono_ns() + FLUSH_NS;

	/* The rounds below sleep and never poll: work the loop watched itself goes to the back
	 * end's threads, which answer it as they do the rest. */
	if (w->dev && w->be->poll)
		(void)w->be->poll(w->dev, true);
	/* Send the answers already made, and those the back end is about to make (a fault's
	 * report among them: it ends what its slots hold, after a fault with its error, which is
	 * what a request that ran is told), before the channels go. */
	while ((anything_queued(w) || wrk_slots_busy(w)) && mono_ns() < until)
		(void)ipc_loop_iterate(w->loop, (int64_t)(until - mono_ns()));
	while (w->clients)
		wrk_client_drop(w->clients);
	ipc_conn_free(w->control);
	w->control = NULL;
	ipc_watch_free(w->signal_watch);
	ipc_watch_free(w->done_watch);
	w->signal_fd = safe_close(w->signal_fd);
}
