/* SPDX-License-Identifier: MIT */
/* client/req.c: requests: submission (with what the worker must have first), completion, waiting. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "macro.h"

struct gpux_req *cli_req_new(gpux_ctx *ctx, uint32_t device, bool internal)
{
	struct gpux_req *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	do
		r->id = ++ctx->next_req_id;
	while (r->id == 0 || ipc_map_get(&ctx->reqs, r->id));
	if (ipc_map_put(&ctx->reqs, r->id, r) < 0) {
		free(r);
		return NULL;
	}
	r->magic = CLI_REQ_MAGIC;
	r->ctx = ctx;
	r->device = device;
	r->internal = internal;
	r->fork_gen = cli_fork_gen;
	r->status = GPUX_E_AGAIN;
	LIST_PREPEND(ctx->all_reqs, r);
	return r;
}

/* Unlink and free; lock held. */
void cli_req_release(struct gpux_req *r)
{
	gpux_ctx *ctx = r->ctx;

	if (!r->done && ipc_map_get(&ctx->reqs, r->id) == r) {
		(void)ipc_map_remove(&ctx->reqs, r->id);
		if (ctx->devs[r->device].chan_gen == r->chan_gen && ctx->devs[r->device].inflight)
			ctx->devs[r->device].inflight--;
	}
	cli_req_word_drop(ctx, r);
	cli_req_unpend(ctx, r);
	LIST_REMOVE(ctx->all_reqs, r);
	free(r->message);
	r->message = NULL;
	free(r->wire);
	r->wire = NULL;
	cli_retire(ctx, r);
}

void cli_reqs_free_all(gpux_ctx *ctx)
{
	while (ctx->all_reqs)
		cli_req_release(ctx->all_reqs);
	ipc_map_done(&ctx->reqs);
}

/* A request ended; lock held. */
void cli_req_finish(struct gpux_req *r, gpux_status status, const char *text, size_t len,
		    const struct gpux_times *t)
{
	gpux_ctx *ctx = r->ctx;
	struct cli_dev *d = &ctx->devs[r->device];

	if (r->done)
		return;
	if (ipc_map_get(&ctx->reqs, r->id) == r)
		(void)ipc_map_remove(&ctx->reqs, r->id);
	if (d->chan_gen == r->chan_gen && d->inflight)
		d->inflight--;
	cli_req_word_drop(ctx, r);
	cli_req_unpend(ctx, r);
	free(r->wire);
	r->wire = NULL;
	r->done = true;
	r->status = status;
	free(r->message);
	r->message = len ? strndup(text, len) : NULL;
	if (t)
		r->times = *t;
	cli_announce(ctx, r);
	cli_wake(ctx);
}

/*
 * The channel to a device ended: what was in flight there was killed on time, or (when the
 * worker said so before it dropped the channel) refused for breaking the protocol, or goes
 * to the next worker if it may, or is lost (client/replay.c).
 */
void cli_reqs_lost(gpux_ctx *ctx, uint32_t device, uint64_t chan_gen)
{
	const char *dropped = ctx->devs[device].dropped;
	struct gpux_req *lost[64];
	unsigned n;

	do {
		struct gpux_req *r;
		size_t it = 0;

		n = 0;
		while (n < ARRAY_SIZE(lost) && ipc_map_next(&ctx->reqs, &it, NULL, (void **)&r))
			if (r->device == device && r->chan_gen == chan_gen && !r->pending)
				lost[n++] = r;
		for (unsigned i = 0; i < n; i++) {
			bool timeout = false;

			for (unsigned k = 0; k < MIN(ctx->nkilled, CLI_KILLED_MAX); k++)
				if (ctx->killed[k].device == device &&
				    ctx->killed[k].req_id == lost[i]->id &&
				    ctx->killed[k].generation == ctx->devs[device].generation)
					timeout = true;
			if (timeout)
				cli_req_finish(lost[i], GPUX_E_TIMEOUT,
					       "the request ran past its deadline", 33, NULL);
			else if (dropped)
				cli_req_finish(lost[i], GPUX_E_PROTO, dropped, strlen(dropped),
					       NULL);
			else if (lost[i]->internal)
				cli_req_finish(lost[i], GPUX_E_WORKER_LOST,
					       "the worker running the request died", 36, NULL);
			else
				(void)cli_req_lost(ctx, lost[i]);
		}
	} while (n == ARRAY_SIZE(lost));
}

