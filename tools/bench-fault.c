/* SPDX-License-Identifier: MIT */
/* tools/bench-fault.c: gpux bench's "fault": what a neighbour's faulting kernel costs innocent clients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "macro.h"

/*
 * A private gpuxd; INNOCENTS client processes, each keeping WINDOW small requests in flight on
 * its default queue (an INOUT increment of one float: results copied back, so the request can
 * run again only until that copy began), one after the other for the whole run; meanwhile
 * this process's kernel writes an illegal address FAULTS times, EVERY_MS apart, and each time
 * the worker dies and is started again (at once for a fault blamed on this process's request;
 * after gpuxd's back-off, 100 ms and more, for one blamed on nobody). Then the same with
 * gpuxd's --standby, the faults 1.5 times as far apart: each time the device's standby takes
 * over, and the next one starts. Each innocent counts its requests that failed (the goal
 * is none: requests that had not begun run again on the restarted worker), checks that its float
 * was added to exactly once per request that succeeded (none ran twice), and records every round
 * trip: the extra latency of a restart is the worst of them against the median. Why requests
 * failed, and what the faulting client was told of each fault, goes to stderr after the run.
 */

#define INNOCENTS 4u
#define WINDOW 4u
#define FAULTS 3u
#define EVERY_MS 2000u
#define LAT_MAX 200000u

static const char kernels_cuda[] = "extern \"C\" __global__ void inc(float *p)\n"
				   "{\n"
				   "	if (threadIdx.x == 0 && blockIdx.x == 0)\n"
				   "		p[0] += 1.0f;\n"
				   "}\n"
				   "extern \"C\" __global__ void crash(float *p)\n"
				   "{\n"
				   "	p[1ull << 40] = 1.0f;\n"
				   "}\n";

static const char kernels_host[] = "GPUX_HOST_PARAMS(inc, sizeof(float *));\n"
				   "GPUX_HOST_KERNEL(inc)\n"
				   "{\n"
				   "	GPUX_ARG(float *, 0)[0] += 1.0f;\n"
				   "}\n"
				   "GPUX_HOST_PARAMS(crash, sizeof(float *));\n"
				   "GPUX_HOST_KERNEL(crash)\n"
				   "{\n"
				   "	volatile float *p = GPUX_ARG(float *, 0);\n"
				   "	p[-(1L << 40)] = 1.0f;\n"
				   "}\n";

/* What each innocent tells the parent, in shared anonymous memory. */
struct innocent {
	uint64_t ok, failed, wrong;
	uint64_t why[IPC_STATUS_CODES]; /* failures by status: why[-status] */
	gpux_status first_st;           /* the first failure's, and its message */
	char first[256];
	unsigned nlat;
	uint64_t lat[LAT_MAX];
};

/* What the faulting client was told of one fault: its request's status and message. */
struct told {
	gpux_status st;
	char text[256];
};

static void innocent_failed(struct innocent *me, gpux_status st, const char *text)
{
	me->why[MIN((unsigned)-st, IPC_STATUS_CODES - 1)]++;
	if (me->failed++ == 0) {
		me->first_st = st;
		(void)snprintf(me->first, sizeof(me->first), "%s", text ? text : "");
	}
}

static gpux_module *load(struct bench *b, gpux_ctx *c)
{
	gpux_module *m = NULL;

	if (b->cuda)
		(void)gpux_module_load(c, GPUX_LANG_CUDA, kernels_cuda, sizeof(kernels_cuda) - 1,
				       NULL, &m, NULL);
	else
		(void)gpux_module_load(c, GPUX_LANG_HOST, kernels_host, sizeof(kernels_host) - 1,
				       NULL, &m, NULL);
	return m;
}

/* Connect to sock (the daemon may still be starting), device 0 ready. */
static gpux_ctx *connect_ready(const char *sock)
{
	gpux_ctx *c = NULL;

	for (int tries = 0; tries < 500 && gpux_connect(sock, &c) != GPUX_OK; tries++)
		(void)usleep(20000);
	for (int tries = 0; c && tries < 3000; tries++) {
		struct gpux_device_info info;

		if (gpux_device_info(c, 0, &info) == GPUX_OK && info.state == GPUX_DEVICE_READY)
			break;
		(void)usleep(10000);
	}
	return c;
}

