/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-isolation.c: what one client cannot take from another: the device-memory reserve. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "e2e.h"
#include "helpers.h"


/* The host back end's device is the host's memory, as its worker counts it. */
static uint64_t host_memory(void)
{
	struct sysinfo si;

	assert_int_equal(sysinfo(&si), 0);
	return (uint64_t)si.totalram * si.mem_unit;
}

/* saxpy over n floats with IN and OUT arguments; its status, the result checked when OK. */
static gpux_status saxpy_in_out(struct test_env *e, uint32_t device, uint64_t n)
{
	gpux_buf *x, *y, *out;
	float a = 2.0f;
	gpux_status st;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, &e->seed);
	test_fill_random(gpux_buf_data(y), n, &e->seed);
	{
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n), GPUX_ARG_VALUE(a), gpux_arg_in(x, 0, n * 4),
			gpux_arg_in(y, 0, n * 4), gpux_arg_out(out, 0, n * 4),
		};
		struct gpux_launch l = test_launch_1d(n, device, NULL);

		st = gpux_run(e->m, "saxpy", &l, args, ARRAY_SIZE(args));
	}
	if (st == GPUX_OK) {
		const float *px = gpux_buf_data(x), *py = gpux_buf_data(y), *po = gpux_buf_data(out);

		for (uint64_t i = 0; i < n; i++)
			assert_float_equal(po[i], a * px[i] + py[i], 1e-6);
	}
	gpux_buf_free(out);
	gpux_buf_free(y);
	gpux_buf_free(x);
	return st;
}

/*
 * Device buffers never take the reserve: with all but 8 MiB of the device kept, two 4 MiB
 * buffers fit and a third is refused with NOMEM and a message naming the reserve, while a
 * launch with IN and OUT arguments still runs; one freed makes room again.
 */
static void test_isolation_reserve_kept_from_device_buffers(void **state)
{
	char reserve[32], quota[32];
	const char *const args[] = { "--device-reserve", reserve, "--quota-device", quota, NULL };
	uint64_t total = host_memory();
	struct test_env *e;
	gpux_dbuf *d[3];
	char *msg = NULL;

	(void)snprintf(reserve, sizeof(reserve), "%llu", (unsigned long long)(total - 8 * MiB));
	(void)snprintf(quota, sizeof(quota), "%llu", (unsigned long long)total);
	e = test_env_open(args);
	assert_int_equal(gpux_dbuf_alloc_ex(e->ctx, 0, 4 * MiB, 0, &d[0], &msg), GPUX_OK);
	assert_null(msg);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, 4 * MiB, &d[1]), GPUX_OK);
	assert_int_equal(gpux_dbuf_alloc_ex(e->ctx, 0, 4 * MiB, 0, &d[2], &msg), GPUX_E_NOMEM);
	assert_non_null(msg);
	assert_non_null(strstr(msg, "device-memory reserve"));
	assert_non_null(strstr(msg, "--device-reserve"));
	free(msg);
	msg = NULL;
	assert_int_equal(saxpy_in_out(e, 0, 1000), GPUX_OK);
	gpux_dbuf_free(d[1]);
	assert_int_equal(gpux_dbuf_alloc_ex(e->ctx, 0, 4 * MiB, 0, &d[1], &msg), GPUX_OK);
	assert_null(msg);
	gpux_dbuf_free(d[1]);
	gpux_dbuf_free(d[0]);
	test_env_close(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_isolation_reserve_kept_from_device_buffers),
	};

	return cmocka_run_group_tests_name("e2e-isolation", tests, NULL, NULL);
}
