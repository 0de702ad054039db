/* SPDX-License-Identifier: MIT */
/* tests/e2e.c: starting, querying and stopping a real gpuxd for end-to-end tests. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "admin.h"
#include "channel.h"
#include "e2e.h"
#include "helpers.h"
#include "macro.h"

extern char **environ;

#define WAIT_NS (20ULL * NSEC_PER_SEC)

const char test_host_kernels[] =
	"#include <time.h>\n"
	/* CLOCK_MONOTONIC in ns, as the test processes read it (mono_ns()). */
	"static uint64_t now_ns(void)\n"
	"{\n"
	"	struct timespec t;\n"
	"	clock_gettime(CLOCK_MONOTONIC, &t);\n"
	"	return (uint64_t)t.tv_sec * 1000000000 + (uint64_t)t.tv_nsec;\n"
	"}\n"
	/* Busy for ns nanoseconds; when it stopped. */
	"static uint64_t busy_ns(uint64_t ns)\n"
	"{\n"
	"	uint64_t a = now_ns(), b;\n"
	"	do b = now_ns();\n"
	"	while (b - a < ns);\n"
	"	return b;\n"
	"}\n"
	"GPUX_HOST_PARAMS(saxpy, 8, 4, sizeof(float *), sizeof(float *), sizeof(float *));\n"
	"GPUX_HOST_KERNEL(saxpy)\n"
	"{\n"
	"	uint64_t n = GPUX_ARG(uint64_t, 0);\n"
	"	float a = GPUX_ARG(float, 1);\n"
	"	const float *x = GPUX_ARG(const float *, 2), *y = GPUX_ARG(const float *, 3);\n"
	"	float *out = GPUX_ARG(float *, 4);\n"
	"	GPUX_FOR_EACH_THREAD(t) {\n"
	"		uint64_t i = GPUX_GLOBAL_X(t);\n"
	"		if (i < n) out[i] = a * x[i] + y[i];\n"
	"	}\n"
	"}\n"
	/* One partial sum per block, through the block's shared memory as CUDA code would. */
	"GPUX_HOST_PARAMS(block_sum, 8, sizeof(float *), sizeof(double *));\n"
	"GPUX_HOST_KERNEL(block_sum)\n"
	"{\n"
	"	uint64_t n = GPUX_ARG(uint64_t, 0);\n"
	"	const float *x = GPUX_ARG(const float *, 1);\n"
	"	double *out = GPUX_ARG(double *, 2), *sh = gpux->shared;\n"
	"	GPUX_FOR_EACH_THREAD(t) {\n"
	"		uint64_t i = GPUX_GLOBAL_X(t);\n"
	"		sh[t.x] = i < n ? x[i] : 0.0;\n"
	"	}\n"
	"	for (uint32_t s = gpux->block_dim.x / 2; s > 0; s /= 2)\n"
	"		GPUX_FOR_EACH_THREAD(t)\n"
	"			if (t.x < s) sh[t.x] += sh[t.x + s];\n"
	"	out[gpux->block_idx.x] = sh[0];\n"
	"}\n"
	"GPUX_HOST_PARAMS(add1, 8, sizeof(float *), sizeof(float *));\n"
	"GPUX_HOST_KERNEL(add1)\n"
	"{\n"
	"	uint64_t n = GPUX_ARG(uint64_t, 0);\n"
	"	const float *in = GPUX_ARG(const float *, 1);\n"
	"	float *out = GPUX_ARG(float *, 2);\n"
	"	GPUX_FOR_EACH_THREAD(t) { uint64_t i = GPUX_GLOBAL_X(t); if (i < n) out[i] = in[i] "
	"+ 1; }\n"
	"}\n"
	"GPUX_HOST_PARAMS(mul2, 8, sizeof(float *), sizeof(float *));\n"
	"GPUX_HOST_KERNEL(mul2)\n"
	"{\n"
	"	uint64_t n = GPUX_ARG(uint64_t, 0);\n"
	"	const float *in = GPUX_ARG(const float *, 1);\n"
	"	float *out = GPUX_ARG(float *, 2);\n"
	"	GPUX_FOR_EACH_THREAD(t) { uint64_t i = GPUX_GLOBAL_X(t); if (i < n) out[i] = in[i] "
	"* 2; }\n"
	"}\n"
	"GPUX_HOST_PARAMS(sub3, 8, sizeof(float *), sizeof(float *));\n"
	"GPUX_HOST_KERNEL(sub3)\n"
	"{\n"
	"	uint64_t n = GPUX_ARG(uint64_t, 0);\n"
	"	const float *in = GPUX_ARG(const float *, 1);\n"
	"	float *out = GPUX_ARG(float *, 2);\n"
	"	GPUX_FOR_EACH_THREAD(t) { uint64_t i = GPUX_GLOBAL_X(t); if (i < n) out[i] = in[i] "
	"- 3; }\n"
	"}\n"
	/* Busy for ms milliseconds: a request that is surely in flight. */
	"GPUX_HOST_PARAMS(spin, 4);\n"
	"GPUX_HOST_KERNEL(spin)\n"
	"{\n"
	"	busy_ns(GPUX_ARG(uint32_t, 0) * 1000000ull);\n"
	"}\n"
	/* Busy for us microseconds: requests that take a while but not long. */
	"GPUX_HOST_PARAMS(spin_us, 4);\n"
	"GPUX_HOST_KERNEL(spin_us)\n"
	"{\n"
	"	busy_ns(GPUX_ARG(uint32_t, 0) * 1000ull);\n"
	"}\n"
	/* Busy for us microseconds, then logs when it ended (CLOCK_MONOTONIC, ns) after the
	 * log's count: when each of a queue's requests ran, for a test of who ran before whom. */
	"GPUX_HOST_PARAMS(spin_us_log, 4, sizeof(uint64_t *));\n"
	"GPUX_HOST_KERNEL(spin_us_log)\n"
	"{\n"
	"	uint64_t *log = GPUX_ARG(uint64_t *, 1);\n"
	"	log[1 + log[0]++] = busy_ns(GPUX_ARG(uint32_t, 0) * 1000ull);\n"
	"}\n"
	/* Writes when it ran (CLOCK_MONOTONIC, ns). */
	"GPUX_HOST_PARAMS(stamp, sizeof(uint64_t *));\n"
	"GPUX_HOST_KERNEL(stamp)\n"
	"{\n"
	"	*GPUX_ARG(uint64_t *, 0) = now_ns();\n"
	"}\n"
	/* An illegal address, as a faulting GPU kernel has. */
	"GPUX_HOST_PARAMS(crash, sizeof(float *));\n"
	"GPUX_HOST_KERNEL(crash)\n"
	"{\n"
	"	volatile float *p = GPUX_ARG(float *, 0);\n"
	"	p[-(1L << 40)] = 1;\n"
	"}\n"
	"GPUX_HOST_KERNEL(empty)\n"
	"{\n"
	"}\n"
	/* For queues that overlap: one waits (10 s at most) for a flag that the other sets;
	 * seen is -1 while it waits, then the flag it saw. */
	"GPUX_HOST_PARAMS(wait_flag, sizeof(int *), sizeof(int *));\n"
	"GPUX_HOST_KERNEL(wait_flag)\n"
	"{\n"
	"	volatile int *flag = GPUX_ARG(int *, 0);\n"
	"	volatile int *seen = GPUX_ARG(int *, 1);\n"
	"	struct timespec ms = { 0, 1000000 };\n"
	"	*seen = -1;\n"
	"	for (int i = 0; i < 10000 && !*flag; i++)\n"
	"		nanosleep(&ms, NULL);\n"
	"	*seen = *flag;\n"
	"}\n"
	/* Appends its index to a log: the order requests of one queue ran in. */
	"GPUX_HOST_PARAMS(append, 4, sizeof(uint32_t *));\n"
	"GPUX_HOST_KERNEL(append)\n"
	"{\n"
	"	uint32_t *log = GPUX_ARG(uint32_t *, 1);\n"
	"	log[1 + log[0]++] = GPUX_ARG(uint32_t, 0);\n"
	"}\n"
	"GPUX_HOST_PARAMS(set_flag, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(set_flag)\n"
	"{\n"
	"	*GPUX_ARG(volatile int *, 0) = 1;\n"
	"}\n";

