/* SPDX-License-Identifier: MIT */
/* tests/proto-helpers.c: what the tests of ipc/proto share: a buffer, fake fds, decoding. */
#include "proto-helpers.h"

const int test_fake_fds[IPC_FDS_MAX + 4] = { 100, 101, 102, 103, 104, 105, 106, 107 };

uint8_t test_msgbuf[IPC_MSG_MAX + 64];

int test_parse(const void *buf, size_t len, unsigned nfds, struct ipc_msg *ret)
{
	return ipc_msg_parse(buf, len, test_fake_fds, nfds, ret);
}

int test_decode_as(const struct ipc_msg *msg, uint16_t type, union test_decoded *ret)
{
	static union test_decoded scratch;
	union test_decoded *u = ret ? ret : &scratch;

	switch (type) {
#define DECODE_AS_FIXED_(T, name)                                                                  \
	case IPC_##T:                                                                              \
		return ipc_decode_##name(msg, &u->name);
#define DECODE_AS_VAR_ DECODE_AS_FIXED_
#define DECODE_AS_EMPTY_(T, name)                                                                  \
	case IPC_##T:                                                                              \
		return ipc_decode_##name(msg);
#define DECODE_AS_(T, num, name, label, fx, decoded, fds, shape) DECODE_AS_##shape##_(T, name)
		IPC_MESSAGES(DECODE_AS_)
	}
	fail_msg("no decoder for type %u", type);
	return 0;
}

int test_encode_decode(uint16_t type, unsigned nfds, const void *fixed, size_t fixed_len,
		       const struct ipc_part *parts, unsigned nparts)
{
	struct ipc_msg msg;
	int n = ipc_encode(test_msgbuf, sizeof(test_msgbuf), type, 1, nfds, fixed, fixed_len, parts,
			   nparts);

	assert_true(n > 0);
	assert_int_equal(test_parse(test_msgbuf, (size_t)n, nfds, &msg), 0);
	return test_decode_as(&msg, type, NULL);
}

struct ipc_device_info test_good_info(uint32_t index)
{
	struct ipc_device_info info = TEST_GOOD_INFO(index, IPC_BACKEND_HOST);

	return info;
}

struct ipc_dev_status test_good_dev_status(uint32_t index)
{
	struct ipc_dev_status d = {
		.info = test_good_info(index),
		.state = IPC_DEVICE_STARTING + index % 4,
		.pid = 1000 + index,
		.generation = index * 3,
		.restarts = index,
		.deaths_recent = index % 5,
		.launch_rate = index * 1000,
	};

	test_random_fill(&d.stats, sizeof(d.stats), index);
	d.stats.driver[index % sizeof(d.stats.driver)] = '\0';
	d.stats.sched.share_note[index % sizeof(d.stats.sched.share_note)] = '\0';
	return d;
}

void assert_arg_equal(const struct ipc_arg *a, const struct ipc_arg *b)
{
	assert_int_equal(a->kind, b->kind);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->ref, b->ref);
	assert_int_equal(a->offset, b->offset);
	assert_int_equal(a->size, b->size);
}
