/* SPDX-License-Identifier: MIT */
/* worker/core/queue.c: queues and stream slots: order within a queue, turns between queues, batches. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "macro.h"
#include "wrk.h"

/*
 * A client's queue keeps its requests in order until they can start; each queue is bound to
 * a slot (a stream of the device), whose requests run in the order they were handed over.
 * A request moves from its queue to its slot when its module is built and the slot has room
 * (WRK_SLOT_DEPTH, or WRK_SLOT_DEPTH_BESIDE_URGENT for slots of priority 0 and below while a
 * latency-critical client is active); once a slot is full, queues with more work wait in a
 * line and are let in by turns of WRK_QUEUE_TURN requests as room comes back. What moved
 * into the slots during a round of the loop is handed to the back end at the end of the
 * round, one batch per slot, which it may launch as one (a CUDA graph).
 *
 * Priorities and compute shares: a queue of a priority other than 0, or with a share, is bound
 * to a slot of its own class (priority, share), made when first needed (a stream of that CUDA
 * priority, in a green context of that share), so that it never waits behind a slot full of
 * other work; queues of one class take turns in it as above. Slots are handed over the highest
 * priority first, and those above 0 at once, request by request: latency-critical work is
 * never held back to be batched. A queue that changes class waits until what it has in its
 * old slot has ended, so that its order holds.
 *
 * A request flagged to run alone (IPC_SUBMIT_ALONE: one that may have broken the last worker's
 * device, sent again by its client) runs with nothing else in flight, so that a fault it makes
 * has one suspect (worker/cuda/cuda-slot.c). Once it is its queue's first and could start, its
 * queue is held (w->alone_next) and no queue moves anything into a slot until every slot is
 * empty; then it goes to the back end as a batch of its own (w->alone), and nothing else
 * starts until it has ended. The gate is here, before any back end, so that each sees only a
 * batch of one, and the way of requests without the flag costs one test more.
 */

/* How much of a failed build's log each request that needed it gets. */
#define FAILED_LOG_MAX 2048

/* Requests in flight that slot s may hold now: fewer while a latency-critical client is
 * active, from the moment it joins the active set (not the round's start). */
static unsigned slot_depth(const struct wrk *w, const struct wrk_slot *s)
{
	return s->prio <= 0 && wrk_active_above(&w->active, wrk_prio_level(0))
		       ? WRK_SLOT_DEPTH_BESIDE_URGENT
		       : WRK_SLOT_DEPTH;
}

/* ---- slots of a priority and share ---- */

/* Open slot w->nslots for st's class; what it got is counted for gpux status. */
static gpux_status slot_open(struct wrk *w, struct wrk_stream *st, char **ret_msg)
{
	unsigned i = w->nslots, lv = wrk_prio_level(st->prio);
	struct ipc_sched *sc = &w->stats.sched;
	gpux_status rc;

	st->dev_prio = IPC_STREAM_PRIO_NONE;
	st->sms = 0;
	rc = w->be->slot_open(w->dev, i, st, ret_msg);
	if (rc < 0)
		return rc;
	w->slots[i] = (struct wrk_slot){ .prio = st->prio, .share = st->share };
	w->nslots++;
	if (st->dev_prio != IPC_STREAM_PRIO_NONE)
		sc->stream_prio[lv] = st->dev_prio;
	if (st->prio != 0 || st->share) {
		sc->share_streams += st->sms != 0;
		sc->prio_streams += st->sms == 0;
	}
	w->nslots_share += st->share != 0;
	if (w->status) {
		ipc_status_write_begin(w->status);
		w->status->nslots = w->nslots;
		ipc_status_write_end(w->status);
	}
	w->status_dirty = true;
	return 0;
}

int wrk_slots_open(struct wrk *w)
{
	unsigned n = w->opts.slots ? w->opts.slots : MIN((unsigned)get_nprocs(), 8u);

	for (unsigned i = 0; i < MAX(n, 1u); i++) {
		struct wrk_stream st = { .prio = 0 };
		char *msg = NULL;
		gpux_status rc = slot_open(w, &st, &msg);

		if (rc < 0) {
			wrk_log(w, "stream %u: %s", i, msg ? msg : ipc_status_text(rc));
			free(msg);
			return -ENODEV;
		}
	}
	w->nslots_default = w->nslots;
	return 0;
}

