/* SPDX-License-Identifier: MIT */
/* worker/core/dbuf.c: clients' device buffers (kept on the device between requests) and copies. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "wrk.h"

void wrk_dbuf_unref(struct wrk *w, struct wrk_dbuf *d)
{
	if (!d || --d->refs > 0)
		return;
	if (d->global) {
		wrk_module_unref(w, d->global);
	} else if (d->map) {
		if (!d->ptr)
			w->reg.dbufs--;
		wrk_mapping_unref(w, d->map);
	} else {
		w->be->dev_free(w->dev, d->ptr);
		w->stats.dbuf_bytes -= d->size;
		wrk_usage_sub(w, d->usage_slot, 0, d->size);
		wrk_user_credit(w, d->ledger_row, d->size);
	}
	free(d);
}

/* The client lets go of its id; requests still using it keep it a while. */
static void dbuf_release(struct wrk_client *c, struct wrk_dbuf *d)
{
	if (!d->global && !d->map)
		c->dbuf_bytes -= d->size;
	wrk_client_row_update(c);
	wrk_dbuf_unref(c->w, d);
}

void wrk_dbufs_free(struct wrk_client *c)
{
	struct wrk_dbuf *d;

	while ((d = ipc_map_pop(&c->dbufs)))
		dbuf_release(c, d);
	ipc_map_done(&c->dbufs);
}

static void dbuf_alloc(struct wrk_client *c, uint32_t id, const struct ipc_dbuf_alloc *a)
{
	struct wrk *w = c->w;
	struct wrk_dbuf *d;
	char *msg = NULL;
	void *ptr = NULL;
	gpux_status r;
	int row;

	if (ipc_map_size(&c->dbufs) >= WRK_CLIENT_DBUFS_MAX) {
		wrk_reply(c, id, GPUX_E_QUOTA, "too many device buffers");
		return;
	}
	/* dbuf_bytes never passes the quota; the size may be anything up to 2^64 - 1. */
	if (a->size > w->opts.quota_device - c->dbuf_bytes) {
		msg = wrk_strdup_printf("a device buffer of %llu bytes would pass the client's "
					"device quota (%llu of %llu bytes in use)",
					(unsigned long long)a->size,
					(unsigned long long)c->dbuf_bytes,
					(unsigned long long)w->opts.quota_device);
		wrk_reply(c, id, GPUX_E_QUOTA, msg);
		free(msg);
		return;
	}
	/* The user's over all workers: its cached inputs here give way first. */
	r = wrk_user_charge(w, c->uid, a->size, &row, &msg);
	if (r == GPUX_E_QUOTA && wrk_dcache_reclaim_user(w, c->uid) > 0) {
		free(msg);
		msg = NULL;
		r = wrk_user_charge(w, c->uid, a->size, &row, &msg);
	}
	if (r < 0) {
		wrk_reply(c, id, r, msg);
		free(msg);
		return;
	}
	/* Not into the reserve, cached inputs nobody uses going first. */
	r = wrk_dev_room(w, a->size, "a device buffer", &msg);
	if (r < 0 && wrk_dcache_reclaim(w) > 0) {
		free(msg);
		msg = NULL;
		r = wrk_dev_room(w, a->size, "a device buffer", &msg);
	}
	if (r == 0)
		r = wrk_dev_alloc(w, a->size, &ptr, &msg);
	d = r == 0 ? calloc(1, sizeof(*d)) : NULL;
	if (!d) {
		if (r == 0)
			w->be->dev_free(w->dev, ptr);
		wrk_user_credit(w, row, a->size);
		wrk_reply(c, id, r < 0 ? r : GPUX_E_NOMEM, msg ? msg : "out of memory");
		free(msg);
		return;
	}
	d->ledger_row = row;
	d->refs = 1;
	d->size = a->size;
	d->ptr = ptr;
	d->usage_slot = wrk_usage_add(w, c->uid, 0, d->size);
	if (ipc_map_put(&c->dbufs, a->dbuf_id, d) < 0) {
		wrk_dbuf_unref(w, d);
		wrk_reply(c, id, GPUX_E_NOMEM, "out of memory");
		return;
	}
	c->dbuf_bytes += a->size;
	wrk_client_row_update(c);
	w->stats.dbuf_bytes += a->size;
	wrk_status_publish(w);
	wrk_reply(c, id, GPUX_OK, NULL);
}

/* Where the device sees a host-kept device buffer: NULL while its segment registers. */
static void *host_ptr(const struct wrk *w, const struct wrk_dbuf *d)
{
	if (w->info.backend == GPUX_BACKEND_HOST)
		return (uint8_t *)d->map->seg.addr + d->map_offset;
	if (d->map->registering || !d->map->dev_addr)
		return NULL;
	return (void *)(uintptr_t)(d->map->dev_addr + d->map_offset);
}

int wrk_dbuf_resolve(struct wrk *w, struct wrk_dbuf *d, gpux_status *ret_status, char **ret_msg)
{
	if (d->ptr || !d->map)
		return 1;
	if (d->map->registering)
		return 0;
	d->ptr = host_ptr(w, d);
	if (!d->ptr) {
		*ret_status = GPUX_E_DEVICE;
		*ret_msg =
			wrk_strdup_printf("the device cannot reach that device buffer's pages: %s",
					  d->map->reg_error ? d->map->reg_error : "not registered");
		return -1;
	}
	w->reg.dbufs--;
	return 1;
}

/*
 * A device buffer kept in host memory: a range of the client's segment, which kernels use in
 * place as a mapped argument's pages (the host back end: the pages; CUDA: where the device
 * sees them, registered as the segment arrived). Its bytes are the client's (counted as
 * shared memory): no device quota, no reserve, and it outlives this worker. Made while its
 * segment is still being registered (off the loop), it gets its device address when that
 * ends: requests using it wait for it as for their segments (wrk_req_segments_ready()).
 */
