/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-sched.c: how a worker schedules: order within queues under load, turns between clients. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/*
 * A worker lets a slot hold a bounded number of requests (WRK_SLOT_DEPTH, 256) and makes
 * queues that have more wait in line, taking turns. These tests put more than that in
 * flight, from several processes and queues at once, on a worker of one or two slots.
 */

#define SLOT_DEPTH 256u

static int setup(void **state)
{
	static const char *const args[] = { "--slots", "2", NULL };

	*state = test_env_open(args);
	return 0;
}

static int setup_one_slot(void **state)
{
	static const char *const args[] = { "--slots", "1", NULL };

	*state = test_env_open(args);
	return 0;
}

/* Submit n appends of 0..n-1 to log on queue q (NULL: the default one); r gets them. */
static void submit_appends(gpux_module *m, gpux_queue *q, gpux_buf *log, uint32_t n, gpux_req **r)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .queue = q };

	for (uint32_t i = 0; i < n; i++) {
		struct gpux_arg args[] = { GPUX_ARG_VALUE(i),
					   gpux_arg_mapped(log, 0, gpux_buf_size(log)) };

		assert_int_equal(gpux_submit(m, "append", &l, args, 2, &r[i]), GPUX_OK);
	}
}

/* Whether log holds 0..n-1 in order; the first position that does not, else -1. */
static long log_disorder(const gpux_buf *log_buf, uint32_t n)
{
	const uint32_t *p = gpux_buf_data((gpux_buf *)log_buf);

	if (p[0] != n)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		if (p[1 + i] != i)
			return (long)i + 1;
	return -1;
}

static gpux_buf *new_log(gpux_ctx *ctx, uint32_t n)
{
	gpux_buf *b;

	assert_int_equal(gpux_buf_alloc(ctx, (n + 1) * sizeof(uint32_t), &b), GPUX_OK);
	memset(gpux_buf_data(b), 0, (n + 1) * sizeof(uint32_t));
	return b;
}

/*
 * Four processes with three queues each put twice a slot's depth in flight on every queue at
 * once, so that queues wait in line for room, are let in by turns and share the two slots:
 * every queue's requests still ran in the order they were submitted.
 */
static void test_sched_queues_keep_order_under_load(void **state)
{
	struct test_env *e = *state;
	enum { PROCS = 4, QUEUES = 3, N = 2 * SLOT_DEPTH };
	pid_t pids[PROCS];

	for (unsigned p = 0; p < PROCS; p++) {
		pids[p] = fork();
		assert_true(pids[p] >= 0);
		if (pids[p] > 0)
			continue;
		{
			gpux_queue *q[QUEUES];
			gpux_buf *log[QUEUES];
			static gpux_req *r[QUEUES][N];
			int bad = 0;

			for (unsigned k = 0; k < QUEUES; k++) {
				if (gpux_queue_open(e->ctx, 0, &q[k]) != GPUX_OK)
					_exit(2);
				log[k] = new_log(e->ctx, N);
			}
			/* Interleaved, so that the worker takes all queues' requests at once. */
			for (uint32_t i = 0; i < N; i += 32)
				for (unsigned k = 0; k < QUEUES; k++) {
					struct gpux_launch l = { .grid = { 1 },
								 .block = { 1 },
								 .queue = q[k] };

					for (uint32_t j = i; j < i + 32; j++) {
						struct gpux_arg args[] = {
							GPUX_ARG_VALUE(j),
							gpux_arg_mapped(log[k], 0, (N + 1) * 4),
						};
						if (gpux_submit(e->m, "append", &l, args, 2,
								&r[k][j]) != GPUX_OK)
							_exit(3);
					}
				}
			for (unsigned k = 0; k < QUEUES; k++)
				for (uint32_t i = 0; i < N; i++) {
					bad |= gpux_wait(r[k][i], -1) != GPUX_OK;
					gpux_req_free(r[k][i]);
				}
			for (unsigned k = 0; k < QUEUES; k++)
				bad |= log_disorder(log[k], N) >= 0;
			_exit(bad ? 1 : 0);
		}
	}
	for (unsigned p = 0; p < PROCS; p++)
		assert_child_ok(pids[p]);
}

static bool none_inflight(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.inflight == 0;
}

