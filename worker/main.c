/* SPDX-License-Identifier: MIT */
/* worker/main.c: gpux-worker, one process per device, exec'd by gpuxd (or run with --probe). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>

#include "macro.h"
#include "spin.h"
#include "wrk.h"
#ifdef GPUX_HAVE_CUDA
#include "compiler.h"
#endif

/* One line per device, tab-separated, for gpuxd: see parse_probe_line() in supervisor/workers.c. */
static void probe_print(const char *backend, const struct ipc_device_info *d)
{
	char uuid[33];
	char name[sizeof(d->name)];

	for (unsigned i = 0; i < 16; i++)
		(void)snprintf(uuid + 2 * i, 3, "%02x", d->uuid[i]);
	memcpy(name, d->name, sizeof(name));
	name[sizeof(name) - 1] = '\0';
	for (char *p = name; *p; p++)
		if (*p == '\t' || *p == '\n')
			*p = ' ';
	printf("device\t%u\t%s\t%u\t%u\t%u\t%u\t%llu\t%s\t%s\n", d->index, backend, d->cc_major,
	       d->cc_minor, d->sm_count, d->max_threads_per_block, (unsigned long long)d->mem_total,
	       uuid, name);
}

/*
 * --probe: list the devices of the back end asked for; "auto" is CUDA when a device answers,
 * else the host. Exit 0 with at least one line, or 1 with a reason on stderr.
 */
static int probe(const char *backend)
{
	struct ipc_device_info devs[IPC_DEVICES_MAX];
	const struct wrk_backend_ops *be;
	char *msg = NULL;
	unsigned n = 0;
	gpux_status r;

	if (strcmp(backend, "auto") == 0) {
#ifdef GPUX_HAVE_CUDA
		r = wrk_backend_cuda.probe(devs, IPC_DEVICES_MAX, &n, &msg);
		if (r == 0 && n > 0) {
			for (unsigned i = 0; i < n; i++)
				probe_print("cuda", &devs[i]);
			return 0;
		}
		if (msg)
			(void)fprintf(stderr, "gpux-worker: cuda: %s; using the host back end\n",
				      msg);
		free(msg);
		msg = NULL;
#endif
		backend = "host";
	}
	be = wrk_backend_find(backend);
	if (!be) {
		(void)fprintf(stderr, "gpux-worker: no back end \"%s\" in this build\n", backend);
		return 1;
	}
	r = be->probe(devs, IPC_DEVICES_MAX, &n, &msg);
	if (r < 0 || n == 0) {
		(void)fprintf(stderr, "gpux-worker: %s: %s\n", backend,
			      msg     ? msg
			      : r < 0 ? ipc_status_text(r)
				      : "no devices");
		free(msg);
		return 1;
	}
	for (unsigned i = 0; i < n; i++)
		probe_print(be->name, &devs[i]);
	return 0;
}

/* $GPUX_CACHE_DIR, $XDG_CACHE_HOME/gpux, ~/.cache/gpux; NULL: no disk cache. */
static char *default_cache_dir(void)
{
	const char *x = getenv("GPUX_CACHE_DIR");
	const char *home;

	if (x && *x == '/')
		return strdup(x);
	x = getenv("XDG_CACHE_HOME");
	if (x && *x == '/')
		return wrk_strdup_printf("%s/gpux", x);
	home = getenv("HOME");
	if (home && *home == '/') {
		char *base = wrk_strdup_printf("%s/.cache", home);
		if (base)
			(void)mkdir(base, 0700);
		free(base);
		return wrk_strdup_printf("%s/.cache/gpux", home);
	}
	return NULL;
}

/* Every client segment holds a mapping, not an fd; still, clients bring fds: allow many. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int map_status_page(struct wrk *w)
{
	struct stat st;
	void *p;

	if (fstat(w->opts.status_fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < IPC_STATUS_PAGE_SIZE)
		return -EINVAL;
	p = mmap(NULL, IPC_STATUS_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, w->opts.status_fd,
		 0);
	if (p == MAP_FAILED)
		return -errno;
	/* The mapping is all the worker needs: the fd, which crossed gpuxd's exec without
	 * close-on-exec, would go on to every process the worker starts. */
	w->opts.status_fd = safe_close(w->opts.status_fd);
	w->status = p;
	memset(p, 0, sizeof(*w->status));
	w->status->magic = IPC_STATUS_MAGIC;
	return 0;
}

