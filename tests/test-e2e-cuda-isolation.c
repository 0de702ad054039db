/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-cuda-isolation.c: the CUDA back end's reserve and its marks for replay, on the fake libcuda. */
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/* The fake carries these out by name (tests/fake-cuda). */
static const char ptx[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .entry saxpy(.param .u64 saxpy_param_0, .param .f32 saxpy_param_1,\n"
	"\t.param .u64 saxpy_param_2, .param .u64 saxpy_param_3, .param .u64 saxpy_param_4)\n"
	"{\n\tret;\n}\n"
	".visible .entry append(.param .u32 append_param_0, .param .u64 append_param_1)\n"
	"{\n\tret;\n}\n"
	".visible .entry spin(.param .u32 spin_param_0)\n{\n\tret;\n}\n"
	".visible .entry fault()\n{\n\tret;\n}\n"
	".visible .entry slowfault(.param .u32 slowfault_param_0)\n{\n\tret;\n}\n";

static gpux_module *load_ptx(gpux_ctx *ctx)
{
	gpux_module *m = NULL;

	assert_int_equal(gpux_module_load(ctx, GPUX_LANG_PTX, ptx, sizeof(ptx), NULL, &m, NULL),
			 GPUX_OK);
	return m;
}

/*
 * A device of 128 MiB filled with device buffers (the quota raised past it): the allocation
 * that would eat the reserve (a sixteenth of the device by default: 8 MiB) is refused with a
 * message naming it, and a launch with IN and OUT arguments, whose copies need device memory
 * of their own (the slot's scratch), still runs.
 */
static void test_cuda_isolation_reserve_kept(void **state)
{
	static const char *const args[] = { "--backend",      "cuda",          "--slots", "2",
					    "--quota-device", "1099511627776", NULL };
	struct test_daemon d;
	gpux_dbuf *bufs[40];
	unsigned n = 0;
	uint64_t seed = 11;
	char *msg = NULL;
	gpux_status st;
	gpux_module *m;
	gpux_ctx *ctx;

	assert_int_equal(setenv("GPUX_FAKE_CUDA_MEM", "134217728", 1), 0);
	test_daemon_start(&d, args);
	ctx = test_connect(&d);
	m = load_ptx(ctx);
	while ((st = gpux_dbuf_alloc_ex(ctx, 0, 4 * MiB, 0, &bufs[n], &msg)) == GPUX_OK)
		assert_true(++n < ARRAY_SIZE(bufs));
	assert_int_equal(st, GPUX_E_NOMEM);
	assert_non_null(msg);
	assert_non_null(strstr(msg, "device-memory reserve"));
	free(msg);
	/* At least 8 MiB stay: 30 buffers of 4 MiB at most. */
	assert_true(n >= 20 && n <= 30);
	assert_int_equal(test_saxpy(ctx, m, 0, 1000, &seed), GPUX_OK);
	assert_int_equal(test_saxpy(ctx, m, 0, 100000, &seed), GPUX_OK);
	/* Nor does the device cache take it: a cached input goes uncached, and runs. */
	{
		struct ipc_status st;
		struct ipc_dev_status devs[IPC_DEVICES_MAX];
		uint64_t count = 1000;
		float a = 1.0f;
		gpux_buf *x, *out;

		assert_int_equal(gpux_buf_alloc(ctx, 2 * MiB, &x), GPUX_OK);
		assert_int_equal(gpux_buf_alloc(ctx, count * 4, &out), GPUX_OK);
		assert_int_equal(gpux_buf_freeze(x), GPUX_OK);
		{
			struct gpux_arg sargs[] = {
				GPUX_ARG_VALUE(count),           GPUX_ARG_VALUE(a),
				gpux_arg_cached(x, 0, 2 * MiB),  gpux_arg_cached(x, 0, count * 4),
				gpux_arg_out(out, 0, count * 4),
			};
			struct gpux_launch l = test_launch_1d(count, 0, NULL);

			assert_int_equal(gpux_run(m, "saxpy", &l, sargs, ARRAY_SIZE(sargs)),
					 GPUX_OK);
		}
		assert_int_equal(test_daemon_status(&d, &st, devs), 0);
		assert_int_equal(devs[0].stats.cache_entries, 0);
		gpux_buf_free(out);
		gpux_buf_free(x);
	}
	while (n > 0)
		gpux_dbuf_free(bufs[--n]);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(&d);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_MEM"), 0);
}

/* What the worker holds, while a client's library sends what waited for room (a socket full
 * of its messages goes on when the library is called: gpux_process()). */
struct holding {
	gpux_ctx *sender;
	uint64_t want;
};

static bool holds(const struct ipc_dev_status *s, void *arg)
{
	const struct holding *h = arg;

	(void)gpux_process(h->sender);
	return s->stats.inflight >= h->want;
}

/* A request's buffers: x and y IN, out OUT. */
struct saxpy_req {
	gpux_buf *x, *y, *out;
	gpux_req *r;
};

#define SAXPYS 300u /* past a slot's 256: the last ones wait in the worker's queue */
#define SAXPY_N 64u

/*
 * Client B's requests on one stream when client A's kernel faults on another: B's spin (its
 * kernel handed to the device, nothing to copy back: LAUNCHED) runs again on the next worker;
 * B's saxpys handed to the device have their results copied back (the fake carries out a
 * stream's kernels and copies as they are enqueued, and writes the marks around the copies:
 * STARTED, then DONE), so they end GPUX_OK, their results taken as the device left them,
 * though the worker died before it saw them end; one with a mapped argument, which changes
 * memory in place, fails GPUX_E_WORKER_LOST; those that waited in the worker's queue (past
 * the slot's 256) run again, in order. Every saxpy's results are right. A's fails with
 * GPUX_E_KERNEL_FAULT: B's spin and A's kernel both ran when the device broke, so the first
 * worker blames neither; both run again alone, and A's breaks the next worker by itself.
 */
static void test_cuda_isolation_marks_decide_replay(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "2", NULL };
	static struct saxpy_req s[SAXPYS];
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct test_daemon d;
	gpux_ctx *a, *b;
	gpux_module *ma, *mb;
	gpux_queue *qb;
	gpux_req *spin, *bad, *mapped;
	gpux_buf *mx, *mout;
	uint64_t seed = 5, want = SAXPYS + 2, n = SAXPY_N;
	uint32_t ms = 2000;

	test_daemon_start(&d, args);
	a = test_connect(&d);
	b = test_connect(&d);
	ma = load_ptx(a);
	mb = load_ptx(b);
	assert_int_equal(test_daemon_status(&d, &st, devs), 0);
	assert_int_equal(gpux_queue_open(b, 0, &qb), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(b, n * 4, &mx), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(b, n * 4, &mout), GPUX_OK);
	for (unsigned i = 0; i < SAXPYS; i++) {
		assert_int_equal(gpux_buf_alloc(b, n * 4, &s[i].x), GPUX_OK);
		assert_int_equal(gpux_buf_alloc(b, n * 4, &s[i].y), GPUX_OK);
		assert_int_equal(gpux_buf_alloc(b, n * 4, &s[i].out), GPUX_OK);
		test_fill_random(gpux_buf_data(s[i].x), n, &seed);
		test_fill_random(gpux_buf_data(s[i].y), n, &seed);
	}
	/* The stream busy long enough for all of it to be sent, however slow the machine. */
	{
		struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .queue = qb };
		struct gpux_arg arg = GPUX_ARG_VALUE(ms);

		assert_int_equal(gpux_submit(mb, "spin", &l, &arg, 1, &spin), GPUX_OK);
	}
	{
		float two = 2.0f;
		struct gpux_launch l = test_launch_1d(n, 0, qb);
		struct gpux_arg args2[] = { GPUX_ARG_VALUE(n), GPUX_ARG_VALUE(two),
					    gpux_arg_in(mx, 0, n * 4), gpux_arg_in(mx, 0, n * 4),
					    gpux_arg_mapped(mout, 0, n * 4) };

		assert_int_equal(gpux_submit(mb, "saxpy", &l, args2, 5, &mapped), GPUX_OK);
	}
	for (unsigned i = 0; i < SAXPYS; i++) {
		float f = (float)i;
		struct gpux_launch l = test_launch_1d(n, 0, qb);

		{
			struct gpux_arg sa[] = { GPUX_ARG_VALUE(n), GPUX_ARG_VALUE(f),
						 gpux_arg_in(s[i].x, 0, n * 4),
						 gpux_arg_in(s[i].y, 0, n * 4),
						 gpux_arg_out(s[i].out, 0, n * 4) };

			assert_int_equal(gpux_submit(mb, "saxpy", &l, sa, 5, &s[i].r), GPUX_OK);
		}
	}
	test_wait_stats(&d, 0, holds, &(struct holding){ b, want });
	assert_int_equal(gpux_submit(ma, "fault",
				     &(struct gpux_launch){ .grid = { 1 }, .block = { 1 } }, NULL,
				     0, &bad),
			 GPUX_OK);
	assert_int_equal(gpux_wait(bad, 10000), GPUX_E_KERNEL_FAULT);
	assert_int_equal(gpux_wait(spin, 10000), GPUX_OK);
	assert_int_equal(gpux_wait(mapped, 10000), GPUX_E_WORKER_LOST);
	for (unsigned i = 0; i < SAXPYS; i++) {
		gpux_status r = gpux_wait(s[i].r, 10000);

		if (r != GPUX_OK)
			fail_msg("saxpy %u: %s: %s", i, gpux_strerror(r), gpux_req_message(s[i].r));
		{
			const float *px = gpux_buf_data(s[i].x), *py = gpux_buf_data(s[i].y);
			const float *po = gpux_buf_data(s[i].out);

			for (unsigned k = 0; k < n; k++)
				assert_float_equal(po[k], (float)i * px[k] + py[k], 1e-5);
		}
	}
	test_wait_generation(&d, 0, devs[0].generation);
	for (unsigned i = 0; i < SAXPYS; i++) {
		gpux_req_free(s[i].r);
		gpux_buf_free(s[i].x);
		gpux_buf_free(s[i].y);
		gpux_buf_free(s[i].out);
	}
	gpux_req_free(spin);
	gpux_req_free(mapped);
	gpux_req_free(bad);
	gpux_buf_free(mx);
	gpux_buf_free(mout);
	gpux_queue_free(qb);
	gpux_module_free(ma);
	gpux_module_free(mb);
	gpux_disconnect(a);
	gpux_disconnect(b);
	test_daemon_stop(&d);
}

