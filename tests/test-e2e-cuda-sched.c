/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-cuda-sched.c: stream priorities and green contexts asked of a (fake) driver. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "e2e.h"
#include "helpers.h"

/*
 * The fake driver ($GPUX_CUDA_LIB, tests/fake-cuda) has stream priorities 0 (least) to -5
 * (greatest) unless GPUX_FAKE_CUDA_PRIORITIES says otherwise, 132 SMs that green contexts
 * split in multiples of 8, and a kernel where(u32 *out) that writes the priority and the SMs of
 * the stream it runs on: what the worker asked of the driver for each queue.
 */

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
			  ".visible .entry where(.param .u64 where_param_0)\n{\n\tret;\n}\n"
			  ".visible .entry spin(.param .u32 spin_param_0)\n{\n\tret;\n}\n";

#define FAKE_SMS 132u

struct env {
	struct test_daemon d;
	gpux_ctx *ctx;
	gpux_module *m;
	gpux_buf *out;
};

static struct env *env_open(void)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "2", NULL };
	struct env *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	test_daemon_start(&e->d, args);
	e->ctx = test_connect(&e->d);
	assert_int_equal(
		gpux_module_load(e->ctx, GPUX_LANG_PTX, ptx, sizeof(ptx), NULL, &e->m, NULL),
		GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, 4096, &e->out), GPUX_OK);
	return e;
}

static void env_close(struct env *e)
{
	gpux_buf_free(e->out);
	gpux_module_free(e->m);
	gpux_disconnect(e->ctx);
	test_daemon_stop(&e->d);
	free(e);
}

static struct ipc_stats stats_now(const struct env *e)
{
	struct ipc_status st;
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[0].stats;
}

static struct ipc_sched sched_now(const struct env *e)
{
	return stats_now(e).sched;
}

/* A queue of these options (priority given unless NO_PRIO). */
#define NO_PRIO (GPUX_PRIORITY_MIN - 1)
static gpux_queue *queue(struct env *e, int32_t prio, uint32_t share)
{
	struct gpux_queue_opts o = {
		.size = sizeof(o),
		.flags = prio == NO_PRIO ? 0 : GPUX_QUEUE_PRIORITY,
		.priority = prio == NO_PRIO ? 0 : prio,
		.share = share,
	};
	gpux_queue *q;

	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_OK);
	return q;
}

/* where() on q (NULL: the default queue): the stream's priority and SMs. */
static void where(struct env *e, gpux_queue *q, int32_t *ret_prio, uint32_t *ret_sms)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .queue = q };
	struct gpux_arg a = gpux_arg_mapped(e->out, 0, 8);
	uint32_t *p = gpux_buf_data(e->out);

	memset(p, 0xff, 8);
	assert_int_equal(gpux_run(e->m, "where", &l, &a, 1), GPUX_OK);
	*ret_prio = (int32_t)p[0];
	*ret_sms = p[1];
}

/* The requests a slot takes while a queue of priority 2 is or is not open in the same
 * client (the client is then latency-critical, active as it sends): behind a kernel of 300
 * ms, 100 more on the default queue. Returns how many times a queue waited in line for room
 * in its slot. */
static uint64_t waits_behind_a_long_kernel(bool urgent)
{
	enum { N = 100 };
	static const uint32_t ms = 300;
	struct env *e = env_open();
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	struct gpux_arg spin = GPUX_ARG_VALUE(ms), out = gpux_arg_mapped(e->out, 0, 8);
	gpux_queue *q = urgent ? queue(e, 2, 0) : NULL;
	gpux_req *r[N + 1];
	uint64_t waits;
	int32_t prio;
	uint32_t sms;

	/* The client's priority queue is at its worker, and the client active there. */
	where(e, q, &prio, &sms);
	assert_int_equal(gpux_submit(e->m, "spin", &l, &spin, 1, &r[0]), GPUX_OK);
	for (unsigned i = 1; i <= N; i++)
		assert_int_equal(gpux_submit(e->m, "where", &l, &out, 1, &r[i]), GPUX_OK);
	for (unsigned i = 0; i <= N; i++) {
		assert_int_equal(gpux_wait(r[i], -1), GPUX_OK);
		gpux_req_free(r[i]);
	}
	waits = stats_now(e).slot_waits;
	gpux_queue_free(q);
	env_close(e);
	return waits;
}

/*
 * A stream of priority 0 holds at most WRK_SLOT_DEPTH_BESIDE_URGENT (32) requests while a
 * latency-critical client is active, so that the loop's launches never wait for a deep queue
 * on the device while such a client waits for the loop; 256 otherwise. Behind a long kernel,
 * 100 requests wait in line only beside latency-critical work.
 */