const size_t test_host_kernels_len = sizeof(test_host_kernels) - 1;

static const char *daemon_path(void)
{
	const char *p = getenv("GPUX_DAEMON");

	assert_non_null(p);
	return p;
}

void test_daemon_start(struct test_daemon *d, const char *const *args)
{
	test_daemon_start_at(d, NULL, args);
}

/* Start gpuxd and wait until every device is ready (0); with ret_status, -ECHILD when gpuxd
 * exited first (its wait status there). Asserts otherwise. */
static int daemon_start(struct test_daemon *d, const char *sock, const char *const *args,
			int *ret_status)
{
	char *argv[48];
	unsigned argc = 0;
	posix_spawn_file_actions_t fa;
	uint64_t until = mono_ns() + WAIT_NS;
	int r;

	memset(d, 0, sizeof(*d));
	(void)snprintf(d->dir, sizeof(d->dir), "/tmp/gpux-test-XXXXXX");
	assert_non_null(mkdtemp(d->dir));
	if (sock)
		(void)snprintf(d->sock, sizeof(d->sock), "%s", sock);
	else
		(void)snprintf(d->sock, sizeof(d->sock), "%s/gpuxd.sock", d->dir);
	(void)snprintf(d->cache, sizeof(d->cache), "%s/cache", d->dir);
	(void)snprintf(d->log, sizeof(d->log), "%s/gpuxd.log", d->dir);
	argv[argc++] = (char *)daemon_path();
	argv[argc++] = "--socket";
	argv[argc++] = d->sock;
	argv[argc++] = "--cache-dir";
	argv[argc++] = d->cache;
	argv[argc++] = "--backend";
	argv[argc++] = "host";
	for (unsigned i = 0; args && args[i] && argc < ARRAY_SIZE(argv) - 1; i++)
		argv[argc++] = (char *)args[i];
	argv[argc] = NULL;

	(void)posix_spawn_file_actions_init(&fa);
	/* Nothing of the daemon's may keep this test's output open after it is gone. */
	(void)posix_spawn_file_actions_addopen(&fa, 1, d->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
	(void)posix_spawn_file_actions_adddup2(&fa, 1, 2);
	r = posix_spawn(&d->pid, argv[0], &fa, NULL, argv, environ);
	(void)posix_spawn_file_actions_destroy(&fa);
	assert_int_equal(r, 0);

	for (;;) {
		struct ipc_status st;
		struct ipc_dev_status devs[IPC_DEVICES_MAX];
		bool ready = false;

		if (test_daemon_status(d, &st, devs) == 0) {
			ready = st.ndevices > 0;
			for (uint32_t i = 0; i < st.ndevices; i++)
				ready = ready && devs[i].state == GPUX_DEVICE_READY;
		}
		if (ready)
			return 0;
		if (ret_status && waitpid(d->pid, ret_status, WNOHANG) == d->pid) {
			d->pid = 0;
			return -ECHILD;
		}
		if (mono_ns() > until)
			fail_msg("gpuxd did not become ready (log: %s)", d->log);
		(void)usleep(5000);
	}
}

void test_daemon_start_at(struct test_daemon *d, const char *sock, const char *const *args)
{
	assert_int_equal(daemon_start(d, sock, args, NULL), 0);
}

int test_daemon_try_start(struct test_daemon *d, const char *const *args, int *ret_status)
{
	return daemon_start(d, NULL, args, ret_status);
}

/* Whether the daemon's log (its workers' too) holds a sanitizer's report, or the fake libcuda's
 * (driver objects a worker never released). */
static bool log_has_sanitizer_report(const char *path)
{
	static const char *const marks[] = { "AddressSanitizer", "LeakSanitizer", "ThreadSanitizer",
					     "runtime error:", "fake libcuda:" };
	char line[1024];
	bool found = false;
	FILE *f = fopen(path, "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		for (unsigned i = 0; i < ARRAY_SIZE(marks); i++)
			found = found || strstr(line, marks[i]);
	(void)fclose(f);
	return found;
}

void test_daemon_stop(struct test_daemon *d)
{
	char cmd[600];
	int st;

	if (d->pid > 0) {
		assert_int_equal(kill(d->pid, SIGTERM), 0);
		assert_int_equal(waitpid(d->pid, &st, 0), d->pid);
		d->pid = 0;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || log_has_sanitizer_report(d->log)) {
			(void)snprintf(cmd, sizeof(cmd), "cat %s >&2", d->log);
			(void)system(cmd);
			fail_msg("gpuxd exited with %#x, or reported a bug", st);
		}
	}
	(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
	(void)system(cmd);
}

int test_daemon_status(const struct test_daemon *d, struct ipc_status *ret,
		       struct ipc_dev_status *devs)
{
	int fd = ipc_admin_connect(d->sock, 5000, NULL, 0), r;

	if (fd < 0)
		return fd;
	r = ipc_admin_status(fd, 5000, ret, devs);
	(void)close(fd);
	return r;
}

pid_t test_daemon_pid_at(const char *sock)
{
	struct test_daemon p = { 0 };
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	char path[64], buf[512];
	const char *fields;
	int ppid = 0;

	(void)snprintf(p.sock, sizeof(p.sock), "%s", sock);
	assert_int_equal(test_daemon_status(&p, &st, devs), 0);
	(void)snprintf(path, sizeof(path), "/proc/%u/stat", devs[0].pid);
	fields = proc_stat_fields(path, buf, sizeof(buf));
	assert_non_null(fields);
	assert_int_equal(sscanf(fields, "%*c %d", &ppid), 1);
	return ppid;
}

void test_stop_pid(pid_t pid)
{
	assert_int_equal(kill(pid, SIGTERM), 0);
	for (int i = 0; i < 2000 && kill(pid, 0) == 0; i++)
		(void)usleep(5000);
	assert_int_equal(kill(pid, 0), -1);
}

pid_t test_worker_pid(const struct test_daemon *d, uint32_t device)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(d, &st, devs), 0);
	assert_true(device < st.ndevices);
	assert_int_equal(devs[device].state, GPUX_DEVICE_READY);
	return (pid_t)devs[device].pid;
}

