/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-active.c: thousands of idle clients, any of them served; pauses lose no wake-up. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/*
 * A worker looks only at the rings of its active clients (worker/core/active.h): a client
 * quiet for 200 µs leaves that set, as does every client when the worker's loop goes to
 * sleep, and its next record comes with a kick. These tests connect many clients, let them
 * go idle and wake them in any order, with pauses of every length around that time.
 */

/* Contexts of one process: gpuxd must let it have them all. */
static int setup(void **state)
{
	static const char *const args[] = { "--max-clients-per-process", "4096", NULL };

	*state = test_env_open(args);
	return 0;
}

static bool none_active(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.clients_active == 0 && s->stats.inflight == 0 && s->stats.clients_busy == 0;
}

static bool busy_is(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.clients_busy == *(uint64_t *)arg;
}

static bool clients_at_least(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.clients >= *(uint64_t *)arg;
}

static struct ipc_stats stats_now(const struct test_env *e)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[0].stats;
}

/* Contexts this process can hold, each 4 fds (gpuxd's socket, its channel, epoll, eventfd),
 * and the test's own: up to `want`. */
static unsigned contexts_room(unsigned want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	rl.rlim_cur = rl.rlim_max;
	(void)setrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < 256)
		return 0;
	return (unsigned)MIN((uint64_t)want, (rl.rlim_cur - 128) / 5);
}

/*
 * A thousand clients connect, each loads the kernels and runs one launch, and all go idle:
 * the worker holds none of them active. Then clients at every kind of place among the others
 * (the first and last to come, the middle, random ones) each submit again: each is served,
 * woken by exactly one kick (its record came while the worker looked at no ring of it), and
 * the worker holds none active once they are done.
 */
static void test_active_any_of_thousands_idle_is_served(void **state)
{
	struct test_env *e = *state;
	unsigned n = contexts_room(1000);
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = 0 };
	gpux_ctx **ctx;
	gpux_module **m;
	uint64_t seed = 25, total;

	if (n < 200)
		skip();
	ctx = calloc(n, sizeof(*ctx));
	m = calloc(n, sizeof(*m));
	assert_non_null(ctx);
	assert_non_null(m);
	for (unsigned i = 0; i < n; i++) {
		ctx[i] = test_connect(&e->d);
		m[i] = test_load_host_kernels(ctx[i]);
		assert_int_equal(gpux_run(m[i], "empty", &l, NULL, 0), GPUX_OK);
	}
	total = n + 1;
	test_wait_stats(&e->d, 0, clients_at_least, &total);
	test_wait_stats(&e->d, 0, none_active, NULL);
	for (unsigned k = 0; k < 12; k++) {
		unsigned i = k == 0   ? 0
			     : k == 1 ? n - 1
			     : k == 2 ? n / 2
			     : k == 3 ? 1
				      : (unsigned)(test_random_next(&seed) % n);
		uint64_t kicks = stats_now(e).socket_msgs;
		gpux_req *r;

		assert_int_equal(gpux_submit(m[i], "empty", &l, NULL, 0, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, 10000), GPUX_OK);
		gpux_req_free(r);
		test_wait_stats(&e->d, 0, none_active, NULL);
		assert_int_equal(stats_now(e).socket_msgs - kicks, 1);
	}
	for (unsigned i = 0; i < n; i++) {
		gpux_module_free(m[i]);
		gpux_disconnect(ctx[i]);
	}
	free(m);
	free(ctx);
	test_env_still_serves(e);
}

/*
 * Processes submit bursts of launches with pauses of every length around the time a quiet
 * client stays active (none, a few µs, about 200 µs, up to a millisecond), so that their
 * records land on every step of the worker leaving, sleeping and waking, and every request is
 * answered within seconds: a record left without a wake-up would wait for the next burst,
 * which never comes for the last. Both event loops; with spinning (io_uring) and without.
 */
static void test_active_pauses_lose_no_wakeup(void **state)
{
	struct test_env *e = *state;
	enum { PROCS = 4, BURSTS = 1000 };
	pid_t pids[PROCS];

	for (unsigned p = 0; p < PROCS; p++) {
		pids[p] = fork();
		assert_true(pids[p] >= 0);
		if (pids[p] > 0)
			continue;
		{
			struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = 0 };
			uint64_t seed = 100 + p;
			gpux_req *r[8];

			for (unsigned b = 0; b < BURSTS; b++) {
				unsigned burst = 1 + (unsigned)(test_random_next(&seed) % 8);
				uint64_t pause = test_random_next(&seed) % 5;

				for (unsigned i = 0; i < burst; i++)
					if (gpux_submit(e->m, "empty", &l, NULL, 0, &r[i]) !=
					    GPUX_OK)
						_exit(2);
				for (unsigned i = 0; i < burst; i++) {
					if (gpux_wait(r[i], 10000) != GPUX_OK)
						_exit(3);
					gpux_req_free(r[i]);
				}
				if (pause == 1)
					(void)usleep((useconds_t)(test_random_next(&seed) % 20));
				else if (pause == 2)
					(void)usleep(150 +
						     (useconds_t)(test_random_next(&seed) % 100));
				else if (pause == 3)
					(void)usleep((useconds_t)(test_random_next(&seed) % 1000));
			}
			_exit(0);
		}
	}
	for (unsigned p = 0; p < PROCS; p++)
		assert_child_ok(pids[p]);
	test_wait_stats(&e->d, 0, none_active, NULL);
}

/*
 * The worker counts the clients that have requests in flight (which clients weigh their
 * spinning against), whatever else is connected: two with slow requests, then one, then none.
 */
static void test_active_counts_clients_waiting(void **state)
{
	struct test_env *e = *state;
	gpux_ctx *other = test_connect(&e->d), *idle = test_connect(&e->d);
	gpux_module *m = test_load_host_kernels(other), *mi = test_load_host_kernels(idle);
	gpux_req *a, *b;
	uint64_t want;

	assert_int_equal(test_spin_run(mi, 0, 1), GPUX_OK);
	test_wait_stats(&e->d, 0, none_active, NULL);
	assert_int_equal(test_spin_submit(e->m, 0, 300, &a), GPUX_OK);
	assert_int_equal(test_spin_submit(m, 0, 600, &b), GPUX_OK);
	want = 2;
	test_wait_stats(&e->d, 0, busy_is, &want);
	assert_int_equal(gpux_wait(a, -1), GPUX_OK);
	want = 1;
	test_wait_stats(&e->d, 0, busy_is, &want);
	assert_int_equal(gpux_wait(b, -1), GPUX_OK);
	test_wait_stats(&e->d, 0, none_active, NULL);
	gpux_req_free(a);
	gpux_req_free(b);
	gpux_module_free(mi);
	gpux_module_free(m);
	gpux_disconnect(idle);
	gpux_disconnect(other);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_active_counts_clients_waiting),
		cmocka_unit_test(test_active_any_of_thousands_idle_is_served),
		cmocka_unit_test(test_active_pauses_lose_no_wakeup),
	};

	return cmocka_run_group_tests_name("active clients", tests, setup, test_env_teardown);
}
