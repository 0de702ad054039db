/* SPDX-License-Identifier: MIT */
/* client/replay.c: requests a neighbour's fault took with the worker, sent again to its successor. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "channel.h"
#include "cli.h"
#include "macro.h"
#include "segment.h"

/*
 * When a worker dies for another client's kernel (a fault, a deadline), the requests of ours
 * that it had not begun to carry out run again on the worker that takes its place: only a
 * delay. Which had begun, the worker marked before each irreversible step in a page that we
 * read once it is gone (worker/core/marks.c): a request whose word says nothing never
 * reached the device; LAUNCHED, it was handed to the device and may have run, but its results
 * were not copied back; STARTED, it began to change our memory (in place, or by copying its
 * results back) or it ended. The worker's status page says why it died (ipc/status.h): a
 * kernel fault blamed on one request, a kernel fault blamed on none (several that may have
 * caused it were running), or a deadline. So:
 *
 * - our own request was the culprit: it fails with KERNEL_FAULT (or TIMEOUT), and none of
 *   our others on that worker run again (the faulting client's queue is not replayed);
 * - DONE: it ended well, its results in our memory (the device wrote DONE after its copies
 *   back, or the worker when it saw it end, and died before its answer reached us): GPUX_OK,
 *   whoever's fault it was, unless it is itself the culprit;
 * - STARTED: GPUX_E_WORKER_LOST, as before (a mapped argument, a device buffer, anything
 *   the host back end began: host kernels work on our pages in place);
 * - LAUNCHED: runs again only when the page names another's request as the culprit (never
 *   the culprit itself, which is LAUNCHED too), or names none: then it is a suspect, and is
 *   sent with IPC_SUBMIT_ALONE from then on, so that the next worker runs it with nothing
 *   else on the device, where a fault it makes is blamed on it;
 * - nothing: runs again, as it was sent (it never reached the device: no suspect).
 *
 * Only SUBMITs and COPYs are sent again, as they were sent (kept with the request, a
 * suspect's with the flag added; the objects they name are synced to the new channel first),
 * in the order they were first sent: a suspect of a fault whose culprit is not known at most
 * CLI_REPLAY_MAX times, others each time their worker dies (under
 * a neighbour that faults again, each of whose faults may take two workers, an innocent's
 * request waiting behind the suspects that run alone was lost after two deaths). A request
 * bound to a device waits for its successor, and later requests to that device wait behind
 * it (cli_replay_blocks()); a GPUX_ANY one goes to whichever device is ready. The new id holds a
 * free word of the new channel's marks.
 */

/* ---- the channel's page ---- */

void cli_marks_drop(struct cli_dev *d)
{
	if (d->marks_map)
		(void)munmap(d->marks_map, d->marks_len);
	d->marks_map = NULL;
	d->marks = NULL;
	d->marks_len = 0;
	memset(d->marks_used, 0, sizeof(d->marks_used));
}

static void word_set(struct cli_dev *d, uint32_t id)
{
	uint32_t w = id % IPC_MARKS_PER_CLIENT;

	d->marks_used[w / 64] |= 1ull << (w % 64);
}

static bool word_taken(const struct cli_dev *d, uint32_t id)
{
	uint32_t w = id % IPC_MARKS_PER_CLIENT;

	return d->marks_used[w / 64] >> (w % 64) & 1;
}

void cli_marks_take(gpux_ctx *ctx, uint32_t i, struct ipc_msg *msg)
{
	struct cli_dev *d = &ctx->devs[i];
	struct ipc_marks_offer o;
	uint64_t off, base, page = (uint64_t)sysconf(_SC_PAGESIZE);
	struct gpux_req *r;
	size_t it = 0;
	void *p;
	int fd;

	if (d->marks || ipc_decode_marks(msg, &o) < 0)
		return;
	off = (uint64_t)o.index * IPC_MARKS_PAGE;
	base = off / page * page;
	fd = ipc_msg_take_fd(msg, 0);
	if (ipc_segment_check(fd, off + IPC_MARKS_PAGE, false) < 0) {
		(void)close(fd);
		return;
	}
	d->marks_len = (size_t)ALIGN_UP(off + IPC_MARKS_PAGE - base, page);
	p = mmap(NULL, d->marks_len, PROT_READ, MAP_SHARED, fd, (off_t)base);
	(void)close(fd);
	if (p == MAP_FAILED) {
		d->marks_len = 0;
		return;
	}
	d->marks_map = p;
	d->marks = (const uint32_t *)((uint8_t *)p + (off - base));
	/* Requests sent before the page came hold their words from now on (they are never
	 * sent again: their words were not checked to be theirs). */
	while (ipc_map_next(&ctx->reqs, &it, NULL, (void **)&r))
		if (r->device == i && r->chan_gen == d->chan_gen && !r->internal && !r->pending) {
			word_set(d, r->id);
			r->word = true;
			r->word_gen = d->chan_gen;
		}
}

