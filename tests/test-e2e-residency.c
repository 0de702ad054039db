/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-residency.c: the device cache, device buffers, quotas, queues and GPUX_ANY. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/* Two host "devices", a 3 MiB cache that forgets after a second, small quotas. */
static const char *const daemon_args[] = {
	"--host-devices",
	"2",
	"--cache-bytes",
	"3145728",
	"--cache-ttl-ms",
	"1000",
	"--quota-device",
	"4194304",
	"--quota-shared",
	"67108864",
	NULL,
};

static int setup(void **state)
{
	*state = test_env_open(daemon_args);
	return 0;
}

static struct ipc_dev_status dev_status(struct test_env *e, uint32_t dev)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[dev];
}

/* A frozen buffer of n random floats. */
static gpux_buf *frozen(struct test_env *e, uint64_t n, uint64_t seed)
{
	gpux_buf *b;

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &b), GPUX_OK);
	test_fill_random(gpux_buf_data(b), n, &seed);
	assert_int_equal(gpux_buf_freeze(b), GPUX_OK);
	return b;
}

static void test_residency_freeze_makes_memory_read_only_and_keeps_bytes(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 1000;
	gpux_buf *small, *big;
	float *p;
	pid_t pid;
	int st;

	/* Small (from an arena) and large (its own segment): same data, same pointer. */
	for (int k = 0; k < 2; k++) {
		uint64_t len = k ? 1 << 20 : n;
		gpux_buf **b = k ? &big : &small;
		uint64_t seed = 99;

		assert_int_equal(gpux_buf_alloc(e->ctx, len * 4, b), GPUX_OK);
		p = gpux_buf_data(*b);
		test_fill_random(p, len, &seed);
		assert_int_equal(gpux_buf_freeze(*b), GPUX_OK);
		assert_ptr_equal(gpux_buf_data(*b), p);
		seed = 99;
		{
			float *want = malloc(len * 4);
			test_fill_random(want, len, &seed);
			assert_memory_equal(p, want, len * 4);
			free(want);
		}
		/* A write now faults. */
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			/* cmocka catches SIGSEGV to report a failed test: not here. */
			(void)signal(SIGSEGV, SIG_DFL);
			(void)signal(SIGBUS, SIG_DFL);
			p[0] = 1;
			_exit(0);
		}
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFSIGNALED(st));
		/* And it cannot be an output. */
		{
			gpux_req *r;
			struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(*b, 0, 16),
						   gpux_arg_out(*b, 0, 16) };
			struct gpux_launch l = test_launch_1d(4, 0, NULL);
			assert_int_equal(gpux_submit(e->m, "add1", &l, args, 3, &r), GPUX_E_INVAL);
		}
	}
	/* Buffers allocated after are not disturbed by the frozen pages around them. */
	{
		gpux_buf *x;
		assert_int_equal(gpux_buf_alloc(e->ctx, 4096, &x), GPUX_OK);
		memset(gpux_buf_data(x), 7, 4096);
		gpux_buf_free(x);
	}
	gpux_buf_free(small);
	gpux_buf_free(big);
}

/* This process's open frozen copies: memfds named gpux-frozen. */
static unsigned frozen_fds(void)
{
	unsigned n = 0;

	for (int fd = 0; fd < 4096; fd++) {
		char path[64], target[256];
		ssize_t len;

		(void)snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		len = readlink(path, target, sizeof(target) - 1);
		if (len < 0)
			continue;
		target[len] = 0;
		n += strstr(target, "memfd:gpux-frozen") != NULL;
	}
	return n;
}

struct freezer {
	gpux_buf *b;
	pthread_barrier_t *go;
	gpux_status st;
	bool done;
};

