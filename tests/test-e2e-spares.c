/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-spares.c: connections made ahead for forked children: taken once, costing nothing unused. */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "admin.h"
#include "channel.h"
#include "e2e.h"
#include "helpers.h"

static uint8_t buf[IPC_MSG_MAX];

/* What gpuxd says first on sup, a welcome, and the DEVICE for each device after it (the
 * channels let go): the client id. Asserts. */
static uint64_t raw_welcome(int sup)
{
	struct ipc_welcome wel;
	struct ipc_msg msg;

	assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(ipc_decode_welcome(&msg, &wel), 0);
	for (uint32_t i = 0; i < wel.ndevices; i++) {
		assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, 0), 1);
		assert_int_equal(msg.hdr.type, IPC_DEVICE);
		ipc_msg_close_fds(&msg);
	}
	return wel.client_id;
}

/* A hello saying it can take caps (the library's takes kits), and the client id from the
 * welcome. Asserts; the connection stays open in *ret_sup. */
static uint64_t raw_hello_caps(const struct test_daemon *d, uint32_t caps, int *ret_sup)
{
	struct ipc_hello h = { .min_version = IPC_VERSION_MIN,
			       .max_version = IPC_VERSION,
			       .caps = caps };
	int sup = test_raw_connect(d), n;

	n = ipc_encode_hello(buf, sizeof(buf), 1, &h);
	assert_int_equal(ipc_channel_send(sup, buf, (size_t)n, NULL, 0, 0), 0);
	*ret_sup = sup;
	return raw_welcome(sup);
}

static uint64_t raw_hello(const struct test_daemon *d, int *ret_sup)
{
	return raw_hello_caps(d, 0, ret_sup);
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

/* How many of pid's fds are sockets, or gpux's rings or status page (or a mapping of them:
 * counted as many). */
static unsigned holds_gpux(pid_t pid)
{
	char path[64], target[256], line[512];
	struct dirent *de;
	unsigned found = 0;
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
		found += strncmp(target, "socket:", 7) == 0 || strstr(target, "gpux-rings") ||
			 strstr(target, "gpux-status");
	}
	(void)closedir(dir);
	(void)snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		found += strstr(line, "gpux-rings") || strstr(line, "gpux-status") ? 1000 : 0;
	(void)fclose(f);
	return found;
}

/* The parent's client alone: a spare is nobody's client. */
static bool one_client(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.clients == 1;
}

/* A forked child that never calls gpux holds no fd or mapping of its parent's connection
 * (at most the socket of a kit made for it, which ends with it), and gpuxd does nothing for
 * it: no connection, no spare taken or made. */
static void test_e2e_spares_unused_child_costs_nothing(void **state)
{
	static struct ipc_dev_status before_dev[IPC_DEVICES_MAX], after_dev[IPC_DEVICES_MAX];
	struct test_env *e = *state;
	struct ipc_status before, after;
	int ready[2], done[2];
	unsigned held;
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
	assert_in_range(held, 0, 1);
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

/* ---- kits: connections made ahead and sent to the parent ---- */

/* Wait (10 s at most) for a KIT on sup, a raw client that takes them: its socket; its client
 * id in *ret_id. What else comes meanwhile is let go. */
static int raw_kit(int sup, uint64_t *ret_id)
{
	struct pollfd p = { .fd = sup, .events = POLLIN };
	struct ipc_msg msg;
	struct ipc_kit k;

	for (;;) {
		assert_int_equal(poll(&p, 1, 10000), 1);
		assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, 0), 1);
		if (msg.hdr.type == IPC_KIT)
			break;
		ipc_msg_close_fds(&msg);
	}
	assert_int_equal(ipc_decode_kit(&msg, &k), 0);
	assert_int_equal(k.uid, geteuid());
	assert_int_equal(k.gid, getegid());
	*ret_id = k.client_id;
	return ipc_msg_take_fd(&msg, 0);
}

/* Claim a kit as this process (a socket of its making says who it is): 0 once sent. */
static int raw_claim(int kit)
{
	struct ipc_claim m = { 0 };
	int pair[2], n, r;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
		return -1;
	n = ipc_encode_claim(buf, sizeof(buf), 0, &m);
	r = ipc_channel_send(kit, buf, (size_t)n, pair, 1, 0);
	(void)close(pair[0]);
	(void)close(pair[1]);
	return r;
}

