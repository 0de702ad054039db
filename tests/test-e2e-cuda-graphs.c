/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-cuda-graphs.c: the CUDA back end's batches as graphs, on the fake libcuda. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"
#include "helpers.h"

/*
 * A worker launches runs of one client's plain launches as one CUDA graph. To have such runs
 * for sure, these tests fill a slot (one slot of WRK_SLOT_DEPTH = 256) behind a long kernel
 * and put more behind it: when the long one ends (the fake's other kernels take no time,
 * GPUX_FAKE_CUDA_KERNEL_NS=0), the waiting requests go in at once, one batch.
 */

#define SLOT_DEPTH 256u

static const char ptx[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .entry append(.param .u32 append_param_0, .param .u64 append_param_1)\n"
	"{\n\tret;\n}\n"
	".visible .entry spin(.param .u32 spin_param_0)\n{\n\tret;\n}\n"
	".visible .entry add1(.param .u64 add1_param_0, .param .u64 add1_param_1,\n"
	"\t.param .u64 add1_param_2)\n{\n\tret;\n}\n"
	".visible .entry slowfault(.param .u32 slowfault_param_0)\n{\n\tret;\n}\n";

/* A failure injected; with `once` (a new directory, which holds its mark), in the first worker
 * only. */
static void start(struct test_daemon *d, const char *fail, const char *once)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "1", NULL };
	char path[300];

	assert_int_equal(setenv("GPUX_FAKE_CUDA_KERNEL_NS", "0", 1), 0);
	if (fail) {
		(void)snprintf(path, sizeof(path), "%s/failed", once);
		assert_int_equal(setenv("GPUX_FAKE_CUDA_FAIL", fail, 1), 0);
		if (once)
			assert_int_equal(setenv("GPUX_FAKE_CUDA_FAIL_ONCE", path, 1), 0);
	}
	test_daemon_start(d, args);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_FAIL"), 0);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_FAIL_ONCE"), 0);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_KERNEL_NS"), 0);
}

static gpux_module *load_ptx(gpux_ctx *ctx)
{
	gpux_module *m = NULL;

	assert_int_equal(gpux_module_load(ctx, GPUX_LANG_PTX, ptx, sizeof(ptx), NULL, &m, NULL),
			 GPUX_OK);
	return m;
}

static struct ipc_stats stats(const struct test_daemon *d)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(d, &st, devs), 0);
	return devs[0].stats;
}

static gpux_buf *new_log(gpux_ctx *ctx, uint32_t n)
{
	gpux_buf *b;

	assert_int_equal(gpux_buf_alloc(ctx, (n + 1) * sizeof(uint32_t), &b), GPUX_OK);
	memset(gpux_buf_data(b), 0, (n + 1) * sizeof(uint32_t));
	return b;
}

static void submit_spin(gpux_module *m, uint32_t ms, gpux_req **ret)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	struct gpux_arg a = GPUX_ARG_VALUE(ms);

	assert_int_equal(gpux_submit(m, "spin", &l, &a, 1, ret), GPUX_OK);
}

static void submit_append(gpux_module *m, uint32_t v, gpux_buf *log, gpux_req **ret)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	struct gpux_arg args[] = { GPUX_ARG_VALUE(v), gpux_arg_mapped(log, 0, gpux_buf_size(log)) };

	assert_int_equal(gpux_submit(m, "append", &l, args, 2, ret), GPUX_OK);
}

/* Two clients of d, each with the module loaded. */
static void two_clients(struct test_daemon *d, gpux_ctx **ctx, gpux_module **m)
{
	for (int k = 0; k < 2; k++) {
		ctx[k] = test_connect(d);
		m[k] = load_ptx(ctx[k]);
	}
}

/*
 * A spin of 300 ms, then its slot filled with launches that no graph takes (more dynamic shared
 * memory than every kernel may have: cuLaunchKernel), SLOT_DEPTH of them in fill.
 */
static void fill_slot(gpux_module *m, gpux_req **ret_spin, gpux_req **fill)
{
	for (uint32_t i = 0; i <= SLOT_DEPTH; i++) {
		struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .shared_bytes = 64 * 1024 };
		uint32_t ms = i == 0 ? 300 : 0;
		struct gpux_arg a = GPUX_ARG_VALUE(ms);

		assert_int_equal(gpux_submit(m, "spin", &l, &a, 1, i ? &fill[i - 1] : ret_spin),
				 GPUX_OK);
	}
}

