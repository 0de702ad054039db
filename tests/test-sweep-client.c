/* SPDX-License-Identifier: MIT */
/* tests/test-sweep-client.c: every allocation of the client library failed in turn. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"
#include "macro.h"

/*
 * SQLite's out-of-memory test: the Nth allocation fails, for N = 1, 2, ... until a run in
 * which it never comes (the run passed clean). The library (client/ and the ipc/ it uses) is
 * linked into this program, its malloc, calloc, realloc, strdup, strndup, asprintf and free
 * wrapped (-Wl,--wrap) by the functions below, which count, fail the one armed, and keep the
 * pointers handed out. A scenario (connecting, buffers, modules, submitting and waiting,
 * device buffers) runs against a gpuxd on the host back end with allocation N failing; each
 * of its calls must end GPUX_OK or GPUX_E_NOMEM, and every one that says GPUX_OK must have
 * done its work (results checked). Then, the allocations counted again, the same scenario on
 * the same connection must pass whole, and after gpux_disconnect() every pointer the library
 * was handed must have come back and every fd it opened be closed.
 *
 * One thread only: the wrappers' state is not locked (the library has no threads of its own).
 */

#define WAIT_MS 20000
/* Pointers the library holds at once, at most (a scenario's: a few hundred). */
#define LIVE_MAX 65536u

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void __real_free(void *p);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_asprintf(char **ret, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void __wrap_free(void *p);

/* Allocations since arm(), while `counting`; the one that fails (0: none). */
static unsigned long alloc_calls, fail_at;
static bool counting, fail_came;
static void *live[LIVE_MAX];
static unsigned nlive;

static bool alloc_fails(void)
{
	if (!counting || ++alloc_calls != fail_at)
		return false;
	fail_came = true;
	errno = ENOMEM;
	return true;
}

static void live_add(void *p)
{
	if (!p)
		return;
	if (nlive == LIVE_MAX) {
		(void)fprintf(stderr, "test-sweep-client: more than %u allocations live\n",
			      LIVE_MAX);
		abort();
	}
	live[nlive++] = p;
}

/* Whether p was handed out by a wrapper (and so comes back now). */
static void live_remove(void *p)
{
	for (unsigned i = nlive; i-- > 0;)
		if (live[i] == p) {
			live[i] = live[--nlive];
			return;
		}
}

void *__wrap_malloc(size_t n)
{
	void *p = alloc_fails() ? NULL : __real_malloc(n);

	live_add(p);
	return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
	void *p = alloc_fails() ? NULL : __real_calloc(n, size);

	live_add(p);
	return p;
}

void *__wrap_realloc(void *p, size_t n)
{
	void *q;

	if (alloc_fails())
		return NULL;
	q = __real_realloc(p, n);
	if (q) {
		live_remove(p);
		live_add(q);
	}
	return q;
}

char *__wrap_strdup(const char *s)
{
	char *p = alloc_fails() ? NULL : __real_strdup(s);

	live_add(p);
	return p;
}

char *__wrap_strndup(const char *s, size_t n)
{
	char *p = alloc_fails() ? NULL : __real_strndup(s, n);

	live_add(p);
	return p;
}

int __wrap_asprintf(char **ret, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (alloc_fails())
		return -1;
	va_start(ap, fmt);
	n = vasprintf(ret, fmt, ap);
	va_end(ap);
	if (n >= 0)
		live_add(*ret);
	return n;
}

void __wrap_free(void *p)
{
	if (p)
		live_remove(p);
	__real_free(p);
}

static void arm(unsigned long n)
{
	alloc_calls = 0;
	fail_came = false;
	fail_at = n;
	counting = true;
}

/* Whether the armed allocation failed; disarmed. */
static bool disarm(void)
{
	counting = false;
	return fail_came;
}

/* ---- scenarios ---- */

static struct test_daemon daemon_;
static char run_what[128];

struct run {
	gpux_ctx *ctx;
	gpux_module *m;
	bool armed;      /* a failure may come: GPUX_E_NOMEM is allowed */
	unsigned errors; /* calls that said GPUX_E_NOMEM */
};

/* A call's status: true for GPUX_OK, false for GPUX_E_NOMEM while armed; else the test fails. */
static bool step(struct run *r, const char *call, gpux_status st)
{
	if (st == GPUX_OK)
		return true;
	if (r->armed && st == GPUX_E_NOMEM) {
		r->errors++;
		return false;
	}
	fail_msg("%s: %s: %s", run_what, call, gpux_strerror(st));
	return false;
}

static bool finish(struct run *r, const char *call, gpux_req *req)
{
	gpux_status st = gpux_wait(req, WAIT_MS);
	bool ok;

	if (st == GPUX_E_AGAIN)
		fail_msg("%s: %s: no end within %d ms", run_what, call, WAIT_MS);
	ok = step(r, call, st);
	gpux_req_free(req);
	return ok;
}

static void check_add1(const float *in, const float *out, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (out[i] != in[i] + 1)
			fail_msg("%s: element %llu is %g, not %g", run_what, (unsigned long long)i,
				 (double)out[i], (double)(in[i] + 1));
}

/* Connect, look at the devices, disconnect. */
static void body_connect(struct run *r)
{
	struct gpux_device_info info;
	gpux_ctx *ctx = NULL;

	if (!step(r, "gpux_connect", gpux_connect(daemon_.sock, &ctx)))
		return;
	if (gpux_device_count(ctx) != 1)
		fail_msg("%s: %u devices", run_what, gpux_device_count(ctx));
	if (step(r, "gpux_device_info", gpux_device_info(ctx, 0, &info)) &&
	    info.backend != GPUX_BACKEND_HOST)
		fail_msg("%s: device 0's back end is %u", run_what, info.backend);
	gpux_disconnect(ctx);
}

/* Buffers from an arena and of their own, frozen, handed over by fd and imported, freed. */
static void body_buffers(struct run *r)
{
	gpux_buf *small = NULL, *big = NULL, *imported = NULL;
	uint64_t off;
	int fd;

	if (!step(r, "gpux_buf_alloc", gpux_buf_alloc(r->ctx, 4096, &small)) ||
	    !step(r, "gpux_buf_alloc", gpux_buf_alloc(r->ctx, 1 << 20, &big)))
		goto out;
	memset(gpux_buf_data(small), 7, 4096);
	memset(gpux_buf_data(big), 9, 1 << 20);
	if (!step(r, "gpux_buf_freeze", gpux_buf_freeze(big)))
		goto out;
	if (((uint8_t *)gpux_buf_data(big))[12345] != 9)
		fail_msg("%s: a frozen buffer lost its bytes", run_what);
	assert_int_equal(gpux_buf_fd(small, &fd, &off), GPUX_OK);
	if (!step(r, "gpux_buf_import", gpux_buf_import(r->ctx, fd, &imported)))
		goto out;
	if (((uint8_t *)gpux_buf_data(imported))[off + 100] != 7)
		fail_msg("%s: an imported buffer does not show its bytes", run_what);
out:
	gpux_buf_free(imported);
	gpux_buf_free(big);
	gpux_buf_free(small);
}

/* A module loaded (the worker has it already after the first run), asked about, freed. */
static void body_module(struct run *r)
{
	struct gpux_module_info info;
	gpux_module *m = NULL;
	char *log = NULL;

	if (step(r, "gpux_module_load",
		 gpux_module_load(r->ctx, GPUX_LANG_HOST, test_host_kernels, test_host_kernels_len,
				  NULL, &m, &log)) &&
	    step(r, "gpux_module_info", gpux_module_info(m, &info)) && info.device != 0)
		fail_msg("%s: the module was loaded on device %u", run_what, info.device);
	free(log);
	gpux_module_free(m);
}

/* Launches with copies, on the default queue and a queue of its own, waited for in turn, by
 * gpux_test() and through gpux_fd() and gpux_process(); then many in flight at once (the
 * library's tables grow). */
static void body_submit(struct run *r)
{
	enum { BURST = 40 };
	const uint64_t n = 1000;
	gpux_buf *in = NULL, *out = NULL;
	gpux_queue *q = NULL;
	gpux_req *req = NULL, *burst[BURST] = { NULL };
	struct gpux_times t;
	bool ok = true;
	int fd;

	if (!step(r, "gpux_buf_alloc", gpux_buf_alloc(r->ctx, n * 4, &in)) ||
	    !step(r, "gpux_buf_alloc", gpux_buf_alloc(r->ctx, n * 4, &out)) ||
	    !step(r, "gpux_queue_open", gpux_queue_open(r->ctx, 0, &q)))
		goto out;
	for (uint64_t i = 0; i < n; i++)
		((float *)gpux_buf_data(in))[i] = (float)i;
	for (int k = 0; k < 3; k++) {
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n),
			gpux_arg_in(in, 0, n * 4),
			gpux_arg_out(out, 0, n * 4),
		};
		struct gpux_launch l = test_launch_1d(n, 0, k == 1 ? q : NULL);
		gpux_status st;

		memset(gpux_buf_data(out), 0, n * 4);
		if (!step(r, "gpux_submit", gpux_submit(r->m, "add1", &l, args, 3, &req)))
			goto out;
		if (k == 2) {
			/* As an event loop: the fd, gpux_process(), then a look. */
			if (!step(r, "gpux_fd", gpux_fd(r->ctx, &fd))) {
				(void)finish(r, "add1", req);
				goto out;
			}
			for (uint64_t until = mono_ns() + WAIT_MS * NSEC_PER_MSEC;
			     !gpux_req_done(req) && mono_ns() < until;)
				if (!step(r, "gpux_process", gpux_process(r->ctx)))
					break;
		}
		while ((st = gpux_test(req)) == GPUX_E_AGAIN && k == 0)
			(void)usleep(100);
		if (!finish(r, "add1", req))
			goto out;
		check_add1(gpux_buf_data(in), gpux_buf_data(out), n);
	}
	{
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n),
			gpux_arg_in(in, 0, n * 4),
			gpux_arg_out(out, 0, n * 4),
		};
		struct gpux_launch l = test_launch_1d(n, 0, q);

		if (!step(r, "gpux_submit", gpux_submit(r->m, "add1", &l, args, 3, &req)))
			goto out;
		if (gpux_wait(req, WAIT_MS) == GPUX_OK &&
		    step(r, "gpux_req_times", gpux_req_times(req, &t)) &&
		    gpux_req_message(req) == NULL)
			fail_msg("%s: a request's message is NULL", run_what);
		gpux_req_free(req);
	}
	for (unsigned i = 0; i < BURST && ok; i++) {
		struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .queue = q };

		ok = step(r, "gpux_submit", gpux_submit(r->m, "empty", &l, NULL, 0, &burst[i]));
	}
	for (unsigned i = 0; i < BURST && burst[i]; i++)
		(void)finish(r, "empty", burst[i]);
