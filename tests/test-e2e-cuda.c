/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-cuda.c: the CUDA back end through a real gpuxd, on a fake libcuda (no GPU needed). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "e2e.h"
#include "helpers.h"

/*
 * $GPUX_CUDA_LIB is the fake driver (tests/fake-cuda): device memory is host memory and it
 * carries out saxpy, add1, spin, fault and slowfault by name; GPUX_FAKE_CUDA_* make it fail on
 * demand.
 * CUDA C++ goes through the real NVRTC (in the sandboxed compiler) when there is one.
 */

static const char ptx[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .entry saxpy(.param .u64 saxpy_param_0, .param .f32 saxpy_param_1,\n"
	"\t.param .u64 saxpy_param_2, .param .u64 saxpy_param_3, .param .u64 saxpy_param_4)\n"
	"{\n\tret;\n}\n"
	".visible .entry add1(.param .u64 add1_param_0, .param .u64 add1_param_1,\n"
	"\t.param .u64 add1_param_2)\n{\n\tret;\n}\n"
	".visible .entry spin(.param .u32 spin_param_0)\n{\n\tret;\n}\n"
	".visible .entry fault()\n{\n\tret;\n}\n"
	".visible .entry slowfault(.param .u32 slowfault_param_0)\n{\n\tret;\n}\n"
	".visible .entry append(.param .u32 append_param_0, .param .u64 append_param_1)\n"
	"{\n\tret;\n}\n";

static const char cuda_src[] =
	"extern \"C\" __global__ void saxpy(unsigned long long n, float a, const float *x,\n"
	"                                  const float *y, float *out)\n"
	"{\n"
	"\tunsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
	"\tif (i < n)\n"
	"\t\tout[i] = a * x[i] + y[i];\n"
	"}\n";

static void start(struct test_daemon *d)
{
	static const char *const args[] = { "--backend", "cuda", NULL };

	test_daemon_start(d, args);
}

static gpux_module *load_ptx(gpux_ctx *ctx)
{
	gpux_module *m = NULL;

	assert_int_equal(gpux_module_load(ctx, GPUX_LANG_PTX, ptx, sizeof(ptx), NULL, &m, NULL),
			 GPUX_OK);
	return m;
}

static gpux_status saxpy(gpux_module *m, gpux_buf *x, gpux_buf *y, gpux_buf *out, uint64_t n,
			 float a, uint32_t out_kind)
{
	struct gpux_arg args[] = {
		GPUX_ARG_VALUE(n),
		GPUX_ARG_VALUE(a),
		gpux_arg_in(x, 0, n * 4),
		gpux_arg_in(y, 0, n * 4),
		gpux_arg_buf(out_kind, out, 0, n * 4),
	};
	struct gpux_launch l = test_launch_1d(n, 0, NULL);

	return gpux_run(m, "saxpy", &l, args, 5);
}

static void check_saxpy(gpux_buf *x, gpux_buf *y, gpux_buf *out, uint64_t n, float a)
{
	const float *px = gpux_buf_data(x), *py = gpux_buf_data(y), *po = gpux_buf_data(out);

	for (uint64_t i = 0; i < n; i++)
		assert_float_equal(po[i], a * px[i] + py[i], 1e-6);
}

static uint32_t generation(const struct test_daemon *d)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(d, &st, devs), 0);
	return devs[0].generation;
}

/*
 * The device, and copies between a request and it: through device memory and back, then
 * straight into the mapped pages; then copies of every size: small ones in the slot's
 * scratch memory (each argument its own place in it), larger ones that make it grow, ones
 * past its 4 MiB in temporaries from the pool, and the scratch used again after them.
 */
static void test_cuda_fake_device_and_copies(void **state)
{
	static const uint64_t sizes[] = { 64, 100000, 1u << 20, 64 };
	struct test_daemon *d = *state;
	struct gpux_device_info info;
	const uint64_t n = 300001, most = 1u << 20;
	uint64_t seed = 7;
	gpux_buf *x, *y, *out;
	gpux_module *m;
	gpux_ctx *ctx;

	start(d);
	ctx = test_connect(d);
	assert_int_equal(gpux_device_info(ctx, 0, &info), GPUX_OK);
	assert_int_equal(info.backend, GPUX_BACKEND_CUDA);
	assert_int_equal(info.cc_major, 9);
	assert_non_null(strstr(info.name, "Fake CUDA"));
	{
		/* The status says which driver and NVRTC the worker runs on. */
		struct ipc_status st;
		struct ipc_dev_status devs[IPC_DEVICES_MAX];

		assert_int_equal(test_daemon_status(d, &st, devs), 0);
		assert_true(devs[0].stats.driver_version >= 12000);
		assert_true(devs[0].stats.nvrtc_version >= 12000);
	}
	m = load_ptx(ctx);
	assert_int_equal(gpux_buf_alloc(ctx, most * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, most * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, most * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), most, &seed);
	test_fill_random(gpux_buf_data(y), most, &seed);
	for (uint32_t kind = GPUX_ARG_OUT; kind <= GPUX_ARG_MAPPED; kind++) {
		if (kind == GPUX_ARG_INOUT)
			continue;
		memset(gpux_buf_data(out), 0xff, n * 4);
		assert_int_equal(saxpy(m, x, y, out, n, 1.5f, kind), GPUX_OK);
		check_saxpy(x, y, out, n, 1.5f);
	}
	for (unsigned i = 0; i < ARRAY_SIZE(sizes); i++) {
		memset(gpux_buf_data(out), 0xff, sizes[i] * 4);
		assert_int_equal(saxpy(m, x, y, out, sizes[i], 0.5f, GPUX_ARG_OUT), GPUX_OK);
		check_saxpy(x, y, out, sizes[i], 0.5f);
	}
	gpux_buf_free(out);
	gpux_buf_free(y);
	gpux_buf_free(x);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

static void test_cuda_fake_parameters_checked(void **state)
{
	struct test_daemon *d = *state;
	gpux_ctx *ctx;
	gpux_module *m;
	gpux_buf *b;
	gpux_req *r;
	uint64_t n = 4;
	uint32_t small = 4;
	struct gpux_launch l = test_launch_1d(4, 0, NULL);

	start(d);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	assert_int_equal(gpux_buf_alloc(ctx, 64, &b), GPUX_OK);
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(b, 0, 16) };
		assert_int_equal(gpux_submit(m, "add1", &l, args, 2, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, -1), GPUX_E_INVAL);
		assert_non_null(strstr(gpux_req_message(r), "takes 3 arguments, 2 given"));
		gpux_req_free(r);
	}
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(small), gpux_arg_in(b, 0, 16),
					   gpux_arg_out(b, 16, 16) };
		assert_int_equal(gpux_submit(m, "add1", &l, args, 3, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, -1), GPUX_E_INVAL);
		assert_non_null(strstr(gpux_req_message(r), "argument 0"));
		gpux_req_free(r);
	}
	{
		struct gpux_launch big = { .grid = { 1, 1, 1 },
					   .block = { 64, 1, 1 },
					   .shared_bytes = 300 * 1024 };
		struct gpux_arg arg = GPUX_ARG_VALUE(small);
		/* Past the device's opt-in limit: refused before it is sent. */
		assert_int_equal(gpux_submit(m, "spin", &big, &arg, 1, &r), GPUX_E_INVAL);
		/* Above the default 48 KiB but within the opt-in limit: raised, and it runs. */
		big.shared_bytes = 100 * 1024;
		assert_int_equal(gpux_run(m, "spin", &big, &arg, 1), GPUX_OK);
	}
	gpux_buf_free(b);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

