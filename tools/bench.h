/* SPDX-License-Identifier: MIT */
/* tools/bench.h: what gpux bench's scenarios share. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "json.h"
#include "proto.h"
#include "tools.h"

#define MAX_RESULTS 384
#define BASE_OUT_MAX 4096

/*
 * The benchmarking process never initialises CUDA: the baseline is gpux-bench-base, exec'd
 * (beside this program, or $GPUX_BENCH_BASE), which prints "key value" lines; so is the CuPy
 * peer (gpux-bench-cupy, or $GPUX_BENCH_CUPY), when CuPy is there.
 */

struct result {
	char name[64];
	double gpux;
	double base; /* NAN: no baseline */
	const char *unit;
	const char *target; /* "" when the scenario has none */
	double ratio;       /* gpux / base (or as the target reads) */
	bool met;           /* meaningless when the target needs a baseline that is missing */
};

struct bench {
	gpux_ctx *ctx;
	gpux_module *m;
	bool cuda; /* the device runs CUDA */
	bool base; /* and the in-process baseline runs beside it */
	bool quick;
	char dir[PATH_MAX];        /* where gpux is (and gpux-bench-base, in a build tree) */
	char gpuxd[PATH_MAX + 16]; /* the private daemons' program (tool_daemon_path()) */
	char tmp[PATH_MAX];        /* scratch: the baseline's cubin, private daemons */
	char cubin[PATH_MAX + 16];
	char sock[PATH_MAX]; /* the daemon's, for its counters */
	struct result res[MAX_RESULTS];
	unsigned nres;
};

struct kv {
	char out[BASE_OUT_MAX];
};

/* Add a row: gpux's value, the baseline's (NAN: none), the target and whether it was met. */
void bench_add(struct bench *b, const char *name, double gpux, double base, const char *unit,
	       const char *target, double ratio, bool met);

/* Run gpux-bench-base with args; its output in kv. 0 or -errno. */
int bench_base_run(struct bench *b, struct kv *kv, const char *const *args);
/* Run the CuPy peer with args; its output in kv. 0 or -errno (no Python, no CuPy, no GPU). */
int bench_cupy_run(struct bench *b, struct kv *kv, const char *const *args);
/* A value of kv, or NAN. */
double bench_kv_get(const struct kv *kv, const char *key);

double bench_median(uint64_t *v, unsigned n);
double bench_pct(uint64_t *v, unsigned n, unsigned p);

/* gpux_run() of kernel k of the bench kernels, timed. */
gpux_status bench_run1(struct bench *b, const char *k, const struct gpux_launch *l,
		       const struct gpux_arg *args, uint32_t nargs, uint64_t *ret_ns);

/* tools/bench-fork.c */
int bench_fork(struct bench *b);

/* tools/bench-fresh.c */
int bench_fresh(struct bench *b);

/* tools/bench-host.c: CUDA C++ on the host back end against plain C loops. */
int bench_host(struct bench *b);

/* A private gpuxd on sock with its module cache in `cache` and one more option `opt` (or
 * NULL) (tools/bench.c), stopped. */
pid_t bench_daemon_start(struct bench *b, const char *sock, const char *cache, const char *opt);
void bench_daemon_stop(pid_t pid);

/* tools/bench-fault.c */
int bench_fault(struct bench *b);

/* tools/bench-launch.c */
/* n round trips of an empty kernel after n / 10 unmeasured: their times in t, and the
 * worker's part of each (queue and run) in `in` unless NULL. 0 or -1. */
int bench_rtt_times(struct bench *b, unsigned n, uint64_t *t, uint64_t *in);
/* Device 0's hand-off counters (worker/core/wrk.h), or false when gpuxd does not say. */
bool bench_handoffs(struct bench *b, struct ipc_stats *ret);
/*
 * What the round trips cost in hand-offs, per request: a loop or a waiter that slept, a
 * client that had to be woken, a message that missed the ring. Near 0 when everything spins;
 * near 1 is the slow mode of docs/PERFORMANCE.md, whatever the machine's speed. Then how many
 * requests a graph held. Rows named after `what`.
 */
void bench_add_handoffs(struct bench *b, const char *what, const struct ipc_stats *s0,
			const struct ipc_stats *s1);
/*
 * In a child: keep `window` launches of `kernel` in flight until `until`; count what finished
 * after `from` (0: one failed). With `scalar`, every launch passes a new value (a graph node
 * must be set).
 */
uint64_t bench_client_loop(struct bench *b, const char *kernel, bool scalar, unsigned window,
			   uint32_t device, uint64_t from, uint64_t until);
int bench_rtt(struct bench *b);
int bench_clients(struct bench *b);
int bench_fair(struct bench *b);

/* tools/bench-plot.c */
/*
 * Read a run that gpux bench --json saved into b's rows (and whether it ran on CUDA); the
 * device's name in *ret_device. The rows borrow strings of *ret_keep: json_decref() it after.
 * 0, or -1 with a line on stderr.
 */
int bench_load(struct bench *b, const char *path, const char **ret_device, json_t **ret_keep);
/* An SVG chart of b's launch rates against clients and round trips' percentiles, into path.
 * 0, or -1 with a line on stderr. */
int bench_plot(const struct bench *b, const char *device, const char *path);
/* tools/bench-idle.c */
int bench_idle(struct bench *b);
/* tools/bench-prio.c: a latency-critical client beside busy ones, with and without priority;
 * beside a compute-bound one, with and without a compute share. */
int bench_prio(struct bench *b);
int bench_shares(struct bench *b);
