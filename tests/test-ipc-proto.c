/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-proto.c: every message round-trips, and decoders refuse malformed messages. */
#include <errno.h>
#include <string.h>

#include "helpers.h"
#include "ipc/macro.h"
#include "ipc/proto.h"

#define HDR sizeof(struct ipc_hdr)

/* Decoders only count fds, never use them: these numbers are never opened. */
static const int fake_fds[IPC_FDS_MAX + 4] = { 100, 101, 102, 103, 104, 105, 106, 107 };

/* One message buffer for the encoders, room for one byte past the limit. */
static uint8_t msgbuf[IPC_MSG_MAX + 64];

static int parse(const void *buf, size_t len, unsigned nfds, struct ipc_msg *ret)
{
	return ipc_msg_parse(buf, len, fake_fds, nfds, ret);
}

/* Decode msg as a message of `type`, whatever its header says: the decoder's answer. */
static int decode_as(const struct ipc_msg *msg, uint16_t type)
{
	static union {
		struct ipc_hello hello;
		struct ipc_welcome welcome;
		struct ipc_device device;
		struct ipc_attach attach;
		struct ipc_ready ready;
		struct ipc_seg_add seg_add;
		struct ipc_seg_drop seg_drop;
		struct ipc_mod_load_msg mod_load;
		struct ipc_mod_drop mod_drop;
		struct ipc_queue_msg queue;
		struct ipc_dbuf_alloc dbuf_alloc;
		struct ipc_dbuf_free dbuf_free;
		struct ipc_copy copy;
		struct ipc_submit_msg submit;
		struct ipc_done_msg done;
		struct ipc_status_req status_req;
		struct ipc_status_msg status;
		struct ipc_killed killed;
		struct ipc_rings_offer rings;
	} u;

	switch (type) {
	case IPC_HELLO:
		return ipc_decode_hello(msg, &u.hello);
	case IPC_WELCOME:
		return ipc_decode_welcome(msg, &u.welcome);
	case IPC_DEVICE:
		return ipc_decode_device(msg, &u.device);
	case IPC_ATTACH:
		return ipc_decode_attach(msg, &u.attach);
	case IPC_READY:
		return ipc_decode_ready(msg, &u.ready);
	case IPC_SEG_ADD:
		return ipc_decode_seg_add(msg, &u.seg_add);
	case IPC_SEG_DROP:
		return ipc_decode_seg_drop(msg, &u.seg_drop);
	case IPC_MOD_LOAD:
		return ipc_decode_mod_load(msg, &u.mod_load);
	case IPC_MOD_DROP:
		return ipc_decode_mod_drop(msg, &u.mod_drop);
	case IPC_SUBMIT:
		return ipc_decode_submit(msg, &u.submit);
	case IPC_DONE:
		return ipc_decode_done(msg, &u.done);
	case IPC_STATUS_REQ:
		return ipc_decode_status_req(msg, &u.status_req);
	case IPC_STATUS:
		return ipc_decode_status(msg, &u.status);
	case IPC_KILLED:
		return ipc_decode_killed(msg, &u.killed);
	case IPC_QUEUE_OPEN:
	case IPC_QUEUE_CLOSE:
		return ipc_decode_queue(msg, type, &u.queue);
	case IPC_DBUF_ALLOC:
		return ipc_decode_dbuf_alloc(msg, &u.dbuf_alloc);
	case IPC_DBUF_FREE:
		return ipc_decode_dbuf_free(msg, &u.dbuf_free);
	case IPC_COPY:
		return ipc_decode_copy(msg, &u.copy);
	case IPC_RINGS:
		return ipc_decode_rings(msg, &u.rings);
	case IPC_KICK:
		return ipc_decode_kick(msg);
	}
	fail_msg("no decoder for type %u", type);
	return 0;
}

/* Encode a message from its parts, parse it (which must succeed) and decode it as `type`. */
static int encode_decode(uint16_t type, unsigned nfds, const void *fixed, size_t fixed_len,
			 const struct ipc_part *parts, unsigned nparts)
{
	struct ipc_msg msg;
	int n = ipc_encode(msgbuf, sizeof(msgbuf), type, 1, nfds, fixed, fixed_len, parts, nparts);

	assert_true(n > 0);
	assert_int_equal(parse(msgbuf, (size_t)n, nfds, &msg), 0);
	return decode_as(&msg, type);
}

#define DECODE_FIXED(type, nfds, m) encode_decode((type), (nfds), &(m), sizeof(m), NULL, 0)

/* Parse a freshly encoded message and check its header and the fds it was given. */
static void check_parsed(const uint8_t *buf, int n, uint16_t type, uint32_t id, unsigned nfds,
			 struct ipc_msg *msg)
{
	assert_true(n >= (int)HDR);
	assert_int_equal(parse(buf, (size_t)n, nfds, msg), 0);
	assert_int_equal(msg->hdr.magic, IPC_MAGIC);
	assert_int_equal(msg->hdr.version, IPC_VERSION);
	assert_int_equal(msg->hdr.flags, 0);
	assert_int_equal(msg->hdr.type, type);
	assert_int_equal(msg->hdr.nfds, nfds);
	assert_int_equal(msg->hdr.len, n - (int)HDR);
	assert_int_equal(msg->hdr.id, id);
	assert_ptr_equal(msg->payload, buf + HDR);
	assert_int_equal(msg->len, n - (int)HDR);
	assert_int_equal(msg->nfds, nfds);
	for (unsigned i = 0; i < IPC_FDS_MAX; i++)
		assert_int_equal(msg->fds[i], i < nfds ? fake_fds[i] : -1);
}

static struct ipc_device_info good_info(uint32_t index)
{
	struct ipc_device_info info = {
		.index = index,
		.backend = GPUX_BACKEND_HOST,
		.cc_major = 8,
		.cc_minor = 6,
		.sm_count = 84,
		.max_threads_per_block = 1024,
		.mem_total = 24 * GiB + 1,
		.uuid = { 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0xff },
		.name = "host CPU",
	};

	return info;
}

static void assert_info_equal(const struct ipc_device_info *a, const struct ipc_device_info *b)
{
	assert_int_equal(a->index, b->index);
	assert_int_equal(a->backend, b->backend);
	assert_int_equal(a->cc_major, b->cc_major);
	assert_int_equal(a->cc_minor, b->cc_minor);
	assert_int_equal(a->sm_count, b->sm_count);
	assert_int_equal(a->max_threads_per_block, b->max_threads_per_block);
	assert_int_equal(a->mem_total, b->mem_total);
	assert_memory_equal(a->uuid, b->uuid, sizeof(a->uuid));
	assert_memory_equal(a->name, b->name, sizeof(a->name));
}

static void assert_arg_equal(const struct ipc_arg *a, const struct ipc_arg *b)
{
	assert_int_equal(a->kind, b->kind);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->ref, b->ref);
	assert_int_equal(a->offset, b->offset);
	assert_int_equal(a->size, b->size);
}

/* ---- round trips ---- */

static void test_proto_hello_round_trips(void **state)
{
	struct ipc_hello in = { IPC_VERSION_MIN, IPC_VERSION, IPC_HELLO_ADMIN, 0 }, out;
	struct ipc_msg msg;
	int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_HELLO, 42, 0, &in, sizeof(in), NULL, 0);

	assert_int_equal(n, HDR + sizeof(in));
	check_parsed(msgbuf, n, IPC_HELLO, 42, 0, &msg);
	assert_int_equal(ipc_decode_hello(&msg, &out), 0);
	assert_int_equal(out.min_version, in.min_version);
	assert_int_equal(out.max_version, in.max_version);
	assert_int_equal(out.flags, in.flags);
	assert_int_equal(out.reserved, in.reserved);
}

static void test_proto_welcome_round_trips(void **state)
{
	struct ipc_welcome in = { IPC_VERSION, IPC_DEVICES_MAX, UINT64_MAX - 5 }, out;
	struct ipc_msg msg;
	int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_WELCOME, 7, 0, &in, sizeof(in), NULL, 0);

	check_parsed(msgbuf, n, IPC_WELCOME, 7, 0, &msg);
	assert_int_equal(ipc_decode_welcome(&msg, &out), 0);
	assert_int_equal(out.version, in.version);
	assert_int_equal(out.ndevices, in.ndevices);
	assert_int_equal(out.client_id, in.client_id);
}

static void test_proto_device_round_trips(void **state)
{
	for (unsigned channel = 0; channel < 2; channel++) {
		struct ipc_device in = {
			.info = good_info(IPC_DEVICES_MAX - 1),
			.state = channel ? GPUX_DEVICE_READY : GPUX_DEVICE_RESTARTING,
			.generation = 99,
			.flags = channel ? IPC_DEVICE_CHANNEL : 0,
		};
		struct ipc_device out;
		struct ipc_msg msg;
		unsigned nfds = channel ? 2 : 0;
		int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_DEVICE, 0, nfds, &in, sizeof(in),
				   NULL, 0);

		check_parsed(msgbuf, n, IPC_DEVICE, 0, nfds, &msg);
		assert_int_equal(ipc_decode_device(&msg, &out), 0);
		assert_info_equal(&out.info, &in.info);
		assert_int_equal(out.state, in.state);
		assert_int_equal(out.generation, in.generation);
		assert_int_equal(out.flags, in.flags);
		assert_int_equal(out.reserved, in.reserved);
	}
}

static void test_proto_attach_round_trips(void **state)
{
	struct ipc_attach in = { 0xfedcba9876543210ull, 1000, 100, 12345, 0 }, out;
	struct ipc_msg msg;
	int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_ATTACH, 3, 1, &in, sizeof(in), NULL, 0);

	check_parsed(msgbuf, n, IPC_ATTACH, 3, 1, &msg);
	assert_int_equal(ipc_decode_attach(&msg, &out), 0);
	assert_int_equal(out.client_id, in.client_id);
	assert_int_equal(out.uid, in.uid);
	assert_int_equal(out.gid, in.gid);
	assert_int_equal(out.pid, in.pid);
	assert_int_equal(out.reserved, in.reserved);
}

static void test_proto_ready_round_trips(void **state)
{
	struct ipc_ready in = { good_info(3) }, out;
	struct ipc_msg msg;
	int n;

	in.info.backend = GPUX_BACKEND_CUDA;
	n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_READY, 9, 0, &in, sizeof(in), NULL, 0);
	check_parsed(msgbuf, n, IPC_READY, 9, 0, &msg);
	assert_int_equal(ipc_decode_ready(&msg, &out), 0);
	assert_info_equal(&out.info, &in.info);
}