static bool req_done(gpux_ctx *ctx, void *arg)
{
	return ((struct gpux_req *)arg)->done;
}

/* Lock held. */
int cli_req_wait(struct gpux_req *r, uint64_t deadline)
{
	return cli_wait_until(r->ctx, req_done, r, r, deadline);
}

/* ---- choosing a device ---- */

/* Preferring a device that holds a cached input outweighs this many requests of backlog. */
#define AFFINITY_WEIGHT 64u

_Static_assert(GPUX_AFFINITY_BITS == IPC_AFFINITY_BITS, "gpux.h's filter is the status page's");

/* Whether a filter holds (uid, k). Its words are read one by one, as they are: a filter
 * seen half updated by its worker only makes a worse guess. */
static bool filter_holds(const uint64_t *filter, uint32_t uid, struct ipc_key k)
{
	uint32_t bit[2];

	ipc_affinity_bits(uid, k.lo, k.hi, bit);
	return (__atomic_load_n(&filter[bit[0] / 64], __ATOMIC_RELAXED) >> (bit[0] % 64) & 1) &&
	       (__atomic_load_n(&filter[bit[1] / 64], __ATOMIC_RELAXED) >> (bit[1] % 64) & 1);
}

/* How many of the launch's cached inputs the device's status page says it holds. */
static unsigned affinity(gpux_ctx *ctx, const struct ipc_status_page *page,
			 const struct gpux_arg *args, uint32_t nargs)
{
	unsigned n = 0;

	for (uint32_t i = 0; i < nargs; i++) {
		const struct gpux_arg *a = &args[i];

		if (a->kind != GPUX_ARG_IN || !(a->flags & GPUX_ARG_CACHED))
			continue;
		if (filter_holds(page->affinity, (uint32_t)geteuid(),
				 cli_seg_key(a->buf->seg, a->buf->offset + a->offset, a->size)))
			n++;
	}
	return n;
}

GPUX_EXPORT bool gpux_affinity_holds(const uint64_t filter[GPUX_AFFINITY_BITS / 64], uint32_t uid,
				     const uint8_t key[GPUX_KEY_SIZE])
{
	struct ipc_key k = { 0, 0 };

	if (!filter || !key)
		return false;
	for (unsigned i = 0; i < 8; i++) {
		k.lo |= (uint64_t)key[i] << (8 * i);
		k.hi |= (uint64_t)key[8 + i] << (8 * i);
	}
	return filter_holds(filter, uid, k);
}

GPUX_EXPORT gpux_status gpux_device_affinity(gpux_ctx *ctx, uint32_t device,
					     uint64_t ret_filter[GPUX_AFFINITY_BITS / 64])
{
	const struct ipc_status_page *page = NULL;
	int r;

	if (!ctx || !ret_filter)
		return GPUX_E_INVAL;
	(void)pthread_mutex_lock(&ctx->lock);
	r = cli_ensure(ctx);
	if (r == 0) {
		cli_pump(ctx);
		/* gpuxd went away meanwhile: connect again, or say why not. */
		if (!ctx->connected)
			r = cli_ensure(ctx);
	}
	if (r == 0) {
		if (device < ctx->ndevices && ctx->devs[device].info.state == GPUX_DEVICE_READY)
			page = ctx->devs[device].status;
		r = page ? 0 : -ENODEV;
	}
	for (unsigned i = 0; page && i < GPUX_AFFINITY_BITS / 64; i++)
		ret_filter[i] = __atomic_load_n(&page->affinity[i], __ATOMIC_RELAXED);
	(void)pthread_mutex_unlock(&ctx->lock);
	return cli_status_from_errno(r);
}