/* Out of device memory is not sticky: a clear status, and the worker goes on. */
static void test_cuda_fake_out_of_memory_is_not_fatal(void **state)
{
	struct test_daemon *d = *state;
	const uint64_t n = 1 << 20;
	gpux_buf *x, *y, *out;
	gpux_module *m;
	gpux_ctx *ctx;
	gpux_req *r;
	uint32_t gen;
	struct gpux_arg args[] = {
		GPUX_ARG_VALUE(n),       GPUX_ARG_VALUE(n),        gpux_arg_in(NULL, 0, 0),
		gpux_arg_in(NULL, 0, 0), gpux_arg_out(NULL, 0, 0),
	};
	float a = 2;

	assert_int_equal(setenv("GPUX_FAKE_CUDA_MEM", "10000000", 1), 0);
	start(d);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_MEM"), 0);
	gen = generation(d);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &out), GPUX_OK);
	args[1] = GPUX_ARG_VALUE(a);
	args[2] = gpux_arg_in(x, 0, n * 4);
	args[3] = gpux_arg_in(y, 0, n * 4);
	args[4] = gpux_arg_out(out, 0, n * 4);
	/* 12 MiB of temporaries where 10 MB exist. */
	assert_int_equal(gpux_submit(m, "saxpy",
				     &(struct gpux_launch){ .grid = { 8192 }, .block = { 128 } },
				     args, 5, &r),
			 GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_E_NOMEM);
	assert_non_null(strstr(gpux_req_message(r), "CUDA_ERROR_OUT_OF_MEMORY"));
	gpux_req_free(r);
	/* A smaller one fits, on the same worker. */
	args[2] = gpux_arg_in(x, 0, 4096);
	args[3] = gpux_arg_in(y, 0, 4096);
	args[4] = gpux_arg_out(out, 0, 4096);
	{
		uint64_t k = 1024;
		args[0] = GPUX_ARG_VALUE(k);
		assert_int_equal(gpux_run(m, "saxpy",
					  &(struct gpux_launch){ .grid = { 8 }, .block = { 128 } },
					  args, 5),
				 GPUX_OK);
	}
	assert_int_equal(generation(d), gen);
	gpux_buf_free(out);
	gpux_buf_free(y);
	gpux_buf_free(x);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

static bool inflight_one(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.inflight == 1;
}

static bool inflight_two(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.inflight == 2;
}

/* Start d's gpuxd with the driver's call `fail` (GPUX_FAKE_CUDA_FAIL's form; NULL: none)
 * failing in its first worker only (a file in `once` says it did). */
static void start_failing_once(struct test_daemon *d, const char *fail, const char *once)
{
	char path[300];

	(void)snprintf(path, sizeof(path), "%s/failed", once);
	assert_int_equal(setenv("GPUX_FAKE_CUDA_FAIL_ONCE", path, 1), 0);
	if (fail)
		assert_int_equal(setenv("GPUX_FAKE_CUDA_FAIL", fail, 1), 0);
	start(d);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_FAIL"), 0);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_FAIL_ONCE"), 0);
}

/*
 * A sticky error while a co-tenant's request runs on another stream. `refused`: the error is
 * the driver refusing the bad request's launch, so the bad one ran nothing and what was
 * running, the one suspect, is blamed; else the bad kernel ran and broke the device, both are
 * suspects, and none is blamed on that worker: both run again, each alone, and the bad one
 * breaks the next worker by itself. `shared`: the bad launch's dynamic shared memory. The one
 * blamed fails with KERNEL_FAULT; the other one, of another client, had not begun to copy
 * anything back: it runs again on the next worker and succeeds (client/replay.c). The injected
 * failure happens in the first worker only. `either`: the failure is the Nth call of something
 * both requests make, whose order the test does not hold: the bad one's, the co-tenant
 * running, has two suspects, and both run again and succeed (the failure was injected once);
 * the co-tenant's, the bad one ended by then, is blamed on it.
 */
static void sticky_case(struct test_daemon *d, const char *fail, const char *kernel,
			uint32_t shared, bool refused, bool either)
{
	gpux_ctx *ctx, *other;
	gpux_module *m, *om;
	gpux_req *bad, *victim, *blamed;
	uint32_t gen, ms = 2000, zero = 0;
	char *once = test_mkdtemp();
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	struct gpux_arg spin = GPUX_ARG_VALUE(ms), quick = GPUX_ARG_VALUE(zero);

	start_failing_once(d, fail, once);
	gen = generation(d);
	ctx = test_connect(d);
	other = test_connect(d);
	m = load_ptx(ctx);
	om = load_ptx(other);
	/* A co-tenant's request in flight on another stream. */
	{
		gpux_queue *q;
		struct gpux_launch lq = l;
		assert_int_equal(gpux_queue_open(other, 0, &q), GPUX_OK);
		lq.queue = q;
		assert_int_equal(gpux_submit(om, "spin", &lq, &spin, 1, &victim), GPUX_OK);
		/* Running before the bad one is launched (two clients' rings: either may come
		 * first). */
		test_wait_stats(d, 0, inflight_one, NULL);
		l.shared_bytes = shared;
		assert_int_equal(
			gpux_submit(m, kernel, &l, &quick, strcmp(kernel, "fault") ? 1 : 0, &bad),
			GPUX_OK);
		l.shared_bytes = 0;
		if (either) {
			gpux_status v = gpux_wait(victim, 10000);

			assert_int_equal(gpux_wait(bad, 10000), GPUX_OK);
			assert_true(v == GPUX_OK || v == GPUX_E_KERNEL_FAULT);
			blamed = v == GPUX_OK ? NULL : victim;
		} else {
			assert_int_equal(gpux_wait(bad, 10000),
					 refused ? GPUX_OK : GPUX_E_KERNEL_FAULT);
			assert_int_equal(gpux_wait(victim, 10000),
					 refused ? GPUX_E_KERNEL_FAULT : GPUX_OK);
			blamed = refused ? victim : bad;
		}
		assert_true(!blamed || strstr(gpux_req_message(blamed), "CUDA_ERROR_"));
		gpux_req_free(bad);
		gpux_req_free(victim);
		gpux_queue_free(q);
	}
	test_wait_generation(d, 0, gen);
	assert_int_equal(gpux_run(m, "spin", &l, &quick, 1), GPUX_OK);
	gpux_module_free(om);
	gpux_module_free(m);
	gpux_disconnect(other);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
	test_rmtree(once);
	free(once);
}