static void test_proto_seg_add_round_trips(void **state)
{
	struct ipc_seg_add in = { UINT64_MAX, UINT64_MAX - 1, IPC_SEG_FROZEN, 0 }, out;
	struct ipc_msg msg;
	int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_SEG_ADD, 11, 1, &in, sizeof(in), NULL, 0);

	check_parsed(msgbuf, n, IPC_SEG_ADD, 11, 1, &msg);
	assert_int_equal(ipc_decode_seg_add(&msg, &out), 0);
	assert_int_equal(out.seg_id, in.seg_id);
	assert_int_equal(out.size, in.size);
	assert_int_equal(out.flags, in.flags);
	assert_int_equal(out.reserved, in.reserved);
}

static void test_proto_seg_drop_round_trips(void **state)
{
	struct ipc_seg_drop in = { 0x8000000000000001ull }, out;
	struct ipc_msg msg;
	int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_SEG_DROP, 0, 0, &in, sizeof(in), NULL, 0);

	check_parsed(msgbuf, n, IPC_SEG_DROP, 0, 0, &msg);
	assert_int_equal(ipc_decode_seg_drop(&msg, &out), 0);
	assert_int_equal(out.seg_id, in.seg_id);
}

static void test_proto_mod_load_round_trips(void **state)
{
	static const char options[] = "-arch=sm_90 --std=c++17";
	static const char code[] = "extern \"C\" __global__ void k(int *p) { *p = 1; }";
	static const char big_code[IPC_INLINE_CODE_MAX] = "int x;";
	struct ipc_mod_load inline_m = {
		.mod_id = 5,
		.lang = GPUX_LANG_CUDA,
		.options_len = sizeof(options) - 1,
		.code_len = sizeof(code) - 1,
	};
	struct ipc_mod_load fd_m = {
		.mod_id = 6,
		.lang = GPUX_LANG_PTX,
		.flags = IPC_MOD_CODE_FD,
		.options_len = sizeof(options) - 1,
		.code_len = IPC_CODE_MAX,
	};
	struct ipc_mod_load_msg out;
	struct ipc_msg msg;
	int n;

	n = ipc_encode_mod_load(msgbuf, sizeof(msgbuf), 21, &inline_m, options, code);
	assert_int_equal(n, HDR + sizeof(inline_m) + inline_m.options_len + inline_m.code_len);
	check_parsed(msgbuf, n, IPC_MOD_LOAD, 21, 0, &msg);
	assert_int_equal(ipc_decode_mod_load(&msg, &out), 0);
	assert_memory_equal(&out.m, &inline_m, sizeof(inline_m));
	assert_ptr_equal(out.options, msg.payload + sizeof(inline_m));
	assert_memory_equal(out.options, options, inline_m.options_len);
	assert_ptr_equal(out.code, msg.payload + sizeof(inline_m) + inline_m.options_len);
	assert_memory_equal(out.code, code, inline_m.code_len);

	n = ipc_encode_mod_load(msgbuf, sizeof(msgbuf), 22, &fd_m, options, NULL);
	assert_int_equal(n, HDR + sizeof(fd_m) + fd_m.options_len);
	check_parsed(msgbuf, n, IPC_MOD_LOAD, 22, 1, &msg);
	assert_int_equal(ipc_decode_mod_load(&msg, &out), 0);
	assert_memory_equal(&out.m, &fd_m, sizeof(fd_m));
	assert_memory_equal(out.options, options, fd_m.options_len);
	assert_null(out.code);

	inline_m.options_len = 0;
	inline_m.lang = GPUX_LANG_HOST;
	inline_m.code_len = IPC_INLINE_CODE_MAX;
	n = ipc_encode_mod_load(msgbuf, sizeof(msgbuf), 23, &inline_m, NULL, big_code);
	check_parsed(msgbuf, n, IPC_MOD_LOAD, 23, 0, &msg);
	assert_int_equal(ipc_decode_mod_load(&msg, &out), 0);
	assert_int_equal(out.m.code_len, IPC_INLINE_CODE_MAX);
	assert_int_equal(out.m.options_len, 0);
	assert_ptr_equal(out.code, msg.payload + sizeof(inline_m));
}

static void test_proto_mod_drop_round_trips(void **state)
{
	struct ipc_mod_drop in = { 77 }, out;
	struct ipc_msg msg;
	int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_MOD_DROP, 2, 0, &in, sizeof(in), NULL, 0);

	check_parsed(msgbuf, n, IPC_MOD_DROP, 2, 0, &msg);
	assert_int_equal(ipc_decode_mod_drop(&msg, &out), 0);
	assert_int_equal(out.mod_id, in.mod_id);
}

static void test_proto_queue_round_trips(void **state)
{
	const uint16_t types[] = { IPC_QUEUE_OPEN, IPC_QUEUE_CLOSE };

	for (unsigned i = 0; i < ARRAY_SIZE(types); i++) {
		struct ipc_queue_msg in = { 1000 + i, 0 }, out;
		struct ipc_msg msg;
		int n =
		    ipc_encode(msgbuf, sizeof(msgbuf), types[i], 5, 0, &in, sizeof(in), NULL, 0);

		check_parsed(msgbuf, n, types[i], 5, 0, &msg);
		assert_int_equal(ipc_decode_queue(&msg, types[i], &out), 0);
		assert_int_equal(out.queue, in.queue);
		assert_int_equal(out.flags, in.flags);
	}
}

static void test_proto_dbuf_alloc_round_trips(void **state)
{
	struct ipc_dbuf_alloc in = { UINT64_MAX, UINT64_MAX - 1, 0, 0 }, out;
	struct ipc_msg msg;
	int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_DBUF_ALLOC, 12, 0, &in, sizeof(in), NULL, 0);

	assert_int_equal(n, HDR + 24);
	check_parsed(msgbuf, n, IPC_DBUF_ALLOC, 12, 0, &msg);
	assert_int_equal(ipc_decode_dbuf_alloc(&msg, &out), 0);
	assert_int_equal(out.dbuf_id, in.dbuf_id);
	assert_int_equal(out.size, in.size);

	/* The smallest buffer. */
	in = (struct ipc_dbuf_alloc){ 0, 1, 0, 0 };
	n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_DBUF_ALLOC, 13, 0, &in, sizeof(in), NULL, 0);
	check_parsed(msgbuf, n, IPC_DBUF_ALLOC, 13, 0, &msg);
	assert_int_equal(ipc_decode_dbuf_alloc(&msg, &out), 0);
	assert_int_equal(out.dbuf_id, 0);
	assert_int_equal(out.size, 1);
}

static void test_proto_dbuf_free_round_trips(void **state)
{
	struct ipc_dbuf_free in = { 0x8000000000000001ull }, out;
	struct ipc_msg msg;
	int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_DBUF_FREE, 0, 0, &in, sizeof(in), NULL, 0);

	assert_int_equal(n, HDR + 8);
	check_parsed(msgbuf, n, IPC_DBUF_FREE, 0, 0, &msg);
	assert_int_equal(ipc_decode_dbuf_free(&msg, &out), 0);
	assert_int_equal(out.dbuf_id, in.dbuf_id);
}

static void test_proto_copy_round_trips(void **state)
{
	/* Both directions, each with one range ending exactly at 2^64 - 1. */
	const struct ipc_copy ins[] = {
		{ 0x0102030405060708ull, UINT64_MAX - 4096, 0x1112131415161718ull, 0, 4096,
		  IPC_COPY_TO_DBUF, 7, 0, 0 },
		{ UINT64_MAX, 0, 0, UINT64_MAX - 1, 1, IPC_COPY_FROM_DBUF, UINT32_MAX, 0, 0 },
		{ 1, 0, 2, 0, UINT64_MAX, IPC_COPY_TO_DBUF, 0, 0, 0 },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(ins); i++) {
		const struct ipc_copy *in = &ins[i];
		struct ipc_copy out;
		struct ipc_msg msg;
		int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_COPY, 40 + i, 0, in, sizeof(*in),
				   NULL, 0);

		assert_int_equal(n, HDR + 56);
		check_parsed(msgbuf, n, IPC_COPY, 40 + i, 0, &msg);
		assert_int_equal(ipc_decode_copy(&msg, &out), 0);
		assert_int_equal(out.dbuf_id, in->dbuf_id);
		assert_int_equal(out.dbuf_offset, in->dbuf_offset);
		assert_int_equal(out.seg_id, in->seg_id);
		assert_int_equal(out.seg_offset, in->seg_offset);
		assert_int_equal(out.size, in->size);
		assert_int_equal(out.dir, in->dir);
		assert_int_equal(out.queue, in->queue);
	}
}

static void test_proto_submit_round_trips(void **state)
{
	static struct ipc_arg args[IPC_ARGS_MAX];
	static char name[IPC_KERNEL_NAME_MAX + 1];
	uint8_t data[IPC_ARGS_MAX * 4];
	struct ipc_submit in = {
		.mod_id = 0x0102030405060708ull,
		.queue = 4,
		.nargs = IPC_ARGS_MAX,
		.grid = { IPC_GRID_MAX, 65535, 65535 },
		.block = { 1024, 1, 64 },
		.shared_bytes = 48 * 1024,
		.timeout_ms = 1,
		.data_len = sizeof(data),
		.reserved = 0,
	};
	static struct ipc_submit_msg out;
	struct ipc_msg msg;
	int n;

	test_random_fill(data, sizeof(data), 1);
	/* Scalars between buffer arguments of every kind, some of the IN ones cached. */
	for (unsigned i = 0; i < IPC_ARGS_MAX; i++) {
		uint32_t kind = GPUX_ARG_IN + i % 5;
		uint32_t flags = kind == GPUX_ARG_IN && i % 4 == 1 ? GPUX_ARG_CACHED : 0;

		if (i % 2 == 0)
			args[i] = (struct ipc_arg){ GPUX_ARG_SCALAR, 0, 0, i * 4, 4 };
		else
			args[i] = (struct ipc_arg){ kind, flags, i, UINT64_MAX - i, i };
	}
	memset(name, 'k', IPC_KERNEL_NAME_MAX);
	name[IPC_KERNEL_NAME_MAX] = '\0';

	n = ipc_encode_submit(msgbuf, sizeof(msgbuf), 31, &in, args, name, data);
	assert_int_equal(n, HDR + sizeof(in) + sizeof(args) + IPC_KERNEL_NAME_MAX + sizeof(data));
	check_parsed(msgbuf, n, IPC_SUBMIT, 31, 0, &msg);
	assert_int_equal(ipc_decode_submit(&msg, &out), 0);
	assert_int_equal(out.m.mod_id, in.mod_id);
	assert_int_equal(out.m.queue, in.queue);
	assert_int_equal(out.m.nargs, in.nargs);
	assert_memory_equal(out.m.grid, in.grid, sizeof(in.grid));
	assert_memory_equal(out.m.block, in.block, sizeof(in.block));
	assert_int_equal(out.m.shared_bytes, in.shared_bytes);
	assert_int_equal(out.m.timeout_ms, in.timeout_ms);
	assert_int_equal(out.m.flags, 0);
	assert_int_equal(out.m.name_len, IPC_KERNEL_NAME_MAX);
	assert_int_equal(out.m.data_len, in.data_len);
	assert_int_equal(out.m.reserved, 0);
	for (unsigned i = 0; i < IPC_ARGS_MAX; i++)
		assert_arg_equal(&out.args[i], &args[i]);
	assert_string_equal(out.name, name);
	assert_ptr_equal(out.data, msg.payload + n - HDR - sizeof(data));
	assert_memory_equal(out.data, data, sizeof(data));
}

