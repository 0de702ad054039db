/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-outbox.c: a worker that stops reading its channel holds no caller of the library. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "e2e.h"
#include "helpers.h"

/* How long the watchdog lets a stopped worker stay stopped: never reached unless broken. */
#define PATIENCE_S 30
/* Scalar arguments of 256 bytes (IPC_SCALAR_MAX) that make each launch too large for a ring. */
#define WIDE_PADS 61u

/* A kernel whose launch is a message of about 16 KiB: the socket carries each. */
static char *wide_kernel(void)
{
	char params[WIDE_PADS * 5 + 64], *src;
	size_t n = 0;

	for (unsigned i = 0; i < WIDE_PADS; i++)
		n += (size_t)snprintf(params + n, sizeof(params) - n, "256, ");
	assert_true(asprintf(&src,
			     "GPUX_HOST_PARAMS(wide, 4, %s sizeof(uint32_t *));\n"
			     "GPUX_HOST_KERNEL(wide)\n"
			     "{\n"
			     "	uint32_t i = GPUX_ARG(uint32_t, 0);\n"
			     "	const uint8_t *last = gpux_args[%u];\n"
			     "	uint32_t *out = GPUX_ARG(uint32_t *, %u);\n"
			     "	out[0] = i * 1000 + last[255];\n"
			     "}\n",
			     params, WIDE_PADS, WIDE_PADS + 1) > 0);
	return src;
}

/* Wakes a worker left stopped PATIENCE_S after it was stopped, and says so. */
struct watchdog {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pid_t worker;
	bool done;
	bool fired;
};

static void *watchdog_main(void *arg)
{
	struct watchdog *w = arg;
	struct timespec ts;

	(void)clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += PATIENCE_S;
	(void)pthread_mutex_lock(&w->lock);
	while (!w->done)
		if (pthread_cond_timedwait(&w->cond, &w->lock, &ts) != 0)
			break;
	if (!w->done) {
		w->fired = true;
		(void)kill(w->worker, SIGCONT);
	}
	(void)pthread_mutex_unlock(&w->lock);
	return NULL;
}

/*
 * With its worker stopped, a channel's socket fills up. The launches that do not fit any
 * more wait in the library, which returns at once: the caller, the other threads and fork()
 * go on. Once the worker reads again, every launch reaches it, in order, and runs.
 */
static void test_outbox_full_socket_holds_nobody(void **state)
{
	struct test_env *e = *state;
	struct gpux_launch one = { .grid = { 1 }, .block = { 1 } };
	struct watchdog w = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
	uint8_t pads[WIDE_PADS][256];
	struct gpux_arg args[WIDE_PADS + 2];
	char *src = wide_kernel(), *log = NULL;
	gpux_module *m = NULL;
	gpux_req **reqs;
	gpux_buf *out;
	uint32_t *res;
	int sv[2], sndbuf = 0, st;
	socklen_t sl = sizeof(sndbuf);
	unsigned n;
	pid_t pid;

	if (gpux_module_load(e->ctx, GPUX_LANG_HOST, src, strlen(src), NULL, &m, &log) != GPUX_OK)
		fail_msg("the wide kernel: %s", log ? log : "");
	free(log);
	free(src);
	/* Twice what the socket holds, wherever the system sets its default. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(getsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl), 0);
	(void)close(sv[0]);
	(void)close(sv[1]);
	n = 2 * (unsigned)sndbuf / (uint32_t)sizeof(pads) + 8;
	if (n > 64)
		skip(); /* a socket this large would take the test past the library's own cap */
	reqs = calloc(n, sizeof(*reqs));
	assert_non_null(reqs);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * sizeof(uint32_t), &out), GPUX_OK);
	res = gpux_buf_data(out);
	memset(res, 0xff, n * sizeof(uint32_t));

	/* The module's load made the channel, and the worker has the kernel, before it stops. */
	w.worker = test_worker_pid(&e->d, 0);
	assert_int_equal(kill(w.worker, SIGSTOP), 0);
	assert_int_equal(pthread_create(&w.thread, NULL, watchdog_main, &w), 0);
	for (uint32_t i = 0; i < n; i++) {
		memset(pads, (int)(i & 0xff), sizeof(pads));
		args[0] = GPUX_ARG_VALUE(i);
		for (unsigned k = 0; k < WIDE_PADS; k++)
			args[1 + k] = gpux_arg_scalar(pads[k], sizeof(pads[k]));
		args[WIDE_PADS + 1] = gpux_arg_out(out, i * sizeof(uint32_t), sizeof(uint32_t));
		assert_int_equal(gpux_submit(m, "wide", &one, args, WIDE_PADS + 2, &reqs[i]),
				 GPUX_OK);
	}
	/* fork() takes every context's lock: it comes back while the worker is still stopped. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(gpux_device_count(e->ctx), 1);

	(void)pthread_mutex_lock(&w.lock);
	w.done = true;
	(void)pthread_cond_signal(&w.cond);
	(void)pthread_mutex_unlock(&w.lock);
	assert_int_equal(pthread_join(w.thread, NULL), 0);
	assert_false(w.fired);
	assert_int_equal(kill(w.worker, SIGCONT), 0);

	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(gpux_wait(reqs[i], -1), GPUX_OK);
		gpux_req_free(reqs[i]);
		assert_int_equal(res[i], i * 1000 + (i & 0xff));
	}
	assert_int_equal(test_worker_pid(&e->d, 0), w.worker);
	gpux_buf_free(out);
	gpux_module_free(m);
	free(reqs);
}

/* A thread that makes n calls, each returning a request, while the test looks on. */
struct issuer {
	pthread_t thread;
	gpux_status (*issue)(void *arg, uint32_t i, gpux_req **ret_req);
	void *arg;
	uint32_t n;
	gpux_req **reqs;
	_Atomic pid_t tid;
	_Atomic uint32_t issued;
	_Atomic bool done;
	gpux_status failed;
};