static void *freeze_thread(void *arg)
{
	struct freezer *f = arg;

	(void)pthread_barrier_wait(f->go);
	f->st = gpux_buf_freeze(f->b);
	__atomic_store_n(&f->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Threads freezing one buffer at once (the copy is made without the context's lock): each is
 * told OK, one copy takes the buffer's place at its address, the others are let go.
 */
static void test_residency_freeze_from_many_threads(void **state)
{
	struct test_env *e = *state;
	enum { THREADS = 6 };

	for (int k = 0; k < 2; k++) {
		const uint64_t n = k ? 1 << 20 : 1000; /* its own segment, or from an arena */
		struct freezer f[THREADS];
		pthread_t t[THREADS];
		pthread_barrier_t go;
		unsigned fds0 = frozen_fds();
		uint64_t seed = 5;
		gpux_buf *b;
		float *p, *want = malloc(n * 4);

		assert_non_null(want);
		assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &b), GPUX_OK);
		p = gpux_buf_data(b);
		test_fill_random(p, n, &seed);
		memcpy(want, p, n * 4);
		assert_int_equal(pthread_barrier_init(&go, NULL, THREADS), 0);
		for (int i = 0; i < THREADS; i++) {
			f[i] = (struct freezer){ .b = b, .go = &go, .st = GPUX_E_IO };
			assert_int_equal(pthread_create(&t[i], NULL, freeze_thread, &f[i]), 0);
		}
		for (int i = 0; i < THREADS; i++) {
			assert_int_equal(pthread_join(t[i], NULL), 0);
			assert_int_equal(f[i].st, GPUX_OK);
		}
		(void)pthread_barrier_destroy(&go);
		assert_ptr_equal(gpux_buf_data(b), p);
		assert_memory_equal(p, want, n * 4);
		assert_int_equal(frozen_fds(), fds0 + 1);
		(void)test_add1_cached(e->ctx, e->m, b, n, 0);
		gpux_buf_free(b);
		assert_int_equal(frozen_fds(), fds0);
		free(want);
	}
}

/* This process's mappings of frozen copies: at `at` (the buffer's place), and elsewhere. */
static void frozen_maps(const void *at, unsigned *ret_at, unsigned *ret_other)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "re");

	*ret_at = *ret_other = 0;
	while (f && fgets(line, sizeof(line), f)) {
		if (!strstr(line, "memfd:gpux-frozen"))
			continue;
		if (strtoull(line, NULL, 16) == (uintptr_t)at)
			(*ret_at)++;
		else
			(*ret_other)++;
	}
	if (f)
		(void)fclose(f);
}

/*
 * A child forked while another thread copies a buffer to freeze it has no part in that copy:
 * neither its fd nor its mapping (the memory they hold would live as long as the child). A
 * freeze that came first is the child's as well: its one fd, mapped at the buffer's place.
 * The fork is made once the copy's memfd exists; a copy that ends before it proves less.
 */
static void test_residency_fork_while_freezing_holds_no_copy(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 16u << 20; /* 64 MiB: a copy that takes a while */

	for (int k = 0; k < 3; k++) {
		pthread_barrier_t go;
		struct freezer f = { .go = &go, .st = GPUX_E_IO };
		unsigned fds0 = frozen_fds(), at0, other0;
		pthread_t t;
		pid_t pid;
		int st;

		assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &f.b), GPUX_OK);
		memset(gpux_buf_data(f.b), 0x5a, n * 4);
		frozen_maps(gpux_buf_data(f.b), &at0, &other0);
		assert_int_equal(pthread_barrier_init(&go, NULL, 2), 0);
		assert_int_equal(pthread_create(&t, NULL, freeze_thread, &f), 0);
		(void)pthread_barrier_wait(&go);
		while (frozen_fds() == fds0 && !__atomic_load_n(&f.done, __ATOMIC_ACQUIRE))
			;
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			unsigned at, other;

			frozen_maps(gpux_buf_data(f.b), &at, &other);
			_exit(frozen_fds() == fds0 + at && other == other0 ? 0 : 1);
		}
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_int_equal(pthread_join(t, NULL), 0);
		(void)pthread_barrier_destroy(&go);
		assert_int_equal(f.st, GPUX_OK);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
		gpux_buf_free(f.b);
	}
}

