/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-proto-parse.c: what every message goes through: the header, the fd count. */
#include <errno.h>
#include <string.h>

#include "macro.h"
#include "proto-helpers.h"

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
	const int bad[] = { 1, INT32_MAX, IPC_STATUS_MIN - 1, -1000, INT32_MIN };

	for (int st = IPC_OK; st >= IPC_STATUS_MIN; st--) {
		assert_true(ipc_status_valid(st));
		assert_string_not_equal(ipc_status_text(st), "unknown status");
		assert_string_not_equal(ipc_status_name(st), "unknown");
		/* A label value: lower case, digits and _ only. */
		assert_int_equal(
			strspn(ipc_status_name(st), "abcdefghijklmnopqrstuvwxyz_0123456789"),
			strlen(ipc_status_name(st)));
		assert_true(-st < (int)IPC_STATUS_CODES);
		for (int other = IPC_OK; other > st; other--) {
			assert_string_not_equal(ipc_status_text(st), ipc_status_text(other));
			assert_string_not_equal(ipc_status_name(st), ipc_status_name(other));
		}
	}
	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_false(ipc_status_valid(bad[i]));
		assert_string_equal(ipc_status_text(bad[i]), "unknown status");
		assert_string_equal(ipc_status_name(bad[i]), "unknown");
	}
}

static void test_proto_samples_decode_only_as_their_type(void **state)
{
	struct test_sample s;
	unsigned types_seen[IPC_TYPE_MAX_] = { 0 };

	for (unsigned i = 0; test_msg_sample(i, test_msgbuf, sizeof(test_msgbuf), &s); i++) {
		struct ipc_msg msg;

		assert_int_equal(test_parse(test_msgbuf, s.len, s.nfds, &msg), 0);
		for (uint16_t t = 1; t < IPC_TYPE_MAX_; t++)
			if (test_decode_as(&msg, t, NULL) != (t == s.type ? 0 : -EBADMSG))
				fail_msg("sample %s decoded as %s: %d", s.name, ipc_type_name(t),
					 test_decode_as(&msg, t, NULL));
		types_seen[s.type]++;
	}
	for (uint16_t t = 1; t < IPC_TYPE_MAX_; t++)
		assert_true(types_seen[t] > 0);
}

static void test_proto_decode_rejects_truncated(void **state)
{
	static uint8_t copy[IPC_MSG_MAX];
	struct test_sample s;

	for (unsigned i = 0; test_msg_sample(i, test_msgbuf, sizeof(test_msgbuf), &s); i++) {
		for (size_t len = 0; len < s.len; len++) {
			struct ipc_msg msg;
			struct ipc_hdr h;

			/* As received: the header says more than arrived. */
			assert_int_equal(test_parse(test_msgbuf, len, s.nfds, &msg), -EBADMSG);
			if (len < HDR)
				continue;
			/* With a header that agrees: the decoder must notice. */
			memcpy(copy, test_msgbuf, len);
			h = test_hdr_get(copy);
			h.len = (uint32_t)(len - HDR);
			test_hdr_set(copy, &h);
			assert_int_equal(test_parse(copy, len, s.nfds, &msg), 0);
			if (test_decode_as(&msg, s.type, NULL) != -EBADMSG)
				fail_msg("%s cut to %zu bytes decoded", s.name, len);
		}
	}
}

static void test_proto_decode_rejects_trailing_bytes(void **state)
{
	struct test_sample s;

	for (unsigned i = 0; test_msg_sample(i, test_msgbuf, sizeof(test_msgbuf), &s); i++) {
		for (size_t extra = 1; extra <= 16; extra++) {
			struct ipc_hdr h = test_hdr_get(test_msgbuf);
			struct ipc_msg msg;

			memset(test_msgbuf + s.len, 0, extra);
			h.len = (uint32_t)(s.len + extra - HDR);
			test_hdr_set(test_msgbuf, &h);
			assert_int_equal(test_parse(test_msgbuf, s.len + extra, s.nfds, &msg), 0);
			if (test_decode_as(&msg, s.type, NULL) != -EBADMSG)
				fail_msg("%s with %zu more bytes decoded", s.name, extra);
			h.len = (uint32_t)(s.len - HDR);
			test_hdr_set(test_msgbuf, &h);
		}
	}
}

