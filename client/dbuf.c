/* SPDX-License-Identifier: MIT */
/* client/dbuf.c: device buffers, which stay on one GPU between requests, and copies to and from them. */
#include <errno.h>
#include <stdlib.h>

#include "cli.h"
#include "macro.h"

/* Lock held: tell device's worker of d, kept in host memory, on its channel now (gen). */
static int host_send(gpux_ctx *ctx, gpux_dbuf *d, uint32_t id, gpux_status *ret_status,
		     char **ret_msg)
{
	struct ipc_dbuf_host h = {
		.dbuf_id = d->id,
		.size = d->size,
		.seg_id = d->host->seg->id,
		.seg_offset = d->host->offset,
	};
	int n, rc = cli_seg_sync(ctx, d->host->seg, d->device);

	if (rc < 0)
		return rc;
	if (ret_status)
		return cli_call(ctx, d->device, IPC_DBUF_HOST, &h, sizeof(h), &d->chan_gen,
				ret_status, ret_msg);
	n = ipc_encode_dbuf_host(ctx->sbuf, IPC_MSG_MAX, id, &h);
	rc = n < 0 ? n : cli_send(ctx, d->device, ctx->sbuf, (size_t)n, NULL, 0);
	if (rc == 0)
		d->chan_gen = ctx->devs[d->device].chan_gen;
	return rc;
}

int cli_dbuf_sync(gpux_ctx *ctx, gpux_dbuf *d)
{
	const struct cli_dev *dev = &ctx->devs[d->device];

	if (d->owner != cli_fork_gen && !d->host)
		return -ECONNRESET;
	if (d->chan_gen == dev->chan_gen && dev->chan_fd >= 0)
		return 0;
	/* Its memory went with the worker that held it; one in host memory is handed over (no
	 * answer: a refusal shows in the requests that use it). */
	if (!d->host)
		return -ESTALE;
	if (dev->chan_fd < 0)
		return -EPIPE;
	return host_send(ctx, d, 0, NULL, NULL);
}

GPUX_EXPORT gpux_status gpux_dbuf_alloc_ex(gpux_ctx *ctx, uint32_t device, size_t size,
					   uint32_t flags, gpux_dbuf **ret_dbuf, char **ret_msg)
{
	struct ipc_dbuf_alloc a;
	gpux_status st;
	gpux_dbuf *d;
	int rc;

	if (!ctx || !ret_dbuf || size == 0 || device == GPUX_ANY || (flags & ~GPUX_DBUF_HOST))
		return GPUX_E_INVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return GPUX_E_NOMEM;
	/* Kept in host memory: a shared buffer of ours that kernels use in place. */
	if (flags & GPUX_DBUF_HOST) {
		st = gpux_buf_alloc(ctx, size, &d->host);
		if (st < 0) {
			free(d);
			return st;
		}
	}
	(void)pthread_mutex_lock(&ctx->lock);
	rc = cli_device_wait(ctx, device, mono_ns() + CLI_DEVICE_WAIT_NS);
	if (rc < 0) {
		st = cli_status_from_errno(rc);
		goto err;
	}
	d->ctx = ctx;
	d->id = ++ctx->next_obj_id;
	d->device = device;
	d->size = size;
	if (d->host) {
		/* A worker that died as it was asked leaves the segment unknown to the next. */
		for (unsigned attempt = 0; attempt < CLI_RESEND_MAX; attempt++) {
			rc = host_send(ctx, d, 0, &st, ret_msg);
			if (rc < 0 || st == 0 || d->host->seg->sent[device] == d->chan_gen)
				break;
			free(ret_msg ? *ret_msg : NULL);
			if (ret_msg)
				*ret_msg = NULL;
		}
	} else {
		a = (struct ipc_dbuf_alloc){ .dbuf_id = d->id, .size = size };
		rc = cli_call(ctx, device, IPC_DBUF_ALLOC, &a, sizeof(a), &d->chan_gen, &st,
			      ret_msg);
	}
	if (rc < 0)
		st = cli_status_from_errno(rc);
	if (st < 0)
		goto err;
	cli_dbuf_add(ctx, d);
	(void)pthread_mutex_unlock(&ctx->lock);
	*ret_dbuf = d;
	return GPUX_OK;
err:
	if (d->host)
		cli_buf_free(ctx, d->host);
	(void)pthread_mutex_unlock(&ctx->lock);
	free(d);
	return st;
}

void cli_dbuf_add(gpux_ctx *ctx, gpux_dbuf *d)
{
	d->ctx = ctx;
	d->magic = CLI_DBUF_MAGIC;
	d->owner = cli_fork_gen;
	LIST_PREPEND(ctx->dbufs, d);
}

GPUX_EXPORT gpux_status gpux_dbuf_alloc(gpux_ctx *ctx, uint32_t device, size_t size,
					gpux_dbuf **ret_dbuf)
{
	return gpux_dbuf_alloc_ex(ctx, device, size, 0, ret_dbuf, NULL);
}

