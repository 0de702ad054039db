/* SPDX-License-Identifier: MIT */
/* supervisor/metrics.c: gpuxd --metrics ADDR: the port, and gpux-metrics beside gpuxd to serve it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "macro.h"
#include "parse.h"
#include "sup.h"

#ifndef GPUX_LIBEXECDIR
#define GPUX_LIBEXECDIR "/usr/local/libexec"
#endif

/*
 * Whoever can reach the port can talk to the server behind it: a flood of connections must
 * neither stall gpuxd's loop nor take its fds. So gpuxd binds the port (a bad address stops
 * gpuxd at start, saying why) and hands it to gpux-metrics, a process of its own (as s6 keeps
 * its logger apart from what it supervises), which serves HTTP and asks gpuxd for the status
 * on gpuxd's socket as `gpux status` does. gpuxd restarts it when it dies.
 */

int sup_metrics_addr(const char *addr, char *host, size_t host_len, unsigned *ret_port, char *why,
		     size_t why_len)
{
	const char *colon = strrchr(addr, ':'), *h = addr;
	uint64_t port;
	size_t n;

	if (!*addr) {
		(void)snprintf(why, why_len, "an empty value");
		return -EINVAL;
	}
	if (!colon) {
		(void)snprintf(why, why_len, "\"%s\" is not HOST:PORT, [V6]:PORT or :PORT", addr);
		return -EINVAL;
	}
	n = (size_t)(colon - addr);
	if (n > 0 && addr[0] == '[') {
		if (n < 2 || addr[n - 1] != ']') {
			(void)snprintf(why, why_len, "\"%s\": [V6]:PORT has no port after the ']'",
				       addr);
			return -EINVAL;
		}
		h++;
		n -= 2;
	} else if (memchr(addr, ':', n)) {
		(void)snprintf(why, why_len,
			       "\"%s\": an IPv6 address goes in brackets ([::1]:9464)", addr);
		return -EINVAL;
	}
	if (!colon[1]) {
		(void)snprintf(why, why_len, "\"%s\" has no port after the ':'", addr);
		return -EINVAL;
	}
	if (ipc_parse_u64(colon + 1, 10, &port) < 0) {
		(void)snprintf(why, why_len, "\"%s\" is not a port number", colon + 1);
		return -EINVAL;
	}
	if (port < 1 || port > 65535) {
		(void)snprintf(why, why_len, "port %s is not from 1 to 65535", colon + 1);
		return -EINVAL;
	}
	if (n >= host_len) {
		(void)snprintf(why, why_len, "the host is longer than %zu bytes", host_len - 1);
		return -EINVAL;
	}
	memcpy(host, h, n);
	host[n] = '\0';
	*ret_port = (unsigned)port;
	return 0;
}

/* gpux-metrics: beside gpuxd, beside its worker, or where it was installed. */
static char *find_program(const struct sup *s)
{
	char self[PATH_MAX], worker[PATH_MAX];
	const char *dirs[3];
	unsigned n = 0;
	ssize_t len;
	char *p;

	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len > 0) {
		self[len] = '\0';
		dirs[n++] = dirname(self);
	}
	if (s->opts.worker_path && strchr(s->opts.worker_path, '/')) {
		(void)snprintf(worker, sizeof(worker), "%s", s->opts.worker_path);
		dirs[n++] = dirname(worker);
	}
	dirs[n++] = GPUX_LIBEXECDIR;
	for (unsigned i = 0; i < n; i++) {
		if (asprintf(&p, "%s/gpux-metrics", dirs[i]) < 0)
			return NULL;
		if (access(p, X_OK) == 0)
			return p;
		free(p);
	}
	return NULL;
}

/* The address a socket is bound to, as HOST:PORT or [V6]:PORT. */
static void bound_where(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET6) {
			const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;

			(void)inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
			port = ntohs(a->sin6_port);
		} else if (ss.ss_family == AF_INET) {
			const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;

			(void)inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
			port = ntohs(a->sin_port);
		}
	}
	(void)snprintf(buf, len, ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, port);
}

/* The first of the addresses ADDR names that binds, listening; its fd above 16 (so that the
 * child's dup2 to fd 3 never meets it). */
static int bind_addr(struct sup *s, char *why, size_t why_len)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
				  .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai = NULL;
	char host[256], port_s[8];
	unsigned port;
	int fd = -1, r;

	r = sup_metrics_addr(s->opts.metrics, host, sizeof(host), &port, why, why_len);
	if (r < 0)
		return r;
	(void)snprintf(port_s, sizeof(port_s), "%u", port);
	r = getaddrinfo(*host ? host : NULL, port_s, &hints, &ai);
	if (r != 0) {
		int e = r == EAI_SYSTEM ? errno : 0;

		(void)snprintf(why, why_len, "%s", e ? strerror(e) : gai_strerror(r));
		return e ? -e : -EADDRNOTAVAIL;
	}
	r = -EADDRNOTAVAIL;
	for (const struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			r = -errno;
			continue;
		}
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){ 1 }, sizeof(int));
		if (bind(fd, a->ai_addr, a->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
			r = -errno;
			fd = safe_close(fd);
		}
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		(void)snprintf(why, why_len, "%s", strerror(-r));
		return r;
	}
	s->metrics_fd = fcntl(fd, F_DUPFD_CLOEXEC, 16);
	r = s->metrics_fd < 0 ? -errno : 0;
	(void)close(fd);
	if (r < 0) {
		(void)snprintf(why, why_len, "%s", strerror(-r));
		return r;
	}
	bound_where(s->metrics_fd, s->metrics_where, sizeof(s->metrics_where));
	return 0;
}

