/* SPDX-License-Identifier: MIT */
/* tools/bench-launch.c: gpux bench's launch scenarios: round trip, many clients, fairness. */
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "macro.h"
#include "proto.h"

/* Launches a client keeps in flight; beyond WINDOW_MANY_FROM processes, fewer each. */
#define WINDOW 32
#define WINDOW_MANY 8
#define WINDOW_MANY_FROM 128u
/* ... and a busy neighbour in the fairness scenario. */
#define BUSY_WINDOW 512

int bench_rtt_times(struct bench *b, unsigned n, uint64_t *t, uint64_t *in)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };

	for (unsigned i = 0; i < n + n / 10; i++) {
		uint64_t t0 = tool_now();
		struct gpux_times times;
		gpux_req *r;

		if (gpux_submit(b->m, "empty", &l, NULL, 0, &r) != GPUX_OK)
			return -1;
		(void)gpux_wait(r, -1);
		if (i >= n / 10) {
			t[i - n / 10] = tool_now() - t0;
			(void)gpux_req_times(r, &times);
			if (in)
				in[i - n / 10] = times.queue_ns + times.run_ns;
		}
		gpux_req_free(r);
	}
	return 0;
}

bool bench_handoffs(struct bench *b, struct ipc_stats *ret)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct ipc_status st;

	if (tool_status_query(b->sock, &st, devs) < 0 || st.ndevices == 0)
		return false;
	*ret = devs[0].stats;
	return true;
}

void bench_add_handoffs(struct bench *b, const char *what, const struct ipc_stats *s0,
			const struct ipc_stats *s1)
{
	static const struct {
		size_t off;
		const char *name;
	} rows[] = {
		{ offsetof(struct ipc_stats, loop_sleeps), "worker loop sleeps" },
		{ offsetof(struct ipc_stats, kicks_sent), "clients woken" },
		{ offsetof(struct ipc_stats, socket_msgs), "sent by socket" },
		{ offsetof(struct ipc_stats, blocking_waits), "waiters that napped" },
		{ offsetof(struct ipc_stats, loop_waits), "ends seen by the loop" },
	};
	double n = (double)(s1->requests_done - s0->requests_done);

	for (unsigned i = 0; i < ARRAY_SIZE(rows) && n > 0; i++) {
		char name[64];
		uint64_t a, z;

		memcpy(&a, (const uint8_t *)s0 + rows[i].off, sizeof(a));
		memcpy(&z, (const uint8_t *)s1 + rows[i].off, sizeof(z));
		(void)snprintf(name, sizeof(name), "  %s: %s", what, rows[i].name);
		bench_add(b, name, (double)(z - a) / n, NAN, "", "", NAN, true);
	}
	/* How many requests each graph held: a worker launches one client's run as a graph. */
	if (n > 0 && s1->graph_launches > s0->graph_launches) {
		char name[64];

		(void)snprintf(name, sizeof(name), "  %s: requests per graph", what);
		bench_add(b, name,
			  (double)(s1->graph_requests - s0->graph_requests) /
				  (double)(s1->graph_launches - s0->graph_launches),
			  NAN, "", "", NAN, true);
	}
}

