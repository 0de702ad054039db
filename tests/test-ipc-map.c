/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-map.c: the id → pointer hash map: probing, growth, backward-shift deletion. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "macro.h"
#include "map.h"

#define MANY 100000u

/* Values are addresses in here: slot i stands for entry i of a test's reference arrays. */
static char slots[MANY];

static void *val_of(size_t i)
{
	return &slots[i];
}

static size_t index_of(const void *val)
{
	return (size_t)((const char *)val - slots);
}

/*
 * calloc() for the whole program, so that a test can make the map's allocations fail: once
 * calloc_fail_in further calls have succeeded, the next one fails (once). It allocates with
 * reallocarray(), which the real free() pairs with, under the sanitizers too; not with
 * malloc(), which the compiler would fuse with the memset() into a call to calloc(): this one.
 */
static long calloc_fail_in = -1;

void *calloc(size_t n, size_t size)
{
	void *p;

	if (calloc_fail_in == 0) {
		calloc_fail_in = -1;
		errno = ENOMEM;
		return NULL;
	}
	if (calloc_fail_in > 0)
		calloc_fail_in--;
	p = reallocarray(NULL, n, size);
	if (p)
		memset(p, 0, n * size);
	return p;
}

static void shuffle(size_t *order, size_t n, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	for (size_t i = n; i > 1; i--) {
		size_t j = test_random_next(seed) % i, t = order[i - 1];

		order[i - 1] = order[j];
		order[j] = t;
	}
}

/* Put keys[0..n) with values val_of(i); the keys must be distinct. */
static void put_all(struct ipc_map *m, const uint64_t *keys, size_t n)
{
	for (size_t i = 0; i < n; i++)
		assert_int_equal(ipc_map_put(m, keys[i], val_of(i)), 0);
	assert_int_equal(ipc_map_size(m), n);
}

/* Every key still present maps to its own value, and every removed one is gone. */
static void check_against(const struct ipc_map *m, const uint64_t *keys, const bool *present,
			  size_t n)
{
	size_t count = 0;

	for (size_t i = 0; i < n; i++) {
		if (present[i]) {
			assert_ptr_equal(ipc_map_get(m, keys[i]), val_of(i));
			count++;
		} else {
			assert_null(ipc_map_get(m, keys[i]));
		}
	}
	assert_int_equal(ipc_map_size(m), count);
}

/* Remove keys[0..n) in a random order, checking every other key after each removal. */
static void remove_all_checked(struct ipc_map *m, const uint64_t *keys, size_t n, uint64_t seed)
{
	size_t *order = malloc(n * sizeof(*order));
	bool *present = malloc(n * sizeof(*present));

	assert_non_null(order);
	assert_non_null(present);
	for (size_t i = 0; i < n; i++)
		present[i] = true;
	shuffle(order, n, &seed);
	check_against(m, keys, present, n);
	for (size_t k = 0; k < n; k++) {
		size_t i = order[k];

		assert_ptr_equal(ipc_map_remove(m, keys[i]), val_of(i));
		present[i] = false;
		assert_null(ipc_map_remove(m, keys[i]));
		check_against(m, keys, present, n);
	}
	assert_int_equal(ipc_map_size(m), 0);
	free(present);
	free(order);
}

/* n pseudo-random keys, distinct: splitmix64 gives no value twice in one sequence. */
static uint64_t *random_keys(size_t n, uint64_t seed)
{
	uint64_t *keys = malloc(n * sizeof(*keys));

	assert_non_null(keys);
	for (size_t i = 0; i < n; i++)
		keys[i] = test_random_next(&seed);
	return keys;
}

static void test_map_empty(void **state)
{
	struct ipc_map m = IPC_MAP_INIT;
	uint64_t key = 7;
	void *val = &key;
	size_t it = 0;

	assert_int_equal(ipc_map_size(&m), 0);
	assert_null(ipc_map_get(&m, 0));
	assert_null(ipc_map_get(&m, 1));
	assert_null(ipc_map_remove(&m, 1));
	assert_null(ipc_map_pop(&m));
	assert_false(ipc_map_next(&m, &it, &key, &val));
	/* Nothing found: the out-parameters are not touched. */
	assert_int_equal(key, 7);
	assert_ptr_equal(val, &key);
	ipc_map_done(&m);
	ipc_map_done(&m);
	assert_null(m.keys);
	assert_null(m.vals);
	assert_int_equal(m.cap, 0);
}

