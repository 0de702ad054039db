/* SPDX-License-Identifier: MIT */
/* worker/compile/compiler.c: the worker's side of its NVRTC helper: start it early, feed it, watch it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "compiler.h"
#include "cubin.h"
#include "cuda-image.h"
#include "macro.h"
#include "nvrtc-loader.h"
#include "segment.h"
#include "wrk.h"

/*
 * CUDA C++ is compiled by NVRTC in `gpux-worker --compiler` (worker/compile/compile-helper.c), a
 * process of its own that the worker starts as it starts and talks to over a socket: a
 * compile that crashes or never ends takes only that process down (it is killed after
 * c->timeout_ns and started again), and it compiles behind its sandbox
 * (worker/compile/compile-sandbox.c). Started early, it is warm by the first request: a
 * compile then costs what NVRTC's own does, plus two memfds.
 */

#define HELLO_TIMEOUT_NS (30ULL * NSEC_PER_SEC)
#define DEATH_GRACE_MS 1000

extern char **environ;

uint32_t wrk_nvrtc_probe(struct wrk_toolkit *ret_tk)
{
	struct nvrtc nv = { 0 };
	char why[256];
	int major = 0, minor = 0;

	/* NVRTC stays loaded (its pages are shared and mostly untouched): a C++ library that is
	 * unloaded leaves its exception-handling pool behind. */
	if (nvrtc_load(&nv, why, sizeof(why)) < 0 || nv.version(&major, &minor) != NVRTC_SUCCESS)
		major = minor = 0;
	wrk_toolkit_find(major ? nvrtc_file(&nv) : NULL, ret_tk);
	return (uint32_t)(major * 1000 + minor * 10);
}

/*
 * Reap a helper whose socket closed. One that exits closes its fds a moment before it can be
 * reaped: it is given DEATH_GRACE_MS for that. One that hung up and lives on (taken over by a
 * client's source) is killed: waiting for it would hold the worker for good.
 */
static bool reap(pid_t pid, int *ret_status)
{
	_cleanup_(closep) int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

	if (pidfd >= 0) {
		struct pollfd p = { .fd = pidfd, .events = POLLIN };

		(void)poll(&p, 1, DEATH_GRACE_MS);
	}
	if (waitpid(pid, ret_status, WNOHANG) == pid)
		return true;
	(void)kill(pid, SIGKILL);
	return waitpid(pid, ret_status, 0) == pid;
}

/* Reap a helper whose socket is gone, and say how it went. */
static char *death(struct wrk_compiler *c)
{
	int st = 0;
	pid_t pid = c->pid;

	c->fd = safe_close(c->fd);
	c->pid = 0;
	c->greeted = false;
	if (pid <= 0)
		return strdup("the compiler is gone");
	if (!reap(pid, &st))
		return strdup("the compiler died");
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS)
		return strdup("the compiler was killed by its sandbox: it made a system call that "
			      "the sandbox forbids (SIGSYS)");
	if (WIFSIGNALED(st))
		return wrk_strdup_printf("the compiler died: %s", strsignal(WTERMSIG(st)));
	return wrk_strdup_printf("the compiler exited (status %d)", WEXITSTATUS(st));
}

void wrk_compiler_stop(struct wrk_compiler *c)
{
	c->fd = safe_close(c->fd);
	if (c->pid > 0) {
		(void)kill(c->pid, SIGKILL);
		(void)waitpid(c->pid, NULL, 0);
	}
	c->pid = 0;
	c->greeted = false;
}

/* ---- the helper's directory of precompiled headers ---- */

/* Remove a directory of files (no subdirectories are made there). */
static void remove_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;

	if (d) {
		while ((de = readdir(d)))
			if (de->d_name[0] != '.')
				(void)unlinkat(dirfd(d), de->d_name, 0);
		(void)closedir(d);
	}
	(void)rmdir(path);
}

/* A directory of this user's, closed to others' writes. */
static bool own_dir(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	       (st.st_mode & 022) == 0;
}

/* pch-<pid> directories in cache_dir whose worker is gone (killed, it could not remove its
 * own). */
