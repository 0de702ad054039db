/* SPDX-License-Identifier: MIT */
/* client/module.c: modules: loaded at once on one device, lazily on the others. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cli.h"
#include "macro.h"
#include "segment.h"

static int send_load(gpux_ctx *ctx, gpux_module *m, uint32_t device, uint32_t id)
{
	bool fd = m->code_fd >= 0;
	struct ipc_mod_load ml = {
		.mod_id = m->id,
		.lang = m->lang,
		.flags = fd ? IPC_MOD_CODE_FD : 0,
		.options_len = (uint32_t)strlen(m->options),
		.code_len = m->code_len,
		.extra_len = m->extra_len,
		.nheaders = m->nheaders,
		.nnames = m->nnames,
	};
	int n = ipc_encode_mod_load(ctx->sbuf, IPC_MSG_MAX, id, &ml, m->options, m->code);
	int r;

	if (n < 0)
		return n;
	r = cli_send(ctx, device, ctx->sbuf, (size_t)n, fd ? &m->code_fd : NULL, fd ? 1 : 0);
	if (r == 0)
		m->sent[device] = ctx->devs[device].chan_gen;
	return r;
}

/*
 * Lock held: the device's worker has the module on the current channel. Sent without a
 * reply: a build that fails fails the requests that follow, with its log.
 */
int cli_module_sync(gpux_ctx *ctx, gpux_module *m, uint32_t device)
{
	if (m->sent[device] == ctx->devs[device].chan_gen)
		return 0;
	return send_load(ctx, m, device, 0);
}

/* Lock held. `retire`: keep the handle to recognize it (client/handle.c). */
static void module_free(gpux_ctx *ctx, gpux_module *m, bool retire)
{
	struct ipc_mod_drop d = { .mod_id = m->id };

	for (uint32_t i = 0; i < ctx->ndevices; i++)
		cli_send_drop(ctx, i, m->sent[i], IPC_MOD_DROP, &d, sizeof(d));
	LIST_REMOVE(ctx->modules, m);
	m->code_fd = safe_close(m->code_fd);
	free(m->code);
	free(m->options);
	if (retire)
		cli_retire(ctx, m);
	else
		free(m);
}

/*
 * Load on the first device that is up, and wait for the answer: compile errors show now.
 * Returns 0 with *ret_status the worker's answer (and *ret_log its log, if any), or -errno.
 */
static int load_now(gpux_ctx *ctx, gpux_module *m, char **ret_log, gpux_status *ret_status)
{
	struct gpux_req *r;
	uint32_t device = UINT32_MAX;
	int rc;

	for (unsigned attempt = 0; attempt < CLI_RESEND_MAX; attempt++) {
		rc = cli_ensure(ctx);
		if (rc < 0)
			return rc;
		for (uint32_t i = 0; i < ctx->ndevices && device == UINT32_MAX; i++)
			if (ctx->devs[i].chan_fd >= 0)
				device = i;
		for (uint32_t i = 0; i < ctx->ndevices && device == UINT32_MAX; i++)
			if (cli_device_wait(ctx, i, mono_ns() + CLI_DEVICE_WAIT_NS) == 0)
				device = i;
		if (device == UINT32_MAX)
			return -ENODEV;
		rc = cli_room_wait(ctx, device);
		if (rc < 0)
			return rc;
		r = cli_req_new(ctx, device, true);
		if (!r)
			return -ENOMEM;
		rc = send_load(ctx, m, device, r->id);
		if (rc == -EPIPE) {
			cli_req_release(r);
			device = UINT32_MAX;
			continue;
		}
		if (rc < 0) {
			cli_req_release(r);
			return rc;
		}
		r->chan_gen = ctx->devs[device].chan_gen;
		(void)cli_req_wait(r, 0);
		/* Its worker died before it answered (a worker that gave up after a fault takes
		 * nothing more in): loaded again where a worker serves. */
		if (r->status == GPUX_E_WORKER_LOST && attempt + 1 < CLI_RESEND_MAX) {
			cli_req_release(r);
			device = UINT32_MAX;
			continue;
		}
		*ret_status = r->status;
		if (ret_log && r->message && *r->message)
			*ret_log = strdup(r->message);
		if (r->has_mod_info) {
			/* Most significant byte first, as the cache's file names write it. */
			for (unsigned k = 0; k < 8; k++) {
				m->info.key[k] = (uint8_t)(r->mod_info.key_hi >> (56 - 8 * k));
				m->info.key[8 + k] = (uint8_t)(r->mod_info.key_lo >> (56 - 8 * k));
			}
			m->info.device = device;
			m->info.source = r->mod_info.source;
			m->info.build_ns = r->mod_info.build_ns;
		}
		cli_req_release(r);
		return 0;
	}
	return -EPIPE;
}

/* The extra block's size for these headers and names (ipc/proto.h), or 0 when one is bad. */
static uint64_t extra_size(const struct gpux_module_opts *o)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < o->nheaders; i++) {
		const struct gpux_header *h = &o->headers[i];
		size_t name_len = h->name ? strlen(h->name) : 0;

		if (name_len == 0 || name_len > IPC_HEADER_NAME_MAX || !h->text)
			return 0;
		n += 8 + name_len + strlen(h->text);
	}
	for (uint32_t i = 0; i < o->nnames; i++) {
		size_t len = o->names[i] ? strlen(o->names[i]) : 0;

		if (len == 0 || len > IPC_KERNEL_NAME_MAX)
			return 0;
		n += 4 + len;
	}
	return n;
}

static uint8_t *put_len(uint8_t *p, size_t len)
{
	uint32_t n = (uint32_t)len;

	memcpy(p, &n, sizeof(n));
	return p + sizeof(n);
}

