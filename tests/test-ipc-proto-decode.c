/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-proto-decode.c: each decoder's own checks of its fields. */
#include <errno.h>
#include <string.h>

#include "macro.h"
#include "proto-helpers.h"

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
	struct ipc_welcome m = { IPC_VERSION, IPC_DEVICES_MAX, 1, 0, 0, 0, 0, 0 };

	assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, m), 0);
	m.flags = 0x2;
	assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, m), -EBADMSG);
	m.flags = IPC_WELCOME_PRIVATE;
	assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, m), 0);
	m.ndevices = IPC_DEVICES_MAX + 1;
	assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, m), -EBADMSG);
	m.ndevices = UINT32_MAX;
	assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, m), -EBADMSG);
	m = (struct ipc_welcome){ IPC_VERSION_MIN - 1, 1, 1, 0, 0, 0, 0, 0 };
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
		info->backend = IPC_BACKEND_CUDA + 1;
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
	struct ipc_device good = { test_good_info(IPC_DEVICES_MAX - 1), IPC_DEVICE_FAILED, 1, 0,
				   0 };
	const uint32_t bad_states[] = { 0, IPC_DEVICE_FAILED + 1, UINT32_MAX };
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
	struct ipc_ready m = { test_good_info(0) };

	assert_int_equal(DECODE_FIXED(IPC_READY, 0, m), 0);
	for (unsigned how = 0;; how++) {
		m.info = test_good_info(0);
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
	return test_encode_decode(IPC_MOD_LOAD, nfds, m, sizeof(*m), parts, 2);
}

static void test_proto_mod_load_rejects_bad_fields(void **state)
{
	const struct ipc_mod_load good = {
		.mod_id = 1,
		.lang = IPC_LANG_CUDA,
		.options_len = 4,
		.code_len = 8,
	};
	const uint32_t bad_langs[] = { 0, IPC_LANG_HOST + 1, UINT32_MAX };
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
	struct ipc_mod_load m = {
		.mod_id = 1,
		.lang = IPC_LANG_PTX,
		.options_len = IPC_OPTIONS_MAX,
		.code_len = 1,
	};

	assert_int_equal(mod_load_decode(&m, NULL, IPC_OPTIONS_MAX, 1, 0), 0);
	m.options_len = IPC_OPTIONS_MAX + 1;
	assert_int_equal(mod_load_decode(&m, NULL, IPC_OPTIONS_MAX + 1, 1, 0), -EBADMSG);

	m = (struct ipc_mod_load){ .mod_id = 1, .lang = IPC_LANG_PTX };
	assert_int_equal(mod_load_decode(&m, NULL, 0, 0, 0), -EBADMSG);
	m.flags = IPC_MOD_CODE_FD;
	assert_int_equal(mod_load_decode(&m, NULL, 0, 0, 1), -EBADMSG);

	/* Inline code has a smaller limit than code in a memfd. */
	m = (struct ipc_mod_load){
		.mod_id = 1,
		.lang = IPC_LANG_PTX,
		.code_len = IPC_INLINE_CODE_MAX + 1,
	};
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
	struct ipc_mod_load m = {
		.mod_id = 1,
		.lang = IPC_LANG_CUDA,
		.options_len = sizeof(opts) - 1,
		.code_len = 4,
	};

	assert_int_equal(mod_load_decode(&m, opts, sizeof(opts) - 1, 4, 0), -EBADMSG);
	m.options_len = 3;
	assert_int_equal(mod_load_decode(&m, opts, 3, 4, 0), 0);
	m.options_len = 4;
	assert_int_equal(mod_load_decode(&m, opts, 4, 4, 0), -EBADMSG);
}

/* Append a header record (name, text) or, with text NULL, a name record to p. */
static size_t extra_put(uint8_t *p, const char *name, const char *text)
{
	uint32_t nl = (uint32_t)strlen(name), tl = text ? (uint32_t)strlen(text) : 0;
	size_t n = 0;

	memcpy(p + n, &nl, 4);
	n += 4;
	if (text) {
		memcpy(p + n, &tl, 4);
		n += 4;
	}
	memcpy(p + n, name, nl);
	memcpy(p + n + nl, text ? text : "", tl);
	return n + nl + tl;
}

