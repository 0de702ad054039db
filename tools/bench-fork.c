/* SPDX-License-Identifier: MIT */
/* tools/bench-fork.c: gpux bench's fork scenario: a forked child's first result, and where its time goes. */
#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "macro.h"

/* Children forked at once in the burst rows, and how many bursts. */
#define BURST 8u

/*
 * What a child writes into the parent's shared buffer: the times (from just before its fork)
 * at which it first ran, had its connection (gpux_device_count(), only when `stages`), and
 * had its first result.
 */
struct stamps {
	uint64_t ran, connected, result;
};

/*
 * A child: its first gpux call is the launch (or, with `stages`, gpux_device_count() first,
 * which connects it), as a program that forks would make them. `inout`: with a 4 KiB INOUT
 * buffer of the parent's. Exits 0 when the launch succeeded.
 */
static void child(struct bench *b, uint64_t t0, struct stamps *s, gpux_buf *inout, bool stages)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	struct gpux_arg a = gpux_arg_inout(inout, 0, 4096);
	gpux_status st;

	s->ran = tool_now() - t0;
	if (stages && gpux_device_count(b->ctx) == 0)
		_exit(1);
	s->connected = tool_now() - t0;
	st = inout ? gpux_run(b->m, "touch", &l, &a, 1) : gpux_run(b->m, "empty", &l, NULL, 0);
	s->result = tool_now() - t0;
	_exit(st == GPUX_OK ? 0 : 1);
}

static bool reaped_ok(pid_t pid)
{
	int st;

	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* n children one at a time into s[0..n): -1 when one failed. */
static int one_at_a_time(struct bench *b, struct stamps *s, unsigned n, gpux_buf *inout,
			 bool stages)
{
	for (unsigned i = 0; i < n; i++) {
		uint64_t t0 = tool_now();
		pid_t pid = fork();

		if (pid == 0)
			child(b, t0, &s[i], inout, stages);
		if (!reaped_ok(pid))
			return -1;
	}
	return 0;
}

/* rounds bursts of BURST children forked at once into s[0..rounds * BURST). */
static int bursts(struct bench *b, struct stamps *s, unsigned rounds)
{
	for (unsigned r = 0; r < rounds; r++) {
		pid_t pids[BURST];
		int failed = 0;

		for (unsigned i = 0; i < BURST; i++) {
			uint64_t t0 = tool_now();

			pids[i] = fork();
			if (pids[i] == 0)
				child(b, t0, &s[r * BURST + i], NULL, false);
		}
		for (unsigned i = 0; i < BURST; i++)
			failed += !reaped_ok(pids[i]);
		if (failed)
			return -1;
	}
	return 0;
}

/* The median (or percentile p) of one field over n stamps, in ms. */
static double stat_ms(const struct stamps *s, unsigned n, size_t field, unsigned p)
{
	uint64_t *v = calloc(n, sizeof(*v));
	double x;

	if (!v)
		return NAN;
	for (unsigned i = 0; i < n; i++)
		v[i] = *(const uint64_t *)((const uint8_t *)&s[i] + field);
	x = p == 50 ? bench_median(v, n) : bench_pct(v, n, p);
	free(v);
	return x / 1e6;
}

#define RESULT offsetof(struct stamps, result)

/*
 * A forked child's first result (the module already in the worker, the parent connected),
 * one at a time and BURST at once, against CUDA start-up in a process; then where a child's
 * time goes: until it runs, its connection (gpuxd's hello and channels, or a connection made
 * ahead), its first launch (the module, segments and queue sent on the new channel).
 */
int bench_fork(struct bench *b)
{
	const unsigned n = b->quick ? 20 : 200, rounds = b->quick ? 3 : 10;
	const char *args[] = { "startup", b->cubin, NULL };
	uint64_t bt[5];
	unsigned nb = 0;
	double base = NAN, p50, p99, burst;
	struct stamps *s;
	gpux_buf *stamps, *io;
	struct gpux_arg a;
	int r = -1;

	if (gpux_buf_alloc(b->ctx, sizeof(*s) * MAX(n, rounds * BURST), &stamps) != GPUX_OK)
		return -1;
	if (gpux_buf_alloc(b->ctx, 4096, &io) != GPUX_OK) {
		gpux_buf_free(stamps);
		return -1;
	}
	s = gpux_buf_data(stamps);
	/* The parent has used the buffer: the worker has its segment, as a parent's would. */
	a = gpux_arg_inout(io, 0, 4096);
	if (gpux_run(b->m, "touch", &(struct gpux_launch){ .grid = { 1 }, .block = { 1 } }, &a,
		     1) != GPUX_OK)
		goto out;
	for (unsigned i = 0; i < 5 && b->base; i++) {
		struct kv kv;

		if (bench_base_run(b, &kv, args) == 0)
			bt[nb++] = (uint64_t)bench_kv_get(&kv, "startup_ns");
	}
	if (nb)
		base = bench_median(bt, nb) / 1e6;

	if (one_at_a_time(b, s, n, NULL, false) < 0)
		goto out;
	p50 = stat_ms(s, n, RESULT, 50);
	p99 = stat_ms(s, n, RESULT, 99);
	bench_add(b, "forked child's first result", p50, base, "ms", "<= 0.2 ms",
		  isnan(base) ? p50 : p50 / base, p50 <= 0.2);
	bench_add(b, "  p99", p99, NAN, "ms", "<= 0.5 ms", p99, p99 <= 0.5);
	if (bursts(b, s, rounds) < 0)
		goto out;
	burst = stat_ms(s, rounds * BURST, RESULT, 50);
	bench_add(b, "  8 children forked at once", burst, NAN, "ms", "<= 0.5 ms", burst,
		  burst <= 0.5);
	if (one_at_a_time(b, s, n, io, false) < 0)
		goto out;
	bench_add(b, "  with a 4 KiB INOUT buffer", stat_ms(s, n, RESULT, 50), NAN, "ms", "", NAN,
		  true);
	/* Where the time goes: the same child, its connection first. */
	if (one_at_a_time(b, s, n, NULL, true) < 0)
		goto out;
	bench_add(b, "  of it: fork, until the child runs",
		  stat_ms(s, n, offsetof(struct stamps, ran), 50), NAN, "ms", "", NAN, true);
	for (unsigned i = 0; i < n; i++) {
		s[i].result -= s[i].connected;
		s[i].connected -= s[i].ran;
	}
	bench_add(b, "  of it: connecting (gpuxd, channels)",
		  stat_ms(s, n, offsetof(struct stamps, connected), 50), NAN, "ms", "", NAN, true);
	bench_add(b, "  of it: first launch (module, queue)", stat_ms(s, n, RESULT, 50), NAN, "ms",
		  "", NAN, true);
	r = 0;
out:
	gpux_buf_free(io);
	gpux_buf_free(stamps);
	return r;
}
