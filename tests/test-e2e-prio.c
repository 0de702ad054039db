/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-prio.c: queues' priorities: taken first, turns among equals, gpuxd's policy. */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/*
 * A worker of one default slot (--slots 1), so that work of priority 0 queues in one line: a
 * request of a higher priority is bound to a slot of its own and does not wait behind it.
 * Nothing here is timed: a request that should go first is waited for while the others are
 * held back by a kernel that waits for a flag, which the test sets only afterwards.
 */

#define SLOT_DEPTH 256u

static int setup(void **state)
{
	static const char *const args[] = { "--slots", "1", NULL };

	*state = test_env_open(args);
	return 0;
}

static struct gpux_queue_opts prio_opts(int32_t prio)
{
	return (struct gpux_queue_opts){
		.size = sizeof(struct gpux_queue_opts),
		.flags = GPUX_QUEUE_PRIORITY,
		.priority = prio,
	};
}

static gpux_buf *new_log(gpux_ctx *ctx, uint32_t n)
{
	gpux_buf *b;

	assert_int_equal(gpux_buf_alloc(ctx, (n + 1) * sizeof(uint32_t), &b), GPUX_OK);
	memset(gpux_buf_data(b), 0, (n + 1) * sizeof(uint32_t));
	return b;
}

/* Submit appends of first..first+n-1 to log on queue q (NULL: the default one) into r. */
static void submit_appends(gpux_module *m, gpux_queue *q, gpux_buf *log, uint32_t first, uint32_t n,
			   gpux_req **r)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .queue = q };

	for (uint32_t i = first; i < first + n; i++) {
		struct gpux_arg args[] = { GPUX_ARG_VALUE(i),
					   gpux_arg_mapped(log, 0, gpux_buf_size(log)) };

		assert_int_equal(gpux_submit(m, "append", &l, args, 2, &r[i - first]), GPUX_OK);
	}
}

/* log holds first..first+n-1 in order, and nothing else. */
static void assert_log(const gpux_buf *log, uint32_t n)
{
	const uint32_t *p = gpux_buf_data((gpux_buf *)log);

	assert_int_equal(p[0], n);
	for (uint32_t i = 0; i < n; i++)
		if (p[1 + i] != i)
			fail_msg("log entry %u is %u", i, p[1 + i]);
}

/* The gate: a kernel on queue q (NULL: the default one) that holds its slot until flag is set. */
static gpux_req *gate(gpux_module *m, gpux_queue *q, gpux_buf *flag)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .queue = q };
	struct gpux_arg a[] = { gpux_arg_mapped(flag, 0, sizeof(int)),
				gpux_arg_mapped(flag, sizeof(int), sizeof(int)) };
	gpux_req *r;

	assert_int_equal(gpux_submit(m, "wait_flag", &l, a, 2, &r), GPUX_OK);
	return r;
}

static void wait_all(gpux_req **r, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(gpux_wait(r[i], -1), GPUX_OK);
		gpux_req_free(r[i]);
	}
}

static struct ipc_sched sched_now(const struct test_env *e)
{
	struct ipc_status st;
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[0].stats.sched;
}

/*
 * A best-effort client fills the one default slot behind a kernel that holds it, and more
 * than a slot's depth waits in line; another client's request on a queue of the highest
 * priority then runs at once, while all of those still wait.
 */
static void test_prio_high_is_not_behind_best_effort(void **state)
{
	struct test_env *e = *state;
	enum { N = 2 * SLOT_DEPTH };
	static gpux_req *be[N];
	struct gpux_queue_opts o = prio_opts(GPUX_PRIORITY_MAX);
	gpux_ctx *other = test_connect(&e->d);
	gpux_module *om = test_load_host_kernels(other);
	gpux_buf *flag = new_log(e->ctx, 1), *log = new_log(e->ctx, N), *hlog = new_log(other, 1);
	gpux_req *g = gate(e->m, NULL, flag), *h;
	gpux_queue *q;

	submit_appends(e->m, NULL, log, 0, N, be);
	assert_int_equal(gpux_queue_open_ex(other, 0, &o, &q), GPUX_OK);
	submit_appends(om, q, hlog, 0, 1, &h);
	assert_int_equal(gpux_wait(h, 10000), GPUX_OK);
	assert_log(hlog, 1);
	/* Nothing of the best-effort client's ran meanwhile: the gate still holds its slot. */
	assert_int_equal(((uint32_t *)gpux_buf_data(log))[0], 0);
	assert_int_equal(gpux_test(g), GPUX_E_AGAIN);
	((volatile int *)gpux_buf_data(flag))[0] = 1;
	assert_int_equal(gpux_wait(g, -1), GPUX_OK);
	gpux_req_free(g);
	wait_all(be, N);
	assert_log(log, N);
	gpux_req_free(h);
	gpux_queue_free(q);
	gpux_buf_free(hlog);
	gpux_buf_free(log);
	gpux_buf_free(flag);
	gpux_module_free(om);
	gpux_disconnect(other);
}