static void sweep_stale(const char *cache_dir)
{
	DIR *d = opendir(cache_dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[PATH_MAX];
		char *end;
		long pid;

		if (strncmp(de->d_name, "pch-", 4) != 0)
			continue;
		pid = strtol(de->d_name + 4, &end, 10);
		if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 ||
		    errno != ESRCH)
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", cache_dir, de->d_name) <
		    (int)sizeof(path))
			remove_dir(path);
	}
	(void)closedir(d);
}

void wrk_compiler_pch_dir(struct wrk_compiler *c, const char *cache_dir)
{
	char path[PATH_MAX];

	c->pch_dir[0] = '\0';
	if (!cache_dir || (mkdir(cache_dir, 0700) < 0 && errno != EEXIST) || !own_dir(cache_dir))
		return;
	sweep_stale(cache_dir);
	if (snprintf(path, sizeof(path), "%s/pch-%d", cache_dir, (int)getpid()) >=
	    (int)sizeof(path))
		return;
	if ((mkdir(path, 0700) < 0 && errno != EEXIST) || !own_dir(path))
		return;
	memcpy(c->pch_dir, path, sizeof(path));
}

void wrk_compiler_forget_pch(struct wrk_compiler *c)
{
	if (c->pch_dir[0])
		remove_dir(c->pch_dir);
	c->pch_dir[0] = '\0';
}

static int send_setup(struct wrk_compiler *c)
{
	uint8_t buf[sizeof(struct cc_setup) + (WRK_TOOLKIT_DIRS_MAX + 1) * PATH_MAX];
	struct cc_setup s = { .magic = CC_MAGIC, .kind = CC_SETUP, .ndirs = c->tk.ndirs };
	size_t n = sizeof(s);

	memcpy(s.arch, c->arch, sizeof(s.arch));
	for (unsigned i = 0; i < c->tk.ndirs; i++) {
		size_t len = strlen(c->tk.dirs[i]) + 1;

		memcpy(buf + n, c->tk.dirs[i], len);
		n += len;
	}
	if (c->pch_dir[0]) {
		size_t len = strlen(c->pch_dir) + 1;

		memcpy(buf + n, c->pch_dir, len);
		n += len;
		s.flags |= CC_SETUP_PCH;
	}
	s.dirs_len = (uint32_t)(n - sizeof(s));
	memcpy(buf, &s, sizeof(s));
	return ipc_channel_send(c->fd, buf, n, NULL, 0, 0);
}

int wrk_compiler_spawn(struct wrk_compiler *c, char **ret_msg)
{
	char ppid[16], memory[24];
	char *argv[] = { "gpux-worker", "--compiler", "--parent-pid", ppid, "--compile-memory",
			 memory,        NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none;
	int pair[2], r;

	r = ipc_channel_pair(pair, false);
	if (r < 0) {
		*ret_msg = wrk_strdup_printf("socketpair: %s", strerror(-r));
		return r;
	}
	(void)snprintf(ppid, sizeof(ppid), "%d", (int)getpid());
	(void)snprintf(memory, sizeof(memory), "%llu", (unsigned long long)c->memory);
	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	(void)posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	/* Not the worker's stderr (its log): the helper's sandbox lets it write to any fd it
	 * has, and what it has to say comes back in its replies. */
	(void)posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	(void)posix_spawn_file_actions_adddup2(&fa, pair[1], 3);
	(void)posix_spawnattr_init(&attr);
	sigemptyset(&none);
	(void)posix_spawnattr_setsigmask(&attr, &none);
	(void)posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
	r = posix_spawn(&c->pid, "/proc/self/exe", &fa, &attr, argv, environ);
	(void)posix_spawn_file_actions_destroy(&fa);
	(void)posix_spawnattr_destroy(&attr);
	(void)close(pair[1]);
	if (r != 0) {
		(void)close(pair[0]);
		c->pid = 0;
		*ret_msg = wrk_strdup_printf("cannot start the compiler: %s", strerror(r));
		return -r;
	}
	c->fd = pair[0];
	c->greeted = false;
	/* A helper started after the target is known learns it at once. */
	if (c->targeted)
		(void)send_setup(c);
	return 0;
}

void wrk_compiler_target(struct wrk_compiler *c, unsigned cc, const struct wrk_toolkit *tk)
{
	c->cc = cc;
	(void)snprintf(c->arch, sizeof(c->arch), "sm_%u", cc);
	c->tk = *tk;
	c->targeted = true;
	/* A helper that cannot hear it is found dead by the first build, which starts another. */
	if (c->fd >= 0)
		(void)send_setup(c);
}

/* The next reply, with its log (to free) and its image fd when want_image and it succeeded. */
static int recv_reply(struct wrk_compiler *c, uint64_t deadline, bool want_image,
		      struct cc_rep *ret, char **ret_log, int *ret_fd)
{
	static uint8_t buf[sizeof(struct cc_rep) + CC_LOG_MAX];
	int fds[IPC_FDS_MAX], r = 0;
	struct cc_rep rep;
	unsigned nfds = 0;
	char *log = NULL;
	ssize_t n;

	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		uint64_t now = mono_ns();
		int k;

		if (now >= deadline)
			return -ETIMEDOUT;
		k = poll(&p, 1,
			 (int)MIN((deadline - now) / NSEC_PER_MSEC + 1, (uint64_t)INT32_MAX));
		if (k < 0 && errno != EINTR)
			return -errno;
		if (k > 0)
			break;
	}
	n = ipc_channel_recv(c->fd, buf, sizeof(buf), fds, &nfds, MSG_DONTWAIT);
	if (n <= 0)
		return n == 0 ? -ECONNRESET : (int)n;
	memcpy(&rep, buf, MIN((size_t)n, sizeof(rep)));
	if ((size_t)n < sizeof(rep) || rep.magic != CC_MAGIC || rep.log_len > CC_LOG_MAX ||
	    (size_t)n != sizeof(rep) + rep.log_len ||
	    nfds != (want_image && rep.status == 0 ? 1u : 0u))
		r = -EBADMSG;
	else if (!(log = strndup((const char *)buf + sizeof(rep), rep.log_len)))
		r = -ENOMEM;
	if (r < 0) {
		for (unsigned i = 0; i < nfds; i++)
			(void)close(fds[i]);
		return r;
	}
	*ret = rep;
	*ret_log = log;
	*ret_fd = nfds ? fds[0] : -1;
	return 0;
}