/*
 * One client's spin and its faulting kernel, each on a queue (and stream) of its own: both ran
 * when the device broke, so the first worker blames neither, and the client sends both again,
 * each alone, in their order. The spin runs and ends well; the faulting kernel, started once
 * the spin's end is answered (perhaps within the drain of that answer), breaks the next worker
 * at once (the fake's fault): it is told GPUX_E_KERNEL_FAULT, not lost with its worker as of a
 * cause not known. The fault's launch returns only 100 ms after it broke the device, as from a
 * loop thread descheduled there: the spin's waiter sees the error before the faulting kernel
 * is on its slot, and must not blame the spin alone.
 */
static void test_cuda_isolation_alone_after_alone_is_blamed(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "2", NULL };
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct test_daemon d;
	uint32_t ms = 300;
	struct gpux_arg a = GPUX_ARG_VALUE(ms);
	gpux_queue *q[2];
	gpux_module *m;
	gpux_req *spin, *bad;
	gpux_ctx *c;

	(void)state;
	assert_int_equal(setenv("GPUX_FAKE_CUDA_FAULT_HOLD_MS", "100", 1), 0);
	test_daemon_start(&d, args);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_FAULT_HOLD_MS"), 0);
	c = test_connect(&d);
	m = load_ptx(c);
	assert_int_equal(test_daemon_status(&d, &st, devs), 0);
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(gpux_queue_open(c, 0, &q[i]), GPUX_OK);
	assert_int_equal(
		gpux_submit(m, "spin",
			    &(struct gpux_launch){ .grid = { 1 }, .block = { 1 }, .queue = q[0] },
			    &a, 1, &spin),
		GPUX_OK);
	assert_int_equal(
		gpux_submit(m, "fault",
			    &(struct gpux_launch){ .grid = { 1 }, .block = { 1 }, .queue = q[1] },
			    NULL, 0, &bad),
		GPUX_OK);
	assert_int_equal(gpux_wait(spin, 10000), GPUX_OK);
	if (gpux_wait(bad, 10000) != GPUX_E_KERNEL_FAULT)
		fail_msg("the faulting kernel: %s", gpux_req_message(bad));
	test_wait_generation(&d, 0, devs[0].generation + 1);
	gpux_req_free(spin);
	gpux_req_free(bad);
	for (unsigned i = 0; i < 2; i++)
		gpux_queue_free(q[i]);
	gpux_module_free(m);
	gpux_disconnect(c);
	test_daemon_stop(&d);
}

