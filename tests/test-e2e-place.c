/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-place.c: where GPUX_ANY sends work over two devices: homes, spills, cache, queues. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/*
 * GPUX_ANY (client/req.c, pick_device()): each connection has a home device, gpuxd's count
 * of connections modulo the devices, which keeps its launches unless another device has
 * clearly less to do or holds more of the launch's cached inputs. Two host devices. No test
 * here asks gpuxd for its status between connections it compares: that is a connection too.
 */

/* The device each of `runs` GPUX_ANY launches of m ran on, one at a time; asserts they ran
 * on one device, which it returns. */
static uint32_t any_device(gpux_module *m, unsigned runs)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = GPUX_ANY };
	uint32_t dev = GPUX_ANY;

	for (unsigned i = 0; i < runs; i++) {
		gpux_req *r;

		assert_int_equal(gpux_submit(m, "empty", &l, NULL, 0, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, -1), GPUX_OK);
		if (dev == GPUX_ANY)
			dev = gpux_req_device(r);
		assert_int_equal(gpux_req_device(r), dev);
		gpux_req_free(r);
	}
	return dev;
}

/* Connections made one after another, each launching one request at a time: they take the
 * devices in turn, and each keeps its own. */
static void test_place_connections_take_devices_in_turn(void **state)
{
	struct test_env *e = *state;
	enum { N = 6 };
	gpux_ctx *ctx[N];
	gpux_module *m[N];
	uint32_t dev[N];

	for (unsigned i = 0; i < N; i++)
		ctx[i] = test_connect(&e->d);
	for (unsigned i = 0; i < N; i++)
		m[i] = test_load_host_kernels(ctx[i]);
	for (unsigned round = 0; round < 3; round++)
		for (unsigned i = 0; i < N; i++) {
			uint32_t d = any_device(m[i], 5);

			if (round == 0)
				dev[i] = d;
			assert_int_equal(d, dev[i]);
			if (i > 0)
				assert_int_not_equal(dev[i], dev[i - 1]);
		}
	for (unsigned i = 0; i < N; i++) {
		gpux_module_free(m[i]);
		gpux_disconnect(ctx[i]);
	}
}

/*
 * Forked processes, each connecting on its own, each launching one request at a time: the
 * devices share the work (a process mostly on its home, but the others' requests in flight
 * may make it look busier for a moment).
 */
static void test_place_processes_spread(void **state)
{
	struct test_env *e = *state;
	enum { PROCS = 8, RUNS = 40 };
	pid_t pids[PROCS];
	gpux_buf *res;
	uint32_t *on;

	assert_int_equal(gpux_buf_alloc(e->ctx, 2 * sizeof(uint32_t), &res), GPUX_OK);
	on = gpux_buf_data(res);
	on[0] = on[1] = 0;
	for (unsigned p = 0; p < PROCS; p++) {
		pids[p] = fork();
		assert_true(pids[p] >= 0);
		if (pids[p] == 0) {
			struct gpux_launch l = { .grid = { 1 },
						 .block = { 1 },
						 .device = GPUX_ANY };

			for (unsigned i = 0; i < RUNS; i++) {
				gpux_req *r;

				if (gpux_submit(e->m, "empty", &l, NULL, 0, &r) != GPUX_OK ||
				    gpux_wait(r, -1) != GPUX_OK || gpux_req_device(r) > 1)
					_exit(2);
				__atomic_fetch_add(&on[gpux_req_device(r)], 1, __ATOMIC_RELAXED);
				gpux_req_free(r);
			}
			_exit(0);
		}
	}
	for (unsigned p = 0; p < PROCS; p++)
		assert_child_ok(pids[p]);
	assert_int_equal(on[0] + on[1], PROCS * RUNS);
	assert_true(on[0] >= PROCS * RUNS / 4);
	assert_true(on[1] >= PROCS * RUNS / 4);
	gpux_buf_free(res);
}

/* "wait_flag" on device's default queue of m's connection: held until the flag in flags
 * (the first int) is set. */
static gpux_req *held(gpux_module *m, uint32_t device, gpux_buf *flags)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = device };
	struct gpux_arg a[] = { gpux_arg_inout(flags, 0, 4), gpux_arg_inout(flags, 4, 4) };
	gpux_req *r;

	assert_int_equal(gpux_submit(m, "wait_flag", &l, a, 2, &r), GPUX_OK);
	return r;
}

/*
 * A connection that makes little of the work keeps its home while the other device is busy
 * too, though less (its worker's count 6 against 16: read as they came, such counts sent
 * launches away); once the other device has nothing to do, its launches go there.
 */
