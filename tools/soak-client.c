/* SPDX-License-Identifier: MIT */
/* tools/soak-client.c: gpux soak's client processes: random operations, every result checked. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"
#include "proc.h"
#include "soak.h"
#include "tools.h"

#define THREADS 256u
#define QUEUE_DEPTH 8u
#define PIPELINE_MAX 4u
#define MODULE_VARIANTS 16u
#define FROZEN_PATTERNS 8u
#define FORK_DEPTH 2u

static const char kernels[] =
	"GPUX_HOST_PARAMS(axpb, 8, 4, 4, sizeof(uint32_t *), sizeof(uint32_t *));\n"
	"GPUX_HOST_KERNEL(axpb)\n"
	"{\n"
	"	uint64_t n = GPUX_ARG(uint64_t, 0);\n"
	"	uint32_t a = GPUX_ARG(uint32_t, 1), b = GPUX_ARG(uint32_t, 2);\n"
	"	const uint32_t *x = GPUX_ARG(const uint32_t *, 3);\n"
	"	uint32_t *y = GPUX_ARG(uint32_t *, 4);\n"
	"	GPUX_FOR_EACH_THREAD(t) {\n"
	"		uint64_t i = GPUX_GLOBAL_X(t);\n"
	"		if (i < n) y[i] = a * x[i] + b;\n"
	"	}\n"
	"}\n"
	"GPUX_HOST_PARAMS(inc, 8, sizeof(uint32_t *));\n"
	"GPUX_HOST_KERNEL(inc)\n"
	"{\n"
	"	uint64_t n = GPUX_ARG(uint64_t, 0);\n"
	"	uint32_t *x = GPUX_ARG(uint32_t *, 1);\n"
	"	GPUX_FOR_EACH_THREAD(t) { uint64_t i = GPUX_GLOBAL_X(t); if (i < n) x[i] += 1; }\n"
	"}\n"
	"GPUX_HOST_PARAMS(sum, 8, sizeof(uint32_t *), sizeof(uint64_t *));\n"
	"GPUX_HOST_KERNEL(sum)\n"
	"{\n"
	"	uint64_t n = GPUX_ARG(uint64_t, 0), s = 0;\n"
	"	const uint32_t *x = GPUX_ARG(const uint32_t *, 1);\n"
	"	for (uint64_t i = 0; i < n; i++) s += x[i];\n"
	"	*GPUX_ARG(uint64_t *, 2) = s;\n"
	"}\n"
	/* A kernel that faults as its first argument says (enum soak_fault), before it writes 1
	 * into its second; one that spins for 30 s. */
	"#include <stdlib.h>\n"
	"#include <sys/syscall.h>\n"
	"#include <time.h>\n"
	"#include <unistd.h>\n"
	"GPUX_HOST_PARAMS(fault, 4, sizeof(uint32_t *));\n"
	"GPUX_HOST_KERNEL(fault)\n"
	"{\n"
	"	volatile uint32_t *p = GPUX_ARG(uint32_t *, 1);\n"
	"	switch (GPUX_ARG(uint32_t, 0)) {\n"
	"	case 0: p[-(1L << 40)] = 1; break;\n"
	"	case 1: p[1L << 60] = 1; break;\n"
	"	case 2: ((struct gpux_host_launch *)gpux)->grid_dim.x = 0xffffffffu; break;\n"
	"	case 3: if (fork() == 0) _exit(0); break;\n"
	"	case 4: syscall(SYS_exit, 0); break;\n"
	"	case 5: syscall(SYS_exit_group, 0); break;\n"
	"	default: abort();\n"
	"	}\n"
	"	*p = 1;\n"
	"}\n"
	"GPUX_HOST_KERNEL(hang)\n"
	"{\n"
	"	struct timespec a, b;\n"
	"	clock_gettime(CLOCK_MONOTONIC, &a);\n"
	"	do clock_gettime(CLOCK_MONOTONIC, &b);\n"
	"	while (b.tv_sec - a.tv_sec < 30);\n"
	"}\n";

/* What a kernel's fault must say, by enum soak_fault. */
static const char *const fault_says[SOAK_FAULT_N] = {
	"Segmentation fault at address 0x",
	"Segmentation fault at address 0x",
	"launch description",
	"fork()",
	"(exit)",
	"(exit_group)",
	"Aborted",
};

