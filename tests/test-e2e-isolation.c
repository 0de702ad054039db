/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-isolation.c: what one client cannot take from another: memory, and its requests at a fault. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "e2e.h"
#include "channel.h"
#include "helpers.h"

/* The host back end's device is the host's memory, as its worker counts it. */
static uint64_t host_memory(void)
{
	struct sysinfo si;

	assert_int_equal(sysinfo(&si), 0);
	return (uint64_t)si.totalram * si.mem_unit;
}

/*
 * Device buffers never take the reserve: with all but 8 MiB of the device kept, two 4 MiB
 * buffers fit and a third is refused with NOMEM and a message naming the reserve, while a
 * launch with IN and OUT arguments still runs; one freed makes room again.
 */
static void test_isolation_reserve_kept_from_device_buffers(void **state)
{
	char reserve[32], quota[32];
	const char *const args[] = { "--device-reserve", reserve, "--quota-device", quota, NULL };
	uint64_t total = host_memory();
	struct test_env *e;
	gpux_dbuf *d[3];
	char *msg = NULL;

	(void)snprintf(reserve, sizeof(reserve), "%llu", (unsigned long long)(total - 8 * MiB));
	(void)snprintf(quota, sizeof(quota), "%llu", (unsigned long long)total);
	e = test_env_open(args);
	assert_int_equal(gpux_dbuf_alloc_ex(e->ctx, 0, 4 * MiB, 0, &d[0], &msg), GPUX_OK);
	assert_null(msg);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, 4 * MiB, &d[1]), GPUX_OK);
	assert_int_equal(gpux_dbuf_alloc_ex(e->ctx, 0, 4 * MiB, 0, &d[2], &msg), GPUX_E_NOMEM);
	assert_non_null(msg);
	assert_non_null(strstr(msg, "device-memory reserve"));
	assert_non_null(strstr(msg, "--device-reserve"));
	free(msg);
	msg = NULL;
	assert_int_equal(test_saxpy(e->ctx, e->m, 0, 1000, &e->seed), GPUX_OK);
	gpux_dbuf_free(d[1]);
	assert_int_equal(gpux_dbuf_alloc_ex(e->ctx, 0, 4 * MiB, 0, &d[1], &msg), GPUX_OK);
	assert_null(msg);
	gpux_dbuf_free(d[1]);
	gpux_dbuf_free(d[0]);
	test_env_close(e);
}

/* A spin of ms milliseconds on a device, submitted. */
static gpux_req *spin(gpux_module *m, uint32_t device, uint32_t ms)
{
	gpux_req *r = NULL;

	assert_int_equal(test_spin_submit(m, device, ms, &r), GPUX_OK);
	return r;
}

/* A request of "crash" (an illegal address) on a device, submitted. */
static gpux_req *crash(struct test_env *e, uint32_t device, gpux_buf *b)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .device = device };
	struct gpux_arg arg = gpux_arg_inout(b, 0, 64);
	gpux_req *r = NULL;

	assert_int_equal(gpux_submit(e->m, "crash", &l, &arg, 1, &r), GPUX_OK);
	return r;
}

