/* SPDX-License-Identifier: MIT */
/* worker/compile/compile-helper.c: gpux-worker --compiler: NVRTC, warm and sandboxed, serving its worker. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "channel.h"
#include "compile-sandbox.h"
#include "compiler-proto.h"
#include "compiler.h"
#include "cuda-image.h"
#include "knames.h"
#include "macro.h"
#include "nvrtc-loader.h"
#include "segment.h"
#include "toolkit.h"
#include "wrk.h"

/*
 * The helper is started with the worker, before the device is even opened, so that NVRTC is
 * loaded and has compiled (the first compile of a process pays for loading NVRTC's built-in
 * headers and its code generator) by the time a client's module arrives. It learns its
 * target (SETUP), compiles once more for it, then closes itself behind its sandbox
 * (worker/compile/compile-sandbox.c) for good and says hello. Everything after that is a
 * client's source: it can read the toolkit's headers and its own named headers, nothing else;
 * it can write one directory of its own, where NVRTC keeps precompiled headers.
 *
 * Precompiled headers (NVRTC's automatic PCH, CUDA 12.8 and later): a source whose first
 * lines include headers leaves what NVRTC made of them (cooperative_groups.h: 100 MB, CUB's
 * block reduce: 180 MB) in that directory, and the next source that begins with the same
 * lines, compiled with the same options, starts from there (measured here: a second kernel
 * of cooperative_groups.h in 133 ms against 692, a CUB one in 256 against 1154). Only for a
 * source without named headers of its own: NVRTC takes a precompiled header made with
 * another text of a named header for the same (it checks the files it reads, not those).
 * The directory is this helper's alone: the worker empties it for each helper it starts, so
 * that what one helper made (taken over by a client's source, say) never reaches the next.
 * At most PCH_BYTES_MAX stay, the oldest going first.
 */

#define PCH_BYTES_MAX (1024ull * 1024 * 1024)
#define PCH_FILES_MAX 64u
/* What NVRTC's PCH heap may grow to when a header needs more (256 MiB to start with). */
#define PCH_HEAP_MAX (2048ull * 1024 * 1024)

#define WARM_SOURCE                                                                                \
	"template <typename T> __global__ void gpux_warm(T *p, int n) { if (n) *p = (T)n; }\n"     \
	"template __global__ void gpux_warm<float>(float *, int);\n"

struct helper {
	int fd;
	struct nvrtc nv;
	char arch_opt[48];
	struct wrk_toolkit tk;
	char inc_opts[WRK_TOOLKIT_DIRS_MAX][PATH_MAX + 4];
	char pch_dir[PATH_MAX];      /* "" without */
	char pch_opt[PATH_MAX + 16]; /* --pch-dir=... */
	bool pch;                    /* precompiled headers are kept there */
	bool landlocked;
	uint8_t buf[sizeof(struct cc_req) + IPC_OPTIONS_MAX + 1];
};

static int reply(int fd, gpux_status status, const char *log, size_t log_len, uint32_t version,
		 uint32_t flags, int image_fd)
{
	static uint8_t buf[sizeof(struct cc_rep) + CC_LOG_MAX];
	struct cc_rep rep = {
		.magic = CC_MAGIC,
		.status = status,
		.log_len = (uint32_t)MIN(log_len, (size_t)CC_LOG_MAX),
		.version = version,
		.flags = flags,
	};

	memcpy(buf, &rep, sizeof(rep));
	if (rep.log_len)
		memcpy(buf + sizeof(rep), log, rep.log_len);
	return ipc_channel_send(fd, buf, sizeof(rep) + rep.log_len, &image_fd,
				image_fd >= 0 ? 1 : 0, 0);
}

static int reply_text(int fd, gpux_status status, const char *text)
{
	return reply(fd, status, text, strlen(text), 0, 0, -1);
}