void wrk_sched_device(struct wrk *w, int32_t least, int32_t greatest, unsigned share_sms,
		      unsigned unit, unsigned min, const char *note)
{
	struct ipc_sched *sc = &w->stats.sched;

	for (unsigned i = 0; i < IPC_PRIO_LEVELS; i++)
		sc->stream_prio[i] = IPC_STREAM_PRIO_NONE;
	sc->stream_prio_least = least;
	sc->stream_prio_greatest = greatest;
	sc->share_sms = share_sms;
	sc->share_unit = share_sms ? unit : 0;
	sc->share_min = share_sms ? min : 0;
	(void)snprintf(sc->share_note, sizeof(sc->share_note), "%s", share_sms ? "" : note);
	w->shares = share_sms > 0;
	if (w->shares)
		wrk_log(w, "compute shares: green contexts of %u SMs, in units of %u (%u at least)",
			share_sms, unit, min);
	else
		wrk_log(w, "no compute shares here: %s; queues' shares are ignored", note);
}

/*
 * The least used of the default slots (priority 0, no share): queues of different clients
 * overlap.
 */
static unsigned slot_default(const struct wrk *w)
{
	unsigned best = 0;

	for (unsigned i = 1; i < w->nslots_default; i++)
		if (w->slots[i].queues < w->slots[best].queues)
			best = i;
	return best;
}

/*
 * A share of `percent` of the device's SMs, in SMs: rounded up to the back end's unit and at
 * least its smallest; 0 where it makes no shares, or for every SM. Shares that round alike
 * are one class: a client cannot make more of them than the device has groups of SMs.
 */
static unsigned share_sms(const struct wrk *w, unsigned percent)
{
	const struct ipc_sched *sc = &w->stats.sched;
	uint64_t sms;

	if (!w->shares || !percent)
		return 0;
	sms = ((uint64_t)percent * sc->share_sms + IPC_SHARE_MAX - 1) / IPC_SHARE_MAX;
	sms = (sms + sc->share_unit - 1) / sc->share_unit * sc->share_unit;
	sms = MAX(sms, (uint64_t)sc->share_min);
	return sms < sc->share_sms ? (unsigned)sms : 0;
}

/*
 * The slot for a queue of priority `prio` and a share of `percent`: its class's, made if need
 * be. Where none can be made (WRK_CLASS_SLOTS_MAX, WRK_SHARE_SLOTS_MAX, the worker's 64
 * streams, or the back end failed: logged once), a slot of the same priority, else a default
 * one.
 */
static unsigned slot_pick(struct wrk *w, int prio, unsigned percent)
{
	struct wrk_stream st = { .prio = prio, .share = share_sms(w, percent) };
	unsigned same_prio = UINT32_MAX;
	char *msg = NULL;
	gpux_status rc;

	if (st.prio == 0 && st.share == 0)
		return slot_default(w);
	for (unsigned i = w->nslots_default; i < w->nslots; i++) {
		if (w->slots[i].prio != st.prio)
			continue;
		if (w->slots[i].share == st.share)
			return i;
		same_prio = i;
	}
	if (w->nslots < WRK_SLOTS_MAX && w->nslots - w->nslots_default < WRK_CLASS_SLOTS_MAX &&
	    (!st.share || w->nslots_share < WRK_SHARE_SLOTS_MAX)) {
		rc = slot_open(w, &st, &msg);
		if (rc == 0)
			return w->nslots - 1;
		if (!w->class_refused)
			wrk_log(w,
				"a stream of priority %d and a share of %u SMs: %s; such queues "
				"share other streams",
				st.prio, st.share, msg ? msg : ipc_status_text(rc));
		free(msg);
	} else if (!w->class_refused) {
		wrk_log(w,
			"no room for a stream of priority %d and a share of %u SMs (%u streams): "
			"such queues share other streams",
			st.prio, st.share, w->nslots);
	}
	w->class_refused = true;
	return same_prio != UINT32_MAX ? same_prio : slot_default(w);
}

/* The client's level among the active clients: its highest priority, the default queue's too. */
static void client_level(struct wrk_client *c)
{
	int prio = c->dq_prio;
	struct wrk_queue *q;
	size_t it = 0;

	while (ipc_map_next(&c->queues, &it, NULL, (void **)&q))
		prio = MAX(prio, q->prio);
	wrk_active_set_level(&c->w->active, &c->act, wrk_prio_level(prio));
}

