/* SPDX-License-Identifier: MIT */
/* ipc/proto.c: encoding and checked decoding of gpux wire messages. */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "macro.h"
#include "proto.h"

#define IPC_STATUS_MIN GPUX_E_STOPPING
_Static_assert(-IPC_STATUS_MIN < (int)IPC_STATUS_CODES, "by_status has a counter for every status");

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

/* A message that is exactly one fixed-size struct with a known number of fds. */
static int decode_fixed(const struct ipc_msg *msg, uint16_t type, void *ret, size_t size,
			unsigned nfds)
{
	if (msg->hdr.type != type || msg->len != size || msg->nfds != nfds)
		return -EBADMSG;
	memcpy(ret, msg->payload, size);
	return 0;
}

/* The fixed part at the start of a variable-length message. */
static int decode_head(const struct ipc_msg *msg, uint16_t type, void *ret, size_t size)
{
	if (msg->hdr.type != type || msg->len < size)
		return -EBADMSG;
	memcpy(ret, msg->payload, size);
	return 0;
}

static int check_device_info(struct ipc_device_info *info)
{
	if (!memchr(info->name, 0, sizeof(info->name)))
		return -EBADMSG;
	if (info->backend != GPUX_BACKEND_HOST && info->backend != GPUX_BACKEND_CUDA)
		return -EBADMSG;
	if (info->index >= IPC_DEVICES_MAX)
		return -EBADMSG;
	return 0;
}

static int check_state(uint32_t state)
{
	return state >= GPUX_DEVICE_STARTING && state <= GPUX_DEVICE_FAILED ? 0 : -EBADMSG;
}

int ipc_decode_hello(const struct ipc_msg *msg, struct ipc_hello *ret)
{
	struct ipc_hello m;
	int r = decode_fixed(msg, IPC_HELLO, &m, sizeof(m), 0);

	if (r < 0)
		return r;
	if (m.min_version > m.max_version || (m.flags & ~IPC_HELLO_ADMIN))
		return -EBADMSG;
	*ret = m;
	return 0;
}

int ipc_decode_welcome(const struct ipc_msg *msg, struct ipc_welcome *ret)
{
	struct ipc_welcome m;
	int r = decode_fixed(msg, IPC_WELCOME, &m, sizeof(m), 0);

	if (r < 0)
		return r;
	if (m.version < IPC_VERSION_MIN || m.version > IPC_VERSION || m.ndevices > IPC_DEVICES_MAX ||
	    (m.flags & ~IPC_WELCOME_PRIVATE))
		return -EBADMSG;
	*ret = m;
	return 0;
}

int ipc_decode_device(const struct ipc_msg *msg, struct ipc_device *ret)
{
	struct ipc_device m;
	unsigned nfds;
	int r = decode_head(msg, IPC_DEVICE, &m, sizeof(m));

	if (r < 0)
		return r;
	if (m.flags & ~IPC_DEVICE_CHANNEL)
		return -EBADMSG;
	nfds = (m.flags & IPC_DEVICE_CHANNEL) ? 2 : 0;
	if (msg->len != sizeof(m) || msg->nfds != nfds)
		return -EBADMSG;
	if (check_device_info(&m.info) < 0 || check_state(m.state) < 0)
		return -EBADMSG;
	*ret = m;
	return 0;
}

int ipc_decode_attach(const struct ipc_msg *msg, struct ipc_attach *ret)
{
	return decode_fixed(msg, IPC_ATTACH, ret, sizeof(*ret), 1);
}

int ipc_decode_ready(const struct ipc_msg *msg, struct ipc_ready *ret)
{
	struct ipc_ready m;
	int r = decode_fixed(msg, IPC_READY, &m, sizeof(m), 0);

	if (r < 0)
		return r;
	if (check_device_info(&m.info) < 0)
		return -EBADMSG;
	*ret = m;
	return 0;
}