/* Device time is measured (timing events) only when asked for: they cost every launch. */
static void test_cuda_fake_device_time_when_asked(void **state)
{
	struct test_daemon *d = *state;
	const uint32_t ms = 30;
	struct gpux_arg arg = GPUX_ARG_VALUE(ms);
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	struct gpux_times t;
	gpux_module *m;
	gpux_ctx *ctx;
	gpux_req *r;

	start(d);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	for (int timed = 0; timed < 2; timed++) {
		l.flags = timed ? GPUX_LAUNCH_TIMED : 0;
		assert_int_equal(gpux_submit(m, "spin", &l, &arg, 1, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, -1), GPUX_OK);
		assert_int_equal(gpux_req_times(r, &t), GPUX_OK);
		assert_true(t.run_ns >= ms * 1000000ull);
		if (timed) {
			assert_true(t.device_ns >= ms * 1000000ull);
			assert_true(t.device_ns <= t.run_ns + 1000000ull);
		} else {
			assert_int_equal(t.device_ns, 0);
		}
		gpux_req_free(r);
	}
	/* No other flag exists. */
	l.flags = GPUX_LAUNCH_TIMED << 1;
	assert_int_equal(gpux_submit(m, "spin", &l, &arg, 1, &r), GPUX_E_INVAL);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

/*
 * A kernel that runs longer than a waiter spins: its waiter naps between looks. The fake
 * refuses a synchronize that a real driver would spin through (an event made without
 * CU_EVENT_BLOCKING_SYNC), which would hold a CPU for as long as the kernel runs.
 */
static void test_cuda_fake_long_wait_blocks(void **state)
{
	struct test_daemon *d = *state;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint32_t ms = 100;
	struct gpux_arg a = GPUX_ARG_VALUE(ms);
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct ipc_status st;
	uint64_t blocked;
	gpux_module *m;
	gpux_ctx *ctx;

	assert_int_equal(setenv("GPUX_FAKE_CUDA_REFUSE_SPIN", "1", 1), 0);
	start(d);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_REFUSE_SPIN"), 0);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	assert_int_equal(test_daemon_status(d, &st, devs), 0);
	blocked = devs[0].stats.blocking_waits;
	for (int i = 0; i < 3; i++)
		assert_int_equal(gpux_run(m, "spin", &l, &a, 1), GPUX_OK);
	assert_int_equal(test_daemon_status(d, &st, devs), 0);
	assert_true(devs[0].stats.blocking_waits >= blocked + 3);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

/* Device 0's requests whose end its worker's loop saw itself. */
static uint64_t loop_waits(const struct test_daemon *d)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(d, &st, devs), 0);
	return devs[0].stats.loop_waits;
}

/* A worker that spins for spin_us (GPUX_SPIN_US), on any machine. */
static void start_spinning(struct test_daemon *d, const char *spin_us)
{
	assert_int_equal(setenv("GPUX_SPIN_US", spin_us, 1), 0);
	start(d);
	assert_int_equal(unsetenv("GPUX_SPIN_US"), 0);
}

/*
 * Requests launched while nothing else runs on the device are watched by the loop thread that
 * launched them, not handed to a waiter (worker/cuda/cuda-slot.c): their ends are counted as seen
 * by the loop, and their results are the kernel's. With `fail`, the driver refuses the first
 * word a stream is to write at a group's end, or the page of words: the loop then sees ends
 * through events, and the worker says so.
 */
#define LONE_TRIES 64u

static void lone_requests_end_in_the_loop(struct test_daemon *d, const char *fail)
{
	gpux_buf *x, *y, *out;
	uint64_t before;
	unsigned n;
	gpux_module *m;
	gpux_ctx *ctx;

	if (fail)
		assert_int_equal(setenv("GPUX_FAKE_CUDA_FAIL", fail, 1), 0);
	start_spinning(d, "10000");
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_FAIL"), 0);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	assert_int_equal(gpux_buf_alloc(ctx, 64 * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, 64 * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, 64 * 4, &out), GPUX_OK);
	for (unsigned i = 0; i < 64; i++) {
		((float *)gpux_buf_data(x))[i] = (float)i;
		((float *)gpux_buf_data(y))[i] = 1;
	}
	before = loop_waits(d);
	/* Every one, unless the machine stopped the loop for the whole spin (10 ms), which a
	 * loaded machine running sanitized builds does now and then: until one is seen. */
	for (n = 0; n < LONE_TRIES && loop_waits(d) == before; n++) {
		memset(gpux_buf_data(out), 0, 64 * 4);
		assert_int_equal(saxpy(m, x, y, out, 64, 2.0f, GPUX_ARG_OUT), GPUX_OK);
		check_saxpy(x, y, out, 64, 2.0f);
	}
	assert_true(loop_waits(d) > before);
	assert_true(loop_waits(d) <= before + n);
	if (fail) {
		static const char said[] = "ends are seen through events only";
		size_t len;
		uint8_t *log = test_read_file(d->log, &len);

		assert_non_null(log);
		assert_non_null(memmem(log, len, said, sizeof(said) - 1));
		free(log);
	}
	gpux_buf_free(out);
	gpux_buf_free(y);
	gpux_buf_free(x);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

/* Through the word its stream writes (the fake writes it when the stream is through). */
static void test_cuda_fake_lone_request_ends_in_the_loop(void **state)
{
	lone_requests_end_in_the_loop(*state, NULL);
}

static void test_cuda_fake_lone_request_ends_without_the_word(void **state)
{
	lone_requests_end_in_the_loop(*state, "cuStreamWriteValue64:1:801");
}

/* The page of end words cannot be registered (the worker's first registration). */
static void test_cuda_fake_lone_request_ends_without_the_page(void **state)
{
	lone_requests_end_in_the_loop(*state, "cuMemHostRegister:1:2");
}

/*
 * What the loop holds goes to a waiter when it runs longer than the loop spins, and when
 * another group is launched behind it (in order, on its stream); a fault that the loop's
 * look sees is the waiter's to blame.
 */
static void test_cuda_fake_held_request_goes_to_a_waiter(void **state)
{
	struct test_daemon *d = *state;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } }, timed = l;
	uint32_t long_ms = 300, zero = 0;
	struct gpux_arg a_long = GPUX_ARG_VALUE(long_ms);
	struct gpux_arg a_zero = GPUX_ARG_VALUE(zero);
	gpux_req *first, *second, *bad;
	uint64_t before;
	gpux_module *m;
	gpux_ctx *ctx;
	uint32_t gen;

	start_spinning(d, "10000");
	ctx = test_connect(d);
	m = load_ptx(ctx);
	before = loop_waits(d);
	/* Another behind a held one on the same stream: the first goes to its waiter first.
	 * (Timed, the second is no graph node: they are two groups, whatever batch they are
	 * in.) */
	assert_int_equal(gpux_submit(m, "spin", &l, &a_long, 1, &first), GPUX_OK);
	timed.flags = GPUX_LAUNCH_TIMED;
	assert_int_equal(gpux_submit(m, "spin", &timed, &a_zero, 1, &second), GPUX_OK);
	assert_int_equal(gpux_wait(second, 10000), GPUX_OK);
	assert_int_equal(gpux_test(first), GPUX_OK);
	gpux_req_free(first);
	gpux_req_free(second);
	assert_int_equal(loop_waits(d), before);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);

	start_spinning(d, "1000");
	gen = generation(d);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	before = loop_waits(d);
	/* Far longer than the loop's 1 ms spin: a loop stopped for most of it by a busy
	 * machine still finds it running when its spin is over. */
	assert_int_equal(gpux_run(m, "spin", &l, &a_long, 1), GPUX_OK);
	assert_int_equal(loop_waits(d), before);
	/* A fault alone: the loop's look sees it, the waiter blames it. */
	assert_int_equal(gpux_submit(m, "fault", &l, NULL, 0, &bad), GPUX_OK);
	assert_int_equal(gpux_wait(bad, 10000), GPUX_E_KERNEL_FAULT);
	assert_non_null(strstr(gpux_req_message(bad), "CUDA_ERROR_ILLEGAL_ADDRESS"));
	gpux_req_free(bad);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_wait_generation(d, 0, gen);
	test_daemon_stop(d);
}