static void test_residency_cache_hit_after_freeze(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 65536;
	struct ipc_dev_status before = dev_status(e, 0), after;
	gpux_buf *a = frozen(e, n, 1), *same = frozen(e, n, 1), *other = frozen(e, n, 2);

	(void)test_add1_cached(e->ctx, e->m, a, n, 0);
	(void)test_add1_cached(e->ctx, e->m, a, n, 0);
	/* Another buffer with the same bytes is the same entry: content addressing. */
	(void)test_add1_cached(e->ctx, e->m, same, n, 0);
	(void)test_add1_cached(e->ctx, e->m, other, n, 0);
	after = dev_status(e, 0);
	assert_int_equal(after.stats.cache_misses - before.stats.cache_misses, 2);
	assert_int_equal(after.stats.cache_hits - before.stats.cache_hits, 2);
	assert_true(after.stats.cache_bytes >= 2 * n * 4);
	gpux_buf_free(a);
	gpux_buf_free(same);
	gpux_buf_free(other);
}

/* A 3 MiB budget holds three 1 MiB entries; a fourth evicts the least recently used. */
static void test_residency_eviction_under_budget(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 1 << 18;
	struct ipc_dev_status before = dev_status(e, 1), after;
	gpux_buf *b[4];

	for (int i = 0; i < 4; i++) {
		b[i] = frozen(e, n, 100 + (uint64_t)i);
		(void)test_add1_cached(e->ctx, e->m, b[i], n, 1);
	}
	after = dev_status(e, 1);
	assert_true(after.stats.cache_evictions > before.stats.cache_evictions);
	assert_true(after.stats.cache_bytes <= 3 << 20);
	/* The first one was evicted: a miss; the last one is still there: a hit. */
	before = after;
	(void)test_add1_cached(e->ctx, e->m, b[3], n, 1);
	after = dev_status(e, 1);
	assert_int_equal(after.stats.cache_hits, before.stats.cache_hits + 1);
	for (int i = 0; i < 4; i++)
		gpux_buf_free(b[i]);
}

static bool cache_empty(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.cache_entries == 0 && s->stats.cache_bytes == 0;
}

static void test_residency_ttl_expiry(void **state)
{
	struct test_env *e = *state;
	gpux_buf *b = frozen(e, 1000, 5);

	(void)test_add1_cached(e->ctx, e->m, b, 1000, 0);
	assert_true(dev_status(e, 0).stats.cache_entries >= 1);
	test_wait_stats(&e->d, 0, cache_empty, NULL);
	gpux_buf_free(b);
}

/* x -> dbuf A (write) -> add1 -> dbuf B -> mul2 -> dbuf A -> read: never through the host. */
static void test_residency_dbuf_keeps_content_across_requests(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 100000;
	gpux_buf *x, *y;
	gpux_dbuf *a, *b;
	gpux_req *r;
	struct gpux_launch l = test_launch_1d(n, GPUX_ANY, NULL);

	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * 4, &y), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, &e->seed);
	memset(gpux_buf_data(y), 0xff, n * 4);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 1, n * 4, &a), GPUX_OK);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 1, n * 4, &b), GPUX_OK);
	assert_int_equal(gpux_dbuf_size(a), n * 4);
	assert_int_equal(gpux_dbuf_device(a), 1);
	assert_int_equal(gpux_dbuf_write(a, 0, x, 0, n * 4, NULL, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_dbuf(a, 0, n * 4),
					   gpux_arg_dbuf(b, 0, n * 4) };
		assert_int_equal(gpux_submit(e->m, "add1", &l, args, 3, &r), GPUX_OK);
		/* GPUX_ANY went where the device buffers are. */
		assert_int_equal(gpux_req_device(r), 1);
		assert_int_equal(gpux_wait(r, -1), GPUX_OK);
		gpux_req_free(r);
		args[1] = gpux_arg_dbuf(b, 0, n * 4);
		args[2] = gpux_arg_dbuf(a, 0, n * 4);
		assert_int_equal(gpux_run(e->m, "mul2", &l, args, 3), GPUX_OK);
	}
	assert_int_equal(gpux_dbuf_read(y, 0, a, 0, n * 4, NULL, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	gpux_req_free(r);
	for (uint64_t i = 0; i < n; i++)
		assert_float_equal(((float *)gpux_buf_data(y))[i],
				   (((float *)gpux_buf_data(x))[i] + 1) * 2, 0);
	/* A launch that names another device than its device buffers is a mistake. */
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_dbuf(a, 0, 4),
					   gpux_arg_dbuf(b, 0, 4) };
		struct gpux_launch l0 = test_launch_1d(1, 0, NULL);
		assert_int_equal(gpux_submit(e->m, "add1", &l0, args, 3, &r), GPUX_E_INVAL);
	}
	gpux_dbuf_free(b);
	gpux_dbuf_free(a);
	gpux_buf_free(y);
	gpux_buf_free(x);
}

