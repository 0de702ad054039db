/* SPDX-License-Identifier: MIT */
/* worker/core/queue.c: queues and stream slots: order within a queue, turns between queues, batches. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "wrk.h"

/*
 * A client's queue keeps its requests in order until they can start; each queue is bound to
 * a slot (a stream of the device), whose requests run in the order they were handed over.
 * A request moves from its queue to its slot when its module is built and the slot has room
 * (WRK_SLOT_DEPTH); once a slot is full, queues with more work wait in a line and are let in
 * by turns of WRK_QUEUE_TURN requests as room comes back. What moved into the slots during
 * a round of the loop is handed to the back end at the end of the round, one batch per slot,
 * which it may launch as one (a CUDA graph).
 */

/* How much of a failed build's log each request that needed it gets. */
#define FAILED_LOG_MAX 2048

static struct wrk_queue *queue_new(struct wrk_client *c, uint32_t id)
{
	struct wrk *w = c->w;
	struct wrk_queue *q = calloc(1, sizeof(*q));
	unsigned best = 0;

	if (!q)
		return NULL;
	/* The slot with the fewest queues, so that queues of different clients overlap. */
	for (unsigned i = 1; i < w->nslots; i++)
		if (w->slots[i].queues < w->slots[best].queues)
			best = i;
	q->id = id;
	q->slot = best;
	q->client = c;
	q->refs = 1;
	if (ipc_map_put(&c->queues, id, q) < 0) {
		free(q);
		return NULL;
	}
	w->slots[best].queues++;
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
	wrk_reply(c, msg->hdr.id, st, st == GPUX_E_QUOTA ? "too many queues" : NULL);
	return 0;
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
}

/* Hand what moved into the slot since the last time to the back end, as one batch. */
static void slot_hand_over(struct wrk *w, unsigned slot)
{
	struct wrk_slot *s = &w->slots[slot];
	struct wrk_req *first = s->unlaunched;
	unsigned n = s->nunlaunched;

	if (!n)
		return;
	s->unlaunched = NULL;
	s->nunlaunched = 0;
	w->be->launch(w->dev, slot, first, n);
}

/* ---- from queue to slot ---- */

enum take_stop {
	TAKE_EMPTY,    /* nothing left */
	TAKE_BUILDING, /* the next one waits for its module */
	TAKE_FULL,     /* the slot has no room, or the turn is over */
};

/* Move up to `max` of the queue's requests into its slot, failing those that cannot run. */
static enum take_stop queue_take(struct wrk_queue *q, unsigned max)
{
	struct wrk *w = q->client->w;
	struct wrk_slot *s = &w->slots[q->slot];
	struct wrk_req *r;
	unsigned n = 0;

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
		if (n == max || s->inflight >= WRK_SLOT_DEPTH)
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
		/* A round of many clients takes a while: a full batch need not wait for its end. */
		if (s->nunlaunched == WRK_BATCH_MAX)
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
	while (s->wait_head && s->inflight < WRK_SLOT_DEPTH) {
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

void wrk_slots_flush(struct wrk *w)
{
	for (unsigned i = 0; i < w->nslots; i++) {
		slot_serve(w, &w->slots[i]);
		slot_hand_over(w, i);
	}
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
