/* SPDX-License-Identifier: MIT */
/* client/symbol.c: questions about a module's symbols: a kernel's attributes, a variable as a device buffer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "macro.h"

/*
 * Lock held: ask device's worker about `name` of module m (a KERNEL_ATTRS_REQ or GLOBAL_REQ,
 * q filled but for the module and name) and wait for the answer. The module goes first, on
 * the channel the question takes, when that worker does not have it yet: the worker answers
 * once it is built. Returns 0 with *ret_status the worker's answer and *ret_req the request
 * (to release), or -errno when the question could not be asked.
 */
static int ask(gpux_ctx *ctx, gpux_module *m, uint32_t device, uint16_t type, struct ipc_sym_req *q,
	       const char *name, struct gpux_req **ret_req)
{
	struct gpux_req *r;
	size_t len = strlen(name);
	int n, rc;

	rc = cli_device_wait(ctx, device, mono_ns() + CLI_DEVICE_WAIT_NS);
	if (rc == 0)
		rc = cli_room_wait(ctx, device);
	if (rc == 0)
		rc = cli_module_sync(ctx, m, device);
	if (rc < 0)
		return rc;
	r = cli_req_new(ctx, device, true);
	if (!r)
		return -ENOMEM;
	q->mod_id = m->id;
	q->name_len = (uint32_t)len;
	memcpy(q->name, name, len + 1);
	n = ipc_encode(ctx->sbuf, IPC_MSG_MAX, type, r->id, 0, q, sizeof(*q), NULL, 0);
	rc = n < 0 ? n : cli_send(ctx, device, ctx->sbuf, (size_t)n, NULL, 0);
	if (rc < 0) {
		cli_req_release(r);
		return rc;
	}
	r->chan_gen = ctx->devs[device].chan_gen;
	(void)cli_req_wait(r, 0);
	*ret_req = r;
	return 0;
}

/* The arguments every question checks, and the device asked (GPUX_ANY: the module's first).
 * Lock held; connects. 0 or -errno. */
static int question_begin(gpux_module *m, uint32_t *device)
{
	gpux_ctx *ctx = m->ctx;
	int rc;

	cli_after_fork(ctx);
	/* Again under the lock: another thread may have freed it meanwhile. */
	if (!cli_alive(m, CLI_MOD_MAGIC))
		return -EINVAL;
	rc = cli_ensure(ctx);
	if (rc < 0)
		return rc;
	if (*device == GPUX_ANY)
		*device = m->info.source ? m->info.device : 0;
	return *device < ctx->ndevices ? 0 : -ENODEV;
}

static bool name_ok(const char *name)
{
	return name && *name && strnlen(name, IPC_KERNEL_NAME_MAX + 1) <= IPC_KERNEL_NAME_MAX;
}

GPUX_EXPORT gpux_status gpux_kernel_attrs(gpux_module *m, const char *kernel, uint32_t device,
					  struct gpux_kernel_attrs *ret_attrs)
{
	struct ipc_sym_req q = { 0 };
	struct gpux_req *r = NULL;
	gpux_status st;
	gpux_ctx *ctx;
	int rc;

	if (!cli_alive(m, CLI_MOD_MAGIC) || !name_ok(kernel) || !ret_attrs)
		return GPUX_E_INVAL;
	ctx = m->ctx;
	(void)pthread_mutex_lock(&ctx->lock);
	rc = question_begin(m, &device);
	if (rc == 0)
		rc = ask(ctx, m, device, IPC_KERNEL_ATTRS_REQ, &q, kernel, &r);
	if (rc < 0) {
		st = cli_status_from_errno(rc);
	} else {
		st = r->status;
		/* A worker that says yes says what. */
		if (st == GPUX_OK && r->answer_type != IPC_KERNEL_ATTRS)
			st = GPUX_E_PROTO;
		if (st == GPUX_OK)
			memcpy(ret_attrs, &r->answer.kattrs, sizeof(*ret_attrs));
		cli_req_release(r);
	}
	(void)pthread_mutex_unlock(&ctx->lock);
	return st;
}

GPUX_EXPORT gpux_status gpux_module_global(gpux_module *m, const char *name, uint32_t device,
					   gpux_dbuf **ret_dbuf)
{
	struct ipc_sym_req q = { 0 };
	struct gpux_req *r = NULL;
	gpux_dbuf *d;
	gpux_status st;
	gpux_ctx *ctx;
	int rc;

	if (!cli_alive(m, CLI_MOD_MAGIC) || !name_ok(name) || !ret_dbuf)
		return GPUX_E_INVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return GPUX_E_NOMEM;
	ctx = m->ctx;
	(void)pthread_mutex_lock(&ctx->lock);
	rc = question_begin(m, &device);
	if (rc == 0) {
		d->id = q.dbuf_id = ++ctx->next_obj_id;
		d->device = device;
		rc = ask(ctx, m, device, IPC_GLOBAL_REQ, &q, name, &r);
	}
	if (rc < 0) {
		st = cli_status_from_errno(rc);
	} else {
		st = r->status;
		if (st == GPUX_OK && r->answer_type != IPC_GLOBAL) {
			struct ipc_dbuf_free f = { .dbuf_id = d->id };

			cli_send_drop(ctx, device, r->chan_gen, IPC_DBUF_FREE, &f, sizeof(f));
			st = GPUX_E_PROTO;
		}
		if (st == GPUX_OK) {
			d->size = r->answer.global.size;
			d->read_only = r->answer.global.flags & IPC_GLOBAL_READ_ONLY;
			d->chan_gen = r->chan_gen;
			cli_dbuf_add(ctx, d);
		}
		cli_req_release(r);
	}
	(void)pthread_mutex_unlock(&ctx->lock);
	if (st != GPUX_OK) {
		free(d);
		return st;
	}
	*ret_dbuf = d;
	return GPUX_OK;
}
