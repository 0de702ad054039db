/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-proto.c: libFuzzer target for ipc_msg_parse() and every message decoder. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "macro.h"
#include "proto.h"

/*
 * An input is one byte saying how many fds came with the record (modulo IPC_FDS_MAX + 2, so
 * one too many is tried too), then the record as received. Decoders only count fds: the
 * numbers below are never opened. Every decoder is tried on every parsed message; at most
 * the one of its type may accept it, and what it accepts must be consistent and encode back
 * to the same bytes.
 */

static const int fake_fds[IPC_FDS_MAX + 1] = { 1000, 1001, 1002, 1003, 1004 };

/* The record being checked, and where encoders write it again. */
static const uint8_t *in;
static size_t in_len;
static uint8_t out[IPC_MSG_MAX];

/* [p, p + len) lies inside the payload. */
static bool within(const struct ipc_msg *msg, const void *p, size_t len)
{
	const uint8_t *q = p;

	return q >= msg->payload && q <= msg->payload + msg->len &&
	       len <= (size_t)(msg->payload + msg->len - q);
}

/* An encoder gave back n bytes: they must be the input's, but for the header's flags (which
 * decoders ignore and encoders clear) and version (encoders write the newest). */
static void check_same(int n)
{
	struct ipc_hdr a, b;

	CHECK(n > 0 && (size_t)n == in_len);
	memcpy(&a, in, sizeof(a));
	memcpy(&b, out, sizeof(b));
	b.flags = a.flags;
	b.version = a.version;
	memcpy(out, &b, sizeof(b));
	CHECK(memcmp(out, in, in_len) == 0);
}

static void check_info(const struct ipc_device_info *info)
{
	CHECK(memchr(info->name, 0, sizeof(info->name)));
	CHECK(info->index < IPC_DEVICES_MAX);
}

static void check_mod_load(const struct ipc_msg *msg, const struct ipc_mod_load_msg *m)
{
	bool code_fd = m->m.flags & IPC_MOD_CODE_FD;
	size_t all = (size_t)m->m.code_len + m->m.extra_len;

	CHECK(m->m.options_len <= IPC_OPTIONS_MAX);
	CHECK(m->m.code_len > 0 && all <= IPC_CODE_MAX);
	CHECK(m->m.nheaders <= IPC_MOD_HEADERS_MAX && m->m.nnames <= IPC_MOD_NAMES_MAX);
	CHECK((m->m.nheaders == 0 && m->m.nnames == 0) || m->m.lang == IPC_LANG_CUDA);
	CHECK(within(msg, m->options, m->m.options_len));
	CHECK(!memchr(m->options, 0, m->m.options_len));
	CHECK(msg->nfds == (code_fd ? 1u : 0u));
	if (code_fd) {
		CHECK(!m->code);
	} else {
		struct ipc_mod_extra_cursor c;
		struct ipc_mod_item it;
		unsigned headers = 0, names = 0;
		int r;

		CHECK(all <= IPC_INLINE_CODE_MAX);
		CHECK(within(msg, m->code, all));
		CHECK(m->code + all == msg->payload + msg->len);
		/* Every item the decoder let through lies in the block and is well formed. */
		ipc_mod_extra_begin(&c, m->code + m->m.code_len, m->m.extra_len, m->m.nheaders,
				    m->m.nnames);
		while ((r = ipc_mod_extra_next(&c, &it)) > 0) {
			CHECK(within(msg, it.name, it.name_len) && it.name_len > 0);
			CHECK(!memchr(it.name, 0, it.name_len));
			if (it.text) {
				CHECK(it.name_len <= IPC_HEADER_NAME_MAX);
				CHECK(within(msg, it.text, it.text_len));
				CHECK(!memchr(it.text, 0, it.text_len));
				headers++;
			} else {
				CHECK(it.name_len <= IPC_KERNEL_NAME_MAX);
				names++;
			}
		}
		CHECK(r == 0 && headers == m->m.nheaders && names == m->m.nnames);
	}
	check_same(ipc_encode_mod_load(out, sizeof(out), msg->hdr.id, &m->m, m->options, m->code));
}

static void check_submit(const struct ipc_msg *msg, const struct ipc_submit_msg *m)
{
	CHECK(m->m.nargs <= IPC_ARGS_MAX);
	CHECK(m->m.name_len > 0 && strlen(m->name) == m->m.name_len);
	CHECK(within(msg, m->data, m->m.data_len));
	CHECK(m->data + m->m.data_len == msg->payload + msg->len);
	for (unsigned i = 0; i < 3; i++)
		CHECK(m->m.grid[i] > 0 && m->m.grid[i] <= IPC_GRID_MAX && m->m.block[i] > 0);
	for (unsigned i = 0; i < m->m.nargs; i++) {
		const struct ipc_arg *a = &m->args[i];
		uint64_t end;

		CHECK(a->size > 0 && add_ok(a->offset, a->size, &end));
		if (a->kind == IPC_ARG_SCALAR) {
			CHECK(a->size <= IPC_SCALAR_MAX);
			CHECK(end <= m->m.data_len);
			CHECK(a->flags == 0 && a->ref == 0);
		} else {
			CHECK(a->kind >= IPC_ARG_IN && a->kind <= IPC_ARG_DBUF);
			CHECK(a->flags == 0 ||
			      (a->kind == IPC_ARG_IN && a->flags == IPC_ARG_CACHED));
		}
	}
	check_same(
		ipc_encode_submit(out, sizeof(out), msg->hdr.id, &m->m, m->args, m->name, m->data));
}

