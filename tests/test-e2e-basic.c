/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-basic.c: kernels through a real gpuxd: results, ordering, threads, errors. */
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"
#include "helpers.h"

static void poison(float *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = NAN;
}

static void test_e2e_saxpy_matches_cpu(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 100003;
	gpux_buf *x, *y, *out;
	float a = 0.75f;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &out), GPUX_OK);
	for (uint32_t dev = 0; dev < 2; dev++) {
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n),           GPUX_ARG_VALUE(a),
			gpux_arg_in(x, 0, n * 4),    gpux_arg_in(y, 0, n * 4),
			gpux_arg_out(out, 0, n * 4),
		};
		struct gpux_launch l = test_launch_1d(n, dev, NULL);
		const float *px = gpux_buf_data(x), *py = gpux_buf_data(y);
		const float *po = gpux_buf_data(out);

		test_fill_random(gpux_buf_data(x), n, &e->seed);
		test_fill_random(gpux_buf_data(y), n, &e->seed);
		poison(gpux_buf_data(out), n);
		assert_int_equal(gpux_run(e->m, "saxpy", &l, args, 5), GPUX_OK);
		for (uint64_t i = 0; i < n; i++)
			assert_float_equal(po[i], a * px[i] + py[i], 1e-6);
	}
	gpux_buf_free(out);
	gpux_buf_free(y);
	gpux_buf_free(x);
}

static void test_e2e_block_sum_uses_shared_memory(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 50000;
	const uint32_t blocks = (uint32_t)((n + 255) / 256);
	gpux_buf *x, *out;
	struct gpux_launch l = { .grid = { blocks, 1, 1 },
				 .block = { 256, 1, 1 },
				 .shared_bytes = 256 * sizeof(double) };
	double got = 0, want = 0;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, blocks * sizeof(double), &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, &e->seed);
	for (uint32_t i = 0; i < blocks; i++)
		((double *)gpux_buf_data(out))[i] = NAN;
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 0, n * 4),
					   gpux_arg_out(out, 0, blocks * sizeof(double)) };
		assert_int_equal(gpux_run(e->m, "block_sum", &l, args, 3), GPUX_OK);
	}
	for (uint64_t i = 0; i < n; i++)
		want += ((float *)gpux_buf_data(x))[i];
	for (uint32_t i = 0; i < blocks; i++)
		got += ((double *)gpux_buf_data(out))[i];
	assert_float_equal(got, want, 1e-6 * n);
	gpux_buf_free(out);
	gpux_buf_free(x);
}

/* x -> add1 -> y -> mul2 -> z -> sub3 -> w on one queue, waiting only for the last. */
static void test_e2e_pipeline_waits_on_last(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 65536;
	gpux_buf *b[4];
	gpux_queue *q;
	gpux_req *r[3];
	static const char *const k[3] = { "add1", "mul2", "sub3" };

	assert_int_equal(gpux_queue_open(e->ctx, 1, &q), GPUX_OK);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &b[i]), GPUX_OK);
		poison(gpux_buf_data(b[i]), n);
	}
	test_fill_random(gpux_buf_data(b[0]), n, &e->seed);
	for (int i = 0; i < 3; i++) {
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(b[i], 0, n * 4),
					   gpux_arg_out(b[i + 1], 0, n * 4) };
		struct gpux_launch l = test_launch_1d(n, 0, q);
		assert_int_equal(gpux_submit(e->m, k[i], &l, args, 3, &r[i]), GPUX_OK);
		assert_int_equal(gpux_req_device(r[i]), 1);
	}
	assert_int_equal(gpux_wait(r[2], -1), GPUX_OK);
	for (uint64_t i = 0; i < n; i++) {
		float x = ((float *)gpux_buf_data(b[0]))[i];
		assert_float_equal(((float *)gpux_buf_data(b[3]))[i], (x + 1) * 2 - 3, 1e-6);
	}
	/* The earlier ones are finished too, in order. */
	assert_int_equal(gpux_test(r[0]), GPUX_OK);
	assert_int_equal(gpux_test(r[1]), GPUX_OK);
	for (int i = 0; i < 3; i++)
		gpux_req_free(r[i]);
	for (int i = 0; i < 4; i++)
		gpux_buf_free(b[i]);
	gpux_queue_free(q);
}

/*
 * A burst larger than the submit ring on one queue: the requests that overflow to the socket
 * must not overtake those still in the ring. Each appends its index to a mapped log.
 */