int bench_rtt(struct bench *b)
{
	const unsigned n = b->quick ? 500 : 5000;
	uint64_t *t = calloc(2 * (size_t)n, sizeof(*t)), *in = t + n;
	const char *args[] = { "rtt", b->cubin, b->quick ? "500" : "5000", NULL };
	double p50, p99, worker, bp50 = NAN, bp99 = NAN;
	struct kv kv;

	struct ipc_stats s0, s1;
	bool counted = bench_handoffs(b, &s0);

	if (!t || bench_rtt_times(b, n, t, in) < 0) {
		free(t);
		return -1;
	}
	counted = counted && bench_handoffs(b, &s1);
	p50 = bench_median(t, n);
	p99 = bench_pct(t, n, 99);
	worker = bench_median(in, n);
	free(t);
	if (bench_base_run(b, &kv, args) == 0) {
		bp50 = bench_kv_get(&kv, "rtt_p50_ns");
		bp99 = bench_kv_get(&kv, "rtt_p99_ns");
	}
	bench_add(b, "empty kernel round trip, p50", p50 / 1e3, bp50 / 1e3, "us", "<= 1.1x",
		  p50 / bp50, p50 <= 1.1 * bp50);
	bench_add(b, "empty kernel round trip, p99", p99 / 1e3, bp99 / 1e3, "us", "", p99 / bp99,
		  true);
	/* The rest of the round trip is the way there and back: rings and wake-ups. */
	bench_add(b, "  of it in the worker, p50", worker / 1e3, NAN, "us", "", NAN, true);
	if (counted)
		bench_add_handoffs(b, "per request", &s0, &s1);
	if (bench_base_run(b, &kv, (const char *const[]){ "costs", b->cubin, NULL }) == 0) {
		static const struct {
			const char *key, *name;
		} costs[] = {
			{ "rtt_event_spin_p50_ns", "  in-process: launch, event, spin on it, p50" },
			{ "rtt_word_spin_p50_ns",
			  "  in-process: launch, stream writes a word, p50" },
			{ "rtt_stream_spin_p50_ns",
			  "  in-process: launch, spin on cuStreamQuery, p50" },
			{ "launch_ns", "  in-process: cuLaunchKernel" },
			{ "event_record_ns", "  in-process: cuEventRecord" },
			{ "event_query_ns", "  in-process: cuEventQuery" },
			{ "stream_query_ns", "  in-process: cuStreamQuery" },
			{ "graph_node_set_ns", "  in-process: cuGraphExecKernelNodeSetParams" },
			{ "graph64_launch_ns", "  in-process: cuGraphLaunch of 64 nodes" },
			{ "graph1_launch_ns", "  in-process: cuGraphLaunch of 1 node" },
			{ "rtt_graph1_event_spin_p50_ns",
			  "  in-process: graph of 1 node, event, spin on it, p50" },
			{ "rtt_graph1_set_event_spin_p50_ns",
			  "  in-process: the same, its node set first, p50" },
			{ "rtt_graph1_sync_p50_ns",
			  "  in-process: graph of 1 node, synchronize, p50" },
			{ "write_value_ns", "  in-process: cuStreamWriteValue64" },
			{ "pool_alloc_free_ns",
			  "  in-process: a 64 KiB temporary from the pool, freed" },
		};

		for (unsigned i = 0; i < ARRAY_SIZE(costs); i++) {
			double v = bench_kv_get(&kv, costs[i].key);

			if (!isnan(v))
				bench_add(b, costs[i].name, NAN, v / 1e3, "us", "", NAN, true);
		}
	}
	return 0;
}

/* ---- many clients ---- */

uint64_t bench_client_loop(struct bench *b, const char *kernel, bool scalar, unsigned window,
			   uint32_t device, uint64_t from, uint64_t until)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = device };
	gpux_req **r = calloc(window, sizeof(*r));
	uint64_t done = 0;
	uint32_t v = 0;
	unsigned k = 0;

	if (!r)
		return 0;
	for (;;) {
		uint64_t now = tool_now();
		struct gpux_arg a = GPUX_ARG_VALUE(v);

		if (r[k]) {
			if (gpux_wait(r[k], -1) != GPUX_OK)
				return 0;
			gpux_req_free(r[k]);
			r[k] = NULL;
			if (now >= from)
				done++;
		}
		if (now >= until)
			break;
		v++;
		if (gpux_submit(b->m, kernel, &l, scalar ? &a : NULL, scalar, &r[k]) != GPUX_OK)
			return 0;
		k = (k + 1) % window;
	}
	for (unsigned i = 0; i < window; i++)
		if (r[i]) {
			(void)gpux_wait(r[i], -1);
			gpux_req_free(r[i]);
		}
	free(r);
	return done;
}

/* For clients_rate(): client process i launches on device i modulo the devices. */
#define DEVICE_IN_TURN (GPUX_ANY - 1)

/*
 * n client processes, each with `window` launches in flight, for secs seconds after a start
 * that leaves them time to connect: their launches per second.
 */
static double clients_rate(struct bench *b, unsigned n, const char *kernel, bool scalar,
			   uint32_t device, unsigned window, double secs)
{
	uint64_t from = tool_now() + (500 + 2 * (uint64_t)n) * 1000000ull;
	uint64_t until = from + (uint64_t)(secs * 1e9);
	uint64_t *cnt, total = 0;
	gpux_buf *counts;
	int failed = 0;

	if (gpux_buf_alloc(b->ctx, n * sizeof(uint64_t), &counts) < 0)
		return NAN;
	cnt = gpux_buf_data(counts);
	for (unsigned i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			uint32_t dev =
				device == DEVICE_IN_TURN ? i % gpux_device_count(b->ctx) : device;

			cnt[i] = bench_client_loop(b, kernel, scalar, window, dev, from, until);
			_exit(cnt[i] ? 0 : 1);
		}
		if (pid < 0)
			failed++;
	}
	for (unsigned i = 0; i < n; i++) {
		int st;

		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			failed++;
	}
	for (unsigned i = 0; i < n; i++)
		total += cnt[i];
	gpux_buf_free(counts);
	return failed ? NAN : (double)total / secs;
}