struct gen_arg {
	uint32_t generation;
};

pid_t test_compiler_of(pid_t worker)
{
	DIR *proc = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	assert_non_null(proc);
	while (!found && (e = readdir(proc))) {
		char path[320], buf[512];
		const char *fields;
		int ppid = 0;
		ssize_t n;
		int fd;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		(void)snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		fields = proc_stat_fields(path, buf, sizeof(buf));
		if (!fields || sscanf(fields, "%*c %d", &ppid) != 1 || ppid != worker)
			continue;
		(void)snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
		if (fd >= 0)
			(void)close(fd);
		/* argv[1], after argv[0]'s NUL. */
		if (n > 0 && memchr(buf, '\0', (size_t)n) &&
		    strcmp(buf + strlen(buf) + 1, "--compiler") == 0)
			found = (pid_t)atoi(e->d_name);
	}
	(void)closedir(proc);
	return found;
}

bool test_have_nvrtc(void)
{
	return access("/usr/local/cuda/lib64/libnvrtc.so", R_OK) == 0 || getenv("GPUX_NVRTC_LIB");
}

static bool newer_ready(const struct ipc_dev_status *s, void *arg)
{
	return s->state == GPUX_DEVICE_READY && s->generation > ((struct gen_arg *)arg)->generation;
}