/*
 * GPUX_ANY: the ready device with the least work queued, where holding a cached input of the
 * launch counts for AFFINITY_WEIGHT requests. Its work is the larger of its worker's count
 * and ours: the worker's counts our requests too once they have arrived, and ours counts
 * those it has not taken yet (added up, a process saw its home busier by all it had in
 * flight there, which can be more than a quarter of the worker's count). Of each worker's
 * status page it reads those words only: a copy of the whole, at every launch, took 4 KiB
 * that the worker writes at every completion away from its cache.
 *
 * Each connection has a home device, its id (gpuxd counts connections) modulo the devices,
 * so that processes that connect one after another are spread over the devices as if each
 * named one in turn. The home keeps a launch unless another device holds more of the
 * launch's cached inputs, or has less to do by more than ANY_KEEP_MIN requests and, where
 * this process makes at least half of the home's work, by more than a quarter of it but at
 * most ANY_KEEP_OWN requests; where others make most of it, by more than three quarters: one
 * process with much to do spreads it evenly (a quarter, uncapped, left one with 128 long
 * requests in flight on two H200s with 73 of them on its home and the other device idle for
 * the last 18: 1.75 times one device), while among many each keeps its home unless the other
 * device is nearly idle (theirs spread the work already, and a launch elsewhere breaks the
 * runs below). Where the home is not ready, the device of the last GPUX_ANY launch keeps it
 * so. So a process's launches reach a worker in runs, which it launches as graphs of several
 * (a graph holds one client's requests), where choosing afresh each time scattered them; and
 * processes that all began on one device and kept the device of their last launch could stay
 * there (a program with 64 in flight per process saw device 1 get a fifth of the work on two
 * H200s).
 *
 * A worker's count misses the requests still on its rings, and falls near zero each time the
 * worker ends a batch, before it takes the next: read as it is, it made two equally busy
 * devices look twice as busy as each other often enough that processes moved (two H200s, 16
 * to 64 processes: their graphs held 11-14 requests against 16-23 named, and the rate was
 * 0.65-0.86 of theirs). So what a launch compares is the average of the reads, each weighing
 * an eighth (about a millisecond); and a worker's count is read again only after
 * ANY_LOAD_AGE_NS: the worker rewrites it at every completion, so a read at every launch
 * costs a cache miss on both sides. Measured on two H200s, 16 processes over both devices:
 * 1.38 M launches/s with the choice afresh at every launch and every count read, 1.69-1.76
 * M/s with the last device kept and fewer reads, 1.70-2.04 M/s with each process on one
 * device (docs/PERFORMANCE-LOG.md).
 */
#define ANY_LOAD_AGE_NS (100 * NSEC_PER_USEC)
#define ANY_KEEP_MIN 2u
#define ANY_KEEP_OWN 4u

