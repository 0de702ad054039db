/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-proto-submit.c: SUBMIT: counts, name, launch, arguments. */
#include <errno.h>
#include <string.h>

#include "macro.h"
#include "proto-helpers.h"

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
		.args = { { IPC_ARG_SCALAR, 0, 0, 8, 8 }, { IPC_ARG_IN, 0, 1, 0, 4096 } },
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

	return test_encode_decode(IPC_SUBMIT, 0, &c->m, sizeof(c->m), parts, 3);
}

static void test_proto_submit_rejects_bad_counts(void **state)
{
	struct submit_case c;

	submit_init(&c);
	assert_int_equal(submit_decode(&c), 0);

	/* More arguments than the limit, all present and valid. */
	c.nargs = c.m.nargs = IPC_ARGS_MAX + 1;
	for (unsigned i = 0; i < c.nargs; i++)
		c.args[i] = (struct ipc_arg){ IPC_ARG_OUT, 0, 1, 0, 1 };
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
	/* IPC_LAUNCH_TIMED, IPC_SUBMIT_ALONE and IPC_SUBMIT_MARK_DONE are the only flags. */
	submit_init(&c);
	c.m.flags = IPC_LAUNCH_TIMED;
	assert_int_equal(submit_decode(&c), 0);
	c.m.flags = IPC_LAUNCH_TIMED | IPC_SUBMIT_ALONE | IPC_SUBMIT_MARK_DONE;
	assert_int_equal(submit_decode(&c), 0);
	c.m.flags = IPC_SUBMIT_MARK_DONE << 1;
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

/* The refusal of submit case c, as ipc_submit_refusal() words it; NULL when it decodes. */
static const char *submit_why(const struct submit_case *c)
{
	struct ipc_part parts[3] = {
		{ c->args, c->nargs * sizeof(struct ipc_arg) },
		{ c->name, c->name_len },
		{ c->data, c->data_len },
	};
	struct ipc_msg msg;
	int n = ipc_encode(test_msgbuf, sizeof(test_msgbuf), IPC_SUBMIT, 1, 0, &c->m, sizeof(c->m),
			   parts, 3);

	assert_true(n > 0);
	assert_int_equal(test_parse(test_msgbuf, (size_t)n, 0, &msg), 0);
	/* Words exactly when the decoder refuses. */
	assert_int_equal(test_decode_as(&msg, IPC_SUBMIT, NULL) < 0,
			 ipc_submit_refusal(&msg) != NULL);
	return ipc_submit_refusal(&msg);
}

static void test_proto_submit_refusal_says_why(void **state)
{
	struct submit_case c;

	submit_init(&c);
	assert_null(submit_why(&c));
	c.m.grid[0] = IPC_GRID_MAX + 1u;
	assert_non_null(strstr(submit_why(&c), "grid"));
	submit_init(&c);
	c.m.block[2] = 0;
	assert_non_null(strstr(submit_why(&c), "block"));
	submit_init(&c);
	c.m.flags = 0x80;
	assert_non_null(strstr(submit_why(&c), "flags"));
	submit_init(&c);
	c.m.data_len = (uint32_t)c.data_len + 8;
	assert_non_null(strstr(submit_why(&c), "length"));
	submit_init(&c);
	c.args[0].kind = 99;
	assert_non_null(strstr(submit_why(&c), "kind"));
}

static void test_proto_submit_rejects_bad_scalar(void **state)
{
	/* 16 bytes of scalar data. */
	assert_int_equal(submit_arg_decode((struct ipc_arg){ IPC_ARG_SCALAR, 0, 0, 0, 16 }), 0);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ IPC_ARG_SCALAR, 0, 0, 15, 1 }), 0);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ IPC_ARG_SCALAR, 0, 0, 0, 17 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ IPC_ARG_SCALAR, 0, 0, 13, 4 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ IPC_ARG_SCALAR, 0, 0, 16, 1 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ IPC_ARG_SCALAR, 0, 0, 1ull << 32, 4 }),
			 -EBADMSG);
	/* offset + size wraps around 2^64 and would land inside the data. */
	assert_int_equal(
		submit_arg_decode((struct ipc_arg){ IPC_ARG_SCALAR, 0, 0, UINT64_MAX - 1, 4 }),
		-EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ IPC_ARG_SCALAR, 0, 0, UINT64_MAX, 2 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ IPC_ARG_SCALAR, 0, 0, 0, 0 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ IPC_ARG_SCALAR, 1, 0, 0, 4 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ IPC_ARG_SCALAR, 0, 1, 0, 4 }),
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
	struct ipc_arg a = { IPC_ARG_SCALAR, 0, 0, 0, IPC_SCALAR_MAX };
	static struct ipc_submit_msg out;
	struct ipc_msg msg;
	int n = ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 1, &m, &a, "k", data);

	assert_int_equal(test_parse(test_msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_submit(&msg, &out), 0);
	a.size = IPC_SCALAR_MAX + 1;
	n = ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 1, &m, &a, "k", data);
	assert_int_equal(test_parse(test_msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_submit(&msg, &out), -EBADMSG);
}

