/* SPDX-License-Identifier: MIT */
/* tests/test-gpu-sched.c: priorities and compute shares on a real GPU (suite gpu; 77 without). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"
#include "helpers.h"

/*
 * What the device took: the CUDA stream priority of each level's streams (gpux status, from
 * cuStreamGetPriority), a request of the highest priority going before a backlog of
 * best-effort kernels, and the SMs a queue with a compute share runs on (the %smid of every
 * block of a kernel that spreads over all it may use), launched alone and in a row; every
 * result right.
 */

static const char kernels[] =
	"extern \"C\" __global__ void fill(unsigned n, unsigned v, unsigned *out)\n"
	"{\n"
	"	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
	"	if (i < n)\n"
	"		out[i] = v + i;\n"
	"}\n"
	"extern \"C\" __global__ void spin(unsigned long long cycles)\n"
	"{\n"
	"	unsigned long long t0 = clock64();\n"
	"	while (clock64() - t0 < cycles)\n"
	"		;\n"
	"}\n"
	/* Each block says on which SM it ran, after holding it a while (so that the blocks
	 * spread over every SM the kernel may use). */
	"extern \"C\" __global__ void smids(unsigned *out, unsigned long long cycles)\n"
	"{\n"
	"	unsigned id;\n"
	"	asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(id));\n"
	"	unsigned long long t0 = clock64();\n"
	"	while (clock64() - t0 < cycles)\n"
	"		;\n"
	"	if (threadIdx.x == 0)\n"
	"		out[blockIdx.x] = id;\n"
	"}\n";

struct env {
	struct test_daemon d;
	gpux_ctx *ctx;
	gpux_module *m;
	struct gpux_device_info info;
};

static int setup(void **state)
{
	static const char *const args[] = { "--backend", "cuda", NULL };
	struct env *e = calloc(1, sizeof(*e));
	char *log = NULL;

	assert_non_null(e);
	test_daemon_start(&e->d, args);
	e->ctx = test_connect(&e->d);
	if (gpux_module_load(e->ctx, GPUX_LANG_CUDA, kernels, sizeof(kernels) - 1, NULL, &e->m,
			     &log) != GPUX_OK)
		fail_msg("compile: %s", log ? log : "");
	free(log);
	assert_int_equal(gpux_device_info(e->ctx, 0, &e->info), GPUX_OK);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;

	gpux_module_free(e->m);
	gpux_disconnect(e->ctx);
	test_daemon_stop(&e->d);
	free(e);
	return 0;
}

static struct ipc_stats stats(const struct env *e)
{
	struct ipc_status st;
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[0].stats;
}

static gpux_queue *queue(struct env *e, int32_t prio, uint32_t share)
{
	struct gpux_queue_opts o = {
		.size = sizeof(o),
		.flags = GPUX_QUEUE_PRIORITY,
		.priority = prio,
		.share = share,
	};
	gpux_queue *q;

	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_OK);
	return q;
}

/* fill on q: out[i] = v + i, checked. */
static void fill_right(struct env *e, gpux_queue *q, unsigned v)
{
	enum { N = 100000 };
	struct gpux_launch l = { .grid = { (N + 255) / 256 }, .block = { 256 }, .queue = q };
	uint32_t n = N;
	gpux_buf *out;

	assert_int_equal(gpux_buf_alloc(e->ctx, N * 4, &out), GPUX_OK);
	{
		struct gpux_arg a[] = { GPUX_ARG_VALUE(n), GPUX_ARG_VALUE(v),
					gpux_arg_out(out, 0, N * 4) };

		assert_int_equal(gpux_run(e->m, "fill", &l, a, 3), GPUX_OK);
	}
	for (uint32_t i = 0; i < N; i++)
		if (((uint32_t *)gpux_buf_data(out))[i] != v + i)
			fail_msg("fill: element %u is %u", i, ((uint32_t *)gpux_buf_data(out))[i]);
	gpux_buf_free(out);
}

/*
 * Each level's queues run on streams of the priority it maps to, as the device took it; and
 * a request of the highest priority, submitted behind a backlog of kernels that fill every SM
 * for about 2 ms each, ends before most of them.
 */