/* A MOD_LOAD of CUDA code "k" with an extra block, counts as given: 0 or -EBADMSG. */
static int extra_decode(const uint8_t *extra, size_t len, uint32_t nheaders, uint32_t nnames,
			uint32_t lang)
{
	struct ipc_mod_load m = {
		.mod_id = 1,
		.lang = lang,
		.code_len = 1,
		.extra_len = (uint32_t)len,
		.nheaders = nheaders,
		.nnames = nnames,
	};
	struct ipc_part parts[2] = { { "k", 1 }, { extra, len } };

	return test_encode_decode(IPC_MOD_LOAD, 0, &m, sizeof(m), parts, 2);
}

static void test_proto_mod_load_extra_round_trips(void **state)
{
	static const char code[] = "#include \"a.h\"\n";
	uint8_t all[256];
	size_t n = sizeof(code) - 1;
	struct ipc_mod_load m = { .mod_id = 9,
				  .lang = IPC_LANG_CUDA,
				  .code_len = sizeof(code) - 1 };
	struct ipc_mod_extra_cursor c;
	struct ipc_mod_item it;
	union test_decoded out;
	struct ipc_msg msg;
	int r;

	memcpy(all, code, n);
	n += extra_put(all + n, "a.h", "#include \"lib/b.h\"\n");
	n += extra_put(all + n, "lib/b.h", "");
	n += extra_put(all + n, "fill<float>", NULL);
	m.extra_len = (uint32_t)(n - m.code_len);
	m.nheaders = 2;
	m.nnames = 1;
	r = ipc_encode_mod_load(test_msgbuf, sizeof(test_msgbuf), 30, &m, NULL, all);
	assert_true(r > 0);
	assert_int_equal(test_parse(test_msgbuf, (size_t)r, 0, &msg), 0);
	assert_int_equal(test_decode_as(&msg, IPC_MOD_LOAD, &out), 0);
	assert_memory_equal(&out.mod_load.m, &m, sizeof(m));
	assert_memory_equal(out.mod_load.code, all, n);
	ipc_mod_extra_begin(&c, out.mod_load.code + m.code_len, m.extra_len, m.nheaders, m.nnames);
	assert_int_equal(ipc_mod_extra_next(&c, &it), 1);
	assert_int_equal(it.name_len, 3);
	assert_memory_equal(it.name, "a.h", 3);
	assert_int_equal(it.text_len, 19);
	assert_int_equal(ipc_mod_extra_next(&c, &it), 1);
	assert_memory_equal(it.name, "lib/b.h", 7);
	assert_non_null(it.text);
	assert_int_equal(it.text_len, 0);
	assert_int_equal(ipc_mod_extra_next(&c, &it), 1);
	assert_memory_equal(it.name, "fill<float>", 11);
	assert_null(it.text);
	assert_int_equal(ipc_mod_extra_next(&c, &it), 0);
}