int cli_req_word_take(gpux_ctx *ctx, struct gpux_req *r, uint32_t device)
{
	struct cli_dev *d = &ctx->devs[device];

	cli_req_word_drop(ctx, r);
	r->marked = false;
	cli_marks_wait(ctx, device);
	if (!d->marks)
		return 0;
	/* Fewer than IPC_MARKS_PER_CLIENT requests are in flight (CLI_INFLIGHT_MAX): one of
	 * the next ids has a free word. */
	while (word_taken(d, r->id)) {
		uint32_t id;

		do
			id = ++ctx->next_req_id & IPC_MARK_ID_MASK;
		while (id == 0 || ipc_map_get(&ctx->reqs, id));
		if (ipc_map_put(&ctx->reqs, id, r) < 0)
			return -ENOMEM;
		(void)ipc_map_remove(&ctx->reqs, r->id);
		r->id = id;
	}
	word_set(d, r->id);
	r->word = true;
	r->word_gen = d->chan_gen;
	r->marked = true;
	return 0;
}

void cli_req_word_drop(gpux_ctx *ctx, struct gpux_req *r)
{
	struct cli_dev *d = &ctx->devs[r->device];
	uint32_t w = r->id % IPC_MARKS_PER_CLIENT;

	if (r->word && r->word_gen == d->chan_gen)
		d->marks_used[w / 64] &= ~(1ull << (w % 64));
	r->word = false;
}

void cli_req_keep(struct gpux_req *r, const void *msg, size_t n)
{
	free(r->wire);
	r->wire = malloc(n);
	r->wire_len = r->wire ? (uint32_t)n : 0;
	if (r->wire)
		memcpy(r->wire, msg, n);
}

/* ---- a channel ended ---- */

void cli_req_unpend(gpux_ctx *ctx, struct gpux_req *r)
{
	struct gpux_req **pp = &ctx->pending;

	if (!r->pending)
		return;
	while (*pp != r)
		pp = &(*pp)->pend_next;
	*pp = r->pend_next;
	r->pend_next = NULL;
	r->pending = false;
}

/* Into ctx->pending, after those first sent before it. */
static void pend(gpux_ctx *ctx, struct gpux_req *r)
{
	struct gpux_req **pp = &ctx->pending;

	while (*pp && (*pp)->seq < r->seq)
		pp = &(*pp)->pend_next;
	r->pend_next = *pp;
	*pp = r;
	r->pending = true;
}

#define lost(r, status, text) (cli_req_finish((r), (status), (text), strlen(text), NULL), false)

/* Ask the next workers to run r (a SUBMIT kept as it was sent) with nothing else in flight. */
static void wire_alone(struct gpux_req *r)
{
	struct ipc_submit m;
	struct ipc_hdr h;

	if (r->wire_len < sizeof(h) + sizeof(m))
		return;
	memcpy(&h, r->wire, sizeof(h));
	if (h.type != IPC_SUBMIT)
		return;
	memcpy(&m, r->wire + sizeof(h), sizeof(m));
	m.flags |= IPC_SUBMIT_ALONE;
	memcpy(r->wire + sizeof(h), &m, sizeof(m));
}

bool cli_req_lost(gpux_ctx *ctx, struct gpux_req *r)
{
	struct cli_dev *d = &ctx->devs[r->device];
	struct ipc_fault f = { 0 };
	/* Its word, when it holds one of this page (0: none). */
	uint32_t word =
		r->marked && d->marks
			? __atomic_load_n(&d->marks[r->id % IPC_MARKS_PER_CLIENT], __ATOMIC_ACQUIRE)
			: 0;
	bool culprit_ours;

	if (d->status)
		(void)ipc_status_fault_get(d->status, &f);
	culprit_ours = (f.cause == IPC_FAULT_KERNEL || f.cause == IPC_FAULT_DEADLINE) &&
		       f.client_id == ctx->client_id;
	if (word == IPC_MARK(r->id, IPC_MARK_DONE) && !(culprit_ours && r->id == f.req_id)) {
		cli_req_finish(r, GPUX_OK, NULL, 0, NULL);
		return false;
	}
	if (culprit_ours) {
		if (r->id == f.req_id && f.cause == IPC_FAULT_KERNEL)
			return lost(
				r, GPUX_E_KERNEL_FAULT,
				"the kernel broke the device; its worker died before it said more");
		if (r->id == f.req_id)
			return lost(r, GPUX_E_TIMEOUT, "the request ran past its deadline");
		return lost(r, GPUX_E_WORKER_LOST,
			    "the worker died of another request of this connection's");
	}
	if (!r->wire || !r->marked || !d->marks || !ctx->connected)
		return lost(r, GPUX_E_WORKER_LOST, "the worker running the request died");
	if (word == IPC_MARK(r->id, IPC_MARK_STARTED))
		return lost(r, GPUX_E_WORKER_LOST,
			    "the worker died after the request began to change memory in place or "
			    "to copy its results back: it cannot run again");
	if (word == IPC_MARK(r->id, IPC_MARK_LAUNCHED) && !f.cause)
		return lost(r, GPUX_E_WORKER_LOST,
			    "the worker died while the request ran, of a cause not known");
	/* A suspect runs again a few times; one that never reached the device, or that ran
	 * beside a known culprit, as often as a neighbour's fault takes its worker. */
	if (word == IPC_MARK(r->id, IPC_MARK_LAUNCHED) && f.cause == IPC_FAULT_UNKNOWN) {
		if (r->suspected++ >= CLI_REPLAY_MAX)
			return lost(r, GPUX_E_WORKER_LOST,
				    "the worker died again: the request was run again too often");
		wire_alone(r);
	}
	cli_req_word_drop(ctx, r);
	r->lost_ns = mono_ns();
	pend(ctx, r);
	return true;
}

