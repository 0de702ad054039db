/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-spares.c: connections made ahead for forked children: taken once, costing nothing unused. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "e2e.h"
#include "helpers.h"

/* A child's hello, as the library says it, and its client id from the welcome (the rest of
 * what gpuxd sends is read and let go). Asserts; the connection stays open in *ret_sup. */
static uint64_t raw_hello(const struct test_daemon *d, int *ret_sup)
{
	struct ipc_hello h = { .min_version = IPC_VERSION_MIN, .max_version = IPC_VERSION };
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_welcome wel;
	struct ipc_msg msg;
	int sup = test_raw_connect(d), n;

	n = ipc_encode_hello(buf, sizeof(buf), 1, &h);
	assert_int_equal(ipc_channel_send(sup, buf, (size_t)n, NULL, 0, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(ipc_decode_welcome(&msg, &wel), 0);
	for (uint32_t i = 0; i < wel.ndevices; i++) {
		assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, 0), 1);
		assert_int_equal(msg.hdr.type, IPC_DEVICE);
		ipc_msg_close_fds(&msg);
	}
	*ret_sup = sup;
	return wel.client_id;
}

static unsigned spares_now(const struct test_daemon *d)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct ipc_status st;

	assert_int_equal(test_daemon_status(d, &st, devs), 0);
	return st.spares;
}

/* Wait (up to 10 s) until gpuxd holds n spares. */
static void wait_spares(const struct test_daemon *d, unsigned n)
{
	for (int i = 0; i < 1000 && spares_now(d) != n; i++)
		(void)usleep(10000);
	assert_int_equal(spares_now(d), n);
}

/* Fork `n` children that each say hello at once and put their client ids in ids[]. */
static void hellos(const struct test_daemon *d, uint64_t *ids, unsigned n)
{
	pid_t pids[8];

	assert_true(n <= 8);
	for (unsigned k = 0; k < n; k++) {
		pids[k] = fork();
		assert_true(pids[k] >= 0);
		if (pids[k] == 0) {
			int sup;

			ids[k] = raw_hello(d, &sup);
			_exit(0);
		}
	}
	for (unsigned k = 0; k < n; k++)
		assert_child_ok(pids[k]);
}

/* The id gpuxd gives a connection now: a hello of this process (no client's child), whose
 * ids come after those given before. */
static uint64_t id_now(const struct test_daemon *d)
{
	int sup;
	uint64_t id = raw_hello(d, &sup);

	(void)close(sup);
	return id;
}

/*
 * A client's first forked child makes gpuxd keep a spare for the next one: made before that
 * child came (its id is older), taken by one child only; two at once with one spare, one
 * takes it and the other gets a connection of its own.
 */
static void test_e2e_spares_taken_once(void **state)
{
	struct test_env *e = *state;
	uint64_t *ids = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint64_t before;

	assert_true(ids != MAP_FAILED);
	assert_int_equal(spares_now(&e->d), 0);
	before = id_now(&e->d);
	hellos(&e->d, &ids[0], 1);
	assert_true(ids[0] > before);
	/* Made for the next child, before it came. */
	wait_spares(&e->d, 1);
	before = id_now(&e->d);
	hellos(&e->d, &ids[1], 1);
	assert_true(ids[1] > ids[0] && ids[1] < before);
	wait_spares(&e->d, 1);
	before = id_now(&e->d);
	hellos(&e->d, &ids[2], 2);
	assert_int_not_equal(ids[2], ids[3]);
	assert_true((ids[2] < before) != (ids[3] < before));
	(void)munmap(ids, 4096);
}

/* Whether any of pid's fds is a socket, or any mapping gpux's rings or status page. */
static bool holds_gpux(pid_t pid)
{
	char path[64], target[256], line[512];
	struct dirent *de;
	bool found = false;
	DIR *dir;
	FILE *f;

	(void)snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	assert_non_null(dir);
	while ((de = readdir(dir))) {
		char link[320];
		ssize_t n;

		(void)snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
		n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		found |= strncmp(target, "socket:", 7) == 0 || strstr(target, "gpux-rings") ||
			 strstr(target, "gpux-status");
	}
	(void)closedir(dir);
	(void)snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		found |= strstr(line, "gpux-rings") || strstr(line, "gpux-status");
	(void)fclose(f);
	return found;
}

/* The parent's client alone: a spare is nobody's client. */
static bool one_client(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.clients == 1;
}

/* A forked child that never calls gpux holds no fd or mapping of its parent's connection, and
 * gpuxd does nothing for it: no connection, no spare taken or made. */
