/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-key.c: XXH3-128 content keys: known answers, framing, order and hex form. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "key.h"
#include "macro.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

static void assert_key_hex(struct ipc_key k, const char *hex)
{
	char out[IPC_KEY_HEX_LEN + 1];

	ipc_key_hex(k, out);
	assert_string_equal(out, hex);
}

/* The hash of len and data, framed as ipc_key_add() frames one part. */
static struct ipc_key framed(const void *data, size_t len)
{
	uint8_t *buf = malloc(sizeof(uint64_t) + len + 1);
	uint64_t n = len;
	struct ipc_key k;

	assert_non_null(buf);
	memcpy(buf, &n, sizeof(n));
	if (len)
		memcpy(buf + sizeof(n), data, len);
	k = ipc_key_of(buf, sizeof(n) + len);
	free(buf);
	return k;
}

static void test_key_known_answers(void **state)
{
	/* What `printf %s STRING | xxhsum -H2` prints (xxHash 0.8): answers from outside gpux. */
	static const struct {
		const char *in, *hex;
	} known[] = {
		{ "", "99aa06d3014798d86001c324468d497f" },
		{ "a", "a96faf705af16834e6c632b61e964e1f" },
		{ "abc", "06b05ab6733a618578af5f94892f3950" },
		{ "hello world", "df8d09e93f874900a99b8775cc15b6c7" },
		{ "The quick brown fox jumps over the lazy dog",
		  "ddd650205ca3e7fa24a1cc2e3a8a7651" },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(known); i++)
		assert_key_hex(ipc_key_of(known[i].in, strlen(known[i].in)), known[i].hex);
}

static void test_key_of_matches_xxh3_128(void **state)
{
	static uint8_t buf[100000];
	const size_t long_lens[] = { 1024, 4096, 65536, sizeof(buf) };

	test_random_fill(buf, sizeof(buf), 42);
	/* Every size class of XXH3 (0, 1-3, 4-8, 9-16, 17-128, 129-240, longer), both halves. */
	for (size_t len = 0; len <= 300; len++) {
		XXH128_hash_t h = XXH3_128bits(buf, len);
		struct ipc_key k = ipc_key_of(buf, len);

		assert_int_equal(k.lo, h.low64);
		assert_int_equal(k.hi, h.high64);
	}
	for (unsigned i = 0; i < ARRAY_SIZE(long_lens); i++) {
		XXH128_hash_t h = XXH3_128bits(buf, long_lens[i]);
		struct ipc_key k = ipc_key_of(buf, long_lens[i]);

		assert_int_equal(k.lo, h.low64);
		assert_int_equal(k.hi, h.high64);
	}
}

static struct ipc_key key_of_parts(const char *a, const char *b)
{
	struct ipc_key_state s;

	assert_int_equal(ipc_key_begin(&s), 0);
	ipc_key_add(&s, a, strlen(a));
	ipc_key_add(&s, b, strlen(b));
	return ipc_key_end(&s);
}

static void test_key_add_frames_each_part(void **state)
{
	struct ipc_key ab_c = key_of_parts("ab", "c");
	struct ipc_key a_bc = key_of_parts("a", "bc");
	struct ipc_key abc_ = key_of_parts("abc", "");
	uint8_t wire[2 * sizeof(uint64_t) + 3];
	uint64_t two = 2, one = 1;

	assert_false(ipc_key_equal(ab_c, a_bc));
	assert_false(ipc_key_equal(ab_c, abc_));
	assert_false(ipc_key_equal(a_bc, abc_));
	assert_false(ipc_key_equal(ab_c, ipc_key_of("abc", 3)));
	assert_true(ipc_key_equal(ab_c, key_of_parts("ab", "c")));

	/* Exactly: each part is its 64-bit length, then its bytes. */
	memcpy(wire, &two, 8);
	memcpy(wire + 8, "ab", 2);
	memcpy(wire + 10, &one, 8);
	memcpy(wire + 18, "c", 1);
	assert_true(ipc_key_equal(ab_c, ipc_key_of(wire, sizeof(wire))));
}

static void test_key_incremental_matches_one_shot(void **state)
{
	static uint8_t buf[100000];
	const size_t lens[] = {
		0, 1, 3, 8, 16, 128, 232, 240, 241, 1024, 1025, 65536, sizeof(buf)
	};

	test_random_fill(buf, sizeof(buf), 7);
	for (unsigned i = 0; i < ARRAY_SIZE(lens); i++) {
		struct ipc_key_state s;

		assert_int_equal(ipc_key_begin(&s), 0);
		ipc_key_add(&s, lens[i] ? buf : NULL, lens[i]);
		assert_true(ipc_key_equal(ipc_key_end(&s), framed(buf, lens[i])));
		assert_null(s.xxh);
	}
}

static void test_key_add_u64(void **state)
{
	const uint64_t values[] = { 0, 1, 0x0123456789abcdefull, UINT64_MAX };

	for (unsigned i = 0; i < ARRAY_SIZE(values); i++) {
		struct ipc_key_state s;

		assert_int_equal(ipc_key_begin(&s), 0);
		ipc_key_add_u64(&s, values[i]);
		assert_true(ipc_key_equal(ipc_key_end(&s), ipc_key_of(&values[i], 8)));
	}
}

static void test_key_abort_frees_state(void **state)
{
	struct ipc_key_state s;

	assert_int_equal(ipc_key_begin(&s), 0);
	ipc_key_add(&s, "data", 4);
	ipc_key_abort(&s);
	assert_null(s.xxh);
}