static void test_e2e_burst_runs_in_order(void **state)
{
	struct test_env *e = *state;
	enum { N = 1000 };
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	gpux_req *r[N];
	gpux_queue *q;
	gpux_buf *log;
	uint32_t *p;

	assert_int_equal(gpux_queue_open(e->ctx, 0, &q), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, (N + 1) * 4, &log), GPUX_OK);
	p = gpux_buf_data(log);
	memset(p, 0xff, (N + 1) * 4);
	p[0] = 0;
	l.queue = q;
	for (uint32_t i = 0; i < N; i++) {
		struct gpux_arg args[] = { GPUX_ARG_VALUE(i),
					   gpux_arg_mapped(log, 0, (N + 1) * 4) };
		assert_int_equal(gpux_submit(e->m, "append", &l, args, 2, &r[i]), GPUX_OK);
	}
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(gpux_wait(r[i], -1), GPUX_OK);
		gpux_req_free(r[i]);
	}
	assert_int_equal(p[0], N);
	for (uint32_t i = 0; i < N; i++)
		if (p[1 + i] != i)
			fail_msg("position %u ran request %u", i, p[1 + i]);
	gpux_buf_free(log);
	gpux_queue_free(q);
}

struct thread_arg {
	struct test_env *e;
	unsigned index;
	int failures;
};

static void *submitter(void *p)
{
	struct thread_arg *t = p;
	const uint64_t n = 4096;
	uint64_t seed = t->index * 7919 + 1;
	gpux_buf *x, *y;
	gpux_req *r[8];

	if (gpux_buf_alloc(t->e->ctx, n * 4, &x) || gpux_buf_alloc(t->e->ctx, n * 4, &y)) {
		t->failures++;
		return NULL;
	}
	for (unsigned round = 0; round < 25; round++) {
		test_fill_random(gpux_buf_data(x), n, &seed);
		for (unsigned j = 0; j < 8; j++) {
			struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 0, n * 4),
						   gpux_arg_out(y, 0, n * 4) };
			struct gpux_launch l = test_launch_1d(n, (t->index + j) % 2, NULL);
			if (gpux_submit(t->e->m, "add1", &l, args, 3, &r[j]) != GPUX_OK) {
				t->failures++;
				r[j] = NULL;
			}
		}
		for (unsigned j = 0; j < 8; j++) {
			if (r[j] && gpux_wait(r[j], -1) != GPUX_OK)
				t->failures++;
			gpux_req_free(r[j]);
		}
		for (uint64_t i = 0; i < n; i++)
			if (((float *)gpux_buf_data(y))[i] != ((float *)gpux_buf_data(x))[i] + 1)
				t->failures++;
	}
	gpux_buf_free(x);
	gpux_buf_free(y);
	return NULL;
}

static void test_e2e_threads_submit_at_once(void **state)
{
	struct test_env *e = *state;
	pthread_t th[8];
	struct thread_arg args[8];

	for (unsigned i = 0; i < 8; i++) {
		args[i] = (struct thread_arg){ .e = e, .index = i };
		assert_int_equal(pthread_create(&th[i], NULL, submitter, &args[i]), 0);
	}
	for (unsigned i = 0; i < 8; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(args[i].failures, 0);
	}
}

static void test_e2e_compile_error_returns_log(void **state)
{
	struct test_env *e = *state;
	static const char bad[] = "GPUX_HOST_KERNEL(k)\n{\n\tthis_is_not_c;\n}\n";
	gpux_module *m = NULL;
	char *log = NULL;

	assert_int_equal(
		gpux_module_load(e->ctx, GPUX_LANG_HOST, bad, sizeof(bad) - 1, NULL, &m, &log),
		GPUX_E_COMPILE);
	assert_null(m);
	assert_non_null(log);
	assert_non_null(strstr(log, "this_is_not_c"));
	assert_non_null(strstr(log, "kernel.c:3"));
	free(log);
}

static void test_e2e_compiler_options_are_checked(void **state)
{
	struct test_env *e = *state;
	static const char ok[] = "GPUX_HOST_KERNEL(k)\n{\n#ifndef FOO\n#error no FOO\n#endif\n}\n";
	gpux_module *m = NULL;
	char *log = NULL;

	assert_int_equal(gpux_module_load(e->ctx, GPUX_LANG_HOST, ok, sizeof(ok) - 1, "-O3 -DFOO=1",
					  &m, &log),
			 GPUX_OK);
	gpux_module_free(m);
	free(log);
	log = NULL;
	/* Options that would make the compiler write or load files are refused. */
	assert_int_equal(gpux_module_load(e->ctx, GPUX_LANG_HOST, ok, sizeof(ok) - 1,
					  "-DFOO -o /tmp/x", &m, &log),
			 GPUX_E_INVAL);
	assert_non_null(strstr(log, "not allowed"));
	free(log);
}

static void expect_refused(struct test_env *e, const char *kernel, const struct gpux_arg *args,
			   uint32_t nargs, const struct gpux_launch *l, gpux_status want,
			   const char *text)
{
	gpux_req *r;

	assert_int_equal(gpux_submit(e->m, kernel, l, args, nargs, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), want);
	if (!strstr(gpux_req_message(r), text))
		fail_msg("message \"%s\" lacks \"%s\"", gpux_req_message(r), text);
	gpux_req_free(r);
}