/* gpux top's table of this worker's clients (ipc/status.h), when gpuxd gave one. */
static int map_client_table(struct wrk *w)
{
	struct stat st;
	void *p;

	if (w->opts.clients_fd < 0)
		return 0;
	if (fstat(w->opts.clients_fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < IPC_CLIENT_TABLE_SIZE)
		return -EINVAL;
	p = mmap(NULL, IPC_CLIENT_TABLE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
		 w->opts.clients_fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	w->opts.clients_fd = safe_close(w->opts.clients_fd);
	w->client_table = p;
	w->client_table->nrows = IPC_WORKER_CLIENTS_MAX;
	__atomic_store_n(&w->client_table->magic, IPC_CLIENT_TABLE_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

/*
 * Whether the loop asks for a kernel thread to take its io_uring submissions: when
 * $GPUX_SQPOLL says so (anything but 0). What it takes off the loop's thread is above all the
 * kicks that wake sleeping clients: with 16 client processes each keeping 32 launches in
 * flight on an H200, 64 µs of every round of the loop, in which it neither took a
 * latency-critical client's record nor answered one. Not by default: the thread spins for
 * IPC_LOOP_SQPOLL_IDLE_MS after each submission, so a client that sleeps between requests a
 * few ms apart keeps a CPU busy (0.9 of one at 3 ms apart on the host back end).
 */
static unsigned loop_flags(void)
{
	const char *e = getenv("GPUX_SQPOLL");

	return e && *e && strcmp(e, "0") != 0 ? IPC_LOOP_SQPOLL : 0;
}

static int worker_init(struct wrk *w)
{
	bool marks;
	char *msg = NULL;
	gpux_status st;
	unsigned flags;
	int r;

	w->be = wrk_backend_find(w->opts.backend);
	if (!w->be) {
		wrk_log(w, "no back end \"%s\" in this build", w->opts.backend);
		return -EINVAL;
	}
	r = map_status_page(w);
	if (r < 0) {
		wrk_log(w, "status page: %s", strerror(-r));
		return r;
	}
	r = map_client_table(w);
	if (r < 0) {
		wrk_log(w, "table of clients: %s", strerror(-r));
		return r;
	}
	/* Device memory by user, over every worker: mapped, and its fd closed as the page's. */
	if (w->opts.ledger_fd >= 0) {
		r = ipc_ledger_map(w->opts.ledger_fd, &w->ledger);
		w->opts.ledger_fd = safe_close(w->opts.ledger_fd);
		if (r == 0 && w->opts.device >= w->ledger->ndevices)
			r = -ERANGE;
		if (r < 0) {
			wrk_log(w, "the ledger of device memory: %s", strerror(-r));
			return r;
		}
	}
	/* The control socket crossed gpuxd's exec too: no child (the compiler, cc) gets it. */
	if (fcntl(w->opts.control_fd, F_SETFD, FD_CLOEXEC) < 0) {
		r = -errno;
		wrk_log(w, "control socket: %s", strerror(-r));
		return r;
	}
	flags = loop_flags();
	r = ipc_loop_new_ex(IPC_LOOP_AUTO, flags, &w->loop);
	if (r < 0) {
		wrk_log(w, "event loop: %s", strerror(-r));
		return r;
	}
	if (ipc_loop_fallback(w->loop))
		wrk_log(w, "io_uring refused (%s): using epoll",
			strerror(-ipc_loop_fallback(w->loop)));
	else if ((flags & IPC_LOOP_SQPOLL) && !ipc_loop_sqpoll(w->loop))
		wrk_log(w, "io_uring: the kernel refused a thread to take the loop's submissions");

	st = w->be->open(w, w->opts.device, &w->dev, &w->info, &w->limits, &msg);
	if (st < 0) {
		wrk_log(w, "%s device %u: %s", w->be->name, w->opts.device,
			msg ? msg : ipc_status_text(st));
		free(msg);
		return -ENODEV;
	}
	w->info.index = w->opts.device;
	r = wrk_slots_open(w);
	if (r < 0)
		return r;
	/* Without them (no memory for them), no request of this worker's runs again after its
	 * death: its clients get no page. */
	r = wrk_marks_start(w);
	if (r < 0)
		wrk_log(w, "marks: %s: requests will not run again after a fault", strerror(-r));
	marks = r == 0;
	r = wrk_modules_start(w);
	if (r < 0) {
		wrk_log(w, "compile thread: %s", strerror(-r));
		return r;
	}
	if (!w->opts.quota_device)
		w->opts.quota_device = w->info.mem_total / 2;
	wrk_user_caps(w);
	if (!w->opts.device_reserve)
		w->opts.device_reserve = MIN(w->info.mem_total / 16, IPC_OPT_DEVICE_RESERVE_MAX);
	r = wrk_dcache_start(w);
	if (r < 0)
		return r;
	r = wrk_segments_start(w);
	if (r < 0) {
		wrk_log(w, "registration thread: %s", strerror(-r));
		return r;
	}
	ipc_status_write_begin(w->status);
	w->status->nslots = w->nslots;
	w->status->limits = (struct ipc_launch_limits){
		.max_threads_per_block = w->limits.max_threads_per_block,
		.max_block = { w->limits.max_block[0], w->limits.max_block[1],
			       w->limits.max_block[2] },
		.max_grid = { w->limits.max_grid[0], w->limits.max_grid[1], w->limits.max_grid[2] },
		.max_shared_per_block = w->limits.max_shared_per_block_optin,
	};
	w->status->features = IPC_STATUS_MARK_DONE | (marks ? IPC_STATUS_MARKS : 0);
	w->status->ready = 1;
	ipc_status_write_end(w->status);
	wrk_status_publish(w);
	return wrk_server_start(w);
}

static void worker_done(struct wrk *w)
{
	if (w->loop)
		wrk_server_stop(w);
	wrk_modules_stop(w);
	wrk_segments_stop(w);
	if (w->dev)
		wrk_dcache_stop(w);
	if (w->dev)
		wrk_marks_stop(w);
	if (w->dev)
		w->be->close(w->dev);
	w->done_fd = safe_close(w->done_fd);
	ipc_map_done(&w->mappings);
	wrk_reqs_free_cache(w);
	ipc_map_done(&w->users);
	ipc_loop_free(w->loop);
	if (w->status)
		(void)munmap(w->status, IPC_STATUS_PAGE_SIZE);
	if (w->client_table)
		(void)munmap(w->client_table, IPC_CLIENT_TABLE_SIZE);
	ipc_ledger_unmap(w->ledger);
	(void)pthread_mutex_destroy(&w->done_lock);
	(void)pthread_mutex_destroy(&w->job_lock);
	(void)pthread_cond_destroy(&w->job_cond);
}

int main(int argc, char **argv)
{
	static const struct ipc_worker_opts defaults = IPC_WORKER_OPTS_DEFAULTS;
	static struct wrk w;
	_cleanup_(freep) char *cache = NULL;
	char why[256];
	sigset_t mask;
	int r;

	w.opts = defaults;
	w.done_fd = -1;
	w.signal_fd = -1;
	r = ipc_opt_parse(&ipc_worker_prog, argc, argv, &w.opts, why, sizeof(why));
	if (r == IPC_OPT_HELP) {
		ipc_opt_usage(&ipc_worker_prog, stdout);
		return 0;
	}
	if (r < 0) {
		(void)fprintf(stderr, "gpux-worker: %s\n", r == -EINVAL ? why : strerror(-r));
		ipc_opt_usage(&ipc_worker_prog, stderr);
		return 2;
	}
	if (w.opts.device == IPC_WORKER_NO_DEVICE)
		w.opts.device = 0;
	if (!w.opts.compile_memory) {
		struct sysinfo si;
		uint64_t mem = sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit : 0;

		w.opts.compile_memory =
			mem ? MIN(IPC_OPT_COMPILE_MEMORY_MAX, mem / 2) : IPC_OPT_COMPILE_MEMORY_MAX;
	}
	if (!w.opts.backend)
		w.opts.backend = "host";
	if (!w.opts.cache_ttl_ms)
		w.opts.cache_ttl_ms = IPC_OPT_CACHE_TTL_MS;
	if (!w.opts.compile_timeout_ms)
		w.opts.compile_timeout_ms = IPC_OPT_COMPILE_TIMEOUT_MS;
	if (w.opts.probe)
		return probe(w.opts.backend);
#ifdef GPUX_HAVE_CUDA
	/* The worker's own NVRTC helper, on fd 3 (worker/compile/compiler.c). */
	if (w.opts.compiler)
		return wrk_compiler_main(3, w.opts.parent_pid, w.opts.compile_memory);
#endif
	if (w.opts.control_fd < 0 || w.opts.status_fd < 0) {
		(void)fprintf(stderr, "gpux-worker: --control-fd and --status-fd are needed\n");
		ipc_opt_usage(&ipc_worker_prog, stderr);
		return 2;
	}

	/* Die with gpuxd; if it is gone already, go at once. */
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (w.opts.parent_pid && getppid() != w.opts.parent_pid)
		return WRK_EXIT_OK;
	/* Signals arrive through a signalfd; threads started later inherit the mask. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	(void)sigprocmask(SIG_BLOCK, &mask, NULL);
	(void)signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();

	if (!w.opts.cache_dir) {
		cache = default_cache_dir();
		w.opts.cache_dir = cache;
	}
	w.spin_ns = ipc_spin_ns();
	w.spin_urgent_ns = ipc_spin_urgent_ns();
	(void)pthread_mutex_init(&w.done_lock, NULL);
	(void)pthread_mutex_init(&w.job_lock, NULL);
	(void)pthread_cond_init(&w.job_cond, NULL);

	r = worker_init(&w);
	if (r < 0) {
		worker_done(&w);
		return WRK_EXIT_INIT;
	}
	r = ipc_loop_run(w.loop);
	if (r < 0)
		wrk_log(&w, "event loop: %s", strerror(-r));
	if (w.exit_code == WRK_EXIT_FAULT) {
		/* Say what happened to whom, then go: the device and the threads driving it may be
		 * in any state, and nothing of them is worth waiting for. */
		wrk_server_stop(&w);
		_exit(WRK_EXIT_FAULT);
	}
	r = r < 0 ? WRK_EXIT_INIT : WRK_EXIT_OK;
	worker_done(&w);
	return r;
}