static void test_proto_submit_rejects_bad_buffer_arg(void **state)
{
	const uint32_t kinds[] = { IPC_ARG_IN, IPC_ARG_OUT, IPC_ARG_INOUT, IPC_ARG_MAPPED,
				   IPC_ARG_DBUF };

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
	assert_int_equal(submit_arg_decode((struct ipc_arg){ IPC_ARG_DBUF + 1, 0, 9, 0, 1 }),
			 -EBADMSG);
	assert_int_equal(submit_arg_decode((struct ipc_arg){ UINT32_MAX, 0, 9, 0, 1 }), -EBADMSG);
}

/* A valid argument of `kind` (a scalar into the data, or a buffer range) with these flags. */
static int submit_flags_decode(uint32_t kind, uint32_t flags)
{
	if (kind == IPC_ARG_SCALAR)
		return submit_arg_decode((struct ipc_arg){ kind, flags, 0, 0, 4 });
	return submit_arg_decode((struct ipc_arg){ kind, flags, 9, 0, 4096 });
}

static void test_proto_submit_arg_flags(void **state)
{
	const uint32_t kinds[] = { IPC_ARG_SCALAR, IPC_ARG_IN,     IPC_ARG_OUT,
				   IPC_ARG_INOUT,  IPC_ARG_MAPPED, IPC_ARG_DBUF };
	const uint32_t unknown[] = { IPC_ARG_CACHED << 1, 0x80000000u,
				     UINT32_MAX & ~IPC_ARG_CACHED };

	for (unsigned i = 0; i < ARRAY_SIZE(kinds); i++) {
		uint32_t k = kinds[i];

		assert_int_equal(submit_flags_decode(k, 0), 0);
		/* Only an IN argument can be cached. */
		assert_int_equal(submit_flags_decode(k, IPC_ARG_CACHED),
				 k == IPC_ARG_IN ? 0 : -EBADMSG);
		for (unsigned j = 0; j < ARRAY_SIZE(unknown); j++) {
			assert_int_equal(submit_flags_decode(k, unknown[j]), -EBADMSG);
			assert_int_equal(submit_flags_decode(k, unknown[j] | IPC_ARG_CACHED),
					 -EBADMSG);
		}
	}
}

/* Every argument's kind and flags come through: a cached IN and device buffer ranges. */
static void test_proto_submit_dbuf_and_cached_args(void **state)
{
	const struct ipc_arg args[] = {
		{ IPC_ARG_DBUF, 0, 11, 0, 1 * MiB },
		{ IPC_ARG_IN, IPC_ARG_CACHED, 8, 4096, 4096 },
		{ IPC_ARG_IN, 0, 8, 0, 4096 },
		{ IPC_ARG_DBUF, 0, UINT64_MAX, UINT64_MAX - 1, 1 },
		{ IPC_ARG_MAPPED, 0, 7, 0, 64 },
	};
	struct ipc_submit m = {
		.mod_id = 1, .nargs = ARRAY_SIZE(args), .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }
	};
	static struct ipc_submit_msg out;
	struct ipc_msg msg;
	int n = ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 1, &m, args, "k", NULL);

	assert_int_equal(test_parse(test_msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_submit(&msg, &out), 0);
	assert_int_equal(out.m.nargs, ARRAY_SIZE(args));
	for (unsigned i = 0; i < ARRAY_SIZE(args); i++)
		assert_arg_equal(&out.args[i], &args[i]);

	/* One bad argument refuses the whole message, whichever it is. */
	for (unsigned i = 0; i < ARRAY_SIZE(args); i++) {
		struct ipc_arg bad[ARRAY_SIZE(args)];

		memcpy(bad, args, sizeof(bad));
		bad[i].flags = bad[i].kind == IPC_ARG_IN ? IPC_ARG_CACHED << 1 : IPC_ARG_CACHED;
		n = ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 1, &m, bad, "k", NULL);
		assert_int_equal(test_parse(test_msgbuf, (size_t)n, 0, &msg), 0);
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
	n = ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 1, &m, NULL, "k", data);
	assert_true(n > 0);
	assert_int_equal(test_parse(test_msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_submit(&msg, &out), 0);
	assert_ptr_equal(out.data + out.m.data_len, test_msgbuf + n);

	m.data_len++;
	n = ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 1, &m, NULL, "k", data);
	assert_true(n > 0);
	assert_int_equal(test_parse(test_msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_submit(&msg, &out), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proto_submit_rejects_bad_counts),
		cmocka_unit_test(test_proto_submit_rejects_bad_name),
		cmocka_unit_test(test_proto_submit_rejects_bad_data_len),
		cmocka_unit_test(test_proto_submit_rejects_bad_launch),
		cmocka_unit_test(test_proto_submit_refusal_says_why),
		cmocka_unit_test(test_proto_submit_rejects_bad_scalar),
		cmocka_unit_test(test_proto_submit_scalar_limit),
		cmocka_unit_test(test_proto_submit_rejects_bad_buffer_arg),
		cmocka_unit_test(test_proto_submit_arg_flags),
		cmocka_unit_test(test_proto_submit_dbuf_and_cached_args),
		cmocka_unit_test(test_proto_submit_caps_scalar_data),
	};

	return cmocka_run_group_tests_name("ipc-proto-submit", tests, NULL, NULL);
}