static struct wrk_queue *queue_new(struct wrk_client *c, uint32_t id)
{
	struct wrk *w = c->w;
	struct wrk_queue *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->id = id;
	q->prio = id ? c->prio_default : c->dq_prio;
	q->share = id ? 0 : c->dq_share;
	q->slot = slot_pick(w, q->prio, q->share);
	q->client = c;
	q->refs = 1;
	if (ipc_map_put(&c->queues, id, q) < 0) {
		free(q);
		return NULL;
	}
	w->slots[q->slot].queues++;
	return q;
}

void wrk_queue_unref(struct wrk_queue *q)
{
	if (!q || --q->refs > 0)
		return;
	assert(!q->waiting);
	q->client->w->slots[q->slot].queues--;
	free(q);
}

/* Step out of the slot's line (the queue closes, or has nothing left to start). */
static void line_leave(struct wrk *w, struct wrk_queue *q)
{
	struct wrk_slot *s = &w->slots[q->slot];
	struct wrk_queue **p = &s->wait_head, *prev = NULL;

	if (!q->waiting)
		return;
	while (*p != q) {
		prev = *p;
		p = &(*p)->wait_next;
	}
	*p = q->wait_next;
	if (s->wait_tail == q)
		s->wait_tail = prev;
	q->wait_next = NULL;
	q->waiting = false;
}

static void line_join(struct wrk *w, struct wrk_queue *q)
{
	struct wrk_slot *s = &w->slots[q->slot];

	if (q->waiting)
		return;
	w->stats.slot_waits++;
	q->waiting = true;
	q->wait_next = NULL;
	if (s->wait_tail)
		s->wait_tail->wait_next = q;
	else
		s->wait_head = q;
	s->wait_tail = q;
}

/* Answer what a queue holds and has not started: it will never run. */
static void queue_fail_pending(struct wrk_queue *q, gpux_status status, const char *why)
{
	struct wrk_req *r;

	line_leave(q->client->w, q);
	while ((r = q->pending_head)) {
		q->pending_head = r->next;
		wrk_req_fail(r, status, why ? strdup(why) : NULL);
	}
	q->pending_tail = NULL;
}

void wrk_queues_free(struct wrk_client *c)
{
	struct wrk_queue *q;

	while ((q = ipc_map_pop(&c->queues))) {
		struct wrk_req *r;

		line_leave(c->w, q);
		/* Requests not started yet are dropped without an answer: nobody listens. */
		while ((r = q->pending_head)) {
			q->pending_head = r->next;
			r->next = NULL;
			wrk_req_discard(r);
		}
		q->pending_tail = NULL;
		wrk_queue_unref(q);
	}
	ipc_map_done(&c->queues);
}

/* QUEUE_OPEN and QUEUE_CLOSE. Queue 0, the default, exists without being opened. */
int wrk_queue_msg(struct wrk_client *c, const struct ipc_msg *msg)
{
	struct ipc_queue_msg m;
	struct wrk_queue *q;
	gpux_status st;
	int r = ipc_decode_queue(msg, msg->hdr.type, &m);

	if (r < 0)
		return r;
	q = m.queue ? ipc_map_get(&c->queues, m.queue) : NULL;
	if (msg->hdr.type == IPC_QUEUE_CLOSE) {
		/* Closing what is not open changes nothing. */
		if (!q)
			return 0;
		(void)ipc_map_remove(&c->queues, m.queue);
		/* Nobody would kick what it still holds again. */
		queue_fail_pending(q, GPUX_E_INVAL, "its queue was closed");
		wrk_queue_unref(q);
		client_level(c);
		return 0;
	}
	if (m.queue == 0 || q) {
		wrk_reply(c, msg->hdr.id, GPUX_E_INVAL,
			  m.queue ? "that queue is open already" : "queue 0 is the default queue");
		return 0;
	}
	if (ipc_map_size(&c->queues) >= WRK_CLIENT_QUEUES_MAX)
		st = GPUX_E_QUOTA;
	else
		st = queue_new(c, m.queue) ? GPUX_OK : GPUX_E_NOMEM;
	if (st == GPUX_OK)
		client_level(c);
	wrk_reply(c, msg->hdr.id, st, st == GPUX_E_QUOTA ? "too many queues" : NULL);
	return 0;
}