static int pick_device(gpux_ctx *ctx, const struct gpux_arg *args, uint32_t nargs, uint32_t *ret)
{
	uint64_t best_score = UINT64_MAX, last_score = UINT64_MAX, last_load = 0, last_own = 0;
	uint64_t now = mono_ns();
	uint32_t best = UINT32_MAX, home, keep;
	unsigned best_aff = 0, last_aff = 0;
	int r;

	if (ctx->ndevices == 0)
		return -ENODEV;
	home = (uint32_t)(ctx->client_id % ctx->ndevices);

	/* A device whose worker dropped our channel comes back for the next request. */
	cli_channels_request(ctx);
	keep = ctx->devs[home].chan_fd >= 0 && ctx->devs[home].info.state == GPUX_DEVICE_READY
		       ? home
		       : ctx->any_last;
	for (uint32_t k = 0; k < ctx->ndevices; k++) {
		uint32_t i = (ctx->rr + k) % ctx->ndevices;
		struct cli_dev *d = &ctx->devs[i];
		uint64_t load = d->inflight, score;
		unsigned aff;

		if (d->chan_fd < 0 || d->info.state != GPUX_DEVICE_READY)
			continue;
		if (d->status) {
			if (now - d->any_load_ns >= ANY_LOAD_AGE_NS) {
				uint64_t seen = __atomic_load_n(&d->status->stats.inflight,
								__ATOMIC_RELAXED);

				d->any_load8 = d->any_load_ns
						       ? d->any_load8 - d->any_load8 / 8 + seen
						       : 8 * seen;
				d->any_load_ns = now;
			}
			load = MAX(load, d->any_load8 / 8);
		}
		aff = d->status ? affinity(ctx, d->status, args, nargs) : 0;
		score = load + AFFINITY_WEIGHT * (IPC_ARGS_MAX - aff);
		if (i == keep) {
			last_score = score;
			last_load = load;
			last_own = d->inflight;
			last_aff = aff;
		}
		if (score < best_score) {
			best_score = score;
			best = i;
			best_aff = aff;
		}
	}
	ctx->rr++;
	/* Kept, but never against more of the launch's cached inputs elsewhere. */
	if (last_score != UINT64_MAX && best_aff <= last_aff &&
	    best_score + MAX(2 * last_own >= last_load ? MIN(last_load / 4, ANY_KEEP_OWN)
						       : last_load - last_load / 4,
			     ANY_KEEP_MIN) >=
		    last_score)
		best = keep;
	if (best != UINT32_MAX) {
		ctx->any_last = best;
		*ret = best;
		return 0;
	}
	/* None is up now: wait for the first one that is not failed. */
	for (uint32_t i = 0; i < ctx->ndevices; i++) {
		if (ctx->devs[i].info.state == GPUX_DEVICE_FAILED)
			continue;
		r = cli_device_wait(ctx, i, mono_ns() + CLI_DEVICE_WAIT_NS);
		if (r == 0) {
			*ret = i;
			return 0;
		}
	}
	return -ENODEV;
}

/* ---- submission ---- */

/*
 * Check the arguments; *ret_device is the device their device buffers are on (all must be on
 * one), or GPUX_ANY when there are none.
 */
static gpux_status check_args(gpux_ctx *ctx, const struct gpux_arg *args, uint32_t nargs,
			      uint32_t *ret_device)
{
	uint32_t device = GPUX_ANY;

	if (nargs > IPC_ARGS_MAX || (nargs && !args))
		return GPUX_E_INVAL;
	for (uint32_t i = 0; i < nargs; i++) {
		const struct gpux_arg *a = &args[i];

		if (a->flags & ~(uint32_t)GPUX_ARG_CACHED)
			return GPUX_E_INVAL;
		switch (a->kind) {
		case GPUX_ARG_SCALAR:
			if (!a->value || a->size == 0 || a->size > IPC_SCALAR_MAX || a->flags)
				return GPUX_E_INVAL;
			break;
		case GPUX_ARG_IN:
		case GPUX_ARG_OUT:
		case GPUX_ARG_INOUT:
		case GPUX_ARG_MAPPED:
			if (!cli_alive(a->buf, CLI_BUF_MAGIC) || a->buf->ctx != ctx ||
			    a->size == 0 || !range_ok(a->offset, a->size, a->buf->size))
				return GPUX_E_INVAL;
			/* A frozen buffer is read only, and only a frozen one can be cached. */
			if (a->kind != GPUX_ARG_IN && a->buf->seg->frozen)
				return GPUX_E_INVAL;
			if ((a->flags & GPUX_ARG_CACHED) &&
			    (a->kind != GPUX_ARG_IN || !a->buf->seg->frozen))
				return GPUX_E_INVAL;
			break;
		case GPUX_ARG_DBUF:
			if (!cli_alive(a->dbuf, CLI_DBUF_MAGIC) || a->dbuf->ctx != ctx ||
			    a->size == 0 || a->flags ||
			    !range_ok(a->offset, a->size, a->dbuf->size) ||
			    (device != GPUX_ANY && device != a->dbuf->device))
				return GPUX_E_INVAL;
			device = a->dbuf->device;
			break;
		default:
			return GPUX_E_INVAL;
		}
	}
	*ret_device = device;
	return GPUX_OK;
}