int ipc_decode_seg_add(const struct ipc_msg *msg, struct ipc_seg_add *ret)
{
	struct ipc_seg_add m;
	int r = decode_fixed(msg, IPC_SEG_ADD, &m, sizeof(m), 1);

	if (r < 0)
		return r;
	if (m.size == 0 || (m.flags & ~IPC_SEG_FROZEN))
		return -EBADMSG;
	*ret = m;
	return 0;
}

int ipc_decode_seg_drop(const struct ipc_msg *msg, struct ipc_seg_drop *ret)
{
	return decode_fixed(msg, IPC_SEG_DROP, ret, sizeof(*ret), 0);
}

void ipc_mod_extra_begin(struct ipc_mod_extra_cursor *c, const void *p, size_t len,
			 uint32_t nheaders, uint32_t nnames)
{
	*c = (struct ipc_mod_extra_cursor){ .p = p, .left = len, .headers = nheaders, .names = nnames };
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
	if (m->lang < GPUX_LANG_CUDA || m->lang > GPUX_LANG_HOST)
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
	    (m->extra_len && m->lang != GPUX_LANG_CUDA))
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
	if (msg->len != want || msg->nfds != (code_fd ? 1u : 0u))
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

int ipc_decode_mod_drop(const struct ipc_msg *msg, struct ipc_mod_drop *ret)
{
	return decode_fixed(msg, IPC_MOD_DROP, ret, sizeof(*ret), 0);
}

int ipc_decode_queue(const struct ipc_msg *msg, uint16_t type, struct ipc_queue_msg *ret)
{
	struct ipc_queue_msg m;
	int r;

	if (type != IPC_QUEUE_OPEN && type != IPC_QUEUE_CLOSE)
		return -EBADMSG;
	r = decode_fixed(msg, type, &m, sizeof(m), 0);
	if (r < 0)
		return r;
	if (m.flags != 0)
		return -EBADMSG;
	*ret = m;
	return 0;
}

int ipc_decode_dbuf_alloc(const struct ipc_msg *msg, struct ipc_dbuf_alloc *ret)
{
	struct ipc_dbuf_alloc m;
	int r = decode_fixed(msg, IPC_DBUF_ALLOC, &m, sizeof(m), 0);

	if (r < 0)
		return r;
	if (m.size == 0 || m.flags != 0)
		return -EBADMSG;
	*ret = m;
	return 0;
}

int ipc_decode_dbuf_free(const struct ipc_msg *msg, struct ipc_dbuf_free *ret)
{
	return decode_fixed(msg, IPC_DBUF_FREE, ret, sizeof(*ret), 0);
}

int ipc_decode_copy(const struct ipc_msg *msg, struct ipc_copy *ret)
{
	struct ipc_copy m;
	uint64_t end;
	int r = decode_fixed(msg, IPC_COPY, &m, sizeof(m), 0);

	if (r < 0)
		return r;
	if ((m.dir != IPC_COPY_TO_DBUF && m.dir != IPC_COPY_FROM_DBUF) || m.size == 0 || m.flags ||
	    !add_ok(m.dbuf_offset, m.size, &end) || !add_ok(m.seg_offset, m.size, &end))
		return -EBADMSG;
	*ret = m;
	return 0;
}