/* What a hello to gpuxd hears of device 0 now: its state, and whether a channel came. */
static uint32_t raw_device0(const struct test_daemon *d, bool *ret_channel)
{
	struct ipc_hello h = { .min_version = 1, .max_version = IPC_VERSION };
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_device dev;
	struct ipc_msg msg;
	int sup = test_raw_connect(d), n;

	n = ipc_encode(buf, sizeof(buf), IPC_HELLO, 1, 0, &h, sizeof(h), NULL, 0);
	assert_int_equal(ipc_channel_send(sup, buf, (size_t)n, NULL, 0, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(msg.hdr.type, IPC_WELCOME);
	assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(ipc_decode_device(&msg, &dev), 0);
	assert_int_equal(dev.info.index, 0);
	*ret_channel = dev.flags & IPC_DEVICE_CHANNEL;
	ipc_msg_close_fds(&msg);
	(void)close(sup);
	return dev.state;
}

/*
 * A worker whose kernel faulted answers what it owes for a while (up to 200 ms) before it
 * exits; a client that connects meanwhile must not be handed a channel to it: its first
 * module load, which goes to the first device with a channel, ended at once with
 * GPUX_E_WORKER_LOST (issue 27's item 6). It succeeds, there or on the other device.
 */
static void test_isolation_fresh_client_during_a_restart(void **state)
{
	static const char *const args[] = { "--host-devices", "2", "--slots", "2", NULL };
	struct test_env *e = test_env_open(args);
	gpux_ctx *other = test_connect(&e->d);
	gpux_module *om = test_load_host_kernels(other);
	gpux_req *victim, *bad;
	gpux_buf *b;

	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	for (int round = 0; round < 3; round++) {
		struct ipc_status st;
		struct ipc_dev_status devs[IPC_DEVICES_MAX];
		gpux_ctx *fresh;
		gpux_module *fm = NULL;

		assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
		/* The dying worker's other slot stays busy: it lingers its full 200 ms. */
		victim = spin(om, 0, 1000);
		(void)usleep(20 * 1000);
		assert_int_equal(gpux_connect(e->d.sock, &fresh), GPUX_OK);
		bad = crash(e, 0, b);
		/* Sent as the fault happens, or to a worker that gave up. */
		if (round == 0)
			assert_int_equal(gpux_module_load(fresh, GPUX_LANG_HOST, test_host_kernels,
							  test_host_kernels_len, NULL, &fm, NULL),
					 GPUX_OK);
		assert_int_equal(gpux_wait(bad, 5000), GPUX_E_KERNEL_FAULT);
		/* Connected once the worker gave up: no channel to it (the device restarts). */
		{
			bool channel;
			uint32_t state = raw_device0(&e->d, &channel);

			if (state == GPUX_DEVICE_READY) {
				struct ipc_dev_status now[IPC_DEVICES_MAX];

				assert_int_equal(test_daemon_status(&e->d, &st, now), 0);
				assert_true(now[0].generation > devs[0].generation);
			} else {
				assert_false(channel);
			}
		}
		{
			struct gpux_device_info info;
			gpux_ctx *late;
			gpux_module *lm = NULL;

			assert_int_equal(gpux_connect(e->d.sock, &late), GPUX_OK);
			assert_int_equal(gpux_device_info(late, 0, &info), GPUX_OK);
			if (info.state == GPUX_DEVICE_READY) {
				struct ipc_dev_status now[IPC_DEVICES_MAX];

				assert_int_equal(test_daemon_status(&e->d, &st, now), 0);
				assert_true(now[0].generation > devs[0].generation);
			}
			assert_int_equal(gpux_module_load(late, GPUX_LANG_HOST, test_host_kernels,
							  test_host_kernels_len, NULL, &lm, NULL),
					 GPUX_OK);
			gpux_module_free(lm);
			gpux_disconnect(late);
		}
		if (round > 0)
			assert_int_equal(gpux_module_load(fresh, GPUX_LANG_HOST, test_host_kernels,
							  test_host_kernels_len, NULL, &fm, NULL),
					 GPUX_OK);
		gpux_module_free(fm);
		gpux_disconnect(fresh);
		(void)gpux_wait(victim, 10000);
		gpux_req_free(victim);
		gpux_req_free(bad);
		test_wait_generation(&e->d, 0, devs[0].generation);
	}
	gpux_buf_free(b);
	gpux_module_free(om);
	gpux_disconnect(other);
	test_env_close(e);
}

/* ---- a neighbour's fault: requests that had not begun run again ---- */

/* A client of its own, with the host kernels. */
struct peer {
	gpux_ctx *ctx;
	gpux_module *m;
};

static struct peer peer_open(struct test_env *e)
{
	struct peer p = { .ctx = test_connect(&e->d) };

	p.m = test_load_host_kernels(p.ctx);
	return p;
}

static void peer_close(struct peer *p)
{
	gpux_module_free(p->m);
	gpux_disconnect(p->ctx);
}

/*
 * "wait_flag" on a queue (NULL: device 0's default one): running (its `seen` word says so)
 * until the worker dies. flags holds the flag and the word; waits until it runs.
 */
static gpux_req *hold(gpux_module *m, gpux_queue *q, gpux_buf *flags)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .queue = q, .device = 0 };
	struct gpux_arg a[] = { gpux_arg_inout(flags, 0, 4), gpux_arg_inout(flags, 4, 4) };
	volatile int *seen = (int *)gpux_buf_data(flags) + 1;
	gpux_req *r;

	memset(gpux_buf_data(flags), 0, 8);
	assert_int_equal(gpux_submit(m, "wait_flag", &l, a, 2, &r), GPUX_OK);
	for (int i = 0; i < 1000 && *seen != -1; i++)
		(void)usleep(5000);
	assert_int_equal(*seen, -1);
	return r;
}