/* Bind a queue to the slot of its new class. */
static void queue_rebind(struct wrk_queue *q, int prio, unsigned share)
{
	struct wrk *w = q->client->w;
	unsigned slot;

	if (q->prio == prio && q->share == share)
		return;
	slot = slot_pick(w, prio, share);
	q->prio = prio;
	q->share = share;
	if (slot == q->slot)
		return;
	line_leave(w, q);
	w->slots[q->slot].queues--;
	w->slots[slot].queues++;
	q->slot = slot;
	/* What it has in the old slot ends first (wrk_slot_end() kicks it then). */
	q->moving = q->inslot > 0;
	wrk_queue_kick(q);
}

/*
 * QUEUE_CONFIG. A priority above the client's highest (gpuxd --priority) is refused when the
 * client waits for an answer, else lowered to it; a share is taken as asked, and ignored where
 * the back end makes none.
 */
int wrk_queue_config(struct wrk_client *c, const struct ipc_msg *msg)
{
	struct ipc_queue_config m;
	struct wrk_queue *q;
	int prio;
	int r = ipc_decode_queue_config(msg, &m);

	if (r < 0)
		return r;
	q = ipc_map_get(&c->queues, m.queue);
	if (m.queue && !q) {
		_cleanup_(freep) char *why = wrk_strdup_printf("no such queue %u", m.queue);

		wrk_reply(c, msg->hdr.id, GPUX_E_INVAL, why);
		return 0;
	}
	prio = m.flags & IPC_QUEUE_PRIORITY ? m.priority : c->prio_default;
	if (prio > c->prio_max) {
		if (msg->hdr.id) {
			_cleanup_(freep) char *why = wrk_strdup_printf(
				"priority %d is above what gpuxd gives user %u (%d at most)", prio,
				c->uid, c->prio_max);

			wrk_reply(c, msg->hdr.id, GPUX_E_PERM, why);
			return 0;
		}
		prio = c->prio_max;
	}
	if (m.queue == 0) {
		c->dq_prio = prio;
		c->dq_share = m.share;
	}
	if (q)
		queue_rebind(q, prio, m.share);
	client_level(c);
	wrk_reply(c, msg->hdr.id, GPUX_OK, NULL);
	return 0;
}

/* ---- requests that run alone ---- */

bool wrk_slots_busy(const struct wrk *w)
{
	for (unsigned i = 0; i < w->nslots; i++)
		if (w->slots[i].inflight)
			return true;
	return false;
}

/* The held queue is kept, with its client (which the queue names), until it is let go: its
 * client may go meanwhile. */
static void alone_hold(struct wrk *w, struct wrk_queue *q)
{
	w->alone_next = q;
	q->refs++;
	q->client->refs++;
}

static void alone_let_go(struct wrk *w)
{
	struct wrk_queue *q = w->alone_next;
	struct wrk_client *c = q->client;

	w->alone_next = NULL;
	wrk_queue_unref(q);
	wrk_client_unref(c);
}

/*
 * Whether r, q's first, may move into its slot while a request runs alone, waits to, or is r:
 * r waits for the slots to empty, its queue held (then nobody else's starts); every other
 * waits for the one that runs alone to end, or the held queue's to start.
 */
static bool alone_gate(struct wrk *w, struct wrk_queue *q, const struct wrk_req *r)
{
	if (w->alone || (w->alone_next && w->alone_next != q))
		return false;
	if (r->alone && wrk_slots_busy(w)) {
		if (!w->alone_next)
			alone_hold(w, q);
		return false;
	}
	/* The slots are empty for it: q is let go (r, its first, still holds it). */
	if (w->alone_next)
		alone_let_go(w);
	return true;
}

/*
 * r has ended while a request runs alone or waits to: if it was that one, the others may
 * start; once the slots are empty, the held queue goes first. Queues refused meanwhile are
 * kicked again, as after a build.
 */
static void alone_end(struct wrk *w, const struct wrk_req *r)
{
	struct wrk_queue *q = w->alone_next;

	if (w->alone == r)
		w->alone = NULL;
	if (w->alone || (q && wrk_slots_busy(w)))
		return;
	if (q) {
		wrk_queue_kick(q);
		/* It had nothing left to start (closed, its client gone): nobody waits. */
		if (w->alone_next == q && !q->pending_head)
			alone_let_go(w);
	}
	if (!w->alone && !w->alone_next)
		wrk_kick_all(w);
}