/* A module of its own: which one is in its answer. */
static const char stamp[] = "GPUX_HOST_PARAMS(stamp, sizeof(uint32_t *));\n"
			    "GPUX_HOST_KERNEL(stamp) { *GPUX_ARG(uint32_t *, 0) = K * 7u + 3u; }\n";

struct client {
	struct soak_board *b;
	gpux_ctx *ctx;
	gpux_module *m;
	uint64_t rng;
	unsigned depth;  /* of forks */
	enum soak_op op; /* the operation running, for the count of wrong results */
	unsigned target; /* the device whose death a fault or a hang took (soak_death_take()) */
};

static uint64_t next(struct client *c)
{
	uint64_t z = (c->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t below(struct client *c, uint32_t n)
{
	return (uint32_t)(next(c) % n);
}

/* A device at random, or GPUX_E_CONNECT when gpuxd cannot be reached (no devices then). */
static int pick_device(struct client *c)
{
	uint32_t n = gpux_device_count(c->ctx);

	return n ? (int)below(c, n) : GPUX_E_CONNECT;
}

/* Elements of a buffer: mostly small, some of 256 KiB, a few of 4 MiB. */
static uint64_t pick_n(struct client *c)
{
	uint32_t r = below(c, 100);

	return 1 + below(c, r < 70 ? 4096 : r < 95 ? 65536 : 1u << 20);
}

static uint32_t pattern(uint64_t seed, uint64_t i)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;

	return (uint32_t)((z ^ (z >> 29)) * 0x94d049bb133111ebull >> 32);
}

static struct gpux_launch launch_1d(uint64_t n, uint32_t device, gpux_queue *q)
{
	struct gpux_launch l = { .grid = { (uint32_t)((n + THREADS - 1) / THREADS), 1, 1 },
				 .block = { THREADS, 1, 1 },
				 .device = device,
				 .queue = q };
	return l;
}

/* The first wrong result or unexpected status is described once, for the summary. */
static void tell(struct soak_board *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tell(struct soak_board *b, const char *fmt, ...)
{
	va_list ap;

	if (atomic_exchange(&b->told, true))
		return;
	va_start(ap, fmt);
	(void)vsnprintf(b->first_problem, sizeof(b->first_problem), fmt, ap);
	va_end(ap);
}

/*
 * Count a failed call or request. A worker or gpuxd killed under it explains WORKER_LOST,
 * NODEV and CONNECT (and the QUOTA of a connection made while a dead one's slot is held);
 * anything else is a finding.
 */
static int failed(struct client *c, const char *what, gpux_status st, const char *msg)
{
	c->b->status[MIN((unsigned)-st, SOAK_STATUS_N - 1)]++;
	if (st != GPUX_E_WORKER_LOST && st != GPUX_E_NODEV && st != GPUX_E_CONNECT) {
		c->b->unexpected++;
		tell(c->b, "%s: %s (%s)", what, gpux_strerror(st), msg ? msg : "");
	}
	return st;
}

static int wrong(struct client *c, const char *what, uint64_t i, uint64_t got, uint64_t want)
{
	c->b->wrong[c->op]++;
	tell(c->b, "%s: element %llu is %llu, not %llu", what, (unsigned long long)i,
	     (unsigned long long)got, (unsigned long long)want);
	return SOAK_WRONG;
}

/* Wait for a request: its status, counted. */
static int finish(struct client *c, const char *what, gpux_req *r)
{
	gpux_status st = gpux_wait(r, -1);
	int rc = st == GPUX_OK ? 0 : failed(c, what, st, gpux_req_message(r));

	if (st == GPUX_OK)
		c->b->requests_ok++;
	gpux_req_free(r);
	return rc;
}

static int op_run(struct client *c)
{
	uint64_t n = pick_n(c), seed = next(c);
	uint32_t a = (uint32_t)next(c), k = 1 + below(c, PIPELINE_MAX);
	bool inout = below(c, 2);
	/* Requests of one device's default queue run in order; GPUX_ANY ones have none. */
	int dev = k == 1 ? 0 : pick_device(c);
	gpux_buf *x = NULL, *y = NULL;
	gpux_req *r[PIPELINE_MAX];
	uint32_t *px, *py;
	unsigned sent = 0;
	int rc;

	if (dev < 0)
		return failed(c, "gpux_device_count", dev, NULL);
	rc = gpux_buf_alloc(c->ctx, n * 4, &x);
	if (rc == 0 && !inout)
		rc = gpux_buf_alloc(c->ctx, n * 4, &y);
	if (rc < 0) {
		rc = failed(c, "gpux_buf_alloc", rc, NULL);
		goto out;
	}
	px = gpux_buf_data(x);
	py = inout ? px : gpux_buf_data(y);
	for (uint64_t i = 0; i < n; i++)
		px[i] = pattern(seed, i);
	/* Several requests on the default queue at once: y = a*x + j, the last one stays. */
	for (uint32_t j = 0; j < (inout ? 1 : k); j++) {
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n),
			GPUX_ARG_VALUE(a),
			GPUX_ARG_VALUE(j),
			inout ? gpux_arg_inout(x, 0, n * 4) : gpux_arg_in(x, 0, n * 4),
			inout ? gpux_arg_inout(x, 0, n * 4) : gpux_arg_out(y, 0, n * 4),
		};
		struct gpux_launch l = launch_1d(n, k == 1 ? GPUX_ANY : (uint32_t)dev, NULL);

		rc = gpux_submit(c->m, "axpb", &l, args, 5, &r[sent]);
		if (rc < 0) {
			(void)failed(c, "gpux_submit", rc, NULL);
			break;
		}
		sent++;
	}
	for (unsigned j = 0; j < sent; j++) {
		int st = finish(c, "axpb", r[j]);
		rc = rc < 0 ? rc : st;
	}
	if (rc < 0 || sent == 0)
		goto out;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t want = a * pattern(seed, i) + (inout ? 0 : sent - 1);
		if (py[i] != want) {
			rc = wrong(c, "axpb", i, py[i], want);
			break;
		}
	}