static bool running(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.inflight >= *(const uint64_t *)arg;
}

/*
 * A request sent on a new channel before the worker's page of marks has come (a forked
 * child's first, while its worker is slow to attach it: stopped here, and let go 20 ms after
 * the child connected) holds a word of that page all the same: the library waits for the page.
 * So when a neighbour's fault breaks the device while it runs, blaming nobody, it runs again
 * (alone) and ends well, rather than being lost with its worker.
 */
static void test_cuda_isolation_first_request_on_a_new_channel_runs_again(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "2", NULL };
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct test_daemon d;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint64_t until, one = 1;
	gpux_ctx *a, *bad;
	gpux_module *ma, *mb;
	gpux_queue *q;
	gpux_req *fault;
	uint32_t before;
	pid_t worker, child;
	int go[2];

	(void)state;
	test_daemon_start(&d, args);
	a = test_connect(&d);
	bad = test_connect(&d);
	ma = load_ptx(a);
	mb = load_ptx(bad);
	assert_int_equal(gpux_queue_open(bad, 0, &q), GPUX_OK);
	assert_int_equal(pipe(go), 0);
	worker = test_worker_pid(&d, 0);
	assert_int_equal(test_daemon_status(&d, &st, devs), 0);
	before = st.nclients;
	assert_int_equal(kill(worker, SIGSTOP), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		uint32_t ms = 300;
		struct gpux_arg sa = GPUX_ARG_VALUE(ms);
		gpux_req *spin;

		if (gpux_submit(ma, "spin", &l, &sa, 1, &spin) != GPUX_OK)
			_exit(10);
		if (write(go[1], "s", 1) != 1)
			_exit(11);
		_exit(gpux_wait(spin, 10000) == GPUX_OK ? 0 : 12);
	}
	(void)close(go[1]);
	until = mono_ns() + 10 * NSEC_PER_SEC;
	do {
		(void)usleep(1000);
		assert_int_equal(test_daemon_status(&d, &st, devs), 0);
	} while (st.nclients <= before && mono_ns() < until);
	assert_true(st.nclients > before);
	(void)usleep(20 * 1000);
	assert_int_equal(kill(worker, SIGCONT), 0);
	{
		char c;

		assert_int_equal(read(go[0], &c, 1), 1);
	}
	(void)close(go[0]);
	test_wait_stats(&d, 0, running, &one);
	l.queue = q;
	assert_int_equal(gpux_submit(mb, "fault", &l, NULL, 0, &fault), GPUX_OK);
	assert_child_ok(child);
	assert_int_equal(gpux_wait(fault, 10000), GPUX_E_KERNEL_FAULT);
	gpux_req_free(fault);
	gpux_queue_free(q);
	gpux_module_free(ma);
	gpux_module_free(mb);
	gpux_disconnect(a);
	gpux_disconnect(bad);
	test_daemon_stop(&d);
}

