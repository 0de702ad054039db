/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-cuda-register.c: a buffer is registered as it is made, on every device, once; launches wait for it; freed memory is kept for the next. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/*
 * On the fake driver (tests/fake-cuda), which logs each cuMemHostRegister to
 * $GPUX_FAKE_CUDA_LOG ("register PID BYTES") and each copy that touches pages still being
 * registered ("copy-while-registering PID BYTES"), and takes GPUX_FAKE_CUDA_REGISTER_MS for
 * each registration.
 */

static const char ptx[] =
	".version 8.0\n.target sm_90\n.address_size 64\n"
	".visible .entry add1(.param .u64 add1_param_0, .param .u64 add1_param_1,\n"
	"\t.param .u64 add1_param_2)\n{\n\tret;\n}\n";

/* Sizes no other segment has (arenas are 4 MiB): their registrations are told apart. */
#define X_BYTES (6u << 20)
#define Y_BYTES ((6u << 20) + 4096u)

struct env {
	struct test_daemon d;
	char log[300];
};

static int setup(void **state)
{
	static const char *const args[] = { "--backend", "cuda", NULL };
	struct env *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	(void)snprintf(e->log, sizeof(e->log), "/tmp/gpux-test-register-%d.log", (int)getpid());
	(void)unlink(e->log);
	assert_int_equal(setenv("GPUX_FAKE_CUDA_LOG", e->log, 1), 0);
	assert_int_equal(setenv("GPUX_FAKE_CUDA_DEVICES", "2", 1), 0);
	test_daemon_start(&e->d, args);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;

	test_daemon_stop(&e->d);
	(void)unlink(e->log);
	(void)unsetenv("GPUX_FAKE_CUDA_LOG");
	(void)unsetenv("GPUX_FAKE_CUDA_DEVICES");
	(void)unsetenv("GPUX_FAKE_CUDA_REGISTER_MS");
	free(e);
	return 0;
}

/* Registrations of `bytes` in the log: how many, and by how many workers (pids). */
static unsigned registered(const struct env *e, size_t bytes, unsigned *ret_pids)
{
	char what[64];
	int pids[16], pid;
	unsigned n = 0, npids = 0;
	size_t len;
	FILE *f = fopen(e->log, "re");

	if (f) {
		while (fscanf(f, "%63s %d %zu", what, &pid, &len) == 3) {
			bool seen = false;

			if (strcmp(what, "register") != 0 || len != bytes)
				continue;
			n++;
			for (unsigned i = 0; i < npids; i++)
				seen |= pids[i] == pid;
			if (!seen && npids < 16)
				pids[npids++] = pid;
		}
		(void)fclose(f);
	}
	*ret_pids = npids;
	return n;
}

static bool log_has(const struct env *e, const char *word)
{
	char line[256];
	bool found = false;
	FILE *f = fopen(e->log, "re");

	while (f && fgets(line, sizeof(line), f))
		found |= strncmp(line, word, strlen(word)) == 0;
	if (f)
		(void)fclose(f);
	return found;
}

static gpux_module *load(gpux_ctx *ctx)
{
	gpux_module *m = NULL;

	assert_int_equal(gpux_module_load(ctx, GPUX_LANG_PTX, ptx, sizeof(ptx), NULL, &m, NULL),
			 GPUX_OK);
	return m;
}

/* y = x + 1 on a device, checked. */
static gpux_status add1(gpux_module *m, uint32_t dev, gpux_buf *x, gpux_buf *y)
{
	uint64_t n = X_BYTES / 4;
	struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 0, X_BYTES),
				   gpux_arg_out(y, 0, X_BYTES) };
	struct gpux_launch l = test_launch_1d(n, dev, NULL);
	gpux_status st = gpux_run(m, "add1", &l, args, 3);
	const float *px = gpux_buf_data(x), *py = gpux_buf_data(y);

	for (uint64_t i = 0; st == GPUX_OK && i < n; i += 4099)
		if (py[i] != px[i] + 1)
			return GPUX_E_INVAL;
	return st;
}