/*
 * A launch's shape against what the wire carries and what the device allows (its limits, as
 * its worker published them): -EINVAL for what the worker would refuse, before anything is
 * sent. A kernel's own limits (fewer threads, static shared memory) are the worker's to check.
 */
static int launch_check(const struct gpux_launch *l, const struct ipc_launch_limits *lim)
{
	uint64_t threads = 1;

	for (unsigned i = 0; i < 3; i++) {
		uint32_t g = l->grid[i] ? l->grid[i] : 1, b = l->block[i] ? l->block[i] : 1;

		if (g > IPC_GRID_MAX)
			return -EINVAL;
		if (lim->max_threads_per_block && (g > lim->max_grid[i] || b > lim->max_block[i]))
			return -EINVAL;
		threads *= b;
	}
	if (lim->max_threads_per_block &&
	    (threads > lim->max_threads_per_block || l->shared_bytes > lim->max_shared_per_block))
		return -EINVAL;
	return 0;
}

/* Lock held: send the worker what the request needs, then the request. */
static int send_submit(gpux_module *m, const char *kernel, const struct gpux_launch *l,
		       const struct gpux_arg *args, uint32_t nargs, uint32_t device,
		       struct gpux_req *r)
{
	gpux_ctx *ctx = m->ctx;
	const struct ipc_status_page *page = ctx->devs[device].status;
	struct ipc_arg wire[IPC_ARGS_MAX];
	uint8_t data[IPC_ARGS_MAX * 16];
	uint8_t *big = NULL;
	uint8_t *dp = data;
	uint32_t data_len = 0;
	bool again = true; /* it may be sent again: no device buffer but ones kept in host memory */
	struct ipc_submit s = {
		.mod_id = m->id,
		.queue = l->queue ? l->queue->id : 0,
		.nargs = nargs,
		.shared_bytes = l->shared_bytes,
		.timeout_ms = l->timeout_ms,
		.flags = l->flags,
	};
	int n, rc;

