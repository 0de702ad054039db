/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-proto.c: each message round-trips: encoder, parser, decoder. */
#include <string.h>

#include "macro.h"
#include "proto-helpers.h"
#include "ring.h"

/* Parse a freshly encoded message and check its header and the fds it was given. */
static void check_parsed(const uint8_t *buf, int n, uint16_t type, uint32_t id, unsigned nfds,
			 struct ipc_msg *msg)
{
	assert_true(n >= (int)HDR);
	assert_int_equal(test_parse(buf, (size_t)n, nfds, msg), 0);
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
		assert_int_equal(msg->fds[i], i < nfds ? test_fake_fds[i] : -1);
}

/* ---- messages of a fixed size: a table ---- */

/* A message, the fds it travels with and its payload's size on the wire. */
struct round_trip {
	uint16_t type;
	uint32_t id;
	unsigned nfds;
	size_t wire;
	const void *in;
	size_t len;
};

#define TRIP(type_, id_, nfds_, wire_, st, ...)                                                    \
	{                                                                                          \
		.type = (type_), .id = (id_), .nfds = (nfds_), .wire = (wire_),                    \
		.in = &(const st){ __VA_ARGS__ }, .len = sizeof(st),                               \
	}

/* Extreme values where a field could be cut or sign-extended on the way. */
static const struct round_trip trips[] = {
	TRIP(IPC_HELLO, 42, 0, 16, struct ipc_hello, IPC_VERSION_MIN, IPC_VERSION, IPC_HELLO_ADMIN,
	     0),
	TRIP(IPC_WELCOME, 7, 0, 32, struct ipc_welcome, IPC_VERSION, IPC_DEVICES_MAX,
	     UINT64_MAX - 5, UINT64_MAX - 7, IPC_WELCOME_PRIVATE, IPC_PRIO_MAX, IPC_PRIO_MIN, 0),
	/* A device without its channel, and with it (the channel and the status page). */
	TRIP(IPC_DEVICE, 0, 0, 128, struct ipc_device,
	     .info = TEST_GOOD_INFO(IPC_DEVICES_MAX - 1, IPC_BACKEND_HOST),
	     .state = IPC_DEVICE_RESTARTING, .generation = 99),
	TRIP(IPC_DEVICE, 0, 2, 128, struct ipc_device,
	     .info = TEST_GOOD_INFO(IPC_DEVICES_MAX - 1, IPC_BACKEND_HOST),
	     .state = IPC_DEVICE_READY, .generation = 99, .flags = IPC_DEVICE_CHANNEL),
	TRIP(IPC_ATTACH, 3, 1, 24, struct ipc_attach, 0xfedcba9876543210ull, 1000, 100, 12345,
	     IPC_PRIO_MAX, IPC_PRIO_MAX, 0),
	TRIP(IPC_READY, 9, 0, 112, struct ipc_ready, TEST_GOOD_INFO(3, IPC_BACKEND_CUDA)),
	TRIP(IPC_SEG_ADD, 11, 1, 24, struct ipc_seg_add, UINT64_MAX, UINT64_MAX - 1, IPC_SEG_FROZEN,
	     0),
	TRIP(IPC_SEG_DROP, 0, 0, 8, struct ipc_seg_drop, 0x8000000000000001ull),
	TRIP(IPC_MOD_DROP, 2, 0, 8, struct ipc_mod_drop, 77),
	TRIP(IPC_QUEUE_OPEN, 5, 0, 8, struct ipc_queue_msg, 1000, 0),
	TRIP(IPC_QUEUE_CONFIG, 6, 0, 16, struct ipc_queue_config, UINT32_MAX, IPC_PRIO_MIN,
	     IPC_SHARE_MAX, IPC_QUEUE_PRIORITY),
	TRIP(IPC_QUEUE_CLOSE, 5, 0, 8, struct ipc_queue_msg, 1001, 0),
	TRIP(IPC_DBUF_ALLOC, 12, 0, 24, struct ipc_dbuf_alloc, UINT64_MAX, UINT64_MAX - 1, 0, 0),
	/* The smallest buffer. */
	TRIP(IPC_DBUF_ALLOC, 13, 0, 24, struct ipc_dbuf_alloc, 0, 1, 0, 0),
	TRIP(IPC_DBUF_FREE, 0, 0, 8, struct ipc_dbuf_free, 0x8000000000000001ull),
	/* Both directions, each with one range ending exactly at 2^64 - 1. */
	TRIP(IPC_COPY, 40, 0, 56, struct ipc_copy, 0x0102030405060708ull, UINT64_MAX - 4096,
	     0x1112131415161718ull, 0, 4096, IPC_COPY_TO_DBUF, 7, 0, 0),
	TRIP(IPC_COPY, 41, 0, 56, struct ipc_copy, UINT64_MAX, 0, 0, UINT64_MAX - 1, 1,
	     IPC_COPY_FROM_DBUF, UINT32_MAX, 0, 0),
	TRIP(IPC_COPY, 42, 0, 56, struct ipc_copy, 1, 0, 2, 0, UINT64_MAX, IPC_COPY_TO_DBUF, 0, 0,
	     0),
	TRIP(IPC_STATUS_REQ, 8, 0, 8, struct ipc_status_req, 0, IPC_DEVICES_MAX - 1),
	TRIP(IPC_MOD_INFO, 9, 0, 32, struct ipc_mod_info, UINT64_MAX, 0x8000000000000001ull,
	     UINT64_MAX - 1, IPC_MOD_MEMORY, 0),
	TRIP(IPC_KILLED, 0, 0, 16, struct ipc_killed, IPC_DEVICES_MAX - 1, IPC_KILL_TIMEOUT,
	     UINT32_MAX, 4),
	TRIP(IPC_RINGS, 0, 1, 8, struct ipc_rings_offer, IPC_RINGS_BYTES, 0),
	TRIP(IPC_CHANNEL_REQ, 0, 0, 8, struct ipc_channel_req, IPC_DEVICES_MAX - 1, UINT32_MAX),
	TRIP(IPC_CLIENTS_REQ, 6, 0, 16, struct ipc_clients_req, UINT64_MAX, 0, 0),
	TRIP(IPC_ADOPT, 0, 0, 16, struct ipc_adopt, UINT64_MAX, UINT32_MAX, 0),
	/* The longest name; a one-byte one. */
	TRIP(IPC_KERNEL_ATTRS_REQ, 7, 0, 280, struct ipc_sym_req, UINT64_MAX, 0,
	     IPC_KERNEL_NAME_MAX, 0,
	     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	     "aaaaa"),
	TRIP(IPC_GLOBAL_REQ, 8, 0, 280, struct ipc_sym_req, 1, UINT64_MAX, 1, 0, "x"),
	TRIP(IPC_KERNEL_ATTRS, 9, 0, 64, struct ipc_kernel_attrs, INT32_MAX, IPC_ATTR_UNKNOWN, 0, 1,
	     2, 3, 4, 5, 6, IPC_ATTR_UNKNOWN, IPC_ARGS_MAX, { 0 }),
	TRIP(IPC_GLOBAL, 10, 0, 16, struct ipc_global_info, UINT64_MAX, IPC_GLOBAL_READ_ONLY, 0),
	TRIP(IPC_MARKS, 0, 1, 8, struct ipc_marks_offer, IPC_MARKS_PAGES - 1, 0),
	/* A range ending exactly at 2^64 - 1. */
	TRIP(IPC_DBUF_HOST, 14, 0, 32, struct ipc_dbuf_host, UINT64_MAX, 4096, UINT64_MAX - 1,
	     UINT64_MAX - 4096),
};