/*
 * A buffer is registered by every worker as it is made, before any launch uses it, and once:
 * launches on both devices, and a forked child's (a new connection of another process, the
 * same file), register nothing more.
 */
static void test_register_when_made_once_per_device(void **state)
{
	struct env *e = *state;
	gpux_ctx *ctx = test_connect(&e->d);
	gpux_module *m = load(ctx);
	uint64_t seed = 3;
	unsigned pids = 0;
	gpux_buf *x, *y;
	pid_t pid;

	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, Y_BYTES, &y), GPUX_OK);
	for (int i = 0;
	     i < 1000 && (registered(e, X_BYTES, &pids) < 2 || registered(e, Y_BYTES, &pids) < 2);
	     i++)
		(void)usleep(10000);
	assert_int_equal(registered(e, X_BYTES, &pids), 2);
	assert_int_equal(pids, 2);
	assert_int_equal(registered(e, Y_BYTES, &pids), 2);
	assert_int_equal(pids, 2);

	test_fill_random(gpux_buf_data(x), X_BYTES / 4, &seed);
	for (int k = 0; k < 3; k++)
		for (uint32_t dev = 0; dev < 2; dev++)
			assert_int_equal(add1(m, dev, x, y), GPUX_OK);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(add1(m, 1, x, y) == GPUX_OK && add1(m, 0, x, y) == GPUX_OK ? 0 : 1);
	assert_child_ok(pid);
	assert_int_equal(registered(e, X_BYTES, &pids), 2);
	assert_int_equal(registered(e, Y_BYTES, &pids), 2);
	gpux_buf_free(y);
	gpux_buf_free(x);
	gpux_module_free(m);
	gpux_disconnect(ctx);
}

/* A launch that comes while its buffers are still being registered waits for them: no copy
 * touches their pages before, and the results are right. */
static void test_register_launch_waits(void **state)
{
	struct env *e = *state;
	gpux_ctx *ctx;
	gpux_module *m;
	uint64_t seed = 5;
	gpux_buf *x, *y;
	unsigned pids;

	test_daemon_stop(&e->d);
	assert_int_equal(setenv("GPUX_FAKE_CUDA_REGISTER_MS", "300", 1), 0);
	test_daemon_start(&e->d, (const char *const[]){ "--backend", "cuda", NULL });
	ctx = test_connect(&e->d);
	m = load(ctx);
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, Y_BYTES, &y), GPUX_OK);
	test_fill_random(gpux_buf_data(x), X_BYTES / 4, &seed);
	assert_int_equal(add1(m, 0, x, y), GPUX_OK);
	assert_int_equal(add1(m, 1, x, y), GPUX_OK);
	assert_int_equal(registered(e, X_BYTES, &pids), 2);
	assert_false(log_has(e, "copy-while-registering"));
	gpux_buf_free(y);
	gpux_buf_free(x);
	gpux_module_free(m);
	gpux_disconnect(ctx);
}

/*
 * A registration that fails fails the requests that waited for it, with why; the worker and
 * other buffers go on, and the buffer is not refused for good: the next request that uses it
 * registers it again. (The device address is asked for 400 ms into the registration, after
 * the request came: it waits, then fails.)
 */
