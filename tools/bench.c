/* SPDX-License-Identifier: MIT */
/* tools/bench.c: gpux bench: each scenario through gpux and in-process CUDA, side by side. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench-kernels.h"
#include "bench.h"
#include "json.h"
#include "macro.h"
#include "path.h"

extern char **environ;

#define WARM_UP_NS (1000ull * 1000 * 1000)

/* Whether a result can be judged against its target. */
static bool judged(const struct result *r)
{
	return *r->target && !isnan(r->ratio) && !isinf(r->ratio);
}

void bench_add(struct bench *b, const char *name, double gpux, double base, const char *unit,
	       const char *target, double ratio, bool met)
{
	struct result *r;

	/* A row left out would read as a scenario that did not run: a bench that outgrows the
	 * table is a bug of ours, found at once. */
	if (b->nres == MAX_RESULTS) {
		(void)fprintf(stderr, "gpux: bench: more than %u rows: \"%s\" and later left out\n",
			      MAX_RESULTS, name);
		abort();
	}
	r = &b->res[b->nres++];
	(void)snprintf(r->name, sizeof(r->name), "%s", name);
	r->gpux = gpux;
	r->base = base;
	r->unit = unit;
	r->target = target;
	r->ratio = ratio;
	r->met = met;
}

/* ---- the baseline process ---- */

/* Run program (its path) with args, its standard output into kv; stderr to /dev/null when
 * `quiet`. */
static int spawn_kv(char *program, const char *const *args, bool quiet, struct kv *kv)
{
	char *argv[8];
	unsigned argc = 0;
	posix_spawn_file_actions_t fa;
	int p[2], st;
	size_t len = 0;
	bool truncated = false;
	pid_t pid;

	argv[argc++] = program;
	for (unsigned i = 0; args[i] && argc < 7; i++)
		argv[argc++] = (char *)args[i];
	argv[argc] = NULL;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	if (quiet)
		(void)posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) != 0) {
		(void)posix_spawn_file_actions_destroy(&fa);
		(void)close(p[0]);
		(void)close(p[1]);
		return -ENOENT;
	}
	(void)posix_spawn_file_actions_destroy(&fa);
	(void)close(p[1]);
	/* Read to the end, what does not fit too (into `spill`): a helper blocked on a full pipe
	 * would never exit. Output that does not fit is an error of the helper's. */
	for (;;) {
		char spill[4096];
		size_t room = sizeof(kv->out) - 1 - len;
		ssize_t n =
			room ? read(p[0], kv->out + len, room) : read(p[0], spill, sizeof(spill));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (room)
			len += (size_t)n;
		else
			truncated = true;
	}
	kv->out[len] = '\0';
	(void)close(p[0]);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || truncated)
		return -EIO;
	return 0;
}

/* $name_env, else `file` beside this program (the build tree), else in libexecdir. */
static void helper_path(const struct bench *b, const char *name_env, const char *file, char *buf,
			size_t len)
{
	const char *env = getenv(name_env);

	if (env && *env) {
		(void)snprintf(buf, len, "%s", env);
		return;
	}
	(void)snprintf(buf, len, "%s/%s", b->dir, file);
	if (access(buf, X_OK) != 0)
		(void)snprintf(buf, len, "%s/%s", GPUX_LIBEXECDIR, file);
}

int bench_base_run(struct bench *b, struct kv *kv, const char *const *args)
{
	char path[PATH_MAX + 32];

	if (!b->base)
		return -ENODEV;
	helper_path(b, "GPUX_BENCH_BASE", "gpux-bench-base", path, sizeof(path));
	return spawn_kv(path, args, false, kv);
}

int bench_cupy_run(struct bench *b, struct kv *kv, const char *const *args)
{
	char path[PATH_MAX + 32];

	if (!b->cuda)
		return -ENODEV;
	helper_path(b, "GPUX_BENCH_CUPY", "gpux-bench-cupy", path, sizeof(path));
	return spawn_kv(path, args, true, kv);
}

double bench_kv_get(const struct kv *kv, const char *key)
{
	size_t klen = strlen(key);

	for (const char *p = kv->out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, key, klen) == 0 && p[klen] == ' ')
			return strtod(p + klen + 1, NULL);
	return NAN;
}

/* ---- helpers ---- */

double bench_median(uint64_t *v, unsigned n)
{
	qsort(v, n, sizeof(*v), tool_cmp_u64);
	return (double)v[n / 2];
}

double bench_pct(uint64_t *v, unsigned n, unsigned p)
{
	qsort(v, n, sizeof(*v), tool_cmp_u64);
	return (double)v[(size_t)n * p / 100];
}