out:
	gpux_buf_free(x);
	gpux_buf_free(y);
	return rc;
}

static int op_queue(struct client *c)
{
	uint64_t n = pick_n(c), seed = next(c);
	uint32_t k = 1 + below(c, QUEUE_DEPTH);
	int dev = pick_device(c);
	gpux_queue *q = NULL;
	gpux_req *r[QUEUE_DEPTH];
	gpux_buf *x = NULL;
	uint32_t *px;
	unsigned sent = 0;
	int rc;

	rc = dev < 0 ? dev : gpux_queue_open(c->ctx, (uint32_t)dev, &q);
	if (rc == 0)
		rc = gpux_buf_alloc(c->ctx, n * 4, &x);
	if (rc < 0) {
		rc = failed(c, "opening a queue", rc, NULL);
		goto out;
	}
	px = gpux_buf_data(x);
	for (uint64_t i = 0; i < n; i++)
		px[i] = pattern(seed, i);
	for (uint32_t j = 0; j < k; j++) {
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_inout(x, 0, n * 4) };
		struct gpux_launch l = launch_1d(n, (uint32_t)dev, q);

		rc = gpux_submit(c->m, "inc", &l, args, 2, &r[sent]);
		if (rc < 0) {
			(void)failed(c, "gpux_submit", rc, NULL);
			break;
		}
		sent++;
	}
	for (unsigned j = 0; j < sent; j++) {
		int st = finish(c, "inc", r[j]);
		rc = rc < 0 ? rc : st;
	}
	/* A request lost with its worker may or may not have run: only a whole run is known. */
	for (uint64_t i = 0; rc == 0 && i < n; i++)
		if (px[i] != pattern(seed, i) + k)
			rc = wrong(c, "inc", i, px[i], pattern(seed, i) + k);
out:
	gpux_buf_free(x);
	gpux_queue_free(q);
	return rc;
}

static int op_frozen(struct client *c)
{
	/* A few contents only, so that the device cache hits across requests and processes. */
	uint64_t id = below(c, FROZEN_PATTERNS), n = 1000 + id * 4096, want = 0, *got;
	gpux_buf *x = NULL, *out = NULL;
	gpux_req *r;
	uint32_t *px;
	int rc;

	rc = gpux_buf_alloc(c->ctx, n * 4, &x);
	if (rc == 0)
		rc = gpux_buf_alloc(c->ctx, 8, &out);
	if (rc < 0) {
		rc = failed(c, "gpux_buf_alloc", rc, NULL);
		goto out;
	}
	px = gpux_buf_data(x);
	for (uint64_t i = 0; i < n; i++) {
		px[i] = pattern(id, i);
		want += px[i];
	}
	rc = gpux_buf_freeze(x);
	if (rc < 0) {
		rc = failed(c, "gpux_buf_freeze", rc, NULL);
		goto out;
	}
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_cached(x, 0, n * 4),
					   gpux_arg_out(out, 0, 8) };
		struct gpux_launch l = { .grid = { 1, 1, 1 },
					 .block = { 1, 1, 1 },
					 .device = GPUX_ANY };

		rc = gpux_submit(c->m, "sum", &l, args, 3, &r);
	}
	rc = rc < 0 ? failed(c, "gpux_submit", rc, NULL) : finish(c, "sum", r);
	got = gpux_buf_data(out);
	if (rc == 0 && *got != want)
		rc = wrong(c, "sum of a cached input", 0, *got, want);