/* Lock held. `retire`: keep the handle to recognize it (client/handle.c). */
static void dbuf_free(gpux_ctx *ctx, gpux_dbuf *d, bool retire)
{
	struct ipc_dbuf_free f = { .dbuf_id = d->id };

	cli_send_drop(ctx, d->device, d->chan_gen, IPC_DBUF_FREE, &f, sizeof(f));
	LIST_REMOVE(ctx->dbufs, d);
	/* The memory of one kept in host memory. */
	if (d->host)
		cli_buf_free(ctx, d->host);
	d->host = NULL;
	if (retire)
		cli_retire(ctx, d);
	else
		free(d);
}

GPUX_EXPORT void gpux_dbuf_free(gpux_dbuf *d)
{
	gpux_ctx *ctx;

	if (!cli_alive(d, CLI_DBUF_MAGIC))
		return;
	ctx = d->ctx;
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	/* Again under the lock: another thread may have freed it meanwhile. */
	if (cli_alive(d, CLI_DBUF_MAGIC))
		dbuf_free(ctx, d, true);
	(void)pthread_mutex_unlock(&ctx->lock);
}

void cli_dbufs_free_all(gpux_ctx *ctx)
{
	while (ctx->dbufs)
		dbuf_free(ctx, ctx->dbufs, false);
}

GPUX_EXPORT size_t gpux_dbuf_size(const gpux_dbuf *d)
{
	return cli_alive(d, CLI_DBUF_MAGIC) ? (size_t)d->size : 0;
}

GPUX_EXPORT uint32_t gpux_dbuf_device(const gpux_dbuf *d)
{
	return cli_alive(d, CLI_DBUF_MAGIC) ? d->device : GPUX_ANY;
}

static gpux_status copy(uint32_t dir, gpux_dbuf *d, uint64_t d_off, gpux_buf *b, uint64_t b_off,
			uint64_t size, gpux_queue *q, gpux_req **ret_req)
{
	gpux_ctx *ctx;
	struct gpux_req *r;
	struct ipc_copy c;
	int n, rc;

	if (!cli_alive(d, CLI_DBUF_MAGIC) || !cli_alive(b, CLI_BUF_MAGIC) ||
	    (q && !cli_alive(q, CLI_QUEUE_MAGIC)) || !ret_req || b->ctx != d->ctx || size == 0 ||
	    !range_ok(d_off, size, d->size) || !range_ok(b_off, size, b->size) ||
	    (q && (q->ctx != d->ctx || q->device != d->device)) ||
	    (dir == IPC_COPY_FROM_DBUF && b->seg->frozen) ||
	    (dir == IPC_COPY_TO_DBUF && d->read_only))
		return GPUX_E_INVAL;
	ctx = d->ctx;
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	rc = cli_ensure(ctx);
	/* One kept in host memory waits for a worker (a restarted one gets it). */
	if (rc == 0 && d->host)
		rc = cli_device_wait(ctx, d->device, mono_ns() + CLI_DEVICE_WAIT_NS);
	if (rc == 0)
		rc = cli_room_wait(ctx, d->device);
	if (rc == 0)
		rc = cli_dbuf_sync(ctx, d);
	if (rc == 0)
		rc = cli_seg_sync(ctx, b->seg, d->device);
	if (rc == 0)
		rc = cli_queue_sync_for(ctx, q, d->device);
	if (rc < 0)
		goto out;
	r = cli_req_new(ctx, d->device, false);
	if (!r) {
		rc = -ENOMEM;
		goto out;
	}
	c = (struct ipc_copy){
		.dbuf_id = d->id,
		.dbuf_offset = d_off,
		.seg_id = b->seg->id,
		.seg_offset = b->offset + b_off,
		.size = size,
		.dir = dir,
		.queue = q ? q->id : 0,
	};
	/* Its id holds a word of the channel's marks (client/replay.c). */
	rc = cli_req_word_take(ctx, r, d->device);
	n = rc < 0 ? rc : ipc_encode_copy(ctx->sbuf, IPC_MSG_MAX, r->id, &c);
	rc = n < 0 ? n : cli_send(ctx, d->device, ctx->sbuf, (size_t)n, NULL, 0);
	if (rc < 0) {
		cli_req_release(r);
		goto out;
	}
	r->chan_gen = ctx->devs[d->device].chan_gen;
	r->seq = ++ctx->send_seq;
	ctx->devs[d->device].inflight++;
	/* One kept in host memory lives on in a restarted worker: the copy may run again. */
	if (d->host)
		cli_req_keep(r, ctx->sbuf, (size_t)n);
	*ret_req = r;
out:
	(void)pthread_mutex_unlock(&ctx->lock);
	return cli_status_from_errno(rc);
}

GPUX_EXPORT gpux_status gpux_dbuf_write(gpux_dbuf *dst, uint64_t dst_offset, gpux_buf *src,
					uint64_t src_offset, uint64_t size, gpux_queue *queue,
					gpux_req **ret_req)
{
	return copy(IPC_COPY_TO_DBUF, dst, dst_offset, src, src_offset, size, queue, ret_req);
}

GPUX_EXPORT gpux_status gpux_dbuf_read(gpux_buf *dst, uint64_t dst_offset, gpux_dbuf *src,
				       uint64_t src_offset, uint64_t size, gpux_queue *queue,
				       gpux_req **ret_req)
{
	return copy(IPC_COPY_FROM_DBUF, src, src_offset, dst, dst_offset, size, queue, ret_req);
}