static void test_key_equal_and_cmp(void **state)
{
	const struct ipc_key a = { .lo = 5, .hi = 1 };
	const struct ipc_key b = { .lo = 1, .hi = 2 };
	const struct ipc_key c = { .lo = 6, .hi = 1 };
	const struct ipc_key top = { .lo = UINT64_MAX, .hi = UINT64_MAX };

	assert_true(ipc_key_equal(a, a));
	assert_false(ipc_key_equal(a, b));
	assert_false(ipc_key_equal(a, (struct ipc_key){ .lo = 5, .hi = 2 }));
	assert_false(ipc_key_equal(a, (struct ipc_key){ .lo = 4, .hi = 1 }));
	assert_int_equal(ipc_key_cmp(a, a), 0);
	/* The high half decides first, as in the hex form. */
	assert_int_equal(ipc_key_cmp(a, b), -1);
	assert_int_equal(ipc_key_cmp(b, a), 1);
	assert_int_equal(ipc_key_cmp(a, c), -1);
	assert_int_equal(ipc_key_cmp(c, a), 1);
	assert_int_equal(ipc_key_cmp(top, a), 1);
	assert_int_equal(ipc_key_cmp((struct ipc_key){ 0, 0 }, a), -1);
}

static void test_key_cmp_orders_like_hex(void **state)
{
	for (uint64_t i = 0; i < 200; i++) {
		struct ipc_key k[2];
		char h0[IPC_KEY_HEX_LEN + 1], h1[IPC_KEY_HEX_LEN + 1];
		int c, s;

		test_random_fill(k, sizeof(k), i);
		if (i % 3 == 0)
			k[1].hi = k[0].hi;
		ipc_key_hex(k[0], h0);
		ipc_key_hex(k[1], h1);
		c = ipc_key_cmp(k[0], k[1]);
		s = strcmp(h0, h1);
		assert_int_equal(c, s < 0 ? -1 : s > 0 ? 1 : 0);
	}
}

static void test_key_hex_round_trips(void **state)
{
	const struct ipc_key fixed[] = {
		{ 0, 0 },
		{ UINT64_MAX, UINT64_MAX },
		{ .lo = 0x0123456789abcdefull, .hi = 0xfedcba9876543210ull },
	};

	assert_key_hex(fixed[0], "00000000000000000000000000000000");
	assert_key_hex(fixed[1], "ffffffffffffffffffffffffffffffff");
	assert_key_hex(fixed[2], "fedcba98765432100123456789abcdef");
	for (uint64_t i = 0; i < 100 + ARRAY_SIZE(fixed); i++) {
		struct ipc_key k, back;
		char hex[IPC_KEY_HEX_LEN + 1];

		if (i < ARRAY_SIZE(fixed))
			k = fixed[i];
		else
			test_random_fill(&k, sizeof(k), i);
		ipc_key_hex(k, hex);
		assert_int_equal(strlen(hex), IPC_KEY_HEX_LEN);
		assert_int_equal(ipc_key_from_hex(hex, &back), 0);
		assert_true(ipc_key_equal(k, back));
	}
}

static void test_key_from_hex_accepts_upper_case(void **state)
{
	struct ipc_key k;

	assert_int_equal(ipc_key_from_hex("FEDCBA98765432100123456789ABCDEF", &k), 0);
	assert_int_equal(k.hi, 0xfedcba9876543210ull);
	assert_int_equal(k.lo, 0x0123456789abcdefull);
}

static void test_key_from_hex_rejects_bad_length(void **state)
{
	const char *bad[] = {
		"",
		"0",
		"0123456789abcdef0123456789abcde",
		"0123456789abcdef0123456789abcdef0",
		"0123456789abcdef0123456789abcdef\n",
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	};

	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		struct ipc_key k = { 7, 7 };

		assert_int_equal(ipc_key_from_hex(bad[i], &k), -EINVAL);
		assert_int_equal(k.lo, 7);
		assert_int_equal(k.hi, 7);
	}
}

static void test_key_from_hex_rejects_bad_digits(void **state)
{
	const char bad[] = {
		'g', 'G', 'x', ' ', '-', '+', '.', '/', ':', '@', '`', '\x7f', '\xff'
	};
	struct ipc_key k;

	for (unsigned pos = 0; pos < IPC_KEY_HEX_LEN; pos++) {
		for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
			char hex[] = "0123456789abcdef0123456789abcdef";

			k = (struct ipc_key){ 7, 7 };
			hex[pos] = bad[i];
			assert_int_equal(ipc_key_from_hex(hex, &k), -EINVAL);
			assert_int_equal(k.lo, 7);
			assert_int_equal(k.hi, 7);
		}
	}
	assert_int_equal(ipc_key_from_hex("0x23456789abcdef0123456789abcdef", &k), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_known_answers),
		cmocka_unit_test(test_key_of_matches_xxh3_128),
		cmocka_unit_test(test_key_add_frames_each_part),
		cmocka_unit_test(test_key_incremental_matches_one_shot),
		cmocka_unit_test(test_key_add_u64),
		cmocka_unit_test(test_key_abort_frees_state),
		cmocka_unit_test(test_key_equal_and_cmp),
		cmocka_unit_test(test_key_cmp_orders_like_hex),
		cmocka_unit_test(test_key_hex_round_trips),
		cmocka_unit_test(test_key_from_hex_accepts_upper_case),
		cmocka_unit_test(test_key_from_hex_rejects_bad_length),
		cmocka_unit_test(test_key_from_hex_rejects_bad_digits),
	};

	return cmocka_run_group_tests_name("ipc-key", tests, NULL, NULL);
}