static void test_proto_fixed_messages_round_trip(void **state)
{
	for (unsigned i = 0; i < ARRAY_SIZE(trips); i++) {
		const struct round_trip *t = &trips[i];
		union test_decoded out;
		struct ipc_msg msg;
		int n = ipc_encode(test_msgbuf, sizeof(test_msgbuf), t->type, t->id, t->nfds, t->in,
				   t->len, NULL, 0);

		if (t->len != t->wire || n != (int)(HDR + t->wire))
			fail_msg("%s (%u): %zu bytes, encoded in %d", ipc_type_name(t->type), i,
				 t->len, n);
		check_parsed(test_msgbuf, n, t->type, t->id, t->nfds, &msg);
		memset(&out, 0xa5, sizeof(out));
		if (test_decode_as(&msg, t->type, &out) != 0)
			fail_msg("%s (%u) does not decode", ipc_type_name(t->type), i);
		if (memcmp(&out, t->in, t->len) != 0)
			print_message("%s (%u) comes back changed:\n", ipc_type_name(t->type), i);
		assert_memory_equal(&out, t->in, t->len);
	}
}

/* Every FIXED type of the schema is in the table. */
static void test_proto_fixed_table_has_every_type(void **state)
{
#define FIXED_TYPE_FIXED_(T) IPC_##T,
#define FIXED_TYPE_VAR_(T)
#define FIXED_TYPE_EMPTY_(T)
#define FIXED_TYPE_(T, num, name, label, fx, decoded, fds, shape) FIXED_TYPE_##shape##_(T)
	static const uint16_t fixed[] = { IPC_MESSAGES(FIXED_TYPE_) };

	for (unsigned k = 0; k < ARRAY_SIZE(fixed); k++) {
		bool found = false;

		for (unsigned i = 0; i < ARRAY_SIZE(trips); i++)
			found |= trips[i].type == fixed[k];
		if (!found)
			fail_msg("no round trip of %s", ipc_type_name(fixed[k]));
	}
}

