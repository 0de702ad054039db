/* SPDX-License-Identifier: MIT */
/* tests/test-sweep-cuda.c: every entry point of the fake libcuda failed in turn, at each call. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "e2e.h"
#include "fake-sweep.h"
#include "helpers.h"
#include "macro.h"

/*
 * Fault injection as SQLite does it: fail call N of an entry point, for N = 1, 2, ... until a
 * run passes clean (that call never came), here through the fake driver's sweep file
 * (tests/fake-cuda/fake-sweep.h). A scenario is a worker's work from one client (its start,
 * module loads, launches with copies in and out, device buffers, graphs, cached inputs,
 * queues); its entry points are those a clean run of it calls. For each, a fresh gpuxd runs
 * the scenario with that call failing CUDA_ERROR_OUT_OF_MEMORY, then a second pass fails the
 * entry point's first call with a sticky error (CUDA_ERROR_ILLEGAL_ADDRESS). N stops at
 * $GPUX_SWEEP_MAX_N (4; 0: no bound) for entry points called more often, such as the event
 * queries of a waiter. The failure model says what each run must come to:
 *
 *   - out of memory: every call GPUX_OK or GPUX_E_NOMEM, and the same worker serves on;
 *   - a sticky error: GPUX_OK, GPUX_E_KERNEL_FAULT or GPUX_E_WORKER_LOST, and the worker is
 *     restarted (the scenario is tried again, up to 3 times, until it passes);
 *   - at start (scenario "start", armed before gpuxd starts, its calls counted from there):
 *     gpuxd may refuse to start (its probe failed: exit status 1, no signal), or the worker
 *     fails to start and is started again, or the failure comes later, as above;
 *
 * and, each time: no wait longer than 20 s; right results from every call that said GPUX_OK;
 * the scenario again without a failure, all GPUX_OK and right; then nothing leaked: this
 * process's fds, the worker's fds once the client is gone, the driver's objects when the worker
 * exits (the fake counts them), memory (LSan in a sanitized build, in the worker too); gpuxd
 * and its worker exit cleanly, with no crash or sanitizer report in the log.
 *
 * Usage: test-sweep-cuda [SCENARIO]: one scenario (as meson runs them), or all. Environment:
 * GPUX_SWEEP_MAX_N, GPUX_SWEEP_FN (one entry point only), GPUX_SWEEP_KEEP_GOING (say every
 * finding, fail at the end), GPUX_SWEEP_VERBOSE (say each run).
 */

#define WAIT_MS 20000
/* A run that takes longer than this is a hang: what it was is said, and the test aborts. */
#define RUN_ALARM_S 120u
#define RECOVERY_TRIES 3u