/* ---- sending again ---- */

bool cli_replay_blocks(const gpux_ctx *ctx, uint32_t device)
{
	for (const struct gpux_req *r = ctx->pending; r; r = r->pend_next)
		if (!r->any && r->device == device)
			return true;
	return false;
}

/*
 * Whether device i's worker takes a request that runs again now: its channel is up, with its
 * page of the marks (without one the request could never run again after that: a channel to a
 * worker that died before it sent one, which gpuxd may still hand over as the death is under
 * way, is not used), and it has room.
 */
static bool takes_now(const gpux_ctx *ctx, uint32_t i)
{
	const struct cli_dev *d = &ctx->devs[i];

	return d->chan_fd >= 0 && d->marks && d->info.state == GPUX_DEVICE_READY &&
	       !(d->status && __atomic_load_n(&d->status->gone, __ATOMIC_ACQUIRE)) &&
	       d->inflight < CLI_INFLIGHT_MAX && d->out.bytes < CLI_OUTBOX_WAIT &&
	       d->out.nfds < CLI_OUTBOX_FDS_WAIT;
}

/* Where r goes now: 0 with *ret_device, -EAGAIN to wait, or -ENODEV when it never can. */
static int target(gpux_ctx *ctx, const struct gpux_req *r, uint64_t blocked, uint32_t *ret_device)
{
	uint64_t best_load = UINT64_MAX;
	bool any_alive = false;

	if (!ctx->connected || mono_ns() - r->lost_ns > CLI_DEVICE_WAIT_NS)
		return -ENODEV;
	if (!r->any) {
		if (ctx->devs[r->device].info.state == GPUX_DEVICE_FAILED)
			return -ENODEV;
		if (blocked >> r->device & 1 || !takes_now(ctx, r->device))
			return -EAGAIN;
		*ret_device = r->device;
		return 0;
	}
	for (uint32_t i = 0; i < ctx->ndevices; i++) {
		const struct cli_dev *d = &ctx->devs[i];
		uint64_t load = d->inflight;

		any_alive |= d->info.state != GPUX_DEVICE_FAILED;
		if (!takes_now(ctx, i))
			continue;
		if (d->status)
			load += __atomic_load_n(&d->status->stats.inflight, __ATOMIC_RELAXED);
		if (load < best_load) {
			best_load = load;
			*ret_device = i;
		}
	}
	if (best_load != UINT64_MAX)
		return 0;
	return any_alive ? -EAGAIN : -ENODEV;
}

