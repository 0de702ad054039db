/* SPDX-License-Identifier: MIT */
/* supervisor/main.c: gpuxd: options, the listening socket, signals, daemonizing, the loop. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
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
#include "parse.h"
#include "path.h"
#include "sup.h"

#ifndef GPUX_LIBEXECDIR
#define GPUX_LIBEXECDIR "/usr/local/libexec"
#endif

#define DEFAULT_IDLE_EXIT_MS 10000
#define DEFAULT_TIMEOUT_MS 60000
#define DEFAULT_MAX_TIMEOUT_MS 3600000
#define DEFAULT_DRAIN_MS 5000
#define DEFAULT_MAX_CLIENTS 1024
#define DEFAULT_MAX_CLIENTS_PER_USER 256
#define DEFAULT_MAX_CLIENTS_PER_PROCESS 64
#define DEFAULT_ADMIN_CLIENTS 16
#define DEFAULT_HELLO_TIMEOUT_MS 5000
#define DEFAULT_BUSY_HELLO_TIMEOUT_MS 250

static void usage(FILE *f)
{
	(void)fprintf(f,
		"usage: gpuxd [options]\n"
		"  --socket PATH         listen here (default $XDG_RUNTIME_DIR/gpux/gpuxd.sock,\n"
		"                        else /tmp/gpux-UID/gpuxd.sock)\n"
		"  --private             exit once the last client has been gone a while\n"
		"  --daemonize           go to the background; return once listening\n"
		"  --idle-exit-ms MS     that while (default %d)\n"
		"  --backend B           auto (default), cuda or host\n"
		"  --host-devices N      host back end: serve N devices (default 1)\n"
		"  --worker PATH         the gpux-worker program\n"
		"  --cache-dir DIR       compiled modules (default $GPUX_CACHE_DIR, else\n"
		"                        $XDG_CACHE_HOME/gpux)\n"
		"  --timeout-ms MS       default request deadline (default %d)\n"
		"  --max-timeout-ms MS   the longest deadline a client may ask for (default %d)\n"
		"  --drain-ms MS         on SIGTERM, how long requests may finish (default %d)\n"
		"  --quota-shared BYTES  shared-buffer memory one client may have (default a\n"
		"                        quarter of the machine's): the library refuses more at\n"
		"                        once, and workers do not map more\n"
		"  --quota-shared-user BYTES  what all clients of one user together may have\n"
		"                        mapped by a worker (default half the machine's memory)\n"
		"  --quota-device BYTES  device memory a client may hold in device buffers\n"
		"                        (default half the device's)\n"
		"  --cache-bytes BYTES   the device cache's budget (default a quarter of the device)\n"
		"  --cache-ttl-ms MS     cached inputs unused this long go (default 600000)\n"
		"  --slots N             streams per worker\n"
		"  --allow-group GROUP   also serve members of GROUP (socket mode 0660). Host\n"
		"                        kernels (the host back end's C code) are native code\n"
		"                        run as gpuxd's user, inside its workers, so only that\n"
		"                        user and root may load them: never the group\n"
		"  --host-sandbox MODE   auto (default: on with --allow-group or as root), on or\n"
		"                        off: host kernels run under a seccomp filter (memory,\n"
		"                        clocks, sleep; no files, sockets, processes, signals);\n"
		"                        a forbidden call fails the request as a kernel fault\n"
		"                        and restarts the worker. A kernel that corrupts its\n"
		"                        worker's memory can still reach past it\n"
		"  --socket-mode MODE    the socket's mode, octal (default 0600)\n"
		"Connections (a process has one per gpux_connect()):\n"
		"  --max-clients N       at once, of everybody (default %d, at most %u); the\n"
		"                        last --reserved-clients of them only for gpuxd's user\n"
		"                        and root\n"
		"  --reserved-clients N  (default max-clients / 16)\n"
		"  --max-clients-per-user N     of one user other than those (default %d)\n"
		"  --max-clients-per-process N  of one process (default %d)\n"
		"  --admin-clients N     beyond max-clients, kept for gpux status (default %d)\n"
		"  --hello-timeout-ms MS a new connection's time to say hello (default %d)\n"
		"  --busy-hello-timeout-ms MS   that time while connections without hello hold a\n"
		"                        quarter of max-clients, or only the reserve is left\n"
		"                        (default %d)\n"
		"Metrics:\n"
		"  --metrics ADDR        serve Prometheus metrics at http://ADDR/metrics\n"
		"                        (HOST:PORT, [V6]:PORT, or :PORT for every address)\n"
		"Logs:\n"
		"  --log-level LEVEL     err, warning, notice, info (default) or debug\n"
		"  --log-file PATH       log there (reopened on SIGHUP); by default the journal\n"
		"                        under systemd, syslog with --daemonize, else stderr;\n"
		"                        --private: $GPUX_LOG_FILE, else\n"
		"                        $XDG_STATE_HOME/gpux/gpuxd.log (~/.local/state/...)\n"
		"  -h, --help            this text\n"
		"  --version             gpuxd's version\n",
		DEFAULT_IDLE_EXIT_MS, DEFAULT_TIMEOUT_MS, DEFAULT_MAX_TIMEOUT_MS, DEFAULT_DRAIN_MS,
		DEFAULT_MAX_CLIENTS, IPC_WORKER_CLIENTS_MAX, DEFAULT_MAX_CLIENTS_PER_USER,
		DEFAULT_MAX_CLIENTS_PER_PROCESS, DEFAULT_ADMIN_CLIENTS, DEFAULT_HELLO_TIMEOUT_MS,
		DEFAULT_BUSY_HELLO_TIMEOUT_MS);
}

static int parse_group(const char *s, gid_t *ret)
{
	uint64_t v;
	struct group *g;

	if (ipc_parse_u64(s, 10, &v) == 0) {
		*ret = (gid_t)v;
		return 0;
	}
	g = getgrnam(s);
	if (!g)
		return -ENOENT;
	*ret = g->gr_gid;
	return 0;
}

static int parse_args(int argc, char **argv, struct sup_opts *o)
{
	enum { O_SOCKET = 256, O_PRIVATE, O_DAEMON, O_IDLE, O_BACKEND, O_HOSTDEV, O_WORKER, O_CACHE,
	       O_TIMEOUT, O_MAXTIMEOUT, O_DRAIN, O_QUOTA, O_QUOTAUSER, O_QUOTADEV, O_CACHEBYTES,
	       O_CACHETTL, O_SLOTS, O_GROUP, O_MODE, O_MAXC, O_RESERVED, O_PERUSER, O_PERPROC,
	       O_ADMINC, O_HELLO, O_BUSYHELLO, O_SANDBOX, O_LOGLEVEL, O_LOGFILE, O_VERSION,
	       O_METRICS };
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "private", no_argument, NULL, O_PRIVATE },
		{ "daemonize", no_argument, NULL, O_DAEMON },
		{ "idle-exit-ms", required_argument, NULL, O_IDLE },
		{ "backend", required_argument, NULL, O_BACKEND },
		{ "host-devices", required_argument, NULL, O_HOSTDEV },
		{ "worker", required_argument, NULL, O_WORKER },
		{ "cache-dir", required_argument, NULL, O_CACHE },
		{ "timeout-ms", required_argument, NULL, O_TIMEOUT },
		{ "max-timeout-ms", required_argument, NULL, O_MAXTIMEOUT },
		{ "drain-ms", required_argument, NULL, O_DRAIN },
		{ "quota-shared", required_argument, NULL, O_QUOTA },
		{ "quota-shared-user", required_argument, NULL, O_QUOTAUSER },
		{ "quota-device", required_argument, NULL, O_QUOTADEV },
		{ "cache-bytes", required_argument, NULL, O_CACHEBYTES },
		{ "cache-ttl-ms", required_argument, NULL, O_CACHETTL },
		{ "slots", required_argument, NULL, O_SLOTS },
		{ "allow-group", required_argument, NULL, O_GROUP },
		{ "socket-mode", required_argument, NULL, O_MODE },
		{ "max-clients", required_argument, NULL, O_MAXC },
		{ "reserved-clients", required_argument, NULL, O_RESERVED },
		{ "max-clients-per-user", required_argument, NULL, O_PERUSER },
		{ "max-clients-per-process", required_argument, NULL, O_PERPROC },
		{ "admin-clients", required_argument, NULL, O_ADMINC },
		{ "hello-timeout-ms", required_argument, NULL, O_HELLO },
		{ "busy-hello-timeout-ms", required_argument, NULL, O_BUSYHELLO },
		{ "host-sandbox", required_argument, NULL, O_SANDBOX },
		{ "metrics", required_argument, NULL, O_METRICS },
		{ "log-level", required_argument, NULL, O_LOGLEVEL },
		{ "log-file", required_argument, NULL, O_LOGFILE },
		{ "version", no_argument, NULL, O_VERSION },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool mode_set = false;
	const char *sandbox = "auto";
	uint64_t v;
	int c, r, idx = 0;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, &idx)) >= 0) {
		r = 0;
		switch (c) {
		case O_LOGLEVEL:
			r = sup_log_level_parse(optarg);
			o->log_level = r;
			break;
		case O_LOGFILE:
			o->log_file = optarg;
			break;
		case O_METRICS:
			o->metrics = optarg;
			break;
		case O_VERSION:
			printf("gpuxd %s\n", GPUX_VERSION_STRING);
			exit(SUP_EXIT_OK);
		case O_SOCKET:
			o->socket_path = optarg;
			break;
		case O_PRIVATE:
			o->private_mode = true;
			break;
		case O_DAEMON:
			o->daemonize = true;
			break;
		case O_BACKEND:
			if (strcmp(optarg, "auto") && strcmp(optarg, "host") && strcmp(optarg, "cuda"))
				r = -EINVAL;
			o->backend = optarg;
			break;
		case O_WORKER:
			o->worker_path = optarg;
			break;
		case O_SANDBOX:
			if (strcmp(optarg, "auto") && strcmp(optarg, "on") && strcmp(optarg, "off"))
				r = -EINVAL;
			sandbox = optarg;
			break;
		case O_CACHE:
			o->cache_dir = optarg;
			break;
		case O_GROUP:
			r = parse_group(optarg, &o->allow_gid);
			o->allow_group = true;
			break;
		case O_MODE:
			r = ipc_parse_u64(optarg, 8, &v);
			o->socket_mode = (unsigned)(v & 0777);
			mode_set = true;
			break;
		case O_IDLE:
		case O_HOSTDEV:
		case O_TIMEOUT:
		case O_MAXTIMEOUT:
		case O_DRAIN:
		case O_QUOTA:
		case O_QUOTAUSER:
		case O_QUOTADEV:
		case O_CACHEBYTES:
		case O_CACHETTL:
		case O_SLOTS:
		case O_MAXC:
		case O_RESERVED:
		case O_PERUSER:
		case O_PERPROC:
		case O_ADMINC:
		case O_HELLO:
		case O_BUSYHELLO:
			r = ipc_parse_u64(optarg, 10, &v);
			if (c == O_IDLE)
				o->idle_exit_ms = v;
			else if (c == O_HOSTDEV)
				o->host_devices = (unsigned)MIN(v, IPC_DEVICES_MAX);
			else if (c == O_TIMEOUT)
				o->timeout_ms = v;
			else if (c == O_MAXTIMEOUT)
				o->max_timeout_ms = v;
			else if (c == O_DRAIN)
				o->drain_ms = v;
			else if (c == O_QUOTA)
				o->quota_shared = v;
			else if (c == O_QUOTAUSER)
				o->quota_shared_user = v;
			else if (c == O_QUOTADEV)
				o->quota_device = v;
			else if (c == O_CACHEBYTES)
				o->cache_bytes = v;
			else if (c == O_CACHETTL)
				o->cache_ttl_ms = v;
			else if (c == O_SLOTS)
				o->slots = (unsigned)MIN(v, IPC_STATUS_SLOTS);
			else if (c == O_MAXC && v > IPC_WORKER_CLIENTS_MAX)
				r = -ERANGE; /* a worker would close the channels past it */
			else if (c == O_MAXC)
				o->max_clients = (unsigned)v;
			else if (c == O_RESERVED)
				o->reserved_clients = (unsigned)MIN(v, 1000000);
			else if (c == O_PERUSER)
				o->max_clients_per_user = (unsigned)MIN(v, 1000000);
			else if (c == O_PERPROC)
				o->max_clients_per_process = (unsigned)MIN(v, 1000000);
			else if (c == O_ADMINC)
				o->admin_clients = (unsigned)MIN(v, 1000000);
			else if (c == O_HELLO)
				o->hello_timeout_ms = v;
			else
				o->busy_hello_timeout_ms = v;
			break;
		case 'h':
			usage(stdout);
			exit(SUP_EXIT_OK);
		case ':':
			(void)fprintf(stderr, "gpuxd: option %s needs a value\n", argv[optind - 1]);
			return -EINVAL;
		default:
			(void)fprintf(stderr, "gpuxd: unknown option %s\n", argv[optind - 1]);
			return -EINVAL;
		}
		if (r < 0) {
			(void)fprintf(stderr, "gpuxd: --%s: bad value \"%s\"\n", opts[idx].name, optarg);
			return r;
		}
	}
	if (!mode_set && o->allow_group)
		o->socket_mode = 0660;
	/* A gpuxd that serves other users, or runs as root: its kernels are worth fencing. */
	o->host_sandbox = strcmp(sandbox, "on") == 0 ||
			  (strcmp(sandbox, "auto") == 0 && (o->allow_group || geteuid() == 0));
	if (o->reserved_clients == UINT_MAX)
		o->reserved_clients = o->max_clients / 16;
	/* Nobody but gpuxd's user could connect: surely a mistake. */
	if (o->reserved_clients >= o->max_clients)
		return -EINVAL;
	if (optind != argc) {
		(void)fprintf(stderr, "gpuxd: unexpected argument %s\n", argv[optind]);
		return -EINVAL;
	}
	return 0;
}

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
			sup_logp(LOG_ERR, "%s: %s", dir, r == -EPERM ? "not a private directory of this user"
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
	sup_logp(LOG_NOTICE, "signal %u (%s): stopping: draining for up to %llu ms",
		 si.ssi_signo, strsignal((int)si.ssi_signo), (unsigned long long)s->opts.drain_ms);
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
	char hostdev[16];
	int r, code = SUP_EXIT_FAIL;

	s.opts = (struct sup_opts){
		.backend = "auto",
		.socket_mode = 0600,
		.idle_exit_ms = DEFAULT_IDLE_EXIT_MS,
		.timeout_ms = DEFAULT_TIMEOUT_MS,
		.max_timeout_ms = DEFAULT_MAX_TIMEOUT_MS,
		.drain_ms = DEFAULT_DRAIN_MS,
		.max_clients = DEFAULT_MAX_CLIENTS,
		.reserved_clients = UINT_MAX,
		.max_clients_per_user = DEFAULT_MAX_CLIENTS_PER_USER,
		.max_clients_per_process = DEFAULT_MAX_CLIENTS_PER_PROCESS,
		.admin_clients = DEFAULT_ADMIN_CLIENTS,
		.hello_timeout_ms = DEFAULT_HELLO_TIMEOUT_MS,
		.busy_hello_timeout_ms = DEFAULT_BUSY_HELLO_TIMEOUT_MS,
		.log_level = LOG_INFO,
	};
	s.listen_fd = -1;
	s.metrics_fd = -1;
	s.lock_fd = -1;
	s.signal_fd = -1;
	sup_notify_init();
	if (parse_args(argc, argv, &s.opts) < 0) {
		usage(stderr);
		return SUP_EXIT_USAGE;
	}
	shared_quotas(&s.opts);
	if (absolute(&s.opts.socket_path, &abs_socket) < 0 ||
	    absolute(&s.opts.cache_dir, &abs_cache) < 0 || absolute(&s.opts.log_file, &abs_log) < 0 ||
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
		sup_logp(LOG_NOTICE, "io_uring refused (%s): using epoll", strerror(-ipc_loop_fallback(s.loop)));
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
		r = sup_metrics_start(&s, s.opts.metrics);
		if (r < 0) {
			sup_logp(LOG_ERR, "--metrics %s: %s", s.opts.metrics, strerror(-r));
			goto out;
		}
		sup_log("metrics at http://%s/metrics", s.opts.metrics);
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
