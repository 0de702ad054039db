/* SPDX-License-Identifier: MIT */
/* supervisor/workers.c: probing devices and supervising one worker per device (spawn, watch, restart). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "channel.h"
#include "macro.h"
#include "segment.h"
#include "sup.h"

extern char **environ;

#define PROBE_OUTPUT_MAX (64 * 1024)
#define PROBE_TIMEOUT_NS (120ULL * NSEC_PER_SEC)

/* ---- the state table ---- */

enum sup_action {
	A_NONE,
	A_SPAWN,
	A_READY,
	A_DIED,
	A_TERM,
	A_KILL,
};

struct transition {
	enum sup_state next;
	enum sup_action action;
};

/* The table's macros and its columns, kept as written: clang-format would take a braced
 * initializer in a macro for a function's body, and pack the table's rows. */
/* clang-format off */
#define T(n, a) { W_##n, A_##a }
#define SAME { W_STATE_N, A_NONE }

/*
 * What each event does in each state. A_DIED decides between BACKOFF and FAILED by the
 * count of recent deaths; "SAME" keeps the state and does nothing. In READY a timer is a
 * deadline kill armed by the deadline check.
 */
static const struct transition table[W_STATE_N][E_EVENT_N] = {
	/*               E_START          E_READY         E_DIED            E_TIMER            E_STOP */
	[W_DOWN] =     { T(STARTING, SPAWN), SAME,        SAME,             SAME,              SAME },
	[W_STARTING] = { SAME,            T(READY, READY), T(BACKOFF, DIED), T(STARTING, KILL), T(STOPPING, TERM) },
	[W_READY] =    { SAME,            SAME,           T(BACKOFF, DIED), T(READY, KILL),    T(STOPPING, TERM) },
	[W_BACKOFF] =  { SAME,            SAME,           SAME,             T(STARTING, SPAWN), T(DOWN, NONE) },
	[W_FAILED] =   { SAME,            SAME,           SAME,             T(STARTING, SPAWN), T(DOWN, NONE) },
	[W_STOPPING] = { SAME,            SAME,           T(DOWN, NONE),    T(STOPPING, KILL), SAME },
};
/* clang-format on */

const char *sup_state_name(enum sup_state st)
{
	static const char *const names[W_STATE_N] = {
		[W_DOWN] = "down",          [W_STARTING] = "starting", [W_READY] = "ready",
		[W_BACKOFF] = "restarting", [W_FAILED] = "failed",     [W_STOPPING] = "stopping",
	};

	return st < W_STATE_N ? names[st] : "?";
}

static bool worker_dying(const struct sup_worker *w)
{
	struct ipc_fault f;

	return w->killed_deadline || (w->status && ipc_status_fault_get(w->status, &f));
}

int sup_spawn(pid_t *ret_pid, const char *path, const posix_spawn_file_actions_t *fa,
	      char *const *argv)
{
	posix_spawnattr_t attr;
	sigset_t none, deflt;
	int r;

	(void)posix_spawnattr_init(&attr);
	sigemptyset(&none);
	sigemptyset(&deflt);
	sigaddset(&deflt, SIGPIPE);
	sigaddset(&deflt, SIGTERM);
	sigaddset(&deflt, SIGINT);
	sigaddset(&deflt, SIGHUP);
	(void)posix_spawnattr_setsigmask(&attr, &none);
	(void)posix_spawnattr_setsigdefault(&attr, &deflt);
	(void)posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	r = posix_spawn(ret_pid, path, fa, &attr, argv, environ);
	(void)posix_spawnattr_destroy(&attr);
	return -r;
}

bool sup_worker_serving(const struct sup_worker *w)
{
	return w->state == W_READY && w->control && !worker_dying(w);
}

uint32_t sup_public_state(const struct sup_worker *w)
{
	switch (w->state) {
	case W_READY:
		return worker_dying(w) ? GPUX_DEVICE_RESTARTING : GPUX_DEVICE_READY;
	case W_FAILED:
		return GPUX_DEVICE_FAILED;
	case W_STARTING:
		return w->generation == 0 ? GPUX_DEVICE_STARTING : GPUX_DEVICE_RESTARTING;
	default:
		return GPUX_DEVICE_RESTARTING;
	}
}

/* ---- probing ---- */

static int parse_probe_line(char *line, struct sup_worker *w)
{
	char *f[10];
	unsigned n = 0;
	char *save = NULL;

	for (char *t = strtok_r(line, "\t", &save); t && n < ARRAY_SIZE(f);
	     t = strtok_r(NULL, "\t", &save))
		f[n++] = t;
	if (n != 10 || strcmp(f[0], "device") != 0 || strlen(f[9]) >= sizeof(w->info.name) ||
	    strlen(f[2]) >= sizeof(w->backend) || strlen(f[8]) != 32)
		return -EINVAL;
	memset(&w->info, 0, sizeof(w->info));
	w->info.index = (uint32_t)strtoul(f[1], NULL, 10);
	(void)snprintf(w->backend, sizeof(w->backend), "%s", f[2]);
	w->info.backend = strcmp(f[2], "cuda") == 0 ? GPUX_BACKEND_CUDA : GPUX_BACKEND_HOST;
	w->info.cc_major = (uint32_t)strtoul(f[3], NULL, 10);
	w->info.cc_minor = (uint32_t)strtoul(f[4], NULL, 10);
	w->info.sm_count = (uint32_t)strtoul(f[5], NULL, 10);
	w->info.max_threads_per_block = (uint32_t)strtoul(f[6], NULL, 10);
	w->info.mem_total = strtoull(f[7], NULL, 10);
	for (unsigned i = 0; i < 16; i++) {
		char hex[3] = { f[8][2 * i], f[8][2 * i + 1], 0 };
		w->info.uuid[i] = (uint8_t)strtoul(hex, NULL, 16);
	}
	(void)snprintf(w->info.name, sizeof(w->info.name), "%s", f[9]);
	return 0;
}