/* "append" of v to a log (INOUT: in place), on a queue: the order requests ran in. */
static gpux_req *append(gpux_module *m, gpux_queue *q, gpux_buf *log, uint32_t v)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .queue = q };
	struct gpux_arg a[] = { GPUX_ARG_VALUE(v), gpux_arg_inout(log, 0, gpux_buf_size(log)) };
	gpux_req *r;

	assert_int_equal(gpux_submit(m, "append", &l, a, 2, &r), GPUX_OK);
	return r;
}

/* saxpy of x and y (IN) into out (OUT, or MAPPED: in place), on a queue. */
static gpux_req *saxpy_to(gpux_module *m, gpux_queue *q, gpux_buf *x, gpux_buf *y, gpux_buf *out,
			  uint64_t n, float a, uint32_t out_kind)
{
	struct gpux_launch l = test_launch_1d(n, 0, q);
	struct gpux_arg args[] = { GPUX_ARG_VALUE(n), GPUX_ARG_VALUE(a), gpux_arg_in(x, 0, n * 4),
				   gpux_arg_in(y, 0, n * 4),
				   gpux_arg_buf(out_kind, out, 0, n * 4) };
	gpux_req *r;

	assert_int_equal(gpux_submit(m, "saxpy", &l, args, 5, &r), GPUX_OK);
	return r;
}

static void check_saxpy(gpux_buf *x, gpux_buf *y, gpux_buf *out, uint64_t n, float a)
{
	const float *px = gpux_buf_data(x), *py = gpux_buf_data(y), *po = gpux_buf_data(out);

	for (uint64_t i = 0; i < n; i++)
		assert_float_equal(po[i], a * px[i] + py[i], 1e-6);
}

/* Device 1 has the busy client's requests (ARRAY_SIZE(filler) of them), less one that ran. */
static bool holds_many(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.inflight >= 15;
}

#define NB 5u /* B's saxpys queued */
#define NC 3u /* C's appends queued, in place */
#define N 1000u

/*
 * Client A's kernel faults while B and C have requests running and queued on the same
 * device (each client its own stream). What had begun (the running ones: host kernels work
 * on the clients' pages in place) fails GPUX_E_WORKER_LOST, as does one that names a device
 * buffer (lost with the worker); what had not runs on the restarted worker, once each, in
 * its queue's order, with the right results: B's saxpys (IN and OUT, or MAPPED), C's appends
 * to a log in place (each exactly once, in order, and C's next one, sent during the restart,
 * after them), and a GPUX_ANY request, which goes to the other device. Only A's request fails with
 * GPUX_E_KERNEL_FAULT; A's own next one is not run again. B's device buffer is
 * GPUX_E_DBUF_LOST at its next use; one kept in host memory keeps its contents and works.
 */