static void test_cuda_sched_shallow_beside_urgent(void **state)
{
	(void)state;
	assert_int_equal(waits_behind_a_long_kernel(false), 0);
	assert_true(waits_behind_a_long_kernel(true) >= 1);
}

/*
 * Each priority's queues run on a stream of the CUDA priority it maps to: 0 and -1 the least
 * (the default), 1 between, 2 the greatest; gpux status says which each level got.
 */
static void test_cuda_sched_stream_priorities(void **state)
{
	static const struct {
		int32_t prio, stream;
	} want[] = { { GPUX_PRIORITY_MAX, -5 }, { 1, -3 }, { 0, 0 }, { GPUX_PRIORITY_MIN, 0 } };
	struct env *e = env_open();
	gpux_queue *q[4];
	struct ipc_sched s;
	uint32_t sms;
	int32_t p;

	(void)state;
	where(e, NULL, &p, &sms);
	assert_int_equal(p, 0);
	assert_int_equal(sms, FAKE_SMS);
	for (unsigned i = 0; i < 4; i++) {
		q[i] = queue(e, want[i].prio, 0);
		where(e, q[i], &p, &sms);
		if (p != want[i].stream)
			fail_msg("priority %d ran on a stream of priority %d, not %d", want[i].prio,
				 p, want[i].stream);
		assert_int_equal(sms, FAKE_SMS);
	}
	s = sched_now(e);
	assert_int_equal(s.stream_prio_least, 0);
	assert_int_equal(s.stream_prio_greatest, -5);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(s.stream_prio[want[i].prio - IPC_PRIO_MIN], want[i].stream);
	/* Streams of their own for -1, 1 and 2; 0's are the default ones. */
	assert_int_equal(s.prio_streams, 3);
	for (unsigned i = 0; i < 4; i++)
		gpux_queue_free(q[i]);
	env_close(e);
}

/* A device of two stream priorities only: 1 and 2 both get the greater. */
static void test_cuda_sched_two_priorities(void **state)
{
	struct env *e;
	gpux_queue *q;
	uint32_t sms;
	int32_t p;

	(void)state;
	assert_int_equal(setenv("GPUX_FAKE_CUDA_PRIORITIES", "0,-1", 1), 0);
	e = env_open();
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_PRIORITIES"), 0);
	q = queue(e, 1, 0);
	where(e, q, &p, &sms);
	assert_int_equal(p, -1);
	gpux_queue_free(q);
	q = queue(e, GPUX_PRIORITY_MAX, 0);
	where(e, q, &p, &sms);
	assert_int_equal(p, -1);
	gpux_queue_free(q);
	env_close(e);
}

/*
 * A share is a green context of that part of the SMs, rounded up to the device's unit: 25 %
 * of 132 is 40. Shares of one size on streams of different priorities take different groups
 * of the split (two green contexts); every SM is no share; a share queue's launches never go
 * as graphs, and each gives its right result.
 */
static void test_cuda_sched_green_contexts(void **state)
{
	struct env *e = env_open();
	gpux_queue *a = queue(e, NO_PRIO, 25), *b = queue(e, 1, 25), *all = queue(e, NO_PRIO, 100);
	struct ipc_sched s;
	struct ipc_status st;
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	uint64_t graphs;
	uint32_t sms;
	int32_t p;

	(void)state;
	s = sched_now(e);
	assert_int_equal(s.share_sms, FAKE_SMS);
	assert_int_equal(s.share_unit, 8);
	assert_int_equal(s.share_min, 8);
	assert_string_equal(s.share_note, "");
	where(e, a, &p, &sms);
	assert_int_equal(sms, 40);
	assert_int_equal(p, 0);
	where(e, b, &p, &sms);
	assert_int_equal(sms, 40);
	assert_int_equal(p, -3);
	where(e, all, &p, &sms);
	assert_int_equal(sms, FAKE_SMS);
	s = sched_now(e);
	assert_int_equal(s.share_ctxs, 2);
	assert_int_equal(s.share_streams, 2);

	/* 64 launches in a row on the share's queue: one by one, all right. */
	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	graphs = devs[0].stats.graph_requests;
	{
		enum { N = 64 };
		gpux_req *r[N];
		gpux_buf *outs;
		struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .queue = a };

		assert_int_equal(gpux_buf_alloc(e->ctx, N * 8, &outs), GPUX_OK);
		memset(gpux_buf_data(outs), 0, N * 8);
		for (unsigned i = 0; i < N; i++) {
			struct gpux_arg arg = gpux_arg_mapped(outs, i * 8, 8);

			assert_int_equal(gpux_submit(e->m, "where", &l, &arg, 1, &r[i]), GPUX_OK);
		}
		for (unsigned i = 0; i < N; i++) {
			assert_int_equal(gpux_wait(r[i], -1), GPUX_OK);
			gpux_req_free(r[i]);
			assert_int_equal(((uint32_t *)gpux_buf_data(outs))[2 * i + 1], 40);
		}
		gpux_buf_free(outs);
	}
	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	assert_int_equal(devs[0].stats.graph_requests, graphs);
	gpux_queue_free(all);
	gpux_queue_free(b);
	gpux_queue_free(a);
	env_close(e);
}

