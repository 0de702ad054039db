/* SPDX-License-Identifier: MIT */
/* worker/request.c: requests from submission to completion: checks, queues, slots, replies. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include "ipc/channel.h"
#include "ipc/macro.h"
#include "ipc/spin.h"
#include "wrk.h"

/* How much of a failed build's log each request that needed it gets. */
#define FAILED_LOG_MAX 2048

/* Answer request `id` (0: nobody waits for an answer) with a DONE. */
static void send_done(struct wrk_client *c, uint32_t id, int status, const char *text,
		      uint64_t queue_ns, uint64_t run_ns, uint64_t device_ns)
{
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_done d = {
		.status = status,
		.queue_ns = queue_ns,
		.run_ns = run_ns,
		.device_ns = device_ns,
	};
	int n;

	if (id == 0 || c->gone)
		return;
	n = ipc_encode_done(buf, sizeof(buf), id, &d, text);
	if (n > 0)
		wrk_client_send(c, buf, (size_t)n);
}

void wrk_reply(struct wrk_client *c, uint32_t id, int status, const char *text)
{
	send_done(c, id, status, text, 0, 0, 0);
}

void wrk_client_unref(struct wrk_client *c)
{
	if (!c || --c->refs > 0)
		return;
	free(c);
}

void wrk_queue_unref(struct wrk_queue *q)
{
	if (!q || --q->refs > 0)
		return;
	q->client->w->slots[q->slot].queues--;
	free(q);
}

static void req_free(struct wrk_req *r)
{
	struct wrk *w = r->w;

	for (unsigned i = 0; i < r->nargs; i++) {
		struct wrk_arg *a = &r->args[i];

		if (a->centry)
			wrk_dcache_put(w, a->centry, r->launched);
		wrk_dbuf_unref(w, a->dbuf);
		wrk_mapping_unref(w, a->map);
	}
	wrk_module_unref(w, r->mod);
	wrk_queue_unref(r->queue);
	if (r->client) {
		r->client->inflight--;
		wrk_client_unref(r->client);
	}
	w->stats.inflight--;
	free(r->data);
	free(r->error);
	free(r);
}

void wrk_req_discard(struct wrk_req *r)
{
	req_free(r);
}

/* Answer and free a request that never reached a slot. */
void wrk_req_fail(struct wrk_req *r, int status, char *error)
{
	wrk_reply(r->client, r->id, status, error);
	r->w->stats.requests_failed++;
	free(error);
	req_free(r);
}

#define req_failf(r, status, ...) wrk_req_fail((r), (status), wrk_strdup_printf(__VA_ARGS__))

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

/* Answer what a queue holds and has not started: it will never run. */
static void queue_fail_pending(struct wrk_queue *q, int status, const char *why)
{
	struct wrk_req *r;

	while ((r = q->pending_head)) {
		q->pending_head = r->next;
		wrk_req_fail(r, status, why ? strdup(why) : NULL);
	}
	q->pending_tail = NULL;
}

/* QUEUE_OPEN and QUEUE_CLOSE. Queue 0, the default, exists without being opened. */
int wrk_queue_msg(struct wrk_client *c, const struct ipc_msg *msg)
{
	struct ipc_queue_msg m;
	struct wrk_queue *q;
	int r = ipc_decode_queue(msg, msg->hdr.type, &m);

	if (r < 0 || m.queue == 0)
		return -EBADMSG;
	q = ipc_map_get(&c->queues, m.queue);
	if (msg->hdr.type == IPC_QUEUE_CLOSE) {
		if (!q)
			return -EBADMSG;
		(void)ipc_map_remove(&c->queues, m.queue);
		q->closed = true;
		/* Nobody would kick what it still holds again. */
		queue_fail_pending(q, GPUX_E_INVAL, "its queue was closed");
		wrk_queue_unref(q);
		return 0;
	}
	if (q)
		return -EBADMSG;
	if (ipc_map_size(&c->queues) >= WRK_CLIENT_QUEUES_MAX)
		r = GPUX_E_QUOTA;
	else
		r = queue_new(c, m.queue) ? GPUX_OK : GPUX_E_NOMEM;
	wrk_reply(c, msg->hdr.id, r, r == GPUX_E_QUOTA ? "too many queues" : NULL);
	return 0;
}

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