static struct cli_seg *seg_find(gpux_ctx *ctx, uint64_t id)
{
	for (struct cli_seg *s = ctx->segs; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

static gpux_dbuf *dbuf_find(gpux_ctx *ctx, uint64_t id)
{
	for (gpux_dbuf *d = ctx->dbufs; d; d = d->next)
		if (d->id == id)
			return d;
	return NULL;
}

/*
 * What r's message names, on device's current channel: its segments, module, queue and
 * device buffers (only ones kept in host memory survive a worker). -ENOENT when one of them
 * is gone (freed before the request finished).
 */
static int objects_sync(gpux_ctx *ctx, struct gpux_req *r, uint32_t device)
{
	struct ipc_msg msg;
	int rc;

	if (ipc_msg_parse(r->wire, r->wire_len, NULL, 0, &msg) < 0)
		return -EPROTO;
	if (msg.hdr.type == IPC_SUBMIT) {
		struct ipc_submit_msg s;
		gpux_module *m;
		gpux_queue *q = NULL;

		if (ipc_decode_submit(&msg, &s) < 0)
			return -EPROTO;
		for (uint32_t i = 0; i < s.m.nargs; i++) {
			const struct ipc_arg *a = &s.args[i];
			struct cli_seg *seg;
			gpux_dbuf *db;

			if (a->kind == GPUX_ARG_SCALAR)
				continue;
			if (a->kind == GPUX_ARG_DBUF) {
				db = dbuf_find(ctx, a->ref);
				rc = db && db->device == device ? cli_dbuf_sync(ctx, db) : -ENOENT;
			} else {
				seg = seg_find(ctx, a->ref);
				rc = seg ? cli_seg_sync(ctx, seg, device) : -ENOENT;
			}
			if (rc < 0)
				return rc;
		}
		for (m = ctx->modules; m && m->id != s.m.mod_id; m = m->next)
			;
		if (s.m.queue)
			for (q = ctx->queues; q && q->id != s.m.queue; q = q->next)
				;
		if (!m || (s.m.queue && (!q || q->device != device)))
			return -ENOENT;
		rc = cli_module_sync(ctx, m, device);
		if (rc == 0)
			rc = cli_queue_sync_for(ctx, q, device);
		return rc;
	}
	if (msg.hdr.type == IPC_COPY) {
		struct ipc_copy c;
		struct cli_seg *seg;
		gpux_dbuf *db;
		gpux_queue *q = NULL;

		if (ipc_decode_copy(&msg, &c) < 0)
			return -EPROTO;
		seg = seg_find(ctx, c.seg_id);
		db = dbuf_find(ctx, c.dbuf_id);
		if (c.queue)
			for (q = ctx->queues; q && q->id != c.queue; q = q->next)
				;
		if (!seg || !db || db->device != device || (c.queue && (!q || q->device != device)))
			return -ENOENT;
		rc = cli_seg_sync(ctx, seg, device);
		if (rc == 0)
			rc = cli_dbuf_sync(ctx, db);
		if (rc == 0)
			rc = cli_queue_sync_for(ctx, q, device);
		return rc;
	}
	return -EPROTO;
}

/* Send r again, to device: 0, -EPIPE when that channel went meanwhile (r waits again), or
 * another -errno (r is lost). */
static int resend(gpux_ctx *ctx, struct gpux_req *r, uint32_t device)
{
	struct cli_dev *d = &ctx->devs[device];
	struct ipc_hdr h;
	int rc;

	rc = objects_sync(ctx, r, device);
	if (rc < 0)
		return rc;
	r->device = device;
	r->chan_gen = 0;
	rc = cli_req_word_take(ctx, r, device);
	if (rc < 0)
		return rc;
	/* The header's id is the request's new one; the rest goes as it went. */
	memcpy(&h, r->wire, sizeof(h));
	h.id = r->id;
	memcpy(r->wire, &h, sizeof(h));
	rc = cli_send(ctx, device, r->wire, r->wire_len, NULL, 0);
	if (rc < 0) {
		cli_req_word_drop(ctx, r);
		return rc;
	}
	r->chan_gen = d->chan_gen;
	d->inflight++;
	return 0;
}

void cli_replay(gpux_ctx *ctx)
{
	if (ctx->replaying || !ctx->pending)
		return;
	/*
	 * Each round sends the first request that can go now, looking from the head: a request
	 * that waits for its device holds up the later ones bound to that device. (Sending may
	 * end a channel, whose requests then join the list: it is looked at afresh.)
	 */
	ctx->replaying = true;
	/* A device whose channel ended without its worker's death being told (gpuxd would hand
	 * the next worker's channel unasked): a new channel is asked for now. */
	cli_channels_request(ctx);
	for (;;) {
		struct gpux_req *r;
		uint64_t blocked = 0;
		uint32_t device = 0;
		int rc = -EAGAIN;

		for (r = ctx->pending; r; r = r->pend_next) {
			rc = target(ctx, r, blocked, &device);
			if (rc != -EAGAIN)
				break;
			if (!r->any)
				blocked |= 1ull << r->device;
		}
		if (!r)
			break;
		cli_req_unpend(ctx, r);
		if (rc == 0)
			rc = resend(ctx, r, device);
		if (rc == -EPIPE) {
			pend(ctx, r);
			continue;
		}
		if (rc == -ENOENT)
			(void)lost(r, GPUX_E_WORKER_LOST,
				   "the worker running the request died, and what the request uses "
				   "was freed since: it cannot run again");
		else if (rc < 0)
			(void)lost(r, GPUX_E_WORKER_LOST,
				   "the worker running the request died, and no other took it in "
				   "time");
	}
	ctx->replaying = false;
}
