/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-fork.c: forked children use their parent's objects and buffers, undisturbing it. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

#define CHILDREN 16
#define N 8192

static gpux_status saxpy(gpux_module *m, uint32_t dev, float a, gpux_buf *x, gpux_buf *y,
			 gpux_buf *out, uint64_t slice)
{
	uint64_t n = N;
	struct gpux_arg args[] = {
		GPUX_ARG_VALUE(n),
		GPUX_ARG_VALUE(a),
		gpux_arg_in(x, 0, N * 4),
		gpux_arg_in(y, 0, N * 4),
		gpux_arg_out(out, slice * N * 4, N * 4),
	};
	struct gpux_launch l = test_launch_1d(N, dev, NULL);

	return gpux_run(m, "saxpy", &l, args, 5);
}

static bool slice_ok(gpux_buf *x, gpux_buf *y, gpux_buf *out, uint64_t slice, float a)
{
	const float *px = gpux_buf_data(x), *py = gpux_buf_data(y);
	const float *po = (const float *)gpux_buf_data(out) + slice * N;

	for (uint64_t i = 0; i < N; i++)
		if (po[i] != a * px[i] + py[i])
			return false;
	return true;
}

/* In a child: the inherited module and buffers, and a buffer of its own. */
static int child_main(struct test_env *e, unsigned k, gpux_buf *x, gpux_buf *y, gpux_buf *out)
{
	uint64_t n = 1000, seed = k + 1;
	gpux_buf *mine, *res;
	struct gpux_launch l = test_launch_1d(1000, GPUX_ANY, NULL);

	if (saxpy(e->m, k % 2, (float)(k + 1), x, y, out, k) != GPUX_OK)
		return 10;
	if (!slice_ok(x, y, out, k, (float)(k + 1)))
		return 11;
	if (gpux_buf_alloc(e->ctx, n * 4, &mine) || gpux_buf_alloc(e->ctx, n * 4, &res))
		return 12;
	test_fill_random(gpux_buf_data(mine), n, &seed);
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(mine, 0, n * 4),
					   gpux_arg_out(res, 0, n * 4) };
		if (gpux_run(e->m, "add1", &l, args, 3) != GPUX_OK)
			return 13;
	}
	for (uint64_t i = 0; i < n; i++)
		if (((float *)gpux_buf_data(res))[i] != ((float *)gpux_buf_data(mine))[i] + 1)
			return 14;
	gpux_buf_free(mine);
	gpux_buf_free(res);
	return 0;
}

static void test_e2e_fork_children_use_inherited_objects(void **state)
{
	struct test_env *e = *state;
	uint64_t seed = (uint64_t)getpid();
	gpux_buf *x, *y, *out;
	pid_t pids[CHILDREN];

	assert_int_equal(gpux_buf_alloc(e->ctx, N * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, N * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, (CHILDREN + 1) * N * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), N, &seed);
	test_fill_random(gpux_buf_data(y), N, &seed);
	/* The parent has used everything before forking. */
	assert_int_equal(saxpy(e->m, 0, 100.0f, x, y, out, CHILDREN), GPUX_OK);

	for (unsigned k = 0; k < CHILDREN; k++) {
		pids[k] = fork();
		assert_true(pids[k] >= 0);
		if (pids[k] == 0)
			_exit(child_main(e, k, x, y, out));
	}
	for (unsigned k = 0; k < CHILDREN; k++)
		assert_child_ok(pids[k]);
	/* The children's results are in the shared buffer, and the parent goes on as before. */
	for (unsigned k = 0; k < CHILDREN; k++)
		assert_true(slice_ok(x, y, out, k, (float)(k + 1)));
	assert_true(slice_ok(x, y, out, CHILDREN, 100.0f));
	assert_int_equal(saxpy(e->m, 1, -2.0f, x, y, out, CHILDREN), GPUX_OK);
	assert_true(slice_ok(x, y, out, CHILDREN, -2.0f));
	gpux_buf_free(out);
	gpux_buf_free(y);
	gpux_buf_free(x);
}