static void status_page_drop(struct sup_worker *w)
{
	if (w->status)
		(void)munmap(w->status, IPC_STATUS_PAGE_SIZE);
	w->status = NULL;
	w->status_fd = safe_close(w->status_fd);
	w->status_ro_fd = safe_close(w->status_ro_fd);
	if (w->clients)
		(void)munmap((void *)w->clients, IPC_CLIENT_TABLE_SIZE);
	w->clients = NULL;
	w->clients_fd = safe_close(w->clients_fd);
}

/*
 * A fresh status page for each worker's life. The worker maps it writable as it starts, and
 * so does gpuxd, to mark it gone when the worker dies; once it is ready, F_SEAL_FUTURE_WRITE
 * keeps everybody else (a client reopening its fd through /proc with O_RDWR included) from
 * writing or sealing it.
 */
static int status_page_new(struct sup_worker *w)
{
	char path[64];
	void *p;
	int r;

	status_page_drop(w);
	r = ipc_segment_create("gpux-status", IPC_STATUS_PAGE_SIZE, &w->status_fd);
	if (r < 0)
		return r;
	(void)snprintf(path, sizeof(path), "/proc/self/fd/%d", w->status_fd);
	w->status_ro_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (w->status_ro_fd < 0)
		return -errno;
	r = ipc_segment_map(w->status_fd, IPC_STATUS_PAGE_SIZE, true, &p);
	if (r < 0)
		return r;
	w->status = p;
	/* gpux top's table, the worker's to write and gpuxd's alone to read. */
	r = ipc_segment_create("gpux-clients", IPC_CLIENT_TABLE_SIZE, &w->clients_fd);
	if (r < 0)
		return r;
	r = ipc_segment_map(w->clients_fd, IPC_CLIENT_TABLE_SIZE, false, &p);
	if (r < 0)
		return r;
	w->clients = p;
	return 0;
}

void sup_workers_tell_processes(struct sup *s)
{
	uint32_t n = (uint32_t)MIN(ipc_map_size(&s->per_pid), (size_t)UINT32_MAX);

	for (unsigned i = 0; i < s->nworkers; i++)
		if (s->workers[i].status)
			__atomic_store_n(&s->workers[i].status->processes, n, __ATOMIC_RELAXED);
}

static int status_page_seal(struct sup_worker *w)
{
	if (fcntl(w->status_fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0)
		return -errno;
	return 0;
}

/* Run `gpux-worker --probe` and read its device lines: gpuxd itself never loads CUDA. */
int sup_workers_probe(struct sup *s)
{
	struct sup_argv argv;
	posix_spawn_file_actions_t fa;
	_cleanup_(freep) char *out = malloc(PROBE_OUTPUT_MAX + 1);
	uint64_t until = mono_ns() + PROBE_TIMEOUT_NS;
	size_t len = 0;
	int pipefd[2], st = 0, r;
	pid_t pid;

	if (!out)
		return -ENOMEM;
	r = sup_worker_argv(s, NULL, &argv);
	if (r < 0)
		return r;
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
	/* Nothing gpuxd was started with past stdio (who started it may leak fds). */
	(void)posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	r = posix_spawn(&pid, s->opts.worker_path, &fa, NULL, argv.v, environ);
	(void)posix_spawn_file_actions_destroy(&fa);
	(void)close(pipefd[1]);
	if (r != 0) {
		(void)close(pipefd[0]);
		sup_logp(LOG_ERR, "cannot run %s: %s", s->opts.worker_path, strerror(r));
		return -r;
	}
	for (;;) {
		struct pollfd pfd = { .fd = pipefd[0], .events = POLLIN };
		uint64_t now = mono_ns();
		ssize_t n;

		if (now >= until || poll(&pfd, 1, (int)((until - now) / NSEC_PER_MSEC) + 1) == 0) {
			(void)kill(pid, SIGKILL);
			break;
		}
		n = read(pipefd[0], out + len, PROBE_OUTPUT_MAX - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == PROBE_OUTPUT_MAX)
			break;
	}
	(void)close(pipefd[0]);
	(void)waitpid(pid, &st, 0);
	out[len] = '\0';
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		sup_logp(LOG_ERR, "device probe failed (%s --probe --backend %s)",
			 s->opts.worker_path, s->opts.backend);
		return -ENODEV;
	}

	s->nworkers = 0;
	for (char *save = NULL, *line = strtok_r(out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		struct sup_worker *w = &s->workers[s->nworkers];

		if (s->nworkers == IPC_DEVICES_MAX)
			break;
		*w = (struct sup_worker){ .s = s,
					  .pidfd = -1,
					  .status_fd = -1,
					  .status_ro_fd = -1,
					  .clients_fd = -1,
					  .log_fd = -1,
					  .exiting_pidfd = -1 };
		if (parse_probe_line(line, w) < 0) {
			sup_logp(LOG_ERR, "device probe: unreadable line");
			return -EINVAL;
		}
		w->index = s->nworkers;
		w->info.index = w->index;
		s->nworkers++;
	}
	return s->nworkers > 0 ? 0 : -ENODEV;
}

/* ---- spawning and reaping ---- */

static void on_worker_timer(struct ipc_timer *t, void *userdata)
{
	sup_worker_event(userdata, E_TIMER);
}

/* ---- the workers' stderr, line by line into gpuxd's log ---- */

static void log_flush_line(struct sup_worker *w)
{
	static const char tag[] = "gpux-worker[";
	char *line = w->log_line, *end;
	size_t len = w->log_len;

	/* The worker's own name and device are said once, here. */
	if (len > sizeof(tag) && memcmp(line, tag, sizeof(tag) - 1) == 0 &&
	    (end = memchr(line, ']', len)) && (size_t)(end - line) + 2 < len && end[1] == ':') {
		len -= (size_t)(end + 2 - line);
		line = end + 2;
		while (len > 0 && *line == ' ') {
			line++;
			len--;
		}
	}
	/* Terminal escapes and the like are not for whoever reads the log. */
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
			line[i] = line[i] == '\t' ? ' ' : '?';
	if (len > 0)
		sup_logp(LOG_NOTICE, "device %u: worker %d: %.*s%s", w->index, (int)w->pid,
			 (int)len, line, w->log_cut ? " [cut]" : "");
	w->log_len = 0;
}

static void log_pipe_close(struct sup_worker *w)
{
	log_flush_line(w);
	w->log_cut = false;
	ipc_watch_free(w->log_watch);
	w->log_watch = NULL;
	w->log_fd = safe_close(w->log_fd);
}

void sup_worker_log_read(struct sup_worker *w)
{
	char buf[4096];
	size_t taken = 0;

	while (w->log_fd >= 0 && taken < SUP_LOG_ROUND_BYTES) {
		ssize_t n = read(w->log_fd, buf, MIN(sizeof(buf), SUP_LOG_ROUND_BYTES - taken));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			log_pipe_close(w);
			return;
		}
		taken += (size_t)n;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] == '\n') {
				if (!w->log_cut)
					log_flush_line(w);
				w->log_cut = false;
			} else if (w->log_cut) {
				continue;
			} else if (w->log_len == sizeof(w->log_line)) {
				w->log_cut = true;
				log_flush_line(w);
			} else {
				w->log_line[w->log_len++] = buf[i];
			}
		}
	}
}