static void *issuer_main(void *arg)
{
	struct issuer *it = arg;

	atomic_store(&it->tid, gettid());
	it->failed = GPUX_OK;
	for (uint32_t i = 0; i < it->n; i++) {
		gpux_status st = it->issue(it->arg, i, &it->reqs[i]);

		if (st != GPUX_OK) {
			it->failed = st;
			break;
		}
		atomic_fetch_add(&it->issued, 1);
	}
	atomic_store(&it->done, true);
	return NULL;
}

/* Whether the thread sleeps (in a system call), as /proc tells. */
static bool thread_sleeps(pid_t tid)
{
	char path[64], buf[512];
	const char *fields;

	(void)snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	fields = proc_stat_fields(path, buf, sizeof(buf));
	assert_non_null(fields);
	return fields[0] == 'S';
}

/*
 * With device 0's worker stopped (it may be already), make the issuer's calls until they have
 * all returned or the thread sleeps, waiting for room (nothing else can wake it while the
 * worker reads nothing); then let the worker go on. Every call must have succeeded, none
 * having ended the channel, and every request must end well. An issuer that neither sleeps
 * after a call nor finishes within PATIENCE_S (its first call waiting, say) fails the test,
 * once the worker went on and the thread returned, rather than hang it.
 */
static void issue_while_stopped(struct test_env *e, struct issuer *it)
{
	pid_t worker = test_worker_pid(&e->d, 0);
	uint64_t deadline = mono_ns() + PATIENCE_S * NSEC_PER_SEC;
	uint32_t late = UINT32_MAX; /* calls made when the patience ran out */

	it->reqs = calloc(it->n, sizeof(*it->reqs));
	assert_non_null(it->reqs);
	assert_int_equal(kill(worker, SIGSTOP), 0);
	assert_int_equal(pthread_create(&it->thread, NULL, issuer_main, it), 0);
	while (!atomic_load(&it->done) &&
	       !(atomic_load(&it->issued) > 0 && thread_sleeps(atomic_load(&it->tid)))) {
		if (mono_ns() >= deadline) {
			late = atomic_load(&it->issued);
			break;
		}
		(void)usleep(1000);
	}
	assert_int_equal(kill(worker, SIGCONT), 0);
	assert_int_equal(pthread_join(it->thread, NULL), 0);
	if (late != UINT32_MAX)
		fail_msg("with the worker stopped, the issuer made %u of %u calls in %d s, then "
			 "neither slept nor finished",
			 late, it->n, PATIENCE_S);
	assert_int_equal(it->failed, GPUX_OK);
	assert_int_equal(atomic_load(&it->issued), it->n);
	for (uint32_t i = 0; i < it->n; i++) {
		assert_int_equal(gpux_wait(it->reqs[i], -1), GPUX_OK);
		gpux_req_free(it->reqs[i]);
	}
	free(it->reqs);
	assert_int_equal(test_worker_pid(&e->d, 0), worker);
}

struct copies {
	gpux_dbuf *dbuf;
	gpux_buf *src;
	gpux_queue *q;
	gpux_buf **frozen;
};

/* Copy i: the source's word i over the device buffer's first, all on one queue. */
static gpux_status copy_word(void *arg, uint32_t i, gpux_req **ret_req)
{
	struct copies *c = arg;

	return gpux_dbuf_write(c->dbuf, 0, c->src, i * sizeof(uint32_t), sizeof(uint32_t), c->q,
			       ret_req);
}

