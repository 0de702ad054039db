/* SPDX-License-Identifier: MIT */
/* client/connect.c: reaching gpuxd: its socket, a private gpuxd when none listens, the hello. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "channel.h"
#include "cli.h"
#include "macro.h"
#include "path.h"
#include "spin.h"

#ifndef GPUX_SBINDIR
#define GPUX_SBINDIR "/usr/local/sbin"
#endif

extern char **environ;

/* Why the last connection of this thread failed: gpux_connect_error(). */
static __thread char connect_why[512];

int cli_connect_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(connect_why, sizeof(connect_why), fmt, ap);
	va_end(ap);
	return err;
}

/* gpuxd: $GPUX_DAEMON, beside this library (a build tree), or where it was installed. */
static char *find_daemon(void)
{
	const char *e = getenv("GPUX_DAEMON");
	Dl_info info;
	char *p;

	if (e && *e)
		return strdup(e);
	if (dladdr((void *)gpux_connect, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
		char *copy = strdup(info.dli_fname);
		if (copy && asprintf(&p, "%s/gpuxd", dirname(copy)) >= 0) {
			free(copy);
			if (access(p, X_OK) == 0)
				return p;
			free(p);
		} else
			free(copy);
	}
	return strdup(GPUX_SBINDIR "/gpuxd");
}

/* Lock held: sleep `us` without it, so that other threads and fork() go on meanwhile. */
static void sleep_unlocked(gpux_ctx *ctx, unsigned us)
{
	(void)pthread_mutex_unlock(&ctx->lock);
	(void)usleep(us);
	(void)pthread_mutex_lock(&ctx->lock);
}

/*
 * Lock held, dropped while it waits: start a private gpuxd. It daemonizes and its first
 * process exits once the socket listens, so waiting for that process is waiting for
 * readiness, and leaves no zombie. Past the deadline that process is killed (its daemon, if
 * it has one, goes on). It logs to its own file (ipc_private_log()); its stdio is /dev/null.
 */
static int autospawn(gpux_ctx *ctx, uint64_t deadline)
{
	_cleanup_(freep) char *daemon = find_daemon();
	const char *path = ctx->path;
	char *argv[] = { "gpuxd", "--private", "--daemonize", "--socket", (char *)path, NULL };
	char log[PATH_MAX];
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none;
	pid_t pid, w;
	int r, st = 0;

	if (!daemon)
		return cli_connect_fail(-ENOMEM, "out of memory");
	if (ipc_private_log(log, sizeof(log)) < 0)
		(void)snprintf(log, sizeof(log), "(none: no HOME)");
	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	(void)posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	(void)posix_spawn_file_actions_adddup2(&fa, 1, 2);
	/* The program's own fds, close-on-exec or not, are none of gpuxd's business. */
	(void)posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	(void)posix_spawnattr_init(&attr);
	sigemptyset(&none);
	(void)posix_spawnattr_setsigmask(&attr, &none);
	(void)posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
	r = posix_spawn(&pid, daemon, &fa, &attr, argv, environ);
	(void)posix_spawn_file_actions_destroy(&fa);
	(void)posix_spawnattr_destroy(&attr);
	if (r != 0)
		return cli_connect_fail(-ECONNREFUSED,
					"%s: no gpuxd listens there, and starting one failed: %s: "
					"%s (GPUX_DAEMON names the gpuxd program)",
					path, daemon, strerror(r));
	/* A gpuxd probing its devices may take a while: the lock is not held meanwhile. */
	(void)pthread_mutex_unlock(&ctx->lock);
	for (unsigned us = 1000;; us = MIN(us * 2, 20000u)) {
		w = waitpid(pid, &st, WNOHANG);
		if (w == pid || (w < 0 && errno != EINTR))
			break;
		if (w == 0 && mono_ns() >= deadline) {
			(void)kill(pid, SIGKILL);
			(void)waitpid(pid, NULL, 0);
			break;
		}
		if (w == 0)
			(void)usleep(us);
	}
	(void)pthread_mutex_lock(&ctx->lock);
	if (w < 0)
		return 0; /* reaped by the program's own SIGCHLD handling: just try */
	if (w == 0)
		return cli_connect_fail(-ECONNREFUSED,
					"%s: no gpuxd listens there, and the one started (%s) was "
					"not ready in %llu s: its log is %s",
					path, daemon,
					(unsigned long long)(CLI_CONNECT_NS / NSEC_PER_SEC), log);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	return cli_connect_fail(-ECONNREFUSED,
				"%s: no gpuxd listens there, and the one started (%s) failed with "
				"status %d: its log is %s",
				path, daemon, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st),
				log);
}