static bool no_dbufs(const struct ipc_dev_status *s, void *arg)
{
	return s->stats.dbuf_bytes == *(uint64_t *)arg;
}

static void test_residency_dbufs_reclaimed_and_quota(void **state)
{
	struct test_env *e = *state;
	uint64_t base = dev_status(e, 0).stats.dbuf_bytes;
	gpux_dbuf *d;
	pid_t pid;

	/* 4 MiB per client: 3 fit, 2 more do not. */
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, 3 << 20, &d), GPUX_OK);
	{
		gpux_dbuf *more = NULL;
		assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, 2 << 20, &more), GPUX_E_QUOTA);
		assert_null(more);
		/* So is a size whose sum with what is in use wraps round. */
		assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, SIZE_MAX - (1 << 20), &more),
				 GPUX_E_QUOTA);
		assert_null(more);
	}
	gpux_dbuf_free(d);
	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, 2 << 20, &d), GPUX_OK);
	gpux_dbuf_free(d);

	/* 64 MiB of shared memory per client: a larger buffer is refused at once. */
	{
		gpux_buf *big;

		assert_int_equal(gpux_buf_alloc(e->ctx, 65 << 20, &big), GPUX_E_QUOTA);
	}

	/* A client that goes away without freeing its device buffers loses them. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpux_ctx *c;
		gpux_dbuf *x;
		if (gpux_connect(e->d.sock, &c) || gpux_dbuf_alloc(c, 0, 3 << 20, &x))
			_exit(1);
		_exit(0);
	}
	assert_child_ok(pid);
	test_wait_stats(&e->d, 0, no_dbufs, &base);
}

/* Two queues of one device run at once: one waits for a flag that only the other sets. */
static void test_residency_queues_overlap_and_keep_order(void **state)
{
	struct test_env *e = *state;
	gpux_queue *q1, *q2;
	gpux_buf *flag;
	gpux_req *w, *s;
	int *f;

	assert_int_equal(gpux_queue_open(e->ctx, 0, &q1), GPUX_OK);
	assert_int_equal(gpux_queue_open(e->ctx, 0, &q2), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, 8, &flag), GPUX_OK);
	f = gpux_buf_data(flag);
	f[0] = 0;
	f[1] = -1;
	{
		struct gpux_launch l1 = { .grid = { 1 }, .block = { 1 }, .queue = q1 };
		struct gpux_launch l2 = { .grid = { 1 }, .block = { 1 }, .queue = q2 };
		struct gpux_arg wa[] = { gpux_arg_mapped(flag, 0, 4), gpux_arg_mapped(flag, 4, 4) };
		struct gpux_arg sa[] = { gpux_arg_mapped(flag, 0, 4) };

		assert_int_equal(gpux_submit(e->m, "wait_flag", &l1, wa, 2, &w), GPUX_OK);
		assert_int_equal(gpux_submit(e->m, "set_flag", &l2, sa, 1, &s), GPUX_OK);
	}
	assert_int_equal(gpux_wait(w, -1), GPUX_OK);
	assert_int_equal(gpux_wait(s, -1), GPUX_OK);
	/* The waiter saw the flag: the second queue did not wait behind the first. */
	assert_int_equal(f[1], 1);
	gpux_req_free(w);
	gpux_req_free(s);
	gpux_buf_free(flag);
	gpux_queue_free(q2);
	gpux_queue_free(q1);
}

static void test_residency_any_spreads_over_devices(void **state)
{
	struct test_env *e = *state;
	gpux_req *r[8];
	unsigned on[2] = { 0, 0 };

	for (int i = 0; i < 8; i++)
		assert_int_equal(test_spin_submit(e->m, GPUX_ANY, 30, &r[i]), GPUX_OK);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(gpux_wait(r[i], -1), GPUX_OK);
		on[gpux_req_device(r[i])]++;
		gpux_req_free(r[i]);
	}
	assert_true(on[0] > 0);
	assert_true(on[1] > 0);
}