/* ---- messages with parts of their own ---- */

static void test_proto_mod_load_round_trips(void **state)
{
	static const char options[] = "-arch=sm_90 --std=c++17";
	static const char code[] = "extern \"C\" __global__ void k(int *p) { *p = 1; }";
	static const char big_code[IPC_INLINE_CODE_MAX] = "int x;";
	struct ipc_mod_load inline_m = {
		.mod_id = 5,
		.lang = IPC_LANG_CUDA,
		.options_len = sizeof(options) - 1,
		.code_len = sizeof(code) - 1,
	};
	struct ipc_mod_load fd_m = {
		.mod_id = 6,
		.lang = IPC_LANG_PTX,
		.flags = IPC_MOD_CODE_FD,
		.options_len = sizeof(options) - 1,
		.code_len = IPC_CODE_MAX,
	};
	struct ipc_mod_load_msg out;
	struct ipc_msg msg;
	int n;

	n = ipc_encode_mod_load(test_msgbuf, sizeof(test_msgbuf), 21, &inline_m, options, code);
	assert_int_equal(n, HDR + sizeof(inline_m) + inline_m.options_len + inline_m.code_len);
	check_parsed(test_msgbuf, n, IPC_MOD_LOAD, 21, 0, &msg);
	assert_int_equal(ipc_decode_mod_load(&msg, &out), 0);
	assert_memory_equal(&out.m, &inline_m, sizeof(inline_m));
	assert_ptr_equal(out.options, msg.payload + sizeof(inline_m));
	assert_memory_equal(out.options, options, inline_m.options_len);
	assert_ptr_equal(out.code, msg.payload + sizeof(inline_m) + inline_m.options_len);
	assert_memory_equal(out.code, code, inline_m.code_len);

	n = ipc_encode_mod_load(test_msgbuf, sizeof(test_msgbuf), 22, &fd_m, options, NULL);
	assert_int_equal(n, HDR + sizeof(fd_m) + fd_m.options_len);
	check_parsed(test_msgbuf, n, IPC_MOD_LOAD, 22, 1, &msg);
	assert_int_equal(ipc_decode_mod_load(&msg, &out), 0);
	assert_memory_equal(&out.m, &fd_m, sizeof(fd_m));
	assert_memory_equal(out.options, options, fd_m.options_len);
	assert_null(out.code);

	inline_m.options_len = 0;
	inline_m.lang = IPC_LANG_HOST;
	inline_m.code_len = IPC_INLINE_CODE_MAX;
	n = ipc_encode_mod_load(test_msgbuf, sizeof(test_msgbuf), 23, &inline_m, NULL, big_code);
	check_parsed(test_msgbuf, n, IPC_MOD_LOAD, 23, 0, &msg);
	assert_int_equal(ipc_decode_mod_load(&msg, &out), 0);
	assert_memory_equal(&out.m, &inline_m, sizeof(inline_m));
	assert_ptr_equal(out.code, msg.payload + sizeof(inline_m));
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
	struct ipc_submit want = in;
	static struct ipc_submit_msg out;
	struct ipc_msg msg;
	int n;

	test_random_fill(data, sizeof(data), 1);
	/* Scalars between buffer arguments of every kind, some of the IN ones cached. */
	for (unsigned i = 0; i < IPC_ARGS_MAX; i++) {
		uint32_t kind = IPC_ARG_IN + i % 5;
		uint32_t flags = kind == IPC_ARG_IN && i % 4 == 1 ? IPC_ARG_CACHED : 0;

		if (i % 2 == 0)
			args[i] = (struct ipc_arg){ IPC_ARG_SCALAR, 0, 0, i * 4, 4 };
		else
			args[i] = (struct ipc_arg){ kind, flags, i, UINT64_MAX - i, i };
	}
	memset(name, 'k', IPC_KERNEL_NAME_MAX);
	name[IPC_KERNEL_NAME_MAX] = '\0';

	n = ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 31, &in, args, name, data);
	assert_int_equal(n, HDR + sizeof(in) + sizeof(args) + IPC_KERNEL_NAME_MAX + sizeof(data));
	check_parsed(test_msgbuf, n, IPC_SUBMIT, 31, 0, &msg);
	assert_int_equal(ipc_decode_submit(&msg, &out), 0);
	/* The encoder fills in the name's length. */
	want.name_len = IPC_KERNEL_NAME_MAX;
	assert_memory_equal(&out.m, &want, sizeof(want));
	assert_memory_equal(out.args, args, sizeof(args));
	assert_string_equal(out.name, name);
	assert_ptr_equal(out.data, msg.payload + n - HDR - sizeof(data));
	assert_memory_equal(out.data, data, sizeof(data));
}