/*
 * A worker told to stop while its loop holds a lone request (just launched, within the spin)
 * still answers it before it goes: what it holds goes to a waiter, whose answer the last
 * rounds send.
 */
static void test_cuda_fake_held_request_answered_at_stop(void **state)
{
	struct test_daemon *d = *state;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint32_t ms = 50;
	struct gpux_arg a = GPUX_ARG_VALUE(ms);
	gpux_module *m;
	gpux_ctx *ctx;
	gpux_req *r;
	uint32_t gen;
	pid_t worker;

	start_spinning(d, "10000");
	gen = generation(d);
	worker = test_worker_pid(d, 0);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	/* The signal comes right behind the request: the loop takes both in the same few
	 * rounds, well within its 10 ms spin, and ends its loop holding the request. */
	assert_int_equal(gpux_submit(m, "spin", &l, &a, 1, &r), GPUX_OK);
	assert_int_equal(kill(worker, SIGTERM), 0);
	assert_int_equal(gpux_wait(r, 10000), GPUX_OK);
	gpux_req_free(r);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_wait_generation(d, 0, gen);
	test_daemon_stop(d);
}

/* An illegal address reported at synchronisation, as a real fault is. */
static void test_cuda_fake_fault_restarts_worker(void **state)
{
	sticky_case(*state, NULL, "fault", 0, false, false);
}

/* The driver refusing a launch with a sticky error (SQLite-style fault injection): a request
 * that ran, the co-tenant's, broke the device; the refused one is not blamed. A kernel goes as
 * a graph of one node: the victim's is the first cuGraphLaunch, the bad one's the second. */
static void test_cuda_fake_injected_launch_failure(void **state)
{
	sticky_case(*state, "cuGraphLaunch:2:719", "spin", 0, true, false);
}

/* The same refusal of a launch that no graph takes (more dynamic shared memory than every
 * kernel may have): cuLaunchKernel. */
static void test_cuda_fake_injected_kernel_launch_failure(void **state)
{
	sticky_case(*state, "cuLaunchKernel:1:719", "spin", 64 * 1024, true, false);
}

/*
 * A kernel's lookup meeting a sticky error (the driver's third lookup fails: after the
 * worker's own copy-in kernel and spin, saxpy's): nothing of the request ran, so it is not
 * told it faulted; lost with the worker, it runs again on the next (the failure is injected
 * in the first only) and succeeds.
 */
static void test_cuda_fake_injected_lookup_failure(void **state)
{
	struct test_daemon *d = *state;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint32_t zero = 0, gen;
	uint64_t n = 256, seed = 3;
	struct gpux_arg quick = GPUX_ARG_VALUE(zero);
	char *once = test_mkdtemp();
	gpux_buf *x, *y, *out;
	gpux_module *m;
	gpux_ctx *ctx;

	start_failing_once(d, "cuModuleGetFunction:3:719", once);
	gen = generation(d);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	assert_int_equal(gpux_run(m, "spin", &l, &quick, 1), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, &seed);
	test_fill_random(gpux_buf_data(y), n, &seed);
	assert_int_equal(saxpy(m, x, y, out, n, 2.0f, GPUX_ARG_OUT), GPUX_OK);
	check_saxpy(x, y, out, n, 2.0f);
	assert_true(generation(d) > gen);
	gpux_buf_free(x);
	gpux_buf_free(y);
	gpux_buf_free(out);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
	test_rmtree(once);
	free(once);
}

/* The event after a request refused with a sticky error: the request was launched, so it ran
 * and is a suspect; it ends at once (its end cannot be waited for), the other after it. The
 * second event recorded is the bad one's (the co-tenant running too: nobody is blamed, both
 * run again) or, now and then (seen on 2 CPUs), the co-tenant's, with the bad one ended (it
 * alone is blamed). */
static void test_cuda_fake_injected_event_failure(void **state)
{
	sticky_case(*state, "cuEventRecord:2:719", "spin", 0, false, true);
}

/*
 * A kernel that faults late (slowfault: its stream busy for 300 ms, then the context broken)
 * while a co-tenant's kernels, launched after it on other streams, still run. Taking the group
 * launched last blamed the co-tenant (as on an H200 under load); now each stream's running
 * group is a suspect and none is blamed: both clients send theirs again to run alone, where the
 * faulting one breaks the next worker by itself and is told so, and every one of the
 * co-tenant's requests ends GPUX_OK. Both clients work afterwards.
 */
static void test_cuda_fake_late_fault_blamed_on_its_kernel(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "4", NULL };
	struct test_daemon *d = *state;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint32_t fault_ms = 300, long_ms = 1000, zero = 0, gen;
	struct gpux_arg a_fault = GPUX_ARG_VALUE(fault_ms), a_long = GPUX_ARG_VALUE(long_ms);
	struct gpux_arg a_zero = GPUX_ARG_VALUE(zero);
	gpux_req *bad, *theirs[2][3];
	gpux_queue *qa, *qb[2];
	gpux_module *ma, *mb;
	gpux_ctx *a, *b;

	test_daemon_start(d, args);
	gen = generation(d);
	a = test_connect(d);
	b = test_connect(d);
	ma = load_ptx(a);
	mb = load_ptx(b);
	/* Three queues, three of the four streams (a queue takes the least used). */
	assert_int_equal(gpux_queue_open(a, 0, &qa), GPUX_OK);
	assert_int_equal(gpux_queue_open(b, 0, &qb[0]), GPUX_OK);
	assert_int_equal(gpux_queue_open(b, 0, &qb[1]), GPUX_OK);
	l.queue = qa;
	assert_int_equal(gpux_submit(ma, "slowfault", &l, &a_fault, 1, &bad), GPUX_OK);
	/* In flight before the co-tenant's come: theirs are launched after it, and run when it
	 * breaks the device. */
	test_wait_stats(d, 0, inflight_one, NULL);
	for (unsigned k = 0; k < 2; k++) {
		l.queue = qb[k];
		assert_int_equal(gpux_submit(mb, "spin", &l, &a_long, 1, &theirs[k][0]), GPUX_OK);
		assert_int_equal(gpux_submit(mb, "spin", &l, &a_zero, 1, &theirs[k][1]), GPUX_OK);
		assert_int_equal(gpux_submit(mb, "spin", &l, &a_zero, 1, &theirs[k][2]), GPUX_OK);
	}
	assert_int_equal(gpux_wait(bad, 20000), GPUX_E_KERNEL_FAULT);
	assert_non_null(strstr(gpux_req_message(bad), "CUDA_ERROR_ILLEGAL_ADDRESS"));
	for (unsigned k = 0; k < 2; k++)
		for (unsigned i = 0; i < 3; i++) {
			gpux_status st = gpux_wait(theirs[k][i], 20000);

			if (st != GPUX_OK)
				fail_msg("the co-tenant's request %u of queue %u: %s: %s", i, k,
					 gpux_strerror(st), gpux_req_message(theirs[k][i]));
			gpux_req_free(theirs[k][i]);
		}
	gpux_req_free(bad);
	test_wait_generation(d, 0, gen);
	l.queue = qa;
	assert_int_equal(gpux_run(ma, "spin", &l, &a_zero, 1), GPUX_OK);
	l.queue = qb[0];
	assert_int_equal(gpux_run(mb, "spin", &l, &a_zero, 1), GPUX_OK);
	gpux_queue_free(qa);
	gpux_queue_free(qb[0]);
	gpux_queue_free(qb[1]);
	gpux_module_free(ma);
	gpux_module_free(mb);
	gpux_disconnect(b);
	gpux_disconnect(a);
	test_daemon_stop(d);
}

