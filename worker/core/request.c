/* SPDX-License-Identifier: MIT */
/* worker/core/request.c: requests from submission to completion: checks, completions, replies. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include "channel.h"
#include "macro.h"
#include "metrics.h"
#include "spin.h"
#include "wrk.h"

/* Ended requests kept for reuse: a request is 7 KiB, and most are made and ended by the
 * hundred thousand a second. */
#define FREE_REQS_MAX 1024u

/* A DONE's status is a gpux_status the worker says: the wire's code of the same value. */
IPC_ASSERT_PUBLIC()

/* Answer request `id` (0: nobody waits for an answer) with a DONE. */
static void send_done(struct wrk_client *c, uint32_t id, gpux_status status, const char *text,
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
	/* A worker that gives up after a fault leaves unanswered what it lost: the client tells
	 * from the marks which of those may run again (worker/core/marks.c). */
	if (status == GPUX_E_WORKER_LOST && atomic_load(&c->w->fatal))
		return;
	n = ipc_encode_done(buf, sizeof(buf), id, &d, text);
	if (n > 0)
		wrk_client_send(c, buf, (size_t)n);
}

void wrk_reply(struct wrk_client *c, uint32_t id, gpux_status status, const char *text)
{
	send_done(c, id, status, text, 0, 0, 0);
}

void wrk_client_unref(struct wrk_client *c)
{
	if (!c || --c->refs > 0)
		return;
	wrk_marks_put(c);
	free(c);
}

/*
 * A client's first request in flight, or its last gone: clients waiting for answers, which
 * clients weigh their spinning against (client/wait.c), change. What the page says is capped
 * at the CPUs, past which nobody spins anyway, and written only when it changes: every
 * client reads that line at each wait, and with hundreds of them a write to it costs the
 * loop.
 */
static void clients_busy_add(struct wrk *w, int d)
{
	unsigned shown;

	if (w->busy_cap == 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);

		w->busy_cap = cpus > 0 ? (unsigned)cpus : 1;
	}
	w->clients_busy += (unsigned)d;
	w->status_dirty = true;
	shown = MIN(w->clients_busy, w->busy_cap);
	if (__atomic_load_n(&w->status->busy, __ATOMIC_RELAXED) != shown)
		__atomic_store_n(&w->status->busy, shown, __ATOMIC_RELAXED);
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
		if (--r->client->inflight == 0)
			clients_busy_add(w, -1);
		r->client->requests++;
		wrk_client_row_update(r->client);
		wrk_client_unref(r->client);
	}
	w->stats.inflight--;
	if (r->data != r->data_inline)
		free(r->data);
	free(r->error);
	if (w->nfree_reqs < FREE_REQS_MAX) {
		r->next_done = w->free_reqs;
		w->free_reqs = r;
		w->nfree_reqs++;
	} else {
		free(r);
	}
}

void wrk_reqs_free_cache(struct wrk *w)
{
	while (w->free_reqs) {
		struct wrk_req *r = w->free_reqs;

		w->free_reqs = r->next_done;
		free(r);
	}
	w->nfree_reqs = 0;
}

void wrk_req_discard(struct wrk_req *r)
{
	req_free(r);
}

void wrk_count_finished(struct wrk *w, gpux_status status)
{
	if (status < 0)
		w->stats.requests_failed++;
	else
		w->stats.requests_done++;
	if (status <= 0 && -status < (int)IPC_STATUS_CODES)
		w->stats.by_status[-status]++;
}

/* Answer and free a request that never reached a slot. */
void wrk_req_fail(struct wrk_req *r, gpux_status status, char *error)
{
	wrk_reply(r->client, r->id, status, error);
	wrk_count_finished(r->w, status);
	free(error);
	req_free(r);
}

#define req_failf(r, status, ...) wrk_req_fail((r), (status), wrk_strdup_printf(__VA_ARGS__))

/* The counters, and free memory when asked (a driver call: µs) or when it is older than
 * MEM_FREE_MAX_AGE_NS. */