static void check_done(const struct ipc_msg *msg, const struct ipc_done_msg *m)
{
	static char text[IPC_TEXT_MAX + 1];

	CHECK(m->m.status <= 0);
	CHECK(m->m.text_len <= IPC_TEXT_MAX);
	CHECK(within(msg, m->text, m->m.text_len));
	/* The encoder takes a C string: only a text without NUL comes back the same. */
	if (memchr(m->text, 0, m->m.text_len))
		return;
	memcpy(text, m->text, m->m.text_len);
	text[m->m.text_len] = '\0';
	check_same(ipc_encode_done(out, sizeof(out), msg->hdr.id, &m->m, text));
}

static void check_status(const struct ipc_msg *msg, const struct ipc_status_msg *m)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];

	CHECK(m->m.ndevices <= IPC_DEVICES_MAX && m->m.first + m->m.count <= m->m.ndevices);
	CHECK(memchr(m->m.loop, 0, sizeof(m->m.loop)) &&
	      memchr(m->m.version, 0, sizeof(m->m.version)));
	CHECK(within(msg, m->devs, (size_t)m->m.count * sizeof(devs[0])));
	for (uint32_t i = 0; i < m->m.count; i++) {
		ipc_status_dev(m, i, &devs[i]);
		check_info(&devs[i].info);
		CHECK(memchr(devs[i].stats.driver, 0, sizeof(devs[i].stats.driver)));
	}
	check_same(ipc_encode_status(out, sizeof(out), msg->hdr.id, &m->m, devs));
}

static void check_clients(const struct ipc_msg *msg, const struct ipc_clients_msg *m)
{
	static struct ipc_client_info rows[IPC_CLIENTS_PAGE];

	CHECK(m->m.count <= IPC_CLIENTS_PAGE && m->m.count <= m->m.total);
	CHECK(within(msg, m->rows, (size_t)m->m.count * sizeof(rows[0])));
	for (uint32_t i = 0; i < m->m.count; i++) {
		ipc_clients_row(m, i, &rows[i]);
		CHECK(rows[i].id > (i ? rows[i - 1].id : 0));
	}
	check_same(ipc_encode_clients(out, sizeof(out), msg->hdr.id, &m->m, rows));
}

/* Every decoder's output: a member per type with a payload (ipc/proto-schema.h). */
#define DECODED_FIXED_(name, decoded) struct ipc_##decoded name;
#define DECODED_VAR_ DECODED_FIXED_
#define DECODED_EMPTY_(name, decoded)
#define DECODED_(T, num, name, label, fx, decoded, fds, shape) DECODED_##shape##_(name, decoded)
union decoded {
	IPC_MESSAGES(DECODED_)
};

/* What the fields of a FIXED message the decoder took must be, said again here. */
static void check_fields(const struct ipc_msg *msg, const union decoded *u)
{
	uint64_t end;

	switch (msg->hdr.type) {
	case IPC_HELLO:
		CHECK(u->hello.min_version <= u->hello.max_version);
		break;
	case IPC_WELCOME:
		CHECK(u->welcome.ndevices <= IPC_DEVICES_MAX);
		break;
	case IPC_DEVICE:
		check_info(&u->device.info);
		break;
	case IPC_READY:
		check_info(&u->ready.info);
		break;
	case IPC_SEG_ADD:
		CHECK(u->seg_add.size > 0);
		break;
	case IPC_DBUF_ALLOC:
		CHECK(u->dbuf_alloc.size > 0);
		break;
	case IPC_COPY:
		CHECK(u->copy.dir == IPC_COPY_TO_DBUF || u->copy.dir == IPC_COPY_FROM_DBUF);
		CHECK(u->copy.size > 0);
		CHECK(add_ok(u->copy.dbuf_offset, u->copy.size, &end) &&
		      add_ok(u->copy.seg_offset, u->copy.size, &end));
		break;
	case IPC_RINGS:
		CHECK(u->rings.flags == 0);
		break;
	case IPC_CHANNEL_REQ:
		CHECK(u->channel_req.device < IPC_DEVICES_MAX);
		break;
	case IPC_CLIENTS_REQ:
		CHECK(u->clients_req.flags == 0);
		break;
	case IPC_MOD_INFO:
		CHECK(msg->hdr.id != 0 && u->mod_info.source >= IPC_MOD_COMPILED &&
		      u->mod_info.source <= IPC_MOD_MEMORY);
		break;
	case IPC_ADOPT:
		CHECK(u->adopt.client_id != 0);
		break;
	case IPC_KERNEL_ATTRS_REQ:
	case IPC_GLOBAL_REQ: {
		const struct ipc_sym_req *q =
			msg->hdr.type == IPC_GLOBAL_REQ ? &u->global_req : &u->kernel_attrs_req;

		CHECK(msg->hdr.id != 0 && q->flags == 0);
		CHECK(q->name_len > 0 && q->name_len <= IPC_KERNEL_NAME_MAX);
		CHECK(strlen(q->name) == q->name_len);
		CHECK(msg->hdr.type == IPC_GLOBAL_REQ || q->dbuf_id == 0);
		break;
	}
	case IPC_KERNEL_ATTRS:
		CHECK(msg->hdr.id != 0 && u->kernel_attrs.num_regs >= IPC_ATTR_UNKNOWN &&
		      u->kernel_attrs.nparams <= (int32_t)IPC_ARGS_MAX &&
		      !u->kernel_attrs.reserved[4]);
		break;
	case IPC_GLOBAL:
		CHECK(msg->hdr.id != 0 && u->global.size > 0 &&
		      !(u->global.flags & ~IPC_GLOBAL_READ_ONLY));
		break;
	}
}