/*
 * Lock held: a socket connected to path, in ctx->connecting_fd (where a fork() meanwhile
 * finds it: the child must not keep it). It does not block: -EAGAIN when gpuxd's backlog is
 * full.
 */
static int connect_socket(gpux_ctx *ctx, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	ctx->connecting_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (ctx->connecting_fd < 0)
		return -errno;
	if (connect(ctx->connecting_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;

		ctx->connecting_fd = safe_close(ctx->connecting_fd);
		return r;
	}
	return 0;
}

/*
 * Lock not held: look at gpuxd's socket without sleeping for a spin's time (ipc_spin_ns()):
 * its answer comes within tens of microseconds, which a sleep would add its wake-up to. True
 * once it is readable.
 */
static bool spin_readable(int fd)
{
	uint64_t until = mono_ns() + (ipc_spin_fits(2) ? ipc_spin_ns() : 0);

	for (uint64_t now = mono_ns(); now < until; now = mono_ns()) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, 0) != 0)
			return true;
		for (unsigned i = 0; i < 64; i++)
			cpu_relax();
	}
	return false;
}

/* Lock held, dropped while it waits: receive one message from gpuxd (into ctx->rbuf, fds
 * and all under the lock), waiting at most until the deadline. */
static int recv_until(gpux_ctx *ctx, struct ipc_msg *msg, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = ctx->connecting_fd, .events = POLLIN };
		uint64_t now = mono_ns();
		int fd = ctx->connecting_fd;
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		(void)pthread_mutex_unlock(&ctx->lock);
		r = spin_readable(fd) ? 1
				      : poll(&p, 1, (int)((deadline - now) / NSEC_PER_MSEC) + 1);
		(void)pthread_mutex_lock(&ctx->lock);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r <= 0)
			continue;
		r = ipc_channel_recv_msg(ctx->connecting_fd, ctx->rbuf, IPC_MSG_MAX, msg,
					 MSG_DONTWAIT);
		if (r == -EAGAIN)
			continue;
		return r == 0 ? -ECONNRESET : r;
	}
}

static int hello(gpux_ctx *ctx, uint64_t deadline)
{
	struct ipc_hello h = { .min_version = IPC_VERSION_MIN, .max_version = IPC_VERSION };
	struct ipc_welcome wel;
	struct ipc_msg msg;
	int n, r;

	n = ipc_encode_hello(ctx->sbuf, IPC_MSG_MAX, 1, &h);
	/* A refusal may be waiting already, and the socket closed behind it: read it anyway.
	 * (A new socket has room for it: the send does not block.) */
	(void)ipc_channel_send(ctx->connecting_fd, ctx->sbuf, (size_t)n, NULL, 0, 0);
	/* No answer is as good as nobody there. */
	r = recv_until(ctx, &msg, deadline);
	if (r < 0)
		return cli_connect_fail(-ECONNREFUSED, "%s: gpuxd did not answer: %s", ctx->path,
					strerror(-r));
	if (msg.hdr.type == IPC_DONE) {
		struct ipc_done_msg d;

		/* Refused: gpuxd's status (this user, no version in common, too many clients,
		 * stopping), and why. */
		r = cli_connect_fail(-EPROTO, "%s: gpuxd's answer makes no sense", ctx->path);
		if (ipc_decode_done(&msg, &d) == 0 && d.m.status < 0)
			r = cli_connect_fail(cli_errno_from_status(d.m.status),
					     "%s: gpuxd refused this process (uid %u): %.*s",
					     ctx->path, (unsigned)geteuid(), (int)d.m.text_len,
					     d.text);
		ipc_msg_close_fds(&msg);
		return r;
	}
	r = ipc_decode_welcome(&msg, &wel);
	ipc_msg_close_fds(&msg);
	if (r < 0 || wel.ndevices == 0)
		return cli_connect_fail(-EPROTO, "%s: gpuxd's welcome makes no sense", ctx->path);
	ctx->client_id = wel.client_id;
	ctx->ndevices = wel.ndevices;
	ctx->quota_shared = wel.quota_shared;
	ctx->prio_max = wel.prio_max;
	ctx->prio_default = wel.prio_default;
	cli_urgent_update(ctx);
	if (!(wel.flags & IPC_WELCOME_PRIVATE))
		ctx->served_shared = true;
	/* One DEVICE per device follows at once. */
	for (uint32_t i = 0; i < wel.ndevices; i++) {
		r = recv_until(ctx, &msg, deadline);
		if (r < 0)
			return cli_connect_fail(-ECONNREFUSED,
						"%s: gpuxd did not finish its welcome: %s",
						ctx->path, strerror(-r));
		if (msg.hdr.type == IPC_DEVICE)
			cli_device_msg(ctx, &msg);
		ipc_msg_close_fds(&msg);
	}
	return 0;
}