static void dbuf_host(struct wrk_client *c, uint32_t id, const struct ipc_dbuf_host *h)
{
	struct wrk *w = c->w;
	gpux_status st = GPUX_OK;
	struct wrk_mapping *m;
	struct wrk_dbuf *d;
	char *msg = NULL;

	if (ipc_map_size(&c->dbufs) >= WRK_CLIENT_DBUFS_MAX) {
		wrk_reply(c, id, GPUX_E_QUOTA, "too many device buffers");
		return;
	}
	m = wrk_segment_range(c, h->seg_id, h->seg_offset, h->size, true, 0, &st, &msg);
	if (!m) {
		wrk_reply(c, id, st, msg);
		free(msg);
		return;
	}
	if (w->info.backend != GPUX_BACKEND_HOST && !m->registering && !m->dev_addr) {
		wrk_mapping_unref(w, m);
		wrk_reply(c, id, GPUX_E_DEVICE, "the device cannot reach that segment's pages");
		return;
	}
	d = calloc(1, sizeof(*d));
	if (!d || ipc_map_put(&c->dbufs, h->dbuf_id, d) < 0) {
		free(d);
		wrk_mapping_unref(w, m);
		wrk_reply(c, id, GPUX_E_NOMEM, "out of memory");
		return;
	}
	d->refs = 1;
	d->size = h->size;
	d->map = m;
	d->map_offset = h->seg_offset;
	d->ptr = host_ptr(w, d);
	if (!d->ptr)
		w->reg.dbufs++;
	wrk_reply(c, id, GPUX_OK, NULL);
}

/* DBUF_ALLOC, DBUF_HOST and DBUF_FREE; a negative return: the message does not decode. */
int wrk_dbuf_msg(struct wrk_client *c, const struct ipc_msg *msg)
{
	if (msg->hdr.type == IPC_DBUF_HOST) {
		struct ipc_dbuf_host h;

		if (ipc_decode_dbuf_host(msg, &h) < 0)
			return -EBADMSG;
		if (ipc_map_get(&c->dbufs, h.dbuf_id)) {
			wrk_reply(c, msg->hdr.id, GPUX_E_INVAL, "that device buffer id is in use");
			return 0;
		}
		dbuf_host(c, msg->hdr.id, &h);
		return 0;
	}
	if (msg->hdr.type == IPC_DBUF_ALLOC) {
		struct ipc_dbuf_alloc a;

		if (ipc_decode_dbuf_alloc(msg, &a) < 0)
			return -EBADMSG;
		if (ipc_map_get(&c->dbufs, a.dbuf_id)) {
			wrk_reply(c, msg->hdr.id, GPUX_E_INVAL, "that device buffer id is in use");
			return 0;
		}
		dbuf_alloc(c, msg->hdr.id, &a);
		return 0;
	} else {
		struct ipc_dbuf_free f;
		struct wrk_dbuf *d;

		if (ipc_decode_dbuf_free(msg, &f) < 0)
			return -EBADMSG;
		/* Freeing what is not there changes nothing. */
		d = ipc_map_remove(&c->dbufs, f.dbuf_id);
		if (!d)
			return 0;
		dbuf_release(c, d);
		wrk_status_publish(c->w);
		return 0;
	}
}

/* COPY: a request like a launch, in its queue: args[0] the shared range, args[1] the dbuf's. */
int wrk_copy(struct wrk_client *c, const struct ipc_msg *msg)
{
	struct ipc_copy m;
	struct wrk_req *r;
	struct wrk_arg *h, *dv;
	bool to_dbuf;
	char *why = NULL;
	gpux_status status = GPUX_OK;

	if (ipc_decode_copy(msg, &m) < 0 || msg->hdr.id == 0)
		return -EBADMSG;
	r = wrk_req_new(c, msg->hdr.id);
	if (!r)
		return 0;
	r->kind = REQ_COPY;
	(void)snprintf(r->name, sizeof(r->name), "copy");
	to_dbuf = m.dir == IPC_COPY_TO_DBUF;
	/* A request is reused: every field of its arguments is set, each counted once set. */
	h = &r->args[0];
	dv = &r->args[1];
	*h = (struct wrk_arg){
		.kind = to_dbuf ? GPUX_ARG_IN : GPUX_ARG_OUT,
		.offset = m.seg_offset,
		.len = m.size,
	};
	*dv = (struct wrk_arg){ .kind = GPUX_ARG_DBUF, .offset = m.dbuf_offset, .len = m.size };
	r->nargs = 2;
	h->map = wrk_segment_range(c, m.seg_id, m.seg_offset, m.size, !to_dbuf, 0, &status, &why);
	if (!h->map) {
		wrk_req_fail(r, status, why);
		return 0;
	}
	h->host = (uint8_t *)h->map->seg.addr + m.seg_offset;
	dv->dbuf = ipc_map_get(&c->dbufs, m.dbuf_id);
	if (!dv->dbuf || !range_ok(m.dbuf_offset, m.size, dv->dbuf->size)) {
		dv->dbuf = NULL;
		wrk_req_fail(r, GPUX_E_INVAL,
			     strdup("no such device buffer, or a range outside it"));
		return 0;
	}
	if (to_dbuf && dv->dbuf->read_only) {
		dv->dbuf = NULL;
		wrk_req_fail(r, GPUX_E_INVAL,
			     strdup("the module's variable is in read-only memory"));
		return 0;
	}
	dv->dbuf->refs++;
	wrk_req_queue(c, r, m.queue);
	return 0;
}