/* What gpux's launch rate is held against, in launches per second (NAN: not measured). */
struct alternatives {
	double thread1;    /* one thread, one stream */
	double threads[3]; /* 4, 8, 16 threads of one context, a stream each */
	double graph64;    /* one thread, graphs of 64 nodes set before every launch */
	double cupy[3];    /* CuPy, 4, 16, 32 processes, a context each */
	double best;       /* the highest of them */
};

static void alternatives_measure(struct bench *b, struct alternatives *a)
{
	static const char *const nthreads[] = { "4", "8", "16" };
	static const char *const nprocs[] = { "procs_4", "procs_16", "procs_32" };
	struct kv kv;

	*a = (struct alternatives){ NAN, { NAN, NAN, NAN }, NAN, { NAN, NAN, NAN }, NAN };
	if (bench_base_run(b, &kv, (const char *const[]){ "rate", b->cubin, "200000", NULL }) == 0)
		a->thread1 = bench_kv_get(&kv, "launches_per_s");
	for (unsigned i = 0; i < 3; i++)
		if (bench_base_run(b, &kv,
				   (const char *const[]){ "threads", b->cubin, nthreads[i],
							  "400000", NULL }) == 0)
			a->threads[i] = bench_kv_get(&kv, "launches_per_s");
	if (bench_base_run(b, &kv,
			   (const char *const[]){ "graph", b->cubin, "64", "409600", NULL }) == 0)
		a->graph64 = bench_kv_get(&kv, "launches_per_s");
	if (bench_cupy_run(b, &kv,
			   (const char *const[]){ "--rates", b->quick ? "--quick" : NULL, NULL }) ==
	    0)
		for (unsigned i = 0; i < 3; i++)
			a->cupy[i] = bench_kv_get(&kv, nprocs[i]);
	a->best = a->thread1;
	for (unsigned i = 0; i < 3; i++) {
		a->best = fmax(a->best, a->threads[i]);
		a->best = fmax(a->best, a->cupy[i]);
	}
	a->best = fmax(a->best, a->graph64);
}

/* The launch rate DESIGN.md asks of 4 to 512 client processes on one GPU, and its peak (the
 * one-process graph ceiling). */
#define MANY_RATE 1.3e6
#define PEAK_RATE 1.9e6

/*
 * Async empty launches from 1 to 512 client processes on one device (32 in flight each up to
 * 64 processes, 8 beyond) against the best in-process way to launch (one thread for one
 * client; else whichever is fastest of N threads, graphs and CuPy processes). Targets: one
 * client 0.9 of one thread; 4 to 512 clients 1.3 M/s each; the highest 1.9 M/s.
 */
static int clients_one_device(struct bench *b, const struct alternatives *alt, double secs)
{
	static const unsigned counts[] = { 1, 4, 16, 32, 64, 256, 512 };
	double peak = 0;
	unsigned peak_n = 0;
	char name[64];

	for (unsigned c = 0; c < ARRAY_SIZE(counts); c++) {
		unsigned n = counts[c], window = n >= WINDOW_MANY_FROM ? WINDOW_MANY : WINDOW;
		struct ipc_stats s0, s1;
		bool counted = n >= WINDOW_MANY_FROM && bench_handoffs(b, &s0);
		double rate = clients_rate(b, n, "empty", false, 0, window, secs);

		if (isnan(rate))
			return -1;
		counted = counted && bench_handoffs(b, &s1);
		if (rate > peak) {
			peak = rate;
			peak_n = n;
		}
		(void)snprintf(name, sizeof(name), "%u client process%s, async empty kernels%s", n,
			       n == 1 ? "" : "es", window == WINDOW_MANY ? ", 8 each" : "");
		if (n == 1)
			bench_add(b, name, rate / 1e3, alt->thread1 / 1e3, "k/s", ">= 0.9x",
				  rate / alt->thread1, rate >= 0.9 * alt->thread1);
		else
			/* The target is absolute: judged without a baseline too. */
			bench_add(b, name, rate / 1e3, alt->best / 1e3, "k/s", ">= 1300 k/s",
				  isnan(alt->best) ? rate / 1e6 : rate / alt->best,
				  rate >= MANY_RATE);
		if (counted) {
			(void)snprintf(name, sizeof(name), "%u processes", n);
			bench_add_handoffs(b, name, &s0, &s1);
		}
	}
	(void)snprintf(name, sizeof(name), "the highest of them (%u processes)", peak_n);
	bench_add(b, name, peak / 1e3, alt->graph64 / 1e3, "k/s", ">= 1900 k/s",
		  isnan(alt->graph64) ? peak / 1e6 : peak / alt->graph64, peak >= PEAK_RATE);
	{
		double rate = clients_rate(b, 16, "scalar", true, 0, WINDOW, secs);

		if (isnan(rate))
			return -1;
		bench_add(b, "16 processes, a new argument each launch", rate / 1e3,
			  alt->best / 1e3, "k/s", "", rate / alt->best, true);
	}
	return 0;
}

