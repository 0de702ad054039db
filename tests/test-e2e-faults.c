/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-faults.c: dying workers, faulting kernels, deadlines, dying clients. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "e2e.h"
#include "helpers.h"

/* Requests a dying client leaves queued behind its running one. */
#define QUEUED_BEHIND 50u

static int setup(void **state)
{
	static const char *const args[] = { "--host-devices", "2", "--slots", "2", NULL };

	*state = test_env_open(args);
	return 0;
}

static uint32_t generation(struct test_env *e, uint32_t dev)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[dev].generation;
}

static gpux_req *spin(struct test_env *e, uint32_t dev, gpux_queue *q, uint32_t ms,
		      uint32_t timeout)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 },
				 .block = { 1, 1, 1 },
				 .device = dev,
				 .queue = q,
				 .timeout_ms = timeout };
	struct gpux_arg arg = GPUX_ARG_VALUE(ms);
	gpux_req *r = NULL;

	assert_int_equal(gpux_submit(e->m, "spin", &l, &arg, 1, &r), GPUX_OK);
	return r;
}

static void run_ok(struct test_env *e, uint32_t dev)
{
	gpux_req *r = spin(e, dev, NULL, 1, 0);

	assert_int_equal(gpux_wait(r, 10000), GPUX_OK);
	gpux_req_free(r);
}

static void test_e2e_worker_killed_mid_request(void **state)
{
	struct test_env *e = *state;
	uint32_t gen = generation(e, 0);
	gpux_queue *q;
	gpux_req *r[6];

	assert_int_equal(gpux_queue_open(e->ctx, 0, &q), GPUX_OK);
	/* Running on two streams, and queued behind them. What ran is lost (host kernels work
	 * in place); what had not started runs on the next worker (client/replay.c). */
	for (int i = 0; i < 3; i++)
		r[i] = spin(e, 0, NULL, i == 0 ? 2000 : 10, 0);
	for (int i = 3; i < 6; i++)
		r[i] = spin(e, 0, q, i == 3 ? 2000 : 10, 0);
	(void)usleep(100 * 1000);
	assert_int_equal(kill(test_worker_pid(&e->d, 0), SIGKILL), 0);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(gpux_wait(r[i], 5000), i % 3 == 0 ? GPUX_E_WORKER_LOST : GPUX_OK);
		gpux_req_free(r[i]);
	}
	/* The other device was never disturbed; this one comes back. */
	run_ok(e, 1);
	test_wait_generation(&e->d, 0, gen);
	run_ok(e, 0);
	/* The queue is opened again on the new worker by itself. */
	r[0] = spin(e, 0, q, 1, 0);
	assert_int_equal(gpux_wait(r[0], 10000), GPUX_OK);
	gpux_req_free(r[0]);
	gpux_queue_free(q);
}

/* r's mark, as its client reads it after its worker's death (client/replay.c). */
static uint32_t mark_of(gpux_req *r)
{
	const struct cli_dev *d = &r->ctx->devs[r->device];

	assert_non_null(d->marks);
	return __atomic_load_n(&d->marks[r->id % IPC_MARKS_PER_CLIENT], __ATOMIC_ACQUIRE);
}

/*
 * The host back end marks a request STARTED before it runs it (its kernels work in place), and
 * DONE as it ends GPUX_OK: should the answer go with the worker, its client takes it as done
 * rather than lost.
 */
static void test_e2e_ok_end_marked_done(void **state)
{
	struct test_env *e = *state;
	gpux_req *r = spin(e, 0, NULL, 1, 0);

	assert_int_equal(gpux_wait(r, 10000), GPUX_OK);
	assert_int_equal(mark_of(r), IPC_MARK(r->id, IPC_MARK_DONE));
	gpux_req_free(r);
}

