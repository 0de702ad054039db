/* SPDX-License-Identifier: MIT */
/* tests/proto-helpers.h: what the tests of ipc/proto share: a buffer, fake fds, decoding. */
#pragma once

#include "helpers.h"
#include "macro.h"
#include "proto.h"

#define HDR sizeof(struct ipc_hdr)

/* Decoders only count fds, never use them: these numbers are never opened. */
extern const int test_fake_fds[IPC_FDS_MAX + 4];

/* One message buffer for the encoders, room for one byte past the limit. */
extern uint8_t test_msgbuf[IPC_MSG_MAX + 64];

/* ipc_msg_parse() of len bytes at buf, which came with nfds of test_fake_fds. */
int test_parse(const void *buf, size_t len, unsigned nfds, struct ipc_msg *ret);

/* Every decoder's output, for test_decode_as(): a member per type with a payload. */
#define TEST_DECODED_FIXED_(name, decoded) struct ipc_##decoded name;
#define TEST_DECODED_VAR_ TEST_DECODED_FIXED_
#define TEST_DECODED_EMPTY_(name, decoded)
#define TEST_DECODED_(T, num, name, label, fx, decoded, fds, shape)                                \
	TEST_DECODED_##shape##_(name, decoded)
union test_decoded {
	IPC_MESSAGES(TEST_DECODED_)
};

/*
 * Decode msg as a message of `type`, whatever its header says, into *ret (NULL: a buffer of
 * its own): the decoder's answer.
 */
int test_decode_as(const struct ipc_msg *msg, uint16_t type, union test_decoded *ret);

/* Encode a message from its parts, parse it (which must succeed) and decode it as `type`. */
int test_encode_decode(uint16_t type, unsigned nfds, const void *fixed, size_t fixed_len,
		       const struct ipc_part *parts, unsigned nparts);

#define DECODE_FIXED(type, nfds, m) test_encode_decode((type), (nfds), &(m), sizeof(m), NULL, 0)

/* A device description that every decoder takes, as a constant initializer (be: back end). */
#define TEST_GOOD_INFO(i, be)                                                                      \
	{                                                                                          \
		.index = (i), .backend = (be), .cc_major = 8, .cc_minor = 6, .sm_count = 84,       \
		.max_threads_per_block = 1024, .mem_total = 24 * GiB + 1,                          \
		.uuid = { 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0xff },       \
		.name = "host CPU",                                                                \
	}

struct ipc_device_info test_good_info(uint32_t index);

/* A device's line in a STATUS answer, its counters pseudo-random from index. */
struct ipc_dev_status test_good_dev_status(uint32_t index);

void assert_arg_equal(const struct ipc_arg *a, const struct ipc_arg *b);
