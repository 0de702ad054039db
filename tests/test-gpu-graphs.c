/* SPDX-License-Identifier: MIT */
/* tests/test-gpu-graphs.c: launches batched into CUDA graphs on a real GPU (suite gpu; 77 without). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/*
 * A worker of one slot (--slots 1) is filled behind a long kernel, so that what waits behind
 * it goes to the device in batches (CUDA graphs of up to 64 kernel nodes): the order within a
 * queue, every node's own parameters, several kernels and clients in turn, and a fault in a
 * graph, on the real driver.
 */

#define SLOT_DEPTH 256u

static const char kernels[] =
	/* One thread; kernels of a queue run one after the other, so no atomics (which host
	 * memory may not have over PCIe). */
	"extern \"C\" __global__ void append(unsigned v, volatile unsigned *log)\n"
	"{\n"
	"	unsigned n = log[0];\n"
	"	log[1 + n] = v;\n"
	"	log[0] = n + 1;\n"
	"}\n"
	"extern \"C\" __global__ void add_to(unsigned long long i, unsigned v, unsigned *out)\n"
	"{\n"
	"	out[i] += v;\n"
	"}\n"
	"extern \"C\" __global__ void spin(unsigned long long cycles)\n"
	"{\n"
	"	unsigned long long t0 = clock64();\n"
	"	while (clock64() - t0 < cycles)\n"
	"		;\n"
	"}\n"
	"extern \"C\" __global__ void bad_address(unsigned *p)\n"
	"{\n"
	"	p[1ull << 40] = 1;\n"
	"}\n";

static gpux_module *load(gpux_ctx *ctx)
{
	gpux_module *m = NULL;
	char *log = NULL;

	if (gpux_module_load(ctx, GPUX_LANG_CUDA, kernels, sizeof(kernels) - 1, NULL, &m, &log) !=
	    GPUX_OK)
		fail_msg("compile: %s", log ? log : "");
	free(log);
	return m;
}

static int setup(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "1", NULL };
	struct test_daemon *d = calloc(1, sizeof(*d));

	test_daemon_start(d, args);
	*state = d;
	return 0;
}

static int teardown(void **state)
{
	test_daemon_stop(*state);
	free(*state);
	return 0;
}

static struct ipc_stats stats(const struct test_daemon *d)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(d, &st, devs), 0);
	return devs[0].stats;
}

/* A kernel of about 100 ms at the GPU's clock (2 GHz and less). */
static void submit_long(gpux_module *m, gpux_req **ret)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint64_t cycles = 200000000ull;
	struct gpux_arg a = GPUX_ARG_VALUE(cycles);

	assert_int_equal(gpux_submit(m, "spin", &l, &a, 1, ret), GPUX_OK);
}

/*
 * Behind a full slot, on one queue: appends of 0..N-1 (the order they ran in), and adds of
 * changing values to changing elements, kernels in turn. All ran, in order, with their own
 * parameters, and went through graphs.
 */