static void test_register_failure_fails_its_requests(void **state)
{
	struct env *e = *state;
	gpux_ctx *ctx;
	gpux_module *m;
	gpux_buf *x, *y, *x2, *y2;
	uint64_t seed = 7;
	unsigned pids;
	gpux_req *r;

	test_daemon_stop(&e->d);
	/* The worker's own page of end words is its first registration, its page of marks the
	 * second: x's is the third. */
	assert_int_equal(setenv("GPUX_FAKE_CUDA_FAIL", "cuMemHostGetDevicePointer:3:2", 1), 0);
	assert_int_equal(setenv("GPUX_FAKE_CUDA_REGISTER_MS", "400", 1), 0);
	assert_int_equal(setenv("GPUX_FAKE_CUDA_DEVICES", "1", 1), 0);
	test_daemon_start(&e->d, (const char *const[]){ "--backend", "cuda", NULL });
	assert_int_equal(unsetenv("GPUX_FAKE_CUDA_FAIL"), 0);
	ctx = test_connect(&e->d);
	m = load(ctx);
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, Y_BYTES, &y), GPUX_OK);
	test_fill_random(gpux_buf_data(x), X_BYTES / 4, &seed);
	{
		uint64_t n = 16;
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(x, 0, 64),
					   gpux_arg_out(y, 0, 64) };
		struct gpux_launch l = test_launch_1d(n, 0, NULL);

		assert_int_equal(gpux_submit(m, "add1", &l, args, 3, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, -1), GPUX_E_NOMEM);
		assert_non_null(strstr(gpux_req_message(r), "argument 1"));
		gpux_req_free(r);
	}
	/* The same buffer again: registered anew, then used. */
	assert_int_equal(registered(e, X_BYTES, &pids), 1);
	assert_int_equal(add1(m, 0, x, y), GPUX_OK);
	assert_int_equal(registered(e, X_BYTES, &pids), 2);
	/* Buffers made after it are registered and used as usual. */
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x2), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, Y_BYTES, &y2), GPUX_OK);
	assert_int_equal(add1(m, 0, x2, y2), GPUX_OK);
	gpux_buf_free(y2);
	gpux_buf_free(x2);
	gpux_buf_free(y);
	gpux_buf_free(x);
	gpux_module_free(m);
	gpux_disconnect(ctx);
}

/*
 * A buffer freed while it is being registered counts no more against its user's quota: the
 * next one, which would not fit beside it (nor in its memory, kept for a next buffer: the
 * library lets that go first), is not refused for its memory.
 */
static void test_register_freed_while_registering(void **state)
{
	static const char *const args[] = { "--backend", "cuda", "--quota-shared-user", "10485760",
					    NULL };
	struct env *e = *state;
	struct gpux_launch l = test_launch_1d(1, 0, NULL);
	uint64_t n = 1;
	struct gpux_arg a[3];
	gpux_ctx *ctx;
	gpux_module *m;
	gpux_buf *x;
	float *p;

	test_daemon_stop(&e->d);
	assert_int_equal(setenv("GPUX_FAKE_CUDA_REGISTER_MS", "400", 1), 0);
	assert_int_equal(setenv("GPUX_FAKE_CUDA_DEVICES", "1", 1), 0);
	test_daemon_start(&e->d, args);
	ctx = test_connect(&e->d);
	m = load(ctx);
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x), GPUX_OK);
	gpux_buf_free(x);
	assert_int_equal(gpux_buf_alloc(ctx, Y_BYTES, &x), GPUX_OK);
	p = gpux_buf_data(x);
	p[0] = 41.0f;
	a[0] = GPUX_ARG_VALUE(n);
	a[1] = gpux_arg_in(x, 0, 4);
	a[2] = gpux_arg_out(x, 4, 4);
	assert_int_equal(gpux_run(m, "add1", &l, a, 3), GPUX_OK);
	assert_true(p[1] == 42.0f);
	gpux_buf_free(x);
	gpux_module_free(m);
	gpux_disconnect(ctx);
}

/*
 * A device buffer kept in host memory is a range of a fresh segment, so it comes while that
 * segment is still being registered: it is made at once, and the copies that use it wait for
 * the registration, then find the bytes written.
 */
