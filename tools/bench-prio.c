/* SPDX-License-Identifier: MIT */
/* tools/bench-prio.c: gpux bench's isolation: a latency-critical client beside busy ones, shares. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "macro.h"

/*
 * prio: a latency-critical client's round trips (an empty kernel, one at a time) alone, then
 * beside 1, 16 and 64 best-effort client processes that keep the device saturated (512
 * launches in flight for one, 32 each for more), first at the default priority and then on a
 * queue of the highest (GPUX_PRIORITY_MAX); and the busy clients' rate beside each, against
 * their rate alone. Targets (DESIGN.md): its p99 beside them at most 1.1 times its p99 alone,
 * theirs at least 0.8 times alone.
 *
 * shares: the same round trips beside one client that keeps every SM busy with a
 * compute-bound kernel, without and with a compute share of half the SMs on that client's
 * queue (and then the round trips at the highest priority too), with that client's rate.
 */

#define BUSY_ONE_WINDOW 512u
#define BUSY_WINDOW 32u
/* Round trips kept of a phase: more than a phase of seconds makes. */
#define RTT_MAX (1u << 20)
/* Round trips before a phase's, not kept: warm streams, a spinning worker. */
#define RTT_WARM 200u
/* The compute-bound kernel's blocks per SM (256 threads each: 2048, an SM's threads), and
 * how long one such launch takes. */
#define BURN_BLOCKS_PER_SM 8u
#define BURN_NS (2 * NSEC_PER_MSEC)
#define SHARE_PERCENT 50u

struct rtt {
	uint64_t *t;
	unsigned n;
	double p50, p99;
	/* Where the slowest 1% went, on average (µs): in the worker's queue, run by the worker
	 * (launch to the end seen), and the rest (to the worker and back). */
	double slow_queue, slow_run, slow_rest;
	/* Each round trip's queue and run time, as the worker told them. */
	uint64_t *queue, *run;
};

/* The kept round trips' p50 and p99, and the slowest 1%'s average split (r->t stays in the
 * order of r->queue and r->run). 0 or -1. */
static int rtt_stats(struct rtt *r)
{
	uint64_t q = 0, run = 0, rest = 0, cut, *sorted = malloc(r->n * sizeof(*sorted));
	unsigned n = 0;

	if (!sorted)
		return -1;
	memcpy(sorted, r->t, r->n * sizeof(*sorted));
	r->p50 = bench_median(sorted, r->n);
	r->p99 = bench_pct(sorted, r->n, 99);
	free(sorted);
	cut = (uint64_t)r->p99;
	for (unsigned i = 0; i < r->n; i++) {
		if (r->t[i] < cut)
			continue;
		q += r->queue[i];
		run += r->run[i];
		rest += r->t[i] - MIN(r->t[i], r->queue[i] + r->run[i]);
		n++;
	}
	r->slow_queue = (double)q / n / 1e3;
	r->slow_run = (double)run / n / 1e3;
	r->slow_rest = (double)rest / n / 1e3;
	return 0;
}

static bool rtt_new(struct rtt *r)
{
	*r = (struct rtt){
		.t = calloc(RTT_MAX, sizeof(*r->t)),
		.queue = calloc(RTT_MAX, sizeof(*r->queue)),
		.run = calloc(RTT_MAX, sizeof(*r->run)),
	};
	return r->t && r->queue && r->run;
}

static void rtt_free(struct rtt *r)
{
	free(r->t);
	free(r->queue);
	free(r->run);
}

/* Round trips of `empty` on q (NULL: the default queue) from now until `until`, after
 * RTT_WARM not kept: their p50 and p99. 0 or -1. */