/* Split options at blanks into argv (pointers into opts, which is changed). */
static unsigned split(char *opts, const char **argv, unsigned max)
{
	unsigned n = 0;
	char *save = NULL;

	for (char *t = strtok_r(opts, " \t\n", &save); t && n < max;
	     t = strtok_r(NULL, " \t\n", &save))
		argv[n++] = t;
	return n;
}

/* The arguments every compile gets before the client's: the target, and where headers are. */
static unsigned base_args(struct helper *h, const char **argv)
{
	unsigned n = 0;

	argv[n++] = h->arch_opt;
	if (h->landlocked) {
		for (unsigned i = 0; i < h->tk.ndirs; i++)
			argv[n++] = h->inc_opts[i];
	} else {
		/* No Landlock: no file may be read, and none is looked for. */
		argv[n++] = "--no-source-include";
	}
	return n;
}

/* NVRTC's log of prog, or NULL; to free. */
static char *program_log(struct nvrtc *nv, nvrtcProgram prog)
{
	size_t len = 0;
	char *log;

	if (nv->log_size(prog, &len) != NVRTC_SUCCESS || len <= 1)
		return NULL;
	log = malloc(len);
	/* A log NVRTC did not fill is no log. */
	if (log && nv->log(prog, log) != NVRTC_SUCCESS) {
		free(log);
		return NULL;
	}
	return log;
}

/* ---- one compile ---- */

struct job {
	const char *code;
	unsigned nheaders;
	const char **hnames, **htexts;
	unsigned nnames; /* the client's name expressions, then the source's instantiations */
	unsigned nclient;
	const char **names;
	const char *argv[8 + WRK_TOOLKIT_DIRS_MAX + WRK_OPTIONS_MAX];
	unsigned argc;
};

static void job_free(struct job *j)
{
	for (unsigned i = 0; i < j->nheaders; i++) {
		free((char *)j->hnames[i]);
		free((char *)j->htexts[i]);
	}
	for (unsigned i = 0; i < j->nnames; i++)
		free((char *)j->names[i]);
	free(j->hnames);
	free(j->htexts);
	free(j->names);
}

static int name_add(struct job *j, const char *s, size_t len)
{
	char *c;

	if (j->nnames == IPC_MOD_NAMES_MAX || len > IPC_KERNEL_NAME_MAX)
		return 0;
	c = strndup(s, len);
	if (!c)
		return -ENOMEM;
	for (unsigned i = 0; i < j->nnames; i++)
		if (wrk_knames_same(j->names[i], c)) {
			free(c);
			return 0;
		}
	j->names[j->nnames++] = c;
	return 0;
}

static int scanned(const char *expr, size_t len, void *userdata)
{
	return name_add(userdata, expr, len);
}

/* The request's headers and name expressions, copied out of the block after the code. */
static int job_read(struct job *j, const struct cc_req *rq, const uint8_t *extra)
{
	struct ipc_mod_extra_cursor cur;
	struct ipc_mod_item it;
	int r;

	j->hnames = calloc(rq->nheaders + 1, sizeof(*j->hnames));
	j->htexts = calloc(rq->nheaders + 1, sizeof(*j->htexts));
	j->names = calloc(IPC_MOD_NAMES_MAX, sizeof(*j->names));
	if (!j->hnames || !j->htexts || !j->names)
		return -ENOMEM;
	ipc_mod_extra_begin(&cur, extra, rq->extra_len, rq->nheaders, rq->nnames);
	while ((r = ipc_mod_extra_next(&cur, &it)) > 0) {
		if (it.text) {
			j->hnames[j->nheaders] = strndup(it.name, it.name_len);
			j->htexts[j->nheaders] = strndup(it.text, it.text_len);
			if (!j->hnames[j->nheaders++] || !j->htexts[j->nheaders - 1])
				return -ENOMEM;
		} else if ((r = name_add(j, it.name, it.name_len)) < 0) {
			return r;
		}
	}
	if (r < 0 || j->nheaders != rq->nheaders)
		return -EBADMSG;
	j->nclient = j->nnames;
	return 0;
}