gpux_status bench_run1(struct bench *b, const char *k, const struct gpux_launch *l,
		       const struct gpux_arg *args, uint32_t nargs, uint64_t *ret_ns)
{
	uint64_t t0 = tool_now();
	gpux_status st = gpux_run(b->m, k, l, args, nargs);

	*ret_ns = tool_now() - t0;
	return st;
}

/* ---- scenarios ---- */

/* A device just out of idle runs slowly for a while (measured: round trips 3 times longer in
 * the first second of a fresh machine): keep it busy first. */
static void warm_up(struct bench *b)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint64_t until = tool_now() + WARM_UP_NS;
	uint64_t ns;

	while (tool_now() < until && bench_run1(b, "empty", &l, NULL, 0, &ns) == GPUX_OK)
		;
}

/* The median time of reps of one request (ns; 0: one failed): an argument's copy and the touch
 * kernel, or a copy between a shared buffer and a device buffer (kernel NULL). */
static uint64_t copy_ns(struct bench *b, unsigned reps, const struct gpux_arg *a, gpux_dbuf *dbuf,
			gpux_buf *buf, uint64_t size, bool to_device)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 } };
	uint64_t *t = calloc(reps + 1, sizeof(*t));
	uint64_t median = 0;

	if (!t)
		return 0;
	for (unsigned i = 0; i < reps + 1; i++) {
		uint64_t t0 = tool_now();
		gpux_status st;
		gpux_req *r;

		if (a) {
			st = gpux_run(b->m, "touch", &l, a, 1);
		} else {
			st = to_device ? gpux_dbuf_write(dbuf, 0, buf, 0, size, NULL, &r)
				       : gpux_dbuf_read(buf, 0, dbuf, 0, size, NULL, &r);
			if (st == GPUX_OK) {
				st = gpux_wait(r, -1);
				gpux_req_free(r);
			}
		}
		if (st != GPUX_OK)
			goto out;
		t[i] = tool_now() - t0;
	}
	/* The first one is the warm-up. */
	median = (uint64_t)bench_median(t + 1, reps);
out:
	free(t);
	return median;
}

/* Size as "4 KiB" or "16 MiB". */
static void size_name(uint64_t size, char *buf, size_t len)
{
	if (size >= 1024 * 1024)
		(void)snprintf(buf, len, "%llu MiB", (unsigned long long)(size >> 20));
	else
		(void)snprintf(buf, len, "%llu KiB", (unsigned long long)(size >> 10));
}

/* Rounds of each size below 16 MiB: gpux's copies, then the in-process ones, again and again,
 * so that a stretch in which the machine is slower or faster (a tenth either way, from one
 * second to the next on an H200) falls on both. */
#define BW_ROUNDS 5u

/*
 * Copies of one size: IN and OUT arguments of the touch kernel against the same in-process
 * (pinned copy and kernel, synchronised), and copies to and from a device buffer against bare
 * pinned copies, each the median of its rounds' medians. The target is DESIGN's: 0.8 of
 * in-process up to 1 MiB, 0.95 from 16 MiB.
 */