/* In a child, without asserting: the next message on fd (5 s at most), of this type: 0. */
static int next_is(int fd, uint16_t type, struct ipc_msg *msg)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (poll(&p, 1, 5000) != 1 || ipc_channel_recv_msg(fd, buf, sizeof(buf), msg, 0) != 1)
		return -1;
	if (msg->hdr.type == type)
		return 0;
	ipc_msg_close_fds(msg);
	return -1;
}

/* The id of the client gpuxd lists with this pid; 0 for none. */
static uint64_t client_of_pid(const struct test_daemon *d, pid_t pid)
{
	struct ipc_client_info *rows;
	int fd = ipc_admin_connect(d->sock, 5000, NULL, 0);
	uint64_t id = 0;
	size_t n;

	assert_true(fd >= 0);
	assert_int_equal(ipc_admin_clients(fd, 5000, &rows, &n), 0);
	(void)close(fd);
	for (size_t i = 0; i < n; i++)
		if (rows[i].pid == (uint32_t)pid)
			id = rows[i].id;
	free(rows);
	return id;
}

/*
 * A client that takes kits, whose children use gpux, is sent one: a connection made ahead,
 * whose welcome waits in it. A child claims it and gets its channels (made ahead too), without
 * a connection of its own (gpuxd accepted none for it), and is served as itself (listed with
 * its pid and the kit's id). A second claim is a bad message: the connection goes. A claim by
 * another user is refused, with why, and gets no channel.
 */
static void test_e2e_kits_claimed_by_the_child(void **state)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct test_env *e = *state;
	uint64_t *ids = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct ipc_status before, after;
	int parent, kit, ready[2], done[2];
	uint64_t kit_id;
	pid_t pid;
	char c;

	assert_true(ids != MAP_FAILED);
	(void)raw_hello_caps(&e->d, IPC_HELLO_CAP_KITS, &parent);
	/* A forked child of this process used gpuxd: its connections get kits. */
	hellos(&e->d, ids, 1);
	kit = raw_kit(parent, &kit_id);
	assert_true(kit_id > ids[0]);
	assert_int_equal(test_daemon_status(&e->d, &before, devs), 0);
	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(done, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct ipc_welcome wel;
		struct ipc_msg msg;

		(void)close(ready[0]);
		(void)close(done[1]);
		if (raw_claim(kit) != 0 || next_is(kit, IPC_WELCOME, &msg) < 0 ||
		    ipc_decode_welcome(&msg, &wel) < 0 || wel.client_id != kit_id)
			_exit(2);
		for (uint32_t i = 0; i < wel.ndevices; i++) {
			if (next_is(kit, IPC_DEVICE, &msg) < 0 || msg.nfds != 2)
				_exit(3);
			ipc_msg_close_fds(&msg);
		}
		if (write(ready[1], "r", 1) != 1 || read(done[0], &c, 1) != 0)
			_exit(4);
		if (raw_claim(kit) != 0)
			_exit(5);
		_exit(test_closed_by_peer(kit) ? 0 : 6);
	}
	/* The parent lets go of its copy at the fork, as the library does. */
	(void)close(kit);
	(void)close(ready[1]);
	(void)close(done[0]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	assert_int_equal(client_of_pid(&e->d, pid), kit_id);
	assert_int_equal(test_daemon_status(&e->d, &after, devs), 0);
	/* gpuxd accepted this test's two queries meanwhile, nothing for the child. */
	assert_int_equal(after.clients_total, before.clients_total + 2);
	(void)close(done[1]);
	(void)close(ready[0]);
	assert_child_ok(pid);

	if (geteuid() == 0) {
		kit = raw_kit(parent, &kit_id);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			struct ipc_done_msg d;
			struct ipc_msg msg;

			if (setresgid(65534, 65534, 65534) < 0 ||
			    setresuid(65534, 65534, 65534) < 0)
				_exit(2);
			/* The welcome waited; no device, no channel comes, but why. */
			if (raw_claim(kit) != 0 || next_is(kit, IPC_WELCOME, &msg) < 0)
				_exit(3);
			if (next_is(kit, IPC_DONE, &msg) < 0 || ipc_decode_done(&msg, &d) < 0 ||
			    d.m.status != GPUX_E_PERM ||
			    !memmem(d.text, d.m.text_len, "uid and gid", 11))
				_exit(5);
			_exit(test_closed_by_peer(kit) ? 0 : 6);
		}
		(void)close(kit);
		assert_child_ok(pid);
		assert_int_equal(client_of_pid(&e->d, pid), 0);
	}
	(void)close(parent);
	(void)munmap(ids, 4096);
	test_env_still_serves(e);
}

