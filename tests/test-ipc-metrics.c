/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-metrics.c: request-time histograms and the Prometheus text of a status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "macro.h"
#include "metrics.h"

static void test_metrics_hist_buckets_hold_their_bound(void **state)
{
	struct ipc_hist h = { 0 };
	uint64_t sum = 0;

	/* Each bound falls in its own bucket, one nanosecond more in the next. */
	for (unsigned b = 0; b + 1 < IPC_HIST_BUCKETS; b++) {
		memset(&h, 0, sizeof(h));
		ipc_hist_add(&h, ipc_hist_bounds_ns[b]);
		assert_int_equal(h.count[b], 1);
		ipc_hist_add(&h, ipc_hist_bounds_ns[b] + 1);
		assert_int_equal(h.count[b + 1], 1);
		if (b > 0)
			assert_true(ipc_hist_bounds_ns[b] > ipc_hist_bounds_ns[b - 1]);
	}
	memset(&h, 0, sizeof(h));
	for (uint64_t ns = 0; ns < 3000; ns += 1000) {
		ipc_hist_add(&h, ns);
		sum += ns;
	}
	ipc_hist_add(&h, UINT64_MAX / 2);
	assert_int_equal(h.count[0], 3);
	assert_int_equal(h.count[1], 0);
	assert_int_equal(h.count[IPC_HIST_BUCKETS - 1], 1);
	assert_int_equal(h.sum_ns, sum + UINT64_MAX / 2);
}

/* The text written for a status of two devices, NUL-terminated; free() it. */
static char *write_text_flags(const struct ipc_status *st, const struct ipc_dev_status *devs,
			      unsigned flags)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	assert_int_equal(ipc_metrics_write(f, st, devs, flags), 0);
	assert_int_equal(fclose(f), 0);
	return text;
}

static char *write_text(const struct ipc_status *st, const struct ipc_dev_status *devs)
{
	return write_text_flags(st, devs, IPC_METRICS_PER_USER);
}

static void test_metrics_text_has_the_counts(void **state)
{
	static struct ipc_dev_status devs[2];
	struct ipc_status st = {
		.ndevices = 2, .nclients = 3, .clients_total = 9, .version = "9.8.7"
	};
	char *text;

	for (unsigned i = 0; i < 2; i++) {
		devs[i].info.index = i;
		devs[i].state = IPC_DEVICE_READY;
		(void)snprintf(devs[i].info.name, sizeof(devs[i].info.name), "dev %u", i);
	}
	devs[1].stats.by_status[0] = 40;
	devs[1].stats.by_status[-IPC_E_WORKER_LOST] = 2;
	devs[1].stats.launches = 42;
	devs[1].stats.loop_sleeps = 17;
	devs[1].stats.graph_requests = 640;
	devs[1].stats.usage[3] = (struct ipc_usage){ .uid = 1000, .shared_bytes = 4096 };
	devs[1].stats.usage[IPC_USAGE_UIDS - 1] =
		(struct ipc_usage){ .uid = IPC_USAGE_OTHERS, .device_bytes = 8192 };
	ipc_hist_add(&devs[1].stats.latency, 7000);
	ipc_hist_add(&devs[1].stats.latency, 3 * NSEC_PER_SEC);
	text = write_text(&st, devs);

	assert_non_null(strstr(text, "\ngpux_clients_connected 3\n"));
	assert_non_null(strstr(text, "gpux_build_info{version=\"9.8.7\"} 1\n"));
	assert_non_null(strstr(text, "\ngpux_requests_total{device=\"1\",status=\"ok\"} 40\n"));
	assert_non_null(
		strstr(text, "\ngpux_requests_total{device=\"1\",status=\"worker_lost\"} 2\n"));
	assert_non_null(strstr(text, "\ngpux_requests_total{device=\"0\",status=\"ok\"} 0\n"));
	assert_non_null(strstr(text, "\ngpux_launches_total{device=\"1\"} 42\n"));
	assert_non_null(strstr(text, "\ngpux_worker_loop_sleeps_total{device=\"1\"} 17\n"));
	assert_non_null(strstr(text, "\ngpux_graph_requests_total{device=\"1\"} 640\n"));
	assert_non_null(
		strstr(text, "\ngpux_shared_memory_bytes{device=\"1\",uid=\"1000\"} 4096\n"));
	assert_non_null(
		strstr(text, "\ngpux_device_buffer_bytes{device=\"1\",uid=\"other\"} 8192\n"));
	/* Only users that hold something. */
	assert_null(strstr(text, "uid=\"0\""));
	/* Buckets count what is at most their bound, the last one everything. */
	assert_non_null(strstr(
		text, "\ngpux_request_latency_seconds_bucket{device=\"1\",le=\"5e-06\"} 0\n"));
	assert_non_null(strstr(
		text, "\ngpux_request_latency_seconds_bucket{device=\"1\",le=\"1e-05\"} 1\n"));
	assert_non_null(
		strstr(text, "\ngpux_request_latency_seconds_bucket{device=\"1\",le=\"2.5\"} 1\n"));
	assert_non_null(
		strstr(text, "\ngpux_request_latency_seconds_bucket{device=\"1\",le=\"5\"} 2\n"));
	assert_non_null(strstr(
		text, "\ngpux_request_latency_seconds_bucket{device=\"1\",le=\"+Inf\"} 2\n"));
	assert_non_null(strstr(text, "\ngpux_request_latency_seconds_count{device=\"1\"} 2\n"));
	assert_non_null(
		strstr(text, "\ngpux_request_latency_seconds_sum{device=\"1\"} 3.000007000\n"));
	assert_non_null(strstr(text, "\ngpux_device_state{device=\"0\",state=\"ready\"} 1\n"));
	assert_non_null(strstr(text, "\ngpux_device_state{device=\"0\",state=\"failed\"} 0\n"));
	/* Every family once, announced before its samples. */
	assert_non_null(strstr(text, "# TYPE gpux_requests_total counter\ngpux_requests_total{"));
	assert_null(strstr(strstr(text, "# TYPE gpux_requests_total") + 1,
			   "# TYPE gpux_requests_total"));
	assert_int_equal(text[strlen(text) - 1], '\n');
	free(text);
}