	/* A worker that writes DONE marks is told that we read them (client/replay.c). */
	if (page && (__atomic_load_n(&page->features, __ATOMIC_RELAXED) & IPC_STATUS_MARK_DONE))
		s.flags |= IPC_SUBMIT_MARK_DONE;
	for (unsigned i = 0; i < 3; i++) {
		s.grid[i] = l->grid[i] ? l->grid[i] : 1;
		s.block[i] = l->block[i] ? l->block[i] : 1;
	}
	for (uint32_t i = 0; i < nargs; i++) {
		if (args[i].kind == GPUX_ARG_DBUF) {
			/* Its memory went with the worker that held it (not -EPIPE: no retry),
			 * unless it is kept in host memory. */
			rc = cli_dbuf_sync(ctx, args[i].dbuf);
			if (rc < 0)
				return rc;
			again &= args[i].dbuf->host != NULL;
		} else if (args[i].kind != GPUX_ARG_SCALAR) {
			rc = cli_seg_sync(ctx, args[i].buf->seg, device);
			if (rc < 0)
				return rc;
		}
		data_len = ALIGN_UP(data_len, 8u) +
			   (args[i].kind == GPUX_ARG_SCALAR ? (uint32_t)args[i].size : 0);
	}
	if (data_len > sizeof(data)) {
		big = malloc(data_len);
		if (!big)
			return -ENOMEM;
		dp = big;
	}
	data_len = 0;
	for (uint32_t i = 0; i < nargs; i++) {
		const struct gpux_arg *a = &args[i];

		if (a->kind == GPUX_ARG_SCALAR) {
			data_len = ALIGN_UP(data_len, 8u);
			wire[i] = (struct ipc_arg){ .kind = a->kind,
						    .offset = data_len,
						    .size = a->size };
			memcpy(dp + data_len, a->value, a->size);
			data_len += (uint32_t)a->size;
		} else if (a->kind == GPUX_ARG_DBUF) {
			wire[i] = (struct ipc_arg){
				.kind = a->kind,
				.ref = a->dbuf->id,
				.offset = a->offset,
				.size = a->size,
			};
		} else {
			wire[i] = (struct ipc_arg){
				.kind = a->kind,
				.flags = a->flags,
				.ref = a->buf->seg->id,
				.offset = a->buf->offset + a->offset,
				.size = a->size,
			};
		}
	}
	s.data_len = data_len;
	rc = cli_module_sync(ctx, m, device);
	if (rc == 0)
		rc = cli_queue_sync_for(ctx, l->queue, device);
	/* Its id holds a word of the channel's marks (client/replay.c). */
	if (rc == 0)
		rc = cli_req_word_take(ctx, r, device);
	if (rc < 0) {
		free(big);
		return rc;
	}
	n = ipc_encode_submit(ctx->sbuf, IPC_MSG_MAX, r->id, &s, wire, kernel, dp);
	free(big);
	if (n < 0)
		return n;
	rc = cli_send(ctx, device, ctx->sbuf, (size_t)n, NULL, 0);
	if (rc == 0) {
		r->chan_gen = ctx->devs[device].chan_gen;
		r->seq = ++ctx->send_seq;
		ctx->devs[device].inflight++;
		if (again)
			cli_req_keep(r, ctx->sbuf, (size_t)n);
	} else {
		cli_req_word_drop(ctx, r);
	}
	return rc;
}

GPUX_EXPORT gpux_status gpux_submit(gpux_module *m, const char *kernel, const struct gpux_launch *l,
				    const struct gpux_arg *args, uint32_t nargs, gpux_req **ret_req)
{
	gpux_ctx *ctx;
	struct gpux_req *r = NULL;
	uint32_t device, dbuf_device;
	static const struct ipc_launch_limits any = { 0 };
	gpux_status st;
	size_t klen;
	int rc;

	if (!cli_alive(m, CLI_MOD_MAGIC) || !kernel || !l || !ret_req ||
	    (l->flags & ~(uint32_t)GPUX_LAUNCH_TIMED) || launch_check(l, &any) < 0 ||
	    (l->queue && !cli_alive(l->queue, CLI_QUEUE_MAGIC)))
		return GPUX_E_INVAL;
	klen = strlen(kernel);
	if (klen == 0 || klen > IPC_KERNEL_NAME_MAX)
		return GPUX_E_INVAL;
	ctx = m->ctx;
	st = check_args(ctx, args, nargs, &dbuf_device);
	if (st < 0)
		return st;
	if (l->queue && l->queue->ctx != ctx)
		return GPUX_E_INVAL;
	/* Device buffers decide the device: a launch that names another is a mistake. */
	device = l->queue ? l->queue->device : l->device;
	if (dbuf_device != GPUX_ANY && device != GPUX_ANY && device != dbuf_device)
		return GPUX_E_INVAL;

	(void)pthread_mutex_lock(&ctx->lock);
	rc = cli_ensure(ctx);
	if (rc < 0)
		goto out;
	/* Twice at most: a worker that died just as we sent gets the request again. */
	for (unsigned attempt = 0; attempt < 2; attempt++) {
		device = l->queue ? l->queue->device : l->device;
		if (device == GPUX_ANY)
			device = dbuf_device;
		if (device == GPUX_ANY) {
			rc = pick_device(ctx, args, nargs, &device);
			if (rc < 0)
				goto out;
		}
		rc = cli_device_wait(ctx, device, mono_ns() + CLI_DEVICE_WAIT_NS);
		if (rc < 0)
			goto out;
		rc = launch_check(l, &ctx->devs[device].limits);
		if (rc < 0)
			goto out;
		rc = cli_room_wait(ctx, device);
		if (rc < 0)
			goto out;
		if (!r) {
			r = cli_req_new(ctx, device, false);
			if (!r) {
				rc = -ENOMEM;
				goto out;
			}
		}
		r->device = device;
		/* Free to go to any device should it run again, as it is now. */
		r->any = !l->queue && l->device == GPUX_ANY && dbuf_device == GPUX_ANY;
		rc = send_submit(m, kernel, l, args, nargs, device, r);
		if (rc != -EPIPE)
			break;
	}
	if (rc == 0)
		*ret_req = r;
out:
	/* A request made on the first attempt is ours to free when the second fails. */
	if (rc < 0 && r)
		cli_req_release(r);
	(void)pthread_mutex_unlock(&ctx->lock);
	return cli_status_from_errno(rc);
}