static void on_log_pipe(struct ipc_watch *watch, int fd, uint32_t revents, void *userdata)
{
	sup_worker_log_read(userdata);
}

/* Why a worker that died or is dying went, logged: st its wait status, or NULL (exiting). */
static void log_death(const struct sup_worker *w, const int *st)
{
	struct ipc_fault f = { 0 };
	uint32_t cause = w->status ? ipc_status_fault_get(w->status, &f) : 0;
	char how[64];

	if (!st)
		(void)snprintf(how, sizeof(how), "is exiting");
	else if (WIFSIGNALED(*st))
		(void)snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(*st));
	else
		(void)snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(*st));
	if (w->is_standby)
		sup_logp(LOG_WARNING, "device %u: standby worker %d %s", w->index, (int)w->pid,
			 how);
	else if ((!st || WIFEXITED(*st)) && cause == IPC_FAULT_KERNEL)
		sup_logp(LOG_WARNING,
			 "device %u: worker %d %s: a kernel fault of client %llu's request %u",
			 w->index, (int)w->pid, how, (unsigned long long)f.client_id, f.req_id);
	else if ((!st || WIFEXITED(*st)) && cause == IPC_FAULT_UNKNOWN)
		sup_logp(LOG_WARNING,
			 "device %u: worker %d %s: a kernel fault, one of several requests' (they "
			 "run again, each alone)",
			 w->index, (int)w->pid, how);
	else if (!st && cause == IPC_FAULT_DEADLINE)
		sup_logp(LOG_WARNING, "device %u: worker %d %s: killed for client %llu's deadline",
			 w->index, (int)w->pid, how, (unsigned long long)f.client_id);
	else
		sup_logp(LOG_WARNING, "device %u: worker %d %s", w->index, (int)w->pid, how);
}

/*
 * The worker is gone: its process was reaped (*st its wait status), or, st NULL, it is
 * exiting (exiting()). What follows a death follows.
 */
static void gone(struct sup_worker *w, const int *st)
{
	w->died_ns = mono_ns();
	/* Its last words (a sanitizer's report, say) are in the pipe by now; what one round
	 * does not take, the pipe's watch does. */
	sup_worker_log_read(w);
	ipc_watch_free(w->pid_watch);
	w->pid_watch = NULL;
	w->pidfd = safe_close(w->pidfd);
	ipc_conn_free(w->control);
	w->control = NULL;
	if (w->state != W_STOPPING)
		log_death(w, st);
	w->pid = 0;
	/* What it held of the device went with it (a standby held nothing). */
	if (w->s->ledger && !w->is_standby)
		ipc_ledger_forget_device(w->s->ledger, w->index);
	/* Clients look here before they send: a ring gives no EPIPE. */
	if (w->status)
		__atomic_store_n(&w->status->gone, 1, __ATOMIC_RELEASE);
	sup_worker_event(w, E_DIED);
}