static int s_bw_one(struct bench *b, uint64_t size, bool headline)
{
	enum { IN, OUT, TO, FROM, H2D, D2H, PAGE, IN_K, OUT_K, KINDS };
	static const char *const keys[] = {
		[H2D] = "pinned_h2d_ns",  [D2H] = "pinned_d2h_ns",   [PAGE] = "pageable_h2d_ns",
		[IN_K] = "h2d_kernel_ns", [OUT_K] = "kernel_d2h_ns",
	};
	unsigned reps = size >= (256u << 20) ? 15 : size >= (16u << 20) ? 30 : 200;
	unsigned rounds = size >= (16u << 20) || b->quick ? 1 : BW_ROUNDS;
	double want = size >= (16u << 20) ? 0.95 : 0.8, v[KINDS];
	const char *target = want > 0.9 ? ">= 0.95x" : ">= 0.8x";
	char sz[32], rp[16], name[64], sname[32];
	const char *args[] = { "bw", b->cubin, sz, rp, NULL };
	uint64_t t[KINDS][BW_ROUNDS];
	unsigned based = 0;
	gpux_dbuf *dbuf;
	gpux_buf *buf;
	int rc = 0;

	if (reps > 5 && b->quick)
		reps = 5;
	if (gpux_buf_alloc(b->ctx, size, &buf) < 0)
		return -1;
	if (gpux_dbuf_alloc(b->ctx, 0, size, &dbuf) < 0) {
		gpux_buf_free(buf);
		return -1;
	}
	memset(gpux_buf_data(buf), 1, size);
	(void)snprintf(sz, sizeof(sz), "%llu", (unsigned long long)size);
	(void)snprintf(rp, sizeof(rp), "%u", reps);
	for (unsigned k = 0; k < rounds && rc == 0; k++) {
		struct gpux_arg ain = gpux_arg_in(buf, 0, size), aout = gpux_arg_out(buf, 0, size);
		struct kv kv;

		t[IN][k] = copy_ns(b, reps, &ain, NULL, NULL, size, true);
		t[OUT][k] = copy_ns(b, reps, &aout, NULL, NULL, size, false);
		t[TO][k] = copy_ns(b, reps, NULL, dbuf, buf, size, true);
		t[FROM][k] = copy_ns(b, reps, NULL, dbuf, buf, size, false);
		if (!t[IN][k] || !t[OUT][k] || !t[TO][k] || !t[FROM][k])
			rc = -1;
		else if (bench_base_run(b, &kv, args) == 0) {
			bool whole = true;

			/* A round counts with all its times (a missing key reads NAN). */
			for (unsigned j = H2D; j < KINDS; j++) {
				double ns = bench_kv_get(&kv, keys[j]);

				whole = whole && ns >= 1 && ns < 1e15;
				t[j][based] = whole ? (uint64_t)ns : 0;
			}
			based += whole;
		}
	}
	gpux_dbuf_free(dbuf);
	gpux_buf_free(buf);
	if (rc < 0)
		return -1;
	for (unsigned j = 0; j < KINDS; j++) {
		unsigned n = j < H2D ? rounds : based;

		v[j] = n ? (double)size / bench_median(t[j], n) : NAN;
	}
	size_name(size, sname, sizeof(sname));
	/* The host back end does not copy IN and OUT ranges (its kernels use the shared pages in
	 * place): a size over the time of a kernel that touches one element is no bandwidth. */
	if (b->cuda) {
		(void)snprintf(name, sizeof(name), "IN  %s + kernel", sname);
		bench_add(b, name, v[IN], v[IN_K], "GB/s", target, v[IN] / v[IN_K],
			  v[IN] >= want * v[IN_K]);
		(void)snprintf(name, sizeof(name), "OUT %s + kernel", sname);
		bench_add(b, name, v[OUT], v[OUT_K], "GB/s", target, v[OUT] / v[OUT_K],
			  v[OUT] >= want * v[OUT_K]);
	}
	(void)snprintf(name, sizeof(name), "copy %s to a device buffer", sname);
	bench_add(b, name, v[TO], v[H2D], "GB/s", target, v[TO] / v[H2D], v[TO] >= want * v[H2D]);
	(void)snprintf(name, sizeof(name), "copy %s from a device buffer", sname);
	bench_add(b, name, v[FROM], v[D2H], "GB/s", target, v[FROM] / v[D2H],
		  v[FROM] >= want * v[D2H]);
	if (headline)
		bench_add(b, "  (pageable H2D in-process)", v[PAGE], NAN, "GB/s", "", NAN, true);
	return 0;
}

static int s_bw(struct bench *b)
{
	static const uint64_t sizes[] = { 4096, 65536, 1 << 20, 16 << 20, 256 << 20, 1ull << 30 };

	if (!b->cuda)
		bench_add(b, "IN / OUT + kernel: no copy on the host back end", NAN, NAN, "", "",
			  NAN, true);
	for (unsigned i = 0; i < ARRAY_SIZE(sizes); i++) {
		if (b->quick && sizes[i] == 1ull << 30)
			continue;
		if (s_bw_one(b, sizes[i], sizes[i] == 256 << 20) < 0)
			return -1;
	}
	return 0;
}

