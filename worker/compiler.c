/* SPDX-License-Identifier: MIT */
/* worker/compiler.c: NVRTC in a sandboxed helper process, and the worker's side of talking to it. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdbool.h>

#include "compiler.h"
#include "nvrtc-loader.h"
#include "compile-sandbox.h"
#include "ipc/channel.h"
#include "ipc/macro.h"
#include "ipc/segment.h"
#include "wrk.h"

/*
 * CUDA C++ is compiled by NVRTC in `gpux-worker --compiler`, a process of its own that the
 * worker starts once and talks to over a socket: a compile that crashes or never ends takes
 * only that process down (it is killed after COMPILE_TIMEOUT_NS and started again), and it
 * compiles behind its sandbox (worker/compile-sandbox.c), which lets it open no file: after a first
 * compile has loaded NVRTC's built-in headers, source code can reach no file on the machine
 * (`#include "/etc/passwd"` fails), whatever its options say.
 */

#define CC_MAGIC 0x43435847u /* "GXCC" */
#define COMPILE_TIMEOUT_NS (120ULL * NSEC_PER_SEC)
#define HELLO_TIMEOUT_NS (30ULL * NSEC_PER_SEC)
#define LOG_MAX (32u * 1024u)
#define IMAGE_MAX (512u * 1024u * 1024u)

extern char **environ;

struct cc_req {
	uint32_t magic;
	uint32_t lang;
	uint32_t options_len;
	uint32_t code_len;
	char arch[16];
	/* then options_len bytes; the code is in a sealed memfd */
};

struct cc_rep {
	uint32_t magic;
	int32_t status;
	uint32_t log_len;
	uint32_t version; /* NVRTC's, major * 1000 + minor * 10 (in the hello) */
	/* then log_len bytes; a successful compile sends its image in a sealed memfd */
};

/* ---- the helper process ---- */

uint32_t wrk_nvrtc_version(void)
{
	struct nvrtc nv = { 0 };
	char why[256];
	int major = 0, minor = 0;

	/* NVRTC stays loaded (its pages are shared and mostly untouched): a C++ library that is
	 * unloaded leaves its exception-handling pool behind. */
	if (nvrtc_load(&nv, why, sizeof(why)) < 0 || nv.version(&major, &minor) != NVRTC_SUCCESS)
		major = minor = 0;
	return (uint32_t)(major * 1000 + minor * 10);
}

static int reply(int fd, int status, const char *log, size_t log_len, uint32_t version,
		 int image_fd)
{
	static uint8_t buf[sizeof(struct cc_rep) + LOG_MAX];
	struct cc_rep rep = {
		.magic = CC_MAGIC,
		.status = status,
		.log_len = (uint32_t)MIN(log_len, (size_t)LOG_MAX),
		.version = version,
	};

	memcpy(buf, &rep, sizeof(rep));
	if (rep.log_len)
		memcpy(buf + sizeof(rep), log, rep.log_len);
	return ipc_channel_send(fd, buf, sizeof(rep) + rep.log_len, &image_fd, image_fd >= 0 ? 1 : 0,
				0);
}

/* Split options at white space into argv (pointers into the copy opts). */
static unsigned split(char *opts, const char **argv, unsigned max)
{
	unsigned n = 0;
	char *save = NULL;

	for (char *t = strtok_r(opts, " \t\n", &save); t && n < max; t = strtok_r(NULL, " \t\n", &save))
		argv[n++] = t;
	return n;
}