static int rtt_until(struct bench *b, gpux_queue *q, uint64_t until, struct rtt *r)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .queue = q };

	r->n = 0;
	for (unsigned i = 0;; i++) {
		uint64_t t0 = tool_now(), t1;
		struct gpux_times tm;
		gpux_req *req;
		gpux_status st = gpux_submit(b->m, "empty", &l, NULL, 0, &req);

		if (st == GPUX_OK) {
			st = gpux_wait(req, -1);
			t1 = tool_now();
			if (st == GPUX_OK)
				st = gpux_req_times(req, &tm);
			gpux_req_free(req);
		}
		if (st != GPUX_OK)
			return -1;
		if (i >= RTT_WARM && r->n < RTT_MAX) {
			r->queue[r->n] = tm.queue_ns;
			r->run[r->n] = tm.run_ns;
			r->t[r->n++] = t1 - t0;
		}
		if (i >= RTT_WARM && tool_now() >= until)
			break;
	}
	return rtt_stats(r);
}

static gpux_queue *prio_queue(struct bench *b)
{
	struct gpux_queue_opts o = {
		.size = sizeof(o),
		.flags = GPUX_QUEUE_PRIORITY,
		.priority = GPUX_PRIORITY_MAX,
	};
	gpux_queue *q;

	return gpux_queue_open_ex(b->ctx, 0, &o, &q) == GPUX_OK ? q : NULL;
}

/* Busy client processes, forked (before any queue of a priority is opened here: a child
 * keeps its parent's queues, and would spin for them). */
struct busy {
	pid_t pids[64];
	unsigned n;
	gpux_buf *counts;
	uint64_t from, until;
};

/* n processes that keep `window` launches in flight each from `from` to `until`. */
static int busy_start(struct bench *b, struct busy *s, unsigned n, unsigned window, double secs)
{
	s->n = 0;
	s->from = tool_now() + (300 + 2 * (uint64_t)n) * NSEC_PER_MSEC;
	s->until = s->from + (uint64_t)(secs * 1e9);
	if (gpux_buf_alloc(b->ctx, 64 * sizeof(uint64_t), &s->counts) != GPUX_OK) {
		s->counts = NULL;
		return -1;
	}
	memset(gpux_buf_data(s->counts), 0, 64 * sizeof(uint64_t));
	for (unsigned i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			uint64_t *c = gpux_buf_data(s->counts);

			c[i] = bench_client_loop(b, "empty", false, window, 0, s->from, s->until);
			_exit(c[i] ? 0 : 1);
		}
		if (pid < 0)
			break;
		s->pids[s->n++] = pid;
	}
	return s->n == n ? 0 : -1;
}

/* Wait for them: their launches per second, or NAN when one failed. */
static double busy_end(struct busy *s)
{
	uint64_t total = 0;
	bool failed = !s->counts;

	for (unsigned i = 0; i < s->n && s->counts; i++) {
		int st;

		if (waitpid(s->pids[i], &st, 0) != s->pids[i] || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0)
			failed = true;
		total += ((uint64_t *)gpux_buf_data(s->counts))[i];
	}
	gpux_buf_free(s->counts);
	return failed ? NAN : (double)total / ((double)(s->until - s->from) / 1e9);
}

static void busy_kill(struct busy *s)
{
	for (unsigned i = 0; i < s->n; i++)
		(void)kill(s->pids[i], SIGKILL);
	(void)busy_end(s);
}

/*
 * The busy processes of s started: the round trips beside them from their start to their end
 * (on the queue of the highest priority with `prio`), and their rate in *ret_rate. On a
 * failure they are killed.
 */
static int beside(struct bench *b, struct busy *s, bool prio, struct rtt *r, double *ret_rate)
{
	gpux_queue *q = NULL;

	if (prio && !(q = prio_queue(b))) {
		busy_kill(s);
		return -1;
	}
	while (tool_now() < s->from)
		(void)usleep(1000);
	if (rtt_until(b, q, s->until, r) < 0) {
		gpux_queue_free(q);
		busy_kill(s);
		return -1;
	}
	gpux_queue_free(q);
	*ret_rate = busy_end(s);
	return isnan(*ret_rate) ? -1 : 0;
}

/*
 * One phase: n busy processes, and the round trips beside them from their start to their
 * end (on the queue of the highest priority with `prio`). Their rate in *ret_rate.
 */