static void test_register_host_dbuf_waits(void **state)
{
	struct env *e = *state;
	gpux_ctx *ctx;
	gpux_buf *pat, *back;
	gpux_dbuf *kept;
	gpux_req *r;
	unsigned pids;

	test_daemon_stop(&e->d);
	assert_int_equal(setenv("GPUX_FAKE_CUDA_REGISTER_MS", "300", 1), 0);
	assert_int_equal(setenv("GPUX_FAKE_CUDA_DEVICES", "1", 1), 0);
	test_daemon_start(&e->d, (const char *const[]){ "--backend", "cuda", NULL });
	ctx = test_connect(&e->d);
	assert_int_equal(gpux_buf_alloc(ctx, 4096, &pat), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, 4096, &back), GPUX_OK);
	for (unsigned i = 0; i < 4096; i++)
		((uint8_t *)gpux_buf_data(pat))[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(gpux_dbuf_alloc_ex(ctx, 0, X_BYTES, GPUX_DBUF_HOST, &kept, NULL), GPUX_OK);
	assert_int_equal(gpux_dbuf_write(kept, X_BYTES - 4096, pat, 0, 4096, NULL, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, 30000), GPUX_OK);
	gpux_req_free(r);
	assert_int_equal(registered(e, X_BYTES, &pids), 1);
	assert_int_equal(gpux_dbuf_read(back, 0, kept, X_BYTES - 4096, 4096, NULL, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, 30000), GPUX_OK);
	gpux_req_free(r);
	assert_memory_equal(gpux_buf_data(back), gpux_buf_data(pat), 4096);
	gpux_dbuf_free(kept);
	gpux_buf_free(back);
	gpux_buf_free(pat);
	gpux_disconnect(ctx);
}

/* Waits until the workers have registered `bytes` n times in all; asserts no more than n. */
static void wait_registered(const struct env *e, size_t bytes, unsigned n)
{
	unsigned pids;

	for (int i = 0; i < 1000 && registered(e, bytes, &pids) < n; i++)
		(void)usleep(10000);
	assert_int_equal(registered(e, bytes, &pids), n);
}

/* Whether the buffer's bytes are all `v`. */
static bool all_bytes(gpux_buf *b, uint8_t v)
{
	const uint8_t *p = gpux_buf_data(b);

	for (size_t i = 0; i < gpux_buf_size(b); i++)
		if (p[i] != v)
			return false;
	return true;
}

/*
 * A freed buffer's memory is kept for the next one of a like size (up to twice as large),
 * which the workers then need not register: it comes zeroed and works on both devices. A
 * buffer alive beside it, one too large or too small for it, one whose file was handed out,
 * and one after gpux_buf_trim() are registered as new. Arenas (small buffers) likewise.
 */
static void test_register_freed_memory_kept(void **state)
{
	struct env *e = *state;
	gpux_ctx *ctx = test_connect(&e->d);
	gpux_module *m = load(ctx);
	gpux_buf *x, *x2, *y, *small;
	uint64_t seed = 11, off;
	int fd;

	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, Y_BYTES, &y), GPUX_OK);
	wait_registered(e, X_BYTES, 2);
	memset(gpux_buf_data(x), 0x5a, X_BYTES);
	gpux_buf_free(x);
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x), GPUX_OK);
	assert_true(all_bytes(x, 0));
	test_fill_random(gpux_buf_data(x), X_BYTES / 4, &seed);
	for (uint32_t dev = 0; dev < 2; dev++)
		assert_int_equal(add1(m, dev, x, y), GPUX_OK);
	/* A second one alive beside it is new. */
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x2), GPUX_OK);
	wait_registered(e, X_BYTES, 4);
	gpux_buf_free(x2);
	gpux_buf_free(x);
	/* Half the size takes one of them; a third of it does not. */
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES / 2, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES / 3, &x2), GPUX_OK);
	assert_true(all_bytes(x, 0));
	wait_registered(e, X_BYTES / 3, 2);
	assert_int_equal(registered(e, X_BYTES / 2, &(unsigned){ 0 }), 0);
	gpux_buf_free(x2);
	gpux_buf_free(x);
	/* Handed out: another process may hold its file, so it goes. */
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x), GPUX_OK);
	assert_int_equal(gpux_buf_fd(x, &fd, &off), GPUX_OK);
	gpux_buf_free(x);
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x2), GPUX_OK);
	wait_registered(e, X_BYTES, 6);
	gpux_buf_free(x2);
	gpux_buf_free(x);
	gpux_buf_trim(ctx);
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x), GPUX_OK);
	wait_registered(e, X_BYTES, 8);
	gpux_buf_free(x);
	/* An arena whose last buffer went is kept too. */
	assert_int_equal(gpux_buf_alloc(ctx, 4096, &small), GPUX_OK);
	wait_registered(e, 4u << 20, 2);
	memset(gpux_buf_data(small), 0x77, 4096);
	gpux_buf_free(small);
	assert_int_equal(gpux_buf_alloc(ctx, 4096, &small), GPUX_OK);
	assert_true(all_bytes(small, 0));
	gpux_buf_free(small);
	gpux_buf_free(y);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	assert_int_equal(registered(e, 4u << 20, &(unsigned){ 0 }), 2);
}