/* One process with much to do alone: its long requests split nearly evenly, however many (with
 * a quarter of the home's work as the margin, 110 of 192 stayed home). A connection of its
 * own: the loads it read during the burst are the averages its next launches would weigh. */
static void test_residency_any_splits_one_process_evenly(void **state)
{
	struct test_env *e = *state;
	enum { N = 192 };
	gpux_ctx *ctx = test_connect(&e->d);
	gpux_module *m = test_load_host_kernels(ctx);
	gpux_req *r[N];
	unsigned on[2] = { 0, 0 };

	for (int i = 0; i < N; i++)
		assert_int_equal(test_spin_submit(m, GPUX_ANY, 1, &r[i]), GPUX_OK);
	for (int i = 0; i < N; i++) {
		assert_int_equal(gpux_wait(r[i], -1), GPUX_OK);
		on[gpux_req_device(r[i])]++;
		gpux_req_free(r[i]);
	}
	print_message("GPUX_ANY: %u on device 0, %u on device 1\n", on[0], on[1]);
	assert_in_range(on[0], N / 2 - 8, N / 2 + 8);
	gpux_module_free(m);
	gpux_disconnect(ctx);
}

/* Launches one at a time find both devices idle: they stay on the device of the first, so that
 * a process's launches reach one worker in runs, not every other one on each. */
static void test_residency_any_stays_where_no_less_is_queued(void **state)
{
	struct test_env *e = *state;
	uint32_t first = GPUX_ANY;

	for (int i = 0; i < 20; i++) {
		gpux_req *r;

		assert_int_equal(test_spin_submit(e->m, GPUX_ANY, 0, &r), GPUX_OK);
		assert_int_equal(gpux_wait(r, -1), GPUX_OK);
		if (first == GPUX_ANY)
			first = gpux_req_device(r);
		assert_int_equal(gpux_req_device(r), first);
		gpux_req_free(r);
	}
}

static void test_residency_any_follows_affinity(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 50000;
	gpux_buf *b = frozen(e, n, 77);
	uint32_t first = test_add1_cached(e->ctx, e->m, b, n, GPUX_ANY);

	/* Wherever its bytes were cached first, there it goes again. */
	for (int i = 0; i < 6; i++)
		assert_int_equal(test_add1_cached(e->ctx, e->m, b, n, GPUX_ANY), first);
	gpux_buf_free(b);
}

