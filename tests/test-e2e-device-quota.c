/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-device-quota.c: device memory per user, over all its clients and devices. */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "e2e.h"
#include "helpers.h"

/* Another user (as root only: this test must become it), of the group gpuxd serves. */
#define OTHER 65534u
#define THIRD 65533u
#define MB(n) ((uint64_t)(n) << 20)

/* Two host devices; a user may hold 100 MiB, a client 64. */
static int setup(void **state)
{
	/* Options and their values, in pairs. */
	/* clang-format off */
	static const char *const args[] = { "--host-devices", "2", "--allow-group", "65534",
					    "--quota-device-user", "104857600",
					    "--quota-device", "67108864", NULL };
	/* clang-format on */
	struct test_env *e;

	if (geteuid() != 0)
		return 0;
	e = test_env_open(args);
	/* Let the other users reach the socket: only gpuxd's own checks stand in the way. */
	assert_int_equal(chmod(e->d.dir, 0755), 0);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	if (*state)
		return test_env_teardown(state);
	return 0;
}

#define NEED(state)                                                                                \
	do {                                                                                       \
		if (!*(state))                                                                     \
			skip();                                                                    \
	} while (0)

/* Become uid (of group 65534); 0 or why not. */
static int become(uid_t uid)
{
	return setgid(OTHER) < 0 || setuid(uid) < 0 ? -1 : 0;
}

static gpux_status dbuf(gpux_ctx *ctx, uint32_t dev, uint64_t size, gpux_dbuf **ret)
{
	return gpux_dbuf_alloc(ctx, dev, size, ret);
}

/* Ask for a device buffer on a raw channel of device 0: the status, the text in text[cap]. */
static int dbuf_raw(int chan, uint32_t id, uint64_t size, char *text, size_t cap)
{
	struct ipc_dbuf_alloc a = { .dbuf_id = id, .size = size };
	uint8_t buf[IPC_MSG_MAX];
	int n = ipc_encode_dbuf_alloc(buf, sizeof(buf), id, &a);

	assert_true(n > 0);
	return test_raw_call(chan, buf, (size_t)n, text, cap);
}

/*
 * A child as the other user: one client on each device, both under the cap together, a
 * third buffer past it refused whichever device and client asks, with a message; a buffer
 * freed gives its room to the next.
 */
static void test_e2e_device_quota_spans_clients_and_devices(void **state)
{
	struct test_env *e = *state;
	pid_t pid;

	NEED(state);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpux_ctx *a, *b;
		gpux_dbuf *a0, *b1, *b1s, *x;
		char text[512];
		int sup, chan;

		if (become(OTHER) < 0)
			_exit(10);
		if (gpux_connect(e->d.sock, &a) != GPUX_OK ||
		    gpux_connect(e->d.sock, &b) != GPUX_OK)
			_exit(11);
		if (dbuf(a, 0, MB(60), &a0) != GPUX_OK)
			_exit(12);
		/* 60 + 60 on the other device, by another client: past 100. */
		if (dbuf(b, 1, MB(60), &x) != GPUX_E_QUOTA)
			_exit(13);
		if (dbuf(b, 1, MB(30), &b1) != GPUX_OK || dbuf(a, 0, MB(20), &x) != GPUX_E_QUOTA)
			_exit(14);
		/* What a client is told. */
		chan = test_raw_channel(&e->d, &sup);
		if (dbuf_raw(chan, 7, MB(20), text, sizeof(text)) != GPUX_E_QUOTA ||
		    !strstr(text, "the user's cap") || !strstr(text, "--quota-device-user"))
			_exit(15);
		if (dbuf_raw(chan, 8, MB(10), text, sizeof(text)) != GPUX_OK)
			_exit(16);
		(void)close(chan);
		(void)close(sup);
		gpux_dbuf_free(a0);
		/* The room comes back (once the worker has taken the free in). */
		for (int i = 0; i < 200 && dbuf(a, 1, MB(55), &b1s) != GPUX_OK; i++)
			(void)usleep(10000);
		if (gpux_dbuf_device(b1s) != 1)
			_exit(17);
		gpux_dbuf_free(b1s);
		gpux_dbuf_free(b1);
		gpux_disconnect(a);
		gpux_disconnect(b);
		_exit(0);
	}
	assert_child_ok(pid);
	test_env_still_serves(e);
}