out:
	gpux_queue_free(q);
	gpux_buf_free(out);
	gpux_buf_free(in);
}

/* Device buffers: made, written, a kernel between them, read back, freed. */
static void body_dbuf(struct run *r)
{
	const uint64_t n = 1000, bytes = n * 4;
	gpux_buf *host = NULL;
	gpux_dbuf *a = NULL, *b = NULL;
	gpux_req *req = NULL;

	if (!step(r, "gpux_buf_alloc", gpux_buf_alloc(r->ctx, 2 * bytes, &host)) ||
	    !step(r, "gpux_dbuf_alloc", gpux_dbuf_alloc(r->ctx, 0, bytes, &a)) ||
	    !step(r, "gpux_dbuf_alloc", gpux_dbuf_alloc(r->ctx, 0, bytes, &b)))
		goto out;
	for (uint64_t i = 0; i < n; i++)
		((float *)gpux_buf_data(host))[i] = (float)i * 3;
	if (!step(r, "gpux_dbuf_write", gpux_dbuf_write(a, 0, host, 0, bytes, NULL, &req)) ||
	    !finish(r, "gpux_dbuf_write", req))
		goto out;
	{
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n),
			gpux_arg_dbuf(a, 0, bytes),
			gpux_arg_dbuf(b, 0, bytes),
		};
		struct gpux_launch l = test_launch_1d(n, 0, NULL);

		if (!step(r, "gpux_submit", gpux_submit(r->m, "add1", &l, args, 3, &req)) ||
		    !finish(r, "add1", req))
			goto out;
	}
	if (!step(r, "gpux_dbuf_read", gpux_dbuf_read(host, bytes, b, 0, bytes, NULL, &req)) ||
	    !finish(r, "gpux_dbuf_read", req))
		goto out;
	check_add1(gpux_buf_data(host), (const float *)gpux_buf_data(host) + n, n);
