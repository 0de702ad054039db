/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-quota.c: shared memory is capped per client and per user, library and worker. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "channel.h"
#include "e2e.h"
#include "helpers.h"
#include "segment.h"

/* Small caps, so that nothing here needs much memory: 8 MiB a client, 12 MiB a user. */
static int setup(void **state)
{
	static const char *const args[] = { "--quota-shared", "8388608", "--quota-shared-user",
					    "12582912", NULL };

	*state = test_env_open(args);
	return 0;
}

/* Run add1 over a buffer's first float (it reads and writes the buffer's memory). */
static gpux_status touch(gpux_module *m, gpux_buf *b)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	uint64_t n = 1;
	struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(b, 0, 4), gpux_arg_out(b, 4, 4) };

	return gpux_run(m, "add1", &l, args, 3);
}

/* The library refuses at once what would pass its client's cap, and counts what it frees. */
static void test_e2e_quota_library_refuses_past_the_client_cap(void **state)
{
	struct test_env *e = *state;
	gpux_buf *a, *b, *c, *not = (gpux_buf *)&not ;

	assert_int_equal(gpux_buf_alloc(e->ctx, 16 << 20, &not ), GPUX_E_QUOTA);
	assert_ptr_equal(not, (gpux_buf *)&not );
	assert_int_equal(gpux_buf_alloc(e->ctx, 6 << 20, &a), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, 3 << 20, &not ), GPUX_E_QUOTA);
	/* A small buffer takes a whole 4 MiB arena: 6 + 4 is past 8 too. */
	assert_int_equal(gpux_buf_alloc(e->ctx, 4096, &not ), GPUX_E_QUOTA);
	assert_int_equal(gpux_buf_alloc(e->ctx, 2 << 20, &b), GPUX_OK);
	assert_int_equal(touch(e->m, a), GPUX_OK);
	gpux_buf_free(a);
	assert_int_equal(gpux_buf_alloc(e->ctx, 5 << 20, &c), GPUX_OK);
	assert_int_equal(touch(e->m, c), GPUX_OK);
	/* Freezing a buffer of its own replaces it: no more memory. */
	assert_int_equal(gpux_buf_freeze(c), GPUX_OK);
	gpux_buf_free(b);
	gpux_buf_free(c);
	test_env_still_serves(e);
}

/* A client that skips the library is refused by the worker, on the request using the memory. */
static void test_e2e_quota_worker_refuses_past_the_client_cap(void **state)
{
	struct test_env *e = *state;
	static uint8_t buf[IPC_MSG_MAX];
	static const char code[] = "GPUX_HOST_KERNEL(k)\n{\n}\n";
	struct ipc_mod_load ml = { .mod_id = 7,
				   .lang = GPUX_LANG_HOST,
				   .code_len = sizeof(code) - 1 };
	struct ipc_arg arg = { .kind = GPUX_ARG_IN, .ref = 1, .size = 16 };
	struct ipc_submit s = {
		.mod_id = 7, .nargs = 1, .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }
	};
	char text[256];
	int sup, chan = test_raw_channel(&e->d, &sup), fd, n;

	n = ipc_encode_mod_load(buf, sizeof(buf), 1, &ml, "", code);
	assert_int_equal(test_raw_call(chan, buf, (size_t)n, NULL, 0), GPUX_OK);
	assert_int_equal(ipc_segment_create("big", 9 << 20, &fd), 0);
	test_send_seg(chan, 1, 9 << 20, 0, fd);
	(void)close(fd);
	n = ipc_encode_submit(buf, sizeof(buf), 2, &s, &arg, "k", NULL);
	assert_int_equal(test_raw_call(chan, buf, (size_t)n, text, sizeof(text)), GPUX_E_QUOTA);
	assert_non_null(strstr(text, "client's shared-memory quota"));

	/* Memory that was never allocated would be charged to the worker when it touched it. */
	fd = memfd_create("sparse", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	test_send_seg(chan, 2, 1 << 20, 0, fd);
	(void)close(fd);
	arg.ref = 2;
	n = ipc_encode_submit(buf, sizeof(buf), 3, &s, &arg, "k", NULL);
	assert_int_equal(test_raw_call(chan, buf, (size_t)n, text, sizeof(text)), GPUX_E_INVAL);
	assert_non_null(strstr(text, "not allocated"));

	/* Within the cap it works, on the same channel. */
	assert_int_equal(ipc_segment_create("small", 1 << 20, &fd), 0);
	test_send_seg(chan, 3, 1 << 20, 0, fd);
	(void)close(fd);
	arg.ref = 3;
	n = ipc_encode_submit(buf, sizeof(buf), 4, &s, &arg, "k", NULL);
	assert_int_equal(test_raw_call(chan, buf, (size_t)n, NULL, 0), GPUX_OK);
	(void)close(chan);
	(void)close(sup);
	test_env_still_serves(e);
}

/*
 * Two clients of one user, each within its own cap, together past the user's: the worker
 * maps the first one's memory and refuses the second's, until the first lets go.
 */
static void test_e2e_quota_worker_refuses_past_the_user_cap(void **state)
{
	struct test_env *e = *state;
	gpux_ctx *other = test_connect(&e->d);
	gpux_module *om = test_load_host_kernels(other);
	gpux_buf *a, *b, *b2;
	gpux_req *r;
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	uint64_t n = 1;
	struct gpux_arg args[3];

	/* Segments go to the worker as they are made: the first client's is mapped before the
	 * second's is made. */
	assert_int_equal(gpux_buf_alloc(e->ctx, 7 << 20, &a), GPUX_OK);
	assert_int_equal(touch(e->m, a), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(other, 7 << 20, &b), GPUX_OK);
	args[0] = GPUX_ARG_VALUE(n);
	args[1] = gpux_arg_in(b, 0, 4);
	args[2] = gpux_arg_out(b, 4, 4);
	assert_int_equal(gpux_submit(om, "add1", &l, args, 3, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, 10000), GPUX_E_QUOTA);
	assert_non_null(strstr(gpux_req_message(r), "user's shared-memory quota"));
	gpux_req_free(r);
	/* The first client is not disturbed; once it lets go, the second may have as much. */
	assert_int_equal(touch(e->m, a), GPUX_OK);
	gpux_buf_free(a);
	assert_int_equal(gpux_buf_alloc(other, 1 << 20, &b2), GPUX_OK);
	gpux_buf_free(b);
	assert_int_equal(touch(om, b2), GPUX_OK);
	gpux_buf_free(b2);
	gpux_module_free(om);
	gpux_disconnect(other);
	test_env_still_serves(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e2e_quota_library_refuses_past_the_client_cap),
		cmocka_unit_test(test_e2e_quota_worker_refuses_past_the_client_cap),
		cmocka_unit_test(test_e2e_quota_worker_refuses_past_the_user_cap),
	};

	return cmocka_run_group_tests(tests, setup, test_env_teardown);
}