static void test_e2e_spares_unused_child_costs_nothing(void **state)
{
	static struct ipc_dev_status before_dev[IPC_DEVICES_MAX], after_dev[IPC_DEVICES_MAX];
	struct test_env *e = *state;
	struct ipc_status before, after;
	int ready[2], done[2];
	bool held;
	pid_t pid;
	char c;

	/* A child that used gpux: its parent has a spare now. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(test_spin_run(e->m, 0, 0) == GPUX_OK ? 0 : 1);
	assert_child_ok(pid);
	wait_spares(&e->d, 1);
	/* The child's client is gone at the worker. */
	test_wait_stats(&e->d, 0, one_client, NULL);
	assert_int_equal(test_daemon_status(&e->d, &before, before_dev), 0);

	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(done, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Says that fork() has come back here (its handlers have run), then waits. */
		(void)close(ready[0]);
		(void)close(done[1]);
		_exit(write(ready[1], "r", 1) == 1 && read(done[0], &c, 1) == 0 ? 0 : 1);
	}
	(void)close(ready[1]);
	(void)close(done[0]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	held = holds_gpux(pid);
	(void)close(ready[0]);
	(void)close(done[1]);
	assert_child_ok(pid);
	assert_false(held);
	(void)usleep(50000);

	assert_int_equal(test_daemon_status(&e->d, &after, after_dev), 0);
	/* This status query was the only connection since the last. */
	assert_int_equal(after.clients_total, before.clients_total + 1);
	assert_int_equal(after.nclients, before.nclients);
	assert_int_equal(after.spares, 1);
	assert_int_equal(after_dev[0].stats.clients, before_dev[0].stats.clients);
	/* The spare is still there for the next child that does use gpux. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(test_spin_run(e->m, 0, 0) == GPUX_OK ? 0 : 1);
	assert_child_ok(pid);
	test_env_still_serves(e);
}

/* In a child: a kernel through every device of the parent's module, then the same from a
 * child of its own. */
static int child_and_grandchild(struct test_env *e, int depth)
{
	pid_t pid;
	int st;

	for (uint32_t dev = 0; dev < gpux_device_count(e->ctx); dev++)
		if (test_spin_run(e->m, dev, 0) != GPUX_OK)
			return 10 + (int)dev;
	if (depth == 0)
		return 0;
	pid = fork();
	if (pid == 0)
		_exit(child_and_grandchild(e, depth - 1));
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return 20;
	return WEXITSTATUS(st);
}

/* Several forks in a row, each child forking one of its own, all served; and after the
 * worker was restarted (the spares made for its predecessor are not handed out). */
static void test_e2e_spares_forks_in_a_row(void **state)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct test_env *e = *state;
	struct ipc_status st;

	for (int round = 0; round < 2; round++) {
		for (unsigned k = 0; k < 6; k++) {
			pid_t pid = fork();

			assert_true(pid >= 0);
			if (pid == 0)
				_exit(child_and_grandchild(e, 2));
			assert_child_ok(pid);
		}
		if (round == 1)
			break;
		assert_true(spares_now(&e->d) > 0);
		assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
		assert_int_equal(kill(test_worker_pid(&e->d, 1), SIGKILL), 0);
		test_wait_generation(&e->d, 1, devs[1].generation);
	}
	test_env_still_serves(e);
}

/* From a process of its own (gpuxd takes one connection of the test's own process). */
static void wait_spares_elsewhere(const struct test_daemon *d, unsigned n)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		wait_spares(d, n);
		_exit(0);
	}
	assert_child_ok(pid);
}

/*
 * What a child connects with is its own: with two connections per process allowed, a child
 * that took a spare has room for one more of its own and no more, and meanwhile its parent,
 * which has one, for one more of its own.
 */
static void test_e2e_spares_counted_as_the_child(void **state)
{
	static const char *const args[] = { "--max-clients-per-process", "2", NULL };
	struct test_env *e = test_env_open(args);

	for (unsigned k = 0; k < 3; k++) {
		gpux_ctx *second = NULL, *third = NULL;
		int ready[2], done[2];
		pid_t pid;
		char c;

		assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
		assert_int_equal(pipe2(done, O_CLOEXEC), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			(void)close(ready[0]);
			(void)close(done[1]);
			if (test_spin_run(e->m, 0, 0) != GPUX_OK)
				_exit(1);
			if (gpux_connect(e->d.sock, &second) != GPUX_OK)
				_exit(2);
			if (gpux_connect(e->d.sock, &third) != GPUX_E_QUOTA)
				_exit(3);
			if (write(ready[1], "r", 1) != 1 || read(done[0], &c, 1) != 0)
				_exit(4);
			_exit(0);
		}
		(void)close(ready[1]);
		(void)close(done[0]);
		assert_int_equal(read(ready[0], &c, 1), 1);
		assert_int_equal(gpux_connect(e->d.sock, &second), GPUX_OK);
		gpux_disconnect(second);
		(void)close(done[1]);
		(void)close(ready[0]);
		assert_child_ok(pid);
		wait_spares_elsewhere(&e->d, 1);
	}
	test_env_close(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_e2e_spares_taken_once, test_env_setup,
						test_env_teardown),
		cmocka_unit_test_setup_teardown(test_e2e_spares_unused_child_costs_nothing,
						test_env_setup, test_env_teardown),
		cmocka_unit_test_setup_teardown(test_e2e_spares_forks_in_a_row,
						test_env_setup_two_devices, test_env_teardown),
		cmocka_unit_test(test_e2e_spares_counted_as_the_child),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
