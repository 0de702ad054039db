/* SPDX-License-Identifier: MIT */
/* client/queue.c: queues, each one stream of one device, opened again after a worker restart. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "macro.h"

/* The options as the worker takes them: checked against the range and gpuxd's policy. */
static int opts_check(const gpux_ctx *ctx, const struct gpux_queue_opts *in, struct cli_qopts *ret)
{
	struct gpux_queue_opts o = { .size = sizeof(o) };

	*ret = (struct cli_qopts){ 0 };
	if (!in)
		return 0;
	if (in->size < sizeof(o))
		return -EINVAL;
	for (size_t i = sizeof(o); i < in->size; i++)
		if (((const uint8_t *)in)[i])
			return -EINVAL;
	memcpy(&o, in, sizeof(o));
	if ((o.flags & ~(uint32_t)GPUX_QUEUE_PRIORITY) || o.share > GPUX_SHARE_MAX ||
	    o.reserved[0] || o.reserved[1])
		return -EINVAL;
	if (o.flags & GPUX_QUEUE_PRIORITY) {
		if (o.priority < GPUX_PRIORITY_MIN || o.priority > GPUX_PRIORITY_MAX)
			return -EINVAL;
		if (o.priority > ctx->prio_max)
			return -EACCES;
	}
	*ret = (struct cli_qopts){
		.set = (o.flags & GPUX_QUEUE_PRIORITY) || o.share,
		.flags = o.flags & GPUX_QUEUE_PRIORITY,
		.priority = o.flags & GPUX_QUEUE_PRIORITY ? o.priority : 0,
		.share = o.share,
	};
	return 0;
}

/* The priority requests with these options get. */
static int32_t opts_priority(const gpux_ctx *ctx, const struct cli_qopts *o)
{
	return o->flags & IPC_QUEUE_PRIORITY ? o->priority : ctx->prio_default;
}

void cli_urgent_update(gpux_ctx *ctx)
{
	bool urgent = opts_priority(ctx, &ctx->dq) > 0;

	for (gpux_queue *q = ctx->queues; q && !urgent; q = q->next)
		urgent = opts_priority(ctx, &q->opts) > 0;
	ctx->urgent = urgent;
}

/* Lock held: tell device's worker queue `id`'s options (id 0: the default queue's), with
 * request id `req` (0: no answer). */
static int send_config(gpux_ctx *ctx, uint32_t device, uint32_t id, const struct cli_qopts *o,
		       uint32_t req)
{
	struct ipc_queue_config c = {
		.queue = id,
		.priority = o->priority,
		.share = o->share,
		.flags = o->flags,
	};
	int n = ipc_encode_queue_config(ctx->sbuf, IPC_MSG_MAX, req, &c);

	if (n < 0)
		return n;
	return cli_send(ctx, device, ctx->sbuf, (size_t)n, NULL, 0);
}

static int send_open(gpux_ctx *ctx, gpux_queue *q, uint32_t id)
{
	struct ipc_queue_msg m = { .queue = q->id };
	int n = ipc_encode_queue_open(ctx->sbuf, IPC_MSG_MAX, id, &m);
	int r;

	if (n < 0)
		return n;
	r = cli_send(ctx, q->device, ctx->sbuf, (size_t)n, NULL, 0);
	if (r == 0 && q->opts.set)
		r = send_config(ctx, q->device, q->id, &q->opts, 0);
	if (r == 0)
		q->sent = ctx->devs[q->device].chan_gen;
	return r;
}

/* Lock held: open it on the current channel (after a restart) without waiting. */
static int queue_sync(gpux_ctx *ctx, gpux_queue *q)
{
	if (q->sent == ctx->devs[q->device].chan_gen)
		return 0;
	return send_open(ctx, q, 0);
}

int cli_queue_sync_for(gpux_ctx *ctx, gpux_queue *q, uint32_t device)
{
	struct cli_dev *d = &ctx->devs[device];
	int r;

	if (q)
		return queue_sync(ctx, q);
	if (!ctx->dq.set || d->dq_sent == d->chan_gen)
		return 0;
	r = send_config(ctx, device, 0, &ctx->dq, 0);
	if (r == 0)
		d->dq_sent = d->chan_gen;
	return r;
}