static void test_proto_mod_load_rejects_bad_extra(void **state)
{
	uint8_t e[IPC_INLINE_CODE_MAX];
	char longname[IPC_KERNEL_NAME_MAX + 2];
	size_t n;

	n = extra_put(e, "h.h", "x") + extra_put(e + 12, "k", NULL);
	assert_int_equal(extra_decode(e, n, 1, 1, IPC_LANG_CUDA), 0);
	/* Only CUDA C++ has headers; counts that do not fit the bytes; bytes left over. */
	assert_int_equal(extra_decode(e, n, 1, 1, IPC_LANG_PTX), -EBADMSG);
	assert_int_equal(extra_decode(e, n, 1, 0, IPC_LANG_CUDA), -EBADMSG);
	assert_int_equal(extra_decode(e, n, 2, 1, IPC_LANG_CUDA), -EBADMSG);
	assert_int_equal(extra_decode(e, n, 0, 2, IPC_LANG_CUDA), -EBADMSG);
	assert_int_equal(extra_decode(e, n - 1, 1, 1, IPC_LANG_CUDA), -EBADMSG);
	assert_int_equal(extra_decode(e, n, 0, 0, IPC_LANG_CUDA), -EBADMSG);
	/* Empty names, NULs inside, a text running past the end. */
	n = extra_put(e, "", NULL);
	assert_int_equal(extra_decode(e, n, 0, 1, IPC_LANG_CUDA), -EBADMSG);
	n = extra_put(e, "a\x01b", NULL);
	e[5] = '\0';
	assert_int_equal(extra_decode(e, n, 0, 1, IPC_LANG_CUDA), -EBADMSG);
	n = extra_put(e, "h.h", "text");
	e[n - 1] = '\0';
	assert_int_equal(extra_decode(e, n, 1, 0, IPC_LANG_CUDA), -EBADMSG);
	n = extra_put(e, "h.h", "text");
	e[4] = 0xff;
	assert_int_equal(extra_decode(e, n, 1, 0, IPC_LANG_CUDA), -EBADMSG);
	/* A name expression is a kernel name: at most IPC_KERNEL_NAME_MAX bytes. */
	memset(longname, 'k', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	n = extra_put(e, longname, NULL);
	assert_int_equal(extra_decode(e, n, 0, 1, IPC_LANG_CUDA), -EBADMSG);
	longname[IPC_KERNEL_NAME_MAX] = '\0';
	n = extra_put(e, longname, NULL);
	assert_int_equal(extra_decode(e, n, 0, 1, IPC_LANG_CUDA), 0);
	/* Too many headers, however few bytes. */
	assert_int_equal(extra_decode(e, n, IPC_MOD_HEADERS_MAX + 1, 0, IPC_LANG_CUDA), -EBADMSG);
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
	n = test_msg_make(test_msgbuf, IPC_QUEUE_OPEN, 1, 0, &m, sizeof(m));
	assert_int_equal(test_parse(test_msgbuf, n, 0, &msg), 0);
	assert_int_equal(ipc_decode_queue(&msg, IPC_QUEUE_OPEN, &out), 0);
	assert_int_equal(ipc_decode_queue(&msg, IPC_QUEUE_CLOSE, &out), -EBADMSG);
	assert_int_equal(ipc_decode_queue(&msg, IPC_HELLO, &out), -EBADMSG);
	assert_int_equal(ipc_decode_queue(&msg, 0, &out), -EBADMSG);
}

/* A queue's priority is a level of the protocol and its share a percentage; without the flag
 * that says it is given, the priority is 0. */
static void test_proto_queue_config_rejects_bad_fields(void **state)
{
	const struct ipc_queue_config good[] = {
		{ 1, IPC_PRIO_MIN, 0, IPC_QUEUE_PRIORITY },
		{ 1, IPC_PRIO_MAX, IPC_SHARE_MAX, IPC_QUEUE_PRIORITY },
		{ 0, 0, 1, 0 },
		{ UINT32_MAX, 0, 0, 0 },
	};
	const struct ipc_queue_config bad[] = {
		{ 1, IPC_PRIO_MIN - 1, 0, IPC_QUEUE_PRIORITY },
		{ 1, IPC_PRIO_MAX + 1, 0, IPC_QUEUE_PRIORITY },
		{ 1, INT32_MIN, 0, IPC_QUEUE_PRIORITY },
		{ 1, 1, 0, 0 },
		{ 1, 0, IPC_SHARE_MAX + 1, 0 },
		{ 1, 0, UINT32_MAX, IPC_QUEUE_PRIORITY },
		{ 1, 0, 0, 0x2 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(good); i++)
		assert_int_equal(DECODE_FIXED(IPC_QUEUE_CONFIG, 0, good[i]), 0);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		if (DECODE_FIXED(IPC_QUEUE_CONFIG, 0, bad[i]) != -EBADMSG)
			fail_msg("bad queue config %zu decoded", i);
}

/* gpuxd's priority policy, in WELCOME and ATTACH: levels of the protocol, the default no
 * higher than the highest. */
static void test_proto_priority_policy_rejects_bad_levels(void **state)
{
	const int8_t ok[][2] = { { 0, 0 },
				 { IPC_PRIO_MAX, IPC_PRIO_MIN },
				 { IPC_PRIO_MAX, 1 },
				 { IPC_PRIO_MIN, IPC_PRIO_MIN } };
	const int8_t no[][2] = { { 0, 1 },
				 { IPC_PRIO_MAX + 1, 0 },
				 { 0, IPC_PRIO_MIN - 1 },
				 { IPC_PRIO_MIN - 1, IPC_PRIO_MIN - 1 },
				 { INT8_MIN, INT8_MIN } };
	struct ipc_welcome w = { .version = IPC_VERSION, .ndevices = 1 };
	struct ipc_attach a = { .client_id = 1 };

	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		w.prio_max = a.prio_max = ok[i][0];
		w.prio_default = a.prio_default = ok[i][1];
		assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, w), 0);
		assert_int_equal(DECODE_FIXED(IPC_ATTACH, 1, a), 0);
	}
	for (size_t i = 0; i < ARRAY_SIZE(no); i++) {
		w.prio_max = a.prio_max = no[i][0];
		w.prio_default = a.prio_default = no[i][1];
		assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, w), -EBADMSG);
		assert_int_equal(DECODE_FIXED(IPC_ATTACH, 1, a), -EBADMSG);
	}
	w = (struct ipc_welcome){ .version = IPC_VERSION, .ndevices = 1, .reserved = 1 };
	assert_int_equal(DECODE_FIXED(IPC_WELCOME, 0, w), -EBADMSG);
}