static void test_proto_submit_without_args_round_trips(void **state)
{
	struct ipc_submit in = { .mod_id = 1, .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	static struct ipc_submit_msg out;
	struct ipc_msg msg;
	int n = ipc_encode_submit(msgbuf, sizeof(msgbuf), 1, &in, NULL, "k", NULL);

	check_parsed(msgbuf, n, IPC_SUBMIT, 1, 0, &msg);
	assert_int_equal(ipc_decode_submit(&msg, &out), 0);
	assert_int_equal(out.m.nargs, 0);
	assert_int_equal(out.m.data_len, 0);
	assert_string_equal(out.name, "k");
	assert_ptr_equal(out.data, msg.payload + msg.len);
}

static void test_proto_done_round_trips(void **state)
{
	static const char text[] = "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access";
	struct ipc_done in = { GPUX_E_KERNEL_FAULT, 0, 1, UINT64_MAX, 12345 };
	struct ipc_done_msg out;
	struct ipc_msg msg;
	int n = ipc_encode_done(msgbuf, sizeof(msgbuf), 17, &in, text);

	assert_int_equal(n, HDR + sizeof(in) + strlen(text));
	check_parsed(msgbuf, n, IPC_DONE, 17, 0, &msg);
	assert_int_equal(ipc_decode_done(&msg, &out), 0);
	assert_int_equal(out.m.status, in.status);
	assert_int_equal(out.m.text_len, strlen(text));
	assert_int_equal(out.m.queue_ns, in.queue_ns);
	assert_int_equal(out.m.run_ns, in.run_ns);
	assert_int_equal(out.m.device_ns, in.device_ns);
	assert_ptr_equal(out.text, msg.payload + sizeof(in));
	assert_memory_equal(out.text, text, strlen(text));

	in.status = GPUX_OK;
	n = ipc_encode_done(msgbuf, sizeof(msgbuf), 18, &in, NULL);
	check_parsed(msgbuf, n, IPC_DONE, 18, 0, &msg);
	assert_int_equal(ipc_decode_done(&msg, &out), 0);
	assert_int_equal(out.m.status, GPUX_OK);
	assert_int_equal(out.m.text_len, 0);
}

static void test_proto_status_req_round_trips(void **state)
{
	struct ipc_status_req in = { 0, 0 }, out;
	struct ipc_msg msg;
	int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_STATUS_REQ, 8, 0, &in, sizeof(in), NULL, 0);

	check_parsed(msgbuf, n, IPC_STATUS_REQ, 8, 0, &msg);
	assert_int_equal(ipc_decode_status_req(&msg, &out), 0);
	assert_int_equal(out.flags, 0);
	assert_int_equal(out.reserved, 0);
}

static struct ipc_dev_status good_dev_status(uint32_t index)
{
	struct ipc_dev_status d = {
		.info = good_info(index),
		.state = GPUX_DEVICE_STARTING + index % 4,
		.pid = 1000 + index,
		.generation = index * 3,
		.restarts = index,
		.deaths_recent = index % 5,
	};

	test_random_fill(&d.stats, sizeof(d.stats), index);
	return d;
}

static void test_proto_status_round_trips(void **state)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct ipc_status in = {
		.ndevices = IPC_DEVICES_MAX,
		.nclients = 3,
		.uptime_ns = 1,
		.clients_total = 2,
		.clients_refused = UINT64_MAX,
		.loop = "epoll",
	};
	struct ipc_status_msg out;
	struct ipc_msg msg;
	int n;

	for (unsigned i = 0; i < IPC_DEVICES_MAX; i++)
		devs[i] = good_dev_status(i);
	/* One byte in: the devices lie unaligned, as they may on the wire. */
	n = ipc_encode_status(msgbuf + 1, sizeof(msgbuf) - 1, 19, &in, devs);
	assert_int_equal(n, HDR + sizeof(in) + sizeof(devs));
	check_parsed(msgbuf + 1, n, IPC_STATUS, 19, 0, &msg);
	assert_int_equal(ipc_decode_status(&msg, &out), 0);
	assert_int_equal(out.m.ndevices, in.ndevices);
	assert_int_equal(out.m.nclients, in.nclients);
	assert_int_equal(out.m.uptime_ns, in.uptime_ns);
	assert_int_equal(out.m.clients_total, in.clients_total);
	assert_int_equal(out.m.clients_refused, in.clients_refused);
	assert_memory_equal(out.m.loop, in.loop, sizeof(in.loop));
	assert_ptr_equal(out.devs, msg.payload + sizeof(in));
	for (uint32_t i = 0; i < IPC_DEVICES_MAX; i++) {
		struct ipc_dev_status d;

		ipc_status_dev(&out, i, &d);
		assert_info_equal(&d.info, &devs[i].info);
		assert_int_equal(d.state, devs[i].state);
		assert_int_equal(d.pid, devs[i].pid);
		assert_int_equal(d.generation, devs[i].generation);
		assert_int_equal(d.restarts, devs[i].restarts);
		assert_int_equal(d.deaths_recent, devs[i].deaths_recent);
		assert_int_equal(d.reserved, devs[i].reserved);
		assert_memory_equal(&d.stats, &devs[i].stats, sizeof(d.stats));
	}

	in.ndevices = 0;
	n = ipc_encode_status(msgbuf, sizeof(msgbuf), 20, &in, NULL);
	check_parsed(msgbuf, n, IPC_STATUS, 20, 0, &msg);
	assert_int_equal(ipc_decode_status(&msg, &out), 0);
	assert_int_equal(out.m.ndevices, 0);
}

static void test_proto_killed_round_trips(void **state)
{
	struct ipc_killed in = { IPC_DEVICES_MAX - 1, IPC_KILL_TIMEOUT, UINT32_MAX, 4 }, out;
	struct ipc_msg msg;
	int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_KILLED, 0, 0, &in, sizeof(in), NULL, 0);

	check_parsed(msgbuf, n, IPC_KILLED, 0, 0, &msg);
	assert_int_equal(ipc_decode_killed(&msg, &out), 0);
	assert_int_equal(out.device, in.device);
	assert_int_equal(out.reason, in.reason);
	assert_int_equal(out.req_id, in.req_id);
	assert_int_equal(out.generation, in.generation);
}

/* ---- what every message goes through ---- */

static void test_proto_type_names(void **state)
{
	assert_string_equal(ipc_type_name(0), "unknown");
	assert_string_equal(ipc_type_name(IPC_TYPE_MAX_), "unknown");
	assert_string_equal(ipc_type_name(UINT16_MAX), "unknown");
	assert_string_equal(ipc_type_name(IPC_SUBMIT), "submit");
	assert_string_equal(ipc_type_name(IPC_DBUF_ALLOC), "dbuf-alloc");
	assert_string_equal(ipc_type_name(IPC_DBUF_FREE), "dbuf-free");
	assert_string_equal(ipc_type_name(IPC_COPY), "copy");
	for (uint16_t t = 1; t < IPC_TYPE_MAX_; t++) {
		assert_string_not_equal(ipc_type_name(t), "unknown");
		for (uint16_t u = 1; u < t; u++)
			assert_string_not_equal(ipc_type_name(t), ipc_type_name(u));
	}
}

static void test_proto_status_texts(void **state)
{
	const int bad[] = { 1, INT32_MAX, GPUX_E_VERSION - 1, -1000, INT32_MIN };

	for (int st = GPUX_OK; st >= GPUX_E_VERSION; st--) {
		assert_string_not_equal(ipc_status_text(st), "unknown status");
		for (int other = GPUX_OK; other > st; other--)
			assert_string_not_equal(ipc_status_text(st), ipc_status_text(other));
	}
	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++)
		assert_string_equal(ipc_status_text(bad[i]), "unknown status");
}

static void test_proto_samples_decode_only_as_their_type(void **state)
{
	struct test_sample s;
	unsigned types_seen[IPC_TYPE_MAX_] = { 0 };

	for (unsigned i = 0; test_msg_sample(i, msgbuf, sizeof(msgbuf), &s); i++) {
		struct ipc_msg msg;

		assert_int_equal(parse(msgbuf, s.len, s.nfds, &msg), 0);
		for (uint16_t t = 1; t < IPC_TYPE_MAX_; t++)
			if (decode_as(&msg, t) != (t == s.type ? 0 : -EBADMSG))
				fail_msg("sample %s decoded as %s: %d", s.name, ipc_type_name(t),
					 decode_as(&msg, t));
		types_seen[s.type]++;
	}
	for (uint16_t t = 1; t < IPC_TYPE_MAX_; t++)
		assert_true(types_seen[t] > 0);
}

static void test_proto_decode_rejects_truncated(void **state)
{
	static uint8_t copy[IPC_MSG_MAX];
	struct test_sample s;

	for (unsigned i = 0; test_msg_sample(i, msgbuf, sizeof(msgbuf), &s); i++) {
		for (size_t len = 0; len < s.len; len++) {
			struct ipc_msg msg;
			struct ipc_hdr h;

			/* As received: the header says more than arrived. */
			assert_int_equal(parse(msgbuf, len, s.nfds, &msg), -EBADMSG);
			if (len < HDR)
				continue;
			/* With a header that agrees: the decoder must notice. */
			memcpy(copy, msgbuf, len);
			h = test_hdr_get(copy);
			h.len = (uint32_t)(len - HDR);
			test_hdr_set(copy, &h);
			assert_int_equal(parse(copy, len, s.nfds, &msg), 0);
			if (decode_as(&msg, s.type) != -EBADMSG)
				fail_msg("%s cut to %zu bytes decoded", s.name, len);
		}
	}
}

