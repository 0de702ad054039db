/* SPDX-License-Identifier: MIT */
/* worker/host-cuda.c: the host back end's CUDA C++: compiled by c++ against gpux's own headers. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <gpux/version.h>

#include "cuda-host-headers.h"
#include "host-build.h"
#include "host-cuda.h"
#include "host-cuscan.h"
#include "knames.h"
#include "macro.h"
#include "proto.h"
#include "wrk.h"

/*
 * A CUDA C++ source is compiled twice, in a fresh private directory holding gpux's headers
 * (inc/, the toolkit's names: cuda_runtime.h, cooperative_groups.h, cuda_fp16.h) and the
 * client's (src/, beside kernel.cu, found by the names they were given):
 *
 * 1. the preprocessor alone, where __global__ and __shared__ stay words of their own, which
 *    worker/host-cuscan.c reads for the kernels the source defines, its extern __shared__
 *    arrays, and what it uses that the host does not have;
 * 2. the compiler, with an entry for each kernel and name expression after the source (the
 *    table `gpux_cu_module_info`), into a shared object as the sandbox asks of host modules:
 *    no start files, no constructors, no C++ run time (no exceptions, no RTTI, no
 *    libstdc++: what needs it does not link, -z defs), every symbol bound in the module.
 *
 * The options are NVRTC's, as the CUDA back end takes them, each given its meaning here.
 */

#define PP_MAX IPC_CODE_MAX /* bytes of preprocessed source read */
#define ENTRIES_FILE "<gpux kernel entries>"

static const char *const common_args[] = {
	"-x",
	"c++",
	"-std=gnu++17",
	"-O2",
	"-fPIC",
	"-fvisibility=hidden",
	"-fno-exceptions",
	"-fno-rtti",
	"-fno-threadsafe-statics",
	"-fno-extern-tls-init",
	"-fno-semantic-interposition",
	"-fno-ipa-icf",
	"-fno-builtin-printf",
	"-U_FORTIFY_SOURCE",
};
static const char *const link_args[] = {
	"-shared",
	"-nostartfiles",
	"-nodefaultlibs",
	"-Wl,-z,defs",
	"-Wl,-Bsymbolic",
	"-Wl,-z,noexecstack",
#if defined(__x86_64__)
	"-mtls-dialect=gnu2", /* descriptors: __shared__ without a call to __tls_get_addr */
#endif
};
static const char *const libs[] = { "-lm", "-lc", "-lgcc" };

/* NVRTC's options (those worker/cuda.c takes) and what the host's compiler is given for
 * each: "" the option itself, NULL nothing (it means nothing on a CPU). */
static const struct {
	const char *re, *host;
} option_map[] = {
	{ "^-D[A-Za-z_][A-Za-z0-9_]*(=[-A-Za-z0-9_.+*/()]*)?$", "" },
	{ "^-U[A-Za-z_][A-Za-z0-9_]*$", "" },
	{ "^--?use_fast_math$", "-ffast-math" },
	{ "^--?std=c\\+\\+(11|14|17)$", NULL }, /* gpux's headers need C++17 */
	{ "^--?std=c\\+\\+20$", "-std=gnu++20" },
	{ "^--fmad=false$", "-ffp-contract=off" },
	{ "^(-lineinfo|--generate-line-info|-G|--device-debug|--fmad=true|--ftz=(true|false)|"
	  "--prec-div=(true|false)|--prec-sqrt=(true|false)|--maxrregcount=[0-9]+|"
	  "--extra-device-vectorization|-dopt=(on|off)|--restrict|-default-device|"
	  "--device-as-default-execution-space)$",
	  NULL },
};

/* Headers of the toolkit that gpux's do not stand for: each is one in inc/ that says so, in
 * front of the toolkit's wherever it is installed. Its libraries (cub/, thrust/, cuda/, ...)
 * worker/host-cuscan.c knows by their folders. */