/*
 * A co-tenant's request that ran to its end on the device (its stream wrote DONE after its
 * copies back) but whose end the worker had not seen when a neighbour's kernel broke the
 * device is no suspect: the faulting kernel is the only one, blamed at once (one restart;
 * nothing runs again alone, which would break a second worker), and the co-tenant's request
 * ends GPUX_OK with its results, taken as the device left them. Kernels keep their streams
 * busy for 2 s (GPUX_FAKE_CUDA_KERNEL_NS), so the co-tenant's has not ended when the
 * neighbour's breaks the device at 300 ms; the fake carries out its copies at once. Its
 * append to an INOUT log, on a stream of its own, is not run again either: the log holds one
 * entry.
 */
static void test_cuda_fake_done_request_no_suspect(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "4", NULL };
	enum { N = 256 };
	struct test_daemon *d = *state;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint32_t fault_ms = 300, gen;
	uint64_t seed = 11, n = N;
	float two = 2.0f;
	struct gpux_arg a_fault = GPUX_ARG_VALUE(fault_ms);
	uint32_t seven = 7;
	gpux_buf *x, *y, *out, *log;
	gpux_req *bad, *theirs, *appended;
	gpux_status st;
	gpux_queue *qa, *qb, *qb2;
	gpux_module *ma, *mb;
	gpux_ctx *a, *b;

	assert_int_equal(setenv("GPUX_FAKE_CUDA_KERNEL_NS", "2000000000", 1), 0);
	test_daemon_start(d, args);
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_KERNEL_NS"), 0);
	gen = generation(d);
	a = test_connect(d);
	b = test_connect(d);
	ma = load_ptx(a);
	mb = load_ptx(b);
	assert_int_equal(gpux_queue_open(a, 0, &qa), GPUX_OK);
	assert_int_equal(gpux_queue_open(b, 0, &qb), GPUX_OK);
	assert_int_equal(gpux_queue_open(b, 0, &qb2), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(b, 64, &log), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(b, N * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(b, N * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(b, N * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), N, &seed);
	test_fill_random(gpux_buf_data(y), N, &seed);
	{
		struct gpux_launch lb = test_launch_1d(N, 0, qb);
		struct gpux_arg sa[] = { GPUX_ARG_VALUE(n), GPUX_ARG_VALUE(two),
					 gpux_arg_in(x, 0, N * 4), gpux_arg_in(y, 0, N * 4),
					 gpux_arg_out(out, 0, N * 4) };

		assert_int_equal(gpux_submit(mb, "saxpy", &lb, sa, 5, &theirs), GPUX_OK);
	}
	test_wait_stats(d, 0, inflight_one, NULL);
	{
		struct gpux_launch lb = { .grid = { 1 }, .block = { 1 }, .queue = qb2 };
		struct gpux_arg aa[] = { GPUX_ARG_VALUE(seven), gpux_arg_inout(log, 0, 64) };

		memset(gpux_buf_data(log), 0, 64);
		assert_int_equal(gpux_submit(mb, "append", &lb, aa, 2, &appended), GPUX_OK);
	}
	test_wait_stats(d, 0, inflight_two, NULL);
	l.queue = qa;
	assert_int_equal(gpux_submit(ma, "slowfault", &l, &a_fault, 1, &bad), GPUX_OK);
	assert_int_equal(gpux_wait(bad, 20000), GPUX_E_KERNEL_FAULT);
	st = gpux_wait(theirs, 20000);
	if (st != GPUX_OK)
		fail_msg("the co-tenant's request: %s: %s", gpux_strerror(st),
			 gpux_req_message(theirs));
	check_saxpy(x, y, out, N, two);
	/* Once: its INOUT log, which a second run would have appended to again. */
	assert_int_equal(gpux_wait(appended, 20000), GPUX_OK);
	assert_int_equal(((const uint32_t *)gpux_buf_data(log))[0], 1);
	assert_int_equal(((const uint32_t *)gpux_buf_data(log))[1], seven);
	test_wait_generation(d, 0, gen);
	assert_int_equal(generation(d), gen + 1);
	gpux_req_free(bad);
	gpux_req_free(theirs);
	gpux_req_free(appended);
	gpux_buf_free(log);
	gpux_buf_free(x);
	gpux_buf_free(y);
	gpux_buf_free(out);
	gpux_queue_free(qa);
	gpux_queue_free(qb);
	gpux_queue_free(qb2);
	gpux_module_free(ma);
	gpux_module_free(mb);
	gpux_disconnect(b);
	gpux_disconnect(a);
	test_daemon_stop(d);
}

/* A client that speaks the protocol itself (as a hostile one could): its channel, with the
 * test's PTX loaded as module 7. */
struct raw_client {
	int sup, chan;
};

static void raw_open(const struct test_daemon *d, struct raw_client *ret)
{
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_mod_load ml = { .mod_id = 7, .lang = GPUX_LANG_PTX, .code_len = sizeof(ptx) };
	int n;

	ret->chan = test_raw_channel(d, &ret->sup);
	n = ipc_encode_mod_load(buf, sizeof(buf), 1, &ml, "", ptx);
	assert_true(n > 0);
	assert_int_equal(test_raw_call(ret->chan, buf, (size_t)n, NULL, 0), GPUX_OK);
}

static void raw_close(struct raw_client *c)
{
	(void)close(c->chan);
	(void)close(c->sup);
}

/* Request `id`: spin(ms) on the default queue, flagged to run alone; sent, not waited for. */
static void raw_spin_alone(const struct raw_client *c, uint32_t id, uint32_t ms)
{
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_arg arg = { .kind = GPUX_ARG_SCALAR, .size = sizeof(ms) };
	struct ipc_submit s = { .mod_id = 7,
				.nargs = 1,
				.grid = { 1, 1, 1 },
				.block = { 1, 1, 1 },
				.flags = IPC_SUBMIT_ALONE,
				.data_len = sizeof(ms) };
	int n = ipc_encode_submit(buf, sizeof(buf), id, &s, &arg, "spin", &ms);

	assert_true(n > 0);
	assert_int_equal(ipc_channel_send(c->chan, buf, (size_t)n, NULL, 0, 0), 0);
}

/*
 * A request flagged to run alone (as the library sends one that may have broken the last
 * worker's device) waits for what is in flight to end, and nothing starts beside it: another
 * client's spin runs on one stream, the flagged one comes (on a second), then that client's
 * short spin on a third. The fake's streams end as their kernels would: the short one ends
 * after the flagged one was answered, which was after the long one ended; side by side, the
 * short one would end first.
 */
static void test_cuda_fake_alone_runs_alone(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "4", NULL };
	struct test_daemon *d = *state;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint32_t long_ms = 1000, zero = 0;
	struct gpux_arg a_long = GPUX_ARG_VALUE(long_ms), a_zero = GPUX_ARG_VALUE(zero);
	struct raw_client raw;
	gpux_req *first, *late;
	gpux_queue *q[2];
	gpux_module *m;
	gpux_ctx *ctx;

	test_daemon_start(d, args);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	assert_int_equal(gpux_queue_open(ctx, 0, &q[0]), GPUX_OK);
	assert_int_equal(gpux_queue_open(ctx, 0, &q[1]), GPUX_OK);
	raw_open(d, &raw);
	l.queue = q[0];
	assert_int_equal(gpux_submit(m, "spin", &l, &a_long, 1, &first), GPUX_OK);
	test_wait_stats(d, 0, inflight_one, NULL);
	raw_spin_alone(&raw, 2, 200);
	test_wait_stats(d, 0, inflight_two, NULL);
	l.queue = q[1];
	assert_int_equal(gpux_submit(m, "spin", &l, &a_zero, 1, &late), GPUX_OK);
	assert_int_equal(gpux_wait(late, 10000), GPUX_OK);
	assert_int_equal(test_raw_done(raw.chan, 2, 0, NULL, 0), GPUX_OK);
	assert_int_equal(gpux_test(first), GPUX_OK);
	gpux_req_free(first);
	gpux_req_free(late);
	raw_close(&raw);
	gpux_queue_free(q[0]);
	gpux_queue_free(q[1]);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

/*
 * Running alone holds everybody up: a channel has IPC_MARKS_PER_CLIENT of its requests run
 * alone, and its flag is ignored after. The last one honoured waits for another client's spin
 * to end; the next one runs beside another.
 */
static void test_cuda_fake_alone_capped(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--slots", "4", NULL };
	struct test_daemon *d = *state;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint32_t long_ms = 500, id = 2;
	struct gpux_arg a_long = GPUX_ARG_VALUE(long_ms);
	struct raw_client raw;
	gpux_req *other;
	gpux_queue *q;
	gpux_module *m;
	gpux_ctx *ctx;

	test_daemon_start(d, args);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	assert_int_equal(gpux_queue_open(ctx, 0, &q), GPUX_OK);
	l.queue = q;
	raw_open(d, &raw);
	for (; id < 1 + IPC_MARKS_PER_CLIENT; id++) {
		raw_spin_alone(&raw, id, 0);
		assert_int_equal(test_raw_done(raw.chan, id, 10000, NULL, 0), GPUX_OK);
	}
	/* The last one honoured. */
	assert_int_equal(gpux_submit(m, "spin", &l, &a_long, 1, &other), GPUX_OK);
	test_wait_stats(d, 0, inflight_one, NULL);
	raw_spin_alone(&raw, id, 0);
	assert_int_equal(test_raw_done(raw.chan, id++, 10000, NULL, 0), GPUX_OK);
	assert_int_equal(gpux_test(other), GPUX_OK);
	gpux_req_free(other);
	/* One past them. */
	assert_int_equal(gpux_submit(m, "spin", &l, &a_long, 1, &other), GPUX_OK);
	test_wait_stats(d, 0, inflight_one, NULL);
	raw_spin_alone(&raw, id, 0);
	assert_int_equal(test_raw_done(raw.chan, id, 10000, NULL, 0), GPUX_OK);
	assert_int_equal(gpux_test(other), GPUX_E_AGAIN);
	assert_int_equal(gpux_wait(other, 10000), GPUX_OK);
	gpux_req_free(other);
	raw_close(&raw);
	gpux_queue_free(q);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

static uint64_t stat_of(const struct test_daemon *d, size_t off);
#define STAT(d, field) stat_of((d), offsetof(struct ipc_stats, field))

static gpux_buf *frozen(gpux_ctx *ctx, uint64_t n, uint64_t seed)
{
	gpux_buf *b;

	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &b), GPUX_OK);
	test_fill_random(gpux_buf_data(b), n, &seed);
	assert_int_equal(gpux_buf_freeze(b), GPUX_OK);
	return b;
}