static void test_proto_decode_rejects_trailing_bytes(void **state)
{
	struct test_sample s;

	for (unsigned i = 0; test_msg_sample(i, msgbuf, sizeof(msgbuf), &s); i++) {
		for (size_t extra = 1; extra <= 16; extra++) {
			struct ipc_hdr h = test_hdr_get(msgbuf);
			struct ipc_msg msg;

			memset(msgbuf + s.len, 0, extra);
			h.len = (uint32_t)(s.len + extra - HDR);
			test_hdr_set(msgbuf, &h);
			assert_int_equal(parse(msgbuf, s.len + extra, s.nfds, &msg), 0);
			if (decode_as(&msg, s.type) != -EBADMSG)
				fail_msg("%s with %zu more bytes decoded", s.name, extra);
			h.len = (uint32_t)(s.len - HDR);
			test_hdr_set(msgbuf, &h);
		}
	}
}

static void test_proto_decode_rejects_wrong_fd_count(void **state)
{
	struct test_sample s;

	for (unsigned i = 0; test_msg_sample(i, msgbuf, sizeof(msgbuf), &s); i++) {
		for (unsigned nfds = 0; nfds <= IPC_FDS_MAX; nfds++) {
			struct ipc_hdr h = test_hdr_get(msgbuf);
			struct ipc_msg msg;

			h.nfds = (uint16_t)nfds;
			test_hdr_set(msgbuf, &h);
			assert_int_equal(parse(msgbuf, s.len, nfds, &msg), 0);
			if (decode_as(&msg, s.type) != (nfds == s.nfds ? 0 : -EBADMSG))
				fail_msg("%s with %u fds: %d", s.name, nfds,
					 decode_as(&msg, s.type));
		}
	}
}

static void test_proto_parse_rejects_short_header(void **state)
{
	struct ipc_msg msg;
	size_t n = test_msg_make(msgbuf, IPC_HELLO, 1, 0, NULL, 0);

	assert_int_equal(n, HDR);
	assert_int_equal(parse(msgbuf, n, 0, &msg), 0);
	assert_int_equal(msg.len, 0);
	for (size_t len = 0; len < HDR; len++)
		assert_int_equal(parse(msgbuf, len, 0, &msg), -EBADMSG);
}

static void test_proto_parse_rejects_oversized_len(void **state)
{
	static uint8_t big[IPC_MSG_MAX + 1];
	struct ipc_hdr h = { IPC_MAGIC, IPC_VERSION, 0, IPC_DONE, 0, IPC_MSG_MAX + 1 - HDR, 0 };
	struct ipc_msg msg;

	test_hdr_set(big, &h);
	assert_int_equal(parse(big, sizeof(big), 0, &msg), -EMSGSIZE);
	assert_int_equal(parse(big, SIZE_MAX, 0, &msg), -EMSGSIZE);

	/* Exactly the limit is fine for the header; a length field past it is not. */
	h.len = IPC_MSG_MAX - HDR;
	test_hdr_set(big, &h);
	assert_int_equal(parse(big, IPC_MSG_MAX, 0, &msg), 0);
	h.len = UINT32_MAX;
	test_hdr_set(big, &h);
	assert_int_equal(parse(big, IPC_MSG_MAX, 0, &msg), -EBADMSG);
}

static void test_proto_parse_rejects_wrong_magic(void **state)
{
	const uint16_t magics[] = { 0, IPC_MAGIC ^ 1, 0x4758, UINT16_MAX };
	size_t n = test_msg_make(msgbuf, IPC_HELLO, 1, 0, NULL, 0);

	for (unsigned i = 0; i < ARRAY_SIZE(magics); i++) {
		struct ipc_hdr h = test_hdr_get(msgbuf);
		struct ipc_msg msg;

		h.magic = magics[i];
		test_hdr_set(msgbuf, &h);
		assert_int_equal(parse(msgbuf, n, 0, &msg), -EBADMSG);
	}
}

static void test_proto_parse_rejects_unsupported_version(void **state)
{
	const uint8_t versions[] = { 0, IPC_VERSION_MIN - 1, IPC_VERSION + 1, 0x80, UINT8_MAX };
	struct test_sample s;

	assert_true(test_msg_sample(2, msgbuf, sizeof(msgbuf), &s));
	assert_int_not_equal(s.type, IPC_HELLO);
	for (unsigned i = 0; i < ARRAY_SIZE(versions); i++) {
		struct ipc_hdr h = test_hdr_get(msgbuf);
		struct ipc_msg msg;

		h.version = versions[i];
		test_hdr_set(msgbuf, &h);
		assert_int_equal(parse(msgbuf, s.len, s.nfds, &msg), -EPROTONOSUPPORT);
	}
}

/* The kick both sides send is a well-formed KICK. */
static void test_proto_kick_is_a_kick(void **state)
{
	struct ipc_msg msg;

	memcpy(msgbuf, &ipc_kick, sizeof(ipc_kick));
	assert_int_equal(parse(msgbuf, sizeof(ipc_kick), 0, &msg), 0);
	assert_int_equal(msg.hdr.type, IPC_KICK);
	assert_int_equal(ipc_decode_kick(&msg), 0);
}

/* A hello from any version is read, so that gpuxd can say there is none in common. */
static void test_proto_parse_reads_hello_of_any_version(void **state)
{
	const uint8_t versions[] = { 1, IPC_VERSION + 1, UINT8_MAX };
	struct test_sample s;
	struct ipc_msg msg;
	struct ipc_hdr h;

	assert_true(test_msg_sample(0, msgbuf, sizeof(msgbuf), &s));
	assert_int_equal(s.type, IPC_HELLO);
	for (unsigned i = 0; i < ARRAY_SIZE(versions); i++) {
		struct ipc_hello m;

		h = test_hdr_get(msgbuf);
		h.version = versions[i];
		test_hdr_set(msgbuf, &h);
		assert_int_equal(parse(msgbuf, s.len, s.nfds, &msg), 0);
		assert_int_equal(ipc_decode_hello(&msg, &m), 0);
	}
	h = test_hdr_get(msgbuf);
	h.version = 0;
	test_hdr_set(msgbuf, &h);
	assert_int_equal(parse(msgbuf, s.len, s.nfds, &msg), -EPROTONOSUPPORT);
}

static void test_proto_parse_rejects_len_mismatch(void **state)
{
	const int64_t deltas[] = { -16, -1, 1, 2, 4096 };
	size_t n = test_msg_make(msgbuf, IPC_SEG_DROP, 1, 0, "12345678", 8);

	for (unsigned i = 0; i < ARRAY_SIZE(deltas); i++) {
		struct ipc_hdr h = test_hdr_get(msgbuf);
		struct ipc_msg msg;

		h.len = (uint32_t)(8 + deltas[i]);
		test_hdr_set(msgbuf, &h);
		assert_int_equal(parse(msgbuf, n, 0, &msg), -EBADMSG);
	}
}

static void test_proto_parse_rejects_nfds_mismatch(void **state)
{
	for (unsigned said = 0; said <= IPC_FDS_MAX + 2; said++) {
		for (unsigned came = 0; came <= IPC_FDS_MAX + 2; came++) {
			size_t n = test_msg_make(msgbuf, IPC_HELLO, 1, 0, NULL, 0);
			struct ipc_hdr h = test_hdr_get(msgbuf);
			struct ipc_msg msg;
			int want = said == came && came <= IPC_FDS_MAX ? 0 : -EBADMSG;

			h.nfds = (uint16_t)said;
			test_hdr_set(msgbuf, &h);
			assert_int_equal(parse(msgbuf, n, came, &msg), want);
		}
	}
}

static void test_proto_parse_rejects_unknown_type(void **state)
{
	const uint16_t types[] = { 0, IPC_TYPE_MAX_, IPC_TYPE_MAX_ + 1, 0x7fff, UINT16_MAX };

	for (unsigned i = 0; i < ARRAY_SIZE(types); i++) {
		size_t n = test_msg_make(msgbuf, types[i], 1, 0, "payload!", 8);
		struct ipc_msg msg;

		assert_int_equal(parse(msgbuf, n, 0, &msg), -EBADMSG);
	}
}

static void test_proto_parse_ignores_header_flags_and_id(void **state)
{
	size_t n = test_msg_make(msgbuf, IPC_SEG_DROP, UINT32_MAX, 0, "12345678", 8);
	struct ipc_hdr h = test_hdr_get(msgbuf);
	struct ipc_msg msg;

	h.flags = 0xff;
	test_hdr_set(msgbuf, &h);
	assert_int_equal(parse(msgbuf, n, 0, &msg), 0);
	assert_int_equal(msg.hdr.flags, 0xff);
	assert_int_equal(msg.hdr.id, UINT32_MAX);
}

/* ---- each decoder's own checks ---- */

static void test_proto_hello_rejects_bad_fields(void **state)
{
	struct ipc_hello m = { 1, 1, 0, 0 };

	assert_int_equal(DECODE_FIXED(IPC_HELLO, 0, m), 0);
	m.min_version = 2;
	assert_int_equal(DECODE_FIXED(IPC_HELLO, 0, m), -EBADMSG);
	m = (struct ipc_hello){ 1, 1, IPC_HELLO_ADMIN << 1, 0 };
	assert_int_equal(DECODE_FIXED(IPC_HELLO, 0, m), -EBADMSG);
	m.flags = UINT32_MAX;
	assert_int_equal(DECODE_FIXED(IPC_HELLO, 0, m), -EBADMSG);
	/* A client newer than the supervisor is not an error here: the range is negotiated. */
	m = (struct ipc_hello){ 1, 200, 0, 0 };
	assert_int_equal(DECODE_FIXED(IPC_HELLO, 0, m), 0);
}

static void test_proto_welcome_rejects_bad_fields(void **state)
{
	struct ipc_welcome m = { IPC_VERSION, IPC_DEVICES_MAX, 1 };

	assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, m), 0);
	m.ndevices = IPC_DEVICES_MAX + 1;
	assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, m), -EBADMSG);
	m.ndevices = UINT32_MAX;
	assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, m), -EBADMSG);
	m = (struct ipc_welcome){ IPC_VERSION_MIN - 1, 1, 1 };
	assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, m), -EBADMSG);
	m.version = IPC_VERSION + 1;
	assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, m), -EBADMSG);
}

/* The ways a device description can be wrong, each applied to a good one. */
static bool spoil_info(struct ipc_device_info *info, unsigned how)
{
	switch (how) {
	case 0:
		memset(info->name, 'x', sizeof(info->name));
		return true;
	case 1:
		info->backend = 0;
		return true;
	case 2:
		info->backend = GPUX_BACKEND_CUDA + 1;
		return true;
	case 3:
		info->index = IPC_DEVICES_MAX;
		return true;
	case 4:
		info->index = UINT32_MAX;
		return true;
	default:
		return false;
	}
}