/* `kernel` on q with arguments a; sent, not waited for. */
static gpux_req *submit(gpux_module *m, gpux_queue *q, const char *kernel, struct gpux_arg *a,
			unsigned n)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .queue = q };
	gpux_req *r;

	assert_int_equal(gpux_submit(m, kernel, &l, a, n, &r), GPUX_OK);
	return r;
}

/* append(v) to log, INOUT: its results are copied back. */
static gpux_req *append(gpux_module *m, gpux_queue *q, gpux_buf *log, uint32_t v)
{
	struct gpux_arg a[] = { GPUX_ARG_VALUE(v), gpux_arg_inout(log, 0, 64) };

	return submit(m, q, "append", a, 2);
}

/* How many entries a log's copy in the client's memory holds. */
static uint32_t log_len(gpux_buf *log)
{
	return __atomic_load_n((const uint32_t *)gpux_buf_data(log), __ATOMIC_ACQUIRE);
}

/*
 * Copies back as a neighbour's kernel breaks the device (the fake's copies from the device take
 * 2 s here, and one that a fault overtakes fails before it lands; its kernels keep their
 * streams busy for 5 s, so the worker sees none of B's end). B's first append, whose copy back
 * ended before A's slowfault broke the device at 1 s, is DONE: it ends GPUX_OK, its entry in
 * its log once. B's second, whose copy back had begun when the device broke and never landed,
 * is STARTED, not DONE: it ends GPUX_E_WORKER_LOST (its results are not all there) and never
 * runs again, on the next worker either.
 */