static void test_proto_submit_without_args_round_trips(void **state)
{
	struct ipc_submit in = { .mod_id = 1, .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	static struct ipc_submit_msg out;
	struct ipc_msg msg;
	int n = ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 1, &in, NULL, "k", NULL);

	check_parsed(test_msgbuf, n, IPC_SUBMIT, 1, 0, &msg);
	assert_int_equal(ipc_decode_submit(&msg, &out), 0);
	assert_int_equal(out.m.nargs, 0);
	assert_int_equal(out.m.data_len, 0);
	assert_string_equal(out.name, "k");
	assert_ptr_equal(out.data, msg.payload + msg.len);
}

static void test_proto_done_round_trips(void **state)
{
	static const char text[] = "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access";
	struct ipc_done in = { IPC_E_KERNEL_FAULT, 0, 1, UINT64_MAX, 12345 };
	struct ipc_done want = in;
	struct ipc_done_msg out;
	struct ipc_msg msg;
	int n = ipc_encode_done(test_msgbuf, sizeof(test_msgbuf), 17, &in, text);

	assert_int_equal(n, HDR + sizeof(in) + strlen(text));
	check_parsed(test_msgbuf, n, IPC_DONE, 17, 0, &msg);
	assert_int_equal(ipc_decode_done(&msg, &out), 0);
	/* The encoder fills in the text's length. */
	want.text_len = strlen(text);
	assert_memory_equal(&out.m, &want, sizeof(want));
	assert_ptr_equal(out.text, msg.payload + sizeof(in));
	assert_memory_equal(out.text, text, strlen(text));

	in.status = IPC_OK;
	n = ipc_encode_done(test_msgbuf, sizeof(test_msgbuf), 18, &in, NULL);
	check_parsed(test_msgbuf, n, IPC_DONE, 18, 0, &msg);
	assert_int_equal(ipc_decode_done(&msg, &out), 0);
	assert_int_equal(out.m.status, IPC_OK);
	assert_int_equal(out.m.text_len, 0);
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
		.version = "0.1.0",
		.flags = IPC_STATUS_STOPPING,
	};
	struct ipc_status_msg out;
	struct ipc_msg msg;
	int n;

	for (unsigned i = 0; i < IPC_DEVICES_MAX; i++)
		devs[i] = test_good_dev_status(i);
	/* Every device, in as few pages as fit; one byte in: the devices lie unaligned, as they
	 * may on the wire. */
	assert_true(IPC_STATUS_PAGE_DEVS < IPC_DEVICES_MAX);
	for (in.first = 0; in.first < IPC_DEVICES_MAX; in.first += in.count) {
		in.count = MIN(IPC_DEVICES_MAX - in.first, (uint32_t)IPC_STATUS_PAGE_DEVS);
		n = ipc_encode_status(test_msgbuf + 1, sizeof(test_msgbuf) - 1, 19, &in,
				      devs + in.first);
		assert_int_equal(n, HDR + sizeof(in) + in.count * sizeof(devs[0]));
		check_parsed(test_msgbuf + 1, n, IPC_STATUS, 19, 0, &msg);
		assert_int_equal(ipc_decode_status(&msg, &out), 0);
		assert_memory_equal(&out.m, &in, sizeof(in));
		assert_ptr_equal(out.devs, msg.payload + sizeof(in));
		for (uint32_t i = 0; i < in.count; i++) {
			struct ipc_dev_status d;

			ipc_status_dev(&out, i, &d);
			assert_memory_equal(&d, &devs[in.first + i], sizeof(d));
		}
	}

	in.ndevices = in.first = in.count = 0;
	n = ipc_encode_status(test_msgbuf, sizeof(test_msgbuf), 20, &in, NULL);
	check_parsed(test_msgbuf, n, IPC_STATUS, 20, 0, &msg);
	assert_int_equal(ipc_decode_status(&msg, &out), 0);
	assert_int_equal(out.m.ndevices, 0);
}