out:
	gpux_dbuf_free(b);
	gpux_dbuf_free(a);
	gpux_buf_free(host);
}

/* What a module holds: a kernel's attributes, a variable written and read back. */
static void body_symbols(struct run *r)
{
	static const char src[] = "GPUX_HOST_GLOBAL int v[4] = { 1, 2, 3, 4 };\n"
				  "GPUX_HOST_PARAMS(k, 4);\n"
				  "GPUX_HOST_KERNEL(k) { }\n";
	struct gpux_kernel_attrs a;
	gpux_module *m = NULL;
	gpux_dbuf *d = NULL;
	gpux_buf *host = NULL;
	gpux_req *req = NULL;

	if (!step(r, "gpux_module_load",
		  gpux_module_load(r->ctx, GPUX_LANG_HOST, src, sizeof(src) - 1, NULL, &m, NULL)) ||
	    !step(r, "gpux_kernel_attrs", gpux_kernel_attrs(m, "k", GPUX_ANY, &a)) ||
	    !step(r, "gpux_module_global", gpux_module_global(m, "v", 0, &d)) ||
	    !step(r, "gpux_buf_alloc", gpux_buf_alloc(r->ctx, 16, &host)))
		goto out;
	if (a.nparams != 1 || gpux_dbuf_size(d) != 16)
		fail_msg("%s: %d parameters, a variable of %zu bytes", run_what, a.nparams,
			 gpux_dbuf_size(d));
	((int *)gpux_buf_data(host))[3] = 40;
	if (!step(r, "gpux_dbuf_write", gpux_dbuf_write(d, 12, host, 12, 4, NULL, &req)) ||
	    !finish(r, "gpux_dbuf_write", req) ||
	    !step(r, "gpux_dbuf_read", gpux_dbuf_read(host, 0, d, 0, 16, NULL, &req)) ||
	    !finish(r, "gpux_dbuf_read", req))
		goto out;
	if (((int *)gpux_buf_data(host))[0] != 1 || ((int *)gpux_buf_data(host))[3] != 40)
		fail_msg("%s: the variable reads %d ... %d", run_what,
			 ((int *)gpux_buf_data(host))[0], ((int *)gpux_buf_data(host))[3]);
out:
	gpux_buf_free(host);
	gpux_dbuf_free(d);
	gpux_module_free(m);
}