/*
 * A running helper that has said hello, started now if need be. One that died before its
 * hello (killed while it warmed up) is replaced once. 0, or what a client is told, with
 * *ret_msg (to free): GPUX_E_NODRIVER (the helper found no NVRTC), GPUX_E_COMPILE (it did
 * not start: it died, or said why not), or why it could not be started (GPUX_E_NOMEM,
 * GPUX_E_IO).
 */
static gpux_status ready(struct wrk_compiler *c, char **ret_msg)
{
	struct cc_rep hello;
	char *log = NULL;
	int image_fd = -1, r;

	for (unsigned attempt = 0; !c->greeted; attempt++) {
		if (c->fd < 0) {
			r = wrk_compiler_spawn(c, ret_msg);
			if (r < 0)
				return wrk_status_from_errno(r, GPUX_E_IO);
		}
		r = recv_reply(c, mono_ns() + HELLO_TIMEOUT_NS, false, &hello, &log, &image_fd);
		if (r == 0 && hello.status == 0) {
			c->greeted = true;
			break;
		}
		if (r == -ECONNRESET && attempt == 0) {
			free(death(c));
			continue;
		}
		if (r == 0 && log && *log)
			*ret_msg = TAKE_PTR(log);
		else if (r == -ECONNRESET)
			*ret_msg = death(c);
		else
			*ret_msg = wrk_strdup_printf("the compiler did not start: %s",
						     r < 0 ? strerror(-r)
							   : ipc_status_text(hello.status));
		free(log);
		wrk_compiler_stop(c);
		return r == 0 && hello.status == GPUX_E_NODRIVER ? GPUX_E_NODRIVER : GPUX_E_COMPILE;
	}
	free(log);
	return GPUX_OK;
}

void wrk_compiler_wait_warm(struct wrk_compiler *c, uint64_t deadline)
{
	struct cc_rep hello;
	char *log = NULL;
	int fd = -1, r;

	if (c->fd < 0 || c->greeted)
		return;
	r = recv_reply(c, deadline, false, &hello, &log, &fd);
	free(log);
	if (r == 0 && hello.status == 0)
		c->greeted = true;
	else if (r == 0)
		wrk_compiler_stop(c); /* the next compile starts another, which says why */
}

/*
 * The helper's image, made from a client's source in a process that may have been taken over:
 * a whole image whose code passes the checks of a client's cubin (worker/compile/cubin.h). 0, or
 * -EBADMSG with *ret_msg (to free) saying why.
 */