out:
	gpux_buf_free(x);
	gpux_buf_free(out);
	return rc;
}

static int op_dbuf(struct client *c)
{
	uint64_t n = pick_n(c), seed = next(c);
	int dev = pick_device(c);
	gpux_buf *x = NULL, *y = NULL;
	gpux_dbuf *d = NULL;
	gpux_req *r;
	uint32_t *px, *py;
	int rc;

	rc = dev < 0 ? dev : gpux_buf_alloc(c->ctx, n * 4, &x);
	if (rc == 0)
		rc = gpux_buf_alloc(c->ctx, n * 4, &y);
	if (rc == 0)
		rc = gpux_dbuf_alloc(c->ctx, (uint32_t)dev, n * 4, &d);
	if (rc < 0) {
		rc = failed(c, "allocating a dbuf", rc, NULL);
		goto out;
	}
	px = gpux_buf_data(x);
	py = gpux_buf_data(y);
	for (uint64_t i = 0; i < n; i++)
		px[i] = pattern(seed, i);
	rc = gpux_dbuf_write(d, 0, x, 0, n * 4, NULL, &r);
	rc = rc < 0 ? failed(c, "gpux_dbuf_write", rc, NULL) : finish(c, "dbuf write", r);
	if (rc == 0) {
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_dbuf(d, 0, n * 4) };
		struct gpux_launch l = launch_1d(n, (uint32_t)dev, NULL);

		rc = gpux_submit(c->m, "inc", &l, args, 2, &r);
		rc = rc < 0 ? failed(c, "gpux_submit", rc, NULL) : finish(c, "inc on a dbuf", r);
	}
	if (rc == 0) {
		rc = gpux_dbuf_read(y, 0, d, 0, n * 4, NULL, &r);
		rc = rc < 0 ? failed(c, "gpux_dbuf_read", rc, NULL) : finish(c, "dbuf read", r);
	}
	for (uint64_t i = 0; rc == 0 && i < n; i++)
		if (py[i] != pattern(seed, i) + 1)
			rc = wrong(c, "dbuf", i, py[i], pattern(seed, i) + 1);
out:
	gpux_dbuf_free(d);
	gpux_buf_free(x);
	gpux_buf_free(y);
	return rc;
}

static int op_module(struct client *c)
{
	uint32_t k = below(c, MODULE_VARIANTS);
	char opt[32], *log = NULL;
	gpux_module *m = NULL;
	gpux_buf *out = NULL;
	gpux_req *r;
	int rc;

	(void)snprintf(opt, sizeof(opt), "-DK=%u", k);
	rc = gpux_module_load(c->ctx, GPUX_LANG_HOST, stamp, sizeof(stamp) - 1, opt, &m, &log);
	if (rc < 0) {
		rc = failed(c, "gpux_module_load", rc, log);
		goto out;
	}
	rc = gpux_buf_alloc(c->ctx, 4, &out);
	if (rc < 0) {
		rc = failed(c, "gpux_buf_alloc", rc, NULL);
		goto out;
	}
	{
		struct gpux_arg a = gpux_arg_out(out, 0, 4);
		struct gpux_launch l = { .grid = { 1, 1, 1 },
					 .block = { 1, 1, 1 },
					 .device = GPUX_ANY };

		rc = gpux_submit(m, "stamp", &l, &a, 1, &r);
	}
	rc = rc < 0 ? failed(c, "gpux_submit", rc, NULL) : finish(c, "stamp", r);
	if (rc == 0 && *(uint32_t *)gpux_buf_data(out) != k * 7 + 3)
		rc = wrong(c, "stamp", 0, *(uint32_t *)gpux_buf_data(out), k * 7 + 3);
out:
	free(log);
	gpux_buf_free(out);
	gpux_module_free(m);
	return rc;
}