/* Compile with the first `nnames` name expressions; *ret_prog on success or failure. */
static nvrtcResult compile(struct helper *h, struct job *j, unsigned nnames, nvrtcProgram *ret_prog)
{
	nvrtcResult r = h->nv.create(ret_prog, j->code, "kernel.cu", (int)j->nheaders, j->htexts,
				     j->hnames);

	for (unsigned i = 0; r == NVRTC_SUCCESS && i < nnames; i++)
		r = h->nv.add_name(*ret_prog, j->names[i]);
	if (r == NVRTC_SUCCESS)
		r = h->nv.compile(*ret_prog, (int)j->argc, j->argv);
	return r;
}

/* The image: the cubin and, for each name expression NVRTC lowered, (expression, symbol). */
static int image_make(struct helper *h, struct job *j, nvrtcProgram prog, unsigned nnames,
		      int *ret_fd)
{
	_cleanup_(freep) char *cubin = NULL, *pairs = NULL;
	_cleanup_(freep) uint8_t *img = NULL;
	size_t cubin_len = 0, pairs_len = 0, img_len;
	uint32_t npairs = 0;
	FILE *f;
	int r;

	if (h->nv.cubin_size(prog, &cubin_len) != NVRTC_SUCCESS || cubin_len == 0 ||
	    !(cubin = malloc(cubin_len)) || h->nv.cubin(prog, cubin) != NVRTC_SUCCESS)
		return -EIO;
	f = open_memstream(&pairs, &pairs_len);
	if (!f)
		return -ENOMEM;
	for (unsigned i = 0; i < nnames; i++) {
		const char *sym = NULL;

		if (h->nv.lowered_name(prog, j->names[i], &sym) != NVRTC_SUCCESS || !sym)
			continue;
		(void)fwrite(j->names[i], 1, strlen(j->names[i]) + 1, f);
		(void)fwrite(sym, 1, strlen(sym) + 1, f);
		npairs++;
	}
	if (fclose(f) != 0)
		return -ENOMEM;
	r = wrk_cuimage_pack(cubin, cubin_len, pairs, pairs_len, npairs, &img, &img_len);
	if (r < 0)
		return r;
	return ipc_blob_new("gpux-cubin", img, img_len, ret_fd);
}

/* ---- precompiled headers ---- */

/* Whether the source begins (past blanks and comments) with an #include: only then is there
 * anything to precompile. */
static bool begins_with_include(const char *s)
{
	for (;;) {
		s += strspn(s, " \t\r\n\v\f");
		if (s[0] == '/' && s[1] == '/')
			s += strcspn(s, "\n");
		else if (s[0] == '/' && s[1] == '*' && strstr(s + 2, "*/"))
			s = strstr(s + 2, "*/") + 2;
		else
			break;
	}
	if (*s++ != '#')
		return false;
	s += strspn(s, " \t");
	return strncmp(s, "include", 7) == 0;
}

/* NVRTC's options for its automatic PCH, said nothing of in the log. */
static unsigned pch_args(struct helper *h, const char **argv)
{
	argv[0] = "--pch";
	argv[1] = h->pch_opt;
	argv[2] = "--pch-messages=false";
	argv[3] = "--pch-verbose=false";
	return 4;
}

struct pch_file {
	char name[NAME_MAX + 1];
	time_t mtime;
	uint64_t bytes;
};