/*
 * The same through the context's default queue (gpux_set_default_queue()): the default
 * queue of a latency-critical client has the priority too.
 */
static void test_prio_default_queue_of_a_context(void **state)
{
	struct test_env *e = *state;
	struct gpux_queue_opts o = prio_opts(1);
	gpux_ctx *other = test_connect(&e->d);
	gpux_module *om = test_load_host_kernels(other);
	gpux_buf *flag = new_log(e->ctx, 1), *hlog = new_log(other, 1);
	gpux_req *g = gate(e->m, NULL, flag), *h;
	struct ipc_sched s0 = sched_now(e), s1;

	assert_int_equal(gpux_set_default_queue(other, &o), GPUX_OK);
	submit_appends(om, NULL, hlog, 0, 1, &h);
	assert_int_equal(gpux_wait(h, 10000), GPUX_OK);
	assert_int_equal(gpux_test(g), GPUX_E_AGAIN);
	s1 = sched_now(e);
	/* It started at level 1 (priority 1), the gate at level 0 before it. */
	assert_int_equal(s1.launches[1 - IPC_PRIO_MIN] - s0.launches[1 - IPC_PRIO_MIN], 1);
	((volatile int *)gpux_buf_data(flag))[0] = 1;
	assert_int_equal(gpux_wait(g, -1), GPUX_OK);
	gpux_req_free(g);
	gpux_req_free(h);
	gpux_buf_free(hlog);
	gpux_buf_free(flag);
	gpux_module_free(om);
	gpux_disconnect(other);
}

/*
 * Equals take turns: two clients' queues of one priority share its slot, and a client with a
 * thousand slow requests there puts at most a slot's depth and two turns before another's.
 */
static void test_prio_equals_take_turns(void **state)
{
	struct test_env *e = *state;
	enum { N = 1000 };
	static gpux_req *busy[N];
	struct gpux_queue_opts o = prio_opts(GPUX_PRIORITY_MAX);
	uint32_t us = 2000;
	struct gpux_arg spin = GPUX_ARG_VALUE(us);
	gpux_ctx *other = test_connect(&e->d);
	gpux_module *om = test_load_host_kernels(other);
	gpux_buf *log = new_log(other, 1);
	gpux_queue *q, *oq;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	unsigned before = 0, done = 0;
	gpux_req *r;

	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_OK);
	assert_int_equal(gpux_queue_open_ex(other, 0, &o, &oq), GPUX_OK);
	l.queue = q;
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(gpux_submit(e->m, "spin_us", &l, &spin, 1, &busy[i]), GPUX_OK);
	for (uint32_t i = 0; i < N; i++)
		before += gpux_test(busy[i]) == GPUX_OK;
	submit_appends(om, oq, log, 0, 1, &r);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	for (uint32_t i = 0; i < N; i++)
		done += gpux_test(busy[i]) == GPUX_OK;
	if (done - before > SLOT_DEPTH + 64)
		fail_msg(
			"%u of the busy client's %u requests ended after the other's was submitted "
			"and before it ended",
			done - before, N);
	gpux_req_free(r);
	wait_all(busy, N);
	gpux_queue_free(oq);
	gpux_queue_free(q);
	gpux_buf_free(log);
	gpux_module_free(om);
	gpux_disconnect(other);
}

/*
 * A queue that changes priority with requests still in its old slot keeps its order: what
 * came after the change waits for what came before, in the old slot behind the gate.
 */