static void test_proto_device_rejects_bad_fields(void **state)
{
	struct ipc_device good = { good_info(IPC_DEVICES_MAX - 1), GPUX_DEVICE_FAILED, 1, 0, 0 };
	const uint32_t bad_states[] = { 0, GPUX_DEVICE_FAILED + 1, UINT32_MAX };
	struct ipc_device m = good;

	assert_int_equal(DECODE_FIXED(IPC_DEVICE, 0, m), 0);
	/* The longest name, with its NUL in the last byte. */
	memset(m.info.name, 'n', sizeof(m.info.name) - 1);
	assert_int_equal(DECODE_FIXED(IPC_DEVICE, 0, m), 0);
	for (unsigned how = 0;; how++) {
		m = good;
		if (!spoil_info(&m.info, how))
			break;
		assert_int_equal(DECODE_FIXED(IPC_DEVICE, 0, m), -EBADMSG);
	}
	for (unsigned i = 0; i < ARRAY_SIZE(bad_states); i++) {
		m = good;
		m.state = bad_states[i];
		assert_int_equal(DECODE_FIXED(IPC_DEVICE, 0, m), -EBADMSG);
	}
	m = good;
	m.flags = IPC_DEVICE_CHANNEL << 1;
	assert_int_equal(DECODE_FIXED(IPC_DEVICE, 0, m), -EBADMSG);
	m.flags |= IPC_DEVICE_CHANNEL;
	assert_int_equal(DECODE_FIXED(IPC_DEVICE, 2, m), -EBADMSG);
}

static void test_proto_ready_rejects_bad_info(void **state)
{
	struct ipc_ready m = { good_info(0) };

	assert_int_equal(DECODE_FIXED(IPC_READY, 0, m), 0);
	for (unsigned how = 0;; how++) {
		m.info = good_info(0);
		if (!spoil_info(&m.info, how))
			break;
		assert_int_equal(DECODE_FIXED(IPC_READY, 0, m), -EBADMSG);
	}
}

static void test_proto_seg_add_rejects_bad_fields(void **state)
{
	struct ipc_seg_add m = { 1, 1, 0, 0 };

	assert_int_equal(DECODE_FIXED(IPC_SEG_ADD, 1, m), 0);
	m.size = 0;
	assert_int_equal(DECODE_FIXED(IPC_SEG_ADD, 1, m), -EBADMSG);
	m = (struct ipc_seg_add){ 1, 1, IPC_SEG_FROZEN << 1, 0 };
	assert_int_equal(DECODE_FIXED(IPC_SEG_ADD, 1, m), -EBADMSG);
}

/* A MOD_LOAD from a fixed part (possibly lying) and the option and code bytes present. */
static int mod_load_decode(const struct ipc_mod_load *m, const char *options, size_t options_len,
			   size_t code_len, unsigned nfds)
{
	static char filler[IPC_OPTIONS_MAX + IPC_INLINE_CODE_MAX + 2];
	struct ipc_part parts[2] = { { options ? options : filler, options_len },
				     { filler, code_len } };

	memset(filler, 'o', sizeof(filler));
	return encode_decode(IPC_MOD_LOAD, nfds, m, sizeof(*m), parts, 2);
}

static void test_proto_mod_load_rejects_bad_fields(void **state)
{
	const struct ipc_mod_load good = { 1, GPUX_LANG_CUDA, 0, 4, 8 };
	const uint32_t bad_langs[] = { 0, GPUX_LANG_HOST + 1, UINT32_MAX };
	struct ipc_mod_load m = good;

	assert_int_equal(mod_load_decode(&m, NULL, 4, 8, 0), 0);
	m.flags = IPC_MOD_CODE_FD << 1;
	assert_int_equal(mod_load_decode(&m, NULL, 4, 8, 0), -EBADMSG);
	for (unsigned i = 0; i < ARRAY_SIZE(bad_langs); i++) {
		m = good;
		m.lang = bad_langs[i];
		assert_int_equal(mod_load_decode(&m, NULL, 4, 8, 0), -EBADMSG);
	}

	/* Lengths that do not match the bytes present. */
	m = good;
	assert_int_equal(mod_load_decode(&m, NULL, 4, 7, 0), -EBADMSG);
	assert_int_equal(mod_load_decode(&m, NULL, 5, 8, 0), -EBADMSG);
	m.options_len = UINT32_MAX;
	assert_int_equal(mod_load_decode(&m, NULL, 4, 8, 0), -EBADMSG);
	m = good;
	m.code_len = UINT32_MAX;
	assert_int_equal(mod_load_decode(&m, NULL, 4, 8, 0), -EBADMSG);
}

static void test_proto_mod_load_rejects_bad_lengths(void **state)
{
	struct ipc_mod_load m = { 1, GPUX_LANG_PTX, 0, IPC_OPTIONS_MAX, 1 };

	assert_int_equal(mod_load_decode(&m, NULL, IPC_OPTIONS_MAX, 1, 0), 0);
	m.options_len = IPC_OPTIONS_MAX + 1;
	assert_int_equal(mod_load_decode(&m, NULL, IPC_OPTIONS_MAX + 1, 1, 0), -EBADMSG);

	m = (struct ipc_mod_load){ 1, GPUX_LANG_PTX, 0, 0, 0 };
	assert_int_equal(mod_load_decode(&m, NULL, 0, 0, 0), -EBADMSG);
	m.flags = IPC_MOD_CODE_FD;
	assert_int_equal(mod_load_decode(&m, NULL, 0, 0, 1), -EBADMSG);

	/* Inline code has a smaller limit than code in a memfd. */
	m = (struct ipc_mod_load){ 1, GPUX_LANG_PTX, 0, 0, IPC_INLINE_CODE_MAX + 1 };
	assert_int_equal(mod_load_decode(&m, NULL, 0, IPC_INLINE_CODE_MAX + 1, 0), -EBADMSG);
	m.flags = IPC_MOD_CODE_FD;
	assert_int_equal(mod_load_decode(&m, NULL, 0, 0, 1), 0);
	m.code_len = IPC_CODE_MAX;
	assert_int_equal(mod_load_decode(&m, NULL, 0, 0, 1), 0);
	m.code_len = IPC_CODE_MAX + 1;
	assert_int_equal(mod_load_decode(&m, NULL, 0, 0, 1), -EBADMSG);

	/* With the code in a memfd, no code bytes may follow. */
	m.code_len = 8;
	assert_int_equal(mod_load_decode(&m, NULL, 0, 8, 1), -EBADMSG);
}

static void test_proto_mod_load_rejects_nul_in_options(void **state)
{
	static const char opts[] = "-DA\0-DB";
	struct ipc_mod_load m = { 1, GPUX_LANG_CUDA, 0, sizeof(opts) - 1, 4 };

	assert_int_equal(mod_load_decode(&m, opts, sizeof(opts) - 1, 4, 0), -EBADMSG);
	m.options_len = 3;
	assert_int_equal(mod_load_decode(&m, opts, 3, 4, 0), 0);
	m.options_len = 4;
	assert_int_equal(mod_load_decode(&m, opts, 4, 4, 0), -EBADMSG);
}

static void test_proto_queue_rejects_bad_fields(void **state)
{
	struct ipc_queue_msg m = { 1, 0 }, out;
	struct ipc_msg msg;
	size_t n;

	assert_int_equal(DECODE_FIXED(IPC_QUEUE_OPEN, 0, m), 0);
	m.flags = 1;
	assert_int_equal(DECODE_FIXED(IPC_QUEUE_OPEN, 0, m), -EBADMSG);
	assert_int_equal(DECODE_FIXED(IPC_QUEUE_CLOSE, 0, m), -EBADMSG);

	/* The caller names which of the two it expects; any other type is refused. */
	m.flags = 0;
	n = test_msg_make(msgbuf, IPC_QUEUE_OPEN, 1, 0, &m, sizeof(m));
	assert_int_equal(parse(msgbuf, n, 0, &msg), 0);
	assert_int_equal(ipc_decode_queue(&msg, IPC_QUEUE_OPEN, &out), 0);
	assert_int_equal(ipc_decode_queue(&msg, IPC_QUEUE_CLOSE, &out), -EBADMSG);
	assert_int_equal(ipc_decode_queue(&msg, IPC_HELLO, &out), -EBADMSG);
	assert_int_equal(ipc_decode_queue(&msg, 0, &out), -EBADMSG);
}

static void test_proto_status_req_rejects_flags(void **state)
{
	struct ipc_status_req m = { 1, 0 };

	assert_int_equal(DECODE_FIXED(IPC_STATUS_REQ, 0, m), -EBADMSG);
}

static void test_proto_killed_rejects_bad_fields(void **state)
{
	struct ipc_killed m = { 0, IPC_KILL_TIMEOUT, 1, 1 };

	assert_int_equal(DECODE_FIXED(IPC_KILLED, 0, m), 0);
	m.reason = 0;
	assert_int_equal(DECODE_FIXED(IPC_KILLED, 0, m), -EBADMSG);
	m.reason = IPC_KILL_TIMEOUT + 1;
	assert_int_equal(DECODE_FIXED(IPC_KILLED, 0, m), -EBADMSG);
	m = (struct ipc_killed){ IPC_DEVICES_MAX, IPC_KILL_TIMEOUT, 1, 1 };
	assert_int_equal(DECODE_FIXED(IPC_KILLED, 0, m), -EBADMSG);
}

/* ---- device buffers ---- */

/* A message of `type` whose payload is m with `delta` bytes cut (< 0) or zeros added (> 0). */
static int decode_resized(uint16_t type, unsigned nfds, const void *m, size_t size, int delta)
{
	static const uint8_t zeros[8];
	struct ipc_part part = { zeros, delta > 0 ? (size_t)delta : 0 };

	assert_true(delta >= -(int)size && delta <= (int)sizeof(zeros));
	return encode_decode(type, nfds, m, delta < 0 ? size - (size_t)-delta : size, &part, 1);
}

/* A valid fixed-size m decodes only at its exact size and with no fds. */
static void check_fixed_shape(uint16_t type, const void *m, size_t size)
{
	const int deltas[] = { -(int)size, -8, -1, 1, 8 };

	assert_int_equal(decode_resized(type, 0, m, size, 0), 0);
	for (unsigned i = 0; i < ARRAY_SIZE(deltas); i++)
		assert_int_equal(decode_resized(type, 0, m, size, deltas[i]), -EBADMSG);
	for (unsigned nfds = 1; nfds <= IPC_FDS_MAX; nfds++)
		assert_int_equal(decode_resized(type, nfds, m, size, 0), -EBADMSG);
}

