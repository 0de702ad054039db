/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-cuda-isolation.c: the CUDA back end's device-memory reserve, on the fake libcuda. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"
#include "helpers.h"


/* The fake carries out saxpy by name (tests/fake-cuda). */
static const char ptx[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .entry saxpy(.param .u64 saxpy_param_0, .param .f32 saxpy_param_1,\n"
	"\t.param .u64 saxpy_param_2, .param .u64 saxpy_param_3, .param .u64 saxpy_param_4)\n"
	"{\n\tret;\n}\n";

static gpux_module *load_ptx(gpux_ctx *ctx)
{
	gpux_module *m = NULL;

	assert_int_equal(gpux_module_load(ctx, GPUX_LANG_PTX, ptx, sizeof(ptx), NULL, &m, NULL),
			 GPUX_OK);
	return m;
}

/* saxpy over n floats, x and y IN, out OUT; its status, the result checked when OK. */
static gpux_status saxpy(gpux_ctx *ctx, gpux_module *m, uint64_t n, uint64_t *seed)
{
	gpux_buf *x, *y, *out;
	float a = 3.0f;
	gpux_status st;

	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, seed);
	test_fill_random(gpux_buf_data(y), n, seed);
	{
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n), GPUX_ARG_VALUE(a), gpux_arg_in(x, 0, n * 4),
			gpux_arg_in(y, 0, n * 4), gpux_arg_out(out, 0, n * 4),
		};
		struct gpux_launch l = test_launch_1d(n, 0, NULL);

		st = gpux_run(m, "saxpy", &l, args, ARRAY_SIZE(args));
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
 * A device of 128 MiB filled with device buffers (the quota raised past it): the allocation
 * that would eat the reserve (a sixteenth of the device by default: 8 MiB) is refused with a
 * message naming it, and a launch with IN and OUT arguments, whose copies need device memory
 * of their own (the slot's scratch), still runs.
 */
static void test_cuda_isolation_reserve_kept(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "2", "--quota-device",
					    "1099511627776", NULL };
	struct test_daemon d;
	gpux_dbuf *bufs[40];
	unsigned n = 0;
	uint64_t seed = 11;
	char *msg = NULL;
	gpux_status st;
	gpux_module *m;
	gpux_ctx *ctx;

	assert_int_equal(setenv("GPUX_FAKE_CUDA_MEM", "134217728", 1), 0);
	test_daemon_start(&d, args);
	ctx = test_connect(&d);
	m = load_ptx(ctx);
	while ((st = gpux_dbuf_alloc_ex(ctx, 0, 4 * MiB, 0, &bufs[n], &msg)) == GPUX_OK)
		assert_true(++n < ARRAY_SIZE(bufs));
	assert_int_equal(st, GPUX_E_NOMEM);
	assert_non_null(msg);
	assert_non_null(strstr(msg, "device-memory reserve"));
	free(msg);
	/* At least 8 MiB stay: 30 buffers of 4 MiB at most. */
	assert_true(n >= 20 && n <= 30);
	assert_int_equal(saxpy(ctx, m, 1000, &seed), GPUX_OK);
	assert_int_equal(saxpy(ctx, m, 100000, &seed), GPUX_OK);
	/* Nor does the device cache take it: a cached input goes uncached, and runs. */
	{
		struct ipc_status st;
		struct ipc_dev_status devs[IPC_DEVICES_MAX];
		uint64_t count = 1000;
		float a = 1.0f;
		gpux_buf *x, *out;

		assert_int_equal(gpux_buf_alloc(ctx, 2 * MiB, &x), GPUX_OK);
		assert_int_equal(gpux_buf_alloc(ctx, count * 4, &out), GPUX_OK);
		assert_int_equal(gpux_buf_freeze(x), GPUX_OK);
		{
			struct gpux_arg sargs[] = {
				GPUX_ARG_VALUE(count), GPUX_ARG_VALUE(a), gpux_arg_cached(x, 0, 2 * MiB),
				gpux_arg_cached(x, 0, count * 4), gpux_arg_out(out, 0, count * 4),
			};
			struct gpux_launch l = test_launch_1d(count, 0, NULL);

			assert_int_equal(gpux_run(m, "saxpy", &l, sargs, ARRAY_SIZE(sargs)), GPUX_OK);
		}
		assert_int_equal(test_daemon_status(&d, &st, devs), 0);
		assert_int_equal(devs[0].stats.cache_entries, 0);
		gpux_buf_free(out);
		gpux_buf_free(x);
	}
	while (n > 0)
		gpux_dbuf_free(bufs[--n]);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(&d);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_MEM"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cuda_isolation_reserve_kept),
	};

	return cmocka_run_group_tests_name("e2e-cuda-isolation", tests, NULL, NULL);
}