static void reap(struct sup_worker *w)
{
	int st;

	if (waitpid(w->pid, &st, WNOHANG) != w->pid)
		return;
	w->last_exit = st;
	gone(w, &st);
}

static void on_pidfd(struct ipc_watch *watch, int fd, uint32_t revents, void *userdata)
{
	reap(userdata);
}

/* Reap a worker whose death nothing else would tell: it was killed, and is waited for. */
static void reap_blocking(struct sup_worker *w)
{
	int st;

	if (waitpid(w->pid, &st, 0) != w->pid)
		return;
	w->last_exit = st;
	gone(w, &st);
}

/* A worker handled as gone while it exited (exiting()) has exited. */
static void on_exited(struct ipc_watch *watch, int fd, uint32_t revents, void *userdata)
{
	struct sup_worker *w = userdata;
	struct sup *s = w->s;
	int st;

	if (waitpid(w->exiting_pid, &st, WNOHANG) != w->exiting_pid)
		return;
	w->last_exit = st;
	if (WIFSIGNALED(st))
		sup_logp(LOG_INFO, "device %u: worker %d, gone, killed by signal %d", w->index,
			 (int)w->exiting_pid, WTERMSIG(st));
	else
		sup_logp(LOG_INFO, "device %u: worker %d, gone, exited with status %d", w->index,
			 (int)w->exiting_pid, WEXITSTATUS(st));
	ipc_watch_free(w->exiting_watch);
	w->exiting_watch = NULL;
	w->exiting_pidfd = safe_close(w->exiting_pidfd);
	w->exiting_pid = 0;
	if (s->stopping && sup_workers_all_down(s))
		ipc_loop_exit(s->loop, SUP_EXIT_OK);
}

/*
 * A worker whose page says why it dies (a kernel fault, a deadline) closed its control
 * socket: it is exiting, which takes a while on a GPU (the driver tears its context down:
 * about 0.3 s on an H200). Its death is handled now and its process reaped on the side
 * (on_exited()), so that the standby, or the next worker, serves that much sooner. false:
 * not such a worker (or one is exiting already), it goes the usual way.
 */
static bool exiting(struct sup_worker *w)
{
	struct ipc_fault f;
	int pidfd = w->pidfd;

	if (w->pid <= 0 || w->state == W_STOPPING || w->is_standby || w->exiting_pid > 0 ||
	    !w->status || !ipc_status_fault_get(w->status, &f))
		return false;
	/* One watch per fd. */
	ipc_watch_free(w->pid_watch);
	w->pid_watch = NULL;
	if (ipc_watch_new(w->s->loop, pidfd, POLLIN, on_exited, w, &w->exiting_watch) < 0) {
		if (ipc_watch_new(w->s->loop, pidfd, POLLIN, on_pidfd, w, &w->pid_watch) < 0) {
			/* Nothing would tell its death: waited for here. */
			(void)kill(w->pid, SIGKILL);
			reap_blocking(w);
		}
		return false;
	}
	w->exiting_pid = w->pid;
	w->exiting_pidfd = pidfd;
	w->pidfd = -1;
	gone(w, NULL);
	return true;
}

void sup_worker_reap_if_dead(struct sup_worker *w)
{
	if (w->pid > 0)
		reap(w);
}

static void on_worker_msg(struct ipc_conn *c, struct ipc_msg *msg, void *userdata)
{
	struct sup_worker *w = userdata;
	struct ipc_ready ready;

	if (msg->hdr.type == IPC_READY && ipc_decode_ready(msg, &ready) == 0) {
		ready.info.index = w->index;
		w->info = ready.info;
		sup_worker_event(w, E_READY);
		return;
	}
	sup_logp(LOG_ERR, "device %u: worker sent a bad %s message", w->index,
		 ipc_type_name(msg->hdr.type));
}

static void on_worker_close(struct ipc_conn *c, int error, void *userdata)
{
	struct sup_worker *w = userdata;

	/* Its death comes through the pidfd (or, exiting after a fault, now); a worker that only
	 * closed its socket is of no use. */
	ipc_conn_free(w->control);
	w->control = NULL;
	if (exiting(w))
		return;
	if (w->pid > 0 && w->state != W_STOPPING)
		(void)kill(w->pid, SIGKILL);
}

static int dup_high(int fd)
{
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 16);

	return d < 0 ? -errno : d;
}