static void test_prio_change_keeps_order(void **state)
{
	struct test_env *e = *state;
	enum { N = 300 };
	static gpux_req *r[2 * N];
	struct gpux_queue_opts o = prio_opts(GPUX_PRIORITY_MAX);
	gpux_buf *flag = new_log(e->ctx, 1), *log = new_log(e->ctx, 2 * N);
	gpux_req *g = gate(e->m, NULL, flag);

	submit_appends(e->m, NULL, log, 0, N, r);
	assert_int_equal(gpux_set_default_queue(e->ctx, &o), GPUX_OK);
	submit_appends(e->m, NULL, log, N, N, r + N);
	/* The later ones are of the highest priority, but wait for their queue's earlier ones. */
	assert_int_equal(gpux_wait(r[N], 300), GPUX_E_AGAIN);
	assert_int_equal(((uint32_t *)gpux_buf_data(log))[0], 0);
	((volatile int *)gpux_buf_data(flag))[0] = 1;
	assert_int_equal(gpux_wait(g, -1), GPUX_OK);
	gpux_req_free(g);
	wait_all(r, 2 * N);
	assert_log(log, 2 * N);
	assert_int_equal(gpux_set_default_queue(e->ctx, NULL), GPUX_OK);
	gpux_buf_free(log);
	gpux_buf_free(flag);
}

/* Options out of range, and sizes this library does not know. */
static void test_prio_options_checked(void **state)
{
	struct test_env *e = *state;
	struct gpux_queue_opts o = prio_opts(GPUX_PRIORITY_MAX + 1);
	struct {
		struct gpux_queue_opts o;
		uint64_t more;
	} big = { prio_opts(0), 0 };
	gpux_queue *q = NULL;
	int32_t max, def;

	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_E_INVAL);
	o = prio_opts(GPUX_PRIORITY_MIN - 1);
	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_E_INVAL);
	o = prio_opts(0);
	o.share = GPUX_SHARE_MAX + 1;
	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_E_INVAL);
	assert_int_equal(gpux_set_default_queue(e->ctx, &o), GPUX_E_INVAL);
	o = prio_opts(0);
	o.flags = 0x2;
	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_E_INVAL);
	o = prio_opts(0);
	o.size = sizeof(o) - 1;
	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_E_INVAL);
	big.o.size = sizeof(big);
	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &big.o, &q), GPUX_OK);
	gpux_queue_free(q);
	big.more = 1;
	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &big.o, &q), GPUX_E_INVAL);
	assert_int_equal(gpux_queue_open_ex(e->ctx, GPUX_ANY, NULL, &q), GPUX_E_INVAL);
	/* gpuxd's own user: every priority; 0 by default. */
	assert_int_equal(gpux_priority_limits(e->ctx, &max, &def), GPUX_OK);
	assert_int_equal(max, GPUX_PRIORITY_MAX);
	assert_int_equal(def, 0);
}

/*
 * On the host back end a share is taken and ignored, as the status says: the queue runs on
 * the default slots, and no stream is made for it.
 */
static void test_prio_host_has_no_shares(void **state)
{
	struct test_env *e = *state;
	struct gpux_queue_opts o = { .size = sizeof(o), .share = 25 };
	struct ipc_sched s;
	gpux_queue *q;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };

	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_OK);
	l.queue = q;
	assert_int_equal(gpux_run(e->m, "empty", &l, NULL, 0), GPUX_OK);
	s = sched_now(e);
	assert_int_equal(s.share_sms, 0);
	assert_int_equal(s.share_streams, 0);
	assert_non_null(strstr(s.share_note, "host back end"));
	for (unsigned i = 0; i < IPC_PRIO_LEVELS; i++)
		assert_int_equal(s.stream_prio[i], IPC_STREAM_PRIO_NONE);
	gpux_queue_free(q);
}

/* ---- gpuxd's policy (--priority) ---- */

static struct test_env *policy_env(const char *rule)
{
	const char *const args[] = { "--priority", rule, NULL };

	return test_env_open(args);
}

/* A raw client's QUEUE_CONFIG of queue 0: the DONE's status when `id` is not 0. */
static int raw_config(int chan, uint32_t id, int32_t prio)
{
	struct ipc_queue_config c = { .queue = 0, .priority = prio, .flags = IPC_QUEUE_PRIORITY };
	uint8_t buf[256];
	char text[256];
	int n = ipc_encode_queue_config(buf, sizeof(buf), id, &c);

	assert_true(n > 0);
	if (id)
		return test_raw_call(chan, buf, (size_t)n, text, sizeof(text));
	assert_int_equal(send(chan, buf, (size_t)n, MSG_NOSIGNAL), n);
	return 0;
}