void test_wait_generation(const struct test_daemon *d, uint32_t device, uint32_t generation)
{
	struct gen_arg a = { generation };

	test_wait_stats(d, device, newer_ready, &a);
}

void test_wait_stats(const struct test_daemon *d, uint32_t device,
		     bool (*pred)(const struct ipc_dev_status *s, void *arg), void *arg)
{
	uint64_t until = mono_ns() + WAIT_NS;

	for (;;) {
		struct ipc_status st;
		struct ipc_dev_status devs[IPC_DEVICES_MAX];

		if (test_daemon_status(d, &st, devs) == 0 && device < st.ndevices &&
		    pred(&devs[device], arg))
			return;
		if (mono_ns() > until)
			fail_msg("device %u never reached the state waited for", device);
		(void)usleep(5000);
	}
}

/* Whether a line of the file at path holds `what`. */
static bool file_has(const char *path, const char *what)
{
	char line[4096];
	bool found = false;
	FILE *f = fopen(path, "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	(void)fclose(f);
	return found;
}

bool test_log_wait(const struct test_daemon *d, const char *what)
{
	uint64_t until = mono_ns() + WAIT_NS;

	while (!file_has(d->log, what))
		if (mono_ns() > until)
			return false;
		else
			(void)usleep(5000);
	return true;
}

gpux_ctx *test_connect(const struct test_daemon *d)
{
	gpux_ctx *ctx = NULL;

	assert_int_equal(gpux_connect(d->sock, &ctx), GPUX_OK);
	return ctx;
}

gpux_module *test_load_host_kernels(gpux_ctx *ctx)
{
	gpux_module *m = NULL;
	char *log = NULL;
	gpux_status st = gpux_module_load(ctx, GPUX_LANG_HOST, test_host_kernels,
					  test_host_kernels_len, NULL, &m, &log);

	if (st != GPUX_OK)
		fail_msg("loading the test kernels: %s\n%s", gpux_strerror(st), log ? log : "");
	free(log);
	return m;
}

gpux_status test_spin_submit(gpux_module *m, uint32_t device, uint32_t ms, gpux_req **ret_req)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .device = device };
	struct gpux_arg arg = GPUX_ARG_VALUE(ms);

	return gpux_submit(m, "spin", &l, &arg, 1, ret_req);
}