/*
 * Shares of every size there is (5 % to 95 %: 8 to 128 SMs) take the streams they may, and
 * leave room for every priority's: a queue of the highest priority opened after them still
 * gets a stream of its own, of the greatest priority, on every SM.
 */
static void test_cuda_sched_shares_leave_room_for_priorities(void **state)
{
	enum { N = 19 };
	struct env *e = env_open();
	gpux_queue *q[N], *hi;
	struct ipc_sched s;
	uint32_t sms;
	int32_t p;

	(void)state;
	for (unsigned i = 0; i < N; i++) {
		q[i] = queue(e, NO_PRIO, 5 * (i + 1));
		where(e, q[i], &p, &sms);
		assert_true(sms <= FAKE_SMS);
	}
	s = sched_now(e);
	assert_int_equal(s.share_streams, 16 - (IPC_PRIO_LEVELS - 1));
	hi = queue(e, GPUX_PRIORITY_MAX, 0);
	where(e, hi, &p, &sms);
	assert_int_equal(p, -5);
	assert_int_equal(sms, FAKE_SMS);
	gpux_queue_free(hi);
	for (unsigned i = 0; i < N; i++)
		gpux_queue_free(q[i]);
	env_close(e);
}

/* A driver without green contexts: gpux status says why, and a share's queue runs on every
 * SM. */
static void test_cuda_sched_no_green_contexts(void **state)
{
	struct env *e;
	struct ipc_sched s;
	gpux_queue *q;
	uint32_t sms;
	int32_t p;

	(void)state;
	assert_int_equal(setenv("GPUX_FAKE_CUDA_NO_GREEN", "1", 1), 0);
	e = env_open();
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_NO_GREEN"), 0);
	s = sched_now(e);
	assert_int_equal(s.share_sms, 0);
	assert_non_null(strstr(s.share_note, "no green contexts"));
	q = queue(e, NO_PRIO, 25);
	where(e, q, &p, &sms);
	assert_int_equal(sms, FAKE_SMS);
	s = sched_now(e);
	assert_int_equal(s.share_streams, 0);
	assert_int_equal(s.share_ctxs, 0);
	gpux_queue_free(q);
	env_close(e);
}

/*
 * A latency-critical client's requests on a queue of its of priority 0. The loop takes such a
 * client's records between the batches of lower slots (an urgent turn), so a request may come
 * into a slot whose batch went already this round; it goes the next round, which may be the
 * one before the loop sleeps, where nothing else was found: the loop must watch what it
 * launched there, not sleep beside it. Sent at every pause from 0 to 80 µs after the last
 * answer (the loop spins 50 µs after its last work), each must end.
 */
static void test_cuda_sched_urgent_client_on_a_lower_queue(void **state)
{
	enum { N = 8000 };
	struct env *e;
	gpux_queue *q;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	struct gpux_arg out;

	(void)state;
	e = env_open();
	q = queue(e, 2, 0);
	out = gpux_arg_mapped(e->out, 0, 8);
	for (unsigned i = 0; i < N; i++) {
		struct timespec pause = { .tv_nsec = (long)(i % 81) * 1000 };
		gpux_req *r = NULL;
		gpux_status st;

		(void)nanosleep(&pause, NULL);
		assert_int_equal(gpux_submit(e->m, "where", &l, &out, 1, &r), GPUX_OK);
		st = gpux_wait(r, 5000);
		if (st != GPUX_OK)
			fail_msg("request %u, sent %u us after the last answer: %s", i, i % 81,
				 st == GPUX_E_AGAIN ? "no answer within 5 s" : gpux_strerror(st));
		gpux_req_free(r);
	}
	gpux_queue_free(q);
	env_close(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cuda_sched_stream_priorities),
		cmocka_unit_test(test_cuda_sched_two_priorities),
		cmocka_unit_test(test_cuda_sched_green_contexts),
		cmocka_unit_test(test_cuda_sched_shares_leave_room_for_priorities),
		cmocka_unit_test(test_cuda_sched_no_green_contexts),
		cmocka_unit_test(test_cuda_sched_shallow_beside_urgent),
		cmocka_unit_test(test_cuda_sched_urgent_client_on_a_lower_queue),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