/*
 * A rule for this user (the test's own, which gpuxd's owner would otherwise be): at most 1,
 * 1 by default. Asking for more is refused by the library and by the worker; the worker
 * lowers what a client sends without waiting for an answer; the default queue runs at 1.
 */
static void test_prio_policy_enforced(void **state)
{
	char rule[64];
	struct test_env *e;
	struct gpux_queue_opts o = prio_opts(GPUX_PRIORITY_MAX);
	struct ipc_sched s0, s1;
	gpux_queue *q;
	int32_t max, def;
	int sup, chan;

	(void)state;
	(void)snprintf(rule, sizeof(rule), "user:%u=1/1", (unsigned)getuid());
	e = policy_env(rule);
	assert_int_equal(gpux_priority_limits(e->ctx, &max, &def), GPUX_OK);
	assert_int_equal(max, 1);
	assert_int_equal(def, 1);
	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_E_PERM);
	assert_int_equal(gpux_set_default_queue(e->ctx, &o), GPUX_E_PERM);
	o = prio_opts(1);
	assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_OK);
	gpux_queue_free(q);

	/* The default queue is at the rule's default: level 1. */
	s0 = sched_now(e);
	test_env_still_serves(e);
	s1 = sched_now(e);
	assert_int_equal(s1.launches[1 - IPC_PRIO_MIN] - s0.launches[1 - IPC_PRIO_MIN], 1);
	/* Lower is always allowed. */
	o = prio_opts(GPUX_PRIORITY_MIN);
	assert_int_equal(gpux_set_default_queue(e->ctx, &o), GPUX_OK);
	test_env_still_serves(e);
	s0 = sched_now(e);
	assert_int_equal(s0.launches[0] - s1.launches[0], 1);

	/* A client that skips the library: refused when it waits for an answer, else lowered
	 * to its highest. */
	chan = test_raw_channel(&e->d, &sup);
	assert_int_equal(raw_config(chan, 7, GPUX_PRIORITY_MAX), GPUX_E_PERM);
	assert_int_equal(raw_config(chan, 8, 1), GPUX_OK);
	assert_int_equal(raw_config(chan, 0, GPUX_PRIORITY_MAX), 0);
	assert_int_equal(raw_config(chan, 9, GPUX_PRIORITY_MIN), GPUX_OK);
	(void)close(chan);
	(void)close(sup);
	test_env_close(e);
}

/* Without a rule that names them, other users may ask for 0 at most; a rule for everybody
 * ("*") holds for gpuxd's own user too. */
static void test_prio_policy_everybody(void **state)
{
	struct test_env *e = policy_env("group:0=2,*=-1");
	struct gpux_queue_opts o = prio_opts(0);
	gpux_queue *q;
	int32_t max, def;

	(void)state;
	assert_int_equal(gpux_priority_limits(e->ctx, &max, &def), GPUX_OK);
	if (getgid() == 0) {
		/* Root's group: the first rule. */
		assert_int_equal(max, GPUX_PRIORITY_MAX);
	} else {
		assert_int_equal(max, GPUX_PRIORITY_MIN);
		assert_int_equal(def, GPUX_PRIORITY_MIN);
		assert_int_equal(gpux_queue_open_ex(e->ctx, 0, &o, &q), GPUX_E_PERM);
		test_env_still_serves(e);
	}
	test_env_close(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prio_high_is_not_behind_best_effort),
		cmocka_unit_test(test_prio_default_queue_of_a_context),
		cmocka_unit_test(test_prio_equals_take_turns),
		cmocka_unit_test(test_prio_change_keeps_order),
		cmocka_unit_test(test_prio_options_checked),
		cmocka_unit_test(test_prio_host_has_no_shares),
	};
	const struct CMUnitTest policy[] = {
		cmocka_unit_test(test_prio_policy_enforced),
		cmocka_unit_test(test_prio_policy_everybody),
	};
	int r = cmocka_run_group_tests_name("one slot", tests, setup, test_env_teardown);

	return r | cmocka_run_group_tests_name("policy", policy, NULL, NULL);
}
