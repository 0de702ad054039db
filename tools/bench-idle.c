/* SPDX-License-Identifier: MIT */
/* tools/bench-idle.c: gpux bench's idle clients: a round trip beside thousands that wait. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "macro.h"
#include "options.h"

/* Idle client processes beside which the round trip must stay within 1.1 times alone; then
 * as many as make gpuxd's default number of clients with the bench's own. */
#define IDLE_FEW 2000u
#define IDLE_ALL (IPC_OPT_MAX_CLIENTS - 1u)
/* Processes started at once, each then waited for: gpuxd gives a connection that has not
 * said hello 250 ms when it is nearly full. */
#define IDLE_WAVE 128u
/* How long one idle process may take to connect and run its launch. */
#define IDLE_START_MS 30000

struct idle {
	pid_t *pids;
	unsigned n, failed;
	int hold[2];  /* the idle wait for its end to close */
	int ready[2]; /* each writes a byte once it ran its launch: '1', or '0' when it failed */
};

/* In a child: connect (the fork's first call does), run one launch, say so, wait. */
static _Noreturn void idle_child(struct bench *b, struct idle *s)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = 0 };
	char c = gpux_run(b->m, "empty", &l, NULL, 0) == GPUX_OK ? '1' : '0';

	(void)close(s->hold[1]);
	(void)close(s->ready[0]);
	if (write(s->ready[1], &c, 1) != 1)
		_exit(1);
	/* Until the bench closes its end: the connection stays open, unused. */
	while (read(s->hold[0], &c, 1) < 0 && errno == EINTR)
		;
	_exit(0);
}

/* Start idle processes until there are `until`, a wave at a time. 0, or -1 when one could
 * not be started or did not run its launch. */
static int idle_grow(struct bench *b, struct idle *s, unsigned until)
{
	while (s->n < until) {
		unsigned wave = MIN(IDLE_WAVE, until - s->n), started = 0;

		for (unsigned i = 0; i < wave; i++) {
			pid_t pid = fork();

			if (pid == 0)
				idle_child(b, s);
			if (pid < 0)
				return -1;
			s->pids[s->n++] = pid;
			started++;
		}
		while (started > 0) {
			struct pollfd p = { .fd = s->ready[0], .events = POLLIN };
			char buf[IDLE_WAVE];
			ssize_t got;

			if (poll(&p, 1, IDLE_START_MS) != 1)
				return -1;
			got = read(s->ready[0], buf, MIN(sizeof(buf), started));
			if (got <= 0)
				return -1;
			for (ssize_t i = 0; i < got; i++)
				s->failed += buf[i] != '1';
			started -= (unsigned)got;
		}
		if (s->failed)
			return -1;
	}
	return 0;
}

/* End the idle processes: they see their pipe close and exit. */
static void idle_end(struct idle *s)
{
	s->hold[1] = safe_close(s->hold[1]);
	for (unsigned i = 0; i < s->n; i++)
		(void)waitpid(s->pids[i], NULL, 0);
	s->n = 0;
	s->hold[0] = safe_close(s->hold[0]);
	s->ready[0] = safe_close(s->ready[0]);
	s->ready[1] = safe_close(s->ready[1]);
	free(s->pids);
	s->pids = NULL;
}

/* Round trips now, after the idle ones had time to leave the worker's active clients: their
 * p50 and p99 (ns), and the hand-off rows named `what` when asked. */
static int rtt_now(struct bench *b, unsigned n, const char *what, double *ret_p50, double *ret_p99)
{
	uint64_t *t = calloc(n, sizeof(*t));
	struct ipc_stats s0, s1;
	bool counted;

	if (!t)
		return -1;
	(void)usleep(300 * 1000);
	counted = what && bench_handoffs(b, &s0);
	if (bench_rtt_times(b, n, t, NULL) < 0) {
		free(t);
		return -1;
	}
	if (counted && bench_handoffs(b, &s1))
		bench_add_handoffs(b, what, &s0, &s1);
	*ret_p50 = bench_median(t, n);
	*ret_p99 = bench_pct(t, n, 99);
	free(t);
	return 0;
}