struct scenario {
	const char *name;
	bool own_ctx; /* the scenario connects itself */
	void (*body)(struct run *r);
};

static const struct scenario scenarios[] = {
	{ "connect", true, body_connect }, { "buffers", false, body_buffers },
	{ "module", false, body_module },  { "submit", false, body_submit },
	{ "dbuf", false, body_dbuf },      { "symbols", false, body_symbols },
};

/* ---- the sweep ---- */

/* Scenario sc with allocation n failing (0: none); whether it came. */
static bool run_one(const struct scenario *sc, unsigned long n)
{
	struct run r = { 0 };
	int fds = test_fd_count();
	unsigned held = nlive;
	bool came;

	(void)snprintf(run_what, sizeof(run_what), "scenario %s, allocation %lu failing", sc->name,
		       n);
	if (!sc->own_ctx) {
		r.ctx = test_connect(&daemon_);
		r.m = test_load_host_kernels(r.ctx);
	}
	r.armed = n > 0;
	arm(n);
	sc->body(&r);
	came = disarm();
	if (n && !came && r.errors)
		fail_msg("%s: calls said GPUX_E_NOMEM, but no allocation failed", run_what);
	/* Then with nothing failing: the same connection serves on. */
	r.armed = false;
	sc->body(&r);
	gpux_module_free(r.m);
	gpux_disconnect(r.ctx);
	if (nlive != held)
		fail_msg("%s: %u allocations of the library not freed", run_what, nlive - held);
	assert_no_fd_leak(fds);
	return came;
}

static void sweep_scenario(const struct scenario *sc)
{
	uint64_t t0 = mono_ns();
	unsigned long n, clean;

	(void)run_one(sc, 0);
	clean = alloc_calls;
	/* None seen: the library is not the one linked here, its allocations not wrapped. */
	assert_true(clean > 0);
	for (n = 1; run_one(sc, n); n++)
		;
	print_message("scenario %s: %lu allocations in a clean run, each failed in turn, %.1f s\n",
		      sc->name, clean, (double)(mono_ns() - t0) / 1e9);
}

#define SCENARIO(s)                                                                                \
	static void test_sweep_client_##s(void **state)                                            \
	{                                                                                          \
		for (unsigned i = 0; i < ARRAY_SIZE(scenarios); i++)                               \
			if (strcmp(scenarios[i].name, #s) == 0)                                    \
				sweep_scenario(&scenarios[i]);                                     \
	}

SCENARIO(connect)
SCENARIO(buffers)
SCENARIO(module)
SCENARIO(submit)
SCENARIO(dbuf)
SCENARIO(symbols)

static int setup(void **state)
{
	test_daemon_start(&daemon_, NULL);
	return 0;
}

static int teardown(void **state)
{
	test_daemon_stop(&daemon_);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sweep_client_connect),
		cmocka_unit_test(test_sweep_client_buffers),
		cmocka_unit_test(test_sweep_client_module),
		cmocka_unit_test(test_sweep_client_submit),
		cmocka_unit_test(test_sweep_client_dbuf),
		cmocka_unit_test(test_sweep_client_symbols),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