static void test_isolation_neighbour_fault_replays_innocents(void **state)
{
	static const char *const args[] = { "--host-devices", "2", "--slots", "4", NULL };
	struct test_env *e = test_env_open(args);
	struct peer b = peer_open(e), c = peer_open(e), busy = peer_open(e);
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	gpux_queue *qb, *qc;
	gpux_buf *bflags, *cflags, *cflags2, *x, *y, *out[NB + 1], *clog, *cin, *cout, *crashbuf,
		*pat, *back;
	gpux_req *brun, *crun, *crun2, *bs[NB + 1], *bdb, *cs[NC + 1], *any, *bad, *abehind,
		*filler[16];
	gpux_dbuf *lost_db, *kept;
	uint64_t n = N;
	uint32_t *plog;

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	/* Each queue a slot of its own: B's, C's default one, C's, and A's default one. */
	assert_int_equal(gpux_queue_open(b.ctx, 0, &qb), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(b.ctx, 8, &bflags), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(c.ctx, 8, &cflags), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(c.ctx, 8, &cflags2), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(b.ctx, N * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(b.ctx, N * 4, &y), GPUX_OK);
	test_fill_random(gpux_buf_data(x), N, &e->seed);
	test_fill_random(gpux_buf_data(y), N, &e->seed);
	for (unsigned i = 0; i <= NB; i++) {
		assert_int_equal(gpux_buf_alloc(b.ctx, N * 4, &out[i]), GPUX_OK);
		memset(gpux_buf_data(out[i]), 0xff, N * 4);
	}
	assert_int_equal(gpux_buf_alloc(c.ctx, 64, &clog), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(c.ctx, 4, &cin), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(c.ctx, 4, &cout), GPUX_OK);
	*(float *)gpux_buf_data(cin) = 41.0f;
	plog = gpux_buf_data(clog);
	/* B's device buffers: one on the device, one kept in host memory, both written. */
	assert_int_equal(gpux_buf_alloc(b.ctx, 4096, &pat), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(b.ctx, 4096, &back), GPUX_OK);
	for (unsigned i = 0; i < 4096; i++)
		((uint8_t *)gpux_buf_data(pat))[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(gpux_dbuf_alloc(b.ctx, 0, N * 4, &lost_db), GPUX_OK);
	assert_int_equal(gpux_dbuf_alloc_ex(b.ctx, 0, 4096, GPUX_DBUF_HOST, &kept, NULL), GPUX_OK);
	{
		gpux_req *w;

		assert_int_equal(gpux_dbuf_write(kept, 0, pat, 0, 4096, qb, &w), GPUX_OK);
		assert_int_equal(gpux_wait(w, 5000), GPUX_OK);
		gpux_req_free(w);
	}

	/* Device 1 busy (a queue of its own), so that C's GPUX_ANY request goes to device 0. */
	for (unsigned i = 0; i < ARRAY_SIZE(filler); i++)
		assert_int_equal(test_spin_submit(busy.m, 1, 400, &filler[i]), GPUX_OK);
	test_wait_stats(&e->d, 1, holds_many, NULL);
	brun = hold(b.m, qb, bflags);
	crun = hold(c.m, NULL, cflags);
	assert_int_equal(gpux_queue_open(c.ctx, 0, &qc), GPUX_OK);
	/* Behind C's running one, in its default queue. */
	{
		struct gpux_launch l = test_launch_1d(1, GPUX_ANY, NULL);
		uint64_t one = 1;
		struct gpux_arg a[] = { GPUX_ARG_VALUE(one), gpux_arg_in(cin, 0, 4),
					gpux_arg_out(cout, 0, 4) };

		assert_int_equal(gpux_submit(c.m, "add1", &l, a, 3, &any), GPUX_OK);
		assert_int_equal(gpux_req_device(any), 0);
	}
	for (unsigned i = 0; i < NB; i++)
		bs[i] = saxpy_to(b.m, qb, x, y, out[i], n, (float)i + 0.5f, GPUX_ARG_OUT);
	bs[NB] = saxpy_to(b.m, qb, x, y, out[NB], n, 9.0f, GPUX_ARG_MAPPED);
	{
		struct gpux_launch l = test_launch_1d(n, 0, qb);
		struct gpux_arg a[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 0, N * 4),
					gpux_arg_dbuf(lost_db, 0, N * 4) };

		assert_int_equal(gpux_submit(b.m, "add1", &l, a, 3, &bdb), GPUX_OK);
	}
	crun2 = hold(c.m, qc, cflags2);
	for (unsigned i = 0; i < NC; i++)
		cs[i] = append(c.m, qc, clog, 10 + i);

	/* A's fault, and a request of A's behind it. */
	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &crashbuf), GPUX_OK);
	bad = crash(e, 0, crashbuf);
	abehind = spin(e->m, 0, 1);
	assert_int_equal(gpux_wait(bad, 10000), GPUX_E_KERNEL_FAULT);
	assert_non_null(strstr(gpux_req_message(bad), "crash"));
	/* C's next one, sent while the worker restarts: after the three before it. */
	cs[NC] = append(c.m, qc, clog, 10 + NC);

	assert_int_equal(gpux_wait(abehind, 10000), GPUX_E_WORKER_LOST);
	assert_int_equal(gpux_wait(brun, 10000), GPUX_E_WORKER_LOST);
	assert_int_equal(gpux_wait(crun, 10000), GPUX_E_WORKER_LOST);
	assert_int_equal(gpux_wait(crun2, 10000), GPUX_E_WORKER_LOST);
	for (unsigned i = 0; i < NB; i++) {
		assert_int_equal(gpux_wait(bs[i], 10000), GPUX_OK);
		check_saxpy(x, y, out[i], n, (float)i + 0.5f);
	}
	assert_int_equal(gpux_wait(bs[NB], 10000), GPUX_OK);
	check_saxpy(x, y, out[NB], n, 9.0f);
	assert_int_equal(gpux_wait(bdb, 10000), GPUX_E_WORKER_LOST);
	for (unsigned i = 0; i <= NC; i++)
		assert_int_equal(gpux_wait(cs[i], 10000), GPUX_OK);
	assert_int_equal(plog[0], NC + 1);
	for (unsigned i = 0; i <= NC; i++)
		assert_int_equal(plog[1 + i], 10 + i);
	assert_int_equal(gpux_wait(any, 10000), GPUX_OK);
	assert_int_equal(gpux_req_device(any), 1);
	assert_float_equal(*(float *)gpux_buf_data(cout), 42.0f, 0);

	/* The device buffer went with the worker; the one in host memory did not. */
	{
		struct gpux_launch l = test_launch_1d(n, 0, NULL);
		struct gpux_arg a[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 0, N * 4),
					gpux_arg_dbuf(lost_db, 0, N * 4) };
		gpux_req *r;

		assert_int_equal(gpux_submit(b.m, "add1", &l, a, 3, &r), GPUX_E_DBUF_LOST);
		assert_int_equal(gpux_dbuf_read(back, 0, lost_db, 0, 64, NULL, &r),
				 GPUX_E_DBUF_LOST);
		assert_int_equal(gpux_dbuf_read(back, 0, kept, 0, 4096, NULL, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, 5000), GPUX_OK);
		gpux_req_free(r);
		assert_memory_equal(gpux_buf_data(back), gpux_buf_data(pat), 4096);
	}
	test_wait_generation(&e->d, 0, devs[0].generation);

	for (unsigned i = 0; i < ARRAY_SIZE(filler); i++) {
		assert_int_equal(gpux_wait(filler[i], 10000), GPUX_OK);
		gpux_req_free(filler[i]);
	}
	for (unsigned i = 0; i <= NB; i++) {
		gpux_req_free(bs[i]);
		gpux_buf_free(out[i]);
	}
	for (unsigned i = 0; i <= NC; i++)
		gpux_req_free(cs[i]);
	gpux_req_free(any);
	gpux_req_free(bdb);
	gpux_req_free(brun);
	gpux_req_free(crun);
	gpux_req_free(crun2);
	gpux_req_free(bad);
	gpux_req_free(abehind);
	gpux_dbuf_free(lost_db);
	gpux_dbuf_free(kept);
	gpux_buf_free(crashbuf);
	gpux_buf_free(cin);
	gpux_buf_free(cout);
	gpux_buf_free(clog);
	gpux_buf_free(x);
	gpux_buf_free(y);
	gpux_buf_free(pat);
	gpux_buf_free(back);
	gpux_buf_free(bflags);
	gpux_buf_free(cflags);
	gpux_buf_free(cflags2);
	gpux_queue_free(qb);
	gpux_queue_free(qc);
	peer_close(&busy);
	peer_close(&c);
	peer_close(&b);
	test_env_close(e);
}