static void test_proto_status_req_rejects_flags(void **state)
{
	struct ipc_status_req m = { 1, 0 };

	assert_int_equal(DECODE_FIXED(IPC_STATUS_REQ, 0, m), -EBADMSG);
	m = (struct ipc_status_req){ 0, IPC_DEVICES_MAX };
	assert_int_equal(DECODE_FIXED(IPC_STATUS_REQ, 0, m), -EBADMSG);
}

static void test_proto_drain_rejects_payload(void **state)
{
	uint32_t junk = 0;
	struct ipc_msg msg;
	int n = ipc_encode(test_msgbuf, sizeof(test_msgbuf), IPC_DRAIN, 0, 0, NULL, 0, NULL, 0);

	assert_int_equal(test_parse(test_msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_drain(&msg), 0);
	assert_int_equal(DECODE_FIXED(IPC_DRAIN, 0, junk), -EBADMSG);
	assert_int_equal(test_encode_decode(IPC_DRAIN, 1, NULL, 0, NULL, 0), -EBADMSG);
}

static void test_proto_mod_info_rejects_bad_fields(void **state)
{
	struct ipc_mod_info m = { 1, 2, 3, IPC_MOD_COMPILED, 0 }, out;
	struct ipc_msg msg;
	int n;

	assert_int_equal(DECODE_FIXED(IPC_MOD_INFO, 0, m), 0);
	/* It answers a MOD_LOAD: without an id it answers nothing. */
	n = ipc_encode(test_msgbuf, sizeof(test_msgbuf), IPC_MOD_INFO, 0, 0, &m, sizeof(m), NULL,
		       0);
	assert_int_equal(test_parse(test_msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_mod_info(&msg, &out), -EBADMSG);
	m.source = 0;
	assert_int_equal(DECODE_FIXED(IPC_MOD_INFO, 0, m), -EBADMSG);
	m.source = IPC_MOD_MEMORY + 1;
	assert_int_equal(DECODE_FIXED(IPC_MOD_INFO, 0, m), -EBADMSG);
}

static void test_proto_adopt_rejects_no_client(void **state)
{
	struct ipc_adopt m = { 7, 1234, 0 };

	assert_int_equal(DECODE_FIXED(IPC_ADOPT, 0, m), 0);
	m.client_id = 0;
	assert_int_equal(DECODE_FIXED(IPC_ADOPT, 0, m), -EBADMSG);
}

static void test_proto_sym_req_rejects_bad_names(void **state)
{
	struct ipc_sym_req m = { .mod_id = 1, .name_len = 3, .name = "abc" }, good = m;
	struct ipc_msg msg;
	int n;

	assert_int_equal(DECODE_FIXED(IPC_KERNEL_ATTRS_REQ, 0, m), 0);
	assert_int_equal(DECODE_FIXED(IPC_GLOBAL_REQ, 0, m), 0);
	/* A question without an id gets no answer. */
	n = ipc_encode(test_msgbuf, sizeof(test_msgbuf), IPC_GLOBAL_REQ, 0, 0, &m, sizeof(m), NULL,
		       0);
	assert_int_equal(test_parse(test_msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_global_req(&msg, &m), -EBADMSG);
	m.name_len = 0;
	assert_int_equal(DECODE_FIXED(IPC_GLOBAL_REQ, 0, m), -EBADMSG);
	/* Longer than it says (no NUL there), shorter (a NUL inside), past the limit. */
	m.name_len = 2;
	assert_int_equal(DECODE_FIXED(IPC_GLOBAL_REQ, 0, m), -EBADMSG);
	m.name_len = 4;
	assert_int_equal(DECODE_FIXED(IPC_KERNEL_ATTRS_REQ, 0, m), -EBADMSG);
	memset(m.name, 'a', sizeof(m.name));
	m.name_len = IPC_KERNEL_NAME_MAX + 1;
	assert_int_equal(DECODE_FIXED(IPC_KERNEL_ATTRS_REQ, 0, m), -EBADMSG);
	m = good;
	m.flags = 1;
	assert_int_equal(DECODE_FIXED(IPC_GLOBAL_REQ, 0, m), -EBADMSG);
	/* A device buffer id is a variable's only. */
	m = good;
	m.dbuf_id = 9;
	assert_int_equal(DECODE_FIXED(IPC_GLOBAL_REQ, 0, m), 0);
	assert_int_equal(DECODE_FIXED(IPC_KERNEL_ATTRS_REQ, 0, m), -EBADMSG);
}

static void test_proto_symbol_answers_reject_bad_fields(void **state)
{
	struct ipc_kernel_attrs a = { .max_threads_per_block = 1024, .nparams = 2 }, good = a;
	struct ipc_global_info g = { .size = 8 };

	assert_int_equal(DECODE_FIXED(IPC_KERNEL_ATTRS, 0, a), 0);
	a.local_size_bytes = -2;
	assert_int_equal(DECODE_FIXED(IPC_KERNEL_ATTRS, 0, a), -EBADMSG);
	a = good;
	a.nparams = IPC_ARGS_MAX + 1;
	assert_int_equal(DECODE_FIXED(IPC_KERNEL_ATTRS, 0, a), -EBADMSG);
	a = good;
	a.reserved[2] = 1;
	assert_int_equal(DECODE_FIXED(IPC_KERNEL_ATTRS, 0, a), -EBADMSG);
	assert_int_equal(DECODE_FIXED(IPC_GLOBAL, 0, g), 0);
	g.flags = IPC_GLOBAL_READ_ONLY << 1;
	assert_int_equal(DECODE_FIXED(IPC_GLOBAL, 0, g), -EBADMSG);
	g = (struct ipc_global_info){ .size = 0 };
	assert_int_equal(DECODE_FIXED(IPC_GLOBAL, 0, g), -EBADMSG);
}

static void test_proto_channel_req_rejects_bad_fields(void **state)
{
	struct ipc_channel_req m = { IPC_DEVICES_MAX, 1 };

	assert_int_equal(DECODE_FIXED(IPC_CHANNEL_REQ, 0, m), -EBADMSG);
	m.device = 0;
	assert_int_equal(DECODE_FIXED(IPC_CHANNEL_REQ, 0, m), 0);
	assert_int_equal(DECODE_FIXED(IPC_CHANNEL_REQ, 1, m), -EBADMSG);
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
	return test_encode_decode(type, nfds, m, delta < 0 ? size - (size_t)-delta : size, &part,
				  1);
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

static void test_proto_dbuf_host_rejects_bad_fields(void **state)
{
	struct ipc_dbuf_host m = { 1, 4096, 2, 0 };

	check_fixed_shape(IPC_DBUF_HOST, &m, sizeof(m));
	m.size = 0;
	assert_int_equal(DECODE_FIXED(IPC_DBUF_HOST, 0, m), -EBADMSG);
	/* A range that wraps past 2^64. */
	m.size = 4096;
	m.seg_offset = UINT64_MAX - 4095;
	assert_int_equal(DECODE_FIXED(IPC_DBUF_HOST, 0, m), -EBADMSG);
	m.seg_offset = UINT64_MAX - 4096;
	assert_int_equal(DECODE_FIXED(IPC_DBUF_HOST, 0, m), 0);
}

static void test_proto_marks_rejects_bad_fields(void **state)
{
	struct ipc_marks_offer m = { IPC_MARKS_PAGES - 1, 0 };

	assert_int_equal(DECODE_FIXED(IPC_MARKS, 1, m), 0);
	assert_int_equal(DECODE_FIXED(IPC_MARKS, 0, m), -EBADMSG);
	m.index = IPC_MARKS_PAGES;
	assert_int_equal(DECODE_FIXED(IPC_MARKS, 1, m), -EBADMSG);
	m.index = 0;
	m.flags = 1;
	assert_int_equal(DECODE_FIXED(IPC_MARKS, 1, m), -EBADMSG);
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
	struct ipc_copy m = { 1,    UINT64_MAX - 4096, 2, UINT64_MAX - 4096,
			      4096, IPC_COPY_TO_DBUF,  0, 0,
			      0 };

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

/* ---- DONE ---- */

static int done_decode(const struct ipc_done *m, size_t text_len)
{
	static char text[IPC_TEXT_MAX + 2];
	struct ipc_part part = { text, text_len };

	memset(text, 't', sizeof(text));
	return test_encode_decode(IPC_DONE, 0, m, sizeof(*m), &part, 1);
}

static void test_proto_done_rejects_bad_status(void **state)
{
	const int32_t good[] = { IPC_OK, IPC_E_INVAL, IPC_E_VERSION, IPC_STATUS_MIN };
	const int32_t bad[] = { 1, INT32_MAX, IPC_STATUS_MIN - 1, -1000, INT32_MIN };

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
	struct ipc_done m = { IPC_E_COMPILE, IPC_TEXT_MAX, 0, 0, 0 };

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
	struct ipc_done m = { IPC_E_COMPILE, 0, 0, 0, 0 };
	struct ipc_done_msg out;
	struct ipc_msg msg;
	int n;

	memset(text, 'L', sizeof(text) - 1);
	n = ipc_encode_done(test_msgbuf, sizeof(test_msgbuf), 1, &m, text);
	assert_int_equal(n, HDR + sizeof(m) + IPC_TEXT_MAX);
	assert_int_equal(test_parse(test_msgbuf, (size_t)n, 0, &msg), 0);
	assert_int_equal(ipc_decode_done(&msg, &out), 0);
	assert_int_equal(out.m.text_len, IPC_TEXT_MAX);
	assert_memory_equal(out.text, text, IPC_TEXT_MAX);
}

/* ---- STATUS ---- */

static int status_decode(const struct ipc_status *m, const struct ipc_dev_status *devs,
			 size_t ndevs)
{
	struct ipc_part part = { devs, ndevs * sizeof(*devs) };

	return test_encode_decode(IPC_STATUS, 0, m, sizeof(*m), &part, 1);
}

static void test_proto_status_rejects_bad_counts(void **state)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX + 1];
	struct ipc_status m = { .ndevices = 2, .count = 2, .loop = "io_uring" };

	for (unsigned i = 0; i < ARRAY_SIZE(devs); i++)
		devs[i] = test_good_dev_status(i % IPC_DEVICES_MAX);
	assert_int_equal(status_decode(&m, devs, 2), 0);
	assert_int_equal(status_decode(&m, devs, 1), -EBADMSG);
	assert_int_equal(status_decode(&m, devs, 3), -EBADMSG);
	/* A page must lie within the devices. */
	m.first = 1;
	assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);
	m.count = 1;
	assert_int_equal(status_decode(&m, devs, 1), 0);
	m.first = 3;
	m.count = 0;
	assert_int_equal(status_decode(&m, devs, 0), -EBADMSG);
	m.first = UINT32_MAX;
	m.count = 3;
	assert_int_equal(status_decode(&m, devs, 3), -EBADMSG);
	m.first = 0;
	m.ndevices = IPC_DEVICES_MAX + 1;
	m.count = 1;
	assert_int_equal(status_decode(&m, devs, 1), -EBADMSG);
	/* No more than a page's worth, however many there are. */
	m.ndevices = IPC_DEVICES_MAX;
	m.count = IPC_STATUS_PAGE_DEVS + 1;
	assert_int_equal(ipc_encode_status(test_msgbuf, sizeof(test_msgbuf), 1, &m, devs), -EINVAL);
	m.ndevices = UINT32_MAX;
	m.count = 0;
	assert_int_equal(status_decode(&m, devs, 0), -EBADMSG);
	/* 2^30 devices of 1456 bytes are 364 * 2^32 bytes: 0 in a 32-bit product. */
	m.ndevices = 1u << 30;
	m.count = 1u << 30;
	assert_int_equal(status_decode(&m, devs, 0), -EBADMSG);
}

static void test_proto_status_rejects_bad_strings(void **state)
{
	struct ipc_dev_status devs[2] = { test_good_dev_status(0), test_good_dev_status(1) };
	struct ipc_status m = { .ndevices = 2, .count = 2, .loop = "epoll" };

	memset(m.loop, 'x', sizeof(m.loop) - 1);
	assert_int_equal(status_decode(&m, devs, 2), 0);
	memset(m.loop, 'x', sizeof(m.loop));
	assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);
	memset(m.loop, 0, sizeof(m.loop));
	memset(m.version, 'x', sizeof(m.version));
	assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);
	memset(m.version, 0, sizeof(m.version));
	m.flags = 0x2;
	assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);
	m.flags = IPC_STATUS_STOPPING;
	assert_int_equal(status_decode(&m, devs, 2), 0);
	memset(devs[1].stats.driver, 'x', sizeof(devs[1].stats.driver));
	assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);
	devs[1] = test_good_dev_status(1);

	for (unsigned how = 0; spoil_info(&devs[1].info, how); how++) {
		assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);
		devs[1] = test_good_dev_status(1);
	}
	devs[1].state = 0;
	assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);
	devs[1].state = IPC_DEVICE_FAILED + 1;
	assert_int_equal(status_decode(&m, devs, 2), -EBADMSG);
}

