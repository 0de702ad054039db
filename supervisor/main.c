/* SPDX-License-Identifier: MIT */
/* supervisor/main.c: gpuxd: options, the listening socket, signals, daemonizing, the loop. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/un.h>

#include "macro.h"
#include "path.h"
#include "sup.h"

#ifndef GPUX_LIBEXECDIR
#define GPUX_LIBEXECDIR "/usr/local/libexec"
#endif

/*
 * Shared buffers are the clients' memory (charged to whoever allocates them), but every
 * worker maps them and a CUDA worker pins every page: so the defaults are fractions of the
 * machine's memory, a client's within its user's.
 */
static void shared_quotas(struct sup_opts *o)
{
	struct sysinfo si;
	uint64_t mem = sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit : 0;

	if (!o->quota_shared_user)
		o->quota_shared_user = mem ? mem / 2 : UINT64_MAX;
	if (!o->quota_shared)
		o->quota_shared = mem ? mem / 4 : UINT64_MAX;
	o->quota_shared = MIN(o->quota_shared, o->quota_shared_user);
}

/* gpux-worker: --worker, $GPUX_WORKER, beside gpuxd, or where it was installed. */
static char *find_worker(const char *given)
{
	char self[PATH_MAX];
	ssize_t n;
	char *p;

	if (given)
		return strdup(given);
	if (getenv("GPUX_WORKER") && *getenv("GPUX_WORKER"))
		return strdup(getenv("GPUX_WORKER"));
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		if (asprintf(&p, "%s/gpux-worker", dirname(self)) >= 0) {
			if (access(p, X_OK) == 0)
				return p;
			free(p);
		}
	}
	return strdup(GPUX_LIBEXECDIR "/gpux-worker");
}

/*
 * Bind the socket under a lock held for gpuxd's life: of two gpuxd starting at once (two
 * clients autospawning), one wins and the other exits; a socket left by a dead gpuxd is
 * replaced.
 */
static int listen_socket(struct sup *s)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[128], lock[160];
	_cleanup_(closep) int fd = -1;
	socklen_t salen = sizeof(sa);
	mode_t old;
	int r;

	/* Under gpuxd.socket, systemd made the socket, and holds it across our restarts. */
	r = sup_listen_fds(&fd);
	if (r < 0)
		return r;
	if (r == 1) {
		if (getsockname(fd, (struct sockaddr *)&sa, &salen) < 0)
			return -errno;
		(void)snprintf(s->socket_path, sizeof(s->socket_path), "%.*s",
			       (int)(salen - offsetof(struct sockaddr_un, sun_path)), sa.sun_path);
		s->activated = true;
		s->listen_fd = TAKE_FD(fd);
		return 0;
	}
	if (s->opts.socket_path) {
		if (strlen(s->opts.socket_path) >= sizeof(sa.sun_path))
			return -ENAMETOOLONG;
		(void)snprintf(s->socket_path, sizeof(s->socket_path), "%s", s->opts.socket_path);
	} else {
		r = ipc_default_socket(dir, s->socket_path, sizeof(s->socket_path));
		if (r < 0)
			return r;
		r = ipc_private_dir(dir);
		if (r < 0) {
			sup_logp(LOG_ERR, "%s: %s", dir,
				 r == -EPERM ? "not a private directory of this user"
					     : strerror(-r));
			return r;
		}
	}
	(void)snprintf(lock, sizeof(lock), "%s.lock", s->socket_path);
	s->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (s->lock_fd < 0)
		return -errno;
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EADDRINUSE : -errno;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memcpy(sa.sun_path, s->socket_path, strlen(s->socket_path));
	(void)unlink(s->socket_path);
	old = umask(0177);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	(void)umask(old);
	if (r < 0)
		return -errno;
	if (s->opts.allow_group && chown(s->socket_path, (uid_t)-1, s->opts.allow_gid) < 0)
		return -errno;
	if (chmod(s->socket_path, s->opts.socket_mode) < 0)
		return -errno;
	if (listen(fd, 128) < 0)
		return -errno;
	s->listen_fd = TAKE_FD(fd);
	return 0;
}

/*
 * --daemonize: the first process waits for the second to say how it went on a pipe, then
 * exits 0 once the socket listens (or another gpuxd already serves it), else 1. So whoever
 * started gpuxd learns readiness by waiting for it, and the daemon is nobody's child. The
 * daemon leaves the terminal alone: its own session, stdio on /dev/null, in /, with a umask
 * that keeps what it creates (module cache files among them) to its user.
 */