static void test_cuda_fake_cache_and_dbufs(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--allow-group", "65534", NULL };
	struct test_daemon *d = *state;
	const uint64_t n = 20000;
	gpux_ctx *ctx;
	gpux_module *m;
	gpux_buf *a, *b, *x, *y;
	gpux_dbuf *da, *db;
	gpux_req *r;
	pid_t pid;

	test_daemon_start(d, args);
	assert_int_equal(chmod(d->dir, 0755), 0);
	ctx = test_connect(d);
	m = load_ptx(ctx);
	a = frozen(ctx, n, 11);
	b = frozen(ctx, n, 11);
	/* The first request uploads a (apart from its stream), later ones and b, the same
	 * bytes, use the device copy. */
	(void)test_add1_cached(ctx, m, a, n, 0);
	(void)test_add1_cached(ctx, m, a, n, 0);
	(void)test_add1_cached(ctx, m, b, n, 0);
	assert_int_equal(STAT(d, cache_misses), 1);
	assert_int_equal(STAT(d, cache_hits), 2);

	/* The same bytes from another user are not the same entry. */
	if (geteuid() == 0) {
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			gpux_ctx *c;
			gpux_module *om;
			gpux_buf *ob, *out;
			uint64_t seed = 11;
			struct gpux_launch l = test_launch_1d(n, 0, NULL);
			struct gpux_arg oa[3];

			if (setgid(65534) < 0 || setuid(65534) < 0 || gpux_connect(d->sock, &c) ||
			    gpux_module_load(c, GPUX_LANG_PTX, ptx, sizeof(ptx), NULL, &om, NULL) ||
			    gpux_buf_alloc(c, n * 4, &ob) || gpux_buf_alloc(c, n * 4, &out))
				_exit(1);
			test_fill_random(gpux_buf_data(ob), n, &seed);
			if (gpux_buf_freeze(ob))
				_exit(2);
			oa[0] = GPUX_ARG_VALUE(n);
			oa[1] = gpux_arg_cached(ob, 0, n * 4);
			oa[2] = gpux_arg_out(out, 0, n * 4);
			_exit(gpux_run(om, "add1", &l, oa, 3) == GPUX_OK ? 0 : 3);
		}
		assert_child_ok(pid);
		assert_int_equal(STAT(d, cache_hits), 2);
		assert_int_equal(STAT(d, cache_misses), 2);
	}

	/* x -> device buffer -> add1 -> device buffer -> back: the copies and kernel arguments. */
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &y), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, &(uint64_t){ 5 });
	assert_int_equal(gpux_dbuf_alloc(ctx, 0, n * 4, &da), GPUX_OK);
	assert_int_equal(gpux_dbuf_alloc(ctx, 0, n * 4, &db), GPUX_OK);
	assert_int_equal(gpux_dbuf_write(da, 0, x, 0, n * 4, NULL, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);
	{
		struct gpux_arg ka[] = { GPUX_ARG_VALUE(n), gpux_arg_dbuf(da, 0, n * 4),
					 gpux_arg_dbuf(db, 0, n * 4) };
		struct gpux_launch l = test_launch_1d(n, GPUX_ANY, NULL);
		assert_int_equal(gpux_run(m, "add1", &l, ka, 3), GPUX_OK);
	}
	assert_int_equal(gpux_dbuf_read(y, 0, db, 0, n * 4, NULL, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);
	for (uint64_t i = 0; i < n; i++)
		assert_float_equal(((float *)gpux_buf_data(y))[i],
				   ((float *)gpux_buf_data(x))[i] + 1, 0);
	gpux_dbuf_free(db);
	gpux_dbuf_free(da);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

static uint64_t stat_of(const struct test_daemon *d, size_t off)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	uint64_t v;

	assert_int_equal(test_daemon_status(d, &st, devs), 0);
	memcpy(&v, (const uint8_t *)&devs[0].stats + off, sizeof(v));
	return v;
}

/* Load the CUDA C++ saxpy and check it on fresh data. */
static void nvrtc_saxpy(const struct test_daemon *d, float a)
{
	const uint64_t n = 1000;
	uint64_t seed = (uint64_t)(int64_t)(a * 1000);
	gpux_ctx *ctx = test_connect(d);
	gpux_buf *x, *y, *out;
	gpux_module *m = NULL;
	char *log = NULL;

	assert_int_equal(gpux_module_load(ctx, GPUX_LANG_CUDA, cuda_src, sizeof(cuda_src) - 1,
					  "--use_fast_math -DX=1", &m, &log),
			 GPUX_OK);
	free(log);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, &seed);
	test_fill_random(gpux_buf_data(y), n, &seed);
	memset(gpux_buf_data(out), 0xff, n * 4);
	assert_int_equal(saxpy(m, x, y, out, n, a, GPUX_ARG_OUT), GPUX_OK);
	check_saxpy(x, y, out, n, a);
	gpux_disconnect(ctx);
}