/*
 * More small asynchronous copies than the library's whole outbox holds, made while the
 * worker is stopped: the calls wait for room rather than end the channel, and once the
 * worker goes on every copy runs, in order (the last one's word is what stays).
 */
static void test_outbox_many_copies_wait(void **state)
{
	struct test_env *e = *state;
	uint32_t n = CLI_OUTBOX_MAX / (uint32_t)(sizeof(struct ipc_hdr) + sizeof(struct ipc_copy));
	struct copies c = { 0 };
	struct issuer it = { .issue = copy_word, .arg = &c, .n = n };
	gpux_buf *back;
	uint32_t *words;
	gpux_req *r;

	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, sizeof(uint32_t), &c.dbuf), GPUX_OK);
	assert_int_equal(gpux_queue_open(e->ctx, 0, &c.q), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, (size_t)n * sizeof(uint32_t), &c.src), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, sizeof(uint32_t), &back), GPUX_OK);
	words = gpux_buf_data(c.src);
	for (uint32_t i = 0; i < n; i++)
		words[i] = i;
	/* The worker has the source's segment before it stops. */
	assert_int_equal(copy_word(&c, 0, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);

	issue_while_stopped(e, &it);
	assert_int_equal(gpux_dbuf_read(back, 0, c.dbuf, 0, sizeof(uint32_t), c.q, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);
	assert_int_equal(*(uint32_t *)gpux_buf_data(back), n - 1);
	gpux_buf_free(back);
	gpux_buf_free(c.src);
	gpux_queue_free(c.q);
	gpux_dbuf_free(c.dbuf);
}

/* Copy i: frozen buffer i (a segment of its own, sent with its fd) to word i. */
static gpux_status copy_frozen(void *arg, uint32_t i, gpux_req **ret_req)
{
	struct copies *c = arg;

	return gpux_dbuf_write(c->dbuf, i * sizeof(uint32_t), c->frozen[i], 0, sizeof(uint32_t),
			       NULL, ret_req);
}

#define FROZEN_COPIES 1000u
/* Fds this process may open beyond those it has: well above what the outbox may hold, well
 * below what a stopped worker's requests would leave in it. */
#define FD_ROOM (2u * CLI_OUTBOX_FDS_WAIT + 32u)

/*
 * Requests that each send a new segment, with its fd, while the worker is stopped: the
 * outbox holds copies of their fds, but not without bound. With few fds to spare the calls
 * wait for room rather than fail for lack of fds, and all run once the worker goes on. The
 * worker stops before the buffers are frozen: each new segment is offered to it as it is
 * made, and only while its socket takes it (freezing waits for no room), so the requests
 * carry the segments that did not fit.
 */
static void test_outbox_fds_are_capped(void **state)
{
	struct test_env *e = *state;
	struct copies c = { 0 };
	struct issuer it = { .issue = copy_frozen, .arg = &c, .n = FROZEN_COPIES };
	struct rlimit old, lim;
	gpux_buf *back;
	uint32_t *words;
	gpux_req *r;

	c.frozen = calloc(FROZEN_COPIES, sizeof(*c.frozen));
	assert_non_null(c.frozen);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, FROZEN_COPIES * sizeof(uint32_t), &c.dbuf),
			 GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, FROZEN_COPIES * sizeof(uint32_t), &back), GPUX_OK);
	assert_int_equal(kill(test_worker_pid(&e->d, 0), SIGSTOP), 0);
	for (uint32_t i = 0; i < FROZEN_COPIES; i++) {
		assert_int_equal(gpux_buf_alloc(e->ctx, sizeof(uint32_t), &c.frozen[i]), GPUX_OK);
		*(uint32_t *)gpux_buf_data(c.frozen[i]) = i * 7 + 1;
		assert_int_equal(gpux_buf_freeze(c.frozen[i]), GPUX_OK);
	}
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)test_fd_count() + FD_ROOM;
	assert_true(lim.rlim_cur <= old.rlim_cur);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
	issue_while_stopped(e, &it);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);

	assert_int_equal(
		gpux_dbuf_read(back, 0, c.dbuf, 0, FROZEN_COPIES * sizeof(uint32_t), NULL, &r),
		GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);
	words = gpux_buf_data(back);
	for (uint32_t i = 0; i < FROZEN_COPIES; i++) {
		assert_int_equal(words[i], i * 7 + 1);
		gpux_buf_free(c.frozen[i]);
	}
	free(c.frozen);
	gpux_buf_free(back);
	gpux_dbuf_free(c.dbuf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST_WITH_ENV(test_outbox_full_socket_holds_nobody),
		TEST_WITH_ENV(test_outbox_many_copies_wait),
		TEST_WITH_ENV(test_outbox_fds_are_capped),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