static void test_e2e_kernel_fault_restarts_worker(void **state)
{
	struct test_env *e = *state;
	uint32_t gen = generation(e, 1);
	gpux_ctx *other = test_connect(&e->d);
	gpux_module *om = test_load_host_kernels(other);
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .device = 1 };
	struct gpux_launch ls = l;
	gpux_buf *b;
	gpux_req *victim, *bad;
	uint32_t ms = 3000;
	struct gpux_arg sarg = GPUX_ARG_VALUE(ms);

	/* A co-tenant's long request on the same device. */
	assert_int_equal(gpux_submit(om, "spin", &ls, &sarg, 1, &victim), GPUX_OK);
	(void)usleep(50 * 1000);
	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	{
		struct gpux_arg arg = gpux_arg_inout(b, 0, 64);
		assert_int_equal(gpux_submit(e->m, "crash", &l, &arg, 1, &bad), GPUX_OK);
	}
	assert_int_equal(gpux_wait(bad, 5000), GPUX_E_KERNEL_FAULT);
	assert_non_null(strstr(gpux_req_message(bad), "crash"));
	assert_int_equal(gpux_wait(victim, 5000), GPUX_E_WORKER_LOST);
	gpux_req_free(bad);
	gpux_req_free(victim);
	test_wait_generation(&e->d, 1, gen);
	run_ok(e, 1);
	gpux_buf_free(b);
	gpux_module_free(om);
	gpux_disconnect(other);
}

static void test_e2e_deadline_passed_gives_timeout(void **state)
{
	struct test_env *e = *state;
	uint32_t gen = generation(e, 0);
	gpux_req *r = spin(e, 0, NULL, 20000, 150);
	uint64_t t0 = mono_ns();

	assert_int_equal(gpux_wait(r, 10000), GPUX_E_TIMEOUT);
	assert_true(mono_ns() - t0 < 5 * NSEC_PER_SEC);
	gpux_req_free(r);
	test_wait_generation(&e->d, 0, gen);
	run_ok(e, 0);
}

/*
 * A client that submitted a kernel and went away: the kernel runs on to its deadline, and the
 * log line of its kill says the client is gone and who it was, not "pid -1 uid 4294967295".
 */
static void test_e2e_deadline_of_a_gone_client_is_logged(void **state)
{
	struct test_env *e = *state;
	uint32_t gen = generation(e, 0);
	char who[96];
	int p[2];
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpux_ctx *ctx;
		gpux_module *m;
		gpux_req *r;

		if (gpux_connect(e->d.sock, &ctx) != GPUX_OK)
			_exit(1);
		m = test_load_host_kernels(ctx);
		{
			uint32_t ms = 20000;
			struct gpux_launch l = { .grid = { 1, 1, 1 },
						 .block = { 1, 1, 1 },
						 .timeout_ms = 300 };
			struct gpux_arg arg = GPUX_ARG_VALUE(ms);

			if (gpux_submit(m, "spin", &l, &arg, 1, &r) != GPUX_OK)
				_exit(2);
		}
		/* Running, then gone without a word. */
		(void)usleep(100 * 1000);
		(void)write(p[1], "x", 1);
		_exit(0);
	}
	(void)close(p[1]);
	{
		char c;

		assert_int_equal(read(p[0], &c, 1), 1);
	}
	(void)close(p[0]);
	assert_child_ok(pid);
	(void)snprintf(who, sizeof(who), "it was pid %d uid %u) ran", (int)pid, (unsigned)getuid());
	if (!test_log_wait(&e->d, who))
		fail_msg("the log (%s) does not say \"%s\"", e->d.log, who);
	test_wait_generation(&e->d, 0, gen);
	run_ok(e, 0);
}

static bool idle(const struct ipc_dev_status *s, void *arg)
{
	const struct ipc_dev_status *base = arg;

	return s->stats.clients == base->stats.clients && s->stats.inflight == 0 &&
	       s->stats.segments == base->stats.segments &&
	       s->stats.segment_bytes == base->stats.segment_bytes;
}

static bool holds_more(const struct ipc_dev_status *s, void *arg)
{
	const struct ipc_dev_status *base = arg;

	return s->stats.clients == base->stats.clients + 1 && s->stats.inflight > 0 &&
	       s->stats.segment_bytes >= base->stats.segment_bytes + (8 << 20);
}