/* ---- slots ---- */

/* What the slot runs now, with its deadline, for gpuxd (ipc/status.h). */
static void status_running(struct wrk *w, unsigned slot)
{
	struct wrk_req *r = w->slots[slot].head;
	struct ipc_running *run = &w->status->running[slot];

	ipc_status_write_begin(w->status);
	if (r) {
		run->client_id = r->client ? r->client->id : 0;
		run->req_id = r->id;
		run->started_ns = r->t_start;
		run->deadline_ns = r->t_start + r->timeout_ms * NSEC_PER_MSEC;
	} else {
		memset(run, 0, sizeof(*run));
	}
	ipc_status_write_end(w->status);
}

static void slot_push(struct wrk *w, struct wrk_req *r)
{
	struct wrk_slot *s = &w->slots[r->slot];

	w->stats.sched.launches[wrk_prio_level(s->prio)]++;
	r->queue->inslot++;
	r->next = NULL;
	if (s->tail)
		s->tail->next = r;
	else
		s->head = r;
	s->tail = r;
	if (!s->unlaunched)
		s->unlaunched = r;
	s->nunlaunched++;
	s->inflight++;
	if (s->head == r) {
		r->t_start = mono_ns();
		status_running(w, r->slot);
	}
}

void wrk_slot_end(struct wrk *w, struct wrk_req *r)
{
	struct wrk_slot *s = &w->slots[r->slot];
	struct wrk_req *prev = NULL, *next;

	assert(s->unlaunched != r);
	/* A slot ends in order: r is its first, unless a fault made the back end give up. */
	if (s->head != r)
		for (prev = s->head; prev->next != r; prev = prev->next)
			;
	next = r->next;
	if (prev)
		prev->next = next;
	else
		s->head = next;
	if (s->tail == r)
		s->tail = prev;
	r->next = NULL;
	s->inflight--;
	if (!prev) {
		if (next)
			next->t_start = MAX(r->t_end, next->t_arrive);
		status_running(w, r->slot);
	}
	/* A queue bound to another slot since goes on there once its last one here ended. */
	if (r->queue && --r->queue->inslot == 0 && r->queue->moving) {
		r->queue->moving = false;
		wrk_queue_kick(r->queue);
	}
	if (_unlikely_(w->alone || w->alone_next))
		alone_end(w, r);
}

/* Hand what moved into the slot since the last time to the back end, as one batch; false
 * when there was nothing. */
static bool slot_hand_over(struct wrk *w, unsigned slot)
{
	struct wrk_slot *s = &w->slots[slot];
	struct wrk_req *first = s->unlaunched;
	unsigned n = s->nunlaunched;

	if (!n)
		return false;
	s->unlaunched = NULL;
	s->nunlaunched = 0;
	w->be->launch(w->dev, slot, first, n);
	return true;
}

/* ---- from queue to slot ---- */

enum take_stop {
	TAKE_EMPTY,    /* nothing left */
	TAKE_BUILDING, /* the next one waits for its module */
	TAKE_FULL,     /* the slot has no room, or the turn is over */
	TAKE_HELD,     /* a request runs alone, or waits to: kicked once it may (alone_end()) */
};

/* Move up to `max` of the queue's requests into its slot, failing those that cannot run. */
static enum take_stop queue_take(struct wrk_queue *q, unsigned max)
{
	struct wrk *w = q->client->w;
	struct wrk_slot *s = &w->slots[q->slot];
	struct wrk_req *r;
	unsigned n = 0;

