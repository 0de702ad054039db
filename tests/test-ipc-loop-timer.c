/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-loop-timer.c: timers (order, many, re-arming, freeing); running until exit. */
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

/* ---- timers ---- */

static void timers_init(struct ipc_loop *l, struct test_timer_rec *r, unsigned n, unsigned *order,
			unsigned *fired)
{
	for (unsigned i = 0; i < n; i++) {
		r[i] = (struct test_timer_rec){ .order = order, .fired = fired, .number = i };
		assert_int_equal(ipc_timer_new(l, test_timer_cb, &r[i], &r[i].t), 0);
	}
}

static void timer_arm_in(struct test_timer_rec *r, unsigned ms)
{
	r->due = mono_ns() + ms * NSEC_PER_MSEC;
	ipc_timer_arm(r->t, r->due);
}

static void test_loop_timers_fire_in_order(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	unsigned order[8], fired = 0;
	struct test_timer_rec r[4];

	timers_init(l, r, 4, order, &fired);
	timer_arm_in(&r[0], 30);
	timer_arm_in(&r[1], 10);
	timer_arm_in(&r[2], 20);
	/* In the past: due at once. */
	r[3].due = 1;
	ipc_timer_arm(r[3].t, 1);
	assert_true(test_loop_until(l, &fired, 4, WAIT_MS));
	assert_int_equal(order[0], 3);
	assert_int_equal(order[1], 1);
	assert_int_equal(order[2], 2);
	assert_int_equal(order[3], 0);
	test_loop_spin(l, 40);
	assert_int_equal(fired, 4);
	for (unsigned i = 0; i < 4; i++)
		ipc_timer_free(r[i].t);
}

static void test_loop_timer_rearm_and_disarm(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	unsigned order[8], fired = 0;
	struct test_timer_rec r[3];

	timers_init(l, r, 3, order, &fired);
	assert_int_equal(ipc_timer_when(r[0].t), 0);
	/* Re-arming moves a timer: 0 now fires after 1. */
	timer_arm_in(&r[0], 10);
	timer_arm_in(&r[1], 20);
	timer_arm_in(&r[0], 40);
	assert_int_equal(ipc_timer_when(r[0].t), r[0].due);
	/* Disarmed: never fires. */
	timer_arm_in(&r[2], 5);
	ipc_timer_arm(r[2].t, 0);
	assert_int_equal(ipc_timer_when(r[2].t), 0);
	assert_true(test_loop_until(l, &fired, 2, WAIT_MS));
	assert_int_equal(order[0], 1);
	assert_int_equal(order[1], 0);
	assert_true(r[0].at >= r[0].due);
	/* A timer that fired is no longer armed. */
	assert_int_equal(ipc_timer_when(r[0].t), 0);
	test_loop_spin(l, 30);
	assert_int_equal(fired, 2);

	/* Disarming an idle timer is nothing; arming it again works. */
	ipc_timer_arm(r[2].t, 0);
	timer_arm_in(&r[2], 1);
	assert_true(test_loop_until(l, &fired, 3, WAIT_MS));
	assert_int_equal(order[2], 2);

	/* A timer re-arming itself in its callback. */
	r[1].rearm = 3;
	timer_arm_in(&r[1], 1);
	assert_true(test_loop_until(l, &fired, 7, WAIT_MS));
	test_loop_spin(l, 20);
	assert_int_equal(fired, 7);
	for (unsigned i = 0; i < 3; i++)
		ipc_timer_free(r[i].t);
	ipc_timer_free(NULL);
}

static void test_loop_timer_free_other_in_callback(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	unsigned order[8], fired = 0;
	struct test_timer_rec r[3];

	timers_init(l, r, 3, order, &fired);
	/* Due at the same time, in arming order: the first frees the second. */
	r[0].free_other = &r[1].t;
	r[0].due = r[1].due = mono_ns() + 5 * NSEC_PER_MSEC;
	ipc_timer_arm(r[0].t, r[0].due);
	ipc_timer_arm(r[1].t, r[1].due);
	/* Freed while armed: never fires. */
	timer_arm_in(&r[2], 1);
	ipc_timer_free(r[2].t);
	assert_true(test_loop_until(l, &fired, 1, WAIT_MS));
	test_loop_spin(l, 30);
	assert_int_equal(fired, 1);
	assert_int_equal(order[0], 0);
	assert_null(r[1].t);
	ipc_timer_free(r[0].t);
}

