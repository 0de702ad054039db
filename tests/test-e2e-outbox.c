/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-outbox.c: a worker that stops reading its channel holds no caller of the library. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

static int setup(void **state)
{
	*state = test_env_open(NULL);
	return 0;
}

static int teardown(void **state)
{
	test_env_close(*state);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_outbox_full_socket_holds_nobody, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