static void test_proto_dbuf_alloc_rejects_bad_fields(void **state)
{
	struct ipc_dbuf_alloc m = { 1, 4096, 0, 0 };

	check_fixed_shape(IPC_DBUF_ALLOC, &m, sizeof(m));
	m.size = 0;
	assert_int_equal(DECODE_FIXED(IPC_DBUF_ALLOC, 0, m), -EBADMSG);
	m.size = UINT64_MAX;
	assert_int_equal(DECODE_FIXED(IPC_DBUF_ALLOC, 0, m), 0);
	/* No flags are defined yet: any is refused, so that one can be defined later. */
	m.flags = 1;
	assert_int_equal(DECODE_FIXED(IPC_DBUF_ALLOC, 0, m), -EBADMSG);
}

static void test_proto_dbuf_free_rejects_bad_shape(void **state)
{
	struct ipc_dbuf_free m = { 1 };

	check_fixed_shape(IPC_DBUF_FREE, &m, sizeof(m));
}

static void test_proto_copy_rejects_bad_fields(void **state)
{
	const struct ipc_copy good = { 1, 0, 2, 0, 4096, IPC_COPY_TO_DBUF, 0, 0, 0 };
	const uint32_t bad_dirs[] = { 0, IPC_COPY_TO_DBUF | IPC_COPY_FROM_DBUF, 4, UINT32_MAX };
	struct ipc_copy m = good;

	check_fixed_shape(IPC_COPY, &m, sizeof(m));
	m.flags = 0x80000000u;
	assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), -EBADMSG);
	m = good;
	m.dir = IPC_COPY_FROM_DBUF;
	assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), 0);
	for (unsigned i = 0; i < ARRAY_SIZE(bad_dirs); i++) {
		m.dir = bad_dirs[i];
		assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), -EBADMSG);
	}
	m = good;
	m.size = 0;
	assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), -EBADMSG);
}

static void test_proto_copy_rejects_overflowing_ranges(void **state)
{
	struct ipc_copy m = {
		1, UINT64_MAX - 4096, 2, UINT64_MAX - 4096, 4096, IPC_COPY_TO_DBUF, 0, 0, 0
	};

	/* Both ranges end at 2^64 - 1; one byte more wraps either. */
	assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), 0);
	m.dbuf_offset++;
	assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), -EBADMSG);
	m.dbuf_offset--;
	m.seg_offset++;
	assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), -EBADMSG);
	m.seg_offset--;
	m.size++;
	assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), -EBADMSG);

	/* A wrapped end would land near 0, inside any buffer. */
	m = (struct ipc_copy){ 1, UINT64_MAX, 2, 0, 2, IPC_COPY_FROM_DBUF, 0, 0, 0 };
	assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), -EBADMSG);
	m = (struct ipc_copy){ 1, 0, 2, UINT64_MAX, 2, IPC_COPY_FROM_DBUF, 0, 0, 0 };
	assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), -EBADMSG);
	m = (struct ipc_copy){ 1, 1, 2, 0, UINT64_MAX, IPC_COPY_TO_DBUF, 0, 0, 0 };
	assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), -EBADMSG);
	m = (struct ipc_copy){ 1, 0, 2, 1, UINT64_MAX, IPC_COPY_TO_DBUF, 0, 0, 0 };
	assert_int_equal(DECODE_FIXED(IPC_COPY, 0, m), -EBADMSG);
}

/* ---- SUBMIT ---- */

/* A SUBMIT as it goes on the wire: a fixed part that may lie about what follows. */
struct submit_case {
	struct ipc_submit m;
	struct ipc_arg args[IPC_ARGS_MAX + 1];
	unsigned nargs; /* arguments present */
	char name[IPC_KERNEL_NAME_MAX + 2];
	size_t name_len; /* name bytes present */
	uint8_t data[32];
	size_t data_len; /* data bytes present */
};

static void submit_init(struct submit_case *c)
{
	*c = (struct submit_case){
		.m = { .mod_id = 1,
		       .nargs = 2,
		       .grid = { 1, 1, 1 },
		       .block = { 32, 1, 1 },
		       .name_len = 1,
		       .data_len = 16 },
		.args = { { GPUX_ARG_SCALAR, 0, 0, 8, 8 }, { GPUX_ARG_IN, 0, 1, 0, 4096 } },
		.nargs = 2,
		.name = "k",
		.name_len = 1,
		.data_len = 16,
	};
}

static int submit_decode(const struct submit_case *c)
{
	struct ipc_part parts[3] = {
		{ c->args, c->nargs * sizeof(struct ipc_arg) },
		{ c->name, c->name_len },
		{ c->data, c->data_len },
	};

	return encode_decode(IPC_SUBMIT, 0, &c->m, sizeof(c->m), parts, 3);
}

static void test_proto_submit_rejects_bad_counts(void **state)
{
	struct submit_case c;

	submit_init(&c);
	assert_int_equal(submit_decode(&c), 0);

	/* More arguments than the limit, all present and valid. */
	c.nargs = c.m.nargs = IPC_ARGS_MAX + 1;
	for (unsigned i = 0; i < c.nargs; i++)
		c.args[i] = (struct ipc_arg){ GPUX_ARG_OUT, 0, 1, 0, 1 };
	assert_int_equal(submit_decode(&c), -EBADMSG);
	c.nargs = c.m.nargs = IPC_ARGS_MAX;
	assert_int_equal(submit_decode(&c), 0);
	c.m.nargs = UINT32_MAX;
	assert_int_equal(submit_decode(&c), -EBADMSG);
	/* 2^27 arguments of 32 bytes wrap a 32-bit product to 0. */
	submit_init(&c);
	c.nargs = 0;
	c.m.nargs = 1u << 27;
	assert_int_equal(submit_decode(&c), -EBADMSG);

	submit_init(&c);
	c.m.nargs = 3;
	assert_int_equal(submit_decode(&c), -EBADMSG);
	c.m.nargs = 1;
	assert_int_equal(submit_decode(&c), -EBADMSG);
}

static void test_proto_submit_rejects_bad_name(void **state)
{
	struct submit_case c;

	submit_init(&c);
	c.m.name_len = 0;
	c.name_len = 0;
	assert_int_equal(submit_decode(&c), -EBADMSG);

	memset(c.name, 'n', sizeof(c.name));
	c.m.name_len = c.name_len = IPC_KERNEL_NAME_MAX;
	assert_int_equal(submit_decode(&c), 0);
	c.m.name_len = c.name_len = IPC_KERNEL_NAME_MAX + 1;
	assert_int_equal(submit_decode(&c), -EBADMSG);
	c.m.name_len = UINT32_MAX;
	assert_int_equal(submit_decode(&c), -EBADMSG);

	/* A NUL inside the name: "a\0b". */
	submit_init(&c);
	memcpy(c.name, "a\0b", 3);
	c.m.name_len = c.name_len = 3;
	assert_int_equal(submit_decode(&c), -EBADMSG);
	c.name[1] = 'x';
	assert_int_equal(submit_decode(&c), 0);
	c.name[2] = '\0';
	assert_int_equal(submit_decode(&c), -EBADMSG);
}

static void test_proto_submit_rejects_bad_data_len(void **state)
{
	const uint32_t lens[] = { 15, 17, IPC_PAYLOAD_MAX + 1, UINT32_MAX - 8, UINT32_MAX };
	struct submit_case c;

	for (unsigned i = 0; i < ARRAY_SIZE(lens); i++) {
		submit_init(&c);
		c.m.data_len = lens[i];
		assert_int_equal(submit_decode(&c), -EBADMSG);
	}
}

static void test_proto_submit_rejects_bad_launch(void **state)
{
	struct submit_case c;

	for (unsigned d = 0; d < 3; d++) {
		submit_init(&c);
		c.m.grid[d] = 0;
		assert_int_equal(submit_decode(&c), -EBADMSG);
		c.m.grid[d] = IPC_GRID_MAX;
		assert_int_equal(submit_decode(&c), 0);
		c.m.grid[d] = IPC_GRID_MAX + 1u;
		assert_int_equal(submit_decode(&c), -EBADMSG);
		submit_init(&c);
		c.m.block[d] = 0;
		assert_int_equal(submit_decode(&c), -EBADMSG);
	}
	/* GPUX_LAUNCH_TIMED is the only flag. */
	submit_init(&c);
	c.m.flags = GPUX_LAUNCH_TIMED;
	assert_int_equal(submit_decode(&c), 0);
	c.m.flags = GPUX_LAUNCH_TIMED << 1;
	assert_int_equal(submit_decode(&c), -EBADMSG);
	c.m.flags = UINT32_MAX;
	assert_int_equal(submit_decode(&c), -EBADMSG);
}

/* Decode a good SUBMIT whose first argument is a. */
static int submit_arg_decode(struct ipc_arg a)
{
	struct submit_case c;

	submit_init(&c);
	c.args[0] = a;
	return submit_decode(&c);
}

static void test_proto_submit_rejects_bad_scalar(void **state)
{
	/* 16 bytes of scalar data. */
	assert_int_equal(submit_arg_decode((struct ipc_arg){ GPUX_ARG_SCALAR, 0, 0, 0, 16 }), 0);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ GPUX_ARG_SCALAR, 0, 0, 15, 1 }), 0);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ GPUX_ARG_SCALAR, 0, 0, 0, 17 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ GPUX_ARG_SCALAR, 0, 0, 13, 4 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ GPUX_ARG_SCALAR, 0, 0, 16, 1 }),
			 -EBADMSG);
	assert_int_equal(
	    submit_arg_decode((struct ipc_arg){ GPUX_ARG_SCALAR, 0, 0, 1ull << 32, 4 }), -EBADMSG);
	/* offset + size wraps around 2^64 and would land inside the data. */
	assert_int_equal(
	    submit_arg_decode((struct ipc_arg){ GPUX_ARG_SCALAR, 0, 0, UINT64_MAX - 1, 4 }),
	    -EBADMSG);
	assert_int_equal(
	    submit_arg_decode((struct ipc_arg){ GPUX_ARG_SCALAR, 0, 0, UINT64_MAX, 2 }), -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ GPUX_ARG_SCALAR, 0, 0, 0, 0 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ GPUX_ARG_SCALAR, 1, 0, 0, 4 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ GPUX_ARG_SCALAR, 0, 1, 0, 4 }),
			 -EBADMSG);
}