static void test_e2e_client_killed_mid_request_is_reclaimed(void **state)
{
	struct test_env *e = *state;
	struct ipc_status st;
	struct ipc_dev_status before[IPC_DEVICES_MAX];
	int pipefd[2], status;
	pid_t pid;
	char c;

	run_ok(e, 0);
	assert_int_equal(test_daemon_status(&e->d, &st, before), 0);
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpux_ctx *ctx;
		gpux_module *m;
		gpux_buf *b;
		struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
		uint32_t ms = 500;
		struct gpux_arg arg = GPUX_ARG_VALUE(ms);
		gpux_req *r;

		/* Its own connection, a big buffer and requests in flight, then death. */
		if (gpux_connect(e->d.sock, &ctx) ||
		    gpux_module_load(ctx, GPUX_LANG_HOST, test_host_kernels, test_host_kernels_len,
				     NULL, &m, NULL))
			_exit(1);
		if (gpux_buf_alloc(ctx, 8 << 20, &b))
			_exit(2);
		for (int i = 0; i < 4; i++)
			if (gpux_submit(m, "spin", &l, &arg, 1, &r))
				_exit(3);
		{
			uint64_t n = 4;
			struct gpux_arg a3[] = { GPUX_ARG_VALUE(n), gpux_arg_in(b, 0, 16),
						 gpux_arg_out(b, 16, 16) };
			if (gpux_submit(m, "add1", &l, a3, 3, &r))
				_exit(4);
		}
		(void)write(pipefd[1], "x", 1);
		/* Killed by the parent; should the test fail first, not left behind for long. */
		(void)alarm(30);
		(void)pause();
		_exit(5);
	}
	(void)close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &c, 1), 1);
	(void)close(pipefd[0]);
	/* The worker takes in what the child sent in its own time. */
	test_wait_stats(&e->d, 0, holds_more, &before[0]);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);

	/* Its channel, segments and queued work go; what ran finishes; the worker stays. */
	test_wait_stats(&e->d, 0, idle, &before[0]);
	assert_int_equal(test_worker_pid(&e->d, 0), (pid_t)before[0].pid);
	run_ok(e, 0);
}

static bool client_gone(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.clients == ((const struct ipc_dev_status *)arg)->stats.clients;
}

static bool drained(const struct ipc_dev_status *s, void *arg)
{
	return client_gone(s, arg) && s->stats.inflight == 0;
}

/*
 * A client that dies with requests queued behind a running one: the running one ends, the
 * rest never run. The child's requests append to a log in a buffer shared with this test,
 * behind one that waits for a flag this test sets only once the worker has seen the death
 * (all of them handed to the back end: they fit in a slot).
 */
static void test_e2e_dead_client_queued_work_never_runs(void **state)
{
	struct test_env *e = *state;
	struct ipc_status st;
	struct ipc_dev_status before[IPC_DEVICES_MAX];
	volatile uint32_t *mem;
	int pipefd[2], status;
	gpux_buf *b;
	pid_t pid;
	char c;

	run_ok(e, 0);
	assert_int_equal(test_daemon_status(&e->d, &st, before), 0);
	assert_int_equal(gpux_buf_alloc(e->ctx, 4096, &b), GPUX_OK);
	mem = gpux_buf_data(b);
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
		gpux_queue *q;
		gpux_req *r;

		{
			struct gpux_arg a[] = { gpux_arg_inout(b, 0, 4), gpux_arg_inout(b, 4, 4) };
			if (gpux_submit(e->m, "wait_flag", &l, a, 2, &r))
				_exit(1);
		}
		for (uint32_t i = 0; i < QUEUED_BEHIND; i++) {
			struct gpux_arg a[] = { GPUX_ARG_VALUE(i), gpux_arg_inout(b, 64, 1024) };
			if (gpux_submit(e->m, "append", &l, a, 2, &r))
				_exit(2);
		}
		/* Answered after the worker has taken in every request sent before. */
		if (gpux_queue_open(e->ctx, 0, &q))
			_exit(3);
		(void)write(pipefd[1], "x", 1);
		(void)alarm(30);
		(void)pause();
		_exit(4);
	}
	(void)close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &c, 1), 1);
	(void)close(pipefd[0]);
	/* Its first request runs: the others wait behind it. */
	for (int i = 0; i < 1000 && mem[1] != UINT32_MAX; i++)
		(void)usleep(10000);
	assert_int_equal(mem[1], UINT32_MAX);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	test_wait_stats(&e->d, 0, client_gone, &before[0]);

	/* The worker has dropped the client: let its running request end. */
	mem[0] = 1;
	test_wait_stats(&e->d, 0, drained, &before[0]);
	assert_int_equal(mem[1], 1);
	assert_int_equal(mem[16], 0);
	assert_int_equal(test_worker_pid(&e->d, 0), (pid_t)before[0].pid);
	run_ok(e, 0);
	gpux_buf_free(b);
}