/*
 * Many timers, armed, re-armed, disarmed and freed in an order that leaves holes all through
 * the loop's heap, some freeing others as they fire: they fire by deadline, those of one
 * deadline in the order they were (last) armed, and no disarmed or freed one fires.
 */
#define MANY 2000u

struct many_expect {
	uint64_t due;
	uint64_t seq; /* the arming that counts: the last */
	unsigned number;
	int frees; /* the timer it frees as it fires, or -1 */
	bool armed;
	bool gone;
};

static int many_cmp(const void *a, const void *b)
{
	const struct many_expect *x = a, *y = b;

	if (x->due != y->due)
		return x->due < y->due ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void test_loop_timers_many_in_order(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct test_timer_rec *r = calloc(MANY, sizeof(*r));
	struct many_expect *e = calloc(MANY, sizeof(*e));
	unsigned *order = calloc(MANY, sizeof(*order)), *want = calloc(MANY, sizeof(*want));
	unsigned fired = 0, nwant = 0;
	uint64_t base = mono_ns() + 50 * NSEC_PER_MSEC, seq = 0;

	assert_non_null(r);
	assert_non_null(e);
	assert_non_null(order);
	assert_non_null(want);
	timers_init(l, r, MANY, order, &fired);
	/* 997 deadlines 10 µs apart for 2000 timers: many share one. */
	for (unsigned i = 0; i < MANY; i++) {
		r[i].due = base + (i * 7919u % 997u) * 10 * NSEC_PER_USEC;
		ipc_timer_arm(r[i].t, r[i].due);
		e[i] = (struct many_expect){
			.due = r[i].due, .seq = seq++, .number = i, .frees = -1, .armed = true
		};
	}
	for (unsigned i = 0; i < MANY; i++) {
		if (i % 3 == 0) {
			ipc_timer_arm(r[i].t, 0);
			e[i].armed = false;
		} else if (i % 5 == 0) {
			ipc_timer_free(r[i].t);
			r[i].t = NULL;
			e[i].armed = false;
		} else if (i % 7 == 0) {
			r[i].due = base + (i * 31u % 997u) * 10 * NSEC_PER_USEC;
			ipc_timer_arm(r[i].t, r[i].due);
			e[i].due = r[i].due;
			e[i].seq = seq++;
		}
	}
	for (unsigned i = 0; i < MANY; i++)
		if (r[i].t)
			assert_int_equal(ipc_timer_when(r[i].t), e[i].armed ? e[i].due : 0);
	/* Some free another armed one as they fire (it fires only if it came first). */
	for (unsigned i = 1; i + 1 < MANY; i += 11)
		if (e[i].armed && e[i + 1].armed) {
			r[i].free_other = &r[i + 1].t;
			e[i].frees = (int)(i + 1);
		}
	/* What must fire, and in which order. */
	qsort(e, MANY, sizeof(*e), many_cmp);
	for (unsigned i = 0; i < MANY; i++) {
		if (!e[i].armed || e[i].gone)
			continue;
		want[nwant++] = e[i].number;
		for (unsigned j = i + 1; e[i].frees >= 0 && j < MANY; j++)
			if (e[j].number == (unsigned)e[i].frees)
				e[j].gone = true;
	}
	assert_true(nwant > MANY / 3);
	assert_true(test_loop_until(l, &fired, nwant, WAIT_MS));
	test_loop_spin(l, 20);
	assert_int_equal(fired, nwant);
	assert_memory_equal(order, want, nwant * sizeof(*want));
	for (unsigned i = 0; i < MANY; i++)
		ipc_timer_free(r[i].t);
	free(want);
	free(order);
	free(e);
	free(r);
}

static void rearm_in_past(struct ipc_timer *t, void *userdata)
{
	unsigned *fired = userdata;

	if (++*fired < 100000)
		ipc_timer_arm(t, 1);
}

static void test_loop_timer_rearmed_in_past_yields(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	struct test_watch_rec r = { .drain = true };
	struct ipc_timer *t;
	unsigned fired = 0;
	uint64_t one = 1;

	/* A callback that keeps arming its timer for a time already past gets one call per
	 * round, and the loop keeps serving fds between them. */
	r.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	assert_true(r.fd >= 0);
	assert_int_equal(ipc_watch_new(l, r.fd, POLLIN, test_watch_cb, &r, &r.w), 0);
	assert_int_equal(ipc_timer_new(l, rearm_in_past, &fired, &t), 0);
	ipc_timer_arm(t, 1);
	assert_int_equal(ipc_loop_iterate(l, 0), 0);
	assert_int_equal(fired, 1);
	assert_int_equal(write(r.fd, &one, sizeof(one)), sizeof(one));
	assert_true(test_loop_until(l, &r.calls, 1, WAIT_MS));
	assert_true(fired < 100000);
	ipc_timer_free(t);
	ipc_watch_free(r.w);
	(void)close(r.fd);
}

static void test_loop_iterate_wakes_for_timer(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	unsigned order[2], fired = 0;
	struct test_timer_rec r;
	uint64_t start = mono_ns();

	timers_init(l, &r, 1, order, &fired);
	timer_arm_in(&r, 20);
	/* No limit given: the timer bounds the wait (a broken loop dies by SIGALRM). */
	(void)alarm(10);
	while (fired == 0)
		assert_int_equal(ipc_loop_iterate(l, -1), 0);
	(void)alarm(0);
	assert_true(mono_ns() - start >= 20 * NSEC_PER_MSEC);
	assert_true(mono_ns() - start < 2 * NSEC_PER_SEC);
	ipc_timer_free(r.t);
}

/* ---- run and exit ---- */

static void exit_on_watch(struct ipc_watch *w, int fd, uint32_t revents, void *userdata)
{
	uint64_t v;

	assert_int_equal(read(fd, &v, sizeof(v)), sizeof(v));
	ipc_loop_exit(userdata, -7);
}

static void test_loop_run_until_exit(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	unsigned order[2], fired = 0;
	struct ipc_watch *w;
	struct test_timer_rec r;
	uint64_t one = 1;
	int efd;

	timers_init(l, &r, 1, order, &fired);
	r.exit_loop = l;
	timer_arm_in(&r, 5);
	(void)alarm(10);
	assert_int_equal(ipc_loop_run(l), 42);
	assert_int_equal(fired, 1);

	/* Again, from a watch this time: run starts afresh. */
	efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	assert_true(efd >= 0);
	assert_int_equal(ipc_watch_new(l, efd, POLLIN, exit_on_watch, l, &w), 0);
	assert_int_equal(write(efd, &one, sizeof(one)), sizeof(one));
	assert_int_equal(ipc_loop_run(l), -7);
	(void)alarm(0);
	ipc_watch_free(w);
	ipc_timer_free(r.t);
	(void)close(efd);
}

static void test_loop_exit_before_run(void **state)
{
	struct ipc_loop *l = test_loop_of(state);
	static const int codes[] = { 13, 0, -5 };
	unsigned order[2], fired = 0;
	struct test_timer_rec r;

	/* Nothing to wait for: a run that did not see the exit would block (and die by SIGALRM). */
	(void)alarm(10);
	for (size_t i = 0; i < ARRAY_SIZE(codes); i++) {
		ipc_loop_exit(l, codes[i]);
		assert_int_equal(ipc_loop_run(l), codes[i]);
	}
	/* The exit was used up: the next run goes on until the next exit. */
	timers_init(l, &r, 1, order, &fired);
	r.exit_loop = l;
	timer_arm_in(&r, 5);
	assert_int_equal(ipc_loop_run(l), 42);
	assert_int_equal(fired, 1);
	(void)alarm(0);
	ipc_timer_free(r.t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		LOOP_TEST(test_loop_timers_fire_in_order),
		LOOP_TEST(test_loop_timer_rearm_and_disarm),
		LOOP_TEST(test_loop_timer_free_other_in_callback),
		LOOP_TEST(test_loop_timers_many_in_order),
		LOOP_TEST(test_loop_timer_rearmed_in_past_yields),
		LOOP_TEST(test_loop_iterate_wakes_for_timer),
		LOOP_TEST(test_loop_run_until_exit),
		LOOP_TEST(test_loop_exit_before_run),
	};

	return cmocka_run_group_tests_name("ipc-loop-timer", tests, NULL, NULL);
}
