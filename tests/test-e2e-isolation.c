/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-isolation.c: what one client cannot take from another: the device-memory reserve. */
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

/* saxpy over n floats with IN and OUT arguments; its status, the result checked when OK. */
static gpux_status saxpy_in_out(struct test_env *e, uint32_t device, uint64_t n)
{
	gpux_buf *x, *y, *out;
	float a = 2.0f;
	gpux_status st;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, &e->seed);
	test_fill_random(gpux_buf_data(y), n, &e->seed);
	{
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n), GPUX_ARG_VALUE(a), gpux_arg_in(x, 0, n * 4),
			gpux_arg_in(y, 0, n * 4), gpux_arg_out(out, 0, n * 4),
		};
		struct gpux_launch l = test_launch_1d(n, device, NULL);

		st = gpux_run(e->m, "saxpy", &l, args, ARRAY_SIZE(args));
	}
	if (st == GPUX_OK) {
		const float *px = gpux_buf_data(x), *py = gpux_buf_data(y), *po = gpux_buf_data(out);

		for (uint64_t i = 0; i < n; i++)
			assert_float_equal(po[i], a * px[i] + py[i], 1e-6);
	}
	gpux_buf_free(out);
	gpux_buf_free(y);
	gpux_buf_free(x);
	return st;
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
	assert_int_equal(saxpy_in_out(e, 0, 1000), GPUX_OK);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_isolation_reserve_kept_from_device_buffers),
		cmocka_unit_test(test_isolation_fresh_client_during_a_restart),
	};

	return cmocka_run_group_tests_name("e2e-isolation", tests, NULL, NULL);
}