/*
 * An unclaimed kit gives nothing but its welcome: no channel is in it before a claim was
 * checked. Nor does it take a hello: that ends it.
 */
static void test_e2e_kits_nothing_before_the_claim(void **state)
{
	struct test_env *e = *state;
	uint64_t *ids = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct ipc_hello h = { .min_version = IPC_VERSION_MIN, .max_version = IPC_VERSION };
	struct pollfd p;
	struct ipc_msg msg;
	uint64_t kit_id;
	int parent, kit, n;

	assert_true(ids != MAP_FAILED);
	(void)raw_hello_caps(&e->d, IPC_HELLO_CAP_KITS, &parent);
	hellos(&e->d, ids, 1);
	kit = raw_kit(parent, &kit_id);
	assert_int_equal(ipc_channel_recv_msg(kit, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(msg.hdr.type, IPC_WELCOME);
	p = (struct pollfd){ .fd = kit, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 200), 0);
	n = ipc_encode_hello(buf, sizeof(buf), 1, &h);
	assert_int_equal(ipc_channel_send(kit, buf, (size_t)n, NULL, 0, 0), 0);
	assert_true(test_closed_by_peer(kit));
	(void)close(kit);
	(void)close(parent);
	(void)munmap(ids, 4096);
	test_env_still_serves(e);
}

/* A child that runs a kernel, says so ('a'), waits for a word, runs another, says so ('b'),
 * and waits for a last word to go (words: another child holds copies of the pipes' ends). */
struct runner {
	pid_t pid;
	int to, from;
};

static struct runner runner_fork(struct test_env *e)
{
	int down[2], up[2];
	struct runner r;
	char c;

	assert_int_equal(pipe2(down, O_CLOEXEC), 0);
	assert_int_equal(pipe2(up, O_CLOEXEC), 0);
	r.pid = fork();
	assert_true(r.pid >= 0);
	if (r.pid == 0) {
		(void)close(down[1]);
		(void)close(up[0]);
		if (test_spin_run(e->m, 0, 0) != GPUX_OK || write(up[1], "a", 1) != 1)
			_exit(1);
		if (read(down[0], &c, 1) != 1 || test_spin_run(e->m, 0, 0) != GPUX_OK ||
		    write(up[1], "b", 1) != 1)
			_exit(2);
		_exit(read(down[0], &c, 1) == 1 ? 0 : 3);
	}
	(void)close(down[0]);
	(void)close(up[1]);
	r.to = down[1];
	r.from = up[0];
	assert_int_equal(read(r.from, &c, 1), 1);
	return r;
}

/* Its second kernel. */
static void runner_again(struct runner *r)
{
	char c;

	assert_int_equal(write(r->to, "g", 1), 1);
	assert_int_equal(read(r->from, &c, 1), 1);
}

static void runner_end(struct runner *r)
{
	assert_int_equal(write(r->to, "e", 1), 1);
	(void)close(r->to);
	(void)close(r->from);
	assert_child_ok(r->pid);
}

/*
 * Through the library: a child forked while its parent holds a kit is served without a
 * connection of its own; a second child forked after it has a client of its own (a kit goes
 * to one child only), and the first keeps its connection and is served again.
 */
static void test_e2e_kits_one_child_each(void **state)
{
	struct test_env *e = *state;
	struct runner a, b;
	bool through_kit = false;
	uint64_t id_a, id_b;
	pid_t pid;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(test_spin_run(e->m, 0, 0) == GPUX_OK ? 0 : 1);
	assert_child_ok(pid);
	/* The kit comes when gpuxd has made it; the parent takes it in as it forks. */
	for (int k = 0; k < 200; k++) {
		static struct ipc_dev_status devs[IPC_DEVICES_MAX];
		struct ipc_status before, after;

		assert_int_equal(test_daemon_status(&e->d, &before, devs), 0);
		a = runner_fork(e);
		assert_int_equal(test_daemon_status(&e->d, &after, devs), 0);
		through_kit = after.clients_total == before.clients_total + 1;
		if (through_kit)
			break;
		runner_again(&a);
		runner_end(&a);
		(void)usleep(10000);
	}
	assert_true(through_kit);
	id_a = client_of_pid(&e->d, a.pid);
	b = runner_fork(e);
	id_b = client_of_pid(&e->d, b.pid);
	assert_true(id_a != 0 && id_b != 0 && id_a != id_b);
	runner_again(&a);
	assert_int_equal(client_of_pid(&e->d, a.pid), id_a);
	runner_again(&b);
	runner_end(&a);
	runner_end(&b);
	test_env_still_serves(e);
}

/*
 * In a child: close every socket (the kit's, if the fork handed one: nothing else of the
 * parent's is left), open sockets of its own under those numbers, then run a kernel. 0 when
 * it had a socket to close, 1 when it had none; its own sockets must come out untouched:
 * nothing sent on them, still open.
 */
static int closes_sockets_then_runs(struct test_env *e)
{
	char path[300], target[64];
	int closed[8], n = 0, sv[8][2];
	struct stat st[8];
	struct dirent *de;
	DIR *dir = opendir("/proc/self/fd");

	if (!dir)
		return 10;
	while ((de = readdir(dir)) && n < 8) {
		int fd = atoi(de->d_name);
		ssize_t len;

		(void)snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		len = readlink(path, target, sizeof(target) - 1);
		if (len > 0 && fd != dirfd(dir) && strncmp(target, "socket:", 7) == 0)
			closed[n++] = fd;
	}
	(void)closedir(dir);
	for (int i = 0; i < n; i++)
		(void)close(closed[i]);
	/* Each under the number of one closed. */
	for (int i = 0; i < n; i++) {
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv[i]) < 0 ||
		    dup3(sv[i][0], closed[i], O_CLOEXEC) != closed[i] || close(sv[i][0]) < 0 ||
		    fstat(closed[i], &st[i]) < 0)
			return 11;
		sv[i][0] = closed[i];
	}
	if (test_spin_run(e->m, 0, 0) != GPUX_OK)
		return 12;
	for (int i = 0; i < n; i++) {
		struct pollfd p = { .fd = sv[i][1], .events = POLLIN };
		struct stat now;

		if (fstat(sv[i][0], &now) < 0 || now.st_ino != st[i].st_ino || poll(&p, 1, 0) != 0)
			return 13;
	}
	return n > 0 ? 0 : 1;
}

/* A child that closed the kit's socket and opened one of its own under its number before its
 * first call: the library does not take that one for the kit (nothing sent on it, not
 * closed), and connects as any process. */
static void test_e2e_kits_not_mistaken(void **state)
{
	struct test_env *e = *state;
	int st = 1;

	for (int k = 0; k < 200 && st == 1; k++) {
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (pid == 0)
			_exit(closes_sockets_then_runs(e));
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFEXITED(st));
		st = WEXITSTATUS(st);
		if (st == 1)
			(void)usleep(10000);
	}
	assert_int_equal(st, 0);
	test_env_still_serves(e);
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
		cmocka_unit_test_setup_teardown(test_e2e_kits_claimed_by_the_child, test_env_setup,
						test_env_teardown),
		cmocka_unit_test_setup_teardown(test_e2e_kits_nothing_before_the_claim,
						test_env_setup, test_env_teardown),
		cmocka_unit_test_setup_teardown(test_e2e_kits_one_child_each, test_env_setup,
						test_env_teardown),
		cmocka_unit_test_setup_teardown(test_e2e_kits_not_mistaken, test_env_setup,
						test_env_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