static void compile_one(struct nvrtc *nv, int fd, const struct cc_req *rq, const char *options,
			int code_fd)
{
	_cleanup_(freep) uint8_t *code = NULL;
	_cleanup_(freep) char *opts = strndup(options, rq->options_len);
	_cleanup_(freep) char *log = NULL;
	_cleanup_(freep) char *cubin = NULL;
	_cleanup_(closep) int image_fd = -1;
	char arch_opt[48];
	const char *argv[2 + WRK_OPTIONS_MAX];
	unsigned argc = 0;
	nvrtcProgram prog = NULL;
	size_t log_len = 0, cubin_len = 0;
	nvrtcResult r;
	int rc;

	rc = ipc_blob_read(code_fd, rq->code_len, IPC_CODE_MAX, &code, NULL);
	if (rc < 0 || !opts || !memchr(rq->arch, 0, sizeof(rq->arch))) {
		(void)reply(fd, GPUX_E_INVAL, "bad compile request", 19, 0, -1);
		return;
	}
	(void)snprintf(arch_opt, sizeof(arch_opt), "--gpu-architecture=%s", rq->arch);
	argv[argc++] = arch_opt;
	argv[argc++] = "--no-source-include";
	argc += split(opts, argv + argc, ARRAY_SIZE(argv) - argc);

	r = nv->create(&prog, (const char *)code, "kernel.cu", 0, NULL, NULL);
	if (r != NVRTC_SUCCESS) {
		const char *e = nv->error(r);
		(void)reply(fd, GPUX_E_COMPILE, e, strlen(e), 0, -1);
		return;
	}
	r = nv->compile(prog, (int)argc, argv);
	if (nv->log_size(prog, &log_len) == NVRTC_SUCCESS && log_len > 1) {
		log = malloc(log_len);
		/* A log NVRTC did not fill is no log. */
		if (log && nv->log(prog, log) != NVRTC_SUCCESS) {
			free(log);
			log = NULL;
		}
	}
	log_len = log ? strnlen(log, log_len) : 0;
	if (r != NVRTC_SUCCESS) {
		const char *e = nv->error(r);
		if (log_len > 0)
			(void)reply(fd, GPUX_E_COMPILE, log, log_len, 0, -1);
		else
			(void)reply(fd, GPUX_E_COMPILE, e, strlen(e), 0, -1);
		(void)nv->destroy(&prog);
		return;
	}
	if (nv->cubin_size(prog, &cubin_len) != NVRTC_SUCCESS || cubin_len == 0 ||
	    !(cubin = malloc(cubin_len)) || nv->cubin(prog, cubin) != NVRTC_SUCCESS ||
	    ipc_blob_new("gpux-cubin", cubin, cubin_len, &image_fd) < 0) {
		(void)reply(fd, GPUX_E_COMPILE, "NVRTC made no cubin", 19, 0, -1);
		(void)nv->destroy(&prog);
		return;
	}
	(void)nv->destroy(&prog);
	(void)reply(fd, 0, log ? log : "", log_len, 0, image_fd);
}

int wrk_compiler_main(int fd, pid_t parent)
{
	static const char warm[] = "extern \"C\" __global__ void gpux_warm(int *p) { *p = 1; }";
	static uint8_t buf[sizeof(struct cc_req) + IPC_OPTIONS_MAX];
	struct nvrtc nv = { 0 };
	char why[256] = "";
	int major = 0, minor = 0, r;
	bool landlocked;
	nvrtcProgram prog;

	/* Die with the worker; if it is gone already, go at once. */
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		return 1;
	if (nvrtc_load(&nv, why, sizeof(why)) < 0)
		return reply(fd, GPUX_E_NODRIVER, why, strlen(why), 0, -1) < 0 ? 1 : 0;
	(void)nv.version(&major, &minor);
	/* A first compile loads what NVRTC needs from disk, before the sandbox closes it. */
	if (nv.create(&prog, warm, "warm.cu", 0, NULL, NULL) == NVRTC_SUCCESS) {
		(void)nv.compile(prog, 0, NULL);
		(void)nv.destroy(&prog);
	}
	r = wrk_compile_sandbox_seal(NULL, 0, fd, &landlocked);
	if (r < 0) {
		(void)snprintf(why, sizeof(why), "cannot sandbox the compiler: %s", strerror(-r));
		return reply(fd, GPUX_E_IO, why, strlen(why), 0, -1) < 0 ? 1 : 0;
	}
	if (reply(fd, 0, "", 0, (uint32_t)(major * 1000 + minor * 10), -1) < 0)
		return 1;

	for (;;) {
		int fds[IPC_FDS_MAX];
		unsigned nfds;
		struct cc_req rq;
		ssize_t n = ipc_channel_recv(fd, buf, sizeof(buf), fds, &nfds, 0);

		if (n <= 0)
			return n == 0 ? 0 : 1;
		memcpy(&rq, buf, MIN((size_t)n, sizeof(rq)));
		if ((size_t)n < sizeof(rq) || rq.magic != CC_MAGIC || nfds != 1 ||
		    (size_t)n != sizeof(rq) + rq.options_len) {
			for (unsigned i = 0; i < nfds; i++)
				(void)close(fds[i]);
			return 1;
		}
		compile_one(&nv, fd, &rq, (const char *)buf + sizeof(rq), fds[0]);
		(void)close(fds[0]);
	}
}

/* ---- the worker's side ---- */

void wrk_compiler_stop(struct wrk_compiler *c)
{
	c->fd = safe_close(c->fd);
	if (c->pid > 0) {
		(void)kill(c->pid, SIGKILL);
		(void)waitpid(c->pid, NULL, 0);
	}
	c->pid = 0;
}