/* When a wait of timeout_ms ends; 0: never (negative, or beyond any clock this side of
 * centuries). */
static uint64_t wait_deadline(int64_t timeout_ms)
{
	uint64_t now = mono_ns();

	if (timeout_ms < 0 || (uint64_t)timeout_ms >= (UINT64_MAX - now - 1) / NSEC_PER_MSEC)
		return 0;
	return now + (uint64_t)timeout_ms * NSEC_PER_MSEC + 1;
}

GPUX_EXPORT gpux_status gpux_wait(gpux_req *r, int64_t timeout_ms)
{
	gpux_ctx *ctx;
	gpux_status st;
	int rc;

	if (!cli_alive(r, CLI_REQ_MAGIC))
		return GPUX_E_INVAL;
	ctx = r->ctx;
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	if (r->fork_gen != cli_fork_gen && !r->done) {
		(void)pthread_mutex_unlock(&ctx->lock);
		return GPUX_E_INVAL;
	}
	rc = cli_req_wait(r, wait_deadline(timeout_ms));
	if (rc == -ETIMEDOUT)
		st = GPUX_E_AGAIN;
	else
		st = rc < 0 ? cli_status_from_errno(rc) : r->status;
	(void)pthread_mutex_unlock(&ctx->lock);
	return st;
}

GPUX_EXPORT gpux_status gpux_test(gpux_req *r)
{
	gpux_ctx *ctx;
	gpux_status st;

	if (!cli_alive(r, CLI_REQ_MAGIC))
		return GPUX_E_INVAL;
	ctx = r->ctx;
	(void)pthread_mutex_lock(&ctx->lock);
	/* In a child, the parent's requests end here (GPUX_E_INVAL), as in gpux_wait(). */
	cli_after_fork(ctx);
	if (!r->done && !ctx->reader && r->fork_gen == cli_fork_gen) {
		ctx->taking_for = r;
		cli_pump(ctx);
		ctx->taking_for = NULL;
	}
	st = r->done ? r->status : GPUX_E_AGAIN;
	(void)pthread_mutex_unlock(&ctx->lock);
	return st;
}

GPUX_EXPORT bool gpux_req_done(gpux_req *r)
{
	bool done;

	if (!cli_alive(r, CLI_REQ_MAGIC))
		return false;
	(void)pthread_mutex_lock(&r->ctx->lock);
	/* In a child, the parent's requests are finished here, as by every other call. */
	cli_after_fork(r->ctx);
	done = r->done;
	(void)pthread_mutex_unlock(&r->ctx->lock);
	return done;
}