/*
 * What is kept is capped: 64 MiB, 16 segments; past either the oldest goes. Made again, 8
 * buffers of 9 MiB register one anew (7 were kept), 17 of 300 KiB one (16 were).
 */
static void test_register_kept_capped(void **state)
{
	static const size_t sizes[] = { 9u << 20, 300u << 10 };
	static const unsigned counts[] = { 8, 17 };
	struct env *e = *state;
	gpux_ctx *ctx = test_connect(&e->d);
	gpux_buf *b[17];

	for (unsigned k = 0; k < 2; k++) {
		for (unsigned i = 0; i < counts[k]; i++)
			assert_int_equal(gpux_buf_alloc(ctx, sizes[k], &b[i]), GPUX_OK);
		for (unsigned i = 0; i < counts[k]; i++)
			gpux_buf_free(b[i]);
		for (unsigned i = 0; i < counts[k]; i++)
			assert_int_equal(gpux_buf_alloc(ctx, sizes[k], &b[i]), GPUX_OK);
		wait_registered(e, sizes[k], 2 * (counts[k] + 1));
		for (unsigned i = 0; i < counts[k]; i++)
			gpux_buf_free(b[i]);
		gpux_buf_trim(ctx);
	}
	gpux_disconnect(ctx);
}

/*
 * A forked child does not take its parent's kept memory (the parent may take it back any
 * time): its buffer is registered as new, and what it writes there, the parent's next buffer
 * does not see.
 */
static void test_register_kept_not_a_childs(void **state)
{
	struct env *e = *state;
	gpux_ctx *ctx = test_connect(&e->d);
	gpux_module *m = load(ctx);
	gpux_buf *x, *y;
	pid_t pid;

	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, Y_BYTES, &y), GPUX_OK);
	wait_registered(e, X_BYTES, 2);
	gpux_buf_free(x);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		uint64_t seed = 13;
		bool ok = gpux_buf_alloc(ctx, X_BYTES, &x) == GPUX_OK && all_bytes(x, 0);

		if (ok) {
			test_fill_random(gpux_buf_data(x), X_BYTES / 4, &seed);
			ok = add1(m, 0, x, y) == GPUX_OK;
		}
		_exit(ok ? 0 : 1);
	}
	assert_child_ok(pid);
	wait_registered(e, X_BYTES, 3);
	assert_int_equal(gpux_buf_alloc(ctx, X_BYTES, &x), GPUX_OK);
	assert_true(all_bytes(x, 0));
	assert_int_equal(registered(e, X_BYTES, &(unsigned){ 0 }), 3);
	gpux_buf_free(x);
	gpux_buf_free(y);
	gpux_module_free(m);
	gpux_disconnect(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_register_when_made_once_per_device, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_register_launch_waits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_register_failure_fails_its_requests, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_register_freed_while_registering, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_register_host_dbuf_waits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_register_freed_memory_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_register_kept_capped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_register_kept_not_a_childs, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