/* Requests each device has finished, or false when gpuxd does not say. */
static bool done_per_device(struct bench *b, uint64_t *ret, uint32_t ndev)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct ipc_status st;

	if (tool_status_query(b->sock, &st, devs) < 0 || st.ndevices < ndev)
		return false;
	for (uint32_t i = 0; i < ndev; i++)
		ret[i] = devs[i].stats.requests_done;
	return true;
}

/* The share of the requests of a run that device 0 finished, as a row named after `what`. */
static void add_share(struct bench *b, const char *what, const uint64_t *d0, const uint64_t *d1,
		      uint32_t ndev)
{
	uint64_t all = 0;
	char name[96];

	for (uint32_t i = 0; i < ndev; i++)
		all += d1[i] - d0[i];
	(void)snprintf(name, sizeof(name), "  %s: device 0's share", what);
	bench_add(b, name, all ? (double)(d1[0] - d0[0]) / (double)all : NAN, NAN, "", "", NAN,
		  true);
}

/*
 * With several devices: the same client processes (32 in flight each) with GPUX_ANY, each
 * naming a device in turn, and all on one device. GPUX_ANY must give at least 0.95 of the
 * named devices, and 0.95 of one device times the devices (1.9 times for two).
 */
static int clients_all_devices(struct bench *b, double secs)
{
	static char target[32];
	uint32_t ndev = gpux_device_count(b->ctx);
	double want = 0.95 * ndev;
	char name[64];

	(void)snprintf(target, sizeof(target), ">= %.3gx", want);
	for (unsigned n = 16; n <= 64 && ndev > 1 && ndev <= IPC_DEVICES_MAX; n *= 2) {
		uint64_t d0[IPC_DEVICES_MAX], d1[IPC_DEVICES_MAX];
		struct ipc_stats s0, s1;
		double one = clients_rate(b, n, "empty", false, 0, WINDOW, secs), named, any;
		bool counted = bench_handoffs(b, &s0), shared;

		named = clients_rate(b, n, "empty", false, DEVICE_IN_TURN, WINDOW, secs);
		if (counted && bench_handoffs(b, &s1)) {
			(void)snprintf(name, sizeof(name), "%u named, device 0", n);
			bench_add_handoffs(b, name, &s0, &s1);
		}
		counted = bench_handoffs(b, &s0);
		shared = done_per_device(b, d0, ndev);
		any = clients_rate(b, n, "empty", false, GPUX_ANY, WINDOW, secs);
		counted = counted && bench_handoffs(b, &s1);
		shared = shared && done_per_device(b, d1, ndev);
		if (isnan(one) || isnan(named) || isnan(any))
			return -1;
		(void)snprintf(name, sizeof(name), "%u processes, GPUX_ANY vs each naming one", n);
		bench_add(b, name, any / 1e3, named / 1e3, "k/s", ">= 0.95x", any / named,
			  any >= 0.95 * named);
		(void)snprintf(name, sizeof(name), "%u processes, GPUX_ANY vs all on one", n);
		bench_add(b, name, any / 1e3, one / 1e3, "k/s", target, any / one,
			  any >= want * one);
		(void)snprintf(name, sizeof(name), "  %u processes, each naming one, vs all on one",
			       n);
		bench_add(b, name, named / 1e3, one / 1e3, "k/s", "", named / one, true);
		if (counted) {
			(void)snprintf(name, sizeof(name), "%u GPUX_ANY, device 0", n);
			bench_add_handoffs(b, name, &s0, &s1);
		}
		if (shared) {
			(void)snprintf(name, sizeof(name), "%u GPUX_ANY", n);
			add_share(b, name, d0, d1, ndev);
		}
	}
	return 0;
}

