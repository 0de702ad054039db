/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-loop.c: an event loop on gpux_fd() misses no completion, whoever took it in. */
#include <poll.h>
#include <stdlib.h>

#include "e2e.h"
#include "helpers.h"

/* How long a poll that must find gpux_fd() readable may wait: never reached unless broken. */
#define READABLE_MS 10000

/*
 * hold: a request that stays in flight until the test sets its flag (60 s at most), so that
 * nothing but what a test looks at can make gpux_fd() readable meanwhile.
 */
static const char kernels[] = "#include <time.h>\n"
			      "GPUX_HOST_PARAMS(hold, sizeof(int *));\n"
			      "GPUX_HOST_KERNEL(hold)\n"
			      "{\n"
			      "	volatile int *flag = GPUX_ARG(int *, 0);\n"
			      "	struct timespec ms = { 0, 1000000 };\n"
			      "	for (int i = 0; i < 60000 && !*flag; i++)\n"
			      "		nanosleep(&ms, NULL);\n"
			      "}\n"
			      "GPUX_HOST_KERNEL(empty)\n"
			      "{\n"
			      "}\n";

struct loop_env {
	struct test_env *e;
	gpux_module *m;
	int fd;
	gpux_buf *flag;
	gpux_req *held;
};

static int setup(void **state)
{
	static const char *const args[] = { "--host-devices", "2", NULL };
	struct loop_env *le = calloc(1, sizeof(*le));
	char *log = NULL;

	assert_non_null(le);
	le->e = test_env_open(args);
	assert_int_equal(gpux_device_count(le->e->ctx), 2);
	assert_int_equal(gpux_module_load(le->e->ctx, GPUX_LANG_HOST, kernels, sizeof(kernels) - 1,
					  NULL, &le->m, &log),
			 GPUX_OK);
	free(log);
	assert_int_equal(gpux_fd(le->e->ctx, &le->fd), GPUX_OK);
	*state = le;
	return 0;
}

static int teardown(void **state)
{
	struct loop_env *le = *state;

	gpux_module_free(le->m);
	test_env_close(le->e);
	free(le);
	return 0;
}

/* Whether gpux_fd() polls readable within ms. */
static bool readable(const struct loop_env *le, int ms)
{
	struct pollfd p = { .fd = le->fd, .events = POLLIN };
	int n = poll(&p, 1, ms);

	assert_true(n >= 0);
	return n == 1;
}

/* Put a request in flight on device 0 that lasts until hold_end(). */
static void hold_start(struct loop_env *le)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = 0 };
	struct gpux_arg arg;

	assert_int_equal(gpux_buf_alloc(le->e->ctx, sizeof(int), &le->flag), GPUX_OK);
	*(volatile int *)gpux_buf_data(le->flag) = 0;
	arg = gpux_arg_mapped(le->flag, 0, sizeof(int));
	assert_int_equal(gpux_submit(le->m, "hold", &l, &arg, 1, &le->held), GPUX_OK);
}

static void hold_end(struct loop_env *le)
{
	*(volatile int *)gpux_buf_data(le->flag) = 1;
	assert_int_equal(gpux_wait(le->held, -1), GPUX_OK);
	gpux_req_free(le->held);
	gpux_buf_free(le->flag);
}

static gpux_req *submit_empty(struct loop_env *le, uint32_t device)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = device };
	gpux_req *r;

	assert_int_equal(gpux_submit(le->m, "empty", &l, NULL, 0, &r), GPUX_OK);
	return r;
}

/*
 * The loop's step: gpux_process(), which reads what was announced; then, with only the held
 * request in flight, nothing is left to make gpux_fd() readable (no busy loop).
 */
static void process_leaves_fd_quiet(struct loop_env *le)
{
	assert_int_equal(gpux_process(le->e->ctx), GPUX_OK);
	assert_false(readable(le, 0));
}

/*
 * An event loop tests one request (gpux_test() takes in what has arrived) while another's
 * completion arrives: gpux_test() takes that in too, and the channel goes quiet. gpux_fd()
 * must stay readable until gpux_process(), or the loop would never look at the other again.
 */
static void test_loop_test_of_one_leaves_the_other_announced(void **state)
{
	struct loop_env *le = *state;
	gpux_req *quick;

	hold_start(le);
	quick = submit_empty(le, 1);
	/* Only gpux_test() of the held request takes anything in here. */
	while (!gpux_req_done(quick)) {
		assert_true(readable(le, READABLE_MS));
		assert_int_equal(gpux_test(le->held), GPUX_E_AGAIN);
	}
	assert_true(readable(le, READABLE_MS));
	process_leaves_fd_quiet(le);
	assert_int_equal(gpux_test(quick), GPUX_OK);
	gpux_req_free(quick);
	hold_end(le);
}

/*
 * gpux_wait() of a request takes in the earlier completions of its queue. Theirs stay
 * announced, and another wait meanwhile (its thread sleeping in the library's own epoll) does
 * not take that news away.
 */
static void test_loop_wait_of_one_leaves_earlier_announced(void **state)
{
	struct loop_env *le = *state;
	gpux_req *first, *second, *third;

	hold_start(le);
	first = submit_empty(le, 1);
	second = submit_empty(le, 1);
	assert_int_equal(gpux_wait(second, -1), GPUX_OK);
	assert_true(gpux_req_done(first));
	assert_true(readable(le, READABLE_MS));
	third = submit_empty(le, 1);
	assert_int_equal(gpux_wait(third, -1), GPUX_OK);
	assert_true(readable(le, READABLE_MS));
	process_leaves_fd_quiet(le);
	assert_int_equal(gpux_test(first), GPUX_OK);
	gpux_req_free(first);
	gpux_req_free(second);
	gpux_req_free(third);
	hold_end(le);
}

/*
 * The documented loop with gpux_req_done(): it takes nothing in, so a request is seen done
 * only after the gpux_process() that took in its completion, however readable the fd is.
 */
static void test_loop_req_done_takes_nothing_in(void **state)
{
	struct loop_env *le = *state;
	gpux_req *r = submit_empty(le, 1);

	for (;;) {
		assert_true(readable(le, READABLE_MS));
		assert_false(gpux_req_done(r));
		assert_int_equal(gpux_process(le->e->ctx), GPUX_OK);
		if (gpux_req_done(r))
			break;
	}
	assert_int_equal(gpux_test(r), GPUX_OK);
	gpux_req_free(r);
	/* A handle that is not a live request is not done. */
	assert_false(gpux_req_done(r));
	assert_false(gpux_req_done(NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_loop_test_of_one_leaves_the_other_announced,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_loop_wait_of_one_leaves_earlier_announced,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_loop_req_done_takes_nothing_in, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