/*
 * A kernel that faults, on the device whose death this client took: its request must end
 * with GPUX_E_KERNEL_FAULT saying how, at once (the watchdog is on it), and the worker comes
 * back; other clients' requests on it end GPUX_E_WORKER_LOST, as after a kill.
 */
static int op_fault(struct client *c)
{
#if defined(__x86_64__)
	uint32_t how = below(c, SOAK_FAULT_N);
#else
	uint32_t how = SOAK_FAULT_LAUNCH + below(c, SOAK_FAULT_N - SOAK_FAULT_LAUNCH);
#endif
	struct gpux_launch l = { .grid = { 2, 1, 1 }, .block = { 1, 1, 1 }, .device = c->target };
	gpux_buf *x = NULL;
	gpux_req *r;
	gpux_status st;
	int rc;

	rc = gpux_buf_alloc(c->ctx, 64, &x);
	if (rc < 0)
		return failed(c, "gpux_buf_alloc", rc, NULL);
	*(uint32_t *)gpux_buf_data(x) = 0;
	c->b->faults[how]++;
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(how), gpux_arg_inout(x, 0, 64) };

		rc = gpux_submit(c->m, "fault", &l, args, 2, &r);
	}
	if (rc < 0) {
		rc = failed(c, "gpux_submit", rc, NULL);
		goto out;
	}
	st = gpux_wait(r, -1);
	if (st == GPUX_E_KERNEL_FAULT && strstr(gpux_req_message(r), fault_says[how]) &&
	    *(uint32_t *)gpux_buf_data(x) == 0) {
		c->b->faults_as_expected[how]++;
		rc = 0;
	} else if (st == GPUX_E_KERNEL_FAULT || st == GPUX_OK) {
		c->b->wrong[c->op]++;
		tell(c->b, "a kernel's %s ended %s: \"%s\"", soak_fault_names[how],
		     gpux_strerror(st), gpux_req_message(r));
		rc = SOAK_WRONG;
	} else {
		rc = failed(c, soak_fault_names[how], st, gpux_req_message(r));
	}
	gpux_req_free(r);
out:
	gpux_buf_free(x);
	return rc;
}

/* A kernel past its deadline (300 ms of 30 s): GPUX_E_TIMEOUT, its worker killed. */
static int op_hang(struct client *c)
{
	struct gpux_launch l = {
		.grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .device = c->target, .timeout_ms = 300
	};
	gpux_req *r;
	gpux_status st;
	int rc;

	c->b->hangs++;
	rc = gpux_submit(c->m, "hang", &l, NULL, 0, &r);
	if (rc < 0)
		return failed(c, "gpux_submit", rc, NULL);
	st = gpux_wait(r, -1);
	if (st == GPUX_E_TIMEOUT) {
		c->b->hangs_as_expected++;
		rc = 0;
	} else if (st == GPUX_OK || st == GPUX_E_KERNEL_FAULT) {
		c->b->wrong[c->op]++;
		tell(c->b, "a hanging kernel ended %s: \"%s\"", gpux_strerror(st),
		     gpux_req_message(r));
		rc = SOAK_WRONG;
	} else {
		rc = failed(c, "hang", st, gpux_req_message(r));
	}
	gpux_req_free(r);
	return rc;
}

static int op_any(struct client *c, enum soak_op op);

/* A child on the objects it inherited, which may fork once more; what it finds is counted. */
static int op_fork(struct client *c)
{
	pid_t pid;
	int st;

	c->b->forks++;
	pid = fork();
	if (pid < 0)
		return 0;
	if (pid == 0) {
		c->depth++;
		c->rng ^= (uint64_t)getpid() << 32;
		(void)op_any(c, c->depth < FORK_DEPTH && below(c, 2) ? SOAK_FORK : SOAK_RUN);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) {
		c->b->crashes++;
		tell(c->b, "a forked child of depth %u ended with %#x", c->depth + 1, st);
	}
	return 0;
}