/* The public view of the same: content keys, and the filters a cluster scheduler reads. */
static void test_residency_keys_and_filters_say_where_bytes_are(void **state)
{
	struct test_env *e = *state;
	const uint64_t n = 40000;
	gpux_buf *b = frozen(e, n, 91), *same = frozen(e, n, 91), *other = frozen(e, n, 92);
	gpux_buf *plain, *part;
	uint8_t kb[GPUX_KEY_SIZE], ks[GPUX_KEY_SIZE], ko[GPUX_KEY_SIZE], kp[GPUX_KEY_SIZE];
	uint64_t f0[GPUX_AFFINITY_BITS / 64], f1[GPUX_AFFINITY_BITS / 64];
	uint32_t uid = (uint32_t)geteuid();

	assert_int_equal(gpux_buf_key(b, 0, 0, kb), GPUX_OK);
	assert_int_equal(gpux_buf_key(same, 0, n * 4, ks), GPUX_OK);
	assert_int_equal(gpux_buf_key(other, 0, 0, ko), GPUX_OK);
	assert_memory_equal(kb, ks, GPUX_KEY_SIZE);
	assert_memory_not_equal(kb, ko, GPUX_KEY_SIZE);
	/* A range's key is its bytes' alone: a buffer of just those bytes has it too. */
	assert_int_equal(gpux_buf_alloc(e->ctx, 400, &part), GPUX_OK);
	memcpy(gpux_buf_data(part), (const uint8_t *)gpux_buf_data(b) + 800, 400);
	assert_int_equal(gpux_buf_freeze(part), GPUX_OK);
	assert_int_equal(gpux_buf_key(b, 800, 400, kb), GPUX_OK);
	assert_int_equal(gpux_buf_key(part, 0, 0, kp), GPUX_OK);
	assert_memory_equal(kb, kp, GPUX_KEY_SIZE);
	/* Not frozen, or not within the buffer: no key. */
	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &plain), GPUX_OK);
	assert_int_equal(gpux_buf_key(plain, 0, 0, kp), GPUX_E_INVAL);
	assert_int_equal(gpux_buf_key(b, n * 4, 0, kp), GPUX_E_INVAL);
	assert_int_equal(gpux_buf_key(b, 4, n * 4, kp), GPUX_E_INVAL);
	assert_int_equal(gpux_buf_key(b, UINT64_MAX, 2, kp), GPUX_E_INVAL);
	assert_int_equal(gpux_buf_key(NULL, 0, 0, kp), GPUX_E_INVAL);
	assert_int_equal(gpux_device_affinity(e->ctx, 2, f0), GPUX_E_NODEV);
	assert_int_equal(gpux_device_affinity(NULL, 0, f0), GPUX_E_INVAL);

	/* Cached on device 1 only: its filter holds the key, for this user. */
	assert_int_equal(gpux_buf_key(b, 0, 0, kb), GPUX_OK);
	(void)test_add1_cached(e->ctx, e->m, b, n, 1);
	assert_int_equal(gpux_device_affinity(e->ctx, 0, f0), GPUX_OK);
	assert_int_equal(gpux_device_affinity(e->ctx, 1, f1), GPUX_OK);
	assert_true(gpux_affinity_holds(f1, uid, kb));
	assert_false(gpux_affinity_holds(f0, uid, kb));
	assert_false(gpux_affinity_holds(f1, uid + 1, kb));
	assert_false(gpux_affinity_holds(f1, uid, ko));
	assert_false(gpux_affinity_holds(NULL, uid, kb));
	gpux_buf_free(b);
	gpux_buf_free(same);
	gpux_buf_free(other);
	gpux_buf_free(part);
	gpux_buf_free(plain);
}

/* One device's worker killed: GPUX_ANY work goes on at once on the other. */
static void test_residency_any_survives_a_dead_worker(void **state)
{
	struct test_env *e = *state;
	uint32_t gen = dev_status(e, 0).generation;

	assert_int_equal(kill(test_worker_pid(&e->d, 0), SIGKILL), 0);
	for (int i = 0; i < 10; i++) {
		gpux_req *r;
		gpux_status st;

		assert_int_equal(test_spin_submit(e->m, GPUX_ANY, 1, &r), GPUX_OK);
		st = gpux_wait(r, -1);
		/* One submitted before the death was noticed may be lost with it. */
		assert_true(st == GPUX_OK || (st == GPUX_E_WORKER_LOST && gpux_req_device(r) == 0));
		gpux_req_free(r);
	}
	test_wait_generation(&e->d, 0, gen);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_residency_freeze_makes_memory_read_only_and_keeps_bytes),
		cmocka_unit_test(test_residency_freeze_from_many_threads),
		cmocka_unit_test(test_residency_fork_while_freezing_holds_no_copy),
		cmocka_unit_test(test_residency_cache_hit_after_freeze),
		cmocka_unit_test(test_residency_eviction_under_budget),
		cmocka_unit_test(test_residency_ttl_expiry),
		cmocka_unit_test(test_residency_dbuf_keeps_content_across_requests),
		cmocka_unit_test(test_residency_dbufs_reclaimed_and_quota),
		cmocka_unit_test(test_residency_queues_overlap_and_keep_order),
		cmocka_unit_test(test_residency_any_spreads_over_devices),
		cmocka_unit_test(test_residency_any_splits_one_process_evenly),
		cmocka_unit_test(test_residency_any_stays_where_no_less_is_queued),
		cmocka_unit_test(test_residency_any_follows_affinity),
		cmocka_unit_test(test_residency_keys_and_filters_say_where_bytes_are),
		cmocka_unit_test(test_residency_any_survives_a_dead_worker),
	};

	return cmocka_run_group_tests(tests, setup, test_env_teardown);
}
