/* SPDX-License-Identifier: MIT */
/* tests/test-client-status.c: how the library's errno values become the statuses it returns. */
#include <errno.h>

#include "cli.h"
#include "helpers.h"
#include "macro.h"

struct mapping {
	int err;
	gpux_status status;
};

static void test_status_from_errno_table(void **state)
{
	static const struct mapping table[] = {
		{ 0, GPUX_OK },
		{ -EINVAL, GPUX_E_INVAL },
		{ -ENOMEM, GPUX_E_NOMEM },
		{ -ENOSPC, GPUX_E_NOMEM },
		{ -EPROTO, GPUX_E_PROTO },
		{ -EBADMSG, GPUX_E_PROTO },
		{ -ECONNREFUSED, GPUX_E_CONNECT },
		{ -EACCES, GPUX_E_PERM },
		{ -ENODEV, GPUX_E_NODEV },
		{ -EPIPE, GPUX_E_WORKER_LOST },
		{ -ECONNRESET, GPUX_E_WORKER_LOST },
		{ -ETIMEDOUT, GPUX_E_TIMEOUT },
		{ -EDQUOT, GPUX_E_QUOTA },
		{ -EAGAIN, GPUX_E_AGAIN },
		{ -EPROTONOSUPPORT, GPUX_E_VERSION },
		{ -ESHUTDOWN, GPUX_E_STOPPING },
		{ -ESTALE, GPUX_E_DBUF_LOST },
		/* Any other errno is a system call that failed, whatever its number: these
		 * were once passed through as the status of the same number. */
		{ -EPERM, GPUX_E_IO },  /* -1, GPUX_E_INVAL's number */
		{ -ENOENT, GPUX_E_IO }, /* -2, GPUX_E_NOMEM's */
		{ -EINTR, GPUX_E_IO },  /* -4, GPUX_E_CONNECT's */
		{ -EIO, GPUX_E_IO },    /* -5, GPUX_E_PERM's */
		{ -E2BIG, GPUX_E_IO },  /* -7, GPUX_E_WORKER_LOST's */
		{ -EBADF, GPUX_E_IO },  /* -9, GPUX_E_TIMEOUT's */
		{ -EEXIST, GPUX_E_IO }, /* -17, GPUX_E_VERSION's */
		{ -EMFILE, GPUX_E_IO },
		{ -EMSGSIZE, GPUX_E_IO },
		{ -ENOBUFS, GPUX_E_IO },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(table); i++)
		if (cli_status_from_errno(table[i].err) != table[i].status)
			fail_msg("errno %d: %s, not %s", -table[i].err,
				 gpux_strerror(cli_status_from_errno(table[i].err)),
				 gpux_strerror(table[i].status));
}

/* Whatever errno comes, the status is one gpux_strerror() knows. */
static void test_status_from_errno_is_always_a_status(void **state)
{
	for (int e = 0; e < 4096; e++) {
		gpux_status st = cli_status_from_errno(-e);

		assert_true(st <= GPUX_OK && st >= GPUX_E_DBUF_LOST);
	}
	assert_int_equal(cli_status_from_errno(1), GPUX_E_IO);
	assert_int_equal(cli_status_from_errno(INT32_MIN), GPUX_E_IO);
}

/* Each status an errno can become comes back from its errno; the worker's own have none. */
static void test_errno_from_status_round_trips(void **state)
{
	/* clang-format off */
	static const gpux_status worker_only[] = {
		GPUX_E_KERNEL_FAULT, GPUX_E_COMPILE, GPUX_E_NOTFOUND, GPUX_E_NODRIVER, GPUX_E_DEVICE,
	};
	/* clang-format on */

	for (int st = GPUX_OK; st >= GPUX_E_DBUF_LOST; st--) {
		bool none = false;

		for (unsigned i = 0; i < ARRAY_SIZE(worker_only); i++)
			none |= st == (int)worker_only[i];
		if (none) {
			assert_int_equal(cli_errno_from_status(st), -EPROTO);
			continue;
		}
		if (cli_status_from_errno(cli_errno_from_status(st)) != st)
			fail_msg("%s: errno %d comes back as %s", gpux_strerror(st),
				 -cli_errno_from_status(st),
				 gpux_strerror(cli_status_from_errno(cli_errno_from_status(st))));
	}
	assert_int_equal(cli_errno_from_status(1), -EPROTO);
	assert_int_equal(cli_errno_from_status(GPUX_E_DBUF_LOST - 1), -EPROTO);
	assert_int_equal(cli_errno_from_status(INT32_MIN), -EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_from_errno_table),
		cmocka_unit_test(test_status_from_errno_is_always_a_status),
		cmocka_unit_test(test_errno_from_status_round_trips),
	};

	return cmocka_run_group_tests_name("client-status", tests, NULL, NULL);
}
