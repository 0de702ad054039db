/* SPDX-License-Identifier: MIT */
/* client/queue.c: queues, each one stream of one device, opened again after a worker restart. */
#include <errno.h>
#include <stdlib.h>

#include "cli.h"
#include "macro.h"

static int send_open(gpux_ctx *ctx, gpux_queue *q, uint32_t id)
{
	struct ipc_queue_msg m = { .queue = q->id };
	int n = ipc_encode_queue_open(ctx->sbuf, IPC_MSG_MAX, id, &m);
	int r;

	if (n < 0)
		return n;
	r = cli_send(ctx, q->device, ctx->sbuf, (size_t)n, NULL, 0);
	if (r == 0)
		q->sent = ctx->devs[q->device].chan_gen;
	return r;
}

/* Lock held: open it on the current channel (after a restart) without waiting. */
int cli_queue_sync(gpux_ctx *ctx, gpux_queue *q)
{
	if (q->sent == ctx->devs[q->device].chan_gen)
		return 0;
	return send_open(ctx, q, 0);
}

GPUX_EXPORT gpux_status gpux_queue_open(gpux_ctx *ctx, uint32_t device, gpux_queue **ret_queue)
{
	struct ipc_queue_msg m;
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
	if (rc < 0) {
		st = cli_status_from_errno(rc);
		goto err;
	}
	q->ctx = ctx;
	q->device = device;
	q->id = ++ctx->next_queue_id;
	m = (struct ipc_queue_msg){ .queue = q->id };
	rc = cli_call(ctx, device, IPC_QUEUE_OPEN, &m, sizeof(m), &q->sent, &st, NULL);
	if (rc < 0)
		st = cli_status_from_errno(rc);
	if (st < 0)
		goto err;
	q->magic = CLI_QUEUE_MAGIC;
	LIST_PREPEND(ctx->queues, q);
	(void)pthread_mutex_unlock(&ctx->lock);
	*ret_queue = q;
	return GPUX_OK;
err:
	(void)pthread_mutex_unlock(&ctx->lock);
	free(q);
	return st;
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
	if (cli_alive(q, CLI_QUEUE_MAGIC))
		queue_free(ctx, q, true);
	(void)pthread_mutex_unlock(&ctx->lock);
}

void cli_queues_free_all(gpux_ctx *ctx)
{
	while (ctx->queues)
		queue_free(ctx, ctx->queues, false);
}