GPUX_EXPORT const char *gpux_connect_error(void)
{
	return connect_why;
}

void cli_disconnect(gpux_ctx *ctx)
{
	for (uint32_t i = 0; i < IPC_DEVICES_MAX; i++) {
		struct cli_dev *d = &ctx->devs[i];

		cli_dev_drop_rings(d);
		cli_marks_drop(d);
		cli_outbox_clear(&d->out);
		d->out_armed = false;
		d->chan_fd = safe_close(d->chan_fd);
		if (d->status)
			(void)munmap(d->status, IPC_STATUS_PAGE_SIZE);
		d->status = NULL;
		d->inflight = 0;
		free(d->dropped);
		d->dropped = NULL;
		d->want_channel = false;
	}
	ctx->sup_fd = safe_close(ctx->sup_fd);
	ctx->connecting_fd = safe_close(ctx->connecting_fd);
	ctx->connected = false;
}

/* Lock held, dropped while it waits: connect_socket(), starting a private gpuxd when none
 * listens and we may, until the deadline. */
static int reach(gpux_ctx *ctx, uint64_t deadline)
{
	bool spawned = false;
	int r;

	for (unsigned backoff_us = 1000;; backoff_us = MIN(backoff_us * 2, 100000u)) {
		r = connect_socket(ctx, ctx->path);
		if (r == 0)
			return 0;
		/* A socket this user may not use; any other failure: nobody to reach. */
		if (r == -EACCES || r == -EPERM)
			return cli_connect_fail(-EACCES,
						"%s: permission denied: the socket's mode or group "
						"keeps uid %u out (gpuxd --allow-group)",
						ctx->path, (unsigned)geteuid());
		if (r != -ENOENT && r != -ECONNREFUSED && r != -EAGAIN)
			return cli_connect_fail(-ECONNREFUSED, "%s: %s", ctx->path, strerror(-r));
		if (mono_ns() > deadline)
			return cli_connect_fail(-ECONNREFUSED, "%s: %s", ctx->path,
						r == -EAGAIN ? "gpuxd takes no new connections "
							       "(its backlog is full)"
							     : "the private gpuxd started for it "
							       "does not listen");
		/* Someone listens, and is busy: try again. */
		if (r == -EAGAIN) {
			sleep_unlocked(ctx, backoff_us);
			continue;
		}
		/* A shared gpuxd that went away is not replaced by a private one unasked: this
		 * process would lose, without a word, what the shared one was set up to give. */
		if (ctx->served_shared)
			return cli_connect_fail(
				-ECONNREFUSED,
				"%s: the gpuxd that served this process went away (%s)", ctx->path,
				r == -ENOENT ? "no socket" : "nobody listens");
		if (!ctx->autospawn)
			return cli_connect_fail(
				-ECONNREFUSED, "%s: %s", ctx->path,
				r == -ENOENT ? "no such socket: no gpuxd serves this path"
					     : "nobody listens there (its gpuxd is gone)");
		if (!spawned) {
			spawned = true;
			r = autospawn(ctx, deadline);
			if (r < 0)
				return r;
			continue;
		}
		sleep_unlocked(ctx, backoff_us);
	}
}

/*
 * Lock held: connect. The lock is dropped while it waits (for a gpuxd to start, for its
 * answer), so that other threads, and fork(), do not wait for gpuxd; threads that need the
 * connection meanwhile wait for this one (cli_ensure()). Every fd it makes is in the context
 * by the time the lock is dropped, where a fork() closes the child's copy.
 */
int cli_connect(gpux_ctx *ctx)
{
	uint64_t deadline = mono_ns() + CLI_CONNECT_NS;
	int r;

	connect_why[0] = '\0';
	ctx->connecting = true;
	r = reach(ctx, deadline);
	if (r == 0)
		r = hello(ctx, deadline);
	if (r == 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = CLI_EP_SUP };

		ctx->sup_fd = ctx->connecting_fd;
		ctx->connecting_fd = -1;
		(void)epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->sup_fd, &ev);
		ctx->connected = true;
	} else if (ctx->connecting_fd >= 0) {
		cli_disconnect(ctx);
	}
	ctx->connecting = false;
	(void)pthread_cond_broadcast(&ctx->cond);
	return r;
}
