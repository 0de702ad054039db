/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-loop-spin.c: spinning: hand-offs without wake-ups, none lost. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "loop-helpers.h"
#include "macro.h"

/* ---- spinning ---- */

/* A hand-off from another thread, as the worker's back end makes one: the work is put where
 * poll() finds it, and the eventfd written only when the loop is not spinning. */
struct handoff {
	struct ipc_loop *l;
	int efd;
	atomic_uint work;
	unsigned served, target;
	unsigned writes; /* eventfd writes the producer made for work still waiting */
	unsigned asleep; /* hand-offs for which the producer found the loop not spinning */
	unsigned lost;   /* hand-offs never served */
	unsigned errors; /* failed writes (cmocka asserts only on the test's thread) */
	unsigned max_sleep_us;
	bool start_spinning; /* the producer starts once the loop spins */
};

static bool handoff_take(struct handoff *h)
{
	if (!atomic_exchange(&h->work, 0))
		return false;
	if (++h->served == h->target)
		ipc_loop_exit(h->l, 0);
	return true;
}

static bool handoff_poll(void *userdata, bool sleeping)
{
	return handoff_take(userdata);
}

static void handoff_wake(struct ipc_watch *w, int fd, uint32_t revents, void *userdata)
{
	uint64_t v;

	(void)read(fd, &v, sizeof(v));
	(void)handoff_take(userdata);
}

static void *handoff_producer(void *arg)
{
	struct handoff *h = arg;
	uint64_t one = 1, start_by = mono_ns() + WAIT_MS * NSEC_PER_MSEC;
	unsigned seed = 1;

	while (h->start_spinning && !ipc_loop_spinning(h->l) && mono_ns() < start_by)
		(void)usleep(1);
	for (unsigned i = 0; i < h->target; i++) {
		uint64_t until = mono_ns() + WAIT_MS * NSEC_PER_MSEC;

		if (h->max_sleep_us)
			(void)usleep((useconds_t)(rand_r(&seed) % h->max_sleep_us));
		atomic_store(&h->work, 1);
		if (!ipc_loop_spinning(h->l)) {
			h->asleep++;
			/* Counted when the work still waits: the last one may be taken between the
			 * store and the look, by a loop that then stops at its target. */
			h->writes += atomic_load(&h->work) != 0;
			if (write(h->efd, &one, sizeof(one)) != sizeof(one))
				h->errors++;
		}
		while (atomic_load(&h->work) && mono_ns() < until)
			(void)usleep(1);
		if (atomic_load(&h->work)) {
			/* Lost: wake the loop for good, or the test would hang instead of failing.
			 */
			h->lost++;
			h->target = h->served + 1;
			if (write(h->efd, &one, sizeof(one)) != sizeof(one))
				h->errors++;
			return NULL;
		}
	}
	return NULL;
}

static void handoff_run(struct ipc_loop *l, struct handoff *h)
{
	struct ipc_watch *w;
	pthread_t t;
	uint64_t one = 1;

	h->l = l;
	h->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	assert_true(h->efd >= 0);
	assert_int_equal(ipc_watch_new(l, h->efd, POLLIN, handoff_wake, h, &w), 0);
	/* Something to serve first: the loop spins after it. */
	assert_int_equal(write(h->efd, &one, sizeof(one)), sizeof(one));
	assert_int_equal(pthread_create(&t, NULL, handoff_producer, h), 0);
	(void)alarm(60);
	assert_int_equal(ipc_loop_run(l), 0);
	(void)alarm(0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_false(ipc_loop_spinning(l));
	assert_int_equal(h->errors, 0);
	ipc_watch_free(w);
	(void)close(h->efd);
}

static void test_loop_spin_serves_handoffs_without_wakeups(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct handoff h = { .target = 1000, .start_spinning = true };

	assert_false(ipc_loop_spinning(l));
	/* A second of spinning after each: the producer never finds the loop asleep. */
	ipc_loop_set_spin(l, NSEC_PER_SEC, handoff_poll, &h);
	handoff_run(l, &h);
	assert_int_equal(h.lost, 0);
	assert_int_equal(h.served, 1000);
	assert_int_equal(h.writes, 0);
}

static void test_loop_spin_loses_no_handoff_as_it_stops(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct handoff h = { .target = 3000, .max_sleep_us = 40 };

	/* Spins of 20 µs against gaps of 0 to 40 µs: hand-offs land just before, during and
	 * after the loop stops spinning; any lost one is never served. */
	ipc_loop_set_spin(l, 20 * NSEC_PER_USEC, handoff_poll, &h);
	handoff_run(l, &h);
	assert_int_equal(h.lost, 0);
	assert_int_equal(h.served, 3000);
}

static void test_loop_without_spin_sleeps(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct handoff h = { .target = 200 };

	/* No spin: the loop never says it spins, so every hand-off comes with its wake-up. The
	 * loop's look before it sleeps may take the work before the producer writes, so count
	 * what the producer found, not what still waited after it. */
	ipc_loop_set_spin(l, 0, handoff_poll, &h);
	handoff_run(l, &h);
	assert_int_equal(h.lost, 0);
	assert_int_equal(h.served, 200);
	assert_int_equal(h.asleep, 200);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		LOOP_TEST(test_loop_spin_serves_handoffs_without_wakeups),
		LOOP_TEST(test_loop_spin_loses_no_handoff_as_it_stops),
		LOOP_TEST(test_loop_without_spin_sleeps),
	};

	return cmocka_run_group_tests_name("ipc-loop-spin", tests, NULL, NULL);
}