static void test_proto_submit_scalar_limit(void **state)
{
	static uint8_t data[IPC_SCALAR_MAX + 1];
	struct ipc_submit m = { .mod_id = 1,
				.nargs = 1,
				.grid = { 1, 1, 1 },
				.block = { 1, 1, 1 },
				.data_len = sizeof(data) };
	struct ipc_arg a = { GPUX_ARG_SCALAR, 0, 0, 0, IPC_SCALAR_MAX };
	static struct ipc_submit_msg out;
	struct ipc_msg msg;
	int n = ipc_encode_submit(msgbuf, sizeof(msgbuf), 1, &m, &a, "k", data);

	assert_int_equal(parse(msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_submit(&msg, &out), 0);
	a.size = IPC_SCALAR_MAX + 1;
	n = ipc_encode_submit(msgbuf, sizeof(msgbuf), 1, &m, &a, "k", data);
	assert_int_equal(parse(msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_submit(&msg, &out), -EBADMSG);
}

static void test_proto_submit_rejects_bad_buffer_arg(void **state)
{
	const uint32_t kinds[] = { GPUX_ARG_IN, GPUX_ARG_OUT, GPUX_ARG_INOUT, GPUX_ARG_MAPPED,
				   GPUX_ARG_DBUF };

	for (unsigned i = 0; i < ARRAY_SIZE(kinds); i++) {
		uint32_t k = kinds[i];

		assert_int_equal(submit_arg_decode((struct ipc_arg){ k, 0, 9, UINT64_MAX - 1, 1 }),
				 0);
		assert_int_equal(submit_arg_decode((struct ipc_arg){ k, 0, 9, 0, UINT64_MAX }), 0);
		assert_int_equal(submit_arg_decode((struct ipc_arg){ k, 0, 9, UINT64_MAX, 1 }),
				 -EBADMSG);
		assert_int_equal(submit_arg_decode((struct ipc_arg){ k, 0, 9, 1, UINT64_MAX }),
				 -EBADMSG);
		assert_int_equal(submit_arg_decode((struct ipc_arg){ k, 0, 9, 0, 0 }), -EBADMSG);
	}
	assert_int_equal(submit_arg_decode((struct ipc_arg){ 0, 0, 9, 0, 1 }), -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ GPUX_ARG_DBUF + 1, 0, 9, 0, 1 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ UINT32_MAX, 0, 9, 0, 1 }), -EBADMSG);
}

/* A valid argument of `kind` (a scalar into the data, or a buffer range) with these flags. */
static int submit_flags_decode(uint32_t kind, uint32_t flags)
{
	if (kind == GPUX_ARG_SCALAR)
		return submit_arg_decode((struct ipc_arg){ kind, flags, 0, 0, 4 });
	return submit_arg_decode((struct ipc_arg){ kind, flags, 9, 0, 4096 });
}

static void test_proto_submit_arg_flags(void **state)
{
	const uint32_t kinds[] = { GPUX_ARG_SCALAR, GPUX_ARG_IN,     GPUX_ARG_OUT,
				   GPUX_ARG_INOUT,  GPUX_ARG_MAPPED, GPUX_ARG_DBUF };
	const uint32_t unknown[] = { GPUX_ARG_CACHED << 1, 0x80000000u,
				     UINT32_MAX & ~GPUX_ARG_CACHED };

	for (unsigned i = 0; i < ARRAY_SIZE(kinds); i++) {
		uint32_t k = kinds[i];

		assert_int_equal(submit_flags_decode(k, 0), 0);
		/* Only an IN argument can be cached. */
		assert_int_equal(submit_flags_decode(k, GPUX_ARG_CACHED),
				 k == GPUX_ARG_IN ? 0 : -EBADMSG);
		for (unsigned j = 0; j < ARRAY_SIZE(unknown); j++) {
			assert_int_equal(submit_flags_decode(k, unknown[j]), -EBADMSG);
			assert_int_equal(submit_flags_decode(k, unknown[j] | GPUX_ARG_CACHED),
					 -EBADMSG);
		}
	}
}

/* Every argument's kind and flags come through: a cached IN and device buffer ranges. */
static void test_proto_submit_dbuf_and_cached_args(void **state)
{
	const struct ipc_arg args[] = {
		{ GPUX_ARG_DBUF, 0, 11, 0, 1 * MiB },
		{ GPUX_ARG_IN, GPUX_ARG_CACHED, 8, 4096, 4096 },
		{ GPUX_ARG_IN, 0, 8, 0, 4096 },
		{ GPUX_ARG_DBUF, 0, UINT64_MAX, UINT64_MAX - 1, 1 },
		{ GPUX_ARG_MAPPED, 0, 7, 0, 64 },
	};
	struct ipc_submit m = {
		.mod_id = 1, .nargs = ARRAY_SIZE(args), .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }
	};
	static struct ipc_submit_msg out;
	struct ipc_msg msg;
	int n = ipc_encode_submit(msgbuf, sizeof(msgbuf), 1, &m, args, "k", NULL);

	assert_int_equal(parse(msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_submit(&msg, &out), 0);
	assert_int_equal(out.m.nargs, ARRAY_SIZE(args));
	for (unsigned i = 0; i < ARRAY_SIZE(args); i++)
		assert_arg_equal(&out.args[i], &args[i]);

	/* One bad argument refuses the whole message, whichever it is. */
	for (unsigned i = 0; i < ARRAY_SIZE(args); i++) {
		struct ipc_arg bad[ARRAY_SIZE(args)];

		memcpy(bad, args, sizeof(bad));
		bad[i].flags = bad[i].kind == GPUX_ARG_IN ? GPUX_ARG_CACHED << 1 : GPUX_ARG_CACHED;
		n = ipc_encode_submit(msgbuf, sizeof(msgbuf), 1, &m, bad, "k", NULL);
		assert_int_equal(parse(msgbuf, (size_t)n, 0, &msg), 0);
		assert_int_equal(ipc_decode_submit(&msg, &out), -EBADMSG);
	}
}

static void test_proto_submit_caps_scalar_data(void **state)
{
	static uint8_t data[IPC_MSG_MAX];
	struct ipc_submit m = { .mod_id = 1, .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	static struct ipc_submit_msg out;
	struct ipc_msg msg;
	int n;

	/* As much scalar data as 64 aligned arguments of 256 bytes can use, and no more. */
	m.data_len = IPC_SCALAR_DATA_MAX;
	n = ipc_encode_submit(msgbuf, sizeof(msgbuf), 1, &m, NULL, "k", data);
	assert_true(n > 0);
	assert_int_equal(parse(msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_submit(&msg, &out), 0);
	assert_ptr_equal(out.data + out.m.data_len, msgbuf + n);

	m.data_len++;
	n = ipc_encode_submit(msgbuf, sizeof(msgbuf), 1, &m, NULL, "k", data);
	assert_true(n > 0);
	assert_int_equal(parse(msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_submit(&msg, &out), -EBADMSG);
}

/* ---- DONE ---- */

static int done_decode(const struct ipc_done *m, size_t text_len)
{
	static char text[IPC_TEXT_MAX + 2];
	struct ipc_part part = { text, text_len };

	memset(text, 't', sizeof(text));
	return encode_decode(IPC_DONE, 0, m, sizeof(*m), &part, 1);
}

static void test_proto_done_rejects_bad_status(void **state)
{
	const int32_t good[] = { GPUX_OK, GPUX_E_INVAL, GPUX_E_VERSION };
	const int32_t bad[] = { 1, INT32_MAX, GPUX_E_VERSION - 1, -1000, INT32_MIN };

	for (unsigned i = 0; i < ARRAY_SIZE(good); i++) {
		struct ipc_done m = { good[i], 0, 0, 0, 0 };
		assert_int_equal(done_decode(&m, 0), 0);
	}
	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		struct ipc_done m = { bad[i], 0, 0, 0, 0 };
		assert_int_equal(done_decode(&m, 0), -EBADMSG);
	}
}

static void test_proto_done_rejects_bad_text_len(void **state)
{
	struct ipc_done m = { GPUX_E_COMPILE, IPC_TEXT_MAX, 0, 0, 0 };

	assert_int_equal(done_decode(&m, IPC_TEXT_MAX), 0);
	m.text_len = IPC_TEXT_MAX + 1;
	assert_int_equal(done_decode(&m, IPC_TEXT_MAX + 1), -EBADMSG);
	m.text_len = 10;
	assert_int_equal(done_decode(&m, 9), -EBADMSG);
	assert_int_equal(done_decode(&m, 11), -EBADMSG);
	m.text_len = UINT32_MAX;
	assert_int_equal(done_decode(&m, 0), -EBADMSG);
	m.text_len = UINT32_MAX - sizeof(m) + 1;
	assert_int_equal(done_decode(&m, 0), -EBADMSG);
}

static void test_proto_encode_done_cuts_long_text(void **state)
{
	static char text[IPC_TEXT_MAX * 2 + 1];
	struct ipc_done m = { GPUX_E_COMPILE, 0, 0, 0, 0 };
	struct ipc_done_msg out;
	struct ipc_msg msg;
	int n;

	memset(text, 'L', sizeof(text) - 1);
	n = ipc_encode_done(msgbuf, sizeof(msgbuf), 1, &m, text);
	assert_int_equal(n, HDR + sizeof(m) + IPC_TEXT_MAX);
	assert_int_equal(parse(msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_done(&msg, &out), 0);
	assert_int_equal(out.m.text_len, IPC_TEXT_MAX);
	assert_memory_equal(out.text, text, IPC_TEXT_MAX);
}

/* ---- STATUS ---- */

static int status_decode(const struct ipc_status *m, const struct ipc_dev_status *devs,
			 size_t ndevs)
{
	struct ipc_part part = { devs, ndevs * sizeof(*devs) };

	return encode_decode(IPC_STATUS, 0, m, sizeof(*m), &part, 1);
}

static void test_proto_status_rejects_bad_counts(void **state)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX + 1];
	struct ipc_status m = { .ndevices = 2, .loop = "io_uring" };

	for (unsigned i = 0; i < ARRAY_SIZE(devs); i++)
		devs[i] = good_dev_status(i % IPC_DEVICES_MAX);
	assert_int_equal(status_decode(&m, devs, 2), 0);
	assert_int_equal(status_decode(&m, devs, 1), -EBADMSG);
	assert_int_equal(status_decode(&m, devs, 3), -EBADMSG);
	m.ndevices = IPC_DEVICES_MAX + 1;
	assert_int_equal(status_decode(&m, devs, IPC_DEVICES_MAX + 1), -EBADMSG);
	m.ndevices = UINT32_MAX;
	assert_int_equal(status_decode(&m, devs, 0), -EBADMSG);
	/* 2^29 devices of 328 bytes are 41 * 2^32 bytes: 0 in a 32-bit product. */
	m.ndevices = 1u << 29;
	assert_int_equal(status_decode(&m, devs, 0), -EBADMSG);
}

static void test_proto_status_rejects_bad_strings(void **state)
{
	struct ipc_dev_status devs[2] = { good_dev_status(0), good_dev_status(1) };
	struct ipc_status m = { .ndevices = 2, .loop = "epoll" };

	memset(m.loop, 'x', sizeof(m.loop) - 1);
	assert_int_equal(status_decode(&m, devs, 2), 0);
	memset(m.loop, 'x', sizeof(m.loop));
	assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);

	memset(m.loop, 0, sizeof(m.loop));
	for (unsigned how = 0; spoil_info(&devs[1].info, how); how++) {
		assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);
		devs[1] = good_dev_status(1);
	}
	devs[1].state = 0;
	assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);
	devs[1].state = GPUX_DEVICE_FAILED + 1;
	assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);
}