/*
 * Clients of one user on two devices asking at the same moment, each for more than half the
 * cap: never both served (each worker alone would serve its own). Each round, both children
 * wait on a flag, ask, say what they got, and free what they got once both have.
 */
#define ROUNDS 40

struct race {
	_Atomic int go, asked;
	_Atomic int got[ROUNDS + 1][2];
};

/* Wait (yielding) until *v reaches n; a child whose parent is gone stops after 30 s. */
static void race_wait(_Atomic int *v, int n)
{
	uint64_t until = mono_ns() + 30 * NSEC_PER_SEC;

	while (atomic_load(v) < n)
		if (mono_ns() > until)
			_exit(20);
		else
			(void)sched_yield();
}

static void test_e2e_device_quota_racing_devices_never_pass_the_cap(void **state)
{
	struct test_env *e = *state;
	struct race *ra =
		mmap(NULL, sizeof(*ra), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	unsigned served = 0;
	int both = 0;
	pid_t pids[2];

	NEED(state);
	assert_true(ra != MAP_FAILED);
	for (unsigned k = 0; k < 2; k++) {
		pids[k] = fork();
		assert_true(pids[k] >= 0);
		if (pids[k] == 0) {
			gpux_ctx *ctx;

			if (become(OTHER) < 0 || gpux_connect(e->d.sock, &ctx) != GPUX_OK)
				_exit(10);
			for (int round = 1; round <= ROUNDS; round++) {
				gpux_dbuf *d;
				gpux_status st;

				race_wait(&ra->go, round);
				st = dbuf(ctx, k, MB(60), &d);
				atomic_store(&ra->got[round][k], st == GPUX_OK        ? 1
								 : st == GPUX_E_QUOTA ? 2
										      : 3);
				atomic_fetch_add(&ra->asked, 1);
				race_wait(&ra->asked, 2 * round);
				if (st == GPUX_OK)
					gpux_dbuf_free(d);
			}
			gpux_disconnect(ctx);
			_exit(0);
		}
	}
	for (int round = 1; round <= ROUNDS && !both; round++) {
		uint64_t until = mono_ns() + 30 * NSEC_PER_SEC;

		atomic_store(&ra->go, round);
		while (atomic_load(&ra->asked) < 2 * round && mono_ns() < until)
			(void)usleep(100);
		/* The frees taken in before the next round. */
		(void)usleep(20000);
		if (ra->got[round][0] == 1 && ra->got[round][1] == 1)
			both = round;
		served += ra->got[round][0] == 1 || ra->got[round][1] == 1;
	}
	if (both) {
		for (unsigned k = 0; k < 2; k++) {
			(void)kill(pids[k], SIGKILL);
			(void)waitpid(pids[k], NULL, 0);
		}
		fail_msg("round %d: both devices served the user past its cap", both);
	}
	for (unsigned k = 0; k < 2; k++)
		assert_child_ok(pids[k]);
	/* Not a cap that refuses all. */
	assert_true(served >= ROUNDS / 2);
	(void)munmap(ra, sizeof(*ra));
}

/* gpuxd's own user (here root) is not capped: more than a user may, in two clients. */
static void test_e2e_device_quota_owner_is_not_capped(void **state)
{
	struct test_env *e = *state;
	gpux_ctx *other;
	gpux_dbuf *d[3];

	NEED(state);
	other = test_connect(&e->d);
	assert_int_equal(dbuf(e->ctx, 0, MB(60), &d[0]), GPUX_OK);
	assert_int_equal(dbuf(other, 0, MB(60), &d[1]), GPUX_OK);
	assert_int_equal(dbuf(other, 1, MB(60), &d[2]), GPUX_OK);
	for (unsigned i = 0; i < 3; i++)
		gpux_dbuf_free(d[i]);
	gpux_disconnect(other);
}

static uint32_t generation(struct test_env *e, uint32_t dev)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[dev].generation;
}