static int daemonize(int *ret_notify)
{
	int p[2], null;
	pid_t pid;
	char c = 0;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		(void)close(p[1]);
		while (read(p[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(c == 'R' || c == 'A' ? SUP_EXIT_OK : SUP_EXIT_FAIL);
	}
	(void)close(p[0]);
	(void)setsid();
	if (chdir("/") < 0)
		return -errno;
	(void)umask(0077);
	null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0)
		return -errno;
	for (int fd = 0; fd < 3; fd++)
		if (dup2(null, fd) < 0)
			return -errno;
	(void)close(null);
	*ret_notify = p[1];
	return 0;
}

/* A path given relative to where gpuxd was started, made absolute before it leaves. */
static int absolute(const char **path, char **ret_owned)
{
	char cwd[PATH_MAX];

	*ret_owned = NULL;
	if (!*path || **path == '/')
		return 0;
	if (!getcwd(cwd, sizeof(cwd)) || asprintf(ret_owned, "%s/%s", cwd, *path) < 0)
		return -errno;
	*path = *ret_owned;
	return 0;
}

/*
 * Where to log: --log-file; for a private gpuxd, its file (ipc_private_log(): a user finds
 * it there); else the journal under systemd, syslog when daemonized, else stderr.
 */
static int open_log(struct sup_opts *o)
{
	char path[PATH_MAX];
	/* Of the automatic targets only the journal's socket can fail to open. */
	const char *where = "the journal";
	int r;

	if (o->log_file) {
		where = o->log_file;
		r = sup_log_open(SUP_LOG_FILE, o->log_file, o->log_level);
	} else if (o->private_mode && ipc_private_log(path, sizeof(path)) == 0) {
		where = path;
		r = sup_log_open(SUP_LOG_FILE, path, o->log_level);
	} else {
		r = sup_log_open(sup_log_auto(o->daemonize), NULL, o->log_level);
	}
	if (r < 0)
		(void)fprintf(stderr, "gpuxd: log %s: %s\n", where, strerror(-r));
	return r;
}

/*
 * Every client is an fd here, and more are queued for it at times: gpuxd takes all the fds
 * it may have (the soft limit, 1024 under systemd, is for programs that use select(); gpux
 * does not). Its workers, which hold a channel per client, inherit the limit.
 */
static void fds_raise(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		sup_logp(LOG_NOTICE, "cannot raise the limit of open files: %s", strerror(errno));
}

static void notify(int *fd, char c)
{
	if (*fd >= 0)
		(void)write(*fd, &c, 1);
	*fd = safe_close(*fd);
}

static void on_signal(struct ipc_watch *w, int fd, uint32_t revents, void *userdata)
{
	struct sup *s = userdata;
	struct signalfd_siginfo si;

	if (read(fd, &si, sizeof(si)) != (ssize_t)sizeof(si))
		return;
	if (si.ssi_signo == SIGHUP) {
		/* What can change under a running gpuxd is its log file (rotation); the rest of
		 * the configuration needs a restart, which the drain makes gentle. */
		int r = sup_log_reopen();

		if (r < 0)
			sup_logp(LOG_ERR, "SIGHUP: reopening the log: %s", strerror(-r));
		else
			sup_logp(LOG_NOTICE, "SIGHUP: log reopened");
		return;
	}
	sup_logp(LOG_NOTICE, "signal %u (%s): stopping: draining for up to %llu ms", si.ssi_signo,
		 strsignal((int)si.ssi_signo), (unsigned long long)s->opts.drain_ms);
	sup_stop(s);
}

static int setup_signals(struct sup *s)
{
	sigset_t mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
		return -errno;
	(void)signal(SIGPIPE, SIG_IGN);
	s->signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (s->signal_fd < 0)
		return -errno;
	return ipc_watch_new(s->loop, s->signal_fd, POLLIN, on_signal, s, &s->signal_watch);
}

int main(int argc, char **argv)
{
	static struct sup s;
	_cleanup_(freep) char *worker = NULL, *abs_socket = NULL, *abs_cache = NULL,
			      *abs_log = NULL, *abs_worker = NULL;
	_cleanup_(closep) int ready_fd = -1;
	char hostdev[16], why[256];
	int r, code = SUP_EXIT_FAIL;

	sup_opts_init(&s.opts);
	s.listen_fd = -1;
	s.metrics_fd = -1;
	s.metrics_pidfd = -1;
	s.lock_fd = -1;
	s.signal_fd = -1;
	sup_notify_init();
	r = sup_opts_parse(&s.opts, argc, argv, why, sizeof(why));
	if (r == IPC_OPT_HELP) {
		ipc_opt_usage(&sup_prog, stdout);
		return SUP_EXIT_OK;
	}
	if (r == IPC_OPT_VERSION) {
		printf("gpuxd %s\n", GPUX_VERSION_STRING);
		return SUP_EXIT_OK;
	}
	if (r < 0) {
		(void)fprintf(stderr, "gpuxd: %s\n", r == -EINVAL ? why : strerror(-r));
		ipc_opt_usage(&sup_prog, stderr);
		return SUP_EXIT_USAGE;
	}
	shared_quotas(&s.opts);
	if (absolute(&s.opts.socket_path, &abs_socket) < 0 ||
	    absolute(&s.opts.cache_dir, &abs_cache) < 0 ||
	    absolute(&s.opts.log_file, &abs_log) < 0 ||
	    absolute(&s.opts.worker_path, &abs_worker) < 0)
		return SUP_EXIT_FAIL;
	if (open_log(&s.opts) < 0)
		return SUP_EXIT_FAIL;
	fds_raise();
	worker = find_worker(s.opts.worker_path);
	if (!worker)
		return SUP_EXIT_FAIL;
	s.opts.worker_path = worker;
	if (s.opts.host_devices) {
		(void)snprintf(hostdev, sizeof(hostdev), "%u", s.opts.host_devices);
		(void)setenv("GPUX_HOST_DEVICES", hostdev, 1);
	}
	s.started_ns = mono_ns();
	if (s.opts.daemonize) {
		r = daemonize(&ready_fd);
		if (r < 0) {
			sup_logp(LOG_ERR, "daemonize: %s", strerror(-r));
			return SUP_EXIT_FAIL;
		}
	}

	r = listen_socket(&s);
	if (r == -EADDRINUSE) {
		sup_logp(LOG_NOTICE, "another gpuxd serves %s", s.socket_path);
		notify(&ready_fd, 'A');
		code = SUP_EXIT_RUNNING;
		goto out;
	}
	if (r < 0) {
		sup_logp(LOG_ERR, "%s: %s", s.socket_path, strerror(-r));
		goto out;
	}
	r = ipc_loop_new(IPC_LOOP_AUTO, &s.loop);
	if (r < 0) {
		sup_logp(LOG_ERR, "event loop: %s", strerror(-r));
		goto out;
	}
	if (ipc_loop_fallback(s.loop))
		sup_logp(LOG_NOTICE, "io_uring refused (%s): using epoll",
			 strerror(-ipc_loop_fallback(s.loop)));
	r = setup_signals(&s);
	if (r < 0)
		goto out;
	r = sup_workers_probe(&s);
	if (r < 0) {
		sup_logp(LOG_ERR, "no devices: %s", strerror(-r));
		goto out;
	}
	r = sup_stop_setup(&s);
	if (r < 0)
		goto out;
	r = sup_workers_start(&s);
	if (r < 0)
		goto out;
	r = sup_clients_start(&s);
	if (r < 0) {
		sup_logp(LOG_ERR, "listening: %s", strerror(-r));
		goto out;
	}
	if (s.opts.metrics) {
		r = sup_metrics_start(&s, why, sizeof(why));
		if (r < 0) {
			sup_logp(LOG_ERR, "--metrics %s: %s", s.opts.metrics, why);
			goto out;
		}
		sup_log("metrics at http://%s/metrics", s.metrics_where);
	}
	notify(&ready_fd, 'R');
	sup_log("serving %u %s device%s on %s (%s)%s%s", s.nworkers, s.workers[0].backend,
		s.nworkers == 1 ? "" : "s", s.socket_path, ipc_loop_name(s.loop),
		s.opts.private_mode ? ", private" : "", s.activated ? ", socket-activated" : "");
	(void)sup_notify("READY=1\nSTATUS=serving %u %s device%s on %s", s.nworkers,
			 s.workers[0].backend, s.nworkers == 1 ? "" : "s", s.socket_path);
	r = ipc_loop_run(s.loop);
	code = r < 0 ? SUP_EXIT_FAIL : SUP_EXIT_OK;

out:
	if (s.loop) {
		sup_metrics_free(&s);
		sup_clients_free(&s);
		sup_workers_free(&s);
		ipc_timer_free(s.stop_timer);
		ipc_watch_free(s.signal_watch);
		ipc_loop_free(s.loop);
	}
	/* A socket systemd made stays: it takes clients while gpuxd is restarted. */
	if (s.listen_fd >= 0 && !s.activated)
		(void)unlink(s.socket_path);
	(void)safe_close(s.listen_fd);
	(void)safe_close(s.signal_fd);
	(void)safe_close(s.lock_fd);
	sup_log_close();
	return code;
}