static const char ptx[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .entry saxpy(.param .u64 saxpy_param_0, .param .f32 saxpy_param_1,\n"
	"\t.param .u64 saxpy_param_2, .param .u64 saxpy_param_3, .param .u64 saxpy_param_4)\n"
	"{\n\tret;\n}\n"
	".visible .entry add1(.param .u64 add1_param_0, .param .u64 add1_param_1,\n"
	"\t.param .u64 add1_param_2)\n{\n\tret;\n}\n"
	".visible .entry spin(.param .u32 spin_param_0)\n{\n\tret;\n}\n";

/* Another module, for the scenario that loads and unloads one. */
static const char ptx_other[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .entry add1(.param .u64 add1_param_0, .param .u64 add1_param_1,\n"
	"\t.param .u64 add1_param_2)\n{\n\tret;\n}\n";

/* Floats in each buffer: 4 MiB + 4 (copies past a slot's scratch take pool temporaries). */
#define NBIG ((1u << 20) + 1u)

struct run {
	struct test_daemon d;
	gpux_ctx *ctx;
	gpux_module *m;
	gpux_buf *x, *y, *out, *frozen;
	/* What a failed call may say in this run: GPUX_OK only, when none is injected. */
	const gpux_status *allowed;
	unsigned nallowed;
	unsigned errors; /* calls that failed as allowed */
};

struct scenario {
	const char *name;
	bool at_start; /* armed before gpuxd starts */
	void (*body)(struct run *r);
};

static struct fake_sweep *sweep;
static char sweep_path[64];
/* The calls of each entry point when the run was armed and when it was disarmed (a scenario
 * armed after start is swept over the entry points it calls between the two). */
static uint32_t calls_armed[FAKE_SWEEP_FNS], calls_disarmed[FAKE_SWEEP_FNS];
/* The gpuxd of the run, killed if the test fails or hangs in it. */
static struct test_daemon *running;
/* What the run is, for messages (and the alarm's). */
static char run_what[256];
/* $GPUX_SWEEP_KEEP_GOING: say every finding and fail at the end, rather than at the first. */
static bool keep_going;
static unsigned findings;
/* $GPUX_SWEEP_VERBOSE: say each run as it starts. */
static bool verbose;

#define finding(...)                                                                               \
	do {                                                                                       \
		if (!keep_going)                                                                   \
			fail_msg(__VA_ARGS__);                                                     \
		print_error(__VA_ARGS__);                                                          \
		print_error("\n");                                                                 \
		findings++;                                                                        \
	} while (0)

static const gpux_status nomem_allowed[] = { GPUX_E_NOMEM };
static const gpux_status sticky_allowed[] = { GPUX_E_KERNEL_FAULT, GPUX_E_WORKER_LOST };

static void on_alarm(int sig)
{
	static const char said[] = "test-sweep-cuda: a run took too long (a hang): ";

	(void)write(2, said, sizeof(said) - 1);
	(void)write(2, run_what, strnlen(run_what, sizeof(run_what)));
	(void)write(2, "\n", 1);
	if (running && running->pid > 0)
		(void)kill(running->pid, SIGKILL);
	abort();
}

/* ---- the steps of a scenario ---- */

/* A call's status: true for GPUX_OK; false for a failure this run allows; else the test fails. */
static bool step(struct run *r, const char *call, gpux_status st, gpux_req *req)
{
	if (st == GPUX_OK)
		return true;
	for (unsigned i = 0; i < r->nallowed; i++)
		if (st == r->allowed[i]) {
			r->errors++;
			return false;
		}
	finding("%s: %s: %s (%s)", run_what, call, gpux_strerror(st),
		req ? gpux_req_message(req) : "");
	return false;
}

/* Whether a submitted request ends GPUX_OK (false: as allowed); it is freed. */
static bool finish(struct run *r, const char *call, gpux_req *req)
{
	gpux_status st = gpux_wait(req, WAIT_MS);
	bool ok;

	if (st == GPUX_E_AGAIN)
		fail_msg("%s: %s: no end within %d ms", run_what, call, WAIT_MS);
	ok = step(r, call, st, req);
	gpux_req_free(req);
	return ok;
}

static bool launch(struct run *r, gpux_module *m, const char *kernel, uint64_t n,
		   const struct gpux_arg *args, uint32_t nargs, gpux_queue *q, uint32_t flags)
{
	struct gpux_launch l = test_launch_1d(n, 0, q);
	gpux_req *req = NULL;

	l.flags = flags;
	if (!step(r, kernel, gpux_submit(m, kernel, &l, args, nargs, &req), NULL))
		return false;
	return finish(r, kernel, req);
}

static void check_floats(const float *got, const float *want_a, float a, const float *want_b,
			 float b, uint64_t n, const char *what)
{
	for (uint64_t i = 0; i < n; i++) {
		float want = a * want_a[i] + (want_b ? want_b[i] : 0) + b;

		if (got[i] != want) {
			finding("%s: %s: element %llu is %g, not %g", run_what, what,
				(unsigned long long)i, (double)got[i], (double)want);
			return;
		}
	}
}

static bool saxpy(struct run *r, uint64_t n, uint32_t out_kind)
{
	float a = 2.0f;
	struct gpux_arg args[] = {
		GPUX_ARG_VALUE(n),
		GPUX_ARG_VALUE(a),
		gpux_arg_in(r->x, 0, n * 4),
		gpux_arg_in(r->y, 0, n * 4),
		gpux_arg_buf(out_kind, r->out, 0, n * 4),
	};

	memset(gpux_buf_data(r->out), 0, n * 4);
	if (!launch(r, r->m, "saxpy", n, args, 5, NULL, 0))
		return false;
	check_floats(gpux_buf_data(r->out), gpux_buf_data(r->x), a, gpux_buf_data(r->y), 0, n,
		     "saxpy");
	return true;
}

/* ---- scenarios ---- */

/* A first launch and device buffer, on a worker just started (its limits and memory read). */
static void body_start(struct run *r)
{
	gpux_dbuf *d = NULL;

	if (saxpy(r, 64, GPUX_ARG_OUT) &&
	    step(r, "gpux_dbuf_alloc", gpux_dbuf_alloc(r->ctx, 0, 1 << 20, &d), NULL))
		gpux_dbuf_free(d);
}

/* Copies in and out of every size: through the slot's scratch (small ones by cuMemcpy, those
 * of 4-256 KiB by the copy-in kernel), and past it through pool temporaries; INOUT; a timed
 * launch. */
static void body_copies(struct run *r)
{
	static const uint64_t sizes[] = { 64, 16384, NBIG };
	struct gpux_arg args[3];
	uint64_t n = 64;
	uint32_t ms = 0;

	for (unsigned i = 0; i < ARRAY_SIZE(sizes); i++)
		if (!saxpy(r, sizes[i], GPUX_ARG_OUT))
			return;
	/* An INOUT range goes to the device and comes back written. */
	memset(gpux_buf_data(r->out), 0, n * 4);
	args[0] = GPUX_ARG_VALUE(n);
	args[1] = gpux_arg_in(r->x, 0, n * 4);
	args[2] = gpux_arg_inout(r->out, 0, n * 4);
	if (!launch(r, r->m, "add1", n, args, 3, NULL, 0))
		return;
	check_floats(gpux_buf_data(r->out), gpux_buf_data(r->x), 1, NULL, 1, n, "add1 INOUT");
	args[0] = GPUX_ARG_VALUE(ms);
	(void)launch(r, r->m, "spin", 1, args, 1, NULL, GPUX_LAUNCH_TIMED);
}

/* Device buffers: made, written, a kernel between two of them, read back, freed. */
static void body_dbuf(struct run *r)
{
	const uint64_t n = 16384, bytes = n * 4;
	gpux_dbuf *a = NULL, *b = NULL;
	gpux_req *req = NULL;
	struct gpux_arg args[3];

	if (!step(r, "gpux_dbuf_alloc", gpux_dbuf_alloc(r->ctx, 0, bytes, &a), NULL) ||
	    !step(r, "gpux_dbuf_alloc", gpux_dbuf_alloc(r->ctx, 0, bytes, &b), NULL))
		goto out;
	if (!step(r, "gpux_dbuf_write", gpux_dbuf_write(a, 0, r->x, 0, bytes, NULL, &req), NULL) ||
	    !finish(r, "gpux_dbuf_write", req))
		goto out;
	args[0] = GPUX_ARG_VALUE(n);
	args[1] = gpux_arg_dbuf(a, 0, bytes);
	args[2] = gpux_arg_dbuf(b, 0, bytes);
	if (!launch(r, r->m, "add1", n, args, 3, NULL, 0))
		goto out;
	memset(gpux_buf_data(r->out), 0, bytes);
	if (!step(r, "gpux_dbuf_read", gpux_dbuf_read(r->out, 0, b, 0, bytes, NULL, &req), NULL) ||
	    !finish(r, "gpux_dbuf_read", req))
		goto out;
	check_floats(gpux_buf_data(r->out), gpux_buf_data(r->x), 1, NULL, 1, n, "dbuf add1");
out:
	gpux_dbuf_free(b);
	gpux_dbuf_free(a);
}

/* Launches that need no copy (mapped buffers), many at once: the worker sends them as graphs. */
static void body_graphs(struct run *r)
{
	enum { N = 16, CHUNK = 1024 };
	gpux_req *reqs[N] = { NULL };
	uint64_t n = CHUNK;
	bool ok = true;

	memset(gpux_buf_data(r->out), 0, N * CHUNK * 4);
	for (unsigned i = 0; i < N && ok; i++) {
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n),
			gpux_arg_mapped(r->x, i * CHUNK * 4, CHUNK * 4),
			gpux_arg_mapped(r->out, i * CHUNK * 4, CHUNK * 4),
		};
		struct gpux_launch l = test_launch_1d(n, 0, NULL);

		ok = step(r, "add1", gpux_submit(r->m, "add1", &l, args, 3, &reqs[i]), NULL);
	}
	for (unsigned i = 0; i < N; i++)
		if (reqs[i])
			ok = finish(r, "add1", reqs[i]) && ok;
	if (ok)
		check_floats(gpux_buf_data(r->out), gpux_buf_data(r->x), 1, NULL, 1, N * CHUNK,
			     "graphs of add1");
}

/* A cached input: uploaded by the worker apart from any request, then found again. */
static void body_cached(struct run *r)
{
	uint64_t n = 4096;
	struct gpux_arg args[] = {
		GPUX_ARG_VALUE(n),
		gpux_arg_cached(r->frozen, 0, n * 4),
		gpux_arg_out(r->out, 0, n * 4),
	};

	for (int i = 0; i < 2; i++) {
		memset(gpux_buf_data(r->out), 0, n * 4);
		if (!launch(r, r->m, "add1", n, args, 3, NULL, 0))
			return;
		check_floats(gpux_buf_data(r->out), gpux_buf_data(r->frozen), 1, NULL, 1, n,
			     "add1 of a cached input");
	}
}

/* Queues of their own (a stream each: one of the default priority, one of the highest, one
 * with a compute share in a green context), closed again. */
static void body_queues(struct run *r)
{
	const struct gpux_queue_opts opts[] = {
		{ .size = sizeof(opts[0]) },
		{ .size = sizeof(opts[0]),
		  .flags = GPUX_QUEUE_PRIORITY,
		  .priority = GPUX_PRIORITY_MAX },
		{ .size = sizeof(opts[0]), .share = 25 },
	};
	gpux_queue *q[3] = { NULL, NULL, NULL };
	uint64_t n = 256;

	for (unsigned i = 0; i < 3; i++) {
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n),
			gpux_arg_in(r->x, 0, n * 4),
			gpux_arg_out(r->out, i * n * 4, n * 4),
		};

		if (!step(r, "gpux_queue_open_ex", gpux_queue_open_ex(r->ctx, 0, &opts[i], &q[i]),
			  NULL) ||
		    !launch(r, r->m, "add1", n, args, 3, q[i], 0))
			goto out;
		check_floats((const float *)gpux_buf_data(r->out) + i * n, gpux_buf_data(r->x), 1,
			     NULL, 1, n, "add1 on a queue");
	}
out:
	for (unsigned i = 3; i-- > 0;)
		gpux_queue_free(q[i]);
}