	if (q->moving)
		return TAKE_BUILDING;
	while ((r = q->pending_head)) {
		char *msg = NULL;
		gpux_status rc;
		int segs;

		if ((r->mod && r->mod->state == MOD_BUILDING) || w->fatal)
			return TAKE_BUILDING;
		/* Its segments still being registered: it waits as for a module. */
		segs = wrk_req_segments_ready(r, &rc, &msg);
		if (segs == 0)
			return TAKE_BUILDING;
		if (_unlikely_(r->alone || w->alone || w->alone_next) && !alone_gate(w, q, r))
			return TAKE_HELD;
		if (n == max || s->inflight >= slot_depth(w, s))
			return TAKE_FULL;
		q->pending_head = r->next;
		if (!q->pending_head)
			q->pending_tail = NULL;
		r->next = NULL;
		if (segs < 0) {
			wrk_req_fail(r, rc, msg);
			continue;
		}

		if (r->mod && r->mod->state == MOD_FAILED) {
			/* The start of the log: a thousand failed requests must not carry a
			 * thousand whole logs. */
			wrk_req_fail(r, r->mod->status,
				     r->mod->log ? strndup(r->mod->log, FAILED_LOG_MAX) : NULL);
			continue;
		}
		rc = r->kind == REQ_LAUNCH ? wrk_req_check(r, &msg) : 0;
		if (rc < 0) {
			wrk_req_fail(r, rc, msg);
			continue;
		}
		r->slot = q->slot;
		slot_push(w, r);
		if (_unlikely_(r->alone)) {
			/* A batch of its own, and nothing after it until it ends. */
			w->alone = r;
			slot_hand_over(w, q->slot);
			return TAKE_HELD;
		}
		/* A round of many clients takes a while: a full batch need not wait for its end,
		 * and latency-critical work waits for nothing; while such work is at hand, other
		 * batches are smaller, so that the loop is back for it sooner. */
		if (s->prio > 0 ||
		    s->nunlaunched >= (w->urgent_active ? WRK_BATCH_URGENT : WRK_BATCH_MAX))
			slot_hand_over(w, q->slot);
		n++;
	}
	return TAKE_EMPTY;
}

void wrk_queue_kick(struct wrk_queue *q)
{
	struct wrk *w = q->client->w;

	if (!q->pending_head)
		return;
	/* Behind queues already waiting for room, a queue waits its turn too. */
	if (q->waiting || w->slots[q->slot].wait_head)
		line_join(w, q);
	else if (queue_take(q, UINT32_MAX) == TAKE_FULL)
		line_join(w, q);
}

void wrk_req_queue(struct wrk_client *c, struct wrk_req *r, uint32_t queue_id)
{
	struct wrk_queue *q = ipc_map_get(&c->queues, queue_id);

	if (!q && queue_id == 0)
		q = queue_new(c, 0);
	if (!q) {
		wrk_req_fail(r, GPUX_E_INVAL, wrk_strdup_printf("no such queue %u", queue_id));
		return;
	}
	r->queue = q;
	q->refs++;
	r->next = NULL;
	if (q->pending_tail)
		q->pending_tail->next = r;
	else
		q->pending_head = r;
	q->pending_tail = r;
	wrk_queue_kick(q);
}

void wrk_kick_all(struct wrk *w)
{
	for (struct wrk_client *c = w->clients; c; c = c->next) {
		struct wrk_queue *q;
		size_t it = 0;

		while (ipc_map_next(&c->queues, &it, NULL, (void **)&q))
			wrk_queue_kick(q);
	}
}

/* Turns for the queues in line while the slot has room; one with more to do goes to the back. */
static void slot_serve(struct wrk *w, struct wrk_slot *s)
{
	while (s->wait_head && s->inflight < slot_depth(w, s)) {
		struct wrk_queue *q = s->wait_head;

		s->wait_head = q->wait_next;
		if (!s->wait_head)
			s->wait_tail = NULL;
		q->wait_next = NULL;
		q->waiting = false;
		/* A queue whose module still builds is kicked again when the build ends. */
		if (queue_take(q, WRK_QUEUE_TURN) == TAKE_FULL)
			line_join(w, q);
	}
}

bool wrk_slot_flush(struct wrk *w, unsigned slot)
{
	slot_serve(w, &w->slots[slot]);
	return slot_hand_over(w, slot);
}

void wrk_slots_flush_above(struct wrk *w, int prio)
{
	for (int p = IPC_PRIO_MAX; p > prio; p--)
		for (unsigned i = 0; i < w->nslots; i++)
			if (w->slots[i].prio == p)
				wrk_slot_flush(w, i);
}

void wrk_slots_flush(struct wrk *w)
{
	wrk_slots_flush_above(w, IPC_PRIO_MIN - 1);
}

void wrk_fail_all(struct wrk *w, gpux_status status, const char *why)
{
	for (struct wrk_client *c = w->clients; c; c = c->next) {
		struct wrk_queue *q;
		size_t it = 0;

		while (ipc_map_next(&c->queues, &it, NULL, (void **)&q))
			queue_fail_pending(q, status, why);
	}
}