static void test_gpu_sched_priorities(void **state)
{
	enum { BACKLOG = 40 };
	struct env *e = *state;
	struct ipc_stats s = stats(e);
	int least = s.sched.stream_prio_least, greatest = s.sched.stream_prio_greatest;
	gpux_queue *hi = queue(e, GPUX_PRIORITY_MAX, 0), *mid = queue(e, 1, 0);
	gpux_queue *low = queue(e, GPUX_PRIORITY_MIN, 0);
	uint64_t cycles = 4000000; /* 2 ms at 2 GHz, more below */
	struct gpux_arg spin = GPUX_ARG_VALUE(cycles);
	struct gpux_launch l = { .grid = { e->info.sm_count * 8 }, .block = { 256 } };
	gpux_req *be[BACKLOG], *r;
	unsigned done = 0;

	print_message("stream priorities %d (least) to %d (greatest)\n", least, greatest);
	assert_true(greatest <= least);
	fill_right(e, hi, 1);
	fill_right(e, mid, 2);
	fill_right(e, low, 3);
	fill_right(e, NULL, 4);
	s = stats(e);
	assert_int_equal(s.sched.stream_prio[GPUX_PRIORITY_MAX - IPC_PRIO_MIN], greatest);
	assert_int_equal(s.sched.stream_prio[1 - IPC_PRIO_MIN],
			 least + ((greatest - least) - (GPUX_PRIORITY_MAX - 1)) /
					 GPUX_PRIORITY_MAX);
	assert_int_equal(s.sched.stream_prio[GPUX_PRIORITY_MIN - IPC_PRIO_MIN], least);
	assert_int_equal(s.sched.stream_prio[0 - IPC_PRIO_MIN], least);

	for (unsigned i = 0; i < BACKLOG; i++)
		assert_int_equal(gpux_submit(e->m, "spin", &l, &spin, 1, &be[i]), GPUX_OK);
	l = (struct gpux_launch){ .grid = { 1 }, .block = { 1 }, .queue = hi };
	cycles = 1000;
	assert_int_equal(gpux_submit(e->m, "spin", &l, &spin, 1, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	for (unsigned i = 0; i < BACKLOG; i++)
		done += gpux_test(be[i]) == GPUX_OK;
	print_message("%u of %u best-effort kernels ended before the latency-critical one\n", done,
		      BACKLOG);
	assert_true(done < BACKLOG / 2);
	gpux_req_free(r);
	for (unsigned i = 0; i < BACKLOG; i++) {
		assert_int_equal(gpux_wait(be[i], -1), GPUX_OK);
		gpux_req_free(be[i]);
	}
	gpux_queue_free(low);
	gpux_queue_free(mid);
	gpux_queue_free(hi);
}

/* The distinct SMs that smids() ran on through q (blocks: 4 per SM), in a row of n. */
static unsigned sms_used(struct env *e, gpux_queue *q, unsigned n)
{
	uint32_t blocks = e->info.sm_count * 4, most = e->info.sm_count;
	uint64_t cycles = 40000; /* 20 µs at 2 GHz */
	struct gpux_launch l = { .grid = { blocks }, .block = { 64 }, .queue = q };
	bool *seen = calloc(1024, sizeof(*seen));
	gpux_req **r = calloc(n, sizeof(*r));
	gpux_buf *out;
	unsigned used = 0;

	assert_non_null(seen);
	assert_non_null(r);
	assert_int_equal(gpux_buf_alloc(e->ctx, (size_t)n * blocks * 4, &out), GPUX_OK);
	memset(gpux_buf_data(out), 0xff, (size_t)n * blocks * 4);
	for (unsigned k = 0; k < n; k++) {
		struct gpux_arg a[] = { gpux_arg_out(out, (uint64_t)k * blocks * 4, blocks * 4),
					GPUX_ARG_VALUE(cycles) };

		assert_int_equal(gpux_submit(e->m, "smids", &l, a, 2, &r[k]), GPUX_OK);
	}
	for (unsigned k = 0; k < n; k++) {
		assert_int_equal(gpux_wait(r[k], -1), GPUX_OK);
		gpux_req_free(r[k]);
	}
	for (size_t i = 0; i < (size_t)n * blocks; i++) {
		uint32_t id = ((uint32_t *)gpux_buf_data(out))[i];

		if (id >= 1024 || id >= most * 2)
			fail_msg("block %zu ran on SM %u, of %u", i, id, most);
		used += !seen[id];
		seen[id] = true;
	}
	gpux_buf_free(out);
	free(r);
	free(seen);
	return used;
}

/*
 * A queue with a share of 25 % runs its kernels on at most that part of the SMs, rounded up
 * to the device's unit, alone and in a row (and at the highest priority too); the default
 * queue on more. Without green contexts, gpux status says why and shares run on every SM.
 */
static void test_gpu_sched_shares(void **state)
{
	struct env *e = *state;
	struct ipc_sched s = stats(e).sched;
	gpux_queue *q = queue(e, 0, 25), *hq = queue(e, GPUX_PRIORITY_MAX, 25);
	unsigned all = sms_used(e, NULL, 1), one, row, hi, allowed;

	fill_right(e, q, 5);
	fill_right(e, hq, 6);
	if (!s.share_sms) {
		print_message("no compute shares here: %s\n", s.share_note);
		assert_true(strlen(s.share_note) > 0);
		goto out;
	}
	allowed = (25 * s.share_sms + 99) / 100;
	allowed = (allowed + s.share_unit - 1) / s.share_unit * s.share_unit;
	if (allowed < s.share_min)
		allowed = s.share_min;
	one = sms_used(e, q, 1);
	row = sms_used(e, q, 8);
	hi = sms_used(e, hq, 4);
	print_message("%u SMs: every SM %u, a 25%% share (at most %u) %u alone, %u in a row, %u at "
		      "priority 2\n",
		      s.share_sms, all, allowed, one, row, hi);
	assert_true(one <= allowed);
	assert_true(row <= allowed);
	assert_true(hi <= allowed);
	assert_true(all > allowed);
	s = stats(e).sched;
	assert_true(s.share_ctxs >= 1);
	assert_true(s.share_streams >= 2);
out:
	gpux_queue_free(hq);
	gpux_queue_free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_sched_priorities),
		cmocka_unit_test(test_gpu_sched_shares),
	};

	test_gpu_require(1);
	return cmocka_run_group_tests(tests, setup, teardown);
}