/* A module loaded, used and unloaded. */
static void body_module(struct run *r)
{
	gpux_module *m = NULL;
	uint64_t n = 64;
	struct gpux_arg args[] = {
		GPUX_ARG_VALUE(n),
		gpux_arg_in(r->x, 0, n * 4),
		gpux_arg_out(r->out, 0, n * 4),
	};

	if (!step(r, "gpux_module_load",
		  gpux_module_load(r->ctx, GPUX_LANG_PTX, ptx_other, sizeof(ptx_other), NULL, &m,
				   NULL),
		  NULL))
		return;
	if (launch(r, m, "add1", n, args, 3, NULL, 0))
		check_floats(gpux_buf_data(r->out), gpux_buf_data(r->x), 1, NULL, 1, n,
			     "add1 of a module just loaded");
	gpux_module_free(m);
}

static const struct scenario scenarios[] = {
	{ "start", true, body_start },    { "copies", false, body_copies },
	{ "dbuf", false, body_dbuf },     { "graphs", false, body_graphs },
	{ "cached", false, body_cached }, { "queues", false, body_queues },
	{ "module", false, body_module },
};

/* ---- one run ---- */

static void sweep_reset(void)
{
	memset(sweep, 0, sizeof(*sweep));
}

static int fn_index(const char *fn)
{
	for (uint32_t i = 0; i < sweep->nfns; i++)
		if (strcmp(sweep->fns[i].name, fn) == 0)
			return (int)i;
	fail_msg("the fake has no entry point %s", fn);
	return -1;
}