static int op_any(struct client *c, enum soak_op op)
{
	c->op = op;
	switch (op) {
	case SOAK_RUN:
		return op_run(c);
	case SOAK_QUEUE:
		return op_queue(c);
	case SOAK_FROZEN:
		return op_frozen(c);
	case SOAK_DBUF:
		return op_dbuf(c);
	case SOAK_MODULE:
		return op_module(c);
	case SOAK_FAULT:
		return op_fault(c);
	case SOAK_HANG:
		return op_hang(c);
	default:
		return op_fork(c);
	}
}

/*
 * Operations by weight: mostly launches. A fault or a hang only on a device whose next death
 * it takes (at most one every SOAK_CLIENT_DEATH_GAP_NS), else something else; not in a fork.
 */
static enum soak_op pick_op(struct client *c)
{
	static const enum soak_op weights[] = { SOAK_RUN,   SOAK_RUN,    SOAK_RUN,    SOAK_RUN,
						SOAK_QUEUE, SOAK_QUEUE,  SOAK_FROZEN, SOAK_DBUF,
						SOAK_DBUF,  SOAK_MODULE, SOAK_FORK,   SOAK_FAULT,
						SOAK_HANG };
	enum soak_op op;

	for (;;) {
		op = weights[below(c, ARRAY_SIZE(weights))];
		if (!(c->b->ops_mask & (1u << op)))
			continue;
		if (op != SOAK_FAULT && op != SOAK_HANG)
			return op;
		c->target = below(c, SOAK_DEVICES);
		if (soak_death_take(c->b, c->target, SOAK_CLIENT_DEATH_GAP_NS))
			return op;
		/* Only faults and hangs asked for, none allowed now: a launch, counted so. */
		if (!(c->b->ops_mask & ~((1u << SOAK_FAULT) | (1u << SOAK_HANG))))
			return SOAK_RUN;
	}
}

int soak_count_memfds(pid_t pid, const char *except)
{
	char path[64], line[512];
	FILE *f;
	int n = 0;

	(void)snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		const char *m = strstr(line, "/memfd:");
		n += m && !(except && strstr(m, except));
	}
	(void)fclose(f);
	return n;
}

uint64_t soak_rss_kib(pid_t pid)
{
	char path[64], line[256];
	unsigned long long kib = 0;
	FILE *f;

	(void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %llu kB", &kib) == 1)
			break;
	(void)fclose(f);
	return kib;
}

/* Connected, with the kernels loaded: 0, or why not (counted). */
static int ready(struct client *c)
{
	char *log = NULL;
	int rc;

	if (!c->ctx) {
		rc = gpux_connect(c->b->sock, &c->ctx);
		if (rc < 0)
			return failed(c, "gpux_connect", rc, NULL);
	}
	if (!c->m) {
		rc = gpux_module_load(c->ctx, GPUX_LANG_HOST, kernels, sizeof(kernels) - 1, NULL,
				      &c->m, &log);
		if (rc < 0)
			rc = failed(c, "gpux_module_load", rc, log);
		free(log);
		return rc;
	}
	return 0;
}

int soak_client(struct soak_board *b, unsigned slot, uint64_t seed, unsigned budget,
		bool long_lived)
{
	struct soak_slot *s = &b->slots[slot];
	struct client c = { .b = b, .rng = seed };
	int fds = proc_fd_count(getpid()), memfds = soak_count_memfds(getpid(), NULL);

	for (unsigned done = 0; !atomic_load(&b->stop) && (budget == 0 || done < budget); done++) {
		enum soak_op op = pick_op(&c);
		uint64_t t0 = soak_now(), dt, max;
		int rc;

		atomic_store(&s->op, (int)op);
		atomic_store(&s->op_start, t0);
		rc = ready(&c);
		if (rc == 0)
			rc = op_any(&c, op);
		dt = soak_now() - t0;
		atomic_store(&s->op_start, 0);
		b->ops[op]++;
		max = atomic_load(&b->max_ns[op]);
		while (dt > max && !atomic_compare_exchange_weak(&b->max_ns[op], &max, dt))
			;
		/* gpuxd or a worker is down: give it a moment. */
		if (rc < 0 && rc != SOAK_WRONG)
			(void)usleep(20000 + below(&c, 100000));
	}
	gpux_module_free(c.m);
	gpux_disconnect(c.ctx);
	if (long_lived) {
		atomic_store(&b->client_fd_leak, proc_fd_count(getpid()) - fds);
		atomic_store(&b->client_memfd_leak, soak_count_memfds(getpid(), NULL) - memfds);
		atomic_store(&b->client_checked, true);
	}
	return 0;
}