GPUX_EXPORT gpux_status gpux_queue_open_ex(gpux_ctx *ctx, uint32_t device,
					   const struct gpux_queue_opts *opts,
					   gpux_queue **ret_queue)
{
	struct ipc_queue_msg m;
	struct ipc_queue_config c;
	gpux_status st;
	gpux_queue *q;
	int rc;

	if (!ctx || !ret_queue || device == GPUX_ANY)
		return GPUX_E_INVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return GPUX_E_NOMEM;
	(void)pthread_mutex_lock(&ctx->lock);
	rc = cli_device_wait(ctx, device, mono_ns() + CLI_DEVICE_WAIT_NS);
	/* gpuxd's policy is known once connected. */
	if (rc == 0)
		rc = opts_check(ctx, opts, &q->opts);
	if (rc < 0) {
		st = cli_status_from_errno(rc);
		goto err;
	}
	q->ctx = ctx;
	q->device = device;
	q->id = ++ctx->next_queue_id;
	m = (struct ipc_queue_msg){ .queue = q->id };
	rc = cli_call(ctx, device, IPC_QUEUE_OPEN, &m, sizeof(m), &q->sent, &st, NULL);
	if (rc == 0 && st == GPUX_OK && q->opts.set) {
		uint64_t gen;

		c = (struct ipc_queue_config){
			.queue = q->id,
			.priority = q->opts.priority,
			.share = q->opts.share,
			.flags = q->opts.flags,
		};
		rc = cli_call(ctx, device, IPC_QUEUE_CONFIG, &c, sizeof(c), &gen, &st, NULL);
		/* A channel that changed between the two (a new worker, which does not know the
		 * queue): opened again, options and all, by the queue's first request. */
		if (rc == 0 && gen != q->sent) {
			q->sent = 0;
			st = GPUX_OK;
		}
		if (rc == 0 && st < 0) {
			struct ipc_queue_msg close = { .queue = q->id };

			cli_send_drop(ctx, device, q->sent, IPC_QUEUE_CLOSE, &close, sizeof(close));
		}
	}
	if (rc < 0)
		st = cli_status_from_errno(rc);
	if (st < 0)
		goto err;
	q->magic = CLI_QUEUE_MAGIC;
	LIST_PREPEND(ctx->queues, q);
	cli_urgent_update(ctx);
	(void)pthread_mutex_unlock(&ctx->lock);
	*ret_queue = q;
	return GPUX_OK;
err:
	(void)pthread_mutex_unlock(&ctx->lock);
	free(q);
	return st;
}

GPUX_EXPORT gpux_status gpux_queue_open(gpux_ctx *ctx, uint32_t device, gpux_queue **ret_queue)
{
	return gpux_queue_open_ex(ctx, device, NULL, ret_queue);
}

GPUX_EXPORT gpux_status gpux_set_default_queue(gpux_ctx *ctx, const struct gpux_queue_opts *opts)
{
	struct cli_qopts o;
	int rc;

	if (!ctx)
		return GPUX_E_INVAL;
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	rc = cli_ensure(ctx);
	if (rc == 0)
		rc = opts_check(ctx, opts, &o);
	if (rc == 0) {
		/* Sent to each device before its next request on the default queue; a default
		 * queue told options before is told the defaults again. */
		o.set = o.set || ctx->dq.set;
		ctx->dq = o;
		for (uint32_t i = 0; i < IPC_DEVICES_MAX; i++)
			ctx->devs[i].dq_sent = 0;
		cli_urgent_update(ctx);
	}
	(void)pthread_mutex_unlock(&ctx->lock);
	return cli_status_from_errno(rc);
}

GPUX_EXPORT gpux_status gpux_priority_limits(gpux_ctx *ctx, int32_t *ret_max, int32_t *ret_default)
{
	int rc;

	if (!ctx || !ret_max || !ret_default)
		return GPUX_E_INVAL;
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	rc = cli_ensure(ctx);
	if (rc == 0) {
		*ret_max = ctx->prio_max;
		*ret_default = ctx->prio_default;
	}
	(void)pthread_mutex_unlock(&ctx->lock);
	return cli_status_from_errno(rc);
}

/* Lock held. `retire`: keep the handle to recognize it (client/handle.c). */
static void queue_free(gpux_ctx *ctx, gpux_queue *q, bool retire)
{
	struct ipc_queue_msg m = { .queue = q->id };

	cli_send_drop(ctx, q->device, q->sent, IPC_QUEUE_CLOSE, &m, sizeof(m));
	LIST_REMOVE(ctx->queues, q);
	if (retire)
		cli_retire(ctx, q);
	else
		free(q);
}

GPUX_EXPORT void gpux_queue_free(gpux_queue *q)
{
	gpux_ctx *ctx;

	if (!cli_alive(q, CLI_QUEUE_MAGIC))
		return;
	ctx = q->ctx;
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	/* Again under the lock: another thread may have freed it meanwhile. */
	if (cli_alive(q, CLI_QUEUE_MAGIC)) {
		queue_free(ctx, q, true);
		cli_urgent_update(ctx);
	}
	(void)pthread_mutex_unlock(&ctx->lock);
}

void cli_queues_free_all(gpux_ctx *ctx)
{
	while (ctx->queues)
		queue_free(ctx, ctx->queues, false);
}
