/* SPDX-License-Identifier: MIT */
/* worker/core/symbol.c: questions about a module's symbols: a kernel's attributes, a variable as a device buffer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "wrk.h"

/*
 * A client asks about a module it holds, by the module's id and a name (KERNEL_ATTRS_REQ,
 * GLOBAL_REQ). A module still being built (loaded on this device by the client's first
 * request here, without waiting) makes the question wait for the build, holding the module
 * and the client; the answer is the module's failure if it failed. Only the client's own
 * modules can be asked about, and only by name: what the back end finds in that module's
 * own image, nothing else of the process.
 */
struct wrk_question {
	struct wrk_question *next;
	struct wrk_client *client; /* held */
	uint16_t type;
	uint32_t id;
	struct ipc_sym_req q;
};

/* A KERNEL_ATTRS, then the DONE. */
static void answer_attrs(struct wrk_client *c, uint32_t id, struct wrk_module *m,
			 const struct ipc_sym_req *q)
{
	struct wrk *w = c->w;
	struct ipc_kernel_attrs a = {
		.max_threads_per_block = IPC_ATTR_UNKNOWN,
		.num_regs = IPC_ATTR_UNKNOWN,
		.shared_size_bytes = IPC_ATTR_UNKNOWN,
		.const_size_bytes = IPC_ATTR_UNKNOWN,
		.local_size_bytes = IPC_ATTR_UNKNOWN,
		.max_dynamic_shared_size_bytes = IPC_ATTR_UNKNOWN,
		.ptx_version = IPC_ATTR_UNKNOWN,
		.binary_version = IPC_ATTR_UNKNOWN,
		.cache_mode_ca = IPC_ATTR_UNKNOWN,
		.preferred_shared_memory_carveout = IPC_ATTR_UNKNOWN,
		.nparams = IPC_ATTR_UNKNOWN,
	};
	_cleanup_(freep) char *msg = NULL;
	struct wrk_kernel *k;
	uint8_t buf[128];
	gpux_status st;
	int n;

	st = wrk_module_kernel(w, m, q->name, &k, &msg);
	if (st == GPUX_OK)
		st = w->be->kernel_attrs(w->dev, m->handle, &k->info, &a, &msg);
	if (st != GPUX_OK) {
		wrk_reply(c, id, st, msg ? msg : "no such kernel in the module");
		return;
	}
	n = ipc_encode_kernel_attrs(buf, sizeof(buf), id, &a);
	if (n < 0) {
		wrk_reply(c, id, GPUX_E_INVAL, "the back end's attributes do not go on the wire");
		return;
	}
	wrk_client_send(c, buf, (size_t)n);
	wrk_reply(c, id, GPUX_OK, NULL);
}

/* The variable bound to the client's device buffer id (holding the module); a GLOBAL, then
 * the DONE. */
static void answer_global(struct wrk_client *c, uint32_t id, struct wrk_module *m,
			  const struct ipc_sym_req *q)
{
	struct wrk *w = c->w;
	_cleanup_(freep) char *msg = NULL;
	struct ipc_global_info gi = { 0 };
	struct wrk_dbuf *d;
	uint8_t buf[64];
	bool read_only = false;
	void *ptr = NULL;
	gpux_status st;
	int n;

	if (ipc_map_get(&c->dbufs, q->dbuf_id)) {
		wrk_reply(c, id, GPUX_E_INVAL, "that device buffer id is in use");
		return;
	}
	if (ipc_map_size(&c->dbufs) >= WRK_CLIENT_DBUFS_MAX) {
		wrk_reply(c, id, GPUX_E_QUOTA, "too many device buffers");
		return;
	}
	st = w->be->global_get(w->dev, m->handle, q->name, &ptr, &gi.size, &read_only, &msg);
	if (st == GPUX_OK && gi.size == 0)
		st = GPUX_E_NOTFOUND;
	if (st != GPUX_OK) {
		wrk_reply(c, id, st, msg ? msg : "no such variable in the module");
		return;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		wrk_reply(c, id, GPUX_E_NOMEM, "out of memory");
		return;
	}
	d->refs = 1;
	d->ledger_row = -1; /* no memory of its own: charged to nobody */
	d->size = gi.size;
	d->ptr = ptr;
	d->read_only = read_only;
	/* Ready, and held by the client: its refs are above 0, it is in no idle list. */
	d->global = m;
	m->refs++;
	if (ipc_map_put(&c->dbufs, q->dbuf_id, d) < 0) {
		wrk_dbuf_unref(w, d);
		wrk_reply(c, id, GPUX_E_NOMEM, "out of memory");
		return;
	}
	gi.flags = read_only ? IPC_GLOBAL_READ_ONLY : 0;
	n = ipc_encode_global(buf, sizeof(buf), id, &gi);
	if (n > 0)
		wrk_client_send(c, buf, (size_t)n);
	wrk_reply(c, id, GPUX_OK, NULL);
}

/* Answer a question about m, built (or failed) by now. */
static void answer(struct wrk_client *c, uint16_t type, uint32_t id, struct wrk_module *m,
		   const struct ipc_sym_req *q)
{
	if (m->state != MOD_READY)
		wrk_reply(c, id, m->status, m->log ? m->log : "the module did not build");
	else if (type == IPC_KERNEL_ATTRS_REQ)
		answer_attrs(c, id, m, q);
	else
		answer_global(c, id, m, q);
}

int wrk_symbol_msg(struct wrk_client *c, const struct ipc_msg *msg)
{
	uint16_t type = msg->hdr.type;
	struct wrk_question *qn;
	struct wrk_modref *ref;
	struct ipc_sym_req q;
	struct wrk_module *m;
	int r;

	r = type == IPC_GLOBAL_REQ ? ipc_decode_global_req(msg, &q)
				   : ipc_decode_kernel_attrs_req(msg, &q);
	if (r < 0)
		return -EBADMSG;
	ref = ipc_map_get(&c->mods, q.mod_id);
	if (!ref) {
		wrk_reply(c, msg->hdr.id, GPUX_E_INVAL, "no such module");
		return 0;
	}
	m = ref->mod;
	if (m->state != MOD_BUILDING) {
		answer(c, type, msg->hdr.id, m, &q);
		return 0;
	}
	/* Each waits in memory: as many as a client may have requests. */
	if (c->questions >= WRK_CLIENT_INFLIGHT_MAX) {
		wrk_reply(c, msg->hdr.id, GPUX_E_QUOTA, "too many questions waiting for builds");
		return 0;
	}
	qn = calloc(1, sizeof(*qn));
	if (!qn) {
		wrk_reply(c, msg->hdr.id, GPUX_E_NOMEM, "out of memory");
		return 0;
	}
	qn->client = c;
	qn->type = type;
	qn->id = msg->hdr.id;
	qn->q = q;
	c->refs++;
	c->questions++;
	/* Being built, it holds the build's reference: never idle now. */
	m->refs++;
	qn->next = m->questions;
	m->questions = qn;
	return 0;
}

void wrk_symbols_answer(struct wrk *w, struct wrk_module *m)
{
	struct wrk_question *qn;

	while ((qn = m->questions)) {
		m->questions = qn->next;
		if (!qn->client->gone)
			answer(qn->client, qn->type, qn->id, m, &qn->q);
		qn->client->questions--;
		wrk_client_unref(qn->client);
		wrk_module_unref(w, m);
		free(qn);
	}
}