static void test_e2e_bad_requests_are_refused_clearly(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 16;
	uint32_t small = 1;
	gpux_buf *x;
	struct gpux_launch l = test_launch_1d(n, 0, NULL);
	struct gpux_launch huge = { .grid = { 1, 1, 1 }, .block = { 2048, 1, 1 } };

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 0, n * 4) };
		expect_refused(e, "add1", args, 2, &l, GPUX_E_INVAL, "takes 3 arguments, 2 given");
	}
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(small), gpux_arg_in(x, 0, n * 4),
					   gpux_arg_out(x, 0, n * 4) };
		expect_refused(e, "add1", args, 3, &l, GPUX_E_INVAL, "argument 0");
	}
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 0, n * 4),
					   gpux_arg_out(x, 0, n * 4) };
		expect_refused(e, "no_such_kernel", args, 3, &l, GPUX_E_NOTFOUND, "no_such_kernel");
		/* A libc function is not a kernel of the module. */
		expect_refused(e, "abort", NULL, 0, &l, GPUX_E_NOTFOUND, "abort");
	}
	/* Caught before sending: a block past the device's, a range outside the buffer, a
	 * scalar too large. */
	{
		gpux_req *r;
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 8, n * 4),
					   gpux_arg_out(x, 0, n * 4) };
		assert_int_equal(gpux_submit(e->m, "add1", &huge, args, 3, &r), GPUX_E_INVAL);
		assert_int_equal(gpux_submit(e->m, "add1", &l, args, 3, &r), GPUX_E_INVAL);
		args[0] = gpux_arg_scalar(&n, 4096);
		assert_int_equal(gpux_submit(e->m, "add1", &l, args, 3, &r), GPUX_E_INVAL);
	}
	/* The connection is fine afterwards. */
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 0, n * 4),
					   gpux_arg_out(x, 0, n * 4) };
		assert_int_equal(gpux_run(e->m, "add1", &l, args, 3), GPUX_OK);
	}
	gpux_buf_free(x);
}

static void test_e2e_devices_and_status(void **state)
{
	struct test_env *e = *state;
	struct gpux_device_info info;
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(gpux_device_count(e->ctx), 2);
	for (uint32_t i = 0; i < 2; i++) {
		assert_int_equal(gpux_device_info(e->ctx, i, &info), GPUX_OK);
		assert_int_equal(info.index, i);
		assert_int_equal(info.backend, GPUX_BACKEND_HOST);
		assert_int_equal(info.state, GPUX_DEVICE_READY);
		assert_true(strlen(info.name) > 0);
	}
	assert_int_equal(gpux_device_info(e->ctx, 2, &info), GPUX_E_NODEV);
	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	assert_int_equal(st.ndevices, 2);
	assert_true(devs[0].stats.requests_done > 0);
	assert_true(devs[0].stats.module_compiles + devs[0].stats.module_disk_hits >= 1);
}

/* Whether the device has counted `*arg` launches: its page is written just after the DONE. */
static bool launched(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.launches >= *(const uint64_t *)arg;
}

/* Each finished request is counted by its status, and its times in the histograms. */
static void test_e2e_status_counts_requests_by_status_and_time(void **state)
{
	struct test_env *e = *state;
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .device = 1 };
	uint32_t ms = 3;
	struct gpux_arg arg = GPUX_ARG_VALUE(ms);
	struct ipc_status st;
	struct ipc_dev_status a[IPC_DEVICES_MAX], b[IPC_DEVICES_MAX];
	uint64_t lat = 0, queue = 0, want;

	assert_int_equal(test_daemon_status(&e->d, &st, a), 0);

	assert_int_equal(gpux_run(e->m, "no_such_kernel", &l, NULL, 0), GPUX_E_NOTFOUND);
	for (int i = 0; i < 5; i++)
		assert_int_equal(gpux_run(e->m, "spin", &l, &arg, 1), GPUX_OK);
	want = a[1].stats.launches + 5;
	test_wait_stats(&e->d, 1, launched, &want);
	assert_int_equal(test_daemon_status(&e->d, &st, b), 0);

	assert_int_equal(b[1].stats.by_status[0] - a[1].stats.by_status[0], 5);
	assert_int_equal(
		b[1].stats.by_status[-GPUX_E_NOTFOUND] - a[1].stats.by_status[-GPUX_E_NOTFOUND], 1);
	assert_int_equal(b[1].stats.launches - a[1].stats.launches, 5);
	for (unsigned k = 0; k < IPC_HIST_BUCKETS; k++) {
		lat += b[1].stats.latency.count[k] - a[1].stats.latency.count[k];
		queue += b[1].stats.queue.count[k] - a[1].stats.queue.count[k];
	}
	/* The refused one never ran: only the five have times, each of 3 ms at least. */
	assert_int_equal(lat, 5);
	assert_int_equal(queue, 5);
	assert_true(b[1].stats.latency.sum_ns - a[1].stats.latency.sum_ns >= 15 * NSEC_PER_MSEC);
	/* Device 0 did none of it. */
	assert_int_equal(b[0].stats.launches, a[0].stats.launches);
}