/* An innocent client until `until`: WINDOW requests in flight, each timed. */
static void innocent_run(struct bench *b, const char *sock, uint64_t until, struct innocent *me)
{
	gpux_ctx *c = connect_ready(sock);
	gpux_module *m = c ? load(b, c) : NULL;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = 0 };
	gpux_req *r[WINDOW] = { NULL };
	uint64_t t0[WINDOW];
	gpux_status st;
	gpux_buf *buf;
	float *p;

	if (!m || gpux_buf_alloc(c, 4096, &buf) != GPUX_OK)
		_exit(1);
	p = gpux_buf_data(buf);
	p[0] = 0.0f;
	for (unsigned k = 0;; k = (k + 1) % WINDOW) {
		struct gpux_arg a = gpux_arg_inout(buf, 0, 4096);

		if (r[k]) {
			uint64_t now;

			st = gpux_wait(r[k], -1);
			now = tool_now();
			if (st == GPUX_OK)
				me->ok++;
			else
				innocent_failed(me, st, gpux_req_message(r[k]));
			if (me->nlat < LAT_MAX)
				me->lat[me->nlat++] = now - t0[k];
			gpux_req_free(r[k]);
			r[k] = NULL;
		}
		if (tool_now() >= until)
			break;
		t0[k] = tool_now();
		st = gpux_submit(m, "inc", &l, &a, 1, &r[k]);
		if (st != GPUX_OK) {
			innocent_failed(me, st, "not sent");
			r[k] = NULL;
			(void)usleep(1000);
		}
	}
	for (unsigned k = 0; k < WINDOW; k++)
		if (r[k]) {
			st = gpux_wait(r[k], -1);
			if (st == GPUX_OK)
				me->ok++;
			else
				innocent_failed(me, st, gpux_req_message(r[k]));
			gpux_req_free(r[k]);
		}
	/* Once per request that succeeded, never twice (a float counts exactly to 2^24). */
	me->wrong = (uint64_t)p[0] != me->ok;
	_exit(0);
}

/*
 * n faults, `every` apart from `from` on: how many, what the faulting client was told of each
 * (ret_told[k]: GPUX_E_KERNEL_FAULT, its kernel's; else the worker died with its request in
 * flight beside others', GPUX_E_WORKER_LOST, and the message says why), and their restarts'
 * mean time (ns).
 */
static unsigned neighbour_run(struct bench *b, const char *sock, uint64_t from, unsigned n,
			      uint64_t every, struct told *ret_told, double *ret_restart_ns)
{
	gpux_ctx *c = connect_ready(sock);
	gpux_module *m = c ? load(b, c) : NULL;
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = 0 };
	double restarts = 0;
	unsigned faults = 0;
	gpux_status st;
	gpux_buf *buf;
	gpux_req *r;

	if (!m || gpux_buf_alloc(c, 64, &buf) != GPUX_OK) {
		(void)fprintf(stderr, "gpux: bench: fault: the faulting client could not start\n");
		gpux_disconnect(c);
		return 0;
	}
	for (unsigned k = 0; k < n; k++) {
		uint64_t at = from + every / 2 + k * every, until = at + every / 2, t0;
		struct gpux_arg a = gpux_arg_inout(buf, 0, 64);
		struct gpux_device_info info;

		while (tool_now() < at)
			(void)usleep(1000);
		t0 = tool_now();
		st = gpux_submit(m, "crash", &l, &a, 1, &r);
		if (st == GPUX_OK) {
			st = gpux_wait(r, -1);
			(void)snprintf(ret_told[k].text, sizeof(ret_told[k].text), "%s",
				       gpux_req_message(r));
			gpux_req_free(r);
		}
		ret_told[k].st = st;
		if (st != GPUX_E_KERNEL_FAULT && st != GPUX_E_WORKER_LOST) {
			(void)fprintf(stderr, "gpux: bench: fault: the faulting kernel ended %s\n",
				      gpux_strerror(st));
			break;
		}
		faults++;
		/* Down as soon as the worker gives up, then up again. */
		for (int tries = 0; tries < 10000; tries++) {
			if (gpux_device_info(c, 0, &info) == GPUX_OK &&
			    info.state != GPUX_DEVICE_READY)
				break;
			(void)usleep(100);
		}
		while (tool_now() < until && gpux_device_info(c, 0, &info) == GPUX_OK &&
		       info.state != GPUX_DEVICE_READY)
			(void)usleep(1000);
		restarts += (double)(tool_now() - t0);
	}
	*ret_restart_ns = faults ? restarts / faults : NAN;
	gpux_buf_free(buf);
	gpux_module_free(m);
	gpux_disconnect(c);
	return faults;
}

/*
 * One run: a private gpuxd (with --standby where `standby`: its standbys take over, and are
 * given time to start before the first fault and between faults), the innocents and the
 * faults; its rows named after `name`.
 */