static void test_proto_decode_rejects_wrong_fd_count(void **state)
{
	struct test_sample s;

	for (unsigned i = 0; test_msg_sample(i, test_msgbuf, sizeof(test_msgbuf), &s); i++) {
		for (unsigned nfds = 0; nfds <= IPC_FDS_MAX; nfds++) {
			struct ipc_hdr h = test_hdr_get(test_msgbuf);
			struct ipc_msg msg;

			h.nfds = (uint16_t)nfds;
			test_hdr_set(test_msgbuf, &h);
			assert_int_equal(test_parse(test_msgbuf, s.len, nfds, &msg), 0);
			if (test_decode_as(&msg, s.type, NULL) != (nfds == s.nfds ? 0 : -EBADMSG))
				fail_msg("%s with %u fds: %d", s.name, nfds,
					 test_decode_as(&msg, s.type, NULL));
		}
	}
}

static void test_proto_parse_rejects_short_header(void **state)
{
	struct ipc_msg msg;
	size_t n = test_msg_make(test_msgbuf, IPC_HELLO, 1, 0, NULL, 0);

	assert_int_equal(n, HDR);
	assert_int_equal(test_parse(test_msgbuf, n, 0, &msg), 0);
	assert_int_equal(msg.len, 0);
	for (size_t len = 0; len < HDR; len++)
		assert_int_equal(test_parse(test_msgbuf, len, 0, &msg), -EBADMSG);
}

static void test_proto_parse_rejects_oversized_len(void **state)
{
	static uint8_t big[IPC_MSG_MAX + 1];
	struct ipc_hdr h = { IPC_MAGIC, IPC_VERSION, 0, IPC_DONE, 0, IPC_MSG_MAX + 1 - HDR, 0 };
	struct ipc_msg msg;

	test_hdr_set(big, &h);
	assert_int_equal(test_parse(big, sizeof(big), 0, &msg), -EMSGSIZE);
	assert_int_equal(test_parse(big, SIZE_MAX, 0, &msg), -EMSGSIZE);

	/* Exactly the limit is fine for the header; a length field past it is not. */
	h.len = IPC_MSG_MAX - HDR;
	test_hdr_set(big, &h);
	assert_int_equal(test_parse(big, IPC_MSG_MAX, 0, &msg), 0);
	h.len = UINT32_MAX;
	test_hdr_set(big, &h);
	assert_int_equal(test_parse(big, IPC_MSG_MAX, 0, &msg), -EBADMSG);
}

static void test_proto_parse_rejects_wrong_magic(void **state)
{
	const uint16_t magics[] = { 0, IPC_MAGIC ^ 1, 0x4758, UINT16_MAX };
	size_t n = test_msg_make(test_msgbuf, IPC_HELLO, 1, 0, NULL, 0);

	for (unsigned i = 0; i < ARRAY_SIZE(magics); i++) {
		struct ipc_hdr h = test_hdr_get(test_msgbuf);
		struct ipc_msg msg;

		h.magic = magics[i];
		test_hdr_set(test_msgbuf, &h);
		assert_int_equal(test_parse(test_msgbuf, n, 0, &msg), -EBADMSG);
	}
}

static void test_proto_parse_rejects_unsupported_version(void **state)
{
	const uint8_t versions[] = { 0, IPC_VERSION_MIN - 1, IPC_VERSION + 1, 0x80, UINT8_MAX };
	struct test_sample s;

	assert_true(test_msg_sample(2, test_msgbuf, sizeof(test_msgbuf), &s));
	assert_int_not_equal(s.type, IPC_HELLO);
	for (unsigned i = 0; i < ARRAY_SIZE(versions); i++) {
		struct ipc_hdr h = test_hdr_get(test_msgbuf);
		struct ipc_msg msg;

		h.version = versions[i];
		test_hdr_set(test_msgbuf, &h);
		assert_int_equal(test_parse(test_msgbuf, s.len, s.nfds, &msg), -EPROTONOSUPPORT);
	}
}