/*
 * Kernel faults blamed on a client's request are no strike against the device: more of them
 * than the five deaths in a minute that mark a device failed leave it serving everybody,
 * its count of recent deaths as it was. The workers after the first are told they follow
 * another (--restart: ready before the compiler is warm).
 */
static void test_e2e_blamed_faults_do_not_fail_the_device(void **state)
{
	struct test_env *e = *state;
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .device = 0 };
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	uint32_t strikes;
	gpux_buf *b;

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	strikes = devs[0].deaths_recent;
	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	for (unsigned i = 0; i < 6; i++) {
		uint32_t gen = generation(e, 0);
		struct gpux_arg arg = gpux_arg_inout(b, 0, 64);

		assert_int_equal(gpux_run(e->m, "crash", &l, &arg, 1), GPUX_E_KERNEL_FAULT);
		test_wait_generation(&e->d, 0, gen);
	}
	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	assert_int_equal(devs[0].state, GPUX_DEVICE_READY);
	assert_int_equal(devs[0].deaths_recent, strikes);
	run_ok(e, 0);
	gpux_buf_free(b);
	/* A worker that follows another is ready before its compiler is warm. */
	{
		char path[64], cmd[4096];
		ssize_t len;
		int fd;

		(void)snprintf(path, sizeof(path), "/proc/%d/cmdline",
			       (int)test_worker_pid(&e->d, 0));
		fd = open(path, O_RDONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		len = read(fd, cmd, sizeof(cmd) - 1);
		(void)close(fd);
		assert_true(len > 0);
		assert_true(memmem(cmd, (size_t)len, "--restart", 10) != NULL);
	}
}

static bool is_down_or_new(const struct ipc_dev_status *s, void *arg)
{
	return s->state == GPUX_DEVICE_FAILED ||
	       (s->state == GPUX_DEVICE_READY && s->pid != *(uint32_t *)arg);
}

/* Five deaths within a minute mark a device failed; the other device goes on. */
static void test_e2e_device_failed_after_repeated_deaths(void **state)
{
	struct test_env *e = *state;
	struct gpux_device_info info;
	gpux_req *r;
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .device = 1 };
	uint32_t ms = 1;
	struct gpux_arg arg = GPUX_ARG_VALUE(ms);
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	unsigned kills = 0;

	/* Deaths of earlier tests count too: kill until it is marked failed, five times at most. */
	for (;;) {
		uint32_t pid;

		assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
		if (devs[1].state == GPUX_DEVICE_FAILED)
			break;
		assert_true(kills < 5);
		pid = (uint32_t)test_worker_pid(&e->d, 1);
		assert_int_equal(kill((pid_t)pid, SIGKILL), 0);
		kills++;
		test_wait_stats(&e->d, 1, is_down_or_new, &pid);
	}
	assert_true(devs[1].deaths_recent >= 5);
	assert_int_equal(gpux_device_info(e->ctx, 1, &info), GPUX_OK);
	assert_int_equal(info.state, GPUX_DEVICE_FAILED);
	assert_int_equal(gpux_submit(e->m, "spin", &l, &arg, 1, &r), GPUX_E_NODEV);
	/* GPUX_ANY leaves it out. */
	l.device = GPUX_ANY;
	for (int i = 0; i < 4; i++) {
		assert_int_equal(gpux_submit(e->m, "spin", &l, &arg, 1, &r), GPUX_OK);
		assert_int_equal(gpux_req_device(r), 0);
		assert_int_equal(gpux_wait(r, 5000), GPUX_OK);
		gpux_req_free(r);
	}
}