/* By default memory is told per device, with no uid: whoever reaches the port learns nothing
 * of who uses the device. */
static void test_metrics_no_uid_unless_asked(void **state)
{
	static struct ipc_dev_status devs[2];
	struct ipc_status st = { .ndevices = 2, .version = "1" };
	char *text;

	devs[1].stats.usage[3] = (struct ipc_usage){ .uid = 1000, .shared_bytes = 4096 };
	devs[1].stats.usage[5] =
		(struct ipc_usage){ .uid = 1001, .shared_bytes = 100, .device_bytes = 7 };
	devs[1].stats.usage[IPC_USAGE_UIDS - 1] =
		(struct ipc_usage){ .uid = IPC_USAGE_OTHERS, .device_bytes = 8192 };
	text = write_text_flags(&st, devs, 0);
	assert_null(strstr(text, ",uid="));
	assert_non_null(strstr(text, "\ngpux_shared_memory_bytes{device=\"1\"} 4196\n"));
	assert_non_null(strstr(text, "\ngpux_device_buffer_bytes{device=\"1\"} 8199\n"));
	assert_non_null(strstr(text, "\ngpux_shared_memory_bytes{device=\"0\"} 0\n"));
	free(text);
}

/* A device's name is the driver's to choose: quotes, backslashes and newlines are escaped. */
static void test_metrics_label_values_are_escaped(void **state)
{
	static struct ipc_dev_status dev;
	struct ipc_status st = { .ndevices = 1, .version = "1\"2" };
	char *text;

	dev.state = IPC_DEVICE_FAILED;
	(void)snprintf(dev.info.name, sizeof(dev.info.name), "a\"b\\c\nd");
	text = write_text(&st, &dev);
	assert_non_null(strstr(text, "name=\"a\\\"b\\\\c\\nd\""));
	assert_non_null(strstr(text, "version=\"1\\\"2\""));
	/* No raw newline inside a sample. */
	assert_null(strstr(text, "a\"b"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metrics_hist_buckets_hold_their_bound),
		cmocka_unit_test(test_metrics_text_has_the_counts),
		cmocka_unit_test(test_metrics_label_values_are_escaped),
		cmocka_unit_test(test_metrics_no_uid_unless_asked),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