gpux_status test_spin_run(gpux_module *m, uint32_t device, uint32_t ms)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .device = device };
	struct gpux_arg arg = GPUX_ARG_VALUE(ms);

	return gpux_run(m, "spin", &l, &arg, 1);
}

void test_fill_random(float *p, size_t n, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++) {
		*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (float)((double)(*seed >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
	}
}

struct gpux_launch test_launch_1d(uint64_t n, uint32_t device, gpux_queue *q)
{
	struct gpux_launch l = {
		.grid = { (uint32_t)((n + 127) / 128), 1, 1 },
		.block = { 128, 1, 1 },
		.device = device,
		.queue = q,
	};
	return l;
}

uint32_t test_add1_cached(gpux_ctx *ctx, gpux_module *m, gpux_buf *in, uint64_t n, uint32_t dev)
{
	struct gpux_launch l = test_launch_1d(n, dev, NULL);
	struct gpux_arg args[3];
	gpux_buf *out;
	gpux_req *r;
	uint32_t got;

	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &out), GPUX_OK);
	memset(gpux_buf_data(out), 0xff, n * 4);
	args[0] = GPUX_ARG_VALUE(n);
	args[1] = gpux_arg_cached(in, 0, n * 4);
	args[2] = gpux_arg_out(out, 0, n * 4);
	assert_int_equal(gpux_submit(m, "add1", &l, args, 3, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, -1), GPUX_OK);
	got = gpux_req_device(r);
	gpux_req_free(r);
	for (uint64_t i = 0; i < n; i++)
		assert_float_equal(((float *)gpux_buf_data(out))[i],
				   ((float *)gpux_buf_data(in))[i] + 1, 0);
	gpux_buf_free(out);
	return got;
}