static const struct {
	const char *name, *what;
} toolkit_only[] = {
	{ "cuda_bf16.h", "__nv_bfloat16" },
	{ "cuda_fp8.h", "8-bit floats" },
	{ "cuda_fp6.h", "6-bit floats" },
	{ "cuda_fp4.h", "4-bit floats" },
	{ "mma.h", "warp matrix functions" },
	{ "curand_kernel.h", "cuRAND's device functions" },
	{ "cuda_pipeline.h", "asynchronous copies" },
	{ "cuda_awbarrier.h", "asynchronous barriers" },
	{ "cooperative_groups/memcpy_async.h", "cooperative_groups::memcpy_async" },
	{ "texture_fetch_functions.h", "texture objects" },
	{ "surface_functions.h", "surface objects" },
};

void wrk_host_cuda_key(const char *cxx, const char *cxx_version, struct ipc_key_state *s)
{
	/* What this file puts after a source changes with gpux, not with the source. */
	ipc_key_add(s, "c++ " GPUX_VERSION_STRING, strlen("c++ " GPUX_VERSION_STRING));
	ipc_key_add(s, cxx, strlen(cxx));
	ipc_key_add(s, cxx_version, strlen(cxx_version));
	for (unsigned i = 0; i < ARRAY_SIZE(common_args); i++)
		ipc_key_add(s, common_args[i], strlen(common_args[i]));
	for (unsigned i = 0; i < ARRAY_SIZE(link_args); i++)
		ipc_key_add(s, link_args[i], strlen(link_args[i]));
	for (unsigned i = 0; i < ARRAY_SIZE(wrk_cuda_host_headers); i++) {
		ipc_key_add(s, wrk_cuda_host_headers[i].name,
			    strlen(wrk_cuda_host_headers[i].name));
		ipc_key_add(s, wrk_cuda_host_headers[i].text, wrk_cuda_host_headers[i].len);
	}
	for (unsigned i = 0; i < ARRAY_SIZE(toolkit_only); i++)
		ipc_key_add(s, toolkit_only[i].name, strlen(toolkit_only[i].name));
}

/* ---- the job ---- */

struct job {
	char dir[4096];
	const struct wrk_host_cage *cg; /* what the compiler may read, its limits */
	const char *cxx;
	char *opts[WRK_OPTIONS_MAX]; /* for the compiler */
	unsigned nopts;
	char *names[IPC_MOD_NAMES_MAX]; /* the client's name expressions, then the source's */
	unsigned nnames, nclient;
	char *log; /* what went wrong */
};

static void job_done(struct job *j)
{
	for (unsigned i = 0; i < j->nopts; i++)
		free(j->opts[i]);
	for (unsigned i = 0; i < j->nnames; i++)
		free(j->names[i]);
	free(j->log);
}

/* The client's options, each as the host's compiler takes it: 0 or GPUX_E_INVAL, GPUX_E_NOMEM. */
static gpux_status options_map(struct job *j, const char *options)
{
	_cleanup_(freep) char *copy = strdup(options);
	char *save = NULL;
	gpux_status rc = GPUX_OK;

	if (!copy)
		return GPUX_E_NOMEM;
	for (char *t = strtok_r(copy, " \t\n", &save); t && rc == 0;
	     t = strtok_r(NULL, " \t\n", &save)) {
		unsigned i;

		for (i = 0; i < ARRAY_SIZE(option_map); i++) {
			regex_t re;
			int m;

			if (regcomp(&re, option_map[i].re, REG_EXTENDED | REG_NOSUB) != 0)
				return GPUX_E_NOMEM;
			m = regexec(&re, t, 0, NULL, 0);
			regfree(&re);
			if (m == 0)
				break;
		}
		if (i == ARRAY_SIZE(option_map) || j->nopts == WRK_OPTIONS_MAX) {
			j->log = i == ARRAY_SIZE(option_map)
					 ? wrk_strdup_printf("compiler option not allowed: %s", t)
					 : strdup("too many compiler options");
			return GPUX_E_INVAL;
		}
		if (!option_map[i].host)
			continue;
		j->opts[j->nopts] = strdup(*option_map[i].host ? option_map[i].host : t);
		if (!j->opts[j->nopts++])
			rc = GPUX_E_NOMEM;
	}
	return rc;
}