static void test_place_home_kept_beside_busy_neighbours(void **state)
{
	struct test_env *e = *state;
	enum { AT_HOME = 16, AWAY = 6, LAUNCHES = 30 };
	gpux_ctx *a = test_connect(&e->d), *b = test_connect(&e->d);
	gpux_module *ma = test_load_host_kernels(a), *mb = test_load_host_kernels(b);
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = GPUX_ANY };
	uint32_t home = any_device(ma, 3), away = 1 - home;
	gpux_req *rh[AT_HOME], *ra[AWAY];
	gpux_buf *fh, *fa;
	bool moved = false;

	assert_int_equal(gpux_buf_alloc(b, 8, &fh), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(b, 8, &fa), GPUX_OK);
	memset(gpux_buf_data(fh), 0, 8);
	memset(gpux_buf_data(fa), 0, 8);
	for (unsigned i = 0; i < AT_HOME; i++)
		rh[i] = held(mb, home, fh);
	for (unsigned i = 0; i < AWAY; i++)
		ra[i] = held(mb, away, fa);
	for (int i = 0; i < 1000 && (((volatile int *)gpux_buf_data(fh))[1] != -1 ||
				     ((volatile int *)gpux_buf_data(fa))[1] != -1);
	     i++)
		(void)usleep(5000);
	for (unsigned i = 0; i < LAUNCHES; i++) {
		assert_int_equal(any_device(ma, 1), home);
		(void)usleep(200);
	}
	/* The other device's work ends: the launches follow within a few of the counts' reads
	 * (each at least 100 us apart). */
	((volatile int *)gpux_buf_data(fa))[0] = 1;
	for (unsigned i = 0; i < AWAY; i++) {
		assert_int_equal(gpux_wait(ra[i], -1), GPUX_OK);
		gpux_req_free(ra[i]);
	}
	for (unsigned i = 0; i < 1000 && !moved; i++) {
		gpux_req *r;

		assert_int_equal(gpux_submit(ma, "empty", &l, NULL, 0, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, -1), GPUX_OK);
		moved = gpux_req_device(r) == away;
		gpux_req_free(r);
		(void)usleep(200);
	}
	assert_true(moved);
	((volatile int *)gpux_buf_data(fh))[0] = 1;
	for (unsigned i = 0; i < AT_HOME; i++) {
		assert_int_equal(gpux_wait(rh[i], -1), GPUX_OK);
		gpux_req_free(rh[i]);
	}
	gpux_buf_free(fh);
	gpux_buf_free(fa);
	gpux_module_free(ma);
	gpux_module_free(mb);
	gpux_disconnect(a);
	gpux_disconnect(b);
}

/* An input cached on the device that is not the connection's home draws the launches that
 * use it there; the connection's other launches stay at home. */
static void test_place_cached_input_outweighs_home(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 20000;
	uint32_t home = any_device(e->m, 3), away = 1 - home;
	uint64_t seed = 9;
	gpux_buf *b;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &b), GPUX_OK);
	test_fill_random(gpux_buf_data(b), n, &seed);
	assert_int_equal(gpux_buf_freeze(b), GPUX_OK);
	assert_int_equal(test_add1_cached(e->ctx, e->m, b, n, away), away);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(test_add1_cached(e->ctx, e->m, b, n, GPUX_ANY), away);
		assert_int_equal(any_device(e->m, 2), home);
	}
	gpux_buf_free(b);
}

/*
 * A connection with much to do spills its GPUX_ANY launches onto the other device, while its
 * queue's launches, interleaved with them, all run on the queue's device in the order they
 * were submitted.
 */
static void test_place_queue_keeps_order_while_any_spills(void **state)
{
	struct test_env *e = *state;
	enum { N = 96 };
	struct gpux_launch any = { .grid = { 1 }, .block = { 1 }, .device = GPUX_ANY };
	uint32_t qdev = any_device(e->m, 1), spin_us = 2000, on[2] = { 0, 0 };
	gpux_req *rq[N], *ra[N];
	gpux_queue *q;
	gpux_buf *log;
	uint32_t *p;

	assert_int_equal(gpux_queue_open(e->ctx, qdev, &q), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, (N + 1) * 4, &log), GPUX_OK);
	p = gpux_buf_data(log);
	memset(p, 0, (N + 1) * 4);
	for (uint32_t i = 0; i < N; i++) {
		struct gpux_launch lq = { .grid = { 1 }, .block = { 1 }, .queue = q };
		struct gpux_arg qa[] = { GPUX_ARG_VALUE(i), gpux_arg_mapped(log, 0, (N + 1) * 4) };
		struct gpux_arg sa[] = { GPUX_ARG_VALUE(spin_us) };

		assert_int_equal(gpux_submit(e->m, "spin_us", &any, sa, 1, &ra[i]), GPUX_OK);
		assert_int_equal(gpux_submit(e->m, "append", &lq, qa, 2, &rq[i]), GPUX_OK);
	}
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(gpux_wait(rq[i], -1), GPUX_OK);
		assert_int_equal(gpux_req_device(rq[i]), qdev);
		assert_int_equal(gpux_wait(ra[i], -1), GPUX_OK);
		on[gpux_req_device(ra[i])]++;
		gpux_req_free(rq[i]);
		gpux_req_free(ra[i]);
	}
	assert_int_equal(p[0], N);
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(p[1 + i], i);
	assert_true(on[0] > 0);
	assert_true(on[1] > 0);
	gpux_buf_free(log);
	gpux_queue_free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_place_connections_take_devices_in_turn),
		cmocka_unit_test(test_place_processes_spread),
		cmocka_unit_test(test_place_home_kept_beside_busy_neighbours),
		cmocka_unit_test(test_place_cached_input_outweighs_home),
		cmocka_unit_test(test_place_queue_keeps_order_while_any_spills),
	};

	return cmocka_run_group_tests_name("placement", tests, test_env_setup_two_devices,
					   test_env_teardown);
}