/*
 * The pid of the nth standby of device 0 that gpuxd said was ready (1: the first), waited for.
 * Its log line: "device 0: standby worker PID ready: ...".
 */
static pid_t standby_pid(const struct test_env *e, unsigned nth)
{
	static const char tag[] = "device 0: standby worker ";
	uint64_t until = mono_ns() + 30 * NSEC_PER_SEC;

	do {
		char line[4096];
		unsigned seen = 0;
		FILE *f = fopen(e->d.log, "re");

		while (f && fgets(line, sizeof(line), f)) {
			const char *p = strstr(line, tag);
			char *end;
			long pid;

			if (!p)
				continue;
			pid = strtol(p + sizeof(tag) - 1, &end, 10);
			if (pid > 0 && strncmp(end, " ready", 6) == 0 && ++seen == nth) {
				(void)fclose(f);
				return (pid_t)pid;
			}
		}
		if (f)
			(void)fclose(f);
		(void)usleep(10000);
	} while (mono_ns() < until);
	fail_msg("no standby number %u in the log", nth);
	return -1;
}

/* A client's kernel fault on device 0, and the device serving again. */
static void fault_and_wait(struct test_env *e, gpux_buf *b)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .device = 0 };
	struct gpux_arg arg = gpux_arg_inout(b, 0, 64);
	uint32_t gen = generation(e, 0);

	assert_int_equal(gpux_run(e->m, "crash", &l, &arg, 1), GPUX_E_KERNEL_FAULT);
	test_wait_generation(&e->d, 0, gen);
	run_ok(e, 0);
}

/*
 * With --standby, a worker that dies of a client's kernel fault is followed by the device's
 * standby, started before: the device serves again with the standby's process, and the next
 * standby starts, to take over at the next death. One that dies while it waits is started
 * again, the device untouched. gpuxd stops them all with itself.
 */
static void test_e2e_standby_takes_over(void **state)
{
	const char *const args[] = { "--standby", NULL };
	struct test_env *e = test_env_open(args);
	pid_t worker = test_worker_pid(&e->d, 0), sb = standby_pid(e, 1), sb2, sb3, sb4;
	gpux_buf *b;

	assert_true(sb > 0 && sb != worker);
	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	fault_and_wait(e, b);
	assert_int_equal(test_worker_pid(&e->d, 0), sb);
	assert_true(test_log_wait(&e->d, "the standby took over"));

	sb2 = standby_pid(e, 2);
	assert_true(sb2 != sb && sb2 != worker);
	fault_and_wait(e, b);
	assert_int_equal(test_worker_pid(&e->d, 0), sb2);

	/* The third, killed as it waits: a fourth comes, and the device serves on. */
	sb3 = standby_pid(e, 3);
	assert_int_equal(kill(sb3, SIGKILL), 0);
	sb4 = standby_pid(e, 4);
	assert_true(sb4 != sb3);
	assert_int_equal(test_worker_pid(&e->d, 0), sb2);
	run_ok(e, 0);
	gpux_buf_free(b);
	test_env_close(e);
	assert_int_equal(kill(sb2, 0), -1);
	assert_int_equal(kill(sb4, 0), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e2e_ok_end_marked_done),
		cmocka_unit_test(test_e2e_worker_killed_mid_request),
		cmocka_unit_test(test_e2e_kernel_fault_restarts_worker),
		cmocka_unit_test(test_e2e_deadline_passed_gives_timeout),
		cmocka_unit_test(test_e2e_deadline_of_a_gone_client_is_logged),
		cmocka_unit_test(test_e2e_client_killed_mid_request_is_reclaimed),
		cmocka_unit_test(test_e2e_dead_client_queued_work_never_runs),
		cmocka_unit_test(test_e2e_blamed_faults_do_not_fail_the_device),
		cmocka_unit_test(test_e2e_device_failed_after_repeated_deaths),
		cmocka_unit_test(test_e2e_standby_takes_over),
	};

	return cmocka_run_group_tests(tests, setup, test_env_teardown);
}