static void on_metrics_exit(struct ipc_watch *watch, int fd, uint32_t revents, void *userdata);

static int spawn(struct sup *s)
{
	char pid_s[16];
	char *argv[] = { s->metrics_program,
			 "--socket",
			 s->socket_path,
			 "--pid",
			 pid_s,
			 s->opts.metrics_per_user ? "--per-user" : NULL,
			 NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int r;

	(void)snprintf(pid_s, sizeof(pid_s), "%d", (int)getpid());
	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	(void)posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	(void)posix_spawn_file_actions_adddup2(&fa, s->metrics_fd, 3);
	(void)posix_spawn_file_actions_addclosefrom_np(&fa, 4);
	r = sup_spawn(&pid, s->metrics_program, &fa, argv);
	(void)posix_spawn_file_actions_destroy(&fa);
	if (r < 0)
		return r;
	s->metrics_pid = pid;
	s->metrics_started_ns = mono_ns();
	s->metrics_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	r = s->metrics_pidfd < 0 ? -errno : 0;
	if (r == 0)
		r = ipc_watch_new(s->loop, s->metrics_pidfd, POLLIN, on_metrics_exit, s,
				  &s->metrics_watch);
	if (r < 0) {
		(void)kill(pid, SIGKILL);
		(void)waitpid(pid, NULL, 0);
		s->metrics_pid = 0;
		s->metrics_pidfd = safe_close(s->metrics_pidfd);
	}
	return r;
}

/* Started again after a pause that doubles with each quick death, as a worker is. */
static void restart_later(struct sup *s)
{
	uint64_t now = mono_ns();

	if (now - s->metrics_started_ns >= SUP_DEATH_WINDOW_NS || !s->metrics_backoff_ns)
		s->metrics_backoff_ns = SUP_BACKOFF_MIN_NS;
	else
		s->metrics_backoff_ns = MIN(s->metrics_backoff_ns * 2, SUP_BACKOFF_MAX_NS);
	ipc_timer_arm(s->metrics_timer, now + s->metrics_backoff_ns);
}

static void on_metrics_exit(struct ipc_watch *watch, int fd, uint32_t revents, void *userdata)
{
	struct sup *s = userdata;
	int st;

	if (waitpid(s->metrics_pid, &st, WNOHANG) != s->metrics_pid)
		return;
	ipc_watch_free(s->metrics_watch);
	s->metrics_watch = NULL;
	s->metrics_pidfd = safe_close(s->metrics_pidfd);
	if (WIFSIGNALED(st))
		sup_logp(LOG_WARNING, "metrics: gpux-metrics %d killed by signal %d: started again",
			 (int)s->metrics_pid, WTERMSIG(st));
	else
		sup_logp(LOG_WARNING,
			 "metrics: gpux-metrics %d exited with status %d: started again",
			 (int)s->metrics_pid, WEXITSTATUS(st));
	s->metrics_pid = 0;
	restart_later(s);
}

static void on_metrics_timer(struct ipc_timer *t, void *userdata)
{
	struct sup *s = userdata;
	int r = spawn(s);

	if (r < 0) {
		sup_logp(LOG_ERR, "metrics: cannot start %s: %s", s->metrics_program, strerror(-r));
		restart_later(s);
	}
}

int sup_metrics_start(struct sup *s, char *why, size_t why_len)
{
	int r;

	s->metrics_program = find_program(s);
	if (!s->metrics_program) {
		(void)snprintf(why, why_len, "no gpux-metrics beside gpuxd, beside %s or in %s",
			       s->opts.worker_path, GPUX_LIBEXECDIR);
		return -ENOENT;
	}
	r = bind_addr(s, why, why_len);
	if (r < 0)
		return r;
	r = ipc_timer_new(s->loop, on_metrics_timer, s, &s->metrics_timer);
	if (r == 0)
		r = spawn(s);
	if (r < 0)
		(void)snprintf(why, why_len, "%s: %s", s->metrics_program, strerror(-r));
	return r;
}

void sup_metrics_free(struct sup *s)
{
	if (s->metrics_pid > 0) {
		(void)kill(s->metrics_pid, SIGKILL);
		(void)waitpid(s->metrics_pid, NULL, 0);
		s->metrics_pid = 0;
	}
	ipc_watch_free(s->metrics_watch);
	s->metrics_watch = NULL;
	s->metrics_pidfd = safe_close(s->metrics_pidfd);
	ipc_timer_free(s->metrics_timer);
	s->metrics_timer = NULL;
	s->metrics_fd = safe_close(s->metrics_fd);
	free(s->metrics_program);
	s->metrics_program = NULL;
}