int bench_clients(struct bench *b)
{
	double secs = b->quick ? 1.0 : 3.0;
	struct alternatives alt;
	char name[64];

	alternatives_measure(b, &alt);
	if (clients_one_device(b, &alt, secs) < 0 || clients_all_devices(b, secs) < 0)
		return -1;
	bench_add(b, "  in-process: 1 thread", NAN, alt.thread1 / 1e3, "k/s", "", NAN, true);
	for (unsigned i = 0; i < 3; i++) {
		(void)snprintf(name, sizeof(name), "  in-process: %u threads, a stream each",
			       4u << i);
		bench_add(b, name, NAN, alt.threads[i] / 1e3, "k/s", "", NAN, true);
	}
	bench_add(b, "  in-process: graphs of 64 nodes, 1 thread", NAN, alt.graph64 / 1e3, "k/s",
		  "", NAN, true);
	for (unsigned i = 0; i < 3; i++) {
		static const unsigned procs[] = { 4, 16, 32 };

		if (isnan(alt.cupy[i]))
			continue;
		(void)snprintf(name, sizeof(name), "  CuPy: %u processes, a context each",
			       procs[i]);
		bench_add(b, name, NAN, alt.cupy[i] / 1e3, "k/s", "", NAN, true);
	}
	return 0;
}

/* ---- fairness ---- */

/*
 * A client doing round trips alone, then beside a busy one (BUSY_WINDOW empty kernels in
 * flight all the time, on the same device): how much the busy one slows it, and what the busy
 * one gets meanwhile.
 */
int bench_fair(struct bench *b)
{
	const unsigned n = b->quick ? 300 : 2000;
	uint64_t *alone = calloc(n, sizeof(*alone)), *beside = calloc(n, sizeof(*beside));
	double p50a, p99a, p50b, p99b, busy = NAN;
	struct ipc_stats s0, s1;
	bool counted;
	gpux_buf *count;
	uint64_t from, until;
	pid_t pid;
	int st;

	if (!alone || !beside || gpux_buf_alloc(b->ctx, sizeof(uint64_t), &count) < 0)
		goto fail;
	/* The lone round trips come right after the many clients' scenario: where a slow mode
	 * was seen (docs/PERFORMANCE.md), so they count their hand-offs too. */
	counted = bench_handoffs(b, &s0);
	if (bench_rtt_times(b, n, alone, NULL) < 0)
		goto fail_count;
	counted = counted && bench_handoffs(b, &s1);
	from = tool_now() + 300 * 1000000ull;
	until = from + (b->quick ? 2 : 6) * 1000000000ull;
	pid = fork();
	if (pid == 0) {
		uint64_t *c = gpux_buf_data(count);

		*c = bench_client_loop(b, "empty", false, BUSY_WINDOW, 0, from, until);
		_exit(*c ? 0 : 1);
	}
	if (pid < 0)
		goto fail_count;
	while (tool_now() < from)
		(void)usleep(1000);
	if (bench_rtt_times(b, n, beside, NULL) < 0 || tool_now() > until) {
		(void)kill(pid, SIGKILL);
		(void)waitpid(pid, NULL, 0);
		goto fail_count;
	}
	if (waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
		busy = (double)*(uint64_t *)gpux_buf_data(count) / ((double)(until - from) / 1e9);
	p50a = bench_median(alone, n);
	p99a = bench_pct(alone, n, 99);
	p50b = bench_median(beside, n);
	p99b = bench_pct(beside, n, 99);
	bench_add(b, "round trip beside a busy client, p50", p50b / 1e3, p50a / 1e3, "us", "",
		  p50b / p50a, true);
	bench_add(b, "round trip beside a busy client, p99", p99b / 1e3, p99a / 1e3, "us", "",
		  p99b / p99a, true);
	bench_add(b, "  the busy client meanwhile", busy / 1e3, NAN, "k/s", "", NAN, true);
	if (counted)
		bench_add_handoffs(b, "alone, per request", &s0, &s1);
	gpux_buf_free(count);
	free(alone);
	free(beside);
	return isnan(busy) ? -1 : 0;
fail_count:
	gpux_buf_free(count);
fail:
	free(alone);
	free(beside);
	return -1;
}
