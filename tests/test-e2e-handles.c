/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-handles.c: freed and mistyped handles are refused, not used. */
#include <stdlib.h>
#include <string.h>

#include "e2e.h"
#include "helpers.h"

static const struct gpux_launch one = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };

/* add1 over one float of b (into b's second float). */
static gpux_status add1(struct test_env *e, gpux_buf *b)
{
	uint64_t n = 1;
	struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(b, 0, 4), gpux_arg_out(b, 4, 4) };

	return gpux_run(e->m, "add1", &one, args, 3);
}

static void test_e2e_handles_freed_buffer(void **state)
{
	struct test_env *e = *state;
	gpux_buf *b, *other;
	gpux_dbuf *d;
	gpux_req *r = NULL;
	uint64_t off = 77;
	int fd = -77;

	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &other), GPUX_OK);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, 64, &d), GPUX_OK);
	assert_int_equal(add1(e, b), GPUX_OK);
	gpux_buf_free(b);
	gpux_buf_free(b);
	assert_null(gpux_buf_data(b));
	assert_int_equal(gpux_buf_size(b), 0);
	assert_int_equal(gpux_buf_freeze(b), GPUX_E_INVAL);
	assert_int_equal(gpux_buf_fd(b, &fd, &off), GPUX_E_INVAL);
	assert_int_equal(fd, -77);
	assert_int_equal(off, 77);
	assert_int_equal(add1(e, b), GPUX_E_INVAL);
	assert_int_equal(gpux_dbuf_write(d, 0, b, 0, 16, NULL, &r), GPUX_E_INVAL);
	assert_int_equal(gpux_dbuf_read(b, 0, d, 0, 16, NULL, &r), GPUX_E_INVAL);
	assert_null(r);
	/* What was allocated after it is not disturbed. */
	assert_int_equal(add1(e, other), GPUX_OK);
	gpux_dbuf_free(d);
	gpux_buf_free(other);
	test_env_still_serves(e);
}

static void test_e2e_handles_freed_request(void **state)
{
	struct test_env *e = *state;
	struct gpux_times t;
	gpux_req *r;

	assert_int_equal(gpux_submit(e->m, "empty", &one, NULL, 0, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);
	gpux_req_free(r);
	assert_int_equal(gpux_wait(r, -1), GPUX_E_INVAL);
	assert_int_equal(gpux_test(r), GPUX_E_INVAL);
	assert_string_equal(gpux_req_message(r), "");
	assert_int_equal(gpux_req_times(r, &t), GPUX_E_INVAL);
	assert_int_equal(gpux_req_device(r), GPUX_ANY);
	/* Freed while still running: it is waited for, once. */
	assert_int_equal(gpux_submit(e->m, "empty", &one, NULL, 0, &r), GPUX_OK);
	gpux_req_free(r);
	gpux_req_free(r);
	test_env_still_serves(e);
}

static void test_e2e_handles_freed_module_and_queue(void **state)
{
	struct test_env *e = *state;
	gpux_module *m = test_load_host_kernels(e->ctx);
	struct gpux_launch l = one;
	gpux_queue *q;
	gpux_req *r = NULL;

	gpux_module_free(m);
	gpux_module_free(m);
	assert_int_equal(gpux_submit(m, "empty", &one, NULL, 0, &r), GPUX_E_INVAL);
	assert_int_equal(gpux_run(m, "empty", &one, NULL, 0), GPUX_E_INVAL);

	assert_int_equal(gpux_queue_open(e->ctx, 0, &q), GPUX_OK);
	l.queue = q;
	assert_int_equal(gpux_run(e->m, "empty", &l, NULL, 0), GPUX_OK);
	gpux_queue_free(q);
	gpux_queue_free(q);
	assert_int_equal(gpux_submit(e->m, "empty", &l, NULL, 0, &r), GPUX_E_INVAL);
	assert_null(r);
	test_env_still_serves(e);
}

static void test_e2e_handles_freed_device_buffer(void **state)
{
	struct test_env *e = *state;
	gpux_dbuf *d;
	gpux_buf *b;
	gpux_req *r = NULL;
	struct gpux_arg arg;

	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, 64, &d), GPUX_OK);
	gpux_dbuf_free(d);
	gpux_dbuf_free(d);
	assert_int_equal(gpux_dbuf_size(d), 0);
	assert_int_equal(gpux_dbuf_device(d), GPUX_ANY);
	assert_int_equal(gpux_dbuf_write(d, 0, b, 0, 16, NULL, &r), GPUX_E_INVAL);
	assert_int_equal(gpux_dbuf_read(b, 0, d, 0, 16, NULL, &r), GPUX_E_INVAL);
	arg = gpux_arg_dbuf(d, 0, 16);
	assert_int_equal(gpux_submit(e->m, "empty", &one, &arg, 1, &r), GPUX_E_INVAL);
	assert_null(r);
	gpux_buf_free(b);
	test_env_still_serves(e);
}

/* A handle of one type given where another is expected is refused too. */
static void test_e2e_handles_wrong_type(void **state)
{
	struct test_env *e = *state;
	gpux_buf *b;
	gpux_req *r;

	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	assert_int_equal(gpux_wait((gpux_req *)b, 0), GPUX_E_INVAL);
	gpux_req_free((gpux_req *)b);
	gpux_module_free((gpux_module *)b);
	assert_int_equal(gpux_submit((gpux_module *)b, "empty", &one, NULL, 0, &r), GPUX_E_INVAL);
	assert_int_equal(add1(e, b), GPUX_OK);
	assert_int_equal(gpux_submit(e->m, "empty", &one, NULL, 0, &r), GPUX_OK);
	gpux_buf_free((gpux_buf *)r);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);
	gpux_buf_free(b);
	test_env_still_serves(e);
}

/* Many objects made and freed after a freed one: the library's memory stays its own. */
static void test_e2e_handles_many_frees(void **state)
{
	struct test_env *e = *state;

	for (int i = 0; i < 1000; i++) {
		gpux_req *r;
		gpux_buf *b;

		assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
		assert_int_equal(gpux_submit(e->m, "empty", &one, NULL, 0, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, -1), GPUX_OK);
		gpux_req_free(r);
		gpux_req_free(r);
		gpux_buf_free(b);
		gpux_buf_free(b);
	}
	test_env_still_serves(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e2e_handles_freed_buffer),
		cmocka_unit_test(test_e2e_handles_freed_request),
		cmocka_unit_test(test_e2e_handles_freed_module_and_queue),
		cmocka_unit_test(test_e2e_handles_freed_device_buffer),
		cmocka_unit_test(test_e2e_handles_wrong_type),
		cmocka_unit_test(test_e2e_handles_many_frees),
	};

	return cmocka_run_group_tests(tests, test_env_setup, test_env_teardown);
}