static void add_rows(struct bench *b, double f50, double f99, double m50, double m99, double a50,
		     double a99)
{
	char name[64];

	(void)snprintf(name, sizeof(name), "round trip beside %u idle clients, p50", IDLE_FEW);
	bench_add(b, name, f50 / 1e3, a50 / 1e3, "us", "<= 1.1x", f50 / a50, f50 <= 1.1 * a50);
	(void)snprintf(name, sizeof(name), "round trip beside %u idle clients, p99", IDLE_FEW);
	bench_add(b, name, f99 / 1e3, a99 / 1e3, "us", "", f99 / a99, true);
	(void)snprintf(name, sizeof(name), "round trip beside %u idle (%u connected), p50",
		       IDLE_ALL, IDLE_ALL + 1);
	bench_add(b, name, m50 / 1e3, a50 / 1e3, "us", "<= 1.1x", m50 / a50, m50 <= 1.1 * a50);
	(void)snprintf(name, sizeof(name), "round trip beside %u idle, p99", IDLE_ALL);
	bench_add(b, name, m99 / 1e3, a99 / 1e3, "us", "", m99 / a99, true);
}

/*
 * The round trip of one client alone, then beside IDLE_FEW idle client processes (each has
 * connected, loaded the kernels and run one launch, and waits), then beside IDLE_ALL (gpuxd's
 * default number of clients with this one), and alone again, against the in-process launch
 * and sync. Alone is the mean of before and after: a device's round trip drifts by a tenth
 * within a minute. Target: beside the idle ones at most 1.1 times alone.
 */
int bench_idle(struct bench *b)
{
	const unsigned n = b->quick ? 1000 : 5000;
	struct idle s = { .hold = { -1, -1 }, .ready = { -1, -1 } };
	double a50, a99, z50 = NAN, z99 = NAN, f50 = NAN, f99 = NAN, m50 = NAN, m99 = NAN;
	double base = NAN;
	char name[64];
	struct kv kv;
	int rc = -1;

	if (bench_base_run(b, &kv, (const char *const[]){ "rtt", b->cubin, "1000", NULL }) == 0)
		base = bench_kv_get(&kv, "rtt_p50_ns");
	if (rtt_now(b, n, NULL, &a50, &a99) < 0)
		return -1;
	s.pids = calloc(IDLE_ALL, sizeof(*s.pids));
	if (!s.pids || pipe2(s.hold, O_CLOEXEC) < 0 || pipe2(s.ready, O_CLOEXEC) < 0)
		goto out;
	if (idle_grow(b, &s, IDLE_FEW) < 0) {
		(void)fprintf(stderr,
			      "gpux: bench: idle: %u of %u idle clients started, %u failed\n", s.n,
			      IDLE_FEW, s.failed);
		goto out;
	}
	(void)snprintf(name, sizeof(name), "beside %u idle", IDLE_FEW);
	if (rtt_now(b, n, name, &f50, &f99) < 0)
		goto out;
	/* As many as gpuxd takes by default: that they connect at all is half the point. */
	if (idle_grow(b, &s, IDLE_ALL) < 0)
		(void)fprintf(stderr,
			      "gpux: bench: idle: %u of %u idle clients started, %u failed\n", s.n,
			      IDLE_ALL, s.failed);
	else
		(void)rtt_now(b, n, NULL, &m50, &m99);
	idle_end(&s);
	if (rtt_now(b, n, NULL, &z50, &z99) < 0)
		return -1;
	rc = isnan(m50) ? -1 : 0;
	add_rows(b, f50, f99, m50, m99, (a50 + z50) / 2, (a99 + z99) / 2);
	bench_add(b, "  alone, p50: before, after", a50 / 1e3, z50 / 1e3, "us", "", a50 / z50,
		  true);
	bench_add(b, "  alone, p50 (vs in-process launch and sync)", (a50 + z50) / 2e3, base / 1e3,
		  "us", "", (a50 + z50) / 2 / base, true);
	return rc;
out:
	idle_end(&s);
	return rc;
}