/* ---- encoders ---- */

static void test_proto_encode_rejects_too_many_fds(void **state)
{
	struct ipc_mod_drop m = { 1 };

	assert_int_equal(ipc_encode(msgbuf, sizeof(msgbuf), IPC_MOD_DROP, 1, IPC_FDS_MAX + 1, &m,
				    sizeof(m), NULL, 0),
			 -EINVAL);
	assert_int_equal(ipc_encode(msgbuf, sizeof(msgbuf), IPC_MOD_DROP, 1, IPC_FDS_MAX, &m,
				    sizeof(m), NULL, 0),
			 HDR + sizeof(m));
}

static void test_proto_encode_rejects_small_buffer(void **state)
{
	struct ipc_mod_drop m = { 1 };
	struct ipc_part part = { "abc", 3 };
	size_t need = HDR + sizeof(m) + 3;

	for (size_t cap = 0; cap < need; cap++)
		assert_int_equal(
		    ipc_encode(msgbuf, cap, IPC_MOD_DROP, 1, 0, &m, sizeof(m), &part, 1),
		    -EMSGSIZE);
	assert_int_equal(ipc_encode(msgbuf, need, IPC_MOD_DROP, 1, 0, &m, sizeof(m), &part, 1),
			 need);
}

static void test_proto_encode_rejects_over_msg_max(void **state)
{
	static uint8_t src[IPC_MSG_MAX];
	struct ipc_part parts[2] = { { src, IPC_PAYLOAD_MAX }, { src, 1 } };

	assert_int_equal(ipc_encode(msgbuf, sizeof(msgbuf), IPC_DONE, 1, 0, NULL, 0, parts, 1),
			 IPC_MSG_MAX);
	assert_int_equal(ipc_encode(msgbuf, sizeof(msgbuf), IPC_DONE, 1, 0, NULL, 0, parts, 2),
			 -EMSGSIZE);
}

static void test_proto_encode_mod_load_checks_limits(void **state)
{
	static char big[IPC_INLINE_CODE_MAX + 1];
	struct ipc_mod_load m = { 1, GPUX_LANG_CUDA, 0, IPC_OPTIONS_MAX + 1, 1 };

	memset(big, 'b', sizeof(big));
	assert_int_equal(ipc_encode_mod_load(msgbuf, sizeof(msgbuf), 1, &m, big, big), -EINVAL);
	m = (struct ipc_mod_load){ 1, GPUX_LANG_CUDA, 0, 0, 0 };
	assert_int_equal(ipc_encode_mod_load(msgbuf, sizeof(msgbuf), 1, &m, NULL, big), -EINVAL);
	m.code_len = IPC_INLINE_CODE_MAX + 1;
	assert_int_equal(ipc_encode_mod_load(msgbuf, sizeof(msgbuf), 1, &m, NULL, big), -EINVAL);
	m.flags = IPC_MOD_CODE_FD;
	assert_int_equal(ipc_encode_mod_load(msgbuf, sizeof(msgbuf), 1, &m, NULL, NULL),
			 HDR + sizeof(m));
	m.code_len = IPC_CODE_MAX + 1;
	assert_int_equal(ipc_encode_mod_load(msgbuf, sizeof(msgbuf), 1, &m, NULL, NULL), -EINVAL);
}

static void test_proto_encode_submit_checks_limits(void **state)
{
	static struct ipc_arg args[IPC_ARGS_MAX + 1];
	static char name[IPC_KERNEL_NAME_MAX + 2];
	struct ipc_submit m = { .mod_id = 1, .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };

	assert_int_equal(ipc_encode_submit(msgbuf, sizeof(msgbuf), 1, &m, args, "", NULL), -EINVAL);
	memset(name, 'n', IPC_KERNEL_NAME_MAX + 1);
	assert_int_equal(ipc_encode_submit(msgbuf, sizeof(msgbuf), 1, &m, args, name, NULL),
			 -EINVAL);
	name[IPC_KERNEL_NAME_MAX] = '\0';
	assert_true(ipc_encode_submit(msgbuf, sizeof(msgbuf), 1, &m, args, name, NULL) > 0);
	m.nargs = IPC_ARGS_MAX + 1;
	assert_int_equal(ipc_encode_submit(msgbuf, sizeof(msgbuf), 1, &m, args, "k", NULL),
			 -EINVAL);
}

static void test_proto_encode_status_checks_limits(void **state)
{
	struct ipc_status m = { .ndevices = IPC_DEVICES_MAX + 1 };

	assert_int_equal(ipc_encode_status(msgbuf, sizeof(msgbuf), 1, &m, NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proto_hello_round_trips),
		cmocka_unit_test(test_proto_welcome_round_trips),
		cmocka_unit_test(test_proto_device_round_trips),
		cmocka_unit_test(test_proto_attach_round_trips),
		cmocka_unit_test(test_proto_ready_round_trips),
		cmocka_unit_test(test_proto_seg_add_round_trips),
		cmocka_unit_test(test_proto_seg_drop_round_trips),
		cmocka_unit_test(test_proto_mod_load_round_trips),
		cmocka_unit_test(test_proto_mod_drop_round_trips),
		cmocka_unit_test(test_proto_queue_round_trips),
		cmocka_unit_test(test_proto_dbuf_alloc_round_trips),
		cmocka_unit_test(test_proto_dbuf_free_round_trips),
		cmocka_unit_test(test_proto_copy_round_trips),
		cmocka_unit_test(test_proto_submit_round_trips),
		cmocka_unit_test(test_proto_submit_without_args_round_trips),
		cmocka_unit_test(test_proto_done_round_trips),
		cmocka_unit_test(test_proto_status_req_round_trips),
		cmocka_unit_test(test_proto_status_round_trips),
		cmocka_unit_test(test_proto_killed_round_trips),
		cmocka_unit_test(test_proto_type_names),
		cmocka_unit_test(test_proto_status_texts),
		cmocka_unit_test(test_proto_samples_decode_only_as_their_type),
		cmocka_unit_test(test_proto_decode_rejects_truncated),
		cmocka_unit_test(test_proto_decode_rejects_trailing_bytes),
		cmocka_unit_test(test_proto_decode_rejects_wrong_fd_count),
		cmocka_unit_test(test_proto_parse_rejects_short_header),
		cmocka_unit_test(test_proto_parse_rejects_oversized_len),
		cmocka_unit_test(test_proto_parse_rejects_wrong_magic),
		cmocka_unit_test(test_proto_parse_rejects_unsupported_version),
		cmocka_unit_test(test_proto_parse_reads_hello_of_any_version),
		cmocka_unit_test(test_proto_kick_is_a_kick),
		cmocka_unit_test(test_proto_parse_rejects_len_mismatch),
		cmocka_unit_test(test_proto_parse_rejects_nfds_mismatch),
		cmocka_unit_test(test_proto_parse_rejects_unknown_type),
		cmocka_unit_test(test_proto_parse_ignores_header_flags_and_id),
		cmocka_unit_test(test_proto_hello_rejects_bad_fields),
		cmocka_unit_test(test_proto_welcome_rejects_bad_fields),
		cmocka_unit_test(test_proto_device_rejects_bad_fields),
		cmocka_unit_test(test_proto_ready_rejects_bad_info),
		cmocka_unit_test(test_proto_seg_add_rejects_bad_fields),
		cmocka_unit_test(test_proto_mod_load_rejects_bad_fields),
		cmocka_unit_test(test_proto_mod_load_rejects_bad_lengths),
		cmocka_unit_test(test_proto_mod_load_rejects_nul_in_options),
		cmocka_unit_test(test_proto_queue_rejects_bad_fields),
		cmocka_unit_test(test_proto_status_req_rejects_flags),
		cmocka_unit_test(test_proto_killed_rejects_bad_fields),
		cmocka_unit_test(test_proto_dbuf_alloc_rejects_bad_fields),
		cmocka_unit_test(test_proto_dbuf_free_rejects_bad_shape),
		cmocka_unit_test(test_proto_copy_rejects_bad_fields),
		cmocka_unit_test(test_proto_copy_rejects_overflowing_ranges),
		cmocka_unit_test(test_proto_submit_rejects_bad_counts),
		cmocka_unit_test(test_proto_submit_rejects_bad_name),
		cmocka_unit_test(test_proto_submit_rejects_bad_data_len),
		cmocka_unit_test(test_proto_submit_rejects_bad_launch),
		cmocka_unit_test(test_proto_submit_rejects_bad_scalar),
		cmocka_unit_test(test_proto_submit_scalar_limit),
		cmocka_unit_test(test_proto_submit_rejects_bad_buffer_arg),
		cmocka_unit_test(test_proto_submit_arg_flags),
		cmocka_unit_test(test_proto_submit_dbuf_and_cached_args),
		cmocka_unit_test(test_proto_submit_caps_scalar_data),
		cmocka_unit_test(test_proto_done_rejects_bad_status),
		cmocka_unit_test(test_proto_done_rejects_bad_text_len),
		cmocka_unit_test(test_proto_encode_done_cuts_long_text),
		cmocka_unit_test(test_proto_status_rejects_bad_counts),
		cmocka_unit_test(test_proto_status_rejects_bad_strings),
		cmocka_unit_test(test_proto_encode_rejects_too_many_fds),
		cmocka_unit_test(test_proto_encode_rejects_small_buffer),
		cmocka_unit_test(test_proto_encode_rejects_over_msg_max),
		cmocka_unit_test(test_proto_encode_mod_load_checks_limits),
		cmocka_unit_test(test_proto_encode_submit_checks_limits),
		cmocka_unit_test(test_proto_encode_status_checks_limits),
	};

	return cmocka_run_group_tests_name("ipc-proto", tests, NULL, NULL);
}