/* The counters, and free memory when asked (a driver call: µs) or when it is older than
 * MEM_FREE_MAX_AGE_NS. */
static void status_publish(struct wrk *w, bool mem)
{
	uint64_t now = mono_ns();

	w->stats.clients = w->nclients;
	if (mem || now - w->mem_checked_ns >= MEM_FREE_MAX_AGE_NS) {
		w->stats.mem_free = w->be->mem_free(w->dev);
		w->mem_checked_ns = now;
	}
	ipc_status_write_begin(w->status);
	w->status->stats = w->stats;
	ipc_status_write_end(w->status);
}

void wrk_status_publish(struct wrk *w)
{
	status_publish(w, true);
}

/* Everything that needs the module: the kernel, its parameters, the launch's shape. */
static int req_check(struct wrk_req *r, char **ret_msg)
{
	struct wrk *w = r->w;
	const struct wrk_limits *lim = &w->limits;
	const struct wrk_kernel_info *ki;
	uint64_t threads;
	int rc;

	rc = wrk_module_kernel(w, r->mod, r->name, &r->kernel, ret_msg);
	if (rc < 0) {
		if (!*ret_msg)
			*ret_msg = wrk_strdup_printf("no kernel \"%s\" in the module", r->name);
		return rc;
	}
	ki = &r->kernel->info;
	if (ki->nparams >= 0) {
		if ((unsigned)ki->nparams != r->nargs) {
			*ret_msg = wrk_strdup_printf("kernel \"%s\" takes %d arguments, %u given",
						     r->name, ki->nparams, r->nargs);
			return GPUX_E_INVAL;
		}
		for (unsigned i = 0; i < r->nargs; i++) {
			uint32_t want = ki->param_size[i];
			uint32_t got = r->args[i].kind == GPUX_ARG_SCALAR ? r->args[i].size
									  : (uint32_t)sizeof(void *);
			if (want != got) {
				*ret_msg = wrk_strdup_printf("argument %u of kernel \"%s\" is %u "
							     "bytes, %u given",
							     i, r->name, want, got);
				return GPUX_E_INVAL;
			}
		}
	}
	threads = (uint64_t)r->block[0] * r->block[1] * r->block[2];
	if (threads > (ki->max_threads_per_block ? ki->max_threads_per_block
						  : lim->max_threads_per_block)) {
		*ret_msg = wrk_strdup_printf("block of %llu threads: kernel \"%s\" allows %u",
					     (unsigned long long)threads, r->name,
					     ki->max_threads_per_block ? ki->max_threads_per_block
								       : lim->max_threads_per_block);
		return GPUX_E_INVAL;
	}
	for (unsigned i = 0; i < 3; i++) {
		if (r->block[i] > lim->max_block[i] || r->grid[i] > lim->max_grid[i]) {
			*ret_msg = wrk_strdup_printf("grid %ux%ux%u / block %ux%ux%u exceeds the "
						     "device's limits (grid %ux%ux%u, block "
						     "%ux%ux%u)",
						     r->grid[0], r->grid[1], r->grid[2], r->block[0],
						     r->block[1], r->block[2], lim->max_grid[0],
						     lim->max_grid[1], lim->max_grid[2],
						     lim->max_block[0], lim->max_block[1],
						     lim->max_block[2]);
			return GPUX_E_INVAL;
		}
	}
	if ((uint64_t)r->shared_bytes + ki->static_shared_bytes > lim->max_shared_per_block_optin) {
		*ret_msg = wrk_strdup_printf("%u bytes of dynamic shared memory (and %u static): "
					     "the device allows %u per block",
					     r->shared_bytes, ki->static_shared_bytes,
					     lim->max_shared_per_block_optin);
		return GPUX_E_INVAL;
	}
	return 0;
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
	if (s->head == r) {
		r->t_start = mono_ns();
		status_running(w, r->slot);
	}
}