/*
 * One slot; a busy client puts nearly four slots' worth of slow requests on it (as many as the
 * library lets a process have in flight); another client then submits one. The second is let
 * in at the next turn, not behind the whole backlog: between its submission and its run, at
 * most the slot's depth and two turns of the busy client's ran. Each request logs when it ran,
 * so that what the test process sees late (a loaded machine delays its answers and its
 * looks) does not count.
 */
static void test_sched_busy_client_does_not_starve_another(void **state)
{
	struct test_env *e = *state;
	enum { N = 1000 };
	static gpux_req *busy[N];
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint32_t us = 2000;
	gpux_ctx *other = test_connect(&e->d);
	gpux_module *om = test_load_host_kernels(other);
	gpux_buf *busy_log, *when;
	const uint64_t *ends, *ran;
	uint64_t submitted;
	unsigned between = 0;
	gpux_req *r;

	assert_int_equal(gpux_buf_alloc(e->ctx, (N + 1) * sizeof(uint64_t), &busy_log), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(other, sizeof(uint64_t), &when), GPUX_OK);
	ends = gpux_buf_data(busy_log);
	ran = gpux_buf_data(when);
	for (uint32_t i = 0; i < N; i++) {
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(us),
			gpux_arg_mapped(busy_log, 0, gpux_buf_size(busy_log)),
		};
		assert_int_equal(gpux_submit(e->m, "spin_us_log", &l, args, 2, &busy[i]), GPUX_OK);
	}
	submitted = mono_ns();
	{
		struct gpux_arg arg = gpux_arg_mapped(when, 0, sizeof(uint64_t));

		assert_int_equal(gpux_submit(om, "stamp", &l, &arg, 1, &r), GPUX_OK);
	}
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(gpux_wait(busy[i], -1), GPUX_OK);
		gpux_req_free(busy[i]);
	}
	assert_int_equal(ends[0], N);
	assert_true(*ran > submitted);
	for (uint32_t i = 0; i < N; i++)
		between += ends[1 + i] > submitted && ends[1 + i] <= *ran;
	if (between > SLOT_DEPTH + 64)
		fail_msg("%u of the busy client's %u requests ran after the other's was submitted "
			 "and before it ran",
			 between, N);
	gpux_req_free(r);
	gpux_buf_free(when);
	gpux_buf_free(busy_log);
	gpux_module_free(om);
	gpux_disconnect(other);
	test_wait_stats(&e->d, 0, none_inflight, NULL);
}

/*
 * A queue whose slot is full waits in line; when it is closed (or its client goes) while in
 * line, the line lets go of it and the others still get their turns.
 */
static void test_sched_queue_closed_while_waiting(void **state)
{
	struct test_env *e = *state;
	enum { N = 2 * SLOT_DEPTH };
	static gpux_req *r[N], *s[N];
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint32_t us = 50;
	struct gpux_arg spin = GPUX_ARG_VALUE(us);
	gpux_queue *q, *q2;
	gpux_buf *log;
	unsigned failed = 0;

	assert_int_equal(gpux_queue_open(e->ctx, 0, &q), GPUX_OK);
	assert_int_equal(gpux_queue_open(e->ctx, 0, &q2), GPUX_OK);
	log = new_log(e->ctx, N);
	l.queue = q;
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(gpux_submit(e->m, "spin_us", &l, &spin, 1, &r[i]), GPUX_OK);
	submit_appends(e->m, q2, log, N, s);
	/* Closed with work still queued: what did not start ends with GPUX_E_INVAL. */
	gpux_queue_free(q);
	for (uint32_t i = 0; i < N; i++) {
		gpux_status st = gpux_wait(r[i], -1);

		assert_true(st == GPUX_OK || st == GPUX_E_INVAL);
		failed += st == GPUX_E_INVAL;
		gpux_req_free(r[i]);
	}
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(gpux_wait(s[i], -1), GPUX_OK);
		gpux_req_free(s[i]);
	}
	assert_int_equal(log_disorder(log, N), -1);
	(void)failed;
	gpux_buf_free(log);
	gpux_queue_free(q2);
	test_wait_stats(&e->d, 0, none_inflight, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sched_queues_keep_order_under_load),
		cmocka_unit_test(test_sched_queue_closed_while_waiting),
	};
	const struct CMUnitTest one_slot[] = {
		cmocka_unit_test(test_sched_busy_client_does_not_starve_another),
	};
	int r = cmocka_run_group_tests_name("two slots", tests, setup, test_env_teardown);

	return r |
	       cmocka_run_group_tests_name("one slot", one_slot, setup_one_slot, test_env_teardown);
}