gpux_status test_saxpy(gpux_ctx *ctx, gpux_module *m, uint32_t device, uint64_t n, uint64_t *seed)
{
	gpux_buf *x, *y, *out;
	float a = 3.0f;
	gpux_status st;

	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &x), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &y), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(ctx, n * 4, &out), GPUX_OK);
	test_fill_random(gpux_buf_data(x), n, seed);
	test_fill_random(gpux_buf_data(y), n, seed);
	{
		struct gpux_arg args[] = {
			GPUX_ARG_VALUE(n),           GPUX_ARG_VALUE(a),
			gpux_arg_in(x, 0, n * 4),    gpux_arg_in(y, 0, n * 4),
			gpux_arg_out(out, 0, n * 4),
		};
		struct gpux_launch l = test_launch_1d(n, device, NULL);

		st = gpux_run(m, "saxpy", &l, args, ARRAY_SIZE(args));
	}
	if (st == GPUX_OK) {
		const float *px = gpux_buf_data(x), *py = gpux_buf_data(y),
			    *po = gpux_buf_data(out);

		for (uint64_t i = 0; i < n; i++)
			assert_float_equal(po[i], a * px[i] + py[i], 1e-6);
	}
	gpux_buf_free(out);
	gpux_buf_free(y);
	gpux_buf_free(x);
	return st;
}

struct test_env *test_env_open(const char *const *args)
{
	struct test_env *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	test_daemon_start(&e->d, args);
	e->ctx = test_connect(&e->d);
	e->m = test_load_host_kernels(e->ctx);
	e->seed = (uint64_t)mono_ns();
	return e;
}

void test_env_close(struct test_env *e)
{
	gpux_module_free(e->m);
	gpux_disconnect(e->ctx);
	test_daemon_stop(&e->d);
	free(e);
}

int test_env_setup(void **state)
{
	*state = test_env_open(NULL);
	return 0;
}

int test_env_setup_two_devices(void **state)
{
	static const char *const args[] = { "--host-devices", "2", NULL };

	*state = test_env_open(args);
	return 0;
}

int test_env_teardown(void **state)
{
	test_env_close(*state);
	return 0;
}

void test_env_still_serves(const struct test_env *e)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };

	assert_int_equal(gpux_run(e->m, "empty", &l, NULL, 0), GPUX_OK);
}