static void test_gpu_graphs_order_and_parameters(void **state)
{
	struct test_daemon *d = *state;
	enum { N = 4 * SLOT_DEPTH };
	static gpux_req *r[2 * N];
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	gpux_ctx *ctx = test_connect(d);
	gpux_module *m = load(ctx);
	uint64_t graphs = stats(d).graph_requests;
	gpux_buf *log, *sums;
	uint32_t *p, *s;
	gpux_req *spin;

	assert_int_equal(gpux_buf_alloc(ctx, (N + 1) * 4, &log), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, 64 * 4, &sums), GPUX_OK);
	p = gpux_buf_data(log);
	s = gpux_buf_data(sums);
	memset(p, 0, (N + 1) * 4);
	memset(s, 0, 64 * 4);
	submit_long(m, &spin);
	for (uint32_t i = 0; i < N; i++) {
		uint64_t at = i % 64;
		struct gpux_arg a[] = { GPUX_ARG_VALUE(i), gpux_arg_mapped(log, 0, (N + 1) * 4) };
		struct gpux_arg b[] = { GPUX_ARG_VALUE(at), GPUX_ARG_VALUE(i),
					gpux_arg_mapped(sums, 0, 64 * 4) };

		assert_int_equal(gpux_submit(m, "append", &l, a, 2, &r[2 * i]), GPUX_OK);
		assert_int_equal(gpux_submit(m, "add_to", &l, b, 3, &r[2 * i + 1]), GPUX_OK);
	}
	assert_int_equal(gpux_wait(spin, -1), GPUX_OK);
	gpux_req_free(spin);
	for (uint32_t i = 0; i < 2 * N; i++) {
		assert_int_equal(gpux_wait(r[i], -1), GPUX_OK);
		gpux_req_free(r[i]);
	}
	assert_int_equal(p[0], N);
	for (uint32_t i = 0; i < N; i++)
		if (p[1 + i] != i)
			fail_msg("position %u ran append %u", i, p[1 + i]);
	for (uint32_t k = 0; k < 64; k++) {
		uint32_t want = 0;

		for (uint32_t i = k; i < N; i += 64)
			want += i;
		assert_int_equal(s[k], want);
	}
	assert_true(stats(d).graph_requests - graphs >= SLOT_DEPTH / 2);
	gpux_buf_free(sums);
	gpux_buf_free(log);
	gpux_module_free(m);
	gpux_disconnect(ctx);
}

/*
 * Two clients wait behind a full slot; one of them has an illegal address among its batched
 * launches. GPUX_E_KERNEL_FAULT goes to that client only; the other sees its requests done or
 * GPUX_E_WORKER_LOST; the restarted worker serves both.
 */
static void test_gpu_graphs_fault_stays_with_its_client(void **state)
{
	struct test_daemon *d = *state;
	enum { N = 300 };
	static gpux_req *r[2][N];
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	gpux_ctx *ctx[2];
	gpux_module *m[2];
	gpux_buf *log[2];
	gpux_req *spin;
	unsigned faults[2] = { 0, 0 };

	for (int k = 0; k < 2; k++) {
		ctx[k] = test_connect(d);
		m[k] = load(ctx[k]);
		assert_int_equal(gpux_buf_alloc(ctx[k], (N + 1) * 4, &log[k]), GPUX_OK);
		memset(gpux_buf_data(log[k]), 0, (N + 1) * 4);
	}
	submit_long(m[0], &spin);
	for (uint32_t i = 0; i < N; i++)
		for (int k = 0; k < 2; k++) {
			struct gpux_arg a[] = { GPUX_ARG_VALUE(i),
						gpux_arg_mapped(log[k], 0, (N + 1) * 4) };
			bool bad = k == 1 && i == N / 2;

			assert_int_equal(gpux_submit(m[k], bad ? "bad_address" : "append", &l,
						     bad ? &a[1] : a, bad ? 1 : 2, &r[k][i]),
					 GPUX_OK);
		}
	(void)gpux_wait(spin, -1);
	gpux_req_free(spin);
	for (int k = 0; k < 2; k++)
		for (uint32_t i = 0; i < N; i++) {
			gpux_status st = gpux_wait(r[k][i], -1);

			assert_true(st == GPUX_OK || st == GPUX_E_KERNEL_FAULT ||
				    st == GPUX_E_WORKER_LOST);
			faults[k] += st == GPUX_E_KERNEL_FAULT;
			gpux_req_free(r[k][i]);
		}
	assert_int_equal(faults[0], 0);
	assert_true(faults[1] > 0);
	test_wait_generation(d, 0, 1);
	for (int k = 0; k < 2; k++) {
		struct gpux_arg a[] = { GPUX_ARG_VALUE(k),
					gpux_arg_mapped(log[k], 0, (N + 1) * 4) };

		assert_int_equal(gpux_run(m[k], "append", &l, a, 2), GPUX_OK);
		gpux_buf_free(log[k]);
		gpux_module_free(m[k]);
		gpux_disconnect(ctx[k]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_graphs_order_and_parameters),
		cmocka_unit_test(test_gpu_graphs_fault_stays_with_its_client),
	};

	test_gpu_require(1);
	return cmocka_run_group_tests(tests, setup, teardown);
}