static int by_age(const void *a, const void *b)
{
	const struct pch_file *x = a, *y = b;

	return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* Let the oldest files of the directory go until it holds at most PCH_BYTES_MAX; all of them
 * when `all`. */
static void pch_trim(struct helper *h, bool all)
{
	static struct pch_file files[PCH_FILES_MAX];
	unsigned n = 0;
	uint64_t total = 0;
	struct dirent *de;
	DIR *d = opendir(h->pch_dir);

	if (!d)
		return;
	while ((de = readdir(d)) && n < PCH_FILES_MAX) {
		struct stat st;

		if (de->d_name[0] == '.' ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		(void)snprintf(files[n].name, sizeof(files[n].name), "%s", de->d_name);
		files[n].mtime = st.st_mtime;
		files[n].bytes = (uint64_t)st.st_blocks * 512;
		total += files[n++].bytes;
	}
	qsort(files, n, sizeof(files[0]), by_age);
	for (unsigned i = 0; i < n && (all || total > PCH_BYTES_MAX || n - i > PCH_FILES_MAX / 2);
	     i++) {
		(void)unlinkat(dirfd(d), files[i].name, 0);
		total -= files[i].bytes;
	}
	(void)closedir(d);
}

/* After a compile that used PCH: a header too big for NVRTC's PCH heap gets a larger one
 * next time; the directory kept within its bounds. */
static void pch_after(struct helper *h, nvrtcProgram prog)
{
	size_t need = 0;

	if (prog && h->nv.pch_create_status && h->nv.pch_heap_required && h->nv.pch_heap_set &&
	    h->nv.pch_create_status(prog) == NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED &&
	    h->nv.pch_heap_required(prog, &need) == NVRTC_SUCCESS && need <= PCH_HEAP_MAX)
		(void)h->nv.pch_heap_set(need);
	pch_trim(h, false);
}

static void compile_one(struct helper *h, const struct cc_req *rq, const char *options, int code_fd)
{
	_cleanup_(freep) uint8_t *blob = NULL;
	_cleanup_(freep) char *opts = strndup(options, rq->options_len);
	_cleanup_(freep) char *log = NULL;
	_cleanup_(closep) int image_fd = -1;
	struct job j = { .argc = 0 };
	nvrtcProgram prog = NULL;
	unsigned nnames;
	nvrtcResult r;
	bool pch;
	int rc;

	rc = ipc_blob_read(code_fd, (size_t)rq->code_len + rq->extra_len, IPC_CODE_MAX, &blob,
			   NULL);
	if (rc < 0 || !opts) {
		(void)reply_text(h->fd, GPUX_E_INVAL, "bad compile request");
		return;
	}
	/* The extra block after the code is copied out; then the code is a string. */
	rc = job_read(&j, rq, blob + rq->code_len);
	blob[rq->code_len] = '\0';
	j.code = (const char *)blob;
	if (rc == 0)
		rc = wrk_knames_scan(j.code, strlen(j.code), scanned, &j);
	if (rc < 0) {
		job_free(&j);
		(void)reply_text(h->fd, wrk_status_from_errno(rc, GPUX_E_INVAL),
				 "bad headers or name expressions");
		return;
	}
	j.argc = base_args(h, j.argv);
	pch = h->pch && j.nheaders == 0 && begins_with_include(j.code);
	if (pch)
		j.argc += pch_args(h, j.argv + j.argc);
	j.argc += split(opts, j.argv + j.argc, ARRAY_SIZE(j.argv) - j.argc);

	nnames = j.nnames;
	r = compile(h, &j, nnames, &prog);
	log = prog ? program_log(&h->nv, prog) : NULL;
	/* An instantiation the scan misread must not fail a source that compiles: again without
	 * them, when NVRTC's complaint is about name expressions (its "__nv_name_map"). */
	if (r != NVRTC_SUCCESS && nnames > j.nclient && log && strstr(log, "__nv_name_map")) {
		(void)h->nv.destroy(&prog);
		free(log);
		nnames = j.nclient;
		r = compile(h, &j, nnames, &prog);
		log = prog ? program_log(&h->nv, prog) : NULL;
	}
	if (r != NVRTC_SUCCESS) {
		(void)reply_text(h->fd, GPUX_E_COMPILE, log ? log : h->nv.error(r));
	} else if (image_make(h, &j, prog, nnames, &image_fd) < 0) {
		(void)reply_text(h->fd, GPUX_E_COMPILE, "NVRTC made no cubin");
	} else {
		(void)reply(h->fd, 0, log ? log : "", log ? strlen(log) : 0, 0, 0, image_fd);
	}
	if (pch)
		pch_after(h, prog);
	if (prog)
		(void)h->nv.destroy(&prog);
	job_free(&j);
}

/* ---- start ---- */

/* Compile a small template kernel with these arguments: loads what a compile needs. */
static void warm(struct helper *h, unsigned argc, const char **argv)
{
	nvrtcProgram prog;

	if (h->nv.create(&prog, WARM_SOURCE, "warm.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
		return;
	(void)h->nv.add_name(prog, "gpux_warm<float>");
	if (h->nv.compile(prog, (int)argc, argv) == NVRTC_SUCCESS) {
		size_t len;
		const char *sym;

		(void)h->nv.cubin_size(prog, &len);
		(void)h->nv.lowered_name(prog, "gpux_warm<float>", &sym);
	}
	(void)h->nv.destroy(&prog);
}

/* SETUP: the target and the toolkit's directories, checked. */
static int setup(struct helper *h)
{
	uint8_t buf[sizeof(struct cc_setup) + WRK_TOOLKIT_DIRS_MAX * PATH_MAX];
	struct cc_setup s;
	int fds[IPC_FDS_MAX];
	unsigned nfds;
	ssize_t n = ipc_channel_recv(h->fd, buf, sizeof(buf), fds, &nfds, 0);
	const char *p;

	if (n < (ssize_t)sizeof(s) || nfds != 0)
		return -EBADMSG;
	memcpy(&s, buf, sizeof(s));
	if (s.magic != CC_MAGIC || s.kind != CC_SETUP || !memchr(s.arch, 0, sizeof(s.arch)) ||
	    s.ndirs > WRK_TOOLKIT_DIRS_MAX || (size_t)n != sizeof(s) + s.dirs_len ||
	    (s.flags & ~CC_SETUP_PCH))
		return -EBADMSG;
	(void)snprintf(h->arch_opt, sizeof(h->arch_opt), "--gpu-architecture=%s", s.arch);
	p = (const char *)buf + sizeof(s);
	for (unsigned i = 0; i < s.ndirs + !!(s.flags & CC_SETUP_PCH); i++) {
		size_t len = strnlen(p, (size_t)((const char *)buf + n - p));

		if (p + len >= (const char *)buf + n || len == 0 || len >= PATH_MAX || *p != '/')
			return -EBADMSG;
		if (i == s.ndirs) {
			memcpy(h->pch_dir, p, len + 1);
			(void)snprintf(h->pch_opt, sizeof(h->pch_opt), "--pch-dir=%s", p);
		} else {
			memcpy(h->tk.dirs[i], p, len + 1);
			(void)snprintf(h->inc_opts[i], sizeof(h->inc_opts[i]), "-I%s", p);
		}
		p += len + 1;
	}
	h->tk.ndirs = s.ndirs;
	return 0;
}

/* Built with AddressSanitizer or ThreadSanitizer, whose shadow memory takes terabytes of
 * address space: no limit on it there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

/*
 * Its limits, before NVRTC is loaded: an address space of `memory` bytes (the soft and the
 * hard limit, which only a capability could raise again), no core files, and (started as
 * root) no capabilities at all.
 */
static int limits(uint64_t memory)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct caps[2] = { { 0 } };
	struct rlimit none = { 0, 0 };

#ifndef UNDER_SANITIZER
	struct rlimit as = { memory, memory };

	if (memory && setrlimit(RLIMIT_AS, &as) < 0)
		return -errno;
#endif
	if (setrlimit(RLIMIT_CORE, &none) < 0)
		return -errno;
	if (geteuid() == 0 && syscall(SYS_capset, &hdr, caps) < 0)
		return -errno;
	return 0;
}

int wrk_compiler_main(int fd, pid_t parent, uint64_t memory)
{
	static struct helper h;
	const char *argv[4 + WRK_TOOLKIT_DIRS_MAX];
	const char *dirs[WRK_TOOLKIT_DIRS_MAX];
	char why[256] = "";
	int major = 0, minor = 0, r;
	unsigned argc;

	h.fd = fd;
	/* Die with the worker; if it is gone already, go at once. */
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		return 1;
	r = limits(memory);
	if (r < 0) {
		(void)snprintf(why, sizeof(why), "cannot limit the compiler: %s", strerror(-r));
		return reply_text(fd, GPUX_E_IO, why) < 0 ? 1 : 0;
	}
	if (nvrtc_load(&h.nv, why, sizeof(why)) < 0)
		return reply_text(fd, GPUX_E_NODRIVER, why) < 0 ? 1 : 0;
	(void)h.nv.version(&major, &minor);
	/* While the worker opens its device: NVRTC's first compile, for no architecture. */
	warm(&h, 0, NULL);
	if (setup(&h) < 0)
		return 1;
	/* Quoted includes are looked for beside the source, which is nowhere: "/". */
	if (chdir("/") < 0)
		return reply_text(fd, GPUX_E_IO, "cannot leave its directory") < 0 ? 1 : 0;
	for (unsigned i = 0; i < h.tk.ndirs; i++)
		dirs[i] = h.tk.dirs[i];
	h.landlocked = wrk_compile_sandbox_landlock_abi() > 0;
	/* Precompiled headers read the toolkit's: with Landlock only. NVRTC's PCH heap is a
	 * file in $TMPDIR, which is its directory too. */
	if (h.pch_dir[0] && h.landlocked && h.nv.pch_create_status &&
	    setenv("TMPDIR", h.pch_dir, 1) == 0) {
		h.pch = true;
		pch_trim(&h, true);
	}
	argc = base_args(&h, argv);
	warm(&h, argc, argv);
	r = wrk_compile_sandbox_seal(dirs, h.tk.ndirs, h.pch ? h.pch_dir : NULL, fd, &h.landlocked);
	if (r < 0) {
		(void)snprintf(why, sizeof(why), "cannot sandbox the compiler: %s", strerror(-r));
		return reply_text(fd, GPUX_E_IO, why) < 0 ? 1 : 0;
	}
	/* From here on nothing is printed: stdio's first use may ask the kernel what stdout is. */
	if (reply(fd, 0, "", 0, (uint32_t)(major * 1000 + minor * 10),
		  h.landlocked ? CC_LANDLOCKED : 0, -1) < 0)
		return 1;

	for (;;) {
		int fds[IPC_FDS_MAX];
		unsigned nfds;
		struct cc_req rq;
		ssize_t n = ipc_channel_recv(fd, h.buf, sizeof(h.buf), fds, &nfds, 0);

		if (n <= 0)
			return n == 0 ? 0 : 1;
		memcpy(&rq, h.buf, MIN((size_t)n, sizeof(rq)));
		if ((size_t)n < sizeof(rq) || rq.magic != CC_MAGIC || rq.kind != CC_COMPILE ||
		    nfds != 1 || (size_t)n != sizeof(rq) + rq.options_len ||
		    (uint64_t)rq.code_len + rq.extra_len > IPC_CODE_MAX ||
		    rq.nheaders > IPC_MOD_HEADERS_MAX || rq.nnames > IPC_MOD_NAMES_MAX) {
			for (unsigned i = 0; i < nfds; i++)
				(void)close(fds[i]);
			return 1;
		}
		compile_one(&h, &rq, (const char *)h.buf + sizeof(rq), fds[0]);
		(void)close(fds[0]);
	}
}
