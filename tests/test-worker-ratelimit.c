/* SPDX-License-Identifier: MIT */
/* tests/test-worker-ratelimit.c: how many log lines a user's clients may cause, on a clock of the test's. */
#include "helpers.h"
#include "macro.h"
#include "ratelimit.h"

#define WINDOW 1000u

/* Lines of key at time now, n of them: how many were let through; the count said by the
 * first let through in *ret_missed (-1 when none was). */
static unsigned lines(struct wrk_ratelimit *rl, uint32_t key, uint64_t now, unsigned n,
		      int64_t *ret_missed)
{
	unsigned through = 0;

	*ret_missed = -1;
	for (unsigned i = 0; i < n; i++) {
		int64_t r = wrk_ratelimit_take(rl, key, now);

		if (r >= 0 && through++ == 0)
			*ret_missed = r;
	}
	return through;
}

static void test_ratelimit_burst_then_count(void **state)
{
	struct wrk_ratelimit rl = WRK_RATELIMIT_INIT(WINDOW, 3);
	int64_t missed;

	assert_int_equal(lines(&rl, 42, 1, 100, &missed), 3);
	assert_int_equal(missed, 0);
	/* Still the same window: nothing. */
	assert_int_equal(lines(&rl, 42, WINDOW, 5, &missed), 0);
	/* The next window: a burst again, the first line saying how many were left out. */
	assert_int_equal(lines(&rl, 42, WINDOW + 1, 4, &missed), 3);
	assert_int_equal(missed, 97 + 5);
	assert_int_equal(lines(&rl, 42, 10 * WINDOW, 1, &missed), 1);
	assert_int_equal(missed, 1);
	assert_int_equal(lines(&rl, 42, 11 * WINDOW, 1, &missed), 1);
	assert_int_equal(missed, 0);
}

static void test_ratelimit_keys_apart(void **state)
{
	struct wrk_ratelimit rl = WRK_RATELIMIT_INIT(WINDOW, 2);
	int64_t missed;

	assert_int_equal(lines(&rl, 1, 1, 50, &missed), 2);
	/* Another user is not held back by the first one's flood. */
	assert_int_equal(lines(&rl, 2, 2, 2, &missed), 2);
	assert_int_equal(missed, 0);
	assert_int_equal(lines(&rl, 1, 3, 1, &missed), 0);
}

static void test_ratelimit_table_is_bounded(void **state)
{
	struct wrk_ratelimit rl = WRK_RATELIMIT_INIT(WINDOW, 1);
	int64_t missed;

	/* Key 0 floods first; then more keys than the table holds, in the same window. */
	assert_int_equal(lines(&rl, 0, 1, 10, &missed), 1);
	for (uint32_t k = 1; k <= WRK_RATELIMIT_KEYS; k++)
		assert_int_equal(lines(&rl, k, 1 + k, 2, &missed), 1);
	/* Key 0 kept its slot, and its count: its window has not ended. */
	assert_int_equal(lines(&rl, 0, 100, 1, &missed), 0);
	assert_int_equal(lines(&rl, 1, 101, 1, &missed), 0);
}

/* Sums what the lines let through said was left out before them. */
static uint64_t reported(struct wrk_ratelimit *rl, uint32_t first, uint32_t n, uint64_t now,
			 unsigned *ret_through)
{
	uint64_t sum = 0;

	*ret_through = 0;
	for (uint32_t k = first; k < first + n; k++) {
		int64_t r = wrk_ratelimit_take(rl, k, now);

		if (r >= 0) {
			sum += (uint64_t)r;
			(*ret_through)++;
		}
	}
	return sum;
}

/* Many keys taking turns in one window are held back together, and the count of what they
 * were refused comes with the next line let through. */
static void test_ratelimit_turns_are_limited(void **state)
{
	struct wrk_ratelimit rl = WRK_RATELIMIT_INIT(WINDOW, 1);
	unsigned through;

	assert_int_equal(reported(&rl, 1, WRK_RATELIMIT_KEYS, 1, &through), 0);
	assert_int_equal(through, WRK_RATELIMIT_KEYS);
	assert_int_equal(reported(&rl, 1000, 1000, 2, &through), 0);
	assert_int_equal(through, 1);
	/* A window later: each line let through first says what was refused before it. */
	assert_int_equal(reported(&rl, 5000, 1, WINDOW + 2, &through), 999);
	assert_int_equal(through, 1);
}

/* A key whose slot another takes once its window ended still has its lines counted. */
static void test_ratelimit_count_survives_eviction(void **state)
{
	struct wrk_ratelimit rl = WRK_RATELIMIT_INIT(WINDOW, 1);
	int64_t missed;
	unsigned through;

	assert_int_equal(lines(&rl, 0, 1, 10, &missed), 1);
	assert_int_equal(reported(&rl, 1, WRK_RATELIMIT_KEYS - 1, 2, &through), 0);
	/* All windows ended; new keys take every slot, key 0's among them. */
	assert_int_equal(reported(&rl, 100, WRK_RATELIMIT_KEYS, 10 * WINDOW, &through), 9);
	assert_int_equal(through, WRK_RATELIMIT_KEYS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ratelimit_burst_then_count),
		cmocka_unit_test(test_ratelimit_keys_apart),
		cmocka_unit_test(test_ratelimit_table_is_bounded),
		cmocka_unit_test(test_ratelimit_turns_are_limited),
		cmocka_unit_test(test_ratelimit_count_survives_eviction),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