static int spawn(struct sup_worker *w)
{
	struct sup *s = w->s;
	struct sup_argv argv;
	posix_spawn_file_actions_t fa;
	_cleanup_(closep) int ctl_child = -1, status_child = -1, ctl = -1, log_child = -1;
	_cleanup_(closep) int clients_child = -1, ledger_child = -1;
	int pair[2], logp[2], r;
	pid_t pid;

	r = sup_worker_argv(s, w, &argv);
	if (r < 0) {
		sup_logp(LOG_ERR, "device %u: the worker's command line: %s", w->index,
			 strerror(-r));
		return r;
	}
	if (!s->ledger) {
		r = ipc_ledger_new(s->nworkers, &s->ledger_fd, &s->ledger);
		if (r < 0) {
			sup_logp(LOG_ERR, "the ledger of device memory: %s", strerror(-r));
			return r;
		}
	}
	r = status_page_new(w);
	if (r < 0)
		return r;
	r = ipc_channel_pair(pair, false);
	if (r < 0)
		return r;
	ctl = pair[0];
	/* Above the fds the child gets (3 to 6), so that dup2 never meets itself. */
	ctl_child = dup_high(pair[1]);
	(void)close(pair[1]);
	status_child = dup_high(w->status_fd);
	clients_child = dup_high(w->clients_fd);
	ledger_child = dup_high(s->ledger_fd);
	if (ctl_child < 0 || status_child < 0 || clients_child < 0 || ledger_child < 0)
		return -EMFILE;
	/* The last worker's pipe may still be held by a child of its: one more round, and the
	 * rest is dropped. */
	if (w->log_fd >= 0) {
		sup_worker_log_read(w);
		log_pipe_close(w);
	}
	if (pipe2(logp, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	w->log_fd = logp[0];
	log_child = dup_high(logp[1]);
	(void)close(logp[1]);
	if (log_child < 0)
		return -EMFILE;
	/* The write end blocks: a worker's message is not dropped because gpuxd is slow. */
	(void)fcntl(log_child, F_SETFL, 0);
	r = ipc_watch_new(s->loop, w->log_fd, POLLIN, on_log_pipe, w, &w->log_watch);
	if (r < 0)
		return r;

	(void)posix_spawn_file_actions_init(&fa);
	/* Workers log on stderr, which gpuxd reads into its log; stdin and stdout are nobody's
	 * business of theirs. */
	(void)posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	(void)posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	(void)posix_spawn_file_actions_adddup2(&fa, log_child, 2);
	(void)posix_spawn_file_actions_adddup2(&fa, ctl_child, 3);
	(void)posix_spawn_file_actions_adddup2(&fa, status_child, 4);
	(void)posix_spawn_file_actions_adddup2(&fa, clients_child, 5);
	(void)posix_spawn_file_actions_adddup2(&fa, ledger_child, 6);
	/* And nothing else: not an fd gpuxd was started with and keeps open without
	 * close-on-exec (who started it may leak fds), which the worker would hand on. */
	(void)posix_spawn_file_actions_addclosefrom_np(&fa, 7);
	r = sup_spawn(&pid, s->opts.worker_path, &fa, argv.v);
	(void)posix_spawn_file_actions_destroy(&fa);
	if (r < 0) {
		sup_logp(LOG_ERR, "device %u: cannot spawn %s: %s", w->index, s->opts.worker_path,
			 strerror(-r));
		return r;
	}
	w->pid = pid;
	w->killed_deadline = false;

	w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (w->pidfd < 0) {
		r = -errno;
		sup_logp(LOG_ERR, "device %u: pidfd_open: %s", w->index, strerror(-r));
		(void)kill(pid, SIGKILL);
		(void)waitpid(pid, NULL, 0);
		w->pid = 0;
		return r;
	}
	r = ipc_watch_new(s->loop, w->pidfd, POLLIN, on_pidfd, w, &w->pid_watch);
	if (r == 0)
		r = ipc_conn_new_take_fd(s->loop, TAKE_FD(ctl), on_worker_msg, on_worker_close, w,
					 &w->control);
	if (r < 0) {
		(void)kill(pid, SIGKILL);
		return 0; /* the pidfd (if watched) reports the death; else the start timer does */
	}
	return 0;
}

/* Of the last n times (a ring of `max`), those within the window before `now`. */
static unsigned within_window(const uint64_t *times, unsigned n, unsigned max, uint64_t now)
{
	unsigned recent = 0;

	for (unsigned i = 0; i < MIN(n, max); i++)
		recent += now - times[i] <= SUP_DEATH_WINDOW_NS;
	return recent;
}

/* Deaths within the window before `now`. */
static unsigned recent_deaths(const struct sup_worker *w, uint64_t now)
{
	return within_window(w->deaths, w->ndeaths, SUP_DEATHS_MAX, now);
}

unsigned sup_worker_recent_deaths(const struct sup_worker *w)
{
	return recent_deaths(w, mono_ns());
}

/* Count this death; the window keeps the last SUP_DEATHS_MAX times. */
static unsigned record_death(struct sup_worker *w, uint64_t now)
{
	w->deaths[w->ndeaths++ % SUP_DEATHS_MAX] = now;
	return recent_deaths(w, now);
}

/*
 * Whether the worker died of a kernel fault its status page blames on one client's request:
 * the device is whole, only that request failed (a neighbour's innocent requests run again),
 * so the death is no strike against the device, up to SUP_BLAMED_MAX such deaths within the
 * window (a device that fails whatever runs on it blames each client in turn). Otherwise a
 * client whose kernel faults five times in a minute, by bug or on purpose, had its device
 * marked failed for everybody.
 */
static bool blamed_death(struct sup_worker *w, uint64_t now)
{
	struct ipc_fault f = { 0 };
	uint32_t cause = w->status ? ipc_status_fault_get(w->status, &f) : 0;

	if (!((cause == IPC_FAULT_KERNEL && f.client_id) || cause == IPC_FAULT_UNKNOWN) ||
	    within_window(w->blamed, w->nblamed, SUP_BLAMED_MAX, now) >= SUP_BLAMED_MAX)
		return false;
	w->blamed[w->nblamed++ % SUP_BLAMED_MAX] = now;
	return true;
}

static void worker_drain(struct sup_worker *w)
{
	struct ipc_hdr drain = { .magic = IPC_MAGIC, .version = IPC_VERSION, .type = IPC_DRAIN };

	if (w->control)
		(void)ipc_conn_send(w->control, &drain, sizeof(drain), NULL, 0);
}

/*
 * A worker said READY, or its device's standby took over (`took_over`): its page sealed, the
 * count of processes in, its generation counted, and the device's next standby started. A
 * standby itself only waits: its page is sealed once it serves. false: the page could not be
 * sealed, and the worker is being killed.
 */
static bool became_ready(struct sup_worker *w, uint64_t now, bool took_over)
{
	unsigned long long started = (now - w->spawned_ns) / NSEC_PER_MSEC;
	int r;

	ipc_timer_arm(w->timer, 0);
	if (w->is_standby) {
		sup_log("device %u: standby worker %d ready: started in %llu ms", w->index,
			(int)w->pid, started);
		return true;
	}
	r = status_page_seal(w);
	if (r < 0) {
		sup_logp(LOG_ERR, "device %u: cannot seal the status page: %s", w->index,
			 strerror(-r));
		w->state = W_READY;
		sup_worker_event(w, E_TIMER);
		return false;
	}
	/* The worker cleared its page as it started: the count goes in now, through the
	 * mapping made before the seal. */
	sup_workers_tell_processes(w->s);
	w->generation++;
	if (took_over)
		sup_log("device %u: %s ready (worker %d, generation %u): the standby took over "
			"%llu ms after the last one exited",
			w->index, w->info.name, (int)w->pid, w->generation,
			(unsigned long long)((now - w->died_ns) / NSEC_PER_MSEC));
	else if (w->died_ns)
		sup_log("device %u: %s ready (worker %d, generation %u): started in %llu ms, "
			"%llu ms after the last one exited",
			w->index, w->info.name, (int)w->pid, w->generation, started,
			(unsigned long long)((now - w->died_ns) / NSEC_PER_MSEC));
	else
		sup_log("device %u: %s ready (worker %d, generation %u): started in %llu ms",
			w->index, w->info.name, (int)w->pid, w->generation, started);
	/*
	 * The standby starts a while after its worker is ready, not beside it: both would start
	 * slower, and a fault that costs two deaths (several suspects, then the culprit alone)
	 * has the second worker start alone. A standby still to start waits again.
	 */
	if (w->standby && !w->s->stopping &&
	    (w->standby->state == W_DOWN || w->standby->state == W_BACKOFF)) {
		w->standby->state = W_BACKOFF;
		ipc_timer_arm(w->standby->timer, now + SUP_STANDBY_DELAY_NS);
	}
	return true;
}

/* w's process goes, whatever it was doing: killed and waited for, its page and fds closed, its
 * last lines logged. */
static void process_drop(struct sup_worker *w)
{
	if (w->pid > 0) {
		(void)kill(w->pid, SIGKILL);
		(void)waitpid(w->pid, NULL, 0);
	}
	w->pid = 0;
	ipc_watch_free(w->pid_watch);
	w->pid_watch = NULL;
	w->pidfd = safe_close(w->pidfd);
	ipc_conn_free(w->control);
	w->control = NULL;
	if (w->log_fd >= 0) {
		sup_worker_log_read(w);
		log_pipe_close(w);
	}
	status_page_drop(w);
}

/* A standby that cannot take over goes. */
static void standby_drop(struct sup_worker *sb)
{
	process_drop(sb);
	sb->state = W_DOWN;
	ipc_timer_arm(sb->timer, 0);
}

/*
 * The device's standby, ready, becomes its worker: its process, page, control socket and
 * log pipe move to w, which is ready at once (the next standby starts then). false: there is
 * none ready, or it could not be moved (then it is gone, and w starts a worker of its own).
 */
static bool standby_take(struct sup_worker *w)
{
	struct sup_worker *sb = w->standby;
	struct ipc_loop *loop = w->s->loop;
	int r;

	if (!sb || sb->state != W_READY || !sb->control || sb->pid <= 0 || worker_dying(sb) ||
	    w->s->stopping)
		return false;
	/* One watch per fd: the standby's go before w's are made. */
	ipc_watch_free(sb->pid_watch);
	sb->pid_watch = NULL;
	r = ipc_watch_new(loop, sb->pidfd, POLLIN, on_pidfd, w, &w->pid_watch);
	if (r < 0) {
		sup_logp(LOG_ERR, "device %u: the standby cannot take over: %s", w->index,
			 strerror(-r));
		standby_drop(sb);
		return false;
	}
	w->pid = sb->pid;
	w->pidfd = sb->pidfd;
	sb->pid = 0;
	sb->pidfd = -1;
	ipc_conn_free(w->control);
	w->control = sb->control;
	sb->control = NULL;
	ipc_conn_set_userdata(w->control, w);
	status_page_drop(w);
	w->status = sb->status;
	w->status_fd = sb->status_fd;
	w->status_ro_fd = sb->status_ro_fd;
	w->clients = sb->clients;
	w->clients_fd = sb->clients_fd;
	sb->status = NULL;
	sb->clients = NULL;
	sb->status_fd = sb->status_ro_fd = sb->clients_fd = -1;
	/* The last worker's pipe may still be held by a child of its: one more round. */
	if (w->log_fd >= 0) {
		sup_worker_log_read(w);
		log_pipe_close(w);
	}
	ipc_watch_free(sb->log_watch);
	sb->log_watch = NULL;
	w->log_fd = sb->log_fd;
	sb->log_fd = -1;
	memcpy(w->log_line, sb->log_line, sb->log_len);
	w->log_len = sb->log_len;
	w->log_cut = sb->log_cut;
	sb->log_len = 0;
	sb->log_cut = false;
	if (w->log_fd >= 0 &&
	    ipc_watch_new(loop, w->log_fd, POLLIN, on_log_pipe, w, &w->log_watch) < 0)
		log_pipe_close(w);
	w->info = sb->info;
	w->info.index = w->index;
	w->spawned_ns = sb->spawned_ns;
	w->killed_deadline = false;
	sb->state = W_DOWN;
	ipc_timer_arm(sb->timer, 0);
	return true;
}

void sup_worker_event(struct sup_worker *w, enum sup_event ev)
{
	struct transition t = table[w->state][ev];
	uint64_t now = mono_ns();
	enum sup_state old = w->state;

	if (t.next == W_STATE_N)
		return;
	w->state = t.next;
	switch (t.action) {
	case A_NONE:
		ipc_timer_arm(w->timer, 0);
		break;
	case A_SPAWN:
		if (old != W_DOWN)
			w->restarts++;
		if (standby_take(w)) {
			w->state = W_READY;
			if (!became_ready(w, now, true))
				return;
			break;
		}
		w->spawned_ns = now;
		ipc_timer_arm(w->timer, now + SUP_START_TIMEOUT_NS);
		if (spawn(w) < 0) {
			/* As good as a death at birth. */
			w->state = W_STARTING;
			sup_worker_event(w, E_DIED);
			return;
		}
		break;
	case A_READY:
		if (!became_ready(w, now, false))
			return;
		break;
	case A_DIED: {
		/* A worker killed for a client's deadline did nothing wrong, nor did the device of
		 * one that died of a client's kernel fault: no strike, and no wait before the next
		 * (the clients' requests wait for it, and a client that faults again and again
		 * keeps its neighbours from the device the longer the wait). */
		bool strike = !w->killed_deadline && !blamed_death(w, now);
		unsigned recent = strike ? record_death(w, now) : sup_worker_recent_deaths(w);

		if (w->s->stopping) {
			/* Nothing is started again while gpuxd stops. */
			w->state = W_DOWN;
			ipc_timer_arm(w->timer, 0);
		} else if (recent >= SUP_DEATHS_MAX) {
			w->state = W_FAILED;
			sup_logp(LOG_ERR, "device %u: %s%u deaths within a minute: marked failed",
				 w->index, w->is_standby ? "standby worker: " : "", recent);
			ipc_timer_arm(w->timer, now + SUP_FAILED_RETRY_NS);
		} else if (!strike) {
			ipc_timer_arm(w->timer, now);
		} else {
			uint64_t delay = SUP_BACKOFF_MIN_NS << (recent > 0 ? recent - 1 : 0);
			ipc_timer_arm(w->timer, now + MIN(delay, SUP_BACKOFF_MAX_NS));
		}
		break;
	}
	case A_TERM:
		if (w->pid > 0)
			(void)kill(w->pid, SIGTERM);
		ipc_timer_arm(w->timer, now + SUP_STOP_GRACE_NS);
		break;
	case A_KILL:
		if (w->pid > 0)
			(void)kill(w->pid, SIGKILL);
		break;
	}
	/* A standby has no clients until it takes over. */
	if (!w->is_standby && (w->state != old || t.action == A_READY))
		sup_clients_device_changed(w->s, w);
	/* A worker that came back (from a crash) while gpuxd drains drains as well. Told after
	 * its clients' channels, which it then keeps: their new work is refused with
	 * GPUX_E_STOPPING, as on any other worker, rather than their channels. */
	if (t.action == A_READY && w->s->stopping && !w->is_standby)
		worker_drain(w);
	if (w->s->stopping && sup_workers_all_down(w->s))
		ipc_loop_exit(w->s->loop, SUP_EXIT_OK);
}

/* ---- deadlines: what each worker runs is on its status page ---- */

/* Launches per second, from the counter on the page, renewed about once a second. */
static void launch_rate(struct sup_worker *w, const struct ipc_status_page *snap, uint64_t now)
{
	uint64_t n = snap->stats.launches;

	if (w->rate_since_ns == 0 || n < w->rate_launches) {
		w->rate_since_ns = now;
		w->rate_launches = n;
		w->launch_rate = 0;
	} else if (now - w->rate_since_ns >= NSEC_PER_SEC) {
		w->launch_rate = (uint32_t)MIN((double)(n - w->rate_launches) * 1e9 /
						       (double)(now - w->rate_since_ns),
					       (double)UINT32_MAX);
		w->rate_since_ns = now;
		w->rate_launches = n;
	}
}

static void deadline_check(struct ipc_timer *t, void *userdata)
{
	struct sup *s = userdata;
	uint64_t now = mono_ns();

	for (unsigned i = 0; i < s->nworkers; i++) {
		struct sup_worker *w = &s->workers[i];
		static struct ipc_status_page snap;

		if (w->state != W_READY || !ipc_status_read(w->status, &snap)) {
			w->rate_since_ns = 0;
			w->launch_rate = 0;
			continue;
		}
		launch_rate(w, &snap, now);
		if (w->killed_deadline)
			continue;
		for (unsigned k = 0; k < snap.nslots; k++) {
			const struct ipc_running *run = &snap.running[k];
			struct ipc_killed killed = {
				.device = w->index,
				.reason = IPC_KILL_TIMEOUT,
				.req_id = run->req_id,
				.generation = w->generation,
			};

			const struct sup_client *c;
			const struct sup_gone *g;
			char who[96];

			if (!run->client_id || !run->deadline_ns || now <= run->deadline_ns)
				continue;
			/* Its kernel runs on after it went: say so, and who it was if known. */
			c = ipc_map_get(&s->client_ids, run->client_id);
			g = c ? NULL : sup_client_gone_get(s, run->client_id);
			if (c)
				(void)snprintf(who, sizeof(who), "pid %d uid %u", (int)c->pid,
					       (unsigned)c->uid);
			else if (g)
				(void)snprintf(who, sizeof(who),
					       "gone %.1f s ago; it was pid %d uid %u",
					       (double)(now - g->gone_ns) / 1e9, (int)g->pid,
					       (unsigned)g->uid);
			else
				(void)snprintf(who, sizeof(who), "gone");
			sup_logp(LOG_WARNING,
				 "device %u: request %u of client %llu (%s) ran %.1f s past its "
				 "deadline: killing worker %d",
				 w->index, run->req_id, (unsigned long long)run->client_id, who,
				 (double)(now - run->deadline_ns) / 1e9, (int)w->pid);
			/* Tell the client first; the kill follows on the next round of the loop,
			 * after the message has gone out. The page says why first: the other
			 * clients' requests that the worker had not finished may run again
			 * (client/replay.c). */
			(void)ipc_status_fault_set(w->status, run->client_id, run->req_id,
						   IPC_FAULT_DEADLINE);
			sup_client_send_killed(s, run->client_id, &killed);
			w->killed_deadline = true;
			ipc_timer_arm(w->timer, now);
			break;
		}
	}
	ipc_timer_arm(t, now + SUP_DEADLINE_TICK_NS);
}

int sup_workers_start(struct sup *s)
{
	int r = ipc_timer_new(s->loop, deadline_check, s, &s->deadline_timer);

	if (r < 0)
		return r;
	ipc_timer_arm(s->deadline_timer, mono_ns() + SUP_DEADLINE_TICK_NS);
	for (unsigned i = 0; i < s->nworkers; i++) {
		r = ipc_timer_new(s->loop, on_worker_timer, &s->workers[i], &s->workers[i].timer);
		if (r < 0)
			return r;
		if (!s->opts.standby)
			continue;
		/* Started once its worker is ready (became_ready()). */
		s->standbys[i] = (struct sup_worker){ .s = s,
						      .index = i,
						      .info = s->workers[i].info,
						      .pidfd = -1,
						      .status_fd = -1,
						      .status_ro_fd = -1,
						      .clients_fd = -1,
						      .log_fd = -1,
						      .exiting_pidfd = -1,
						      .is_standby = true };
		memcpy(s->standbys[i].backend, s->workers[i].backend,
		       sizeof(s->workers[i].backend));
		r = ipc_timer_new(s->loop, on_worker_timer, &s->standbys[i], &s->standbys[i].timer);
		if (r < 0)
			return r;
		s->workers[i].standby = &s->standbys[i];
	}
	for (unsigned i = 0; i < s->nworkers; i++)
		sup_worker_event(&s->workers[i], E_START);
	return 0;
}

bool sup_workers_all_down(const struct sup *s)
{
	for (unsigned i = 0; i < s->nworkers; i++)
		if (s->workers[i].pid > 0 || s->workers[i].exiting_pid > 0 ||
		    (s->workers[i].standby && s->workers[i].standby->pid > 0))
			return false;
	return true;
}

void sup_workers_stop(struct sup *s)
{
	for (unsigned i = 0; i < s->nworkers; i++) {
		sup_worker_event(&s->workers[i], E_STOP);
		if (s->workers[i].standby)
			sup_worker_event(s->workers[i].standby, E_STOP);
	}
}

uint64_t sup_workers_inflight(const struct sup *s)
{
	static struct ipc_status_page snap;
	uint64_t n = 0;

	for (unsigned i = 0; i < s->nworkers; i++)
		if (s->workers[i].state == W_READY && ipc_status_read(s->workers[i].status, &snap))
			n += snap.stats.inflight;
	return n;
}

void sup_workers_drain(struct sup *s)
{
	for (unsigned i = 0; i < s->nworkers; i++)
		worker_drain(&s->workers[i]);
}

bool sup_workers_drained(const struct sup *s)
{
	for (unsigned i = 0; i < s->nworkers; i++) {
		const struct sup_worker *w = &s->workers[i];

		if (w->state == W_READY && w->status &&
		    !__atomic_load_n(&w->status->draining, __ATOMIC_ACQUIRE))
			return false;
	}
	return true;
}

static void worker_free(struct sup_worker *w)
{
	process_drop(w);
	if (w->exiting_pid > 0) {
		(void)kill(w->exiting_pid, SIGKILL);
		(void)waitpid(w->exiting_pid, NULL, 0);
	}
	ipc_watch_free(w->exiting_watch);
	(void)safe_close(w->exiting_pidfd);
	ipc_timer_free(w->timer);
}

void sup_workers_free(struct sup *s)
{
	for (unsigned i = 0; i < s->nworkers; i++) {
		if (s->workers[i].standby)
			worker_free(s->workers[i].standby);
		worker_free(&s->workers[i]);
	}
	ipc_timer_free(s->deadline_timer);
	if (s->ledger) {
		ipc_ledger_unmap(s->ledger);
		s->ledger = NULL;
		s->ledger_fd = safe_close(s->ledger_fd);
	}
}