static void test_map_put_get_remove(void **state)
{
	struct ipc_map m = IPC_MAP_INIT;

	assert_int_equal(ipc_map_put(&m, 10, val_of(0)), 0);
	assert_int_equal(ipc_map_put(&m, 20, val_of(1)), 0);
	assert_int_equal(ipc_map_put(&m, 30, val_of(2)), 0);
	assert_int_equal(ipc_map_size(&m), 3);
	assert_ptr_equal(ipc_map_get(&m, 10), val_of(0));
	assert_ptr_equal(ipc_map_get(&m, 20), val_of(1));
	assert_ptr_equal(ipc_map_get(&m, 30), val_of(2));
	assert_null(ipc_map_get(&m, 40));

	assert_ptr_equal(ipc_map_remove(&m, 20), val_of(1));
	assert_int_equal(ipc_map_size(&m), 2);
	assert_null(ipc_map_get(&m, 20));
	assert_null(ipc_map_remove(&m, 20));
	assert_null(ipc_map_remove(&m, 40));
	assert_int_equal(ipc_map_size(&m), 2);
	assert_ptr_equal(ipc_map_get(&m, 10), val_of(0));
	assert_ptr_equal(ipc_map_get(&m, 30), val_of(2));

	/* A removed key can come back, with another value. */
	assert_int_equal(ipc_map_put(&m, 20, val_of(5)), 0);
	assert_ptr_equal(ipc_map_get(&m, 20), val_of(5));
	assert_int_equal(ipc_map_size(&m), 3);
	ipc_map_done(&m);
	assert_int_equal(ipc_map_size(&m), 0);
}

static void test_map_put_duplicate_is_eexist(void **state)
{
	struct ipc_map m = IPC_MAP_INIT;

	assert_int_equal(ipc_map_put(&m, 5, val_of(0)), 0);
	assert_int_equal(ipc_map_put(&m, 5, val_of(1)), -EEXIST);
	assert_int_equal(ipc_map_put(&m, 5, val_of(0)), -EEXIST);
	assert_ptr_equal(ipc_map_get(&m, 5), val_of(0));
	assert_int_equal(ipc_map_size(&m), 1);

	/* Also when the duplicate would be the put that makes the table grow. */
	for (uint64_t k = 100; ipc_map_size(&m) < 12; k++)
		assert_int_equal(ipc_map_put(&m, k, val_of(k)), 0);
	assert_int_equal(m.cap, 16);
	assert_int_equal(ipc_map_put(&m, 5, val_of(1)), -EEXIST);
	assert_int_equal(m.cap, 16);
	assert_int_equal(ipc_map_size(&m), 12);
	assert_ptr_equal(ipc_map_get(&m, 5), val_of(0));
	ipc_map_done(&m);
}

static void test_map_extreme_keys(void **state)
{
	static const uint64_t keys[] = { 0, 1, UINT64_MAX, UINT64_MAX - 1, INT64_MAX, 1ull << 63 };
	struct ipc_map m = IPC_MAP_INIT;

	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		assert_null(ipc_map_get(&m, keys[i]));
		assert_int_equal(ipc_map_put(&m, keys[i], val_of(i)), 0);
		assert_int_equal(ipc_map_put(&m, keys[i], val_of(i)), -EEXIST);
	}
	remove_all_checked(&m, keys, ARRAY_SIZE(keys), 1);

	/* 0 alone, in an emptied table whose free slots hold key 0 too: not taken for it. */
	assert_int_equal(m.cap, 16);
	assert_null(ipc_map_get(&m, 0));
	assert_int_equal(ipc_map_put(&m, 0, val_of(0)), 0);
	assert_ptr_equal(ipc_map_get(&m, 0), val_of(0));
	assert_ptr_equal(ipc_map_remove(&m, 0), val_of(0));
	assert_null(ipc_map_get(&m, 0));
	ipc_map_done(&m);
}