static int recv_reply(struct wrk_compiler *c, uint64_t deadline, bool want_image,
		      struct cc_rep *ret, char **ret_log, int *ret_fd)
{
	static uint8_t buf[sizeof(struct cc_rep) + LOG_MAX];
	int fds[IPC_FDS_MAX];
	unsigned nfds = 0;
	ssize_t n;

	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		uint64_t now = mono_ns();
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)MIN((deadline - now) / NSEC_PER_MSEC + 1, (uint64_t)INT32_MAX));
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r > 0)
			break;
	}
	n = ipc_channel_recv(c->fd, buf, sizeof(buf), fds, &nfds, MSG_DONTWAIT);
	if (n <= 0)
		return n == 0 ? -ECONNRESET : (int)n;
	memcpy(ret, buf, MIN((size_t)n, sizeof(*ret)));
	if ((size_t)n < sizeof(*ret) || ret->magic != CC_MAGIC || ret->log_len > LOG_MAX ||
	    (size_t)n != sizeof(*ret) + ret->log_len ||
	    nfds != (want_image && ret->status == 0 ? 1u : 0u)) {
		for (unsigned i = 0; i < nfds; i++)
			(void)close(fds[i]);
		return -EBADMSG;
	}
	*ret_log = strndup((const char *)buf + sizeof(*ret), ret->log_len);
	*ret_fd = nfds ? fds[0] : -1;
	return *ret_log ? 0 : -ENOMEM;
}

int wrk_compiler_start(struct wrk_compiler *c, char **ret_msg)
{
	char ppid[16];
	char *argv[] = { "gpux-worker", "--compiler", "--parent-pid", ppid, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none;
	struct cc_rep hello;
	char *log = NULL;
	int pair[2], image_fd = -1, r;

	r = ipc_channel_pair(pair, false);
	if (r < 0) {
		*ret_msg = wrk_strdup_printf("socketpair: %s", strerror(-r));
		return GPUX_E_IO;
	}
	(void)snprintf(ppid, sizeof(ppid), "%d", (int)getpid());
	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	(void)posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
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
		return GPUX_E_IO;
	}
	c->fd = pair[0];
	r = recv_reply(c, mono_ns() + HELLO_TIMEOUT_NS, false, &hello, &log, &image_fd);
	if (r < 0 || hello.status < 0) {
		if (r == 0 && log && *log)
			*ret_msg = TAKE_PTR(log);
		else
			*ret_msg = wrk_strdup_printf("the compiler did not start: %s",
						     r < 0 ? strerror(-r) : ipc_status_text(hello.status));
		free(log);
		wrk_compiler_stop(c);
		return r == 0 && hello.status == GPUX_E_NODRIVER ? GPUX_E_NODRIVER : GPUX_E_COMPILE;
	}
	free(log);
	return 0;
}

int wrk_compiler_build(struct wrk_compiler *c, const char *arch, const uint8_t *code,
		       size_t code_len, const char *options, uint8_t **ret_image, size_t *ret_len,
		       char **ret_log)
{
	static uint8_t buf[sizeof(struct cc_req) + IPC_OPTIONS_MAX];
	struct cc_req rq = { .magic = CC_MAGIC, .lang = GPUX_LANG_CUDA, .code_len = (uint32_t)code_len };
	_cleanup_(closep) int code_fd = -1, image_fd = -1;
	struct cc_rep rep;
	char *log = NULL;
	int r;

	if (c->fd < 0) {
		r = wrk_compiler_start(c, ret_log);
		if (r < 0)
			return r;
	}
	rq.options_len = (uint32_t)strlen(options);
	if (rq.options_len > IPC_OPTIONS_MAX || strlen(arch) >= sizeof(rq.arch))
		return GPUX_E_INVAL;
	memcpy(rq.arch, arch, strlen(arch) + 1);
	memcpy(buf, &rq, sizeof(rq));
	memcpy(buf + sizeof(rq), options, rq.options_len);
	if (ipc_blob_new("gpux-source", code, code_len, &code_fd) < 0)
		return GPUX_E_NOMEM;
	r = ipc_channel_send(c->fd, buf, sizeof(rq) + rq.options_len, &code_fd, 1, 0);
	if (r == 0)
		r = recv_reply(c, mono_ns() + COMPILE_TIMEOUT_NS, true, &rep, &log, &image_fd);
	if (r < 0) {
		/* Crashed, hung or garbled: the next compile gets a fresh compiler. */
		wrk_compiler_stop(c);
		*ret_log = r == -ETIMEDOUT ? wrk_strdup_printf("the compile took longer than %llu s",
							       (unsigned long long)(COMPILE_TIMEOUT_NS / NSEC_PER_SEC))
					   : strdup("the compiler died");
		return GPUX_E_COMPILE;
	}
	if (rep.status < 0) {
		*ret_log = log;
		return rep.status;
	}
	r = ipc_blob_read(image_fd, 0, IMAGE_MAX, ret_image, ret_len);
	if (r < 0) {
		free(log);
		*ret_log = strdup("the compiler sent no usable image");
		return GPUX_E_COMPILE;
	}
	*ret_log = log && *log ? log : NULL;
	if (!*ret_log)
		free(log);
	return 0;
}
