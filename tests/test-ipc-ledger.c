/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-ledger.c: device memory by user over workers: caps, rows, races, dead holders. */
#include <errno.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "ledger.h"
#include "macro.h"

#define MiB_ (1024ull * 1024)

struct fixture {
	struct ipc_ledger *l;
	int fd;
	int fds_before;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->fds_before = test_fd_count();
	assert_int_equal(ipc_ledger_new(4, &f->fd, &f->l), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	ipc_ledger_unmap(f->l);
	(void)close(f->fd);
	assert_no_fd_leak(f->fds_before);
	free(f);
	return 0;
}

static const struct ipc_ledger_caps caps_gpu = { .user = 100 * MiB_, .others = 150 * MiB_ };
static const struct ipc_ledger_caps caps_host = { .user = 100 * MiB_,
						  .others = 150 * MiB_,
						  .shared_memory = true };

/* A user's bytes on all devices count against its one cap; a credit gives room back. */
static void test_ledger_user_cap_spans_devices(void **state)
{
	struct fixture *f = *state;
	struct ipc_ledger_refusal why = { 0 };
	unsigned row, row2;

	assert_int_equal(ipc_ledger_charge(f->l, 1000, 0, 60 * MiB_, &caps_gpu, &row, &why), 0);
	assert_int_equal(ipc_ledger_charge(f->l, 1000, 1, 60 * MiB_, &caps_gpu, &row2, &why),
			 -EDQUOT);
	assert_int_equal(why.held, 60 * MiB_);
	assert_int_equal(why.cap, 100 * MiB_);
	assert_int_equal(ipc_ledger_charge(f->l, 1000, 1, 40 * MiB_, &caps_gpu, &row2, &why), 0);
	assert_int_equal(row, row2);
	assert_int_equal(ipc_ledger_user_bytes(f->l, 1000), 100 * MiB_);
	/* Another user has a cap of its own. */
	assert_int_equal(ipc_ledger_charge(f->l, 1001, 1, 50 * MiB_, &caps_gpu, &row2, &why), 0);
	assert_true(row2 != row);
	ipc_ledger_credit(f->l, row, 0, 60 * MiB_);
	assert_int_equal(ipc_ledger_charge(f->l, 1000, 2, 60 * MiB_, &caps_gpu, &row2, &why), 0);
	/* No size passes a cap by wrapping around. */
	assert_int_equal(ipc_ledger_charge(f->l, 1002, 0, UINT64_MAX, &caps_gpu, &row2, &why),
			 -EDQUOT);
}

/* All users together: per device on GPUs, over all devices where they share the memory. */
static void test_ledger_others_cap(void **state)
{
	struct fixture *f = *state;
	struct ipc_ledger_refusal why = { 0 };
	unsigned row;

	for (uint32_t uid = 2000; uid < 2003; uid++)
		assert_int_equal(ipc_ledger_charge(f->l, uid, 0, 50 * MiB_, &caps_gpu, &row, &why),
				 0);
	assert_int_equal(ipc_ledger_charge(f->l, 2003, 0, 1, &caps_gpu, &row, &why), -ENOSPC);
	assert_int_equal(why.held, 150 * MiB_);
	assert_int_equal(why.cap, 150 * MiB_);
	/* Another GPU is memory of its own; the host's devices share the machine's. */
	assert_int_equal(ipc_ledger_charge(f->l, 2003, 1, 50 * MiB_, &caps_gpu, &row, &why), 0);
	assert_int_equal(ipc_ledger_charge(f->l, 2004, 1, 1, &caps_host, &row, &why), -ENOSPC);
	assert_int_equal(why.held, 200 * MiB_);
}

/* A dead worker's memory went with it: its column is cleared, and its users have room. */
static void test_ledger_forget_device(void **state)
{
	struct fixture *f = *state;
	struct ipc_ledger_refusal why = { 0 };
	unsigned row;

	assert_int_equal(ipc_ledger_charge(f->l, 3000, 3, 100 * MiB_, &caps_gpu, &row, &why), 0);
	assert_int_equal(ipc_ledger_charge(f->l, 3000, 0, 1, &caps_gpu, &row, &why), -EDQUOT);
	ipc_ledger_forget_device(f->l, 3);
	assert_int_equal(ipc_ledger_user_bytes(f->l, 3000), 0);
	assert_int_equal(ipc_ledger_charge(f->l, 3000, 0, 100 * MiB_, &caps_gpu, &row, &why), 0);
}

/* Every row someone's: a new user is refused; one that empties is taken by the next. */
static void test_ledger_rows_run_out_and_come_back(void **state)
{
	struct fixture *f = *state;
	struct ipc_ledger_refusal why = { 0 };
	unsigned rows[IPC_LEDGER_USERS], row;

	for (uint32_t i = 0; i < IPC_LEDGER_USERS; i++)
		assert_int_equal(
			ipc_ledger_charge(f->l, 10000 + i, 0, 1, &caps_gpu, &rows[i], &why), 0);
	assert_int_equal(ipc_ledger_charge(f->l, 99999, 0, 1, &caps_gpu, &row, &why), -EUSERS);
	/* One that is there still charges. */
	assert_int_equal(ipc_ledger_charge(f->l, 10007, 1, 1, &caps_gpu, &row, &why), 0);
	assert_int_equal(row, rows[7]);
	ipc_ledger_credit(f->l, rows[42], 0, 1);
	assert_int_equal(ipc_ledger_charge(f->l, 99999, 0, 1, &caps_gpu, &row, &why), 0);
	assert_int_equal(row, rows[42]);
	assert_int_equal(ipc_ledger_user_bytes(f->l, 10042), 0);
}

/*
 * Two processes (two workers) charging one user on their own devices at the same moments, a
 * cap that fits one charge: the user never holds more than the cap.
 */
static void test_ledger_racing_workers_never_pass_the_cap(void **state)
{
	struct fixture *f = *state;
	_Atomic int *ready = mmap(NULL, sizeof(*ready), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pids[2];

	assert_true(ready != MAP_FAILED);
	for (unsigned k = 0; k < 2; k++) {
		pids[k] = fork();
		assert_true(pids[k] >= 0);
		if (pids[k] == 0) {
			struct ipc_ledger *l;
			struct ipc_ledger_refusal why;
			unsigned row;
			uint64_t until;

			if (ipc_ledger_map(f->fd, &l) < 0)
				_exit(2);
			/* Both at once, for 300 ms. */
			atomic_fetch_add(ready, 1);
			while (atomic_load(ready) < 2)
				;
			until = mono_ns() + 300 * NSEC_PER_MSEC;
			while (mono_ns() < until) {
				if (ipc_ledger_charge(l, 4000, k, 60 * MiB_, &caps_gpu, &row,
						      &why) != 0)
					continue;
				if (ipc_ledger_user_bytes(l, 4000) > 100 * MiB_)
					_exit(1);
				ipc_ledger_credit(l, row, k, 60 * MiB_);
			}
			_exit(0);
		}
	}
	for (unsigned k = 0; k < 2; k++)
		assert_child_ok(pids[k]);
	(void)munmap(ready, sizeof(*ready));
}

/* A worker that dies holding the lock does not lock the others out. */
static void test_ledger_lock_outlives_its_holder(void **state)
{
	struct fixture *f = *state;
	struct ipc_ledger_refusal why;
	unsigned row;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct ipc_ledger *l;

		if (ipc_ledger_map(f->fd, &l) < 0 || pthread_mutex_lock(&l->lock) != 0)
			_exit(2);
		_exit(0);
	}
	assert_child_ok(pid);
	assert_int_equal(ipc_ledger_charge(f->l, 5000, 0, 1, &caps_gpu, &row, &why), 0);
	assert_int_equal(ipc_ledger_charge(f->l, 5000, 0, 1, &caps_gpu, &row, &why), 0);
	assert_int_equal(ipc_ledger_user_bytes(f->l, 5000), 2);
}

/* A worker maps only a ledger: a memfd of its size, sealed, with its magic. */
static void test_ledger_map_checks_the_file(void **state)
{
	struct ipc_ledger *l;
	int fd = memfd_create("not-a-ledger", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, sizeof(struct ipc_ledger)), 0);
	assert_int_equal(ipc_ledger_map(fd, &l), -EINVAL);
	(void)close(fd);
}

#define T(t) cmocka_unit_test_setup_teardown(t, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_ledger_user_cap_spans_devices),
		T(test_ledger_others_cap),
		T(test_ledger_forget_device),
		T(test_ledger_rows_run_out_and_come_back),
		T(test_ledger_racing_workers_never_pass_the_cap),
		T(test_ledger_lock_outlives_its_holder),
		T(test_ledger_map_checks_the_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