static void test_cuda_isolation_copy_back_cut_short_is_lost(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "4", NULL };
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct test_daemon d;
	gpux_ctx *a, *b;
	gpux_module *ma, *mb;
	gpux_queue *qa, *qb[2];
	gpux_buf *log[2];
	gpux_req *bad, *done, *cut;
	uint32_t fault_ms = 1000, zero = 0;
	struct gpux_arg a_fault = GPUX_ARG_VALUE(fault_ms), a_zero = GPUX_ARG_VALUE(zero);

	assert_int_equal(setenv("GPUX_FAKE_CUDA_COPY_BACK_MS", "2000", 1), 0);
	assert_int_equal(setenv("GPUX_FAKE_CUDA_KERNEL_NS", "5000000000", 1), 0);
	test_daemon_start(&d, args);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_COPY_BACK_MS"), 0);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_KERNEL_NS"), 0);
	assert_int_equal(test_daemon_status(&d, &st, devs), 0);
	a = test_connect(&d);
	b = test_connect(&d);
	ma = load_ptx(a);
	mb = load_ptx(b);
	/* Three queues, three of the four streams (a queue takes the least used). */
	assert_int_equal(gpux_queue_open(a, 0, &qa), GPUX_OK);
	assert_int_equal(gpux_queue_open(b, 0, &qb[0]), GPUX_OK);
	assert_int_equal(gpux_queue_open(b, 0, &qb[1]), GPUX_OK);
	for (unsigned i = 0; i < 2; i++) {
		assert_int_equal(gpux_buf_alloc(b, 64, &log[i]), GPUX_OK);
		memset(gpux_buf_data(log[i]), 0, 64);
	}
	done = append(mb, qb[0], log[0], 7);
	/* Its copy back landed (DONE is marked just after it, in stream order). */
	for (int tries = 0; log_len(log[0]) == 0; tries++) {
		assert_true(tries < 20000);
		(void)usleep(1000);
	}
	bad = submit(ma, qa, "slowfault", &a_fault, 1);
	test_wait_stats(&d, 0, holds, &(struct holding){ a, 2 });
	cut = append(mb, qb[1], log[1], 8);
	assert_int_equal(gpux_wait(bad, 20000), GPUX_E_KERNEL_FAULT);
	assert_int_equal(gpux_wait(done, 20000), GPUX_OK);
	assert_int_equal(gpux_wait(cut, 20000), GPUX_E_WORKER_LOST);
	test_wait_generation(&d, 0, devs[0].generation);
	gpux_req_free(cut);
	cut = submit(mb, qb[1], "spin", &a_zero, 1);
	assert_int_equal(gpux_wait(cut, 20000), GPUX_OK);
	/* Each ran once: the first's entry came back, nothing of the second did. */
	assert_int_equal(log_len(log[0]), 1);
	assert_int_equal(((const uint32_t *)gpux_buf_data(log[0]))[1], 7);
	assert_int_equal(log_len(log[1]), 0);
	gpux_req_free(bad);
	gpux_req_free(done);
	gpux_req_free(cut);
	gpux_buf_free(log[0]);
	gpux_buf_free(log[1]);
	gpux_queue_free(qa);
	gpux_queue_free(qb[0]);
	gpux_queue_free(qb[1]);
	gpux_module_free(ma);
	gpux_module_free(mb);
	gpux_disconnect(a);
	gpux_disconnect(b);
	test_daemon_stop(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cuda_isolation_reserve_kept),
		cmocka_unit_test(test_cuda_isolation_marks_decide_replay),
		cmocka_unit_test(test_cuda_isolation_alone_after_alone_is_blamed),
		cmocka_unit_test(test_cuda_isolation_first_request_on_a_new_channel_runs_again),
		cmocka_unit_test(test_cuda_isolation_copy_back_cut_short_is_lost),
	};

	return cmocka_run_group_tests_name("e2e-cuda-isolation", tests, NULL, NULL);
}