static int fault_run(struct bench *b, bool standby, const char *name)
{
	char sock[PATH_MAX + 16], cache[PATH_MAX + 16], row[96];
	uint64_t from, until, every = (standby ? 3 : 2) * EVERY_MS * 1000000ull / 2, all = 0;
	uint64_t ok = 0, failed = 0, wrong = 0, *lat;
	size_t bytes = INNOCENTS * sizeof(struct innocent);
	struct innocent *inn;
	pid_t pids[INNOCENTS], d;
	double restart = NAN, p50, p99, worst;
	unsigned faults, told = 0, started = 0, n = b->quick ? 2 : FAULTS;
	struct told said[FAULTS] = { 0 };

	(void)snprintf(sock, sizeof(sock), "%s/f.sock", b->tmp);
	(void)snprintf(cache, sizeof(cache), "%s/fcache", b->tmp);
	inn = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (inn == MAP_FAILED)
		return -1;
	d = bench_daemon_start(b, sock, cache, standby ? "--standby" : NULL);
	/* The daemon up and the kernels built before the clocks start. */
	{
		gpux_ctx *c = connect_ready(sock);
		gpux_module *m = c ? load(b, c) : NULL;

		gpux_module_free(m);
		gpux_disconnect(c);
		if (!m) {
			(void)fprintf(stderr,
				      "gpux: bench: fault: no gpuxd of its own, or its kernels "
				      "do not build\n");
			bench_daemon_stop(d);
			(void)munmap(inn, bytes);
			return -1;
		}
	}
	/* A standby starts once its worker is ready, and takes as long. */
	from = tool_now() + (standby ? 3000 : 500) * 1000000ull;
	until = from + n * every;
	for (unsigned i = 0; i < INNOCENTS; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			innocent_run(b, sock, until, &inn[i]);
		started += pids[i] > 0;
	}
	faults = neighbour_run(b, sock, from, n, every, said, &restart);
	for (unsigned i = 0; i < INNOCENTS; i++) {
		int st;

		if (pids[i] > 0 &&
		    (waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0))
			failed++;
		ok += inn[i].ok;
		failed += inn[i].failed;
		wrong += inn[i].wrong;
		all += inn[i].nlat;
	}
	bench_daemon_stop(d);
	for (unsigned k = 0; k < faults; k++) {
		told += said[k].st == GPUX_E_KERNEL_FAULT;
		(void)fprintf(stderr,
			      "gpux: bench: fault: fault %u: the faulting client was told %s: %s\n",
			      k + 1, gpux_strerror(said[k].st), said[k].text);
	}
	for (unsigned i = 0; i < INNOCENTS; i++) {
		const struct innocent *in = &inn[i];

		if (!in->failed)
			continue;
		(void)fprintf(stderr, "gpux: bench: fault: innocent %u lost %llu (", i + 1,
			      (unsigned long long)in->failed);
		for (unsigned w = 1, k = 0; w < IPC_STATUS_CODES; w++)
			if (in->why[w])
				(void)fprintf(stderr, "%s%s: %llu", k++ ? ", " : "",
					      gpux_strerror(-(gpux_status)w),
					      (unsigned long long)in->why[w]);
		(void)fprintf(stderr, "), the first %s: %s\n", gpux_strerror(in->first_st),
			      in->first);
	}
	lat = all ? malloc(all * sizeof(*lat)) : NULL;
	if (!lat || faults == 0 || started < INNOCENTS) {
		(void)fprintf(stderr,
			      "gpux: bench: fault: %u faults, %u of %u innocents started, "
			      "%llu results\n",
			      faults, started, INNOCENTS, (unsigned long long)all);
		free(lat);
		(void)munmap(inn, bytes);
		return -1;
	}
	all = 0;
	for (unsigned i = 0; i < INNOCENTS; i++) {
		memcpy(lat + all, inn[i].lat, inn[i].nlat * sizeof(*lat));
		all += inn[i].nlat;
	}
	p50 = bench_median(lat, (unsigned)all);
	p99 = bench_pct(lat, (unsigned)all, 99);
	worst = (double)lat[all - 1]; /* sorted by bench_pct() */
	/* Requests that had begun on the host back end are lost by design (its kernels work in
	 * place): the goal of none lost is a GPU's. */
	(void)snprintf(row, sizeof(row), "%s: innocents' requests lost", name);
	bench_add(b, row, (double)failed, NAN, "", b->cuda ? "0" : "", (double)failed, failed == 0);
#define ROW(what) (void)snprintf(row, sizeof(row), "  %s%s", standby ? "--standby: " : "", what)
	ROW("innocents' results wrong (ran twice)");
	bench_add(b, row, (double)wrong, NAN, "", "0", (double)wrong, wrong == 0);
	ROW("innocents' requests done");
	bench_add(b, row, (double)ok, NAN, "", "", NAN, true);
	ROW("faults (each a restart)");
	bench_add(b, row, (double)faults, NAN, "", "", NAN, true);
	ROW("of them, the faulting client told so");
	bench_add(b, row, (double)told, NAN, "", "", NAN, true);
	ROW("worker restart, fault to ready");
	bench_add(b, row, restart / 1e6, NAN, "ms", "", NAN, true);
	ROW("innocents' round trip, p50");
	bench_add(b, row, p50 / 1e3, NAN, "us", "", NAN, true);
	ROW("innocents' round trip, p99");
	bench_add(b, row, p99 / 1e3, NAN, "us", "", NAN, true);
	ROW("innocents' worst round trip (a restart's delay)");
	bench_add(b, row, worst / 1e6, NAN, "ms", "", NAN, true);
#undef ROW
	free(lat);
	(void)munmap(inn, bytes);
	return 0;
}

/* Without standbys, then with them (a standby takes over where a worker would start). */
int bench_fault(struct bench *b)
{
	int r = fault_run(b, false, "neighbour faults");

	if (fault_run(b, true, "neighbour faults, --standby") < 0)
		r = -1;
	return r;
}