static const struct ipc_usage *usage_of(const struct ipc_dev_status *d, uint32_t uid)
{
	for (unsigned k = 0; k < IPC_USAGE_UIDS; k++)
		if (d->stats.usage[k].uid == uid &&
		    (d->stats.usage[k].shared_bytes || d->stats.usage[k].device_bytes))
			return &d->stats.usage[k];
	return NULL;
}

/* Memory is counted by the user whose clients hold it, and given back when they let go. */
static void test_e2e_status_counts_memory_by_user(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 1 << 18; /* a buffer of its own, not from an arena */
	struct gpux_launch l = test_launch_1d(n, 1, NULL);
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	const struct ipc_usage *u;
	uint64_t shared0, dev0, launches;
	gpux_buf *x;
	gpux_dbuf *db;
	struct gpux_arg args[3];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	u = usage_of(&devs[1], getuid());
	shared0 = u ? u->shared_bytes : 0;
	dev0 = u ? u->device_bytes : 0;
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 1, 3 << 20, &db), GPUX_OK);
	args[0] = GPUX_ARG_VALUE(n);
	args[1] = gpux_arg_in(x, 0, n * 4);
	args[2] = gpux_arg_out(x, 0, n * 4);
	launches = devs[1].stats.launches + 1;
	assert_int_equal(gpux_run(e->m, "add1", &l, args, 3), GPUX_OK);
	test_wait_stats(&e->d, 1, launched, &launches);
	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	u = usage_of(&devs[1], getuid());
	assert_non_null(u);
	assert_true(u->shared_bytes >= shared0 + n * 4);
	assert_int_equal(u->device_bytes, dev0 + (3 << 20));
	gpux_dbuf_free(db);
	gpux_buf_free(x);
}

static void test_e2e_pollable_fd(void **state)
{
	struct test_env *e = *state;
	gpux_req *r;
	int fd;

	assert_int_equal(gpux_fd(e->ctx, &fd), GPUX_OK);
	/* 500 ms: long enough to be running still at the first look, on a loaded machine too
	 * (20 ms was not, once, on 2 CPUs). */
	assert_int_equal(test_spin_submit(e->m, 0, 500, &r), GPUX_OK);
	assert_int_equal(gpux_test(r), GPUX_E_AGAIN);
	for (int i = 0; i < 100 && gpux_test(r) == GPUX_E_AGAIN; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		assert_true(poll(&p, 1, 1000) >= 0);
		assert_int_equal(gpux_process(e->ctx), GPUX_OK);
	}
	assert_int_equal(gpux_test(r), GPUX_OK);
	{
		struct gpux_times t;
		assert_int_equal(gpux_req_times(r, &t), GPUX_OK);
		assert_true(t.run_ns >= 19 * 1000000ull);
	}
	gpux_req_free(r);
}

/* A time limit beyond any clock's reach is no limit, not one that passed long ago. */
static void test_e2e_wait_longest_limit(void **state)
{
	struct test_env *e = *state;
	gpux_req *r;

	assert_int_equal(test_spin_submit(e->m, 0, 200, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, INT64_MAX), GPUX_OK);
	gpux_req_free(r);
	assert_int_equal(test_spin_submit(e->m, 0, 200, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, INT64_MAX / 1000), GPUX_OK);
	gpux_req_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e2e_saxpy_matches_cpu),
		cmocka_unit_test(test_e2e_block_sum_uses_shared_memory),
		cmocka_unit_test(test_e2e_pipeline_waits_on_last),
		cmocka_unit_test(test_e2e_burst_runs_in_order),
		cmocka_unit_test(test_e2e_threads_submit_at_once),
		cmocka_unit_test(test_e2e_compile_error_returns_log),
		cmocka_unit_test(test_e2e_compiler_options_are_checked),
		cmocka_unit_test(test_e2e_bad_requests_are_refused_clearly),
		cmocka_unit_test(test_e2e_devices_and_status),
		cmocka_unit_test(test_e2e_status_counts_requests_by_status_and_time),
		cmocka_unit_test(test_e2e_status_counts_memory_by_user),
		cmocka_unit_test(test_e2e_pollable_fd),
		cmocka_unit_test(test_e2e_wait_longest_limit),
	};

	return cmocka_run_group_tests(tests, test_env_setup_two_devices, test_env_teardown);
}