/* ---- CLIENTS ---- */

static void test_proto_clients_req_rejects_flags(void **state)
{
	struct ipc_clients_req m = { .after = 5, .flags = 1 };

	assert_int_equal(DECODE_FIXED(IPC_CLIENTS_REQ, 0, m), -EBADMSG);
	m = (struct ipc_clients_req){ .after = 5, .reserved = 1 };
	assert_int_equal(DECODE_FIXED(IPC_CLIENTS_REQ, 0, m), -EBADMSG);
	m.reserved = 0;
	assert_int_equal(DECODE_FIXED(IPC_CLIENTS_REQ, 0, m), 0);
	assert_int_equal(DECODE_FIXED(IPC_CLIENTS_REQ, 1, m), -EBADMSG);
}

static int clients_decode(const struct ipc_clients *m, const struct ipc_client_info *rows, size_t n)
{
	struct ipc_part part = { rows, n * sizeof(*rows) };

	return test_encode_decode(IPC_CLIENTS, 0, m, sizeof(*m), &part, 1);
}

static void test_proto_clients_rejects_bad_pages(void **state)
{
	struct ipc_client_info rows[3] = { { .id = 1 }, { .id = 2 }, { .id = 3 } };
	struct ipc_clients m = { .total = 3, .count = 3 };

	assert_int_equal(clients_decode(&m, rows, 3), 0);
	/* The count and the rows that came agree, and lie within the total. */
	assert_int_equal(clients_decode(&m, rows, 2), -EBADMSG);
	m.count = 2;
	assert_int_equal(clients_decode(&m, rows, 3), -EBADMSG);
	m.total = 1;
	assert_int_equal(clients_decode(&m, rows, 2), -EBADMSG);
	m.total = m.count = (uint32_t)IPC_CLIENTS_PAGE + 1;
	assert_int_equal(clients_decode(&m, rows, 0), -EBADMSG);
	/* By id, each once, none 0. */
	m.total = m.count = 3;
	rows[2].id = 2;
	assert_int_equal(clients_decode(&m, rows, 3), -EBADMSG);
	rows[0].id = 0;
	rows[2].id = 3;
	assert_int_equal(clients_decode(&m, rows, 3), -EBADMSG);
	rows[0].id = 1;
	m.flags = 1;
	assert_int_equal(clients_decode(&m, rows, 3), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proto_hello_rejects_bad_fields),
		cmocka_unit_test(test_proto_welcome_rejects_bad_fields),
		cmocka_unit_test(test_proto_device_rejects_bad_fields),
		cmocka_unit_test(test_proto_ready_rejects_bad_info),
		cmocka_unit_test(test_proto_seg_add_rejects_bad_fields),
		cmocka_unit_test(test_proto_mod_load_rejects_bad_fields),
		cmocka_unit_test(test_proto_mod_load_rejects_bad_lengths),
		cmocka_unit_test(test_proto_mod_load_rejects_nul_in_options),
		cmocka_unit_test(test_proto_mod_load_extra_round_trips),
		cmocka_unit_test(test_proto_mod_load_rejects_bad_extra),
		cmocka_unit_test(test_proto_queue_rejects_bad_fields),
		cmocka_unit_test(test_proto_queue_config_rejects_bad_fields),
		cmocka_unit_test(test_proto_priority_policy_rejects_bad_levels),
		cmocka_unit_test(test_proto_status_req_rejects_flags),
		cmocka_unit_test(test_proto_drain_rejects_payload),
		cmocka_unit_test(test_proto_mod_info_rejects_bad_fields),
		cmocka_unit_test(test_proto_sym_req_rejects_bad_names),
		cmocka_unit_test(test_proto_symbol_answers_reject_bad_fields),
		cmocka_unit_test(test_proto_killed_rejects_bad_fields),
		cmocka_unit_test(test_proto_adopt_rejects_no_client),
		cmocka_unit_test(test_proto_channel_req_rejects_bad_fields),
		cmocka_unit_test(test_proto_dbuf_alloc_rejects_bad_fields),
		cmocka_unit_test(test_proto_dbuf_host_rejects_bad_fields),
		cmocka_unit_test(test_proto_marks_rejects_bad_fields),
		cmocka_unit_test(test_proto_dbuf_free_rejects_bad_shape),
		cmocka_unit_test(test_proto_copy_rejects_bad_fields),
		cmocka_unit_test(test_proto_copy_rejects_overflowing_ranges),
		cmocka_unit_test(test_proto_done_rejects_bad_status),
		cmocka_unit_test(test_proto_done_rejects_bad_text_len),
		cmocka_unit_test(test_proto_encode_done_cuts_long_text),
		cmocka_unit_test(test_proto_status_rejects_bad_counts),
		cmocka_unit_test(test_proto_status_rejects_bad_strings),
		cmocka_unit_test(test_proto_clients_req_rejects_flags),
		cmocka_unit_test(test_proto_clients_rejects_bad_pages),
	};

	return cmocka_run_group_tests_name("ipc-proto-decode", tests, NULL, NULL);
}
