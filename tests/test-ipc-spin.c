/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-spin.c: basic/spin: how long waits spin, latency-critical ones among them. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "macro.h"
#include "spin.h"

/* The spins a fresh process gets with $GPUX_SPIN_US as `env` (NULL: unset); read once per
 * process, so each case runs in a child of its own. */
static void spins(const char *env, uint64_t *ret_spin, uint64_t *ret_urgent)
{
	uint64_t got[2];
	int p[2], status;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (env ? setenv("GPUX_SPIN_US", env, 1) : unsetenv("GPUX_SPIN_US"))
			_exit(2);
		got[0] = ipc_spin_ns();
		got[1] = ipc_spin_urgent_ns();
		_exit(write(p[1], got, sizeof(got)) == (ssize_t)sizeof(got) ? 0 : 1);
	}
	(void)close(p[1]);
	assert_int_equal(read(p[0], got, sizeof(got)), (ssize_t)sizeof(got));
	(void)close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	*ret_spin = got[0];
	*ret_urgent = got[1];
}

/* By default a latency-critical wait spins at least IPC_SPIN_URGENT_NS where waits spin at all
 * (on too few CPUs they do not, that one neither). */
static void test_spin_urgent_by_default(void **state)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t spin, urgent;

	(void)state;
	spins(NULL, &spin, &urgent);
	if (cpus >= IPC_SPIN_CPUS_MIN) {
		assert_int_equal(spin, IPC_SPIN_NS_DEFAULT);
		assert_int_equal(urgent, MAX((uint64_t)IPC_SPIN_URGENT_NS, spin));
		assert_true(urgent > spin);
	} else {
		assert_int_equal(spin, 0);
		assert_int_equal(urgent, 0);
	}
}

/* $GPUX_SPIN_US is the user's word for every wait: 0 spins never, a time is that time. */
static void test_spin_asked_holds_for_urgent(void **state)
{
	uint64_t spin, urgent;

	(void)state;
	spins("0", &spin, &urgent);
	assert_int_equal(spin, 0);
	assert_int_equal(urgent, 0);
	spins("30", &spin, &urgent);
	assert_int_equal(spin, 30 * NSEC_PER_USEC);
	assert_int_equal(urgent, 30 * NSEC_PER_USEC);
	spins("5000", &spin, &urgent);
	assert_int_equal(urgent, 5000 * NSEC_PER_USEC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spin_urgent_by_default),
		cmocka_unit_test(test_spin_asked_holds_for_urgent),
	};

	return cmocka_run_group_tests_name("ipc-spin", tests, NULL, NULL);
}