/* Clients in pages as full as fit, one byte in (unaligned), each row as it went. */
static void test_proto_clients_round_trip(void **state)
{
	enum { N = 3000 };
	static struct ipc_client_info rows[N];
	struct ipc_clients in = { .total = N };
	struct ipc_clients_msg out;
	struct ipc_msg msg;
	uint32_t first;
	int n;

	for (uint32_t i = 0; i < N; i++)
		rows[i] = (struct ipc_client_info){ .id = 2 * i + 1,
						    .pid = 1000 + i,
						    .uid = i % 7,
						    .connected_ns = (uint64_t)i << 33,
						    .requests = UINT64_MAX - i,
						    .shared_bytes = (uint64_t)i << 20,
						    .device_bytes = UINT64_MAX / (i + 1),
						    .inflight = i,
						    .channels = i % 64 };
	assert_true(IPC_CLIENTS_PAGE < N);
	for (first = 0; first < N; first += in.count) {
		in.count = MIN(N - first, (uint32_t)IPC_CLIENTS_PAGE);
		n = ipc_encode_clients(test_msgbuf + 1, sizeof(test_msgbuf) - 1, 21, &in,
				       rows + first);
		assert_int_equal(n, HDR + sizeof(in) + in.count * sizeof(rows[0]));
		check_parsed(test_msgbuf + 1, n, IPC_CLIENTS, 21, 0, &msg);
		assert_int_equal(ipc_decode_clients(&msg, &out), 0);
		assert_memory_equal(&out.m, &in, sizeof(in));
		for (uint32_t i = 0; i < in.count; i++) {
			struct ipc_client_info c;

			ipc_clients_row(&out, i, &c);
			assert_memory_equal(&c, &rows[first + i], sizeof(c));
		}
	}
	/* What the encoder refuses: more than a page, more than the total, not by id. */
	in.count = (uint32_t)IPC_CLIENTS_PAGE + 1;
	assert_int_equal(ipc_encode_clients(test_msgbuf, sizeof(test_msgbuf), 1, &in, rows),
			 -EINVAL);
	in = (struct ipc_clients){ .total = 1, .count = 2 };
	assert_int_equal(ipc_encode_clients(test_msgbuf, sizeof(test_msgbuf), 1, &in, rows),
			 -EINVAL);
	in.total = 2;
	{
		struct ipc_client_info twice[2] = { rows[1], rows[0] };

		assert_int_equal(
			ipc_encode_clients(test_msgbuf, sizeof(test_msgbuf), 1, &in, twice),
			-EINVAL);
		twice[1] = rows[1];
		assert_int_equal(
			ipc_encode_clients(test_msgbuf, sizeof(test_msgbuf), 1, &in, twice),
			-EINVAL);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proto_fixed_messages_round_trip),
		cmocka_unit_test(test_proto_fixed_table_has_every_type),
		cmocka_unit_test(test_proto_mod_load_round_trips),
		cmocka_unit_test(test_proto_submit_round_trips),
		cmocka_unit_test(test_proto_submit_without_args_round_trips),
		cmocka_unit_test(test_proto_done_round_trips),
		cmocka_unit_test(test_proto_status_round_trips),
		cmocka_unit_test(test_proto_clients_round_trip),
	};

	return cmocka_run_group_tests_name("ipc-proto", tests, NULL, NULL);
}