/* Take back the request just pushed, when its launch was refused. */
static void slot_drop_tail(struct wrk *w, struct wrk_req *r)
{
	struct wrk_slot *s = &w->slots[r->slot];
	struct wrk_req *prev = NULL;

	assert(s->tail == r);
	if (s->head != r)
		for (prev = s->head; prev->next != r; prev = prev->next)
			;
	if (prev)
		prev->next = NULL;
	else
		s->head = NULL;
	s->tail = prev;
	if (!prev)
		status_running(w, r->slot);
}

/* Launch the queue's pending requests, in order, until one waits for its module. */
void wrk_queue_kick(struct wrk_queue *q)
{
	struct wrk *w = q->client->w;
	struct wrk_req *r;

	while ((r = q->pending_head)) {
		char *msg = NULL;
		int rc;

		if ((r->mod && r->mod->state == MOD_BUILDING) || w->fatal)
			return;
		q->pending_head = r->next;
		if (!q->pending_head)
			q->pending_tail = NULL;
		r->next = NULL;

		if (r->mod && r->mod->state == MOD_FAILED) {
			/* The start of the log: a thousand failed requests must not carry a
			 * thousand whole logs. */
			wrk_req_fail(r, r->mod->status,
				 r->mod->log ? strndup(r->mod->log, FAILED_LOG_MAX) : NULL);
			continue;
		}
		rc = r->kind == REQ_LAUNCH ? req_check(r, &msg) : 0;
		if (rc < 0) {
			wrk_req_fail(r, rc, msg);
			continue;
		}
		r->slot = q->slot;
		slot_push(w, r);
		rc = w->be->launch(w->dev, r, &msg);
		if (rc < 0) {
			/* Refused before any of its work was queued: it never ran. */
			slot_drop_tail(w, r);
			wrk_req_fail(r, rc, msg);
			continue;
		}
		r->launched = true;
	}
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

/*
 * The mapping of a client's segment range, held (a reference for the caller), or NULL with
 * a status and message: no such segment, an unusable one, a range outside it, a write to a
 * frozen one. `arg` names the argument in the message.
 */
struct wrk_mapping *wrk_segment_range(struct wrk_client *c, uint64_t seg_id, uint64_t offset,
				      uint64_t len, bool write, unsigned arg, int *ret_status,
				      char **ret_msg)
{
	struct wrk_seg *s = ipc_map_get(&c->segs, seg_id);

	if (!s) {
		*ret_msg = wrk_strdup_printf("argument %u: no such buffer", arg);
		*ret_status = GPUX_E_INVAL;
		return NULL;
	}
	if (!s->map) {
		*ret_msg = wrk_strdup_printf("argument %u: %s", arg, s->error ? s->error : "unusable");
		*ret_status = s->status;
		return NULL;
	}
	if (!range_ok(offset, len, s->map->seg.size)) {
		*ret_msg = wrk_strdup_printf("argument %u: bytes %llu to %llu lie outside its "
					     "buffer of %llu bytes",
					     arg, (unsigned long long)offset,
					     (unsigned long long)(offset + len),
					     (unsigned long long)s->map->seg.size);
		*ret_status = GPUX_E_INVAL;
		return NULL;
	}
	if (s->map->seg.frozen && write) {
		*ret_msg = wrk_strdup_printf("argument %u: a frozen buffer can only be an input", arg);
		*ret_status = GPUX_E_INVAL;
		return NULL;
	}
	s->map->refs++;
	return s->map;
}

static int resolve_arg(struct wrk_client *c, struct wrk_req *r, unsigned i,
		       const struct ipc_arg *a, char **ret_msg)
{
	struct wrk_arg *d = &r->args[i];
	int status = 0;

	d->kind = a->kind;
	d->offset = a->offset;
	d->len = a->size;
	switch (a->kind) {
	case GPUX_ARG_SCALAR:
		d->size = (uint32_t)a->size;
		d->host = r->data + a->offset;
		r->params[i] = d->host;
		return 0;
	case GPUX_ARG_DBUF:
		d->dbuf = ipc_map_get(&c->dbufs, a->ref);
		if (!d->dbuf || !range_ok(a->offset, a->size, d->dbuf->size)) {
			*ret_msg = wrk_strdup_printf("argument %u: %s", i,
						     d->dbuf ? "range outside its device buffer"
							     : "no such device buffer");
			d->dbuf = NULL;
			return GPUX_E_INVAL;
		}
		d->dbuf->refs++;
		return 0;
	default:
		d->map = wrk_segment_range(c, a->ref, a->offset, a->size, a->kind != GPUX_ARG_IN, i,
					   &status, ret_msg);
		if (!d->map)
			return status;
		d->host = (uint8_t *)d->map->seg.addr + a->offset;
		if (a->flags & GPUX_ARG_CACHED) {
			if (!d->map->seg.frozen) {
				*ret_msg = wrk_strdup_printf("argument %u: only a frozen buffer can be "
							     "cached", i);
				return GPUX_E_INVAL;
			}
			d->centry = wrk_dcache_get(c, d->map, a->offset, a->size);
		}
		return 0;
	}
}

struct wrk_req *wrk_req_new(struct wrk_client *c, uint32_t id)
{
	struct wrk *w = c->w;
	struct wrk_req *r;

	if (c->inflight >= WRK_CLIENT_INFLIGHT_MAX) {
		wrk_reply(c, id, GPUX_E_QUOTA, "too many requests in flight");
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		wrk_reply(c, id, GPUX_E_NOMEM, "out of memory");
		return NULL;
	}
	r->w = w;
	r->client = c;
	c->refs++;
	c->inflight++;
	w->stats.inflight++;
	r->id = id;
	r->t_arrive = mono_ns();
	r->timeout_ms = w->opts.timeout_ms;
	return r;
}

/* Put a checked request behind the earlier ones of its queue (failing it if none). */
void wrk_req_queue(struct wrk_client *c, struct wrk_req *r, uint32_t queue_id)
{
	struct wrk_queue *q = ipc_map_get(&c->queues, queue_id);

	if (!q && queue_id == 0)
		q = queue_new(c, 0);
	if (!q) {
		req_failf(r, GPUX_E_INVAL, "no such queue %u", queue_id);
		return;
	}
	r->queue = q;
	q->refs++;
	if (q->pending_tail)
		q->pending_tail->next = r;
	else
		q->pending_head = r;
	q->pending_tail = r;
	wrk_queue_kick(q);
}

/* SUBMIT: check what can be checked now, then queue it behind the queue's earlier requests. */
void wrk_submit(struct wrk_client *c, const struct ipc_msg *msg)
{
	struct wrk *w = c->w;
	struct ipc_submit_msg s;
	struct wrk_modref *ref;
	struct wrk_req *r;

	if (ipc_decode_submit(msg, &s) < 0 || msg->hdr.id == 0) {
		wrk_client_drop(c);
		return;
	}
	r = wrk_req_new(c, msg->hdr.id);
	if (!r)
		return;
	memcpy(r->grid, s.m.grid, sizeof(r->grid));
	memcpy(r->block, s.m.block, sizeof(r->block));
	r->shared_bytes = s.m.shared_bytes;
	r->timed = s.m.flags & GPUX_LAUNCH_TIMED;
	if (s.m.timeout_ms)
		r->timeout_ms = MIN((uint64_t)s.m.timeout_ms, w->opts.max_timeout_ms);
	memcpy(r->name, s.name, sizeof(r->name));
	ref = ipc_map_get(&c->mods, s.m.mod_id);
	if (!ref) {
		req_failf(r, GPUX_E_INVAL, "no such module");
		return;
	}
	r->mod = ref->mod;
	r->mod->refs++;
	if (s.m.data_len) {
		r->data = malloc(s.m.data_len);
		if (!r->data) {
			req_failf(r, GPUX_E_NOMEM, "out of memory");
			return;
		}
		memcpy(r->data, s.data, s.m.data_len);
	}
	for (unsigned i = 0; i < s.m.nargs; i++) {
		char *why = NULL;
		int rc;

		r->nargs = i + 1;
		rc = resolve_arg(c, r, i, &s.args[i], &why);
		if (rc < 0) {
			wrk_req_fail(r, rc, why);
			return;
		}
	}
	wrk_req_queue(c, r, s.m.queue);
}

void wrk_req_soon(struct wrk_req *r)
{
	struct wrk *w = r->w;
	uint64_t one = 1;

	(void)pthread_mutex_lock(&w->done_lock);
	r->next_soon = w->soon_reqs;
	w->soon_reqs = r;
	atomic_store(&w->done_any, true);
	(void)pthread_mutex_unlock(&w->done_lock);
	if (!ipc_loop_spinning(w->loop))
		(void)write(w->done_fd, &one, sizeof(one));
}

void wrk_req_complete(struct wrk_req *r, bool fatal)
{
	struct wrk *w = r->w;
	uint64_t one = 1;

	if (!r->t_end)
		r->t_end = mono_ns();
	(void)pthread_mutex_lock(&w->done_lock);
	r->next_done = w->done_reqs;
	w->done_reqs = r;
	atomic_store(&w->done_any, true);
	if (fatal)
		w->fatal = true;
	(void)pthread_mutex_unlock(&w->done_lock);
	/* A spinning loop finds it without being woken (see ipc_loop_set_spin()). */
	if (!ipc_loop_spinning(w->loop))
		(void)write(w->done_fd, &one, sizeof(one));
}

static void req_finish(struct wrk *w, struct wrk_req *r)
{
	struct wrk_slot *s = &w->slots[r->slot];
	struct wrk_req *next;

	/* A slot completes in order: this is its head. */
	assert(s->head == r);
	s->head = r->next;
	if (!s->head)
		s->tail = NULL;
	next = s->head;
	if (next)
		next->t_start = MAX(r->t_end, next->t_arrive);
	status_running(w, r->slot);

	if (r->t_start > r->t_end)
		r->t_start = r->t_end;
	if (r->status < 0)
		w->stats.requests_failed++;
	else
		w->stats.requests_done++;
	send_done(r->client, r->id, r->status, r->error, r->t_start - r->t_arrive,
		  r->t_end - r->t_start, r->device_ns);
	req_free(r);
}

/* Take in what other threads finished: requests (in each slot's order) and module builds. */
void wrk_drain_done(struct wrk *w)
{
	struct wrk_req *reqs, *soon, *rev = NULL;
	struct wrk_module *mods;

	(void)pthread_mutex_lock(&w->done_lock);
	reqs = w->done_reqs;
	soon = w->soon_reqs;
	mods = w->done_mods;
	w->done_reqs = NULL;
	w->soon_reqs = NULL;
	w->done_mods = NULL;
	atomic_store(&w->done_any, false);
	(void)pthread_mutex_unlock(&w->done_lock);

	/* Announced before they complete, so never finished yet: taken first. */
	for (; soon; soon = soon->next_soon) {
		w->awake_until = mono_ns() + WRK_SOON_NS;
		wrk_client_wake(soon->client);
	}

	/* The list is newest first: turn it round so that each slot's order holds. */
	while (reqs) {
		struct wrk_req *r = reqs;
		reqs = r->next_done;
		r->next_done = rev;
		rev = r;
	}
	while (rev) {
		struct wrk_req *r = rev;
		rev = r->next_done;
		req_finish(w, r);
	}
	if (mods)
		wrk_modules_finish(w, mods);
	/* After every round of completions: free memory only now and then. */
	status_publish(w, false);
}

void wrk_spin_for_work(const struct wrk *w, atomic_uint *queued)
{
	uint64_t until;

	if (!w->spin_ns)
		return;
	until = mono_ns() + w->spin_ns;
	while (!atomic_load_explicit(queued, memory_order_relaxed) && mono_ns() < until)
		cpu_relax();
}

/* Fail every request not yet launched (a fatal error, or stopping). */
void wrk_fail_all(struct wrk *w, int status, const char *why)
{
	for (struct wrk_client *c = w->clients; c; c = c->next) {
		struct wrk_queue *q;
		size_t it = 0;

		while (ipc_map_next(&c->queues, &it, NULL, (void **)&q))
			queue_fail_pending(q, status, why);
	}
}