/* Why an argument cannot be, or NULL. */
static const char *arg_refusal(const struct ipc_arg *a, uint32_t data_len)
{
	switch (a->kind) {
	case GPUX_ARG_SCALAR:
		if (a->size == 0 || a->size > IPC_SCALAR_MAX)
			return "a scalar argument of 0 or more than 256 bytes";
		if (a->flags != 0 || a->ref != 0)
			return "a scalar argument with flags or a buffer";
		return range_ok(a->offset, a->size, data_len) ? NULL
							      : "a scalar argument outside the data";
	case GPUX_ARG_IN:
	case GPUX_ARG_OUT:
	case GPUX_ARG_INOUT:
	case GPUX_ARG_MAPPED:
	case GPUX_ARG_DBUF: {
		uint64_t end;
		uint32_t allowed = a->kind == GPUX_ARG_IN ? GPUX_ARG_CACHED : 0;

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
	if (m->flags & ~(uint32_t)GPUX_LAUNCH_TIMED)
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

int ipc_decode_status_req(const struct ipc_msg *msg, struct ipc_status_req *ret)
{
	struct ipc_status_req m;
	int r = decode_fixed(msg, IPC_STATUS_REQ, &m, sizeof(m), 0);

	if (r < 0)
		return r;
	if (m.flags != 0 || m.first >= IPC_DEVICES_MAX)
		return -EBADMSG;
	*ret = m;
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
		if (check_device_info(&d.info) < 0 || check_state(d.state) < 0 ||
		    !memchr(d.stats.driver, 0, sizeof(d.stats.driver)))
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

int ipc_decode_killed(const struct ipc_msg *msg, struct ipc_killed *ret)
{
	struct ipc_killed m;
	int r = decode_fixed(msg, IPC_KILLED, &m, sizeof(m), 0);

	if (r < 0)
		return r;
	if (m.reason != IPC_KILL_TIMEOUT || m.device >= IPC_DEVICES_MAX)
		return -EBADMSG;
	*ret = m;
	return 0;
}

int ipc_decode_rings(const struct ipc_msg *msg, struct ipc_rings_offer *ret)
{
	struct ipc_rings_offer m;
	int r = decode_fixed(msg, IPC_RINGS, &m, sizeof(m), 1);

	if (r < 0)
		return r;
	if (m.flags != 0)
		return -EBADMSG;
	*ret = m;
	return 0;
}

const struct ipc_hdr ipc_kick = {
	.magic = IPC_MAGIC,
	.version = IPC_VERSION,
	.type = IPC_KICK,
};

int ipc_decode_kick(const struct ipc_msg *msg)
{
	if (msg->hdr.type != IPC_KICK || msg->len != 0 || msg->nfds != 0)
		return -EBADMSG;
	return 0;
}

int ipc_decode_channel_req(const struct ipc_msg *msg, struct ipc_channel_req *ret)
{
	struct ipc_channel_req m;
	int r = decode_fixed(msg, IPC_CHANNEL_REQ, &m, sizeof(m), 0);

	if (r < 0)
		return r;
	if (m.device >= IPC_DEVICES_MAX)
		return -EBADMSG;
	*ret = m;
	return 0;
}

int ipc_decode_drain(const struct ipc_msg *msg)
{
	if (msg->hdr.type != IPC_DRAIN || msg->len != 0 || msg->nfds != 0)
		return -EBADMSG;
	return 0;
}

int ipc_decode_mod_info(const struct ipc_msg *msg, struct ipc_mod_info *ret)
{
	struct ipc_mod_info m;
	int r = decode_fixed(msg, IPC_MOD_INFO, &m, sizeof(m), 0);

	if (r < 0)
		return r;
	if (m.source < IPC_MOD_COMPILED || m.source > IPC_MOD_MEMORY || msg->hdr.id == 0)
		return -EBADMSG;
	*ret = m;
	return 0;
}

int ipc_encode(void *buf, size_t cap, uint16_t type, uint32_t id, unsigned nfds,
	       const void *fixed, size_t fixed_len, const struct ipc_part *parts, unsigned nparts)
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
	return ipc_encode(buf, cap, IPC_MOD_LOAD, id, code_fd ? 1 : 0, m, sizeof(*m), parts, 2);
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

const char *ipc_type_name(uint16_t type)
{
	static const char *const names[IPC_TYPE_MAX_] = {
		[IPC_HELLO] = "hello",
		[IPC_WELCOME] = "welcome",
		[IPC_DEVICE] = "device",
		[IPC_ATTACH] = "attach",
		[IPC_READY] = "ready",
		[IPC_SEG_ADD] = "seg-add",
		[IPC_SEG_DROP] = "seg-drop",
		[IPC_MOD_LOAD] = "mod-load",
		[IPC_MOD_DROP] = "mod-drop",
		[IPC_SUBMIT] = "submit",
		[IPC_DONE] = "done",
		[IPC_STATUS_REQ] = "status-req",
		[IPC_STATUS] = "status",
		[IPC_KILLED] = "killed",
		[IPC_QUEUE_OPEN] = "queue-open",
		[IPC_QUEUE_CLOSE] = "queue-close",
		[IPC_DBUF_ALLOC] = "dbuf-alloc",
		[IPC_DBUF_FREE] = "dbuf-free",
		[IPC_COPY] = "copy",
		[IPC_RINGS] = "rings",
		[IPC_KICK] = "kick",
		[IPC_CHANNEL_REQ] = "channel-req",
		[IPC_DRAIN] = "drain",
		[IPC_MOD_INFO] = "mod-info",
	};

	if (type < IPC_TYPE_MAX_ && names[type])
		return names[type];
	return "unknown";
}

bool ipc_status_valid(int status)
{
	return status <= GPUX_OK && status >= IPC_STATUS_MIN;
}

const char *ipc_status_name(int status)
{
	static const char *const names[] = {
		[-GPUX_OK] = "ok",
		[-GPUX_E_INVAL] = "inval",
		[-GPUX_E_NOMEM] = "nomem",
		[-GPUX_E_PROTO] = "proto",
		[-GPUX_E_CONNECT] = "connect",
		[-GPUX_E_PERM] = "perm",
		[-GPUX_E_NODEV] = "nodev",
		[-GPUX_E_WORKER_LOST] = "worker_lost",
		[-GPUX_E_KERNEL_FAULT] = "kernel_fault",
		[-GPUX_E_TIMEOUT] = "timeout",
		[-GPUX_E_COMPILE] = "compile",
		[-GPUX_E_NOTFOUND] = "notfound",
		[-GPUX_E_QUOTA] = "quota",
		[-GPUX_E_AGAIN] = "again",
		[-GPUX_E_NODRIVER] = "nodriver",
		[-GPUX_E_DEVICE] = "device",
		[-GPUX_E_IO] = "io",
		[-GPUX_E_VERSION] = "version",
		[-GPUX_E_STOPPING] = "stopping",
	};

	if (!ipc_status_valid(status) || !names[-status])
		return "unknown";
	return names[-status];
}

const char *ipc_status_text(int status)
{
	static const char *const text[] = {
		[-GPUX_OK] = "success",
		[-GPUX_E_INVAL] = "invalid argument",
		[-GPUX_E_NOMEM] = "out of memory",
		[-GPUX_E_PROTO] = "protocol error",
		[-GPUX_E_CONNECT] = "cannot reach gpuxd",
		[-GPUX_E_PERM] = "refused by gpuxd",
		[-GPUX_E_NODEV] = "no such device, or the device failed",
		[-GPUX_E_WORKER_LOST] = "the worker died",
		[-GPUX_E_KERNEL_FAULT] = "the kernel faulted",
		[-GPUX_E_TIMEOUT] = "deadline passed",
		[-GPUX_E_COMPILE] = "compile error",
		[-GPUX_E_NOTFOUND] = "no such kernel",
		[-GPUX_E_QUOTA] = "quota exceeded",
		[-GPUX_E_AGAIN] = "not finished yet",
		[-GPUX_E_NODRIVER] = "no CUDA driver",
		[-GPUX_E_DEVICE] = "device error",
		[-GPUX_E_IO] = "system call failed",
		[-GPUX_E_VERSION] = "no common protocol version",
		[-GPUX_E_STOPPING] = "gpuxd is stopping",
	};

	if (!ipc_status_valid(status) || !text[-status])
		return "unknown status";
	return text[-status];
}