/* A worker that dies takes its device's memory with it: its users have that room again. */
static void test_e2e_device_quota_dead_worker_gives_its_memory_back(void **state)
{
	struct test_env *e = *state;
	int p[2];
	pid_t pid;
	char c;

	NEED(state);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpux_ctx *ctx;
		gpux_dbuf *d;

		(void)close(p[0]);
		if (become(OTHER) < 0 || gpux_connect(e->d.sock, &ctx) != GPUX_OK ||
		    dbuf(ctx, 1, MB(60), &d) != GPUX_OK || dbuf(ctx, 0, MB(60), &d) != GPUX_E_QUOTA)
			_exit(10);
		/* Held until the parent, which kills device 1's worker meanwhile, says go. */
		if (write(p[1], "x", 1) != 1 || read(p[1], &c, 1) < 0)
			_exit(11);
		_exit(0);
	}
	(void)close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	{
		uint32_t gen = generation(e, 1);

		assert_int_equal(kill(test_worker_pid(&e->d, 1), SIGKILL), 0);
		test_wait_generation(&e->d, 1, gen);
	}
	(void)close(p[0]);
	assert_child_ok(pid);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpux_ctx *ctx;
		gpux_dbuf *d;

		if (become(OTHER) < 0 || gpux_connect(e->d.sock, &ctx) != GPUX_OK ||
		    dbuf(ctx, 0, MB(60), &d) != GPUX_OK)
			_exit(10);
		_exit(0);
	}
	assert_child_ok(pid);
}

/*
 * Users other than gpuxd's and root together leave --reserved-device of the machine (the host
 * back end's devices share it) to those: a daemon of its own, whose reserve leaves others
 * 80 MiB.
 */
static void test_e2e_device_quota_keeps_the_owners_reserve(void **state)
{
	struct test_daemon *d = *state;
	struct gpux_device_info info;
	char reserve[32];
	/* Options and their values, in pairs. */
	/* clang-format off */
	const char *args[] = { "--host-devices", "2", "--allow-group", "65534",
			       "--quota-device-user", "67108864", "--reserved-device", reserve,
			       NULL };
	/* clang-format on */
	gpux_ctx *ctx;
	gpux_dbuf *own;
	pid_t pid;
	int p[2];
	char c;

	if (geteuid() != 0)
		skip();
	{
		struct test_daemon probe = { 0 };

		test_daemon_start(&probe, NULL);
		ctx = test_connect(&probe);
		assert_int_equal(gpux_device_info(ctx, 0, &info), GPUX_OK);
		gpux_disconnect(ctx);
		test_daemon_stop(&probe);
	}
	(void)snprintf(reserve, sizeof(reserve), "%llu",
		       (unsigned long long)(info.mem_total - MB(80)));
	test_daemon_start(d, args);
	assert_int_equal(chmod(d->dir, 0755), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpux_dbuf *x;

		(void)close(p[0]);
		if (become(OTHER) < 0 || gpux_connect(d->sock, &ctx) != GPUX_OK ||
		    dbuf(ctx, 0, MB(60), &x) != GPUX_OK)
			_exit(10);
		if (write(p[1], "x", 1) != 1 || read(p[1], &c, 1) < 0)
			_exit(11);
		_exit(0);
	}
	(void)close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	/* A third user under its own cap, on the other device: past what users may together. */
	{
		pid_t third = fork();

		assert_true(third >= 0);
		if (third == 0) {
			gpux_dbuf *x;
			char text[512];
			int sup, chan;

			if (become(THIRD) < 0 || gpux_connect(d->sock, &ctx) != GPUX_OK)
				_exit(10);
			if (dbuf(ctx, 1, MB(30), &x) != GPUX_E_QUOTA ||
			    dbuf(ctx, 1, MB(15), &x) != GPUX_OK)
				_exit(11);
			chan = test_raw_channel(d, &sup);
			if (dbuf_raw(chan, 9, MB(10), text, sizeof(text)) != GPUX_E_QUOTA ||
			    !strstr(text, "--reserved-device"))
				_exit(12);
			_exit(0);
		}
		assert_child_ok(third);
	}
	/* gpuxd's own user still has room. */
	ctx = test_connect(d);
	assert_int_equal(dbuf(ctx, 1, MB(100), &own), GPUX_OK);
	gpux_dbuf_free(own);
	gpux_disconnect(ctx);
	(void)close(p[0]);
	assert_child_ok(pid);
}

#define WITH_ENV(t) cmocka_unit_test_setup_teardown(t, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		WITH_ENV(test_e2e_device_quota_spans_clients_and_devices),
		WITH_ENV(test_e2e_device_quota_racing_devices_never_pass_the_cap),
		WITH_ENV(test_e2e_device_quota_owner_is_not_capped),
		WITH_ENV(test_e2e_device_quota_dead_worker_gives_its_memory_back),
		TEST_WITH_DAEMON(test_e2e_device_quota_keeps_the_owners_reserve),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