static void test_map_grows_to_many_keys(void **state)
{
	uint64_t *keys = random_keys(MANY, 42);
	struct ipc_map m = IPC_MAP_INIT;
	bool *present = malloc(MANY * sizeof(*present));
	uint64_t seed = 4242;

	assert_non_null(present);
	for (size_t i = 0; i < MANY; i++) {
		assert_int_equal(ipc_map_put(&m, keys[i], val_of(i)), 0);
		present[i] = true;
		/* Across each resize: everything put so far is still there. */
		if ((i & (i + 1)) == 0)
			check_against(&m, keys, present, i + 1);
	}
	check_against(&m, keys, present, MANY);
	/* The load stays under 3/4. */
	assert_true(m.cap * 3 >= MANY * 4);
	for (size_t i = 0; i < 1000; i++) {
		uint64_t k = test_random_next(&seed);

		assert_null(ipc_map_get(&m, k));
	}

	/* Remove every other key, then check the rest. */
	for (size_t i = 0; i < MANY; i += 2) {
		assert_ptr_equal(ipc_map_remove(&m, keys[i]), val_of(i));
		present[i] = false;
	}
	check_against(&m, keys, present, MANY);
	/* And put them back. */
	for (size_t i = 0; i < MANY; i += 2) {
		assert_int_equal(ipc_map_put(&m, keys[i], val_of(i)), 0);
		present[i] = true;
	}
	check_against(&m, keys, present, MANY);
	ipc_map_done(&m);
	free(present);
	free(keys);
}

static void test_map_remove_random_order_keeps_others(void **state)
{
	uint64_t seed = 7;

	/* Small tables, mostly: long probe runs that wrap around the end, at every load. */
	for (unsigned trial = 0; trial < 4000; trial++) {
		size_t n = 1 + test_random_next(&seed) % 48;
		uint64_t *keys = random_keys(n, test_random_next(&seed));
		struct ipc_map m = IPC_MAP_INIT;

		put_all(&m, keys, n);
		remove_all_checked(&m, keys, n, test_random_next(&seed));
		ipc_map_done(&m);
		free(keys);
	}

	/* One larger table. */
	{
		uint64_t *keys = random_keys(3000, 3);
		struct ipc_map m = IPC_MAP_INIT;

		put_all(&m, keys, 3000);
		remove_all_checked(&m, keys, 3000, 5);
		ipc_map_done(&m);
		free(keys);
	}
}

/* Put key as entry *n unless it is there already. */
static void put_new(struct ipc_map *m, uint64_t *keys, size_t *n, uint64_t key)
{
	if (ipc_map_get(m, key))
		return;
	assert_int_equal(ipc_map_put(m, key, val_of(*n)), 0);
	keys[(*n)++] = key;
}

static void test_map_keys_colliding_in_low_bits(void **state)
{
	static const unsigned shifts[] = { 16, 20, 32, 40, 48, 56 };
	uint64_t *keys = malloc((ARRAY_SIZE(shifts) * 256 + 2) * sizeof(*keys));
	struct ipc_map m = IPC_MAP_INIT;
	size_t n = 0;

	/* Multiples of large powers of two: equal in their low bits, the ones a table indexes by
	 * when the hash does not mix high bits down. */
	assert_non_null(keys);
	for (size_t s = 0; s < ARRAY_SIZE(shifts); s++)
		for (uint64_t k = 1; k <= 256; k++)
			put_new(&m, keys, &n, k << shifts[s]);
	put_new(&m, keys, &n, 1ull << 63);
	put_new(&m, keys, &n, 0);
	assert_int_equal(ipc_map_size(&m), n);
	remove_all_checked(&m, keys, n, 11);
	ipc_map_done(&m);
	free(keys);
}

static void test_map_iterate_visits_each_once(void **state)
{
	const size_t n = 5000;
	uint64_t *keys = random_keys(n, 9);
	unsigned *seen = calloc(n, sizeof(*seen));
	struct ipc_map m = IPC_MAP_INIT;
	size_t visited = 0, it = 0;
	uint64_t key;
	void *val;

	assert_non_null(seen);
	put_all(&m, keys, n);
	/* Remove some first: iteration must not trip over the holes deletion leaves. */
	for (size_t i = 0; i < n; i += 3) {
		assert_ptr_equal(ipc_map_remove(&m, keys[i]), val_of(i));
		seen[i] = 1;
	}
	for (it = 0; ipc_map_next(&m, &it, &key, &val);) {
		size_t i = index_of(val);

		assert_true(i < n);
		assert_int_equal(key, keys[i]);
		assert_int_equal(seen[i], 0);
		seen[i]++;
		visited++;
	}
	assert_int_equal(visited, ipc_map_size(&m));
	for (size_t i = 0; i < n; i++)
		assert_int_equal(seen[i], 1);
	/* Past the end it stays at the end. */
	assert_false(ipc_map_next(&m, &it, &key, &val));

	/* The out-parameters are optional. */
	visited = 0;
	for (it = 0; ipc_map_next(&m, &it, NULL, NULL);)
		visited++;
	assert_int_equal(visited, ipc_map_size(&m));
	ipc_map_done(&m);
	free(seen);
	free(keys);
}