static int phase(struct bench *b, unsigned n, bool prio, double secs, struct rtt *r,
		 double *ret_rate)
{
	struct busy s;

	if (busy_start(b, &s, n, n == 1 ? BUSY_ONE_WINDOW : BUSY_WINDOW, secs) < 0) {
		busy_kill(&s);
		return -1;
	}
	return beside(b, &s, prio, r, ret_rate);
}

/* The busy processes alone: their rate. */
static double busy_alone(struct bench *b, unsigned n, double secs)
{
	struct busy s;

	if (busy_start(b, &s, n, n == 1 ? BUSY_ONE_WINDOW : BUSY_WINDOW, secs) < 0) {
		busy_kill(&s);
		return NAN;
	}
	return busy_end(&s);
}

int bench_prio(struct bench *b)
{
	static const unsigned gpu_counts[] = { 1, 16, 64 }, host_counts[] = { 1, 4 };
	const unsigned *counts = b->cuda ? gpu_counts : host_counts;
	unsigned ncounts = b->cuda ? ARRAY_SIZE(gpu_counts) : ARRAY_SIZE(host_counts);
	double secs = b->quick ? 1.0 : 3.0;
	struct rtt alone, alone_hi, r;
	char name[96];
	gpux_queue *q;
	int rc = -1;
	bool made = rtt_new(&alone);

	/* Each made, whatever the others: rtt_free() takes them all. */
	made = rtt_new(&alone_hi) && made;
	made = rtt_new(&r) && made;
	if (!made)
		goto out;
	if (rtt_until(b, NULL, tool_now() + (uint64_t)(secs * 1e9), &alone) < 0 ||
	    !(q = prio_queue(b)))
		goto out;
	if (rtt_until(b, q, tool_now() + (uint64_t)(secs * 1e9), &alone_hi) < 0) {
		gpux_queue_free(q);
		goto out;
	}
	gpux_queue_free(q);
	bench_add(b, "latency-critical round trip alone, p50", alone.p50 / 1e3, NAN, "us", "", NAN,
		  true);
	bench_add(b, "latency-critical round trip alone, p99", alone.p99 / 1e3, NAN, "us", "", NAN,
		  true);
	bench_add(b, "  the same at priority 2, p50", alone_hi.p50 / 1e3, NAN, "us", "", NAN, true);
	bench_add(b, "  the same at priority 2, p99", alone_hi.p99 / 1e3, NAN, "us", "", NAN, true);
	for (unsigned c = 0; c < ncounts; c++) {
		unsigned n = counts[c];
		double rate_alone = busy_alone(b, n, secs), rate_lo, rate_hi;
		double p50_lo, p99_lo;

		if (isnan(rate_alone) || phase(b, n, false, secs, &r, &rate_lo) < 0)
			goto out;
		p50_lo = r.p50;
		p99_lo = r.p99;
		if (phase(b, n, true, secs, &r, &rate_hi) < 0)
			goto out;
		(void)snprintf(name, sizeof(name),
			       "beside %u busy client%s: round trip p99, priority 2", n,
			       n == 1 ? "" : "s");
		bench_add(b, name, r.p99 / 1e3, alone_hi.p99 / 1e3, "us", "<= 1.1x",
			  r.p99 / alone_hi.p99, r.p99 <= 1.1 * alone_hi.p99);
		(void)snprintf(name, sizeof(name), "  the same, p50");
		bench_add(b, name, r.p50 / 1e3, alone_hi.p50 / 1e3, "us", "", r.p50 / alone_hi.p50,
			  true);
		bench_add(b, "  its slowest 1%: in the worker's queue", r.slow_queue,
			  alone_hi.slow_queue, "us", "", r.slow_queue / alone_hi.slow_queue, true);
		bench_add(b, "  its slowest 1%: run (launch to its end seen)", r.slow_run,
			  alone_hi.slow_run, "us", "", r.slow_run / alone_hi.slow_run, true);
		bench_add(b, "  its slowest 1%: to the worker and back", r.slow_rest,
			  alone_hi.slow_rest, "us", "", r.slow_rest / alone_hi.slow_rest, true);
		(void)snprintf(name, sizeof(name), "  the same at priority 0, p99");
		bench_add(b, name, p99_lo / 1e3, alone.p99 / 1e3, "us", "", p99_lo / alone.p99,
			  true);
		(void)snprintf(name, sizeof(name), "  the same at priority 0, p50");
		bench_add(b, name, p50_lo / 1e3, alone.p50 / 1e3, "us", "", p50_lo / alone.p50,
			  true);
		(void)snprintf(name, sizeof(name), "beside %u busy client%s: their rate vs alone",
			       n, n == 1 ? "" : "s");
		bench_add(b, name, rate_hi / 1e3, rate_alone / 1e3, "k/s", ">= 0.8x",
			  rate_hi / rate_alone, rate_hi >= 0.8 * rate_alone);
		(void)snprintf(name, sizeof(name), "  the same beside priority 0");
		bench_add(b, name, rate_lo / 1e3, rate_alone / 1e3, "k/s", "", rate_lo / rate_alone,
			  true);
	}
	rc = 0;
out:
	rtt_free(&alone);
	rtt_free(&alone_hi);
	rtt_free(&r);
	return rc;
}