/*
 * Launches one at a time, each a graph of one node: the node set anew when the value, the log
 * or the kernel changes, and left as it is when the launch is the same. Every log holds what was
 * appended, in order, and none of it counts as a graph of several.
 */
static void test_graphs_of_one_follow_each_launch(void **state)
{
	struct test_daemon *d = *state;
	enum { N = 40 };
	gpux_buf *a, *b;
	const uint32_t *pa, *pb;
	gpux_module *m;
	gpux_ctx *ctx;
	gpux_req *r;

	start(d, NULL, NULL);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	a = new_log(ctx, N);
	b = new_log(ctx, N);
	for (uint32_t i = 0; i < N; i++) {
		/* The same launch twice in a row, then another value, log or kernel. */
		submit_append(m, i / 2, i % 4 < 2 ? a : b, &r);
		assert_int_equal(gpux_wait(r, -1), GPUX_OK);
		gpux_req_free(r);
		if (i % 5 == 4) {
			submit_spin(m, 0, &r);
			assert_int_equal(gpux_wait(r, -1), GPUX_OK);
			gpux_req_free(r);
		}
	}
	pa = gpux_buf_data(a);
	pb = gpux_buf_data(b);
	assert_int_equal(pa[0], N / 2);
	assert_int_equal(pb[0], N / 2);
	for (uint32_t i = 0; i < N / 2; i++) {
		uint32_t k = i / 2;

		if (pa[1 + i] != 2 * k || pb[1 + i] != 2 * k + 1)
			fail_msg("position %u: %u and %u", i, pa[1 + i], pb[1 + i]);
	}
	assert_int_equal(stats(d).graph_launches, 0);
	gpux_buf_free(b);
	gpux_buf_free(a);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

/*
 * Behind a full slot: appends of changing values to two logs in turn, then the same launch
 * again and again (its nodes left as they are). Every log holds what was appended, in order,
 * and most of it went through graphs.
 */
static void test_graphs_keep_order_and_parameters(void **state)
{
	struct test_daemon *d = *state;
	enum { N = 3 * SLOT_DEPTH, SAME = 200 };
	static gpux_req *r[N + SAME];
	gpux_buf *a, *b, *c;
	const uint32_t *pa, *pb, *pc;
	gpux_req *spin;
	gpux_module *m;
	gpux_ctx *ctx;

	start(d, NULL, NULL);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	a = new_log(ctx, N);
	b = new_log(ctx, N);
	c = new_log(ctx, SAME);
	submit_spin(m, 300, &spin);
	for (uint32_t i = 0; i < N; i++)
		submit_append(m, i, i % 2 ? b : a, &r[i]);
	for (uint32_t i = 0; i < SAME; i++)
		submit_append(m, 7, c, &r[N + i]);
	assert_int_equal(gpux_wait(spin, -1), GPUX_OK);
	gpux_req_free(spin);
	for (uint32_t i = 0; i < N + SAME; i++) {
		assert_int_equal(gpux_wait(r[i], -1), GPUX_OK);
		gpux_req_free(r[i]);
	}
	pa = gpux_buf_data(a);
	pb = gpux_buf_data(b);
	pc = gpux_buf_data(c);
	assert_int_equal(pa[0], N / 2);
	assert_int_equal(pb[0], N / 2);
	for (uint32_t i = 0; i < N / 2; i++) {
		if (pa[1 + i] != 2 * i || pb[1 + i] != 2 * i + 1)
			fail_msg("position %u: %u and %u", i, pa[1 + i], pb[1 + i]);
	}
	assert_int_equal(pc[0], SAME);
	for (uint32_t i = 0; i < SAME; i++)
		assert_int_equal(pc[1 + i], 7);
	/* What waited behind the full slot went in batches (its first refill alone is the
	 * depth, less the long kernel's place). */
	assert_true(stats(d).graph_requests >= SLOT_DEPTH / 2);
	gpux_buf_free(c);
	gpux_buf_free(b);
	gpux_buf_free(a);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

static uint64_t copyin_requests(const struct test_daemon *d)
{
	return stats(d).copyin_requests;
}

/* add1 of n floats from `in` at byte offset off, new values each time: checked. */
static void run_add1(gpux_module *m, gpux_buf *in, uint64_t off, uint64_t n, gpux_buf *out,
		     uint64_t *seed)
{
	struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(in, off, n * 4),
				   gpux_arg_out(out, 0, n * 4) };
	struct gpux_launch l = { .grid = { (uint32_t)((n + 255) / 256) }, .block = { 256 } };
	const float *pi = (const float *)((const uint8_t *)gpux_buf_data(in) + off);
	const float *po = gpux_buf_data(out);

	test_fill_random(gpux_buf_data(in), gpux_buf_size(in) / 4, seed);
	assert_int_equal(gpux_run(m, "add1", &l, args, 3), GPUX_OK);
	for (uint64_t i = 0; i < n; i++)
		assert_float_equal(po[i], pi[i] + 1.0f, 0);
}

/*
 * Copies in of more than 4 KiB and at most 256 KiB, each from a 16-byte aligned place, go by
 * gpux's copy-in kernel in one graph with the request's kernel, once the worker has loaded it
 * (on a thread of its own: until then, by cuMemcpyHtoDAsync). Two inputs in turn, so that the
 * copy node is set each time; the third time the driver refuses that (not sticky), and that
 * request's copy goes by cuMemcpyHtoDAsync, the graph made again for the next. Copies of 4 KiB,
 * of more than 256 KiB and from an unaligned place do not go by the kernel. Every result is
 * right.
 */
static void test_copies_in_by_kernel(void **state)
{
	struct test_daemon *d = *state;
	enum { N = 20 };
	const uint64_t n = 16384;
	uint64_t seed = 7, before, until = mono_ns() + 10 * 1000000000ull;
	gpux_buf *in[2], *out;
	gpux_module *m;
	gpux_ctx *ctx;

	start(d, "cuGraphExecKernelNodeSetParams:3:1", NULL);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	for (int k = 0; k < 2; k++)
		assert_int_equal(gpux_buf_alloc(ctx, 512 << 10, &in[k]), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, 512 << 10, &out), GPUX_OK);
	while (copyin_requests(d) == 0) {
		run_add1(m, in[0], 0, n, out, &seed);
		assert_true(mono_ns() < until);
	}
	before = copyin_requests(d);
	for (unsigned i = 0; i < N; i++)
		run_add1(m, in[(i + 1) % 2], 16 * (i % 3), n, out, &seed);
	assert_int_equal(copyin_requests(d) - before, N - 1);
	run_add1(m, in[0], 0, 1024, out, &seed);
	run_add1(m, in[0], 0, (256 << 10) / 4 + 1, out, &seed);
	run_add1(m, in[0], 4, n, out, &seed);
	assert_int_equal(copyin_requests(d) - before, N - 1);
	run_add1(m, in[0], 0, (256 << 10) / 4, out, &seed);
	assert_int_equal(copyin_requests(d) - before, N);
	for (int k = 0; k < 2; k++)
		gpux_buf_free(in[k]);
	gpux_buf_free(out);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

/* A node the driver refuses (not sticky): the batch goes one request at a time instead. */
static void test_graphs_refused_node_falls_back(void **state)
{
	struct test_daemon *d = *state;
	enum { N = 2 * SLOT_DEPTH };
	static gpux_req *r[N];
	gpux_req *spin;
	gpux_buf *log;
	gpux_module *m;
	gpux_ctx *ctx;
	const uint32_t *p;

	start(d, "cuGraphExecKernelNodeSetParams:5:1", NULL);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	log = new_log(ctx, N);
	submit_spin(m, 300, &spin);
	for (uint32_t i = 0; i < N; i++)
		submit_append(m, i, log, &r[i]);
	assert_int_equal(gpux_wait(spin, -1), GPUX_OK);
	gpux_req_free(spin);
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(gpux_wait(r[i], -1), GPUX_OK);
		gpux_req_free(r[i]);
	}
	p = gpux_buf_data(log);
	assert_int_equal(p[0], N);
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(p[1 + i], i);
	gpux_buf_free(log);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

/*
 * Two clients wait behind a full slot; as room comes back their queues take turns of
 * WRK_QUEUE_TURN (16) requests into the slot, and what a round moved in goes to the device as
 * graphs that hold both clients' requests: more than 16 requests each. Each client's log holds
 * what it appended, in order.
 */
static void test_graphs_hold_several_clients(void **state)
{
	struct test_daemon *d = *state;
	enum { N = 200 };
	static gpux_req *r[2][N], *fill[SLOT_DEPTH];
	struct ipc_stats s;
	gpux_ctx *ctx[2];
	gpux_module *m[2];
	gpux_buf *log[2];
	gpux_req *spin;

	start(d, NULL, NULL);
	two_clients(d, ctx, m);
	for (int k = 0; k < 2; k++)
		log[k] = new_log(ctx[k], N);
	fill_slot(m[0], &spin, fill);
	for (uint32_t i = 0; i < N; i++)
		for (int k = 0; k < 2; k++)
			submit_append(m[k], i + 1000u * (uint32_t)k, log[k], &r[k][i]);
	assert_int_equal(gpux_wait(spin, -1), GPUX_OK);
	gpux_req_free(spin);
	for (uint32_t i = 0; i < SLOT_DEPTH; i++) {
		assert_int_equal(gpux_wait(fill[i], -1), GPUX_OK);
		gpux_req_free(fill[i]);
	}
	for (uint32_t i = 0; i < N; i++)
		for (int k = 0; k < 2; k++) {
			assert_int_equal(gpux_wait(r[k][i], -1), GPUX_OK);
			gpux_req_free(r[k][i]);
		}
	for (int k = 0; k < 2; k++) {
		const uint32_t *p = gpux_buf_data(log[k]);

		assert_int_equal(p[0], N);
		for (uint32_t i = 0; i < N; i++)
			assert_int_equal(p[1 + i], i + 1000u * (uint32_t)k);
	}
	/* Graphs of one client's turn would hold 16 at most. */
	s = stats(d);
	if (s.graph_launches == 0 || s.graph_requests <= 16 * s.graph_launches)
		fail_msg("%llu requests in %llu graphs", (unsigned long long)s.graph_requests,
			 (unsigned long long)s.graph_launches);
	for (int k = 0; k < 2; k++) {
		gpux_buf_free(log[k]);
		gpux_module_free(m[k]);
		gpux_disconnect(ctx[k]);
	}
	test_daemon_stop(d);
}

/* How one of client A's requests may end when A's kernel broke the device: GPUX_OK,
 * GPUX_E_WORKER_LOST where it was in flight when A's own request broke the worker, or
 * GPUX_E_KERNEL_FAULT where it was blamed with it (in a graph of A's alone, or as the group
 * the stream had not yet been seen to pass). Returns whether it was blamed. */
static bool a_ended(gpux_req *r, gpux_status st)
{
	const char *msg = gpux_req_message(r);

	if (st == GPUX_E_WORKER_LOST && strstr(msg, "this connection"))
		return false;
	if (st != GPUX_OK && st != GPUX_E_KERNEL_FAULT)
		fail_msg("client A: %s: %s", gpux_strerror(st), msg);
	return st == GPUX_E_KERNEL_FAULT;
}

/*
 * The same, and one of client A's launches faults the device, 200 ms into its run (the
 * fake's slowfault): which node of a graph did, the device does not say, so a graph of two
 * clients is blamed on neither; their requests run again, each alone, and A's breaks the next
 * worker by itself. Every request of B's ends GPUX_OK; A is told a kernel of its faulted (its
 * slowfault, or one of its requests blamed with it, or, where the worker had not yet seen the
 * groups ahead of it end, one of those: the blame stays with A); A's others end as a_ended()
 * allows.
 */
static void test_graphs_of_two_clients_fault_blames_one(void **state)
{
	struct test_daemon *d = *state;
	enum { N = 40, BAD = 25 };
	static gpux_req *r[2][N], *fill[SLOT_DEPTH];
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint32_t ms = 200;
	struct gpux_arg late = GPUX_ARG_VALUE(ms);
	gpux_ctx *ctx[2];
	gpux_module *m[2];
	gpux_req *spin;
	bool told;

	start(d, NULL, NULL);
	two_clients(d, ctx, m);
	fill_slot(m[0], &spin, fill);
	for (uint32_t i = 0; i < N; i++)
		for (int k = 0; k < 2; k++) {
			if (k == 0 && i == BAD)
				assert_int_equal(
					gpux_submit(m[0], "slowfault", &l, &late, 1, &r[0][i]),
					GPUX_OK);
			else
				submit_spin(m[k], 0, &r[k][i]);
		}
	told = a_ended(spin, gpux_wait(spin, 10000));
	gpux_req_free(spin);
	for (uint32_t i = 0; i < SLOT_DEPTH; i++) {
		if (a_ended(fill[i], gpux_wait(fill[i], 10000)))
			told = true;
		gpux_req_free(fill[i]);
	}
	for (uint32_t i = 0; i < N; i++)
		for (int k = 0; k < 2; k++) {
			gpux_status st = gpux_wait(r[k][i], 10000);

			if (k == 0)
				told = a_ended(r[k][i], st) || told;
			else if (st != GPUX_OK)
				fail_msg("client B, request %u: %s: %s", i, gpux_strerror(st),
					 gpux_req_message(r[k][i]));
			gpux_req_free(r[k][i]);
		}
	assert_true(told);
	for (int k = 0; k < 2; k++) {
		gpux_module_free(m[k]);
		gpux_disconnect(ctx[k]);
	}
	test_daemon_stop(d);
}

/*
 * Two clients wait behind a full slot; the driver refuses the second graph launched with a
 * sticky error. The blame goes to a group of one client that ran (or, if none, the refused one
 * when it is of one client; if several, or a graph of both, none): GPUX_E_KERNEL_FAULT goes to
 * one client at most; the other's requests that were handed to the device (their log is
 * mapped: in place) see GPUX_E_WORKER_LOST, and those not yet run again on the next worker.
 */
static void test_graphs_fault_stays_with_one_client(void **state)
{
	struct test_daemon *d = *state;
	enum { N = 200 };
	static gpux_req *r[2][N], *fill[SLOT_DEPTH];
	gpux_ctx *ctx[2];
	gpux_module *m[2];
	gpux_buf *log[2];
	gpux_req *spin;
	unsigned faults[2] = { 0, 0 }, together[2] = { 0, 0 };
	gpux_status spun;
	char *once = test_mkdtemp();

	start(d, "cuGraphLaunch:2:719", once);
	for (int k = 0; k < 2; k++) {
		ctx[k] = test_connect(d);
		m[k] = load_ptx(ctx[k]);
		log[k] = new_log(ctx[k], N);
	}
	fill_slot(m[0], &spin, fill);
	for (uint32_t i = 0; i < N; i++)
		for (int k = 0; k < 2; k++)
			submit_append(m[k], i, log[k], &r[k][i]);
	/* The spin ran: a refused launch may be blamed on it (counted with the fillers). */
	spun = gpux_wait(spin, -1);
	gpux_req_free(spin);
	for (int k = 0; k < 2; k++)
		for (uint32_t i = 0; i < N; i++) {
			gpux_status st = gpux_wait(r[k][i], -1);

			assert_true(st == GPUX_OK || st == GPUX_E_KERNEL_FAULT ||
				    st == GPUX_E_WORKER_LOST);
			if (st == GPUX_E_KERNEL_FAULT) {
				const char *msg = gpux_req_message(r[k][i]);

				assert_non_null(strstr(msg, "CUDA_ERROR_LAUNCH_FAILED"));
				together[k] += strstr(msg, "launched together") != NULL;
				faults[k]++;
			}
			gpux_req_free(r[k][i]);
		}
	/* The group blamed: a graph, whose requests all say so, or one request alone (a run of
	 * one in its batch, which a worker that spins makes more often). */
	for (int k = 0; k < 2; k++)
		assert_true(together[k] == faults[k] || (faults[k] == 1 && together[k] == 0));
	/* A refused launch is blamed on a group that ran, which may be one of the first
	 * client's fillers, or its spin. */
	faults[0] += spun == GPUX_E_KERNEL_FAULT;
	for (uint32_t i = 0; i < SLOT_DEPTH; i++) {
		faults[0] += gpux_wait(fill[i], -1) == GPUX_E_KERNEL_FAULT;
		gpux_req_free(fill[i]);
	}
	/* One client is blamed, or nobody: when several groups that ran may have broken the
	 * device, none is blamed, each runs again alone, and (the failure injected once) all
	 * succeed. */
	assert_true(faults[0] == 0 || faults[1] == 0);
	for (int k = 0; k < 2; k++) {
		gpux_buf_free(log[k]);
		gpux_module_free(m[k]);
		gpux_disconnect(ctx[k]);
	}
	test_daemon_stop(d);
	test_rmtree(once);
	free(once);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST_WITH_DAEMON(test_graphs_of_one_follow_each_launch),
		TEST_WITH_DAEMON(test_graphs_keep_order_and_parameters),
		TEST_WITH_DAEMON(test_copies_in_by_kernel),
		TEST_WITH_DAEMON(test_graphs_refused_node_falls_back),
		TEST_WITH_DAEMON(test_graphs_fault_stays_with_one_client),
		TEST_WITH_DAEMON(test_graphs_hold_several_clients),
		TEST_WITH_DAEMON(test_graphs_of_two_clients_fault_blames_one),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
