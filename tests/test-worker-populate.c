/* SPDX-License-Identifier: MIT */
/* tests/test-worker-populate.c: a segment's pages faulted in by chunks, by helper threads and the caller. */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "helpers.h"
#include "macro.h"
#include "populate.h"
#include "segment.h"

/* A fresh shared segment of `size`, as a client's: none of its pages exist yet. */
static uint8_t *segment(size_t size)
{
	int fd = -1;
	void *p = NULL;

	assert_int_equal(ipc_segment_create("test-populate", size, &fd), 0);
	assert_int_equal(ipc_segment_map(fd, size, true, &p), 0);
	(void)close(fd);
	return p;
}

/* The pages of [p, p + size) in memory. */
static size_t resident(const uint8_t *p, size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (size + page - 1) / page, in = 0;
	unsigned char *vec = calloc(n, 1);

	assert_non_null(vec);
	assert_int_equal(mincore((void *)p, size, vec), 0);
	for (size_t i = 0; i < n; i++)
		in += vec[i] & 1;
	free(vec);
	return in;
}

/* Every page of a segment is in once it returns, whatever its size against the chunks', with
 * helpers or without; pages around it are left alone. */
static void test_populate_every_page(void **state)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	const size_t sizes[] = {
		page,
		WRK_POPULATE_CHUNK - page,
		WRK_POPULATE_CHUNK,
		WRK_POPULATE_CHUNK + page,
		5 * WRK_POPULATE_CHUNK + 3 * page,
	};

	for (unsigned helpers = 0; helpers <= WRK_POPULATE_HELPERS; helpers += 3) {
		struct wrk_populate p;

		assert_int_equal(wrk_populate_start(&p, helpers), 0);
		for (unsigned i = 0; i < ARRAY_SIZE(sizes); i++) {
			size_t all = sizes[i] + 2 * page;
			uint8_t *seg = segment(all);

			assert_int_equal(resident(seg, all), 0);
			wrk_populate(&p, seg + page, sizes[i], i % 2 == 0);
			assert_int_equal(resident(seg, all), sizes[i] / page);
			assert_int_equal(resident(seg + page, sizes[i]), sizes[i] / page);
			(void)munmap(seg, all);
		}
		wrk_populate_stop(&p);
	}
}

/* A large segment is shared out: the helpers take chunks of it (the thread that asks would
 * manage alone, only slower). Tried on fresh segments until a helper took one. */
static void test_populate_helpers_take_chunks(void **state)
{
	const size_t size = 16 * (size_t)WRK_POPULATE_CHUNK;
	struct wrk_populate p;

	assert_int_equal(wrk_populate_start(&p, 2), 0);
	assert_int_equal(p.nthreads, 2);
	for (unsigned i = 0; i < 20 && p.helped == 0; i++) {
		uint8_t *seg = segment(size);

		wrk_populate(&p, seg, size, true);
		assert_int_equal(resident(seg, size), size / (size_t)sysconf(_SC_PAGESIZE));
		(void)munmap(seg, size);
	}
	assert_true(p.helped > 0);
	wrk_populate_stop(&p);
	assert_int_equal(p.nthreads, 0);
}

/* Without helpers, or once they stopped, the caller does it all. */
static void test_populate_alone_after_stop(void **state)
{
	const size_t size = 3 * (size_t)WRK_POPULATE_CHUNK;
	struct wrk_populate p;
	uint8_t *seg = segment(size);

	assert_int_equal(wrk_populate_start(&p, 1), 0);
	wrk_populate_stop(&p);
	wrk_populate(&p, seg, size, false);
	assert_int_equal(resident(seg, size), size / (size_t)sysconf(_SC_PAGESIZE));
	assert_int_equal(p.helped, 0);
	(void)munmap(seg, size);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_populate_every_page),
		cmocka_unit_test(test_populate_helpers_take_chunks),
		cmocka_unit_test(test_populate_alone_after_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