static void test_map_pop_drains(void **state)
{
	const size_t n = 2000;
	uint64_t *keys = random_keys(n, 13);
	bool *present = malloc(n * sizeof(*present));
	struct ipc_map m = IPC_MAP_INIT;
	void *val;

	assert_non_null(present);
	put_all(&m, keys, n);
	for (size_t i = 0; i < n; i++)
		present[i] = true;
	while ((val = ipc_map_pop(&m))) {
		size_t i = index_of(val);

		assert_true(i < n);
		assert_true(present[i]);
		present[i] = false;
		/* What stays is still found after each backward shift. */
		if (ipc_map_size(&m) % 97 == 0)
			check_against(&m, keys, present, n);
	}
	for (size_t i = 0; i < n; i++)
		assert_false(present[i]);
	check_against(&m, keys, present, n);
	assert_null(ipc_map_pop(&m));

	/* Drained, the map is as good as new. */
	put_all(&m, keys, 10);
	ipc_map_done(&m);
	free(present);
	free(keys);
}

static void test_map_done_resets(void **state)
{
	struct ipc_map m = IPC_MAP_INIT;

	for (uint64_t k = 0; k < 100; k++)
		assert_int_equal(ipc_map_put(&m, k, val_of(k)), 0);
	ipc_map_done(&m);
	assert_null(m.keys);
	assert_null(m.vals);
	assert_int_equal(m.cap, 0);
	assert_int_equal(ipc_map_size(&m), 0);
	assert_null(ipc_map_get(&m, 5));
	/* Usable again, and done again. */
	assert_int_equal(ipc_map_put(&m, 5, val_of(5)), 0);
	assert_ptr_equal(ipc_map_get(&m, 5), val_of(5));
	ipc_map_done(&m);
	ipc_map_done(&m);
}

static void test_map_put_out_of_memory(void **state)
{
	struct ipc_map m = IPC_MAP_INIT;
	uint64_t keys[13];
	bool present[13];

	/* The first put allocates the table: its keys, then its values. */
	for (long fail_in = 0; fail_in < 2; fail_in++) {
		calloc_fail_in = fail_in;
		assert_int_equal(ipc_map_put(&m, 1, val_of(1)), -ENOMEM);
		calloc_fail_in = -1;
		assert_int_equal(ipc_map_size(&m), 0);
		assert_null(ipc_map_get(&m, 1));
		assert_null(m.keys);
		assert_null(m.vals);
	}

	/* A full table that cannot grow keeps what it had. */
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		keys[i] = i * 1000;
		present[i] = i < 12;
	}
	put_all(&m, keys, 12);
	assert_int_equal(m.cap, 16);
	for (long fail_in = 0; fail_in < 2; fail_in++) {
		calloc_fail_in = fail_in;
		assert_int_equal(ipc_map_put(&m, keys[12], val_of(12)), -ENOMEM);
		calloc_fail_in = -1;
		assert_int_equal(m.cap, 16);
		check_against(&m, keys, present, ARRAY_SIZE(keys));
	}
	/* A duplicate is found before any allocation. */
	calloc_fail_in = 0;
	assert_int_equal(ipc_map_put(&m, keys[3], val_of(3)), -EEXIST);
	assert_int_equal(calloc_fail_in, 0);
	calloc_fail_in = -1;
	/* And once memory is back, the put works. */
	assert_int_equal(ipc_map_put(&m, keys[12], val_of(12)), 0);
	present[12] = true;
	assert_int_equal(m.cap, 32);
	check_against(&m, keys, present, ARRAY_SIZE(keys));
	ipc_map_done(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_map_empty),
		cmocka_unit_test(test_map_put_get_remove),
		cmocka_unit_test(test_map_put_duplicate_is_eexist),
		cmocka_unit_test(test_map_extreme_keys),
		cmocka_unit_test(test_map_grows_to_many_keys),
		cmocka_unit_test(test_map_remove_random_order_keeps_others),
		cmocka_unit_test(test_map_keys_colliding_in_low_bits),
		cmocka_unit_test(test_map_iterate_visits_each_once),
		cmocka_unit_test(test_map_pop_drains),
		cmocka_unit_test(test_map_done_resets),
		cmocka_unit_test(test_map_put_out_of_memory),
	};

	return cmocka_run_group_tests_name("ipc-map", tests, NULL, NULL);
}
