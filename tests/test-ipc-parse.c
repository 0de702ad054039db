/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-parse.c: numbers from the daemons' command lines. */
#include <errno.h>

#include "helpers.h"
#include "macro.h"
#include "parse.h"

struct number {
	const char *s;
	int base;
	uint64_t want;
};

static void test_parse_u64_reads_whole_numbers(void **state)
{
	/* clang-format off */
	static const struct number good[] = {
		{ "0", 10, 0 },
		{ "42", 10, 42 },
		{ "18446744073709551615", 10, UINT64_MAX },
		{ "600", 8, 0600 },
		{ "0660", 8, 0660 },
	};
	/* clang-format on */

	for (unsigned i = 0; i < ARRAY_SIZE(good); i++) {
		uint64_t v = 7;

		assert_int_equal(ipc_parse_u64(good[i].s, good[i].base, &v), 0);
		assert_int_equal(v, good[i].want);
	}
}

static void test_parse_u64_rejects_the_rest(void **state)
{
	static const struct number bad[] = {
		{ "", 10, 0 },
		{ "12x", 10, 0 },
		{ "12 ", 10, 0 },
		{ "x12", 10, 0 },
		{ "18446744073709551616", 10, 0 },
		{ "8", 8, 0 },
		{ "0x10", 10, 0 },
		{ "-1", 10, 0 },
		{ "+1", 10, 0 },
		{ " 12", 10, 0 },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		uint64_t v = 7;

		assert_int_equal(ipc_parse_u64(bad[i].s, bad[i].base, &v), -EINVAL);
		/* Written only on success. */
		assert_int_equal(v, 7);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_u64_reads_whole_numbers),
		cmocka_unit_test(test_parse_u64_rejects_the_rest),
	};

	return cmocka_run_group_tests_name("ipc-parse", tests, NULL, NULL);
}
