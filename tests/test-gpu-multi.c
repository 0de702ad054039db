/* SPDX-License-Identifier: MIT */
/* tests/test-gpu-multi.c: GPUX_ANY on two or more real GPUs (suite gpu; exits 77 with fewer). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

static const char kernels[] =
	"extern \"C\" __global__ void spin(unsigned long long cycles)\n"
	"{\n"
	"	unsigned long long t0 = clock64();\n"
	"	while (clock64() - t0 < cycles)\n"
	"		;\n"
	"}\n"
	"extern \"C\" __global__ void add1(unsigned long long n, const float *in, float *out)\n"
	"{\n"
	"	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
	"	if (i < n)\n"
	"		out[i] = in[i] + 1.0f;\n"
	"}\n";

struct env {
	struct test_daemon d;
	gpux_ctx *ctx;
	gpux_module *m;
};

static int setup(void **state)
{
	static const char *const args[] = { "--backend", "cuda", NULL };
	struct env *e = calloc(1, sizeof(*e));
	char *log = NULL;

	test_daemon_start(&e->d, args);
	e->ctx = test_connect(&e->d);
	if (gpux_module_load(e->ctx, GPUX_LANG_CUDA, kernels, sizeof(kernels) - 1, NULL, &e->m,
			     &log) != GPUX_OK)
		fail_msg("compile: %s", log ? log : "");
	free(log);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;

	if (!e)
		return 0;
	gpux_module_free(e->m);
	gpux_disconnect(e->ctx);
	test_daemon_stop(&e->d);
	free(e);
	return 0;
}

static void test_multi_any_uses_every_gpu(void **state)
{
	struct env *e = *state;
	uint32_t ndev = gpux_device_count(e->ctx);
	uint64_t cycles = 50ull * 1000 * 1000;
	struct gpux_arg arg = GPUX_ARG_VALUE(cycles);
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = GPUX_ANY };
	unsigned on[IPC_DEVICES_MAX] = { 0 };
	gpux_req *r[32];

	for (int i = 0; i < 32; i++)
		assert_int_equal(gpux_submit(e->m, "spin", &l, &arg, 1, &r[i]), GPUX_OK);
	for (int i = 0; i < 32; i++) {
		assert_int_equal(gpux_wait(r[i], 60000), GPUX_OK);
		on[gpux_req_device(r[i])]++;
		gpux_req_free(r[i]);
	}
	for (uint32_t d = 0; d < ndev; d++)
		assert_true(on[d] > 0);
}

static void test_multi_any_follows_cached_inputs(void **state)
{
	struct env *e = *state;
	const uint64_t n = 1 << 20;
	uint64_t seed = 3;
	gpux_buf *in, *out;
	uint32_t first = GPUX_ANY;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &in), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(in), n, &seed);
	assert_int_equal(gpux_buf_freeze(in), GPUX_OK);
	for (int i = 0; i < 8; i++) {
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_cached(in, 0, n * 4),
					   gpux_arg_out(out, 0, n * 4) };
		struct gpux_launch l = { .grid = { (uint32_t)(n / 256) },
					 .block = { 256 },
					 .device = GPUX_ANY };
		gpux_req *r;

		assert_int_equal(gpux_submit(e->m, "add1", &l, args, 3, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, 60000), GPUX_OK);
		if (first == GPUX_ANY)
			first = gpux_req_device(r);
		assert_int_equal(gpux_req_device(r), first);
		gpux_req_free(r);
		assert_float_equal(((float *)gpux_buf_data(out))[n - 1],
				   ((float *)gpux_buf_data(in))[n - 1] + 1.0f, 0);
	}
	gpux_buf_free(out);
	gpux_buf_free(in);
}

static void test_multi_one_worker_killed_other_serves(void **state)
{
	struct env *e = *state;
	uint64_t cycles = 1000;
	struct gpux_arg arg = GPUX_ARG_VALUE(cycles);
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = GPUX_ANY };
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	assert_int_equal(kill(test_worker_pid(&e->d, 0), SIGKILL), 0);
	for (int i = 0; i < 20; i++) {
		gpux_req *r;
		gpux_status s;

		assert_int_equal(gpux_submit(e->m, "spin", &l, &arg, 1, &r), GPUX_OK);
		s = gpux_wait(r, 60000);
		assert_true(s == GPUX_OK || (s == GPUX_E_WORKER_LOST && gpux_req_device(r) == 0));
		gpux_req_free(r);
	}
	test_wait_generation(&e->d, 0, devs[0].generation);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_multi_any_uses_every_gpu),
		cmocka_unit_test(test_multi_any_follows_cached_inputs),
		cmocka_unit_test(test_multi_one_worker_killed_other_serves),
	};

	test_gpu_require(2);
	return cmocka_run_group_tests(tests, setup, teardown);
}