/* ---- compute shares ---- */

/* In a child: keep two compute-bound launches of every SM in flight from `from` to `until`,
 * on a queue with a share of SHARE_PERCENT (share) or the default queue: launches ended. */
static uint64_t burn_loop(struct bench *b, bool share, uint64_t iters, uint32_t blocks,
			  uint64_t from, uint64_t until)
{
	struct gpux_queue_opts o = { .size = sizeof(o), .share = SHARE_PERCENT };
	gpux_queue *q = NULL;
	gpux_req *r[2] = { NULL, NULL };
	gpux_buf *out;
	uint64_t done = 0;

	if ((share && gpux_queue_open_ex(b->ctx, 0, &o, &q) != GPUX_OK) ||
	    gpux_buf_alloc(b->ctx, 4, &out) != GPUX_OK)
		return 0;
	for (unsigned k = 0;; k ^= 1) {
		struct gpux_arg args[] = { GPUX_ARG_VALUE(iters), gpux_arg_mapped(out, 0, 4) };
		struct gpux_launch l = { .grid = { blocks }, .block = { 256 }, .queue = q };
		uint64_t now = tool_now();

		if (r[k]) {
			if (gpux_wait(r[k], -1) != GPUX_OK)
				return 0;
			gpux_req_free(r[k]);
			r[k] = NULL;
			done += now >= from;
		}
		if (now >= until)
			break;
		if (gpux_submit(b->m, "burn", &l, args, 2, &r[k]) != GPUX_OK)
			return 0;
	}
	for (unsigned k = 0; k < 2; k++)
		if (r[k]) {
			(void)gpux_wait(r[k], -1);
			gpux_req_free(r[k]);
		}
	return done;
}

/*
 * Round trips beside the compute-bound process (with a share or not), at priority 2 or not:
 * their p50 and p99, and its launches per second.
 */
static int burn_phase(struct bench *b, bool share, bool prio, uint64_t iters, uint32_t blocks,
		      double secs, struct rtt *r, double *ret_rate)
{
	struct busy s = { .n = 0 };
	pid_t pid;

	s.from = tool_now() + 300 * NSEC_PER_MSEC;
	s.until = s.from + (uint64_t)(secs * 1e9);
	if (gpux_buf_alloc(b->ctx, sizeof(uint64_t), &s.counts) != GPUX_OK)
		return -1;
	pid = fork();
	if (pid == 0) {
		uint64_t *c = gpux_buf_data(s.counts);

		*c = burn_loop(b, share, iters, blocks, s.from, s.until);
		_exit(*c ? 0 : 1);
	}
	if (pid > 0)
		s.pids[s.n++] = pid;
	if (pid < 0) {
		busy_kill(&s);
		return -1;
	}
	return beside(b, &s, prio, r, ret_rate);
}