/*
 * Host kernels work on the clients' pages in place: an input is handed to the kernel
 * read-only, and a kernel that writes it fails with a message naming the argument, not a
 * crash the worker cannot explain, nor the client's input changed without a word.
 */
static void test_isolation_input_written_is_named(void **state)
{
	static const char *const args[] = { "--host-devices", "1", NULL };
	struct test_env *e = test_env_open(args);
	uint64_t n = 64;
	gpux_buf *x, *y;
	gpux_req *r;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &y), GPUX_OK);
	memset(gpux_buf_data(y), 0, n * 4);
	{
		struct gpux_launch l = test_launch_1d(n, 0, NULL);
		/* add1 writes its third argument: an input here. */
		struct gpux_arg a[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 0, n * 4),
					gpux_arg_in(y, 0, n * 4) };

		assert_int_equal(gpux_submit(e->m, "add1", &l, a, 3, &r), GPUX_OK);
	}
	assert_int_equal(gpux_wait(r, 10000), GPUX_E_KERNEL_FAULT);
	assert_non_null(strstr(gpux_req_message(r), "argument 2, an input"));
	gpux_req_free(r);
	for (uint64_t i = 0; i < n; i++)
		assert_float_equal(((float *)gpux_buf_data(y))[i], 0, 0);
	gpux_buf_free(y);
	gpux_buf_free(x);
	test_env_close(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_isolation_reserve_kept_from_device_buffers),
		cmocka_unit_test(test_isolation_fresh_client_during_a_restart),
		cmocka_unit_test(test_isolation_neighbour_fault_replays_innocents),
		cmocka_unit_test(test_isolation_input_written_is_named),
	};

	return cmocka_run_group_tests_name("e2e-isolation", tests, NULL, NULL);
}