static int image_check(const struct wrk_compiler *c, const uint8_t *image, size_t len,
		       char **ret_msg)
{
	struct wrk_cuimage img;
	char *why = NULL;

	if (wrk_cuimage_parse(image, len, &img) < 0) {
		*ret_msg = strdup("the compiler sent a malformed image");
		return -EBADMSG;
	}
	if (wrk_cubin_check(img.code, img.code_len, c->cc, &why) < 0) {
		*ret_msg =
			wrk_strdup_printf("the compiler's cubin was refused: %s", why ? why : "");
		free(why);
		return -EBADMSG;
	}
	return 0;
}

gpux_status wrk_compiler_build(struct wrk_compiler *c, const struct wrk_build *b,
			       uint8_t **ret_image, size_t *ret_len, char **ret_log)
{
	static uint8_t buf[sizeof(struct cc_req) + IPC_OPTIONS_MAX];
	struct cc_req rq = {
		.magic = CC_MAGIC,
		.kind = CC_COMPILE,
		.options_len = (uint32_t)strlen(b->options),
		.code_len = (uint32_t)b->code_len,
		.extra_len = (uint32_t)b->extra_len,
		.nheaders = b->nheaders,
		.nnames = b->nnames,
	};
	_cleanup_(closep) int code_fd = -1, image_fd = -1;
	_cleanup_(freep) uint8_t *image = NULL;
	struct cc_rep rep;
	char *log = NULL;
	size_t len = 0;
	gpux_status st;
	int r;

	if (rq.options_len > IPC_OPTIONS_MAX)
		return GPUX_E_INVAL;
	st = ready(c, ret_log);
	if (st < 0)
		return st;
	memcpy(buf, &rq, sizeof(rq));
	memcpy(buf + sizeof(rq), b->options, rq.options_len);
	/* The code and its headers and names are one piece in the worker's memory. */
	if (ipc_blob_new("gpux-source", b->code, b->code_len + b->extra_len, &code_fd) < 0)
		return GPUX_E_NOMEM;
	r = ipc_channel_send(c->fd, buf, sizeof(rq) + rq.options_len, &code_fd, 1, 0);
	if (r == -EPIPE || r == -ECONNRESET) {
		/* It died idle, before this request: a new one takes it. */
		free(death(c));
		st = ready(c, ret_log);
		if (st < 0)
			return st;
		r = ipc_channel_send(c->fd, buf, sizeof(rq) + rq.options_len, &code_fd, 1, 0);
	}
	if (r == 0)
		r = recv_reply(c, mono_ns() + c->timeout_ns, true, &rep, &log, &image_fd);
	if (r == -ECONNRESET || r == -EPIPE) {
		/* The next compile gets a fresh compiler. */
		*ret_log = death(c);
		return GPUX_E_COMPILE;
	}
	if (r < 0) {
		wrk_compiler_stop(c);
		*ret_log = r == -ETIMEDOUT
				   ? wrk_strdup_printf("the compiler ran past its %g s limit",
						       (double)c->timeout_ns / 1e9)
				   : strdup("the compiler said something it should not");
		return GPUX_E_COMPILE;
	}
	/* What a compile can end with (compile-helper.c); any other status, even one of gpux's
	 * (a quota, a stopping daemon), would be the helper's word about what it cannot know. */
	if (rep.status != 0) {
		if (rep.status == GPUX_E_COMPILE || rep.status == GPUX_E_INVAL ||
		    rep.status == GPUX_E_NOMEM) {
			*ret_log = log;
			return rep.status;
		}
		free(log);
		*ret_log = wrk_strdup_printf("the compiler answered with a status no compile ends "
					     "with (%d)",
					     rep.status);
		return GPUX_E_COMPILE;
	}
	r = ipc_blob_read(image_fd, 0, CC_IMAGE_MAX, &image, &len);
	if (r == 0)
		r = image_check(c, image, len, ret_log);
	else
		*ret_log = strdup("the compiler sent no usable image");
	if (r < 0) {
		free(log);
		return GPUX_E_COMPILE;
	}
	*ret_image = TAKE_PTR(image);
	*ret_len = len;
	*ret_log = log && *log ? log : NULL;
	if (!*ret_log)
		free(log);
	return 0;
}