static void test_e2e_fork_parent_requests_stay_the_parents(void **state)
{
	struct test_env *e = *state;
	gpux_req *r;
	pid_t pid;
	int st;

	assert_int_equal(test_spin_submit(e->m, 0, 200, &r), GPUX_OK);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* The parent's request is not the child's to wait for; the child has its own. */
		if (gpux_wait(r, 1000) != GPUX_E_INVAL)
			_exit(20);
		if (test_spin_run(e->m, 0, 0) != GPUX_OK)
			_exit(21);
		/* A grandchild too. */
		pid = fork();
		if (pid == 0)
			_exit(test_spin_run(e->m, 0, 0) == GPUX_OK ? 0 : 22);
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
			_exit(23);
		_exit(WEXITSTATUS(st));
	}
	assert_child_ok(pid);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);
}

/* In a child, every call on a parent's request says it is the parent's: none waits for ever. */
static void test_e2e_fork_parent_request_polled_in_child(void **state)
{
	struct test_env *e = *state;
	gpux_req *r;
	pid_t pid;
	int st;

	assert_int_equal(test_spin_submit(e->m, 0, 1000, &r), GPUX_OK);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct gpux_times t;

		if (gpux_test(r) != GPUX_E_INVAL)
			_exit(30);
		if (!strstr(gpux_req_message(r), "parent"))
			_exit(31);
		if (gpux_req_times(r, &t) != GPUX_OK)
			_exit(32);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* The same, with the first call in the child being gpux_req_message() or gpux_req_times(). */
static void test_e2e_fork_parent_request_message_in_child(void **state)
{
	struct test_env *e = *state;
	gpux_req *r;
	pid_t pid[2];

	assert_int_equal(test_spin_submit(e->m, 0, 1000, &r), GPUX_OK);
	for (unsigned k = 0; k < 2; k++) {
		pid[k] = fork();
		assert_true(pid[k] >= 0);
		if (pid[k] == 0) {
			struct gpux_times t;

			if (k == 0)
				_exit(strstr(gpux_req_message(r), "parent") ? 0 : 40);
			_exit(gpux_req_times(r, &t) == GPUX_OK ? 0 : 41);
		}
	}
	for (unsigned k = 0; k < 2; k++)
		assert_child_ok(pid[k]);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);
}

/*
 * Buffers alive at a fork() may be used by the child after the parent has freed them: the
 * parent's new buffers never take their memory (a small one's arena pages, a large one's
 * segment), so the zeroes and bytes it writes there do not reach the child's. The child checks
 * its bytes after the parent has freed and made buffers of the same sizes and written them.
 */
static void test_e2e_fork_freed_memory_not_under_a_child(void **state)
{
	static const size_t sizes[] = { 4096, 1u << 20 };
	struct test_env *e = *state;
	gpux_buf *b[2], *again[2];
	int go[2];
	pid_t pid;
	char c = 0;

	for (unsigned i = 0; i < 2; i++) {
		assert_int_equal(gpux_buf_alloc(e->ctx, sizes[i], &b[i]), GPUX_OK);
		memset(gpux_buf_data(b[i]), 0x3c, sizes[i]);
	}
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		(void)close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(50);
		for (unsigned i = 0; i < 2; i++)
			for (size_t k = 0; k < sizes[i]; k++)
				if (((const uint8_t *)gpux_buf_data(b[i]))[k] != 0x3c)
					_exit(51 + (int)i);
		_exit(0);
	}
	(void)close(go[0]);
	for (unsigned i = 0; i < 2; i++) {
		gpux_buf_free(b[i]);
		assert_int_equal(gpux_buf_alloc(e->ctx, sizes[i], &again[i]), GPUX_OK);
		memset(gpux_buf_data(again[i]), 0x55, sizes[i]);
	}
	assert_int_equal(write(go[1], &c, 1), 1);
	(void)close(go[1]);
	assert_child_ok(pid);
	for (unsigned i = 0; i < 2; i++)
		gpux_buf_free(again[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e2e_fork_children_use_inherited_objects),
		cmocka_unit_test(test_e2e_fork_parent_requests_stay_the_parents),
		cmocka_unit_test(test_e2e_fork_parent_request_polled_in_child),
		cmocka_unit_test(test_e2e_fork_parent_request_message_in_child),
		cmocka_unit_test(test_e2e_fork_freed_memory_not_under_a_child),
	};

	return cmocka_run_group_tests(tests, test_env_setup_two_devices, test_env_teardown);
}
