/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-share.c: a buffer handed to another process by its memfd (gpux_buf_fd/_import). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

#define N 4096

static gpux_status add1(gpux_module *m, gpux_buf *in, uint64_t in_off, gpux_buf *out,
			uint64_t out_off)
{
	uint64_t n = N;
	struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(in, in_off, N * 4),
				   gpux_arg_out(out, out_off, N * 4) };
	struct gpux_launch l = test_launch_1d(N, GPUX_ANY, NULL);

	return gpux_run(m, "add1", &l, args, 3);
}

/*
 * In the child: a connection of its own, which never saw the parent's buffers, gets their
 * memfds over a socket, imports them, and runs a kernel from one into the other.
 */
static int child_main(struct test_env *e, int sock)
{
	uint64_t offs[2];
	int fds[TEST_RAW_FDS_MAX];
	unsigned nfds = 0;
	gpux_ctx *ctx;
	gpux_module *m;
	gpux_buf *in, *out;
	char *log = NULL;

	if (test_recv_wait(sock, offs, sizeof(offs), fds, &nfds, 5000) != sizeof(offs) || nfds != 2)
		return 10;
	if (gpux_connect(e->d.sock, &ctx) != GPUX_OK)
		return 11;
	if (gpux_module_load(ctx, GPUX_LANG_HOST, test_host_kernels, test_host_kernels_len, NULL,
			     &m, &log) != GPUX_OK)
		return 12;
	free(log);
	if (gpux_buf_import(ctx, fds[0], &in) != GPUX_OK ||
	    gpux_buf_import(ctx, fds[1], &out) != GPUX_OK)
		return 13;
	/* The imports hold fds of their own. */
	(void)close(fds[0]);
	(void)close(fds[1]);
	if (offs[0] + N * 4 > gpux_buf_size(in) || offs[1] + N * 4 > gpux_buf_size(out))
		return 14;
	if (add1(m, in, offs[0], out, offs[1]) != GPUX_OK)
		return 15;
	gpux_disconnect(ctx);
	return 0;
}

static void test_e2e_share_another_connection_runs_on_imported_buffers(void **state)
{
	struct test_env *e = *state;
	uint64_t seed = 7, offs[2];
	gpux_buf *small, *big;
	int sv[2], fds[2];
	pid_t pid;

	/* One buffer from an arena (not at its start), one in a segment of its own. */
	assert_int_equal(gpux_buf_alloc(e->ctx, 100, &small), GPUX_OK);
	gpux_buf_free(small);
	assert_int_equal(gpux_buf_alloc(e->ctx, 8192, &small), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, 4 << 20, &big), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, N * 4, &small), GPUX_OK);
	test_fill_random(gpux_buf_data(small), N, &seed);
	memset(gpux_buf_data(big), 0xff, 4 << 20);
	assert_int_equal(gpux_buf_fd(small, &fds[0], &offs[0]), GPUX_OK);
	assert_int_equal(gpux_buf_fd(big, &fds[1], &offs[1]), GPUX_OK);
	assert_true(offs[0] > 0);
	assert_int_equal(offs[1], 0);
	assert_true(test_fd_cloexec(fds[0]));
	/* Somewhere in the middle of the big one. */
	offs[1] = 1 << 20;

	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		(void)close(sv[0]);
		_exit(child_main(e, sv[1]));
	}
	(void)close(sv[1]);
	test_send_raw(sv[0], offs, sizeof(offs), fds, 2);
	assert_child_ok(pid);
	(void)close(sv[0]);

	/* The child's kernel wrote into the parent's memory. */
	for (uint64_t i = 0; i < N; i++) {
		float x = ((const float *)gpux_buf_data(small))[i];
		float y = ((const float *)((const uint8_t *)gpux_buf_data(big) + offs[1]))[i];
		assert_float_equal(y, x + 1, 0);
	}
	assert_int_equal(((const uint8_t *)gpux_buf_data(big))[offs[1] - 1], 0xff);
	assert_int_equal(((const uint8_t *)gpux_buf_data(big))[offs[1] + N * 4], 0xff);
	gpux_buf_free(big);
	gpux_buf_free(small);
}

static void test_e2e_share_frozen_import_stays_frozen(void **state)
{
	struct test_env *e = *state;
	uint64_t seed = 9, off, off2;
	gpux_buf *b, *imp, *out;
	int before = test_fd_count(), fd, fd2;

	assert_int_equal(gpux_buf_alloc(e->ctx, N * 4, &b), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, N * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(b), N, &seed);
	assert_int_equal(gpux_buf_fd(b, &fd, &off), GPUX_OK);
	assert_int_equal(gpux_buf_freeze(b), GPUX_OK);
	assert_int_equal(gpux_buf_fd(b, &fd2, &off2), GPUX_OK);
	assert_int_equal(off2, 0);
	assert_true(fcntl(fd2, F_GET_SEALS) & F_SEAL_WRITE);

	assert_int_equal(gpux_buf_import(e->ctx, fd2, &imp), GPUX_OK);
	assert_memory_equal(gpux_buf_data(imp), gpux_buf_data(b), N * 4);
	/* Read only, as the original: not an output, but a cached input. */
	assert_int_equal(add1(e->m, out, 0, imp, 0), GPUX_E_INVAL);
	{
		uint64_t n = N;
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_cached(imp, 0, N * 4),
					   gpux_arg_out(out, 0, N * 4) };
		struct gpux_launch l = test_launch_1d(N, GPUX_ANY, NULL);

		assert_int_equal(gpux_run(e->m, "add1", &l, args, 3), GPUX_OK);
	}
	for (uint64_t i = 0; i < N; i++)
		assert_float_equal(((const float *)gpux_buf_data(out))[i],
				   ((const float *)gpux_buf_data(b))[i] + 1, 0);
	gpux_buf_free(imp);
	gpux_buf_free(out);
	gpux_buf_free(b);
	assert_no_fd_leak(before);
}

static void test_e2e_share_import_refuses_other_files(void **state)
{
	struct test_env *e = *state;
	int before = test_fd_count(), p[2], mfd;
	gpux_buf *b = NULL;
	char *dir = test_mkdtemp(), path[512];

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(gpux_buf_import(e->ctx, p[0], &b), GPUX_E_INVAL);
	(void)close(p[0]);
	(void)close(p[1]);
	/* A memfd that could shrink under a mapping. */
	mfd = memfd_create("unsealed", MFD_CLOEXEC);
	assert_true(mfd >= 0);
	assert_int_equal(ftruncate(mfd, 4096), 0);
	assert_int_equal(gpux_buf_import(e->ctx, mfd, &b), GPUX_E_INVAL);
	(void)close(mfd);
	(void)snprintf(path, sizeof(path), "%s/file", dir);
	mfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(mfd >= 0);
	assert_int_equal(ftruncate(mfd, 4096), 0);
	assert_int_equal(gpux_buf_import(e->ctx, mfd, &b), GPUX_E_INVAL);
	(void)close(mfd);
	assert_int_equal(gpux_buf_import(e->ctx, -1, &b), GPUX_E_INVAL);
	assert_null(b);
	test_rmtree(dir);
	free(dir);
	assert_no_fd_leak(before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e2e_share_another_connection_runs_on_imported_buffers),
		cmocka_unit_test(test_e2e_share_frozen_import_stays_frozen),
		cmocka_unit_test(test_e2e_share_import_refuses_other_files),
	};

	return cmocka_run_group_tests(tests, test_env_setup, test_env_teardown);
}