/*
 * A user's cached inputs count against its device memory cap (gpuxd --quota-device-user) with
 * its device buffers: past the cap an input is not cached, its request still runs; a device
 * buffer that needs the room takes it from the user's idle entries. Another user (as root
 * only), since gpuxd's own is not capped.
 */
static void test_cuda_fake_user_cap_counts_cached_inputs(void **state)
{
	static const char *const args[] = {
		"--backend", "cuda", "--allow-group", "65534", "--quota-device-user",
		"104857600", NULL
	};
	struct test_daemon *d = *state;
	const uint64_t n = (16u << 20) / 4;
	pid_t pid;

	if (geteuid() != 0)
		skip();
	test_daemon_start(d, args);
	assert_int_equal(chmod(d->dir, 0755), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpux_ctx *c;
		gpux_module *om;
		gpux_buf *in;
		gpux_dbuf *db;

		if (setgid(65534) < 0 || setuid(65534) < 0 || gpux_connect(d->sock, &c) ||
		    gpux_module_load(c, GPUX_LANG_PTX, ptx, sizeof(ptx), NULL, &om, NULL))
			_exit(10);
		in = frozen(c, n, 7);
		/* 90 MiB held: 16 more are past 100, so not cached. */
		if (gpux_dbuf_alloc(c, 0, 90u << 20, &db) != GPUX_OK)
			_exit(11);
		(void)test_add1_cached(c, om, in, n, 0);
		if (STAT(d, cache_bytes) != 0 || STAT(d, cache_misses) != 1)
			_exit(12);
		gpux_dbuf_free(db);
		(void)test_add1_cached(c, om, in, n, 0);
		if (STAT(d, cache_bytes) != n * 4)
			_exit(13);
		/* 16 cached and idle, 90 more: the entry gives way. */
		if (gpux_dbuf_alloc(c, 0, 90u << 20, &db) != GPUX_OK || STAT(d, cache_bytes) != 0)
			_exit(14);
		_exit(0);
	}
	assert_child_ok(pid);
}

/* Restart gpuxd (new workers) on a copy of the old one's module cache, corrupted if asked. */
static void restart_with_cache(struct test_daemon *d, bool corrupt)
{
	char keep[320], cmd[1200];

	(void)snprintf(keep, sizeof(keep), "%s-cache", d->dir);
	(void)snprintf(cmd, sizeof(cmd), "cp -r %s %s", d->cache, keep);
	assert_int_equal(system(cmd), 0);
	if (corrupt) {
		(void)snprintf(cmd, sizeof(cmd),
			       "for f in %s/*.cubin; do printf garbage | "
			       "dd of=$f bs=1 seek=100 conv=notrunc 2>/dev/null; done",
			       keep);
		assert_int_equal(system(cmd), 0);
	}
	test_daemon_stop(d);
	start(d);
	(void)snprintf(cmd, sizeof(cmd), "rm -rf %s && mv %s %s", d->cache, keep, d->cache);
	assert_int_equal(system(cmd), 0);
}

/* CUDA C++ through NVRTC in its sandbox, the disk cache, and a corrupt cache file. */
static void test_cuda_nvrtc_compile_and_disk_cache(void **state)
{
	struct test_daemon *d = *state;

	if (!test_have_nvrtc())
		skip();
	start(d);
	nvrtc_saxpy(d, -3.0f);
	assert_int_equal(STAT(d, module_compiles), 1);
	assert_int_equal(STAT(d, module_disk_hits), 0);

	/* New workers find the cubin on disk: no compile. */
	restart_with_cache(d, false);
	nvrtc_saxpy(d, 0.5f);
	assert_int_equal(STAT(d, module_disk_hits), 1);
	assert_int_equal(STAT(d, module_compiles), 0);

	/* A corrupt file is compiled again, never loaded. */
	restart_with_cache(d, true);
	nvrtc_saxpy(d, 2.0f);
	assert_int_equal(STAT(d, module_disk_hits), 0);
	assert_int_equal(STAT(d, module_compiles), 1);
	test_daemon_stop(d);
}