int test_raw_connect(const struct test_daemon *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memcpy(sa.sun_path, d->sock, strlen(d->sock));
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

int test_raw_channel(const struct test_daemon *d, int *ret_sup)
{
	struct ipc_hello h = { .min_version = 1, .max_version = IPC_VERSION };
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_msg msg;
	int sup = test_raw_connect(d), chan = -1, n;

	n = ipc_encode(buf, sizeof(buf), IPC_HELLO, 1, 0, &h, sizeof(h), NULL, 0);
	assert_int_equal(ipc_channel_send(sup, buf, (size_t)n, NULL, 0, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(msg.hdr.type, IPC_WELCOME);
	assert_int_equal(ipc_channel_recv_msg(sup, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(msg.hdr.type, IPC_DEVICE);
	assert_int_equal(msg.nfds, 2);
	chan = ipc_msg_take_fd(&msg, 0);
	ipc_msg_close_fds(&msg);
	/* The worker offers its rings first; a client that ignores them has the socket. Then its
	 * page of the marks, which a client may ignore too. */
	assert_int_equal(ipc_channel_recv_msg(chan, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(msg.hdr.type, IPC_RINGS);
	ipc_msg_close_fds(&msg);
	assert_int_equal(ipc_channel_recv_msg(chan, buf, sizeof(buf), &msg, 0), 1);
	assert_int_equal(msg.hdr.type, IPC_MARKS);
	ipc_msg_close_fds(&msg);
	*ret_sup = sup;
	return chan;
}

bool test_closed_by_peer(int fd)
{
	static uint8_t buf[IPC_MSG_MAX];

	for (int i = 0; i < 100; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int fds[IPC_FDS_MAX];
		unsigned nfds;
		ssize_t n;

		if (poll(&p, 1, 100) <= 0)
			continue;
		n = ipc_channel_recv(fd, buf, sizeof(buf), fds, &nfds, MSG_DONTWAIT);
		for (unsigned k = 0; k < nfds && n > 0; k++)
			(void)close(fds[k]);
		if (n == 0 || (n < 0 && n != -EAGAIN))
			return true;
	}
	return false;
}

void test_send_seg(int chan, uint64_t id, uint64_t size, uint32_t flags, int fd)
{
	uint8_t buf[128];
	struct ipc_seg_add a = { .seg_id = id, .size = size, .flags = flags };
	int n = ipc_encode(buf, sizeof(buf), IPC_SEG_ADD, 0, 1, &a, sizeof(a), NULL, 0);

	assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, &fd, 1, 0), 0);
}

int test_raw_done(int chan, uint32_t id, int timeout_ms, char *text, size_t cap)
{
	static uint8_t buf[IPC_MSG_MAX];

	for (;;) {
		struct pollfd p = { .fd = chan, .events = POLLIN };
		struct ipc_done_msg d;
		struct ipc_msg m;

		if (poll(&p, 1, timeout_ms) != 1)
			fail_msg("no answer to request %u within %d ms", id, timeout_ms);
		assert_int_equal(ipc_channel_recv_msg(chan, buf, sizeof(buf), &m, 0), 1);
		ipc_msg_close_fds(&m);
		if (m.hdr.type != IPC_DONE || m.hdr.id != id)
			continue;
		assert_int_equal(ipc_decode_done(&m, &d), 0);
		if (cap) {
			size_t len = MIN((size_t)d.m.text_len, cap - 1);
			memcpy(text, d.text, len);
			text[len] = '\0';
		}
		return d.m.status;
	}
}

int test_raw_call(int chan, const void *msg, size_t n, char *text, size_t cap)
{
	struct ipc_hdr h;

	memcpy(&h, msg, sizeof(h));
	assert_int_equal(ipc_channel_send(chan, msg, n, NULL, 0, 0), 0);
	return test_raw_done(chan, h.id, 10000, text, cap);
}

unsigned test_gpu_count(void)
{
	char cmd[600];
	const char *w = getenv("GPUX_WORKER");
	unsigned lines = 0;
	FILE *f;
	int c;

	if (!w)
		return 0;
	(void)snprintf(cmd, sizeof(cmd), "%s --probe --backend cuda 2>/dev/null", w);
	f = popen(cmd, "re");
	if (!f)
		return 0;
	while ((c = fgetc(f)) != EOF)
		lines += c == '\n';
	return pclose(f) == 0 ? lines : 0;
}

void test_gpu_require(unsigned n)
{
	unsigned have = test_gpu_count();

	if (have >= n)
		return;
	(void)fprintf(stderr, "%u CUDA devices, %u needed: skipped\n", have, n);
	exit(77);
}

int test_daemon_setup(void **state)
{
	*state = calloc(1, sizeof(struct test_daemon));
	return *state ? 0 : -1;
}

int test_daemon_teardown(void **state)
{
	test_daemon_stop(*state);
	free(*state);
	return 0;
}
