/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-proto-encode.c: what the encoders refuse: fds, small buffers, limits. */
#include <errno.h>
#include <string.h>

#include "macro.h"
#include "proto-helpers.h"

/* ---- encoders ---- */

static void test_proto_encode_rejects_too_many_fds(void **state)
{
	struct ipc_mod_drop m = { 1 };

	assert_int_equal(ipc_encode(test_msgbuf, sizeof(test_msgbuf), IPC_MOD_DROP, 1,
				    IPC_FDS_MAX + 1, &m, sizeof(m), NULL, 0),
			 -EINVAL);
	assert_int_equal(ipc_encode(test_msgbuf, sizeof(test_msgbuf), IPC_MOD_DROP, 1, IPC_FDS_MAX,
				    &m, sizeof(m), NULL, 0),
			 HDR + sizeof(m));
}

static void test_proto_encode_rejects_small_buffer(void **state)
{
	struct ipc_mod_drop m = { 1 };
	struct ipc_part part = { "abc", 3 };
	size_t need = HDR + sizeof(m) + 3;

	for (size_t cap = 0; cap < need; cap++)
		assert_int_equal(
			ipc_encode(test_msgbuf, cap, IPC_MOD_DROP, 1, 0, &m, sizeof(m), &part, 1),
			-EMSGSIZE);
	assert_int_equal(ipc_encode(test_msgbuf, need, IPC_MOD_DROP, 1, 0, &m, sizeof(m), &part, 1),
			 need);
}

static void test_proto_encode_rejects_over_msg_max(void **state)
{
	static uint8_t src[IPC_MSG_MAX];
	struct ipc_part parts[2] = { { src, IPC_PAYLOAD_MAX }, { src, 1 } };

	assert_int_equal(
		ipc_encode(test_msgbuf, sizeof(test_msgbuf), IPC_DONE, 1, 0, NULL, 0, parts, 1),
		IPC_MSG_MAX);
	assert_int_equal(
		ipc_encode(test_msgbuf, sizeof(test_msgbuf), IPC_DONE, 1, 0, NULL, 0, parts, 2),
		-EMSGSIZE);
}

static void test_proto_encode_mod_load_checks_limits(void **state)
{
	static char big[IPC_INLINE_CODE_MAX + 1];
	struct ipc_mod_load m = {
		.mod_id = 1,
		.lang = IPC_LANG_CUDA,
		.options_len = IPC_OPTIONS_MAX + 1,
		.code_len = 1,
	};

	memset(big, 'b', sizeof(big));
	assert_int_equal(ipc_encode_mod_load(test_msgbuf, sizeof(test_msgbuf), 1, &m, big, big),
			 -EINVAL);
	m = (struct ipc_mod_load){ .mod_id = 1, .lang = IPC_LANG_CUDA };
	assert_int_equal(ipc_encode_mod_load(test_msgbuf, sizeof(test_msgbuf), 1, &m, NULL, big),
			 -EINVAL);
	m.code_len = IPC_INLINE_CODE_MAX + 1;
	assert_int_equal(ipc_encode_mod_load(test_msgbuf, sizeof(test_msgbuf), 1, &m, NULL, big),
			 -EINVAL);
	m.flags = IPC_MOD_CODE_FD;
	assert_int_equal(ipc_encode_mod_load(test_msgbuf, sizeof(test_msgbuf), 1, &m, NULL, NULL),
			 HDR + sizeof(m));
	m.code_len = IPC_CODE_MAX + 1;
	assert_int_equal(ipc_encode_mod_load(test_msgbuf, sizeof(test_msgbuf), 1, &m, NULL, NULL),
			 -EINVAL);
}

static void test_proto_encode_submit_checks_limits(void **state)
{
	static struct ipc_arg args[IPC_ARGS_MAX + 1];
	static char name[IPC_KERNEL_NAME_MAX + 2];
	struct ipc_submit m = { .mod_id = 1, .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };

	assert_int_equal(ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 1, &m, args, "", NULL),
			 -EINVAL);
	memset(name, 'n', IPC_KERNEL_NAME_MAX + 1);
	assert_int_equal(
		ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 1, &m, args, name, NULL),
		-EINVAL);
	name[IPC_KERNEL_NAME_MAX] = '\0';
	assert_true(ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 1, &m, args, name, NULL) >
		    0);
	m.nargs = IPC_ARGS_MAX + 1;
	assert_int_equal(
		ipc_encode_submit(test_msgbuf, sizeof(test_msgbuf), 1, &m, args, "k", NULL),
		-EINVAL);
}

static void test_proto_encode_status_checks_limits(void **state)
{
	struct ipc_status m = { .ndevices = IPC_DEVICES_MAX + 1 };

	assert_int_equal(ipc_encode_status(test_msgbuf, sizeof(test_msgbuf), 1, &m, NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proto_encode_rejects_too_many_fds),
		cmocka_unit_test(test_proto_encode_rejects_small_buffer),
		cmocka_unit_test(test_proto_encode_rejects_over_msg_max),
		cmocka_unit_test(test_proto_encode_mod_load_checks_limits),
		cmocka_unit_test(test_proto_encode_submit_checks_limits),
		cmocka_unit_test(test_proto_encode_status_checks_limits),
	};

	return cmocka_run_group_tests_name("ipc-proto-encode", tests, NULL, NULL);
}