static uint32_t calls(int i)
{
	return __atomic_load_n(&sweep->fns[i].calls, __ATOMIC_SEQ_CST);
}

/* Fail call `at` of fn (counted from the start) with code. */
static void arm(const char *fn, uint32_t at, int code)
{
	(void)snprintf(sweep->fail_fn, sizeof(sweep->fail_fn), "%s", fn);
	sweep->fail_code = code;
	__atomic_store_n(&sweep->fail_at, at, __ATOMIC_SEQ_CST);
}

static void disarm(void)
{
	__atomic_store_n(&sweep->fail_at, 0, __ATOMIC_SEQ_CST);
}

static bool fired(void)
{
	return __atomic_load_n(&sweep->fired, __ATOMIC_SEQ_CST) != 0;
}

static uint32_t generation(const struct test_daemon *d)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(d, &st, devs), 0);
	return devs[0].generation;
}

static bool is_ready(const struct ipc_dev_status *s, void *arg)
{
	return s->state == GPUX_DEVICE_READY;
}

/* The worker's fds, once the client is gone, back to what a worker has without one. */
static void check_worker_fds(const struct test_daemon *d, int idle)
{
	uint64_t until = mono_ns() + 5 * NSEC_PER_SEC;
	pid_t pid;
	int n;

	test_wait_stats(d, 0, is_ready, NULL);
	pid = test_worker_pid(d, 0);
	while ((n = test_fd_count_of(pid)) != idle && mono_ns() < until)
		(void)usleep(10000);
	if (n != idle)
		finding("%s: the worker has %d fds once the client is gone, %d without one",
			run_what, n, idle);
}