/*
 * A name expression goes into the source as C++ (as NVRTC puts it): only what template
 * arguments are written with, so that it cannot end the entry it stands in.
 */
static bool expr_ok(const char *s, size_t len)
{
	int parens = 0;

	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("_:<>,*&()+-.~[] \t", c)))
			return false;
		parens += (c == '(') - (c == ')');
		if (parens < 0)
			return false;
	}
	return len > 0 && parens == 0;
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
	return expr_ok(expr, len) ? name_add(userdata, expr, len) : 0;
}

/* ---- files ---- */

/*
 * A file at `rel` under the directory dirfd, with its folders: a client's header name is
 * a relative path of plain components ("util.cuh", "lib/detail.h"), never "..", ".", an
 * absolute path or an empty component. -EINVAL for another name, -EEXIST for one twice.
 */
static int file_put(int dirfd, const char *rel, const void *data, size_t len)
{
	_cleanup_(freep) char *path = strdup(rel);
	_cleanup_(closep) int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	char *comp = path, *slash;
	int fd, r;

	if (!path)
		return -ENOMEM;
	if (cur < 0)
		return -errno;
	for (;;) {
		slash = strchr(comp, '/');
		if (slash)
			*slash = '\0';
		if (!*comp || strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0)
			return -EINVAL;
		if (!slash)
			break;
		if (mkdirat(cur, comp, 0700) < 0 && errno != EEXIST)
			return -errno;
		fd = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		(void)close(cur);
		cur = fd;
		comp = slash + 1;
	}
	fd = openat(cur, comp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = write_all(fd, data, len);
	(void)close(fd);
	return r;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)(flag == FTW_DP ? rmdir(path) : unlink(path));
	return 0;
}