/* 256 MiB input: uploaded every time vs cached on the device. */
static int s_cached(struct bench *b)
{
	const uint64_t n = 64ull << 20;
	const unsigned reps = b->quick ? 3 : 30;
	uint64_t *t = calloc(reps, sizeof(*t));
	gpux_buf *in, *out;
	struct gpux_launch l = { .grid = { 1024 }, .block = { 256 } };
	double unc, cac;
	uint64_t ns;

	if (gpux_buf_alloc(b->ctx, n * 4, &in) < 0 || gpux_buf_alloc(b->ctx, 1024 * 4, &out) < 0)
		return -1;
	for (uint64_t i = 0; i < n; i++)
		((float *)gpux_buf_data(in))[i] = (float)(i & 1023);
	if (gpux_buf_freeze(in) < 0)
		return -1;
	for (int cached = 0; cached < 2; cached++) {
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n),
			cached ? gpux_arg_cached(in, 0, n * 4) : gpux_arg_in(in, 0, n * 4),
			gpux_arg_out(out, 0, 1024 * 4),
		};
		(void)bench_run1(b, "block_sum", &l, args, 3, &ns);
		for (unsigned i = 0; i < reps; i++)
			if (bench_run1(b, "block_sum", &l, args, 3, &t[i]) < 0)
				return -1;
		if (cached)
			cac = bench_median(t, reps);
		else
			unc = bench_median(t, reps);
	}
	bench_add(b, "256 MiB input: cached vs uncached", cac / 1e6, unc / 1e6, "ms", "<= 5%",
		  cac / unc, cac <= 0.05 * unc);
	/* What no cache saves: the kernel reading its 256 MiB on the device. */
	for (unsigned i = 0; i < reps; i++) {
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_cached(in, 0, n * 4),
					   gpux_arg_out(out, 0, 1024 * 4) };
		struct gpux_launch tl = l;
		struct gpux_times tm = { 0 };
		gpux_req *r;

		tl.flags = GPUX_LAUNCH_TIMED;
		if (gpux_submit(b->m, "block_sum", &tl, args, 3, &r) != GPUX_OK)
			return -1;
		if (gpux_wait(r, -1) == GPUX_OK)
			(void)gpux_req_times(r, &tm);
		gpux_req_free(r);
		t[i] = tm.device_ns;
	}
	bench_add(b, "  of it the kernel, on the device", bench_median(t, reps) / 1e6, NAN, "ms",
		  "", NAN, true);
	gpux_buf_free(out);
	gpux_buf_free(in);
	free(t);
	return 0;
}

/* ---- private daemons, for the module caches ---- */

/* Their log goes to $GPUX_BENCH_DAEMON_LOG (appended) where it is set, else nowhere. */
pid_t bench_daemon_start(struct bench *b, const char *sock, const char *cache, const char *opt)
{
	const char *log = getenv("GPUX_BENCH_DAEMON_LOG");
	char *argv[9] = { b->gpuxd, "--socket", (char *)sock, "--cache-dir", (char *)cache };
	unsigned n = 5;

	if (opt)
		argv[n++] = (char *)opt;
	if (log && *log) {
		argv[n++] = "--log-file";
		argv[n++] = (char *)log;
	}
	posix_spawn_file_actions_t fa;
	pid_t pid;

	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	(void)posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	if (posix_spawn(&pid, b->gpuxd, &fa, NULL, argv, environ) != 0)
		pid = -1;
	(void)posix_spawn_file_actions_destroy(&fa);
	return pid;
}

void bench_daemon_stop(pid_t pid)
{
	if (pid > 0) {
		(void)kill(pid, SIGTERM);
		(void)waitpid(pid, NULL, 0);
	}
}

/*
 * Connect to sock, wait for device 0 to be ready, and time gpux_module_load() of src (in the
 * device's language).
 */
static double load_src_ms(struct bench *b, const char *sock, const char *src, size_t n)
{
	uint32_t lang = b->cuda ? GPUX_LANG_CUDA : GPUX_LANG_HOST;
	gpux_ctx *c = NULL;
	gpux_module *m = NULL;
	double ms = NAN;
	uint64_t t0;

	for (int tries = 0; tries < 500 && gpux_connect(sock, &c) != GPUX_OK; tries++)
		(void)usleep(20000);
	if (!c)
		return NAN;
	for (int tries = 0; tries < 1500; tries++) {
		struct gpux_device_info info;

		if (gpux_device_info(c, 0, &info) == GPUX_OK && info.state == GPUX_DEVICE_READY)
			break;
		(void)usleep(10000);
	}
	t0 = tool_now();
	if (gpux_module_load(c, lang, src, n, NULL, &m, NULL) == GPUX_OK)
		ms = tool_ms(tool_now() - t0);
	gpux_disconnect(c);
	return ms;
}

/*
 * load_src_ms() of the bench kernels with `tail` appended: a comment leaves the module what it
 * was (its cache key is of the code without comments), a definition makes one never seen.
 */