static void status_publish(struct wrk *w, bool mem)
{
	uint64_t now = mono_ns();

	w->stats.clients = w->nclients;
	w->stats.clients_active = w->active.n;
	w->stats.clients_busy = w->clients_busy;
	w->stats.blocking_waits = atomic_load(&w->blocking_waits);
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

void wrk_status_refresh(struct wrk *w)
{
	status_publish(w, false);
}

gpux_status wrk_req_check(struct wrk_req *r, char **ret_msg)
{
	struct wrk *w = r->w;
	const struct wrk_limits *lim = &w->limits;
	const struct wrk_kernel_info *ki;
	uint64_t threads;
	gpux_status rc;

	rc = wrk_module_kernel(w, r->mod, r->name, &r->kernel, ret_msg);
	if (rc < 0) {
		if (!*ret_msg)
			*ret_msg = wrk_strdup_printf("no kernel \"%s\" in the module", r->name);
		return rc;
	}
	ki = &r->kernel->info;
	if (ki->nparams >= 0) {
		if ((unsigned)ki->nparams != r->nargs) {
			*ret_msg = wrk_strdup_printf("kernel \"%s\" takes %d argument%s, %u given",
						     r->name, ki->nparams,
						     ki->nparams == 1 ? "" : "s", r->nargs);
			return GPUX_E_INVAL;
		}
		for (unsigned i = 0; i < r->nargs; i++) {
			uint32_t want = ki->param_size[i];
			uint32_t got = r->args[i].kind == GPUX_ARG_SCALAR
					       ? r->args[i].size
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
	if (threads >
	    (ki->max_threads_per_block ? ki->max_threads_per_block : lim->max_threads_per_block)) {
		*ret_msg =
			wrk_strdup_printf("block of %llu threads: kernel \"%s\" allows %u",
					  (unsigned long long)threads, r->name,
					  ki->max_threads_per_block ? ki->max_threads_per_block
								    : lim->max_threads_per_block);
		return GPUX_E_INVAL;
	}
	for (unsigned i = 0; i < 3; i++) {
		if (r->block[i] > lim->max_block[i] || r->grid[i] > lim->max_grid[i]) {
			*ret_msg = wrk_strdup_printf(
				"grid %ux%ux%u / block %ux%ux%u exceeds the "
				"device's limits (grid %ux%ux%u, block "
				"%ux%ux%u)",
				r->grid[0], r->grid[1], r->grid[2], r->block[0], r->block[1],
				r->block[2], lim->max_grid[0], lim->max_grid[1], lim->max_grid[2],
				lim->max_block[0], lim->max_block[1], lim->max_block[2]);
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

static gpux_status resolve_arg(struct wrk_client *c, struct wrk_req *r, unsigned i,
			       const struct ipc_arg *a, char **ret_msg)
{
	struct wrk_arg *d = &r->args[i];
	gpux_status status = GPUX_OK;

	*d = (struct wrk_arg){ .kind = a->kind, .offset = a->offset, .len = a->size };
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
				*ret_msg = wrk_strdup_printf(
					"argument %u: only a frozen buffer can be "
					"cached",
					i);
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
	r = w->free_reqs;
	if (r) {
		w->free_reqs = r->next_done;
		w->nfree_reqs--;
	} else {
		r = malloc(sizeof(*r));
		if (!r) {
			wrk_reply(c, id, GPUX_E_NOMEM, "out of memory");
			return NULL;
		}
	}
	/* The arguments are set one by one as they are resolved (nargs counts them). */
	memset(r, 0, offsetof(struct wrk_req, args));
	r->w = w;
	r->client = c;
	c->refs++;
	if (c->inflight++ == 0)
		clients_busy_add(w, 1);
	wrk_client_row_update(c);
	w->stats.inflight++;
	r->id = id;
	r->t_arrive = mono_ns();
	r->timeout_ms = w->opts.timeout_ms;
	r->data = r->data_inline;
	return r;
}

/* SUBMIT: check what can be checked now, then queue it behind the queue's earlier requests. */
int wrk_submit(struct wrk_client *c, const struct ipc_msg *msg)
{
	struct wrk *w = c->w;
	struct ipc_submit_msg s;
	struct wrk_modref *ref;
	struct wrk_req *r;

	if (ipc_decode_submit(msg, &s) < 0 || msg->hdr.id == 0)
		return -EBADMSG;
	r = wrk_req_new(c, msg->hdr.id);
	if (!r)
		return 0;
	memcpy(r->grid, s.m.grid, sizeof(r->grid));
	memcpy(r->block, s.m.block, sizeof(r->block));
	r->shared_bytes = s.m.shared_bytes;
	r->timed = s.m.flags & GPUX_LAUNCH_TIMED;
	/* Running alone holds everybody else up: granted as often as an honest client asks,
	 * sending again what it had in flight (fewer than IPC_MARKS_PER_CLIENT requests) after
	 * a fault whose culprit is not known, then ignored. */
	if ((s.m.flags & IPC_SUBMIT_ALONE) && c->alone < IPC_MARKS_PER_CLIENT) {
		r->alone = true;
		c->alone++;
	}
	r->mark_done = s.m.flags & IPC_SUBMIT_MARK_DONE;
	if (s.m.timeout_ms)
		r->timeout_ms = MIN((uint64_t)s.m.timeout_ms, w->opts.max_timeout_ms);
	memcpy(r->name, s.name, strlen(s.name) + 1);
	ref = ipc_map_get(&c->mods, s.m.mod_id);
	if (!ref) {
		/* A module refused for the client's cap was not kept: say so. */
		if (ipc_map_size(&c->mods) >= WRK_CLIENT_MODS_MAX)
			req_failf(r, GPUX_E_QUOTA,
				  "no such module: this client has %u loaded, "
				  "the most it may",
				  WRK_CLIENT_MODS_MAX);
		else
			req_failf(r, GPUX_E_INVAL, "no such module");
		return 0;
	}
	r->mod = ref->mod;
	r->mod->refs++;
	if (s.m.data_len > sizeof(r->data_inline)) {
		r->data = malloc(s.m.data_len);
		if (!r->data) {
			r->data = r->data_inline;
			req_failf(r, GPUX_E_NOMEM, "out of memory");
			return 0;
		}
	}
	if (s.m.data_len)
		memcpy(r->data, s.data, s.m.data_len);
	for (unsigned i = 0; i < s.m.nargs; i++) {
		char *why = NULL;
		gpux_status rc;

		r->nargs = i + 1;
		rc = resolve_arg(c, r, i, &s.args[i], &why);
		if (rc < 0) {
			wrk_req_fail(r, rc, why);
			return 0;
		}
	}
	wrk_req_queue(c, r, s.m.queue);
	return 0;
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

bool wrk_req_cancelled(struct wrk_req *r)
{
	/* After a fault nothing more starts here: what has not may run on the next worker. */
	if ((!r->client || !atomic_load(&r->client->dropped)) && !atomic_load(&r->w->fatal))
		return false;
	r->status = GPUX_E_WORKER_LOST;
	return true;
}

void wrk_reqs_complete(struct wrk_req *const *reqs, unsigned n, bool fatal)
{
	struct wrk *w = reqs[0]->w;
	uint64_t one = 1, now = mono_ns();

	/* A slot's class never changes once it is open: read from any thread. The requests of
	 * slots above priority 0 go on a list of their own, which the loop answers first. */
	bool urgent = w->slots[reqs[0]->slot].prio > 0;
	struct wrk_req **list = urgent ? &w->done_urgent_reqs : &w->done_reqs;

	(void)pthread_mutex_lock(&w->done_lock);
	for (unsigned i = 0; i < n; i++) {
		struct wrk_req *r = reqs[i];

		if (!r->t_end)
			r->t_end = now;
		r->next_done = *list;
		*list = r;
	}
	atomic_store(&w->done_any, true);
	if (urgent)
		atomic_store(&w->done_urgent, true);
	if (fatal)
		w->fatal = true;
	(void)pthread_mutex_unlock(&w->done_lock);
	/* A spinning loop finds them without being woken (see ipc_loop_set_spin()). */
	if (!ipc_loop_spinning(w->loop))
		(void)write(w->done_fd, &one, sizeof(one));
}

void wrk_device_broken(struct wrk *w)
{
	uint64_t one = 1;

	(void)pthread_mutex_lock(&w->done_lock);
	atomic_store(&w->done_any, true);
	w->fatal = true;
	(void)pthread_mutex_unlock(&w->done_lock);
	if (!ipc_loop_spinning(w->loop))
		(void)write(w->done_fd, &one, sizeof(one));
}

void wrk_fault_unknown(struct wrk *w)
{
	(void)ipc_status_fault_set(w->status, 0, 0, IPC_FAULT_UNKNOWN);
}

/* A request ended: off its slot, counted. */
static void req_end(struct wrk *w, struct wrk_req *r)
{
	/* The request that broke the device: the page says so before the worker goes, and
	 * gpuxd gives this worker no new channel from now on. */
	if (r->status == GPUX_E_KERNEL_FAULT && atomic_load(&w->fatal))
		(void)ipc_status_fault_set(w->status, r->client ? r->client->id : 0, r->id,
					   IPC_FAULT_KERNEL);
	/* Ended: whatever it did, it does not run again should its answer be lost; one that
	 * ended well is DONE, its results in place. (What the worker lost, it leaves as the back
	 * end marked it: see send_done().) */
	if (r->status != GPUX_E_WORKER_LOST)
		wrk_mark(r, r->status == GPUX_OK ? IPC_MARK_DONE : IPC_MARK_STARTED);
	wrk_slot_end(w, r);
	if (r->t_start > r->t_end)
		r->t_start = r->t_end;
	wrk_count_finished(w, r->status);
	w->stats.launches += r->kind == REQ_LAUNCH;
	ipc_hist_add(&w->stats.latency, r->t_end - r->t_arrive);
	ipc_hist_add(&w->stats.queue, r->t_start - r->t_arrive);
}

static void req_reply(struct wrk_req *r)
{
	send_done(r->client, r->id, r->status, r->error, r->t_start - r->t_arrive,
		  r->t_end - r->t_start, r->device_ns);
	req_free(r);
}

/* Requests taken off their slots, or answered, between two of the loop's urgent turns
 * (w->between). */
#define ENDS_BETWEEN 32u

/* One request more taken off its slot or answered (*n of them so far): with `between`, the
 * loop's urgent turn every ENDS_BETWEEN. */
static void end_turn(struct wrk *w, bool between, unsigned *n)
{
	if (between && w->between && ++*n % ENDS_BETWEEN == 0)
		w->between(w);
}

/*
 * Requests that ended, newest first (as wrk_reqs_complete() lists them): off their slots,
 * counted and published before they are answered (a client that asks for the status after
 * its answer finds its request in it), then answered in each slot's order; with `between`,
 * the loop's urgent turn every ENDS_BETWEEN of either (beside 64 busy clients on an H200, a
 * drain's requests took the loop 100 µs to take off their slots, a thousand times a second).
 */
static void reqs_finish(struct wrk *w, struct wrk_req *reqs, bool between)
{
	struct wrk_req *rev = NULL;
	unsigned n = 0;

	/* The list is newest first: turn it round so that each slot's order holds. */
	while (reqs) {
		struct wrk_req *r = reqs;
		reqs = r->next_done;
		r->next_done = rev;
		rev = r;
	}
	for (struct wrk_req *r = rev; r; r = r->next_done) {
		req_end(w, r);
		end_turn(w, between, &n);
	}
	if (rev)
		status_publish(w, false);
	while (rev) {
		struct wrk_req *r = rev;

		rev = r->next_done;
		req_reply(r);
		end_turn(w, between, &n);
	}
}

void wrk_drain_urgent(struct wrk *w)
{
	struct wrk_req *reqs;

	(void)pthread_mutex_lock(&w->done_lock);
	reqs = w->done_urgent_reqs;
	w->done_urgent_reqs = NULL;
	atomic_store(&w->done_urgent, false);
	(void)pthread_mutex_unlock(&w->done_lock);
	reqs_finish(w, reqs, false);
}

/* Take in what other threads finished: requests (in each slot's order) and module builds. */
void wrk_drain_done(struct wrk *w)
{
	struct wrk_req *reqs, *urgent, *soon;
	struct wrk_module *mods;

	(void)pthread_mutex_lock(&w->done_lock);
	reqs = w->done_reqs;
	urgent = w->done_urgent_reqs;
	soon = w->soon_reqs;
	mods = w->done_mods;
	w->done_reqs = NULL;
	w->done_urgent_reqs = NULL;
	w->soon_reqs = NULL;
	w->done_mods = NULL;
	atomic_store(&w->done_any, false);
	atomic_store(&w->done_urgent, false);
	(void)pthread_mutex_unlock(&w->done_lock);

	/* Announced before they complete, so never finished yet: taken first. */
	for (; soon; soon = soon->next_soon) {
		w->awake_until = mono_ns() + WRK_SOON_NS;
		wrk_client_wake(soon->client);
	}

	reqs_finish(w, urgent, false);
	reqs_finish(w, reqs, true);
	if (mods)
		wrk_modules_finish(w, mods);
	/* And once they are gone: what is in flight now. */
	status_publish(w, false);
}

void wrk_spin_for_work(uint64_t spin_ns, atomic_uint *queued)
{
	uint64_t until;

	if (!spin_ns)
		return;
	until = mono_ns() + spin_ns;
	while (!atomic_load_explicit(queued, memory_order_relaxed) && mono_ns() < until)
		cpu_relax();
}
