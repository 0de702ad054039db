/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-host-faults.c: host kernels that break their launch or worker fault at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/* Kernels of a gpuxd without the sandbox (its user's own): each fails before it writes 1. */
static const char kernels[] =
	"#include <stdlib.h>\n"
	"#include <unistd.h>\n"
	"GPUX_HOST_KERNEL(empty)\n"
	"{\n"
	"}\n"
	/* Over the launch description it was given, and the array of its arguments. */
	"GPUX_HOST_PARAMS(scribbles_launch, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(scribbles_launch)\n"
	"{\n"
	"	((struct gpux_host_launch *)gpux)->grid_dim.x = 0xffffffffu;\n"
	"	*GPUX_ARG(int *, 0) = 1;\n"
	"}\n"
	"GPUX_HOST_PARAMS(scribbles_args, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(scribbles_args)\n"
	"{\n"
	"	int *p = GPUX_ARG(int *, 0);\n"
	"	((void **)gpux_args)[0] = NULL;\n"
	"	*p = 1;\n"
	"}\n"
	/* Far outside the address space (2^62 bytes on), where it says first. */
	"GPUX_HOST_PARAMS(far_write, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(far_write)\n"
	"{\n"
	"	volatile float *p = GPUX_ARG(float *, 0), *q = p + (1L << 60);\n"
	"	*(volatile uint64_t *)(p + 2) = (uint64_t)(uintptr_t)q;\n"
	"	*q = 1;\n"
	"	*(int *)p = 1;\n"
	"}\n"
	"GPUX_HOST_PARAMS(aborts, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(aborts)\n"
	"{\n"
	"	abort();\n"
	"}\n"
	"GPUX_HOST_PARAMS(exits, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(exits)\n"
	"{\n"
	"	exit(0);\n"
	"}\n"
	"GPUX_HOST_PARAMS(forks, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(forks)\n"
	"{\n"
	"	pid_t p = fork();\n"
	"	if (p == 0) _exit(0);\n"
	"	*GPUX_ARG(int *, 0) = p > 0;\n"
	"}\n";

static int setup(void **state)
{
	static const char *const args[] = { "--host-sandbox", "off", "--slots", "1", NULL };
	struct test_env *e = test_env_open(args);
	char *log = NULL;

	gpux_module_free(e->m);
	if (gpux_module_load(e->ctx, GPUX_LANG_HOST, kernels, sizeof(kernels) - 1, NULL, &e->m,
			     &log) != GPUX_OK)
		fail_msg("loading the kernels: %s", log ? log : "");
	free(log);
	*state = e;
	return 0;
}

static uint32_t generation(struct test_env *e)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[0].generation;
}

/*
 * Run `kernel` (two blocks) on a 64-byte buffer: it must fail with a kernel fault within 10 s
 * (the deadline is a minute), its message saying `says`, before writing 1 into the buffer's
 * first int; the worker then restarts and serves. The message goes to ret_msg (512 bytes),
 * the buffer's bytes to ret_buf, when given.
 */
static void faults(struct test_env *e, const char *kernel, const char *says, char *ret_msg,
		   uint8_t *ret_buf)
{
	uint32_t gen = generation(e);
	struct gpux_launch l = { .grid = { 2, 1, 1 }, .block = { 1, 1, 1 } };
	gpux_status st;
	gpux_buf *b;
	gpux_req *r;
	char msg[512];

	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	memset(gpux_buf_data(b), 0, 64);
	{
		struct gpux_arg a = gpux_arg_inout(b, 0, 64);
		assert_int_equal(gpux_submit(e->m, kernel, &l, &a, 1, &r), GPUX_OK);
	}
	st = gpux_wait(r, 10000);
	(void)snprintf(msg, sizeof(msg), "%s", gpux_req_message(r));
	if (st != GPUX_E_KERNEL_FAULT)
		fail_msg("kernel %s: %s (%s), not a kernel fault", kernel, gpux_strerror(st), msg);
	if (!strstr(msg, says))
		fail_msg("kernel %s: message \"%s\" does not say \"%s\"", kernel, msg, says);
	assert_int_equal(*(int *)gpux_buf_data(b), 0);
	if (ret_buf)
		memcpy(ret_buf, gpux_buf_data(b), 64);
	if (ret_msg)
		memcpy(ret_msg, msg, sizeof(msg));
	gpux_req_free(r);
	gpux_buf_free(b);
	test_wait_generation(&e->d, 0, gen);
	test_env_still_serves(e);
}

/* The launch it was given is read-only: a write faults at once, rather than, say, making a
 * grid of 2^32 blocks that ends at the deadline. */
static void test_e2e_host_kernel_may_not_write_its_launch(void **state)
{
	faults(*state, "scribbles_launch", "launch description", NULL, NULL);
	faults(*state, "scribbles_args", "launch description", NULL, NULL);
}

/* An address outside the address space is reported as what it is, not as (nil). */
static void test_e2e_host_kernel_far_write_names_its_address(void **state)
{
#if defined(__x86_64__)
	uint8_t buf[64];
	uint64_t q;
	char msg[512], addr[32];

	faults(*state, "far_write", "Segmentation fault", msg, buf);
	memcpy(&q, buf + 8, sizeof(q));
	assert_true(q != 0);
	(void)snprintf(addr, sizeof(addr), "at address %p", (void *)(uintptr_t)q);
	if (!strstr(msg, addr))
		fail_msg("message \"%s\" does not say \"%s\"", msg, addr);
#else
	skip();
#endif
}

/* What would end the worker, or copy it, is the kernel's fault (with or without the sandbox). */
static void test_e2e_host_kernel_may_not_end_or_copy_its_worker(void **state)
{
	faults(*state, "aborts", "Aborted", NULL, NULL);
	faults(*state, "exits", "exit()", NULL, NULL);
	faults(*state, "forks", "fork()", NULL, NULL);
}

#define WITH_DAEMON(t) cmocka_unit_test_setup_teardown(t, setup, test_env_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* A daemon each: five deaths within a minute would mark its device failed. */
		WITH_DAEMON(test_e2e_host_kernel_may_not_write_its_launch),
		WITH_DAEMON(test_e2e_host_kernel_far_write_names_its_address),
		WITH_DAEMON(test_e2e_host_kernel_may_not_end_or_copy_its_worker),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
