/* SPDX-License-Identifier: MIT */
/* ipc/proto.c: encoding and checked decoding of gpux wire messages. */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "macro.h"
#include "proto.h"

/* The wire has codes of its own (ipc/proto-schema.h): a change to gpux.h must not reach it. */
#ifdef GPUX_GPUX_H
#error "ipc/proto.h must not include gpux/gpux.h"
#endif

/* The tables are dense: statuses 0, -1, -2, ... and types 1, 2, 3, ... in the order of their
 * rows, so that arrays indexed by them are filled by position. */
#define STATUS_INDEX_(wire, ...) wire##_INDEX_,
enum { IPC_STATUSES(STATUS_INDEX_) };
#define STATUS_DENSE_(wire, ...) _Static_assert(wire == -wire##_INDEX_, #wire " in its place");
IPC_STATUSES(STATUS_DENSE_)
#define TYPE_INDEX_(T, ...) TYPE_##T##_INDEX_,
enum { TYPE_NONE_INDEX_, IPC_MESSAGES(TYPE_INDEX_) };
#define TYPE_DENSE_(T, ...)                                                                        \
	_Static_assert((int)IPC_##T == (int)TYPE_##T##_INDEX_, "IPC_" #T " in its place");
IPC_MESSAGES(TYPE_DENSE_)

int ipc_msg_parse(const void *buf, size_t len, const int *fds, unsigned nfds, struct ipc_msg *ret)
{
	struct ipc_hdr h;

	if (len < sizeof(h))
		return -EBADMSG;
	if (len > IPC_MSG_MAX)
		return -EMSGSIZE;
	memcpy(&h, buf, sizeof(h));
	if (h.magic != IPC_MAGIC)
		return -EBADMSG;
	if ((h.version < IPC_VERSION_MIN || h.version > IPC_VERSION) &&
	    !(h.type == IPC_HELLO && h.version >= 1))
		return -EPROTONOSUPPORT;
	if ((size_t)h.len != len - sizeof(h))
		return -EBADMSG;
	if (h.nfds != nfds || nfds > IPC_FDS_MAX)
		return -EBADMSG;
	if (h.type == 0 || h.type >= IPC_TYPE_MAX_)
		return -EBADMSG;

	ret->hdr = h;
	ret->payload = (const uint8_t *)buf + sizeof(h);
	ret->len = h.len;
	for (unsigned i = 0; i < nfds; i++)
		ret->fds[i] = fds[i];
	for (unsigned i = nfds; i < IPC_FDS_MAX; i++)
		ret->fds[i] = -1;
	ret->nfds = nfds;
	return 0;
}

/* The fixed part at the start of a message; the caller checks the rest. */
static int decode_head(const struct ipc_msg *msg, uint16_t type, void *ret, size_t size)
{
	if (msg->hdr.type != type || msg->len < size)
		return -EBADMSG;
	memcpy(ret, msg->payload, size);
	return 0;
}

static bool ok_device_info(const struct ipc_device_info *info)
{
	return memchr(info->name, 0, sizeof(info->name)) &&
	       (info->backend == IPC_BACKEND_HOST || info->backend == IPC_BACKEND_CUDA) &&
	       info->index < IPC_DEVICES_MAX;
}

static bool ok_state(uint32_t state)
{
	return state >= IPC_DEVICE_STARTING && state <= IPC_DEVICE_FAILED;
}

/* ---- FIXED messages: the checks of each, on the receiver's copy of its fixed part ---- */

static bool ok_hello(const struct ipc_hello *m, const struct ipc_msg *msg)
{
	return m->min_version <= m->max_version && !(m->flags & ~IPC_HELLO_ADMIN);
}

/* A priority policy: a default no higher than the highest, both levels of the protocol. */
static bool ok_prio_policy(int8_t max, int8_t def)
{
	return def >= IPC_PRIO_MIN && def <= max && max <= IPC_PRIO_MAX;
}

static bool ok_welcome(const struct ipc_welcome *m, const struct ipc_msg *msg)
{
	return m->version >= IPC_VERSION_MIN && m->version <= IPC_VERSION &&
	       m->ndevices <= IPC_DEVICES_MAX && !(m->flags & ~IPC_WELCOME_PRIVATE) &&
	       ok_prio_policy(m->prio_max, m->prio_default) && m->reserved == 0;
}

static bool ok_device(const struct ipc_device *m, const struct ipc_msg *msg)
{
	return !(m->flags & ~IPC_DEVICE_CHANNEL) && ok_device_info(&m->info) && ok_state(m->state);
}

/* From gpuxd, whom the worker trusts: the size, the fd and the policy's levels. */
static bool ok_attach(const struct ipc_attach *m, const struct ipc_msg *msg)
{
	return ok_prio_policy(m->prio_max, m->prio_default) && !(m->flags & ~IPC_ATTACH_SPARE);
}

static bool ok_adopt(const struct ipc_adopt *m, const struct ipc_msg *msg)
{
	return m->client_id != 0;
}

static bool ok_ready(const struct ipc_ready *m, const struct ipc_msg *msg)
{
	return ok_device_info(&m->info);
}

static bool ok_seg_add(const struct ipc_seg_add *m, const struct ipc_msg *msg)
{
	return m->size != 0 && !(m->flags & ~IPC_SEG_FROZEN);
}

/* Ids are looked up by the receiver, which refuses one it does not know. */
static bool ok_seg_drop(const struct ipc_seg_drop *m, const struct ipc_msg *msg)
{
	return true;
}

static bool ok_mod_drop(const struct ipc_mod_drop *m, const struct ipc_msg *msg)
{
	return true;
}

static bool ok_status_req(const struct ipc_status_req *m, const struct ipc_msg *msg)
{
	return m->flags == 0 && m->first < IPC_DEVICES_MAX;
}

static bool ok_clients_req(const struct ipc_clients_req *m, const struct ipc_msg *msg)
{
	return m->flags == 0 && m->reserved == 0;
}

static bool ok_killed(const struct ipc_killed *m, const struct ipc_msg *msg)
{
	return m->reason == IPC_KILL_TIMEOUT && m->device < IPC_DEVICES_MAX;
}

static bool ok_queue_open(const struct ipc_queue_msg *m, const struct ipc_msg *msg)
{
	return m->flags == 0;
}

static bool ok_queue_close(const struct ipc_queue_msg *m, const struct ipc_msg *msg)
{
	return m->flags == 0;
}

static bool ok_queue_config(const struct ipc_queue_config *m, const struct ipc_msg *msg)
{
	if (!(m->flags & IPC_QUEUE_PRIORITY) && m->priority != 0)
		return false;
	return !(m->flags & ~IPC_QUEUE_PRIORITY) && m->share <= IPC_SHARE_MAX &&
	       m->priority >= IPC_PRIO_MIN && m->priority <= IPC_PRIO_MAX;
}

static bool ok_dbuf_alloc(const struct ipc_dbuf_alloc *m, const struct ipc_msg *msg)
{
	return m->size != 0 && m->flags == 0;
}

static bool ok_dbuf_free(const struct ipc_dbuf_free *m, const struct ipc_msg *msg)
{
	return true;
}

static bool ok_copy(const struct ipc_copy *m, const struct ipc_msg *msg)
{
	uint64_t end;

	return (m->dir == IPC_COPY_TO_DBUF || m->dir == IPC_COPY_FROM_DBUF) && m->size != 0 &&
	       m->flags == 0 && add_ok(m->dbuf_offset, m->size, &end) &&
	       add_ok(m->seg_offset, m->size, &end);
}

static bool ok_rings(const struct ipc_rings_offer *m, const struct ipc_msg *msg)
{
	return m->flags == 0;
}

static bool ok_channel_req(const struct ipc_channel_req *m, const struct ipc_msg *msg)
{
	return m->device < IPC_DEVICES_MAX;
}

/* Only ever the answer to a MOD_LOAD: it has that request's id. */
static bool ok_mod_info(const struct ipc_mod_info *m, const struct ipc_msg *msg)
{
	return m->source >= IPC_MOD_COMPILED && m->source <= IPC_MOD_MEMORY && msg->hdr.id != 0;
}

/* A name of 1 to IPC_KERNEL_NAME_MAX bytes, without NUL, NUL-terminated. */
static bool ok_sym_req(const struct ipc_sym_req *m)
{
	return m->name_len > 0 && m->name_len <= IPC_KERNEL_NAME_MAX && m->flags == 0 &&
	       !memchr(m->name, 0, m->name_len) && m->name[m->name_len] == 0;
}

static bool ok_kernel_attrs_req(const struct ipc_sym_req *m, const struct ipc_msg *msg)
{
	return ok_sym_req(m) && m->dbuf_id == 0 && msg->hdr.id != 0;
}

static bool ok_global_req(const struct ipc_sym_req *m, const struct ipc_msg *msg)
{
	return ok_sym_req(m) && msg->hdr.id != 0;
}

/* Only ever an answer: it has its question's id. */
static bool ok_kernel_attrs(const struct ipc_kernel_attrs *m, const struct ipc_msg *msg)
{
	const int32_t v[] = { m->max_threads_per_block,
			      m->num_regs,
			      m->shared_size_bytes,
			      m->const_size_bytes,
			      m->local_size_bytes,
			      m->max_dynamic_shared_size_bytes,
			      m->ptx_version,
			      m->binary_version,
			      m->cache_mode_ca,
			      m->preferred_shared_memory_carveout,
			      m->nparams };

	for (unsigned i = 0; i < ARRAY_SIZE(v); i++)
		if (v[i] < IPC_ATTR_UNKNOWN)
			return false;
	for (unsigned i = 0; i < ARRAY_SIZE(m->reserved); i++)
		if (m->reserved[i])
			return false;
	return msg->hdr.id != 0 && m->nparams <= (int32_t)IPC_ARGS_MAX;
}

static bool ok_global(const struct ipc_global_info *m, const struct ipc_msg *msg)
{
	return msg->hdr.id != 0 && m->size != 0 && !(m->flags & ~IPC_GLOBAL_READ_ONLY) &&
	       m->reserved == 0;
}

static bool ok_marks(const struct ipc_marks_offer *m, const struct ipc_msg *msg)
{
	return m->flags == 0 && m->index < IPC_MARKS_PAGES;
}

static bool ok_dbuf_host(const struct ipc_dbuf_host *m, const struct ipc_msg *msg)
{
	uint64_t end;

	return m->size != 0 && add_ok(m->seg_offset, m->size, &end);
}

/*
 * The codecs of FIXED and EMPTY messages, from the schema: the type, the exact size and the
 * fds (an expression of the fixed part m) are checked, then ok_<name>(); the output is
 * written only then.
 */
#define CODEC_FIXED_(T, name, fixed, fds)                                                          \
	int ipc_decode_##name(const struct ipc_msg *msg, struct ipc_##fixed *ret)                  \
	{                                                                                          \
		struct ipc_##fixed copy;                                                           \
		const struct ipc_##fixed *m = &copy;                                               \
                                                                                                   \
		if (msg->hdr.type != IPC_##T || msg->len != sizeof(copy))                          \
			return -EBADMSG;                                                           \
		memcpy(&copy, msg->payload, sizeof(copy));                                         \
		if (msg->nfds != (fds) || !ok_##name(m, msg))                                      \
			return -EBADMSG;                                                           \
		*ret = copy;                                                                       \
		return 0;                                                                          \
	}                                                                                          \
	int ipc_encode_##name(void *buf, size_t cap, uint32_t id, const struct ipc_##fixed *m)     \
	{                                                                                          \
		return ipc_encode(buf, cap, IPC_##T, id, (fds), m, sizeof(*m), NULL, 0);           \
	}
#define CODEC_EMPTY_(T, name, fixed, fds)                                                          \
	int ipc_decode_##name(const struct ipc_msg *msg)                                           \
	{                                                                                          \
		if (msg->hdr.type != IPC_##T || msg->len != 0 || msg->nfds != 0)                   \
			return -EBADMSG;                                                           \
		return 0;                                                                          \
	}                                                                                          \
	int ipc_encode_##name(void *buf, size_t cap, uint32_t id)                                  \
	{                                                                                          \
		return ipc_encode(buf, cap, IPC_##T, id, 0, NULL, 0, NULL, 0);                     \
	}
#define CODEC_VAR_(T, name, fixed, fds)
#define CODEC_(T, num, name, label, fixed, decoded, fds, shape)                                    \
	CODEC_##shape##_(T, name, fixed, fds)
IPC_MESSAGES(CODEC_)

int ipc_decode_queue(const struct ipc_msg *msg, uint16_t type, struct ipc_queue_msg *ret)
{
	if (type == IPC_QUEUE_OPEN)
		return ipc_decode_queue_open(msg, ret);
	if (type == IPC_QUEUE_CLOSE)
		return ipc_decode_queue_close(msg, ret);
	return -EBADMSG;
}

const struct ipc_hdr ipc_kick = {
	.magic = IPC_MAGIC,
	.version = IPC_VERSION,
	.type = IPC_KICK,
};

/*
 * ---- VAR messages: MOD_LOAD, SUBMIT, DONE, STATUS ----
 * Written by hand: each has counts in its fixed part that say how long its other parts are,
 * and every count, length and offset is checked here, in the open, before anything is
 * written out.
 */

void ipc_mod_extra_begin(struct ipc_mod_extra_cursor *c, const void *p, size_t len,
			 uint32_t nheaders, uint32_t nnames)
{
	*c = (struct ipc_mod_extra_cursor){
		.p = p, .left = len, .headers = nheaders, .names = nnames
	};
}

/* n bytes without a NUL from the cursor. */
static const char *extra_take(struct ipc_mod_extra_cursor *c, uint32_t n)
{
	const char *s = (const char *)c->p;

	if (n > c->left || memchr(s, 0, n))
		return NULL;
	c->p += n;
	c->left -= n;
	return s;
}

static bool extra_u32(struct ipc_mod_extra_cursor *c, uint32_t *ret)
{
	if (c->left < sizeof(*ret))
		return false;
	memcpy(ret, c->p, sizeof(*ret));
	c->p += sizeof(*ret);
	c->left -= sizeof(*ret);
	return true;
}

int ipc_mod_extra_next(struct ipc_mod_extra_cursor *c, struct ipc_mod_item *ret)
{
	struct ipc_mod_item it = { 0 };

	if (c->headers) {
		if (!extra_u32(c, &it.name_len) || !extra_u32(c, &it.text_len) ||
		    it.name_len == 0 || it.name_len > IPC_HEADER_NAME_MAX ||
		    !(it.name = extra_take(c, it.name_len)))
			return -EBADMSG;
		/* An empty header's text is its zero bytes at the end of its name, not NULL
		 * (NULL marks a name expression); nothing is NUL-terminated here, readers
		 * take text_len bytes. */
		it.text = it.text_len ? extra_take(c, it.text_len) : it.name + it.name_len;
		if (!it.text)
			return -EBADMSG;
		c->headers--;
	} else if (c->names) {
		if (!extra_u32(c, &it.name_len) || it.name_len == 0 ||
		    it.name_len > IPC_KERNEL_NAME_MAX || !(it.name = extra_take(c, it.name_len)))
			return -EBADMSG;
		c->names--;
	} else {
		return c->left == 0 ? 0 : -EBADMSG;
	}
	*ret = it;
	return 1;
}

int ipc_mod_extra_check(const void *p, size_t len, uint32_t nheaders, uint32_t nnames)
{
	struct ipc_mod_extra_cursor c;
	struct ipc_mod_item it;
	int r;

	if (nheaders > IPC_MOD_HEADERS_MAX || nnames > IPC_MOD_NAMES_MAX)
		return -EBADMSG;
	ipc_mod_extra_begin(&c, p, len, nheaders, nnames);
	while ((r = ipc_mod_extra_next(&c, &it)) > 0)
		;
	return r;
}

/* The fixed part's counts agree, the language may have headers: everything but the bytes. */
static int check_mod_load(const struct ipc_mod_load *m)
{
	bool code_fd = m->flags & IPC_MOD_CODE_FD;
	uint64_t all = (uint64_t)m->code_len + m->extra_len;

	if ((m->flags & ~IPC_MOD_CODE_FD) || m->reserved)
		return -EBADMSG;
	if (m->lang < IPC_LANG_CUDA || m->lang > IPC_LANG_HOST)
		return -EBADMSG;
	if (m->options_len > IPC_OPTIONS_MAX || m->code_len == 0 || all > IPC_CODE_MAX)
		return -EBADMSG;
	if (!code_fd && all > IPC_INLINE_CODE_MAX)
		return -EBADMSG;
	if (m->nheaders > IPC_MOD_HEADERS_MAX || m->nnames > IPC_MOD_NAMES_MAX)
		return -EBADMSG;
	/* Each record holds at least its lengths and one byte of name. */
	if ((m->extra_len == 0) != (m->nheaders == 0 && m->nnames == 0) ||
	    (uint64_t)m->extra_len < 9ULL * m->nheaders + 5ULL * m->nnames ||
	    (m->extra_len && m->lang != IPC_LANG_CUDA))
		return -EBADMSG;
	return 0;
}

int ipc_decode_mod_load(const struct ipc_msg *msg, struct ipc_mod_load_msg *ret)
{
	struct ipc_mod_load m;
	const char *options;
	const uint8_t *code;
	uint64_t want;
	bool code_fd;
	int r = decode_head(msg, IPC_MOD_LOAD, &m, sizeof(m));

	if (r < 0)
		return r;
	if (check_mod_load(&m) < 0)
		return -EBADMSG;
	code_fd = m.flags & IPC_MOD_CODE_FD;
	want = sizeof(m) + (uint64_t)m.options_len +
	       (code_fd ? 0 : (uint64_t)m.code_len + m.extra_len);
	if (msg->len != want || msg->nfds != IPC_MOD_LOAD_NFDS(&m))
		return -EBADMSG;

	options = (const char *)msg->payload + sizeof(m);
	if (memchr(options, 0, m.options_len))
		return -EBADMSG;
	code = code_fd ? NULL : msg->payload + sizeof(m) + m.options_len;
	if (code && ipc_mod_extra_check(code + m.code_len, m.extra_len, m.nheaders, m.nnames) < 0)
		return -EBADMSG;
	ret->m = m;
	ret->options = options;
	ret->code = code;
	return 0;
}

/* Why an argument cannot be, or NULL. */
static const char *arg_refusal(const struct ipc_arg *a, uint32_t data_len)
{
	switch (a->kind) {
	case IPC_ARG_SCALAR:
		if (a->size == 0 || a->size > IPC_SCALAR_MAX)
			return "a scalar argument of 0 or more than 256 bytes";
		if (a->flags != 0 || a->ref != 0)
			return "a scalar argument with flags or a buffer";
		return range_ok(a->offset, a->size, data_len)
			       ? NULL
			       : "a scalar argument outside the data";
	case IPC_ARG_IN:
	case IPC_ARG_OUT:
	case IPC_ARG_INOUT:
	case IPC_ARG_MAPPED:
	case IPC_ARG_DBUF: {
		uint64_t end;
		uint32_t allowed = a->kind == IPC_ARG_IN ? IPC_ARG_CACHED : 0;

		if (a->size == 0 || !add_ok(a->offset, a->size, &end))
			return "a buffer argument of 0 bytes, or one whose end overflows";
		return (a->flags & ~allowed) ? "a buffer argument with flags it cannot have" : NULL;
	}
	default:
		return "an argument of an unknown kind";
	}
}

/* Why a SUBMIT cannot be decoded, or NULL; *m is its fixed part when there is one. */
static const char *submit_refusal(const struct ipc_msg *msg, struct ipc_submit *m)
{
	const uint8_t *p;
	uint64_t want;

	if (decode_head(msg, IPC_SUBMIT, m, sizeof(*m)) < 0)
		return "not a submit message, or shorter than its fixed part";
	if (msg->nfds != 0)
		return "fds with a submit message";
	if (m->flags & ~(uint32_t)(IPC_LAUNCH_TIMED | IPC_SUBMIT_ALONE | IPC_SUBMIT_MARK_DONE))
		return "unknown launch flags";
	if (m->nargs > IPC_ARGS_MAX)
		return "more than 64 arguments";
	if (m->name_len == 0 || m->name_len > IPC_KERNEL_NAME_MAX)
		return "a kernel name of 0 or more than 255 bytes";
	if (m->data_len > IPC_SCALAR_DATA_MAX)
		return "too many bytes of scalar arguments";
	want = sizeof(*m) + (uint64_t)m->nargs * sizeof(struct ipc_arg) + m->name_len + m->data_len;
	if (msg->len != want)
		return "its length does not match its counts";
	for (unsigned i = 0; i < 3; i++) {
		if (m->grid[i] == 0 || m->grid[i] > IPC_GRID_MAX)
			return "a grid dimension of 0 or more than 2^31 - 1";
		if (m->block[i] == 0)
			return "a block dimension of 0";
	}
	/* Every argument is checked in place before anything is written out. */
	p = msg->payload + sizeof(*m);
	for (unsigned i = 0; i < m->nargs; i++) {
		struct ipc_arg a;
		const char *why;

		memcpy(&a, p + i * sizeof(a), sizeof(a));
		why = arg_refusal(&a, m->data_len);
		if (why)
			return why;
	}
	if (memchr(p + (size_t)m->nargs * sizeof(struct ipc_arg), 0, m->name_len))
		return "a NUL in the kernel name";
	return NULL;
}

const char *ipc_submit_refusal(const struct ipc_msg *msg)
{
	struct ipc_submit m;

	return submit_refusal(msg, &m);
}

int ipc_decode_submit(const struct ipc_msg *msg, struct ipc_submit_msg *ret)
{
	struct ipc_submit m;
	const uint8_t *p;

	if (submit_refusal(msg, &m))
		return -EBADMSG;
	p = msg->payload + sizeof(m);
	memcpy(ret->args, p, (size_t)m.nargs * sizeof(struct ipc_arg));
	p += (size_t)m.nargs * sizeof(struct ipc_arg);
	memcpy(ret->name, p, m.name_len);
	ret->name[m.name_len] = '\0';
	ret->data = p + m.name_len;
	ret->m = m;
	return 0;
}

int ipc_decode_done(const struct ipc_msg *msg, struct ipc_done_msg *ret)
{
	struct ipc_done m;
	int r = decode_head(msg, IPC_DONE, &m, sizeof(m));

	if (r < 0)
		return r;
	if (msg->nfds != 0 || m.text_len > IPC_TEXT_MAX || msg->len != sizeof(m) + m.text_len)
		return -EBADMSG;
	if (!ipc_status_valid(m.status))
		return -EBADMSG;
	ret->m = m;
	ret->text = (const char *)msg->payload + sizeof(m);
	return 0;
}

int ipc_decode_status(const struct ipc_msg *msg, struct ipc_status_msg *ret)
{
	struct ipc_status m;
	int r = decode_head(msg, IPC_STATUS, &m, sizeof(m));

	if (r < 0)
		return r;
	if (msg->nfds != 0 || m.ndevices > IPC_DEVICES_MAX || m.count > IPC_STATUS_PAGE_DEVS ||
	    m.first > m.ndevices || m.count > m.ndevices - m.first ||
	    msg->len != sizeof(m) + (size_t)m.count * sizeof(struct ipc_dev_status))
		return -EBADMSG;
	if (!memchr(m.loop, 0, sizeof(m.loop)) || !memchr(m.version, 0, sizeof(m.version)) ||
	    (m.flags & ~IPC_STATUS_STOPPING))
		return -EBADMSG;
	for (uint32_t i = 0; i < m.count; i++) {
		struct ipc_dev_status d;
		memcpy(&d, msg->payload + sizeof(m) + i * sizeof(d), sizeof(d));
		if (!ok_device_info(&d.info) || !ok_state(d.state) ||
		    !memchr(d.stats.driver, 0, sizeof(d.stats.driver)) ||
		    !memchr(d.stats.sched.share_note, 0, sizeof(d.stats.sched.share_note)))
			return -EBADMSG;
	}
	ret->m = m;
	ret->devs = msg->payload + sizeof(m);
	return 0;
}

void ipc_status_dev(const struct ipc_status_msg *msg, uint32_t i, struct ipc_dev_status *ret)
{
	assert(i < msg->m.count);
	memcpy(ret, msg->devs + (size_t)i * sizeof(*ret), sizeof(*ret));
}

/* A page of clients: by id, each above the last, no more than the total. */
int ipc_decode_clients(const struct ipc_msg *msg, struct ipc_clients_msg *ret)
{
	struct ipc_clients m;
	uint64_t last = 0;
	int r = decode_head(msg, IPC_CLIENTS, &m, sizeof(m));

	if (r < 0)
		return r;
	if (msg->nfds != 0 || m.flags || m.reserved || m.count > IPC_CLIENTS_PAGE ||
	    m.count > m.total ||
	    msg->len != sizeof(m) + (size_t)m.count * sizeof(struct ipc_client_info))
		return -EBADMSG;
	for (uint32_t i = 0; i < m.count; i++) {
		struct ipc_client_info c;

		memcpy(&c, msg->payload + sizeof(m) + i * sizeof(c), sizeof(c));
		if (c.id <= last)
			return -EBADMSG;
		last = c.id;
	}
	ret->m = m;
	ret->rows = msg->payload + sizeof(m);
	return 0;
}

void ipc_clients_row(const struct ipc_clients_msg *msg, uint32_t i, struct ipc_client_info *ret)
{
	assert(i < msg->m.count);
	memcpy(ret, msg->rows + (size_t)i * sizeof(*ret), sizeof(*ret));
}

int ipc_encode(void *buf, size_t cap, uint16_t type, uint32_t id, unsigned nfds, const void *fixed,
	       size_t fixed_len, const struct ipc_part *parts, unsigned nparts)
{
	struct ipc_hdr h = {
		.magic = IPC_MAGIC,
		.version = IPC_VERSION,
		.type = type,
		.nfds = (uint16_t)nfds,
		.id = id,
	};
	size_t total = sizeof(h) + fixed_len;
	uint8_t *p = buf;

	if (nfds > IPC_FDS_MAX)
		return -EINVAL;
	for (unsigned i = 0; i < nparts; i++)
		total += parts[i].len;
	if (total > cap || total > IPC_MSG_MAX)
		return -EMSGSIZE;
	h.len = (uint32_t)(total - sizeof(h));
	memcpy(p, &h, sizeof(h));
	p += sizeof(h);
	if (fixed_len)
		memcpy(p, fixed, fixed_len);
	p += fixed_len;
	for (unsigned i = 0; i < nparts; i++) {
		if (parts[i].len)
			memcpy(p, parts[i].data, parts[i].len);
		p += parts[i].len;
	}
	return (int)total;
}

int ipc_encode_mod_load(void *buf, size_t cap, uint32_t id, const struct ipc_mod_load *m,
			const char *options, const void *code)
{
	bool code_fd = m->flags & IPC_MOD_CODE_FD;
	struct ipc_part parts[2] = {
		{ options, m->options_len },
		{ code, code_fd ? 0 : (size_t)m->code_len + m->extra_len },
	};

	if (check_mod_load(m) < 0 ||
	    (!code_fd && ipc_mod_extra_check((const uint8_t *)code + m->code_len, m->extra_len,
					     m->nheaders, m->nnames) < 0))
		return -EINVAL;
	return ipc_encode(buf, cap, IPC_MOD_LOAD, id, IPC_MOD_LOAD_NFDS(m), m, sizeof(*m), parts,
			  2);
}

int ipc_encode_submit(void *buf, size_t cap, uint32_t id, const struct ipc_submit *m,
		      const struct ipc_arg *args, const char *name, const void *data)
{
	struct ipc_submit h = *m;
	size_t name_len = strlen(name);
	struct ipc_part parts[3] = {
		{ args, (size_t)m->nargs * sizeof(*args) },
		{ name, name_len },
		{ data, m->data_len },
	};

	if (m->nargs > IPC_ARGS_MAX || name_len == 0 || name_len > IPC_KERNEL_NAME_MAX)
		return -EINVAL;
	h.name_len = (uint32_t)name_len;
	return ipc_encode(buf, cap, IPC_SUBMIT, id, 0, &h, sizeof(h), parts, 3);
}

int ipc_encode_done(void *buf, size_t cap, uint32_t id, const struct ipc_done *m, const char *text)
{
	struct ipc_done h = *m;
	size_t len = text ? strlen(text) : 0;
	struct ipc_part part;

	/* A long text (a compile log) is cut, not refused: its start says what went wrong. */
	if (len > IPC_TEXT_MAX)
		len = IPC_TEXT_MAX;
	h.text_len = (uint32_t)len;
	part = (struct ipc_part){ text, len };
	return ipc_encode(buf, cap, IPC_DONE, id, 0, &h, sizeof(h), &part, 1);
}

int ipc_encode_status(void *buf, size_t cap, uint32_t id, const struct ipc_status *m,
		      const struct ipc_dev_status *devs)
{
	struct ipc_part part = { devs, (size_t)m->count * sizeof(*devs) };

	if (m->ndevices > IPC_DEVICES_MAX || m->count > IPC_STATUS_PAGE_DEVS ||
	    m->first > m->ndevices || m->count > m->ndevices - m->first)
		return -EINVAL;
	return ipc_encode(buf, cap, IPC_STATUS, id, 0, m, sizeof(*m), &part, 1);
}

int ipc_encode_clients(void *buf, size_t cap, uint32_t id, const struct ipc_clients *m,
		       const struct ipc_client_info *rows)
{
	struct ipc_part part = { rows, (size_t)m->count * sizeof(*rows) };

	if (m->count > IPC_CLIENTS_PAGE || m->count > m->total || m->flags || m->reserved)
		return -EINVAL;
	for (uint32_t i = 0; i < m->count; i++)
		if (rows[i].id == 0 || (i > 0 && rows[i].id <= rows[i - 1].id))
			return -EINVAL;
	return ipc_encode(buf, cap, IPC_CLIENTS, id, 0, m, sizeof(*m), &part, 1);
}

const char *ipc_type_name(uint16_t type)
{
#define TYPE_NAME_(T, num, name, label, ...) [IPC_##T] = label,
	static const char *const names[IPC_TYPE_MAX_] = { IPC_MESSAGES(TYPE_NAME_) };

	if (type < IPC_TYPE_MAX_ && names[type])
		return names[type];
	return "unknown";
}

/* By -status, from IPC_OK down. */
#define STATUS_LABEL_(wire, pub, value, label, text) label,
static const char *const status_labels[] = { IPC_STATUSES(STATUS_LABEL_) };
#define STATUS_TEXT_(wire, pub, value, label, text) text,
static const char *const status_texts[] = { IPC_STATUSES(STATUS_TEXT_) };
_Static_assert(ARRAY_SIZE(status_labels) == IPC_STATUS_COUNT, "a label for every status");
_Static_assert(ARRAY_SIZE(status_texts) == IPC_STATUS_COUNT, "a text for every status");

bool ipc_status_valid(int status)
{
	return status <= IPC_OK && status >= IPC_STATUS_MIN;
}

const char *ipc_status_name(int status)
{
	return ipc_status_valid(status) ? status_labels[-status] : "unknown";
}

const char *ipc_status_text(int status)
{
	return ipc_status_valid(status) ? status_texts[-status] : "unknown status";
}