/* The kick both sides send is a well-formed KICK. */
static void test_proto_kick_is_a_kick(void **state)
{
	struct ipc_msg msg;

	memcpy(test_msgbuf, &ipc_kick, sizeof(ipc_kick));
	assert_int_equal(test_parse(test_msgbuf, sizeof(ipc_kick), 0, &msg), 0);
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

	assert_true(test_msg_sample(0, test_msgbuf, sizeof(test_msgbuf), &s));
	assert_int_equal(s.type, IPC_HELLO);
	for (unsigned i = 0; i < ARRAY_SIZE(versions); i++) {
		struct ipc_hello m;

		h = test_hdr_get(test_msgbuf);
		h.version = versions[i];
		test_hdr_set(test_msgbuf, &h);
		assert_int_equal(test_parse(test_msgbuf, s.len, s.nfds, &msg), 0);
		assert_int_equal(ipc_decode_hello(&msg, &m), 0);
	}
	h = test_hdr_get(test_msgbuf);
	h.version = 0;
	test_hdr_set(test_msgbuf, &h);
	assert_int_equal(test_parse(test_msgbuf, s.len, s.nfds, &msg), -EPROTONOSUPPORT);
}

static void test_proto_parse_rejects_len_mismatch(void **state)
{
	const int64_t deltas[] = { -16, -1, 1, 2, 4096 };
	size_t n = test_msg_make(test_msgbuf, IPC_SEG_DROP, 1, 0, "12345678", 8);

	for (unsigned i = 0; i < ARRAY_SIZE(deltas); i++) {
		struct ipc_hdr h = test_hdr_get(test_msgbuf);
		struct ipc_msg msg;

		h.len = (uint32_t)(8 + deltas[i]);
		test_hdr_set(test_msgbuf, &h);
		assert_int_equal(test_parse(test_msgbuf, n, 0, &msg), -EBADMSG);
	}
}

static void test_proto_parse_rejects_nfds_mismatch(void **state)
{
	for (unsigned said = 0; said <= IPC_FDS_MAX + 2; said++) {
		for (unsigned came = 0; came <= IPC_FDS_MAX + 2; came++) {
			size_t n = test_msg_make(test_msgbuf, IPC_HELLO, 1, 0, NULL, 0);
			struct ipc_hdr h = test_hdr_get(test_msgbuf);
			struct ipc_msg msg;
			int want = said == came && came <= IPC_FDS_MAX ? 0 : -EBADMSG;

			h.nfds = (uint16_t)said;
			test_hdr_set(test_msgbuf, &h);
			assert_int_equal(test_parse(test_msgbuf, n, came, &msg), want);
		}
	}
}

static void test_proto_parse_rejects_unknown_type(void **state)
{
	const uint16_t types[] = { 0, IPC_TYPE_MAX_, IPC_TYPE_MAX_ + 1, 0x7fff, UINT16_MAX };

	for (unsigned i = 0; i < ARRAY_SIZE(types); i++) {
		size_t n = test_msg_make(test_msgbuf, types[i], 1, 0, "payload!", 8);
		struct ipc_msg msg;

		assert_int_equal(test_parse(test_msgbuf, n, 0, &msg), -EBADMSG);
	}
}

static void test_proto_parse_ignores_header_flags_and_id(void **state)
{
	size_t n = test_msg_make(test_msgbuf, IPC_SEG_DROP, UINT32_MAX, 0, "12345678", 8);
	struct ipc_hdr h = test_hdr_get(test_msgbuf);
	struct ipc_msg msg;

	h.flags = 0xff;
	test_hdr_set(test_msgbuf, &h);
	assert_int_equal(test_parse(test_msgbuf, n, 0, &msg), 0);
	assert_int_equal(msg.hdr.flags, 0xff);
	assert_int_equal(msg.hdr.id, UINT32_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
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
	};

	return cmocka_run_group_tests_name("ipc-proto-parse", tests, NULL, NULL);
}