/* gpux's headers into inc/, the source and the client's headers into src/. */
static int files_write(struct job *j, const struct wrk_build *b)
{
	_cleanup_(closep) int inc = -1, src = -1;
	struct ipc_mod_extra_cursor cur;
	struct ipc_mod_item it;
	char path[4200];
	int r;

	(void)snprintf(path, sizeof(path), "%s/inc", j->dir);
	if (mkdir(path, 0700) < 0 || (inc = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	(void)snprintf(path, sizeof(path), "%s/src", j->dir);
	if (mkdir(path, 0700) < 0 || (src = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	for (unsigned i = 0; i < ARRAY_SIZE(wrk_cuda_host_headers); i++) {
		r = file_put(inc, wrk_cuda_host_headers[i].name, wrk_cuda_host_headers[i].text,
			     wrk_cuda_host_headers[i].len);
		if (r < 0)
			return r;
	}
	for (unsigned i = 0; i < ARRAY_SIZE(toolkit_only); i++) {
		_cleanup_(freep) char *t = wrk_strdup_printf(
			"#error \"not supported by gpux's host back end: %s (%s)\"\n",
			toolkit_only[i].what, toolkit_only[i].name);

		r = t ? file_put(inc, toolkit_only[i].name, t, strlen(t)) : -ENOMEM;
		if (r < 0)
			return r;
	}
	r = file_put(src, "kernel.cu", b->code, b->code_len);
	if (r < 0)
		return r;
	ipc_mod_extra_begin(&cur, b->extra, b->extra_len, b->nheaders, b->nnames);
	while ((r = ipc_mod_extra_next(&cur, &it)) > 0) {
		_cleanup_(freep) char *name = strndup(it.name, it.name_len);

		if (!name)
			return -ENOMEM;
		if (!it.text) {
			if (!expr_ok(name, it.name_len)) {
				j->log = wrk_strdup_printf(
					"name expression \"%s\": the host back end "
					"takes template arguments of names, "
					"numbers and operators only",
					name);
				return -EINVAL;
			}
			r = name_add(j, name, it.name_len);
		} else {
			r = file_put(src, name, it.text, it.text_len);
			if (r == -EINVAL || r == -EEXIST)
				j->log =
					wrk_strdup_printf("header \"%s\": %s", name,
							  r == -EEXIST ? "given twice, or a folder "
									 "of another header"
								       : "not a relative path of "
									 "plain names here");
		}
		if (r < 0)
			return r;
	}
	j->nclient = j->nnames;
	return r;
}

/* ---- the compiler ---- */

/* Run cxx with `args` (NULL-terminated) after the common ones, its log in <dir>/log:
 * 0, GPUX_E_COMPILE with j->log, GPUX_E_NOMEM. */
static gpux_status compile(struct job *j, const char *const *args, const char *const *tail)
{
	char *argv[128];
	char logp[4200];
	unsigned n = 0;
	uint8_t *log = NULL;
	size_t loglen = 0;
	int r, st = 0;

	argv[n++] = (char *)j->cxx;
	for (unsigned i = 0; i < ARRAY_SIZE(common_args); i++)
		argv[n++] = (char *)common_args[i];
	for (; *args; args++)
		argv[n++] = (char *)*args;
	for (unsigned i = 0; i < j->nopts; i++)
		argv[n++] = j->opts[i];
	for (; *tail; tail++)
		argv[n++] = (char *)*tail;
	argv[n] = NULL;
	(void)snprintf(logp, sizeof(logp), "%s/log", j->dir);
	(void)unlink(logp);
	r = wrk_host_run_compiler(j->cg, argv, j->dir, logp, &st);
	(void)wrk_host_read_file(logp, WRK_HOST_LOG_MAX, true, &log, &loglen);
	free(j->log);
	j->log = (char *)log;
	if (r == -ENOENT || (r == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 127)) {
		free(j->log);
		j->log = wrk_strdup_printf("no C++ compiler \"%s\" (set GPUX_HOST_CXX or install "
					   "g++)",
					   j->cxx);
		return GPUX_E_COMPILE;
	}
	if (r < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		char *why = NULL;
		gpux_status rc = wrk_host_compile_failure(j->cg, j->dir, r, st, j->log, &why);

		free(j->log);
		j->log = why;
		return rc == GPUX_E_QUOTA ? GPUX_E_QUOTA : GPUX_E_COMPILE;
	}
	return 0;
}

/* A compile that failed in (or for want of) a header of a toolkit library: said first. */
static void library_explain(struct job *j)
{
	const char *p = j->log ? strstr(j->log, "fatal error: ") : NULL;
	const char *what = j->log ? wrk_cuscan_library(j->log, strlen(j->log)) : NULL;
	char path[IPC_HEADER_NAME_MAX + 2];
	char *s;

	/* "fatal error: cub/block/block_reduce.cuh: No such file or directory" */
	if (!what && p) {
		p += strlen("fatal error: ");
		(void)snprintf(path, sizeof(path), "/%.*s", (int)MIN(strcspn(p, ":\n"), 255u), p);
		what = wrk_cuscan_library(path, strlen(path));
	}
	if (!what)
		return;
	s = wrk_strdup_printf("not supported by gpux's host back end: %s\n%s", what, j->log);
	if (s) {
		free(j->log);
		j->log = s;
	}
}

/* ---- the entries ---- */

/* "a::::b" to "namespace a { namespace { namespace b {" and its closing braces. */
static unsigned scope_open(FILE *f, const char *scope)
{
	unsigned n = 0;

	if (!*scope)
		return 0;
	for (const char *p = scope;; n++) {
		const char *sep = strstr(p, "::");
		size_t len = sep ? (size_t)(sep - p) : strlen(p);

		(void)fprintf(f, "namespace %.*s { ", (int)len, p);
		if (!sep)
			return n + 1;
		p = sep + 2;
	}
}

/* "a::::b" without anonymous parts, and "::" after it: "a::b::". */
static void scope_name(FILE *f, const char *scope)
{
	for (const char *p = scope; *p;) {
		const char *sep = strstr(p, "::");
		size_t len = sep ? (size_t)(sep - p) : strlen(p);

		if (len)
			(void)fprintf(f, "%.*s::", (int)len, p);
		if (!sep)
			break;
		p = sep + 2;
	}
}

/* The text after the source: the dynamic shared memory, an entry per name expression and
 * per kernel, the table. */
static char *entries(const struct job *j, unsigned nnames, const struct wrk_cuscan *sc)
{
	char *s = NULL;
	size_t len = 0;
	unsigned n = 0;
	FILE *f = open_memstream(&s, &len);

	if (!f)
		return NULL;
	(void)fprintf(f, "\n#line 1 \"" ENTRIES_FILE "\"\n");
	if (sc->nshared)
		(void)fprintf(f,
			      "extern \"C\" { __attribute__((aligned(64))) __thread unsigned char "
			      "gpux_cu_dyn_shared[GPUX_CU_DYN_SHARED_MAX]; }\n");
	for (unsigned i = 0; i < sc->nshared; i++)
		(void)fprintf(
			f,
			"__asm__(\".globl %s\\n.hidden %s\\n.set %s, gpux_cu_dyn_shared\\n\");\n",
			sc->shared[i], sc->shared[i], sc->shared[i]);
	for (unsigned i = 0; i < nnames; i++, n++)
		(void)fprintf(
			f,
			"static constexpr auto gpux_cu_k%u = ::gpux_cu::describe<&(%s)>(\"%s\");\n",
			n, j->names[i], j->names[i]);
	for (unsigned i = 0; i < sc->nkernels; i++, n++) {
		const struct wrk_cuscan_kernel *k = &sc->kernels[i];
		unsigned close = scope_open(f, k->scope);

		(void)fprintf(f, "static constexpr auto gpux_cu_k%u = ::gpux_cu::describe<", n);
		if (k->c_linkage)
			(void)fprintf(f, "&%s>(\"", k->name);
		else
			(void)fprintf(f, "static_cast<void (*)(%s)>(&%s)>(\"", k->params, k->name);
		if (!k->c_linkage)
			scope_name(f, k->scope);
		(void)fprintf(f, "%s\");", k->name);
		while (close--)
			(void)fputs(" }", f);
		(void)fputc('\n', f);
	}
	(void)fprintf(f, "static const void *const gpux_cu_table[] = {");
	for (unsigned i = 0; i < n; i++) {
		(void)fputs(i ? ", &" : " &", f);
		if (i >= nnames)
			scope_name(f, sc->kernels[i - nnames].scope);
		(void)fprintf(f, "gpux_cu_k%u", i);
	}
	(void)fprintf(f, "%s };\n", n ? "" : " nullptr");
	/* The variables, by their qualified names from the global namespace (an anonymous
	 * namespace's members are found through it, as the kernels are). */
	for (unsigned i = 0; i < sc->nglobals; i++) {
		const struct wrk_cuscan_global *g = &sc->globals[i];

		(void)fprintf(f, "%s { \"",
			      i ? "," : "static constexpr gpux_cu_global gpux_cu_globals[] = {");
		scope_name(f, g->scope);
		(void)fprintf(f, "%s\", \"%s\", (const void *)__builtin_addressof(::", g->name,
			      g->symbol);
		scope_name(f, g->scope);
		(void)fprintf(f, "%s), sizeof(::", g->name);
		scope_name(f, g->scope);
		(void)fprintf(f, "%s) }", g->name);
	}
	if (sc->nglobals)
		(void)fprintf(f, " };\n");
	(void)fprintf(f,
		      "extern \"C\" __attribute__((visibility(\"default\"))) const gpux_cu_module "
		      "gpux_cu_module_info = { GPUX_CU_ABI, %u, %u, gpux_cu_table, %u, %s };\n",
		      n, nnames, sc->nglobals, sc->nglobals ? "gpux_cu_globals" : "nullptr");
	if (fclose(f) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

/* Pass 1: the preprocessor; the scan of its output. */
static gpux_status preprocess(struct job *j, struct wrk_cuscan *ret)
{
	char inc[4200], pre[4200], src[4200], out[4200], in[4200];
	const char *args[] = { "-E", "-DGPUX_CU_SCAN", "-isystem", inc, "-include", pre, "-I", src,
			       NULL };
	const char *tail[] = { "-o", out, in, NULL };
	uint8_t *text = NULL;
	size_t len = 0;
	gpux_status rc;
	int r;

	(void)snprintf(inc, sizeof(inc), "%s/inc", j->dir);
	(void)snprintf(pre, sizeof(pre), "%s/inc/gpux_cuda.h", j->dir);
	(void)snprintf(src, sizeof(src), "%s/src", j->dir);
	(void)snprintf(out, sizeof(out), "%s/kernel.ii", j->dir);
	(void)snprintf(in, sizeof(in), "%s/src/kernel.cu", j->dir);
	rc = compile(j, args, tail);
	if (rc < 0) {
		library_explain(j);
		return rc;
	}
	r = wrk_host_read_file(out, PP_MAX, false, &text, &len);
	if (r < 0) {
		free(j->log);
		j->log = r == -EFBIG ? wrk_strdup_printf("the preprocessed source takes more than "
							 "%u MiB",
							 PP_MAX / (1024 * 1024))
				     : wrk_strdup_printf("reading the preprocessed source: %s",
							 strerror(-r));
		return r == -EFBIG ? GPUX_E_COMPILE : GPUX_E_IO;
	}
	(void)snprintf(src, sizeof(src), "%s/src/", j->dir);
	r = wrk_cuscan_run((const char *)text, len, src, ret);
	free(text);
	(void)unlink(out);
	if (r < 0) {
		free(j->log);
		j->log = r == -E2BIG ? strdup("more kernels, extern __shared__ arrays or variables "
					      "than a module may have")
				     : NULL;
		return r == -E2BIG ? GPUX_E_COMPILE : GPUX_E_NOMEM;
	}
	if (ret->unsupported) {
		free(j->log);
		j->log = wrk_strdup_printf("not supported by gpux's host back end: %s",
					   ret->unsupported);
		wrk_cuscan_done(ret);
		return GPUX_E_COMPILE;
	}
	return 0;
}

/* Pass 2: the source with its entries, compiled into <dir>/kernel.so. */
static gpux_status build(struct job *j, const struct wrk_build *b, unsigned nnames,
			 const struct wrk_cuscan *sc)
{
	char inc[4200], pre[4200], src[4200], out[4200], in[4200];
	const char *args[] = { "-isystem", inc, "-include", pre, "-I", src, NULL };
	const char *tail[ARRAY_SIZE(link_args) + ARRAY_SIZE(libs) + 4];
	_cleanup_(freep) char *text = entries(j, nnames, sc);
	_cleanup_(closep) int fd = -1;
	unsigned n = 0;
	int r;

	(void)snprintf(inc, sizeof(inc), "%s/inc", j->dir);
	(void)snprintf(pre, sizeof(pre), "%s/inc/gpux_cuda.h", j->dir);
	(void)snprintf(src, sizeof(src), "%s/src", j->dir);
	(void)snprintf(out, sizeof(out), "%s/kernel.so", j->dir);
	(void)snprintf(in, sizeof(in), "%s/src/kernel.cu", j->dir);
	if (!text)
		return GPUX_E_NOMEM;
	/* The source again, the entries after it. */
	fd = open(in, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
	r = fd < 0 ? -errno : write_all(fd, b->code, b->code_len);
	if (r == 0)
		r = write_all(fd, text, strlen(text));
	if (r < 0) {
		j->log = wrk_strdup_printf("writing the source: %s", strerror(-r));
		return GPUX_E_IO;
	}
	for (unsigned i = 0; i < ARRAY_SIZE(link_args); i++)
		tail[n++] = link_args[i];
	tail[n++] = "-o";
	tail[n++] = out;
	tail[n++] = in;
	for (unsigned i = 0; i < ARRAY_SIZE(libs); i++)
		tail[n++] = libs[i];
	tail[n] = NULL;
	return compile(j, args, tail);
}

gpux_status wrk_host_cuda_build(const struct wrk_host_cage *cg, const char *cxx,
				const struct wrk_build *b, uint8_t **ret_image, size_t *ret_len,
				char **ret_log)
{
	_cleanup_(freep) char *code = NULL;
	struct job j = { .cg = cg, .cxx = cxx };
	struct wrk_cuscan sc = { 0 };
	char out[4200];
	unsigned nnames;
	bool have_dir = false;
	gpux_status rc;
	int r;

	rc = options_map(&j, b->options);
	if (rc < 0)
		goto out;
	/* A fresh private directory (mkdtemp: 0700, ours): nobody can swap what is in it. */
	(void)snprintf(j.dir, sizeof(j.dir), "%s/gpux-build-XXXXXX",
		       getenv("TMPDIR") && *getenv("TMPDIR") == '/' ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(j.dir)) {
		j.log = wrk_strdup_printf("mkdtemp %s: %s", j.dir, strerror(errno));
		rc = GPUX_E_IO;
		goto out;
	}
	have_dir = true;
	r = files_write(&j, b);
	if (r < 0) {
		if (!j.log)
			j.log = wrk_strdup_printf("writing the source: %s", strerror(-r));
		rc = r == -ENOMEM                   ? GPUX_E_NOMEM
		     : r == -EINVAL || r == -EEXIST ? GPUX_E_COMPILE
						    : GPUX_E_IO;
		goto out;
	}
	/* Templates the source instantiates explicitly are kernels too, as on a GPU. */
	code = strndup((const char *)b->code, b->code_len);
	r = code ? wrk_knames_scan(code, strlen(code), scanned, &j) : -ENOMEM;
	if (r < 0) {
		rc = GPUX_E_NOMEM;
		goto out;
	}
	rc = preprocess(&j, &sc);
	if (rc < 0)
		goto out;
	nnames = j.nnames;
	rc = build(&j, b, nnames, &sc);
	/* An instantiation the scan misread must not fail a source that compiles: again
	 * without the source's own, when the compiler's complaint is about the entries. */
	if (rc == GPUX_E_COMPILE && j.nnames > j.nclient && j.log && strstr(j.log, ENTRIES_FILE)) {
		nnames = j.nclient;
		rc = build(&j, b, nnames, &sc);
	}
	/* Nor a variable it misread: again without the variables, which the module then does
	 * not list (gpux_module_global() does not find them). */
	if (rc == GPUX_E_COMPILE && sc.nglobals && j.log && strstr(j.log, ENTRIES_FILE)) {
		struct wrk_cuscan plain = sc;

		plain.nglobals = 0;
		rc = build(&j, b, nnames, &plain);
	}
	if (rc < 0)
		goto out;
	(void)snprintf(out, sizeof(out), "%s/kernel.so", j.dir);
	r = wrk_host_read_file(out, WRK_CLIENT_MOD_BYTES, false, ret_image, ret_len);
	if (r < 0) {
		free(j.log);
		j.log = r == -EFBIG ? wrk_strdup_printf("the compiled module takes more than the "
							"%llu MiB a client's modules may",
							WRK_CLIENT_MOD_BYTES / MiB)
				    : wrk_strdup_printf("reading the compiled module: %s",
							strerror(-r));
		rc = r == -EFBIG ? GPUX_E_QUOTA : GPUX_E_IO;
		goto out;
	}
	rc = 0;
out:
	wrk_cuscan_done(&sc);
	if (have_dir)
		(void)nftw(j.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	if (j.log && *j.log)
		*ret_log = TAKE_PTR(j.log);
	job_done(&j);
	return rc;
}
