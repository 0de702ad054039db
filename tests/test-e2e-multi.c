/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-multi.c: two devices: one worker killed under load leaves the other's clients alone. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/*
 * Forked clients keep 32 launches in flight on device 1 for two seconds (checking every
 * result), others on device 0; device 0's worker is killed in the middle. Every request on
 * device 1 succeeded; device 0's clients saw GPUX_E_WORKER_LOST and then their device back.
 */
static void test_multi_worker_killed_under_load_other_untouched(void **state)
{
	struct test_env *e = *state;
	enum { CLIENTS = 3, WINDOW = 32 };
	pid_t pids[2][CLIENTS];
	gpux_buf *res;
	uint64_t *counts;

	assert_int_equal(gpux_buf_alloc(e->ctx, 2 * CLIENTS * 2 * sizeof(uint64_t), &res), GPUX_OK);
	counts = gpux_buf_data(res);
	memset(counts, 0, 2 * CLIENTS * 2 * sizeof(uint64_t));
	for (uint32_t dev = 0; dev < 2; dev++)
		for (unsigned c = 0; c < CLIENTS; c++) {
			pids[dev][c] = fork();
			assert_true(pids[dev][c] >= 0);
			if (pids[dev][c] == 0) {
				struct gpux_launch l = { .grid = { 1 },
							 .block = { 1 },
							 .device = dev };
				uint64_t until = mono_ns() + 2 * NSEC_PER_SEC;
				uint64_t *ok = &counts[(dev * CLIENTS + c) * 2], *lost = ok + 1;
				gpux_req *r[WINDOW] = { NULL };

				for (unsigned k = 0; mono_ns() < until; k = (k + 1) % WINDOW) {
					if (r[k]) {
						gpux_status st = gpux_wait(r[k], -1);

						*ok += st == GPUX_OK;
						*lost += st == GPUX_E_WORKER_LOST;
						if (st != GPUX_OK && st != GPUX_E_WORKER_LOST)
							_exit(2);
						gpux_req_free(r[k]);
						r[k] = NULL;
					}
					if (gpux_submit(e->m, "empty", &l, NULL, 0, &r[k]) !=
					    GPUX_OK)
						r[k] = NULL;
				}
				for (unsigned k = 0; k < WINDOW; k++)
					if (r[k]) {
						gpux_status st = gpux_wait(r[k], -1);

						*ok += st == GPUX_OK;
						*lost += st == GPUX_E_WORKER_LOST;
						gpux_req_free(r[k]);
					}
				_exit(0);
			}
		}
	(void)usleep(700 * 1000);
	assert_int_equal(kill(test_worker_pid(&e->d, 0), SIGKILL), 0);
	for (uint32_t dev = 0; dev < 2; dev++)
		for (unsigned c = 0; c < CLIENTS; c++)
			assert_child_ok(pids[dev][c]);
	for (unsigned c = 0; c < CLIENTS; c++) {
		const uint64_t *d0 = &counts[c * 2], *d1 = &counts[(CLIENTS + c) * 2];

		/* Device 1: everything ran, nothing was lost. */
		assert_true(d1[0] > 0);
		assert_int_equal(d1[1], 0);
		/* Device 0: ran before and after its worker's death. */
		assert_true(d0[0] > 0);
	}
	gpux_buf_free(res);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_multi_worker_killed_under_load_other_untouched),
	};

	return cmocka_run_group_tests_name("two devices", tests, test_env_setup_two_devices,
					   test_env_teardown);
}