/* Code, then the extra block, into buf. */
static void code_write(uint8_t *buf, const void *code, size_t size,
		       const struct gpux_module_opts *o)
{
	uint8_t *p = buf + size;

	memcpy(buf, code, size);
	for (uint32_t i = 0; i < o->nheaders; i++) {
		size_t nl = strlen(o->headers[i].name), tl = strlen(o->headers[i].text);

		p = put_len(p, nl);
		p = put_len(p, tl);
		memcpy(p, o->headers[i].name, nl);
		memcpy(p + nl, o->headers[i].text, tl);
		p += nl + tl;
	}
	for (uint32_t i = 0; i < o->nnames; i++) {
		size_t len = strlen(o->names[i]);

		p = put_len(p, len);
		memcpy(p, o->names[i], len);
		p += len;
	}
}

/* opts as this library knows them: a larger struct's unknown tail must be zero. */
static int opts_get(const struct gpux_module_opts *in, struct gpux_module_opts *ret)
{
	*ret = (struct gpux_module_opts){ .size = sizeof(*ret) };
	if (!in)
		return 0;
	if (in->size < sizeof(*ret))
		return -EINVAL;
	for (size_t i = sizeof(*ret); i < in->size; i++)
		if (((const uint8_t *)in)[i])
			return -EINVAL;
	*ret = *in;
	if (ret->reserved || ret->nheaders > IPC_MOD_HEADERS_MAX ||
	    ret->nnames > IPC_MOD_NAMES_MAX || (ret->nheaders && !ret->headers) ||
	    (ret->nnames && !ret->names))
		return -EINVAL;
	return 0;
}

GPUX_EXPORT gpux_status gpux_module_load_ex(gpux_ctx *ctx, uint32_t lang, const void *code,
					    size_t size, const struct gpux_module_opts *opts,
					    gpux_module **ret_module, char **ret_log)
{
	struct gpux_module_opts o;
	_cleanup_(freep) uint8_t *all = NULL;
	const char *options;
	uint64_t extra;
	gpux_module *m;
	gpux_status st;
	int rc;

	if (ret_log)
		*ret_log = NULL;
	if (!ctx || !code || !ret_module || size == 0 || size > IPC_CODE_MAX ||
	    lang < GPUX_LANG_CUDA || lang > GPUX_LANG_HOST || opts_get(opts, &o) < 0)
		return GPUX_E_INVAL;
	options = o.options ? o.options : "";
	if (strlen(options) > IPC_OPTIONS_MAX)
		return GPUX_E_INVAL;
	extra = extra_size(&o);
	if ((o.nheaders || o.nnames) && (lang != GPUX_LANG_CUDA || extra == 0))
		return GPUX_E_INVAL;
	if (size + extra > IPC_CODE_MAX)
		return GPUX_E_INVAL;
	all = malloc(size + extra);
	m = calloc(1, sizeof(*m));
	if (!m || !all) {
		free(m);
		return GPUX_E_NOMEM;
	}
	code_write(all, code, size, &o);
	m->ctx = ctx;
	m->lang = lang;
	m->code_fd = -1;
	m->code_len = (uint32_t)size;
	m->extra_len = (uint32_t)extra;
	m->nheaders = o.nheaders;
	m->nnames = o.nnames;
	m->options = strdup(options);
	if (size + extra > IPC_INLINE_CODE_MAX) {
		rc = ipc_blob_new("gpux-module", all, size + extra, &m->code_fd);
	} else {
		m->code = TAKE_PTR(all);
		rc = 0;
	}
	if (rc < 0 || !m->options) {
		(void)safe_close(m->code_fd);
		free(m->code);
		free(m->options);
		free(m);
		return GPUX_E_NOMEM;
	}

	(void)pthread_mutex_lock(&ctx->lock);
	m->id = ++ctx->next_obj_id;
	LIST_PREPEND(ctx->modules, m);
	rc = load_now(ctx, m, ret_log, &st);
	if (rc < 0)
		st = cli_status_from_errno(rc);
	if (st < 0)
		module_free(ctx, m, false);
	else
		m->magic = CLI_MOD_MAGIC;
	(void)pthread_mutex_unlock(&ctx->lock);
	if (st < 0)
		return st;
	*ret_module = m;
	return GPUX_OK;
}

GPUX_EXPORT gpux_status gpux_module_load(gpux_ctx *ctx, uint32_t lang, const void *code,
					 size_t size, const char *options, gpux_module **ret_module,
					 char **ret_log)
{
	struct gpux_module_opts o = { .size = sizeof(o), .options = options };

	return gpux_module_load_ex(ctx, lang, code, size, &o, ret_module, ret_log);
}

GPUX_EXPORT gpux_status gpux_module_info(gpux_module *m, struct gpux_module_info *ret_info)
{
	if (!cli_alive(m, CLI_MOD_MAGIC) || !ret_info)
		return GPUX_E_INVAL;
	/* Set once by gpux_module_load(), never changed after: no lock needed. */
	if (!m->info.source)
		return GPUX_E_NOTFOUND;
	*ret_info = m->info;
	return GPUX_OK;
}

GPUX_EXPORT void gpux_module_free(gpux_module *m)
{
	gpux_ctx *ctx;

	if (!cli_alive(m, CLI_MOD_MAGIC))
		return;
	ctx = m->ctx;
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	/* Again under the lock: another thread may have freed it meanwhile. */
	if (cli_alive(m, CLI_MOD_MAGIC))
		module_free(ctx, m, true);
	(void)pthread_mutex_unlock(&ctx->lock);
}

void cli_modules_free_all(gpux_ctx *ctx)
{
	while (ctx->modules)
		module_free(ctx, ctx->modules, false);
}