GPUX_EXPORT const char *gpux_req_message(gpux_req *r)
{
	const char *m;

	if (!cli_alive(r, CLI_REQ_MAGIC))
		return "";
	(void)pthread_mutex_lock(&r->ctx->lock);
	cli_after_fork(r->ctx);
	m = r->done && r->message ? r->message : "";
	(void)pthread_mutex_unlock(&r->ctx->lock);
	return m;
}

GPUX_EXPORT gpux_status gpux_req_times(gpux_req *r, struct gpux_times *ret_times)
{
	gpux_status st = GPUX_E_AGAIN;

	if (!cli_alive(r, CLI_REQ_MAGIC) || !ret_times)
		return GPUX_E_INVAL;
	(void)pthread_mutex_lock(&r->ctx->lock);
	cli_after_fork(r->ctx);
	if (r->done) {
		*ret_times = r->times;
		st = GPUX_OK;
	}
	(void)pthread_mutex_unlock(&r->ctx->lock);
	return st;
}

GPUX_EXPORT uint32_t gpux_req_device(gpux_req *r)
{
	return cli_alive(r, CLI_REQ_MAGIC) ? r->device : GPUX_ANY;
}

GPUX_EXPORT void gpux_req_free(gpux_req *r)
{
	gpux_ctx *ctx;

	if (!cli_alive(r, CLI_REQ_MAGIC))
		return;
	ctx = r->ctx;
	(void)pthread_mutex_lock(&ctx->lock);
	/* Again under the lock, and after the wait: another thread may free it meanwhile. */
	if (cli_alive(r, CLI_REQ_MAGIC) && !r->done && r->fork_gen == cli_fork_gen &&
	    ctx->fork_gen == cli_fork_gen)
		(void)cli_req_wait(r, 0);
	if (cli_alive(r, CLI_REQ_MAGIC))
		cli_req_release(r);
	(void)pthread_mutex_unlock(&ctx->lock);
}

GPUX_EXPORT gpux_status gpux_run(gpux_module *m, const char *kernel, const struct gpux_launch *l,
				 const struct gpux_arg *args, uint32_t nargs)
{
	gpux_req *r;
	gpux_status st = gpux_submit(m, kernel, l, args, nargs, &r);

	if (st < 0)
		return st;
	st = gpux_wait(r, -1);
	gpux_req_free(r);
	return st;
}

int cli_call(gpux_ctx *ctx, uint32_t device, uint16_t type, const void *payload, size_t len,
	     uint64_t *ret_gen, gpux_status *ret_status, char **ret_msg)
{
	struct gpux_req *r;
	int n, rc;

	for (unsigned attempt = 0;; attempt++) {
		/* A call waits for its answer, but many threads may make calls at once. */
		rc = cli_room_wait(ctx, device);
		if (rc < 0)
			return rc;
		r = cli_req_new(ctx, device, true);
		if (!r)
			return -ENOMEM;
		n = ipc_encode(ctx->sbuf, IPC_MSG_MAX, type, r->id, 0, payload, len, NULL, 0);
		rc = n < 0 ? n : cli_send(ctx, device, ctx->sbuf, (size_t)n, NULL, 0);
		if (rc == 0) {
			r->chan_gen = *ret_gen = ctx->devs[device].chan_gen;
			(void)cli_req_wait(r, 0);
			/* Its worker died before it answered: what it made (a queue, a device
			 * buffer) went with it, if it made it at all; asked again of the next. */
			if (r->status == GPUX_E_WORKER_LOST && attempt + 1 < CLI_RESEND_MAX) {
				cli_req_release(r);
				rc = cli_device_wait(ctx, device, mono_ns() + CLI_DEVICE_WAIT_NS);
				if (rc < 0)
					return rc;
				continue;
			}
			*ret_status = r->status;
			if (ret_msg && r->status < 0 && r->message)
				*ret_msg = strdup(r->message);
		}
		cli_req_release(r);
		return rc;
	}
}