static double load_ms(struct bench *b, const char *sock, const char *tail)
{
	const char *code = b->cuda ? bench_kernels : bench_kernels_host;
	char src[sizeof(bench_kernels) + sizeof(bench_kernels_host) + 64];
	int n = snprintf(src, sizeof(src), "%s\n%s\n", code, tail);

	if (n < 0 || (size_t)n >= sizeof(src))
		return NAN;
	return load_src_ms(b, sock, src, (size_t)n);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * The second kernel of each pair of bench-kernels.h (cooperative_groups.h, CUB), compiled
 * after the first, through gpux (its helper keeps NVRTC's precompiled headers) and in a
 * process of its own (gpux-bench-base): the ratio is DESIGN's (at most half).
 */
static void header_pairs(struct bench *b, const char *sock)
{
	static const struct {
		const char *const *src;
		const char *name, *first_key, *second_key;
	} pairs[] = {
		{ bench_cg_kernels, "cooperative_groups.h", "cg_first_ns", "cg_second_ns" },
		{ bench_cub_kernels, "CUB's block reduce", "cub_first_ns", "cub_second_ns" },
	};
	const char *args[] = { "compile-headers", NULL };
	double t[2][2];
	struct kv kv;
	bool based = bench_base_run(b, &kv, args) == 0;

	for (unsigned i = 0; i < ARRAY_SIZE(pairs); i++)
		for (unsigned k = 0; k < 2; k++)
			t[i][k] = load_src_ms(b, sock, pairs[i].src[k], strlen(pairs[i].src[k]));
	for (unsigned i = 0; i < ARRAY_SIZE(pairs); i++) {
		double base1 = based ? bench_kv_get(&kv, pairs[i].first_key) / 1e6 : NAN;
		double base2 = based ? bench_kv_get(&kv, pairs[i].second_key) / 1e6 : NAN;
		char name[64];

		(void)snprintf(name, sizeof(name), "module: 2nd kernel of %s", pairs[i].name);
		bench_add(b, name, t[i][1], base2, "ms", "<= 0.5x", t[i][1] / base2,
			  t[i][1] <= 0.5 * base2);
		bench_add(b, "  the 1st, which leaves what it can", t[i][0], base1, "ms", "",
			  t[i][0] / base1, true);
	}
}

/*
 * Compiles through gpux against NVRTC in one process (gpux-bench-base): the first in a fresh
 * worker against NVRTC's first in its process, and against gpux's later ones (the median of
 * three sources never seen) as they against NVRTC's later ones; then the caches, a source
 * whose only change is a comment among them.
 */
static int s_modules(struct bench *b)
{
	char sock[PATH_MAX + 16], cache[PATH_MAX + 16];
	const char *args[] = { "compile", b->cubin, NULL };
	char jit_cubin[PATH_MAX + 16];
	const char *jit_args[] = { "compile-jit-cache", jit_cubin, NULL };
	double cold, warm[3], disk, mem, comment, bfirst = NAN, blater = NAN, bload = NAN;
	double bjit = NAN;
	struct kv kv;
	pid_t pid;

	(void)snprintf(sock, sizeof(sock), "%s/m.sock", b->tmp);
	(void)snprintf(cache, sizeof(cache), "%s/mcache", b->tmp);
	(void)snprintf(jit_cubin, sizeof(jit_cubin), "%s/jit.cubin", b->tmp);
	pid = bench_daemon_start(b, sock, cache, NULL);
	cold = load_ms(b, sock, "/* bench */");
	mem = load_ms(b, sock, "/* bench */");
	for (unsigned i = 0; i < 3; i++) {
		char tag[48];

		(void)snprintf(tag, sizeof(tag), "#define GPUX_BENCH_LATER_%u", i);
		warm[i] = load_ms(b, sock, tag);
	}
	qsort(warm, 3, sizeof(warm[0]), cmp_double);
	comment = load_ms(b, sock, "/* the same kernels, another comment */");
	if (b->cuda)
		header_pairs(b, sock);
	bench_daemon_stop(pid);
	pid = bench_daemon_start(b, sock, cache, NULL);
	disk = load_ms(b, sock, "/* bench */");
	bench_daemon_stop(pid);
	if (bench_base_run(b, &kv, args) == 0) {
		bfirst = bench_kv_get(&kv, "compile_ns") / 1e6;
		blater = bench_kv_get(&kv, "compile_later_ns") / 1e6;
		bload = bench_kv_get(&kv, "module_load_ns") / 1e6;
	}
	if (bench_base_run(b, &kv, jit_args) == 0)
		bjit = bench_kv_get(&kv, "compile_later_ns") / 1e6;
	bench_add(b, "module: compile (first)", cold, bfirst, "ms", "<= 1.2x", cold / bfirst,
		  cold / bfirst <= 1.2);
	bench_add(b, "module: compile, first against later", cold, warm[1], "ms", "<= 1.2x",
		  cold / warm[1], cold / warm[1] <= 1.2);
	bench_add(b, "module: compile (later)", warm[1], blater, "ms", "<= 1.1x", warm[1] / blater,
		  warm[1] / blater <= 1.1);
	/* Not gpux's to use (bench-base.c says why): for what it is worth only. */
	bench_add(b, "  in-process, later, the driver's JIT cache", NAN, bjit, "ms", "", NAN, true);
	bench_add(b, "module: from disk cache", disk, bfirst, "ms", "<= 1 ms",
		  isnan(bfirst) ? disk : disk / bfirst, disk <= 1.0);
	bench_add(b, "module: in worker memory", mem, bload, "ms", "", mem / bload, true);
	/* In-process, the driver's JIT cache gives the same PTX its cubin again, not the PTX. */
	bench_add(b, "module: only a comment changed (a cache hit)", comment, bjit, "ms", "<= 1 ms",
		  isnan(bjit) ? comment : comment / bjit, comment <= 1.0);
	return 0;
}

/* Independent compute-bound requests on every GPU vs on one. */
static int s_gpus(struct bench *b)
{
	uint32_t ndev = gpux_device_count(b->ctx);
	const unsigned m = b->quick ? 32 : 128;
	uint64_t iters = b->cuda ? 400000 : 20000000;
	gpux_buf *o;
	double t[2];

	if (ndev < 2)
		return 0;
	if (gpux_buf_alloc(b->ctx, 4, &o) < 0)
		return -1;
	for (int any = 0; any < 2; any++) {
		gpux_req **r = calloc(m, sizeof(*r));
		struct gpux_arg args[] = { GPUX_ARG_VALUE(iters), gpux_arg_out(o, 0, 4) };
		struct gpux_launch l = { .grid = { 132 * 8 },
					 .block = { 256 },
					 .device = any ? GPUX_ANY : 0 };
		uint64_t t0;

		(void)gpux_run(b->m, "burn", &l, args, 2);
		t0 = tool_now();
		for (unsigned i = 0; i < m; i++)
			if (gpux_submit(b->m, "burn", &l, args, 2, &r[i]) < 0)
				return -1;
		for (unsigned i = 0; i < m; i++) {
			(void)gpux_wait(r[i], -1);
			gpux_req_free(r[i]);
		}
		t[any] = (double)(tool_now() - t0) / 1e9;
		free(r);
	}
	bench_add(b, "independent compute, all GPUs vs one", (double)m / t[1], (double)m / t[0],
		  "req/s", ">= 1.9x", t[0] / t[1], t[0] / t[1] >= 1.9);
	gpux_buf_free(o);
	return 0;
}

/* ---- output ---- */

/*
 * The targets are DESIGN's, for GPUs: on the host back end (no GPU, kernels on the CPU) a row
 * is neither met nor missed.
 */
static const char *verdict(const struct bench *b, const struct result *r)
{
	if (!*r->target)
		return "";
	if (!b->cuda)
		return "n/a: GPU target";
	return judged(r) ? (r->met ? "met" : "MISSED") : "n/a";
}

/* A ratio to a baseline, or one that a judged target reads (of an absolute target, the
 * value over it): not a ratio to a target that does not apply. */
static bool ratio_shown(const struct bench *b, const struct result *r)
{
	return isfinite(r->ratio) && (isfinite(r->base) || (b->cuda && judged(r)));
}

static void print_table(FILE *f, const struct bench *b)
{
	(void)fprintf(f, "\n%-48s %12s %12s %-6s %8s %12s %s\n", "scenario", "gpux", "baseline",
		      "unit", "ratio", "target", "");
	for (unsigned i = 0; i < b->nres; i++) {
		const struct result *r = &b->res[i];
		char gpux[32] = "-", base[32] = "-", ratio[32] = "-";

		if (!isnan(r->gpux))
			(void)snprintf(gpux, sizeof(gpux), "%.2f", r->gpux);
		if (!isnan(r->base))
			(void)snprintf(base, sizeof(base), "%.2f", r->base);
		if (ratio_shown(b, r))
			(void)snprintf(ratio, sizeof(ratio), "%.3fx", r->ratio);
		(void)fprintf(f, "%-48s %12s %12s %-6s %8s %12s %s\n", r->name, gpux, base, r->unit,
			      ratio, r->target, verdict(b, r));
	}
	if (!b->cuda)
		(void)fprintf(f,
			      "\nThe host back end: the targets are for GPUs, and not judged here; "
			      "no in-process baseline.\n");
}

/*
 * One JSON document: a result without a baseline, or with a NaN, has null there; so has "met"
 * where the target is not judged (none, no baseline, or the host back end: targets_judged).
 */
static int print_json(const struct bench *b, const char *device)
{
	json_t *root = json_object(), *arr = json_array();

	if (!root || !arr)
		return tool_fail("json", "out of memory");
	(void)json_object_set_new(root, "device", tool_json_text(device));
	(void)json_object_set_new(root, "backend", json_string(b->cuda ? "cuda" : "host"));
	(void)json_object_set_new(root, "targets_judged", json_boolean(b->cuda));
	for (unsigned i = 0; i < b->nres; i++) {
		const struct result *r = &b->res[i];
		json_t *o = json_object();

		(void)json_object_set_new(o, "scenario", json_string(r->name));
		(void)json_object_set_new(o, "gpux", tool_json_real(r->gpux));
		(void)json_object_set_new(o, "baseline", tool_json_real(r->base));
		(void)json_object_set_new(o, "unit", json_string(r->unit));
		(void)json_object_set_new(o, "ratio",
					  tool_json_real(ratio_shown(b, r) ? r->ratio : NAN));
		(void)json_object_set_new(o, "target", json_string(r->target));
		(void)json_object_set_new(
			o, "met", judged(r) && b->cuda ? json_boolean(r->met) : json_null());
		(void)json_array_append_new(arr, o);
	}
	(void)json_object_set_new(root, "results", arr);
	return tool_json_print(root);
}

/* Whether a comma-separated list names `name`. */
static bool listed(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL)
		if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

/* The start of scenario `done + 1` of `total`: what has gone, and about what is left. */
static void progress(unsigned done, unsigned total, const char *name, uint64_t t0)
{
	double secs = (double)(tool_now() - t0) / 1e9;

	if (done == 0)
		(void)fprintf(stderr, "gpux bench: [1/%u] %s\n", total, name);
	else
		(void)fprintf(stderr, "gpux bench: [%u/%u] %s: %.0f s so far, about %.0f s left\n",
			      done + 1, total, name, secs, secs / done * (total - done));
}

/* Connect, load the kernels and run the scenarios asked for: how many failed, or -1. */
static int run(struct bench *b, const char *sock, struct gpux_device_info *info, const char *only)
{
	static const struct {
		const char *name;
		int (*fn)(struct bench *b);
	} scenarios[] = {
		{ "rtt", bench_rtt },     { "bw", s_bw },
		{ "fork", bench_fork },   { "cached", s_cached },
		{ "modules", s_modules }, { "clients", bench_clients },
		{ "fair", bench_fair },   { "gpus", s_gpus },
		{ "host", bench_host },   { "idle", bench_idle },
		{ "fault", bench_fault }, { "fresh", bench_fresh },
		{ "prio", bench_prio },   { "shares", bench_shares },
	};
	char *log = NULL;
	unsigned total = 0, done = 0;
	uint64_t t0;
	int c, failed = 0;
	gpux_status st;

	/* --only names scenarios that exist, or nothing runs. */
	for (const char *p = only; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL) {
		size_t n = strcspn(p, ",");
		bool known = false;

		for (unsigned i = 0; i < ARRAY_SIZE(scenarios); i++)
			known |= strlen(scenarios[i].name) == n &&
				 strncmp(p, scenarios[i].name, n) == 0;
		if (!known) {
			(void)fprintf(stderr, "gpux: bench: --only: no scenario \"%.*s\"\n", (int)n,
				      p);
			return -2;
		}
	}
	for (unsigned i = 0; i < ARRAY_SIZE(scenarios); i++)
		total += !only || listed(only, scenarios[i].name);
	st = gpux_connect(sock, &b->ctx);
	if (st != GPUX_OK) {
		(void)tool_connect_fail(st);
		return -1;
	}
	if (gpux_device_info(b->ctx, 0, info) != GPUX_OK) {
		(void)tool_fail("bench", "no device");
		return -1;
	}
	b->cuda = b->base = info->backend == GPUX_BACKEND_CUDA;
	if (b->base) {
		struct kv kv;
		const char *args[] = { "compile", b->cubin, NULL };
		if (bench_base_run(b, &kv, args) < 0) {
			(void)fprintf(stderr,
				      "gpux: bench: the in-process baseline failed: none\n");
			b->base = false;
		}
	}
	if (b->cuda)
		c = gpux_module_load(b->ctx, GPUX_LANG_CUDA, bench_kernels,
				     sizeof(bench_kernels) - 1, NULL, &b->m, &log);
	else
		c = gpux_module_load(b->ctx, GPUX_LANG_HOST, bench_kernels_host,
				     sizeof(bench_kernels_host) - 1, NULL, &b->m, &log);
	if (c < 0) {
		(void)fprintf(stderr, "%s", log ? log : "");
		free(log);
		(void)tool_fail("bench", "the kernels do not build");
		return -1;
	}
	free(log);
	(void)fprintf(stderr, "gpux bench on %s (%s)\n", info->name, b->cuda ? "cuda" : "host");
	warm_up(b);
	t0 = tool_now();
	for (unsigned i = 0; i < ARRAY_SIZE(scenarios); i++) {
		if (only && !listed(only, scenarios[i].name))
			continue;
		progress(done++, total, scenarios[i].name, t0);
		if (scenarios[i].fn(b) < 0) {
			(void)fprintf(stderr, "gpux: bench: %s failed\n", scenarios[i].name);
			failed++;
		}
	}
	(void)fprintf(stderr, "gpux bench: done in %.0f s\n", (double)(tool_now() - t0) / 1e9);
	return failed;
}

/* --from: a run saved by --json, shown (and plotted) as if it had just run. */
static int saved_run(struct bench *b, const char *from, bool json, const char *plot)
{
	const char *device;
	json_t *keep;
	int rc = TOOL_OK;

	if (bench_load(b, from, &device, &keep) < 0)
		return TOOL_FAIL;
	print_table(json ? stderr : stdout, b);
	if (json && print_json(b, device) != TOOL_OK)
		rc = TOOL_FAIL;
	if (plot && bench_plot(b, device, plot) < 0)
		rc = TOOL_FAIL;
	json_decref(keep);
	return rc;
}

int tool_bench(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "quick", no_argument, NULL, 'q' },
		{ "only", required_argument, NULL, 'o' },
		{ "plot", required_argument, NULL, 'p' },
		{ "from", required_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct bench b;
	struct gpux_device_info info;
	const char *sock = NULL, *only = NULL, *plot = NULL, *from = NULL;
	bool json = false;
	char self[PATH_MAX];
	ssize_t n;
	int c, rc;

	while ((c = tool_getopt(argc, argv, opts, TOOL_USAGE_BENCH)) >= 0) {
		if (c == 's')
			sock = optarg;
		else if (c == 'j')
			json = true;
		else if (c == 'q')
			b.quick = true;
		else if (c == 'p')
			plot = optarg;
		else if (c == 'f')
			from = optarg;
		else
			only = optarg;
	}
	if (optind != argc)
		tool_usage_error(TOOL_USAGE_BENCH, "bench: unexpected argument \"%s\"",
				 argv[optind]);
	if (from && (sock || only || b.quick))
		tool_usage_error(TOOL_USAGE_BENCH,
				 "bench: --from reads a saved run: no --socket, --only or --quick");
	if (from)
		return saved_run(&b, from, json, plot);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return tool_fail("bench", "cannot find itself");
	self[n] = '\0';
	(void)snprintf(b.dir, sizeof(b.dir), "%s", dirname(self));
	if (tool_daemon_path(b.gpuxd, sizeof(b.gpuxd)) < 0) {
		char why[sizeof(b.gpuxd) + 64];

		(void)snprintf(why, sizeof(why),
			       "no gpuxd at %s nor on the PATH (GPUX_DAEMON names "
			       "it)",
			       b.gpuxd);
		return tool_fail("bench", why);
	}
	(void)snprintf(b.tmp, sizeof(b.tmp), "/tmp/gpux-bench-XXXXXX");
	if (!mkdtemp(b.tmp))
		return tool_fail("bench", "mkdtemp");
	(void)snprintf(b.cubin, sizeof(b.cubin), "%s/bench.cubin", b.tmp);
	if (sock)
		(void)snprintf(b.sock, sizeof(b.sock), "%s", sock);
	else
		(void)ipc_client_socket(b.sock, sizeof(b.sock), &(bool){ false });

	/* From here on, every way out removes the scratch folder. */
	rc = run(&b, sock, &info, only);
	gpux_module_free(b.m);
	gpux_disconnect(b.ctx);
	{
		char cmd[PATH_MAX + 16];
		(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", b.tmp);
		(void)system(cmd);
	}
	if (rc == -2) {
		(void)fputs(TOOL_USAGE_BENCH, stderr);
		return TOOL_USAGE;
	}
	if (rc < 0)
		return TOOL_FAIL;
	/* With --json, stdout holds the JSON alone; the table is for the person watching. */
	print_table(json ? stderr : stdout, &b);
	if (json && print_json(&b, info.name) != TOOL_OK)
		return TOOL_FAIL;
	if (plot && bench_plot(&b, info.name, plot) < 0)
		return TOOL_FAIL;
	return rc > 0 ? TOOL_FAIL : TOOL_OK;
}