/* The client, its module and buffers. Its module load may meet a failure armed at start: it
 * is then tried again as the scenario is. */
static void env_open(struct run *r)
{
	r->ctx = test_connect(&r->d);
	for (unsigned i = 0;; i++) {
		gpux_status st = gpux_module_load(r->ctx, GPUX_LANG_PTX, ptx, sizeof(ptx), NULL,
						  &r->m, NULL);

		if (st == GPUX_OK)
			break;
		if (i + 1 == RECOVERY_TRIES)
			fail_msg("%s: the module never loaded: %s", run_what, gpux_strerror(st));
		(void)step(r, "gpux_module_load", st, NULL);
		test_wait_stats(&r->d, 0, is_ready, NULL);
	}
	assert_int_equal(gpux_buf_alloc(r->ctx, NBIG * 4, &r->x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(r->ctx, NBIG * 4, &r->y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(r->ctx, NBIG * 4, &r->out), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(r->ctx, NBIG * 4, &r->frozen), GPUX_OK);
	for (uint32_t i = 0; i < NBIG; i++) {
		((float *)gpux_buf_data(r->x))[i] = (float)(i % 1000) * 0.5f;
		((float *)gpux_buf_data(r->y))[i] = (float)(i % 7);
		((float *)gpux_buf_data(r->frozen))[i] = (float)(i % 13);
	}
	assert_int_equal(gpux_buf_freeze(r->frozen), GPUX_OK);
}

static void env_close(struct run *r)
{
	gpux_buf_free(r->frozen);
	gpux_buf_free(r->out);
	gpux_buf_free(r->y);
	gpux_buf_free(r->x);
	gpux_module_free(r->m);
	gpux_disconnect(r->ctx);
	r->ctx = NULL;
}

/*
 * One run: the scenario with call `at` of fn failing with code (fn NULL: none; for a scenario
 * armed after start, `at` counts from the scenario's start), then again without. Returns
 * whether the failure came (false: the run passed clean).
 */
static bool run_one(struct run *r, const struct scenario *sc, const char *fn, uint32_t at, int code,
		    int *idle_fds)
{
	static const char *const args[] = { "--backend", "cuda", NULL };
	bool sticky = code == CUDA_ERROR_ILLEGAL_ADDRESS, came;
	int fds = test_fd_count(), st = 0;
	uint32_t gen;

	(void)snprintf(run_what, sizeof(run_what), "scenario %s, call %u of %s failing %d",
		       sc->name, at, fn ? fn : "(none)", code);
	if (verbose)
		print_message("%s\n", run_what);
	alarm(RUN_ALARM_S);
	running = &r->d;
	sweep_reset();
	if (fn && sc->at_start)
		arm(fn, at, code);
	if (test_daemon_try_start(&r->d, args, &st) < 0) {
		/* The probe failed: gpuxd says so and goes, as it must without devices. */
		if (!fn || !sc->at_start || !fired())
			fail_msg("%s: gpuxd exited with %#x", run_what, st);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 1)
			fail_msg("%s: gpuxd ended with %#x, not exit status 1", run_what, st);
		test_daemon_stop(&r->d);
		alarm(0);
		return true;
	}
	if (*idle_fds < 0)
		*idle_fds = test_fd_count_of(test_worker_pid(&r->d, 0));
	/* With the failure: what the failure model allows (from the start, when armed there). */
	r->errors = 0;
	r->allowed = !fn ? NULL : sticky ? sticky_allowed : nomem_allowed;
	r->nallowed = !fn ? 0 : sticky ? ARRAY_SIZE(sticky_allowed) : ARRAY_SIZE(nomem_allowed);
	if (!sc->at_start)
		r->nallowed = 0;
	env_open(r);
	gen = generation(&r->d);
	for (uint32_t i = 0; i < sweep->nfns; i++)
		calls_armed[i] = sc->at_start ? 0 : calls((int)i);
	if (fn && !sc->at_start)
		arm(fn, calls(fn_index(fn)) + at, code);
	r->nallowed = !fn ? 0 : sticky ? ARRAY_SIZE(sticky_allowed) : ARRAY_SIZE(nomem_allowed);
	sc->body(r);
	disarm();
	for (uint32_t i = 0; i < sweep->nfns; i++)
		calls_disarmed[i] = calls((int)i);
	came = fired();
	if (fn && !came && r->errors)
		finding("%s: calls failed, but not the one asked for", run_what);

	/* Then without: a worker that carries on, or one restarted after a sticky error. */
	for (unsigned i = 0;; i++) {
		test_wait_stats(&r->d, 0, is_ready, NULL);
		r->errors = 0;
		r->allowed = sticky && came && i + 1 < RECOVERY_TRIES ? sticky_allowed : NULL;
		r->nallowed = r->allowed ? ARRAY_SIZE(sticky_allowed) : 0;
		sc->body(r);
		if (r->errors == 0)
			break;
	}
	/* (At start, the failure may have been the probe's, or that of a worker replaced
	 * since.) */
	if (sticky && came && !sc->at_start && generation(&r->d) == gen)
		finding("%s: the worker went on after a sticky error", run_what);
	if (!sticky && !sc->at_start && generation(&r->d) != gen)
		finding("%s: the worker was restarted (generation %u, was %u)", run_what,
			generation(&r->d), gen);
	env_close(r);
	check_worker_fds(&r->d, *idle_fds);
	test_daemon_stop(&r->d);
	if (sweep->leaks || sweep->bad_releases)
		finding("%s: %u workers exited with driver objects left (%s), %u bad releases",
			run_what, sweep->leaks, sweep->leak_what, sweep->bad_releases);
	assert_no_fd_leak(fds);
	alarm(0);
	return came;
}

/* ---- the sweep ---- */

static unsigned max_n(void)
{
	const char *e = getenv("GPUX_SWEEP_MAX_N");

	return e && *e ? (unsigned)strtoul(e, NULL, 10) : 4u;
}

static void sweep_scenario(const struct scenario *sc)
{
	struct run r = { 0 };
	uint32_t called[FAKE_SWEEP_FNS];
	char names[FAKE_SWEEP_FNS][FAKE_SWEEP_NAME];
	uint32_t nfns;
	const char *only_fn = getenv("GPUX_SWEEP_FN");
	uint64_t t0 = mono_ns();
	unsigned runs = 1, failed = 0, bound = max_n();
	int idle = -1;

	/* A clean run: which entry points the scenario calls. */
	(void)run_one(&r, sc, NULL, 0, 0, &idle);
	assert_int_equal(sweep->magic, FAKE_SWEEP_MAGIC);
	nfns = sweep->nfns;
	for (uint32_t i = 0; i < nfns; i++) {
		called[i] = calls_disarmed[i] - calls_armed[i];
		memcpy(names[i], sweep->fns[i].name, FAKE_SWEEP_NAME);
	}
	for (uint32_t i = 0; i < nfns; i++) {
		const char *fn = names[i];

		if (called[i] == 0 || (only_fn && strcmp(only_fn, fn) != 0))
			continue;
		/* Out of memory at call 1, 2, ... until it never comes (or the bound). */
		for (uint32_t n = 1; bound == 0 || n <= bound; n++) {
			runs++;
			if (!run_one(&r, sc, fn, n, CUDA_ERROR_OUT_OF_MEMORY, &idle))
				break;
			failed++;
		}
		/* A sticky error at its first call. */
		runs++;
		failed += run_one(&r, sc, fn, 1, CUDA_ERROR_ILLEGAL_ADDRESS, &idle);
	}
	print_message("scenario %s: %u runs, %u with a failed call, %.1f s\n", sc->name, runs,
		      failed, (double)(mono_ns() - t0) / 1e9);
}

static const char *only;

/* After a failure in a run: its gpuxd goes (its worker with it). */
static int sweep_teardown(void **state)
{
	char cmd[300];

	if (running && running->pid > 0) {
		(void)kill(running->pid, SIGKILL);
		(void)waitpid(running->pid, NULL, 0);
		running->pid = 0;
		(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", running->dir);
		(void)system(cmd);
	}
	return 0;
}

static void test_sweep_cuda(void **state)
{
	unsigned done = 0;

	for (unsigned i = 0; i < ARRAY_SIZE(scenarios); i++)
		if (!only || strcmp(only, scenarios[i].name) == 0) {
			sweep_scenario(&scenarios[i]);
			done++;
		}
	if (done == 0)
		fail_msg("no scenario %s", only);
	if (findings)
		fail_msg("%u findings", findings);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_sweep_cuda, sweep_teardown),
	};
	int fd;

	only = argc > 1 ? argv[1] : NULL;
	keep_going = getenv("GPUX_SWEEP_KEEP_GOING") != NULL;
	verbose = getenv("GPUX_SWEEP_VERBOSE") != NULL;
	(void)signal(SIGALRM, on_alarm);
	(void)snprintf(sweep_path, sizeof(sweep_path), "/tmp/gpux-sweep-XXXXXX");
	fd = mkstemp(sweep_path);
	if (fd < 0 || ftruncate(fd, sizeof(struct fake_sweep)) < 0)
		return 1;
	sweep = mmap(NULL, sizeof(*sweep), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	(void)close(fd);
	if (sweep == MAP_FAILED)
		return 1;
	(void)setenv("GPUX_FAKE_CUDA_SWEEP", sweep_path, 1);
	fd = cmocka_run_group_tests(tests, NULL, NULL);
	(void)unlink(sweep_path);
	return fd;
}