/*
 * Decode msg as `type`; when that succeeds, check the result (msg must be of that type). A
 * FIXED message is its fixed part with the schema's fds, an EMPTY one nothing at all; both
 * encode back to the same bytes. A VAR one has its own check.
 */
static int decode_check(const struct ipc_msg *msg, uint16_t type)
{
	static union decoded u;
	int r;

	switch (type) {
#define DECODE_CHECK_FIXED_(T, name, fx, fds)                                                      \
	case IPC_##T: {                                                                            \
		const struct ipc_##fx *m = &u.name;                                                \
                                                                                                   \
		r = ipc_decode_##name(msg, &u.name);                                               \
		if (r == 0) {                                                                      \
			CHECK(msg->len == sizeof(*m) && msg->nfds == (fds));                       \
			check_fields(msg, &u);                                                     \
			check_same(ipc_encode_##name(out, sizeof(out), msg->hdr.id, m));           \
		}                                                                                  \
		return r;                                                                          \
	}
#define DECODE_CHECK_EMPTY_(T, name, fx, fds)                                                      \
	case IPC_##T:                                                                              \
		r = ipc_decode_##name(msg);                                                        \
		if (r == 0) {                                                                      \
			CHECK(msg->len == 0 && msg->nfds == 0);                                    \
			check_same(ipc_encode_##name(out, sizeof(out), msg->hdr.id));              \
		}                                                                                  \
		return r;
#define DECODE_CHECK_VAR_(T, name, fx, fds)                                                        \
	case IPC_##T:                                                                              \
		r = ipc_decode_##name(msg, &u.name);                                               \
		if (r == 0)                                                                        \
			check_##name(msg, &u.name);                                                \
		return r;
#define DECODE_CHECK_(T, num, name, label, fx, decoded, fds, shape)                                \
	DECODE_CHECK_##shape##_(T, name, fx, fds)
		IPC_MESSAGES(DECODE_CHECK_)
	}
	/* No type of the schema: the one decoder that takes a type refuses it too. */
	return ipc_decode_queue(msg, type, &u.queue_open);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ipc_msg msg;
	unsigned nfds;
	int r;

	if (size < 1)
		return 0;
	nfds = data[0] % (IPC_FDS_MAX + 2);
	in = data + 1;
	in_len = size - 1;

	r = ipc_msg_parse(in, in_len, fake_fds, nfds, &msg);
	if (r < 0) {
		CHECK(r == -EBADMSG || r == -EPROTONOSUPPORT || r == -EMSGSIZE);
		return 0;
	}
	CHECK(in_len >= sizeof(struct ipc_hdr) && in_len <= IPC_MSG_MAX);
	CHECK(msg.payload == in + sizeof(struct ipc_hdr));
	CHECK(msg.len == in_len - sizeof(struct ipc_hdr) && msg.len == msg.hdr.len);
	CHECK(msg.nfds == nfds && msg.hdr.nfds == nfds && nfds <= IPC_FDS_MAX);
	CHECK(msg.hdr.type > 0 && msg.hdr.type < IPC_TYPE_MAX_);
	CHECK(msg.hdr.magic == IPC_MAGIC);
	CHECK((msg.hdr.version >= IPC_VERSION_MIN && msg.hdr.version <= IPC_VERSION) ||
	      (msg.hdr.type == IPC_HELLO && msg.hdr.version >= 1));
	for (unsigned i = 0; i < IPC_FDS_MAX; i++)
		CHECK(msg.fds[i] == (i < nfds ? fake_fds[i] : -1));
	CHECK(strcmp(ipc_type_name(msg.hdr.type), "unknown") != 0);

	/* Only the decoder of the message's own type may accept it. */
	for (uint16_t t = 0; t <= IPC_TYPE_MAX_; t++) {
		r = decode_check(&msg, t);
		CHECK(r == 0 || r == -EBADMSG);
		CHECK(r < 0 || t == msg.hdr.type);
		/* A refusal is worded exactly when the decoder refuses. */
		if (t == IPC_SUBMIT)
			CHECK((r == 0) == (ipc_submit_refusal(&msg) == NULL));
	}
	return 0;
}