static void test_cuda_nvrtc_errors_and_sandbox(void **state)
{
	static const char bad[] = "extern \"C\" __global__ void k() { this_is_not_cuda; }\n";
	static const char sneaky[] =
		"#include \"/etc/passwd\"\nextern \"C\" __global__ void k() {}\n";
	struct test_daemon *d = *state;
	gpux_module *m = NULL;
	gpux_ctx *ctx;
	char *log = NULL;

	if (!test_have_nvrtc())
		skip();
	start(d);
	ctx = test_connect(d);
	assert_int_equal(
		gpux_module_load(ctx, GPUX_LANG_CUDA, bad, sizeof(bad) - 1, NULL, &m, &log),
		GPUX_E_COMPILE);
	assert_non_null(log);
	assert_non_null(strstr(log, "this_is_not_cuda"));
	free(log);
	log = NULL;
	assert_int_equal(
		gpux_module_load(ctx, GPUX_LANG_CUDA, sneaky, sizeof(sneaky) - 1, NULL, &m, &log),
		GPUX_E_COMPILE);
	assert_non_null(log);
	assert_null(strstr(log, "root:"));
	assert_non_null(strstr(log, "/etc/passwd"));
	free(log);
	log = NULL;
	assert_int_equal(gpux_module_load(ctx, GPUX_LANG_CUDA, bad, sizeof(bad) - 1,
					  "-I/etc --gpu-architecture=sm_50", &m, &log),
			 GPUX_E_INVAL);
	assert_non_null(strstr(log, "not allowed"));
	free(log);
	log = NULL;
	/* More options than the compiler's argv holds: refused, not cut short. */
	{
		char many[33 * 4 + 1] = "";

		for (int i = 0; i < 33; i++)
			strcat(many, "-DA ");
		assert_int_equal(
			gpux_module_load(ctx, GPUX_LANG_CUDA, bad, sizeof(bad) - 1, many, &m, &log),
			GPUX_E_INVAL);
		assert_non_null(strstr(log, "too many compiler options"));
		free(log);
	}
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

/* ---- what the worker's children inherit ---- */

/* Where fd n of process pid leads ("/dev/null", "socket:[...]", "/memfd:gpux-status ..."). */
static void fd_link(pid_t pid, const char *fd, char *buf, size_t cap)
{
	char path[320];
	ssize_t n;

	(void)snprintf(path, sizeof(path), "/proc/%d/fd/%s", (int)pid, fd);
	n = readlink(path, buf, cap - 1);
	buf[n > 0 ? n : 0] = '\0';
}

/*
 * Whether fd of process pid is close-on-exec (its fdinfo's flags, in octal): 1 or 0, or -1
 * when the fd was closed since the directory was read (the worker opens some for a moment).
 */
static int fd_cloexec(pid_t pid, const char *fd)
{
	char path[320], line[128];
	unsigned long flags = 0;
	bool found = false;
	FILE *f;

	(void)snprintf(path, sizeof(path), "/proc/%d/fdinfo/%s", (int)pid, fd);
	f = fopen(path, "re");
	if (!f && errno == ENOENT)
		return -1;
	assert_non_null(f);
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "flags: %lo", &flags) == 1;
	(void)fclose(f);
	assert_true(found);
	return !!(flags & O_CLOEXEC);
}

/*
 * The worker keeps nothing that a process it starts would inherit: every fd past stdio is
 * close-on-exec, and gpuxd's status page is mapped, its fd closed. Its compile helper, which
 * reads hostile source, holds its socket and nothing else, stdio on /dev/null (stderr too:
 * it could write the worker's log). gpuxd is started with an fd that is not close-on-exec
 * (as a careless parent would leave it): the worker does not get it.
 */
static void test_cuda_worker_fds_stay_its_own(void **state)
{
	struct test_daemon *d = *state;
	int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	/* Past the fds gpuxd gives its worker (3 and 4), which would hide it. */
	int leaked = fcntl(zero, F_DUPFD, 100);
	pid_t worker, helper;
	struct dirent *e;
	char link[256];
	DIR *fds;

	assert_true(zero >= 0 && leaked >= 100);
	assert_int_equal(close(zero), 0);
	start(d);
	assert_int_equal(close(leaked), 0);
	/* The helper has answered a compile: it is warm and sealed. */
	if (test_have_nvrtc())
		nvrtc_saxpy(d, 1.0f);
	worker = test_worker_pid(d, 0);
	(void)snprintf(link, sizeof(link), "/proc/%d/fd", (int)worker);
	fds = opendir(link);
	assert_non_null(fds);
	while ((e = readdir(fds))) {
		if (e->d_name[0] == '.')
			continue;
		fd_link(worker, e->d_name, link, sizeof(link));
		if (strstr(link, "gpux-status"))
			fail_msg("the worker keeps the status page's fd %s (%s)", e->d_name, link);
		if (atoi(e->d_name) > 2 && fd_cloexec(worker, e->d_name) == 0)
			fail_msg("the worker's fd %s (%s) is not close-on-exec", e->d_name, link);
	}
	(void)closedir(fds);

	helper = test_have_nvrtc() ? test_compiler_of(worker) : 0;
	assert_true(helper > 0 || !test_have_nvrtc());
	if (helper) {
		unsigned n = 0;

		(void)snprintf(link, sizeof(link), "/proc/%d/fd", (int)helper);
		fds = opendir(link);
		assert_non_null(fds);
		while ((e = readdir(fds))) {
			int fd = atoi(e->d_name);

			if (e->d_name[0] == '.')
				continue;
			n++;
			fd_link(helper, e->d_name, link, sizeof(link));
			if (fd <= 2 && strcmp(link, "/dev/null") != 0)
				fail_msg("the compile helper's fd %d is %s, not /dev/null", fd,
					 link);
			if (fd == 3 && strncmp(link, "socket:", 7) != 0)
				fail_msg("the compile helper's fd 3 is %s, not its socket", link);
			if (fd > 3 && fd_cloexec(helper, e->d_name) == 0)
				fail_msg("the compile helper inherited fd %d (%s)", fd, link);
		}
		(void)closedir(fds);
		assert_true(n >= 4);
	}
	test_daemon_stop(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST_WITH_DAEMON(test_cuda_fake_device_and_copies),
		TEST_WITH_DAEMON(test_cuda_fake_parameters_checked),
		TEST_WITH_DAEMON(test_cuda_fake_out_of_memory_is_not_fatal),
		TEST_WITH_DAEMON(test_cuda_fake_device_time_when_asked),
		TEST_WITH_DAEMON(test_cuda_fake_long_wait_blocks),
		TEST_WITH_DAEMON(test_cuda_fake_lone_request_ends_in_the_loop),
		TEST_WITH_DAEMON(test_cuda_fake_lone_request_ends_without_the_word),
		TEST_WITH_DAEMON(test_cuda_fake_lone_request_ends_without_the_page),
		TEST_WITH_DAEMON(test_cuda_fake_held_request_goes_to_a_waiter),
		TEST_WITH_DAEMON(test_cuda_fake_held_request_answered_at_stop),
		TEST_WITH_DAEMON(test_cuda_fake_fault_restarts_worker),
		TEST_WITH_DAEMON(test_cuda_fake_injected_launch_failure),
		TEST_WITH_DAEMON(test_cuda_fake_injected_kernel_launch_failure),
		TEST_WITH_DAEMON(test_cuda_fake_injected_lookup_failure),
		TEST_WITH_DAEMON(test_cuda_fake_injected_event_failure),
		TEST_WITH_DAEMON(test_cuda_fake_late_fault_blamed_on_its_kernel),
		TEST_WITH_DAEMON(test_cuda_fake_done_request_no_suspect),
		TEST_WITH_DAEMON(test_cuda_fake_alone_runs_alone),
		TEST_WITH_DAEMON(test_cuda_fake_alone_capped),
		TEST_WITH_DAEMON(test_cuda_fake_cache_and_dbufs),
		TEST_WITH_DAEMON(test_cuda_fake_user_cap_counts_cached_inputs),
		TEST_WITH_DAEMON(test_cuda_nvrtc_compile_and_disk_cache),
		TEST_WITH_DAEMON(test_cuda_nvrtc_errors_and_sandbox),
		TEST_WITH_DAEMON(test_cuda_worker_fds_stay_its_own),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