int bench_shares(struct bench *b)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct gpux_device_info info;
	double secs = b->quick ? 1.0 : 3.0, rate[3];
	struct rtt alone, r[3];
	struct ipc_status st;
	uint64_t iters = 100000, t0, ns;
	uint32_t blocks;
	gpux_buf *out;
	int rc = -1;
	bool made;

	if (!b->cuda) {
		(void)fprintf(stderr,
			      "gpux bench: shares: the host back end has no compute shares\n");
		return 0;
	}
	if (gpux_device_info(b->ctx, 0, &info) != GPUX_OK ||
	    tool_status_query(b->sock, &st, devs) < 0 || st.ndevices == 0)
		return -1;
	if (!devs[0].stats.sched.share_sms)
		(void)fprintf(stderr,
			      "gpux bench: shares: none on this device (%s): the rows "
			      "with a share run without\n",
			      devs[0].stats.sched.share_note);
	blocks = info.sm_count * BURN_BLOCKS_PER_SM;
	/* How many iterations make a launch of BURN_NS on the whole device. */
	if (gpux_buf_alloc(b->ctx, 4, &out) != GPUX_OK)
		return -1;
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(iters), gpux_arg_mapped(out, 0, 4) };
		struct gpux_launch l = { .grid = { blocks }, .block = { 256 } };

		(void)gpux_run(b->m, "burn", &l, args, 2);
		t0 = tool_now();
		if (gpux_run(b->m, "burn", &l, args, 2) != GPUX_OK) {
			gpux_buf_free(out);
			return -1;
		}
		ns = tool_now() - t0;
	}
	gpux_buf_free(out);
	iters = MAX(1000u, (uint64_t)((double)iters * (double)BURN_NS / (double)MAX(ns, 1u)));
	made = rtt_new(&alone);
	for (unsigned i = 0; i < 3; i++)
		made = rtt_new(&r[i]) && made;
	if (!made)
		goto out;
	if (rtt_until(b, NULL, tool_now() + (uint64_t)(secs * 1e9), &alone) < 0 ||
	    burn_phase(b, false, false, iters, blocks, secs, &r[0], &rate[0]) < 0 ||
	    burn_phase(b, true, false, iters, blocks, secs, &r[1], &rate[1]) < 0 ||
	    burn_phase(b, true, true, iters, blocks, secs, &r[2], &rate[2]) < 0)
		goto out;
	bench_add(b, "beside a compute-bound client: round trip p99", r[0].p99 / 1e3,
		  alone.p99 / 1e3, "us", "", r[0].p99 / alone.p99, true);
	bench_add(b, "  the same, p50", r[0].p50 / 1e3, alone.p50 / 1e3, "us", "",
		  r[0].p50 / alone.p50, true);
	bench_add(b, "  it with a share of 50%: round trip p99", r[1].p99 / 1e3, alone.p99 / 1e3,
		  "us", "", r[1].p99 / alone.p99, true);
	bench_add(b, "  it with a share of 50%: round trip p50", r[1].p50 / 1e3, alone.p50 / 1e3,
		  "us", "", r[1].p50 / alone.p50, true);
	bench_add(b, "  and priority 2: round trip p99", r[2].p99 / 1e3, alone.p99 / 1e3, "us", "",
		  r[2].p99 / alone.p99, true);
	bench_add(b, "  and priority 2: round trip p50", r[2].p50 / 1e3, alone.p50 / 1e3, "us", "",
		  r[2].p50 / alone.p50, true);
	bench_add(b, "  the compute-bound client's launches, share vs none", rate[1], rate[0], "/s",
		  "", rate[1] / rate[0], true);
	rc = 0;
out:
	rtt_free(&alone);
	for (unsigned i = 0; i < 3; i++)
		rtt_free(&r[i]);
	return rc;
}
