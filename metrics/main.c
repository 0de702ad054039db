/* SPDX-License-Identifier: MIT */
/* metrics/main.c: gpux-metrics: gpuxd --metrics' HTTP endpoint, a process that gpuxd starts beside itself. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <gpux/version.h>

#include "admin.h"
#include "macro.h"
#include "metrics.h"
#include "mx.h"
#include "opt.h"

/* How long gpuxd has to answer a status query. */
#define STATUS_TIMEOUT_MS 2000

/*
 * gpuxd binds the port (so that a bad address fails gpuxd's start, with the reason) and hands
 * it over as fd 3; this process serves it, and asks gpuxd for its status on its socket, as
 * `gpux status` does, for each scrape. Whatever a flood of connections does to it, gpuxd's own
 * loop never sees an HTTP connection.
 */
struct mx_opts {
	unsigned listen_fd;
	const char *socket_path;
	unsigned pid;
	bool per_user;
};

#define MX_ROW(field, name_, ...)                                                                  \
	{                                                                                          \
		.name = (name_), IPC_OPT_FIELD(struct mx_opts, field), __VA_ARGS__                 \
	}
static const struct ipc_opt mx_opts_table[] = {
	MX_ROW(listen_fd, "listen-fd", .kind = IPC_OPT_UINT, .arg = "FD", .max = INT_MAX,
	       .help = "the listening TCP socket to serve (default 3)"),
	MX_ROW(socket_path, "socket", .kind = IPC_OPT_TEXT, .arg = "PATH",
	       .help = "gpuxd's socket, asked for the status"),
	MX_ROW(pid, "pid", .kind = IPC_OPT_UINT, .arg = "PID", .min = 1, .max = INT_MAX,
	       .help = "gpuxd's pid: its process_* metrics; exit when it is gone"),
	MX_ROW(per_user, "per-user", .kind = IPC_OPT_FLAG, .help = "label memory by user (uid)"),
};

static const struct ipc_opt_prog mx_prog = {
	.name = "gpux-metrics",
	.synopsis = "gpux-metrics --socket PATH --pid PID [--listen-fd FD] [--per-user]\n"
		    "(started by gpuxd --metrics)",
	.version = GPUX_VERSION_STRING,
	.opts = mx_opts_table,
	.nopts = ARRAY_SIZE(mx_opts_table),
	.size = sizeof(struct mx_opts),
};

static int render(FILE *f, void *userdata, char *why, size_t why_len)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	const struct mx_opts *o = userdata;
	struct ipc_status st;
	int fd, r;

	/* gpuxd's process first: its open files without this connection to it, which it may
	 * not have seen closed yet by the time they would be counted after. */
	r = mx_process_write(f, (pid_t)o->pid);
	if (r < 0)
		return r;
	fd = ipc_admin_connect(o->socket_path, STATUS_TIMEOUT_MS, why, why_len);
	if (fd < 0)
		return fd;
	r = ipc_admin_status(fd, STATUS_TIMEOUT_MS, &st, devs);
	(void)close(fd);
	if (r < 0)
		return r;
	return ipc_metrics_write(f, &st, devs, o->per_user ? IPC_METRICS_PER_USER : 0);
}

/* As many connections as the limit of open files leaves room for, up to MX_CONNS_MAX. */
static unsigned conns_max(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 64;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
		(void)getrlimit(RLIMIT_NOFILE, &rl);
	}
	return rl.rlim_cur > MX_CONNS_MAX + 32 ? MX_CONNS_MAX : (unsigned)MAX(rl.rlim_cur, 64) - 32;
}

static void on_signal(struct ipc_watch *w, int fd, uint32_t revents, void *userdata)
{
	struct signalfd_siginfo si;

	if (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		ipc_loop_exit(userdata, 0);
}

int main(int argc, char **argv)
{
	struct mx_opts o = { .listen_fd = 3 };
	struct ipc_loop *loop = NULL;
	struct ipc_watch *sigw = NULL;
	struct mx_server *srv = NULL;
	_cleanup_(closep) int sigfd = -1;
	char why[256];
	sigset_t mask;
	int r;

	r = ipc_opt_parse(&mx_prog, argc, argv, &o, why, sizeof(why));
	if (r == IPC_OPT_HELP || r == IPC_OPT_VERSION) {
		if (r == IPC_OPT_HELP)
			ipc_opt_usage(&mx_prog, stdout);
		else
			printf("gpux-metrics %s\n", GPUX_VERSION_STRING);
		return 0;
	}
	if (r == 0 && (!o.socket_path || !o.pid)) {
		(void)snprintf(why, sizeof(why), "--socket and --pid are needed");
		r = -EINVAL;
	}
	if (r < 0) {
		(void)fprintf(stderr, "gpux-metrics: %s\n", r == -EINVAL ? why : strerror(-r));
		ipc_opt_usage(&mx_prog, stderr);
		return 2;
	}
	/* gpuxd's: it goes when gpuxd goes. */
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != (pid_t)o.pid)
		return 0;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	(void)sigprocmask(SIG_BLOCK, &mask, NULL);
	(void)signal(SIGPIPE, SIG_IGN);
	sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sigfd < 0) {
		r = -errno;
		goto out;
	}
	r = ipc_loop_new(IPC_LOOP_AUTO, &loop);
	if (r < 0)
		goto out;
	r = ipc_watch_new(loop, sigfd, POLLIN, on_signal, loop, &sigw);
	if (r < 0)
		goto out;
	r = mx_server_new(loop, (int)o.listen_fd, conns_max(), render, &o, &srv);
	if (r < 0)
		goto out;
	r = ipc_loop_run(loop);
out:
	if (r < 0)
		(void)fprintf(stderr, "gpux-metrics: %s\n", strerror(-r));
	mx_server_free(srv);
	ipc_watch_free(sigw);
	ipc_loop_free(loop);
	return r < 0 ? 1 : 0;
}
