/* SPDX-License-Identifier: MIT */
/* worker/host/host-build.c: the host back end's compiler: C source to a shared object, by cc. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "host-build.h"
#include "host-cage.h"
#include "host-kernel-prelude.h"
#include "macro.h"
#include "wrk.h"

/*
 * Options a client may pass to the compiler. Anything else (-o, -I, -fplugin, -Wl, ...)
 * could make the compiler read or write files of the worker's choosing, so it is refused.
 */
const char wrk_host_options_re[] =
	"^-(O[0-3sg]?|g|D[A-Za-z_][A-Za-z0-9_]*(=[-A-Za-z0-9_.+*/()]*)?|U[A-Za-z_][A-Za-z0-9_]*|"
	"std=(c|gnu)(99|11|17|2x)|ffast-math|fno-math-errno|funroll-loops|march=native|"
	"mtune=native|fopenmp-simd|W[a-z-]*)$";

/*
 * The compiler's own arguments, before the client's options, in every module's key.
 * -nostartfiles: no _init, _fini or crt constructors, so that a module without any of its
 * own runs no code as it is loaded (what the sandbox asks: worker/host/sandbox.c).
 * -save-temps=obj: the preprocessed source is a file in the build directory, which its
 * cage bounds (worker/host/host-cage.h), like every file the compiler writes.
 */
static const char *const cc_fixed[] = {
	"-std=gnu11",          "-O2",           "-fPIC",           "-shared",
	"-fvisibility=hidden", "-nostartfiles", "-save-temps=obj", "-o"
};
/* After the source: <math.h>'s functions (the worker itself has no libm to lend). */
static const char *const cc_libs[] = { "-lm" };

void wrk_host_cc_version(const char *cc, char *buf, size_t size)
{
	char cmd[512];
	FILE *f;

	(void)snprintf(cmd, sizeof(cmd), "%s --version 2>/dev/null", cc);
	f = popen(cmd, "re");
	if (!f)
		return;
	if (!fgets(buf, (int)size, f))
		buf[0] = '\0';
	(void)pclose(f);
}

void wrk_host_build_key(const char *cc, const char *cc_version, struct ipc_key_state *s)
{
	ipc_key_add(s, cc, strlen(cc));
	ipc_key_add(s, cc_version, strlen(cc_version));
	for (unsigned i = 0; i < ARRAY_SIZE(cc_fixed); i++)
		ipc_key_add(s, cc_fixed[i], strlen(cc_fixed[i]));
	for (unsigned i = 0; i < ARRAY_SIZE(cc_libs); i++)
		ipc_key_add(s, cc_libs[i], strlen(cc_libs[i]));
	ipc_key_add(s, gpux_host_kernel_prelude, sizeof(gpux_host_kernel_prelude) - 1);
}

/* Split options at blanks into argv (at most WRK_OPTIONS_MAX), each one allowed. */
static gpux_status options_split(const char *options, char **argv, unsigned *ret_n, char **ret_log)
{
	_cleanup_(freep) char *copy = strdup(options);
	char *save = NULL;
	unsigned n = 0;
	gpux_status rc;

	if (!copy)
		return GPUX_E_NOMEM;
	rc = wrk_options_check(wrk_host_options_re, options, ret_log);
	if (rc < 0)
		return rc;
	for (char *t = strtok_r(copy, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
		argv[n] = strdup(t);
		if (!argv[n]) {
			while (n)
				free(argv[--n]);
			return GPUX_E_NOMEM;
		}
		n++;
	}
	*ret_n = n;
	return 0;
}

static int write_file(const char *path, const void *a, size_t alen, const void *b, size_t blen)
{
	_cleanup_(closep) int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	int r;

	if (fd < 0)
		return -errno;
	r = write_all(fd, a, alen);
	return r < 0 ? r : write_all(fd, b, blen);
}

int wrk_host_read_file(const char *path, size_t max, bool cut, uint8_t **ret, size_t *ret_len)
{
	_cleanup_(closep) int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	uint8_t *p;
	size_t len;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size > max && !cut)
		return -EFBIG;
	len = MIN((size_t)st.st_size, max);
	p = malloc(len + 1);
	if (!p)
		return -ENOMEM;
	if (pread(fd, p, len, 0) != (ssize_t)len) {
		free(p);
		return -EIO;
	}
	p[len] = 0;
	*ret = p;
	*ret_len = len;
	return 0;
}

int wrk_host_run_compiler(const struct wrk_host_cage *cg, char **argv, const char *dir,
			  const char *log_path, int *ret_status)
{
	return wrk_host_cage_run(cg, argv, dir, log_path, ret_status);
}

/* Remove the build directory and whatever the compiler left in it. */
static void rm_build_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			(void)unlinkat(dirfd(d), e->d_name, 0);
	if (d)
		(void)closedir(d);
	(void)rmdir(dir);
}

/*
 * Whether the compiler met its cage's bound on files (a program of it killed by SIGXFSZ, as
 * its log says, or a file written up to it): "preprocessed" when the preprocessed source
 * (.i, .ii) is at the bound, since that says the source was too large; "other", or NULL.
 */
static const char *file_at_bound(const char *dir, uint64_t bound, const char *log)
{
	const char *what = strstr(log, strsignal(SIGXFSZ)) ? "other" : NULL;
	DIR *d = opendir(dir);
	struct dirent *e;
	struct stat st;

	while (d && (e = readdir(d))) {
		const char *dot = strrchr(e->d_name, '.');

		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode) && (uint64_t)st.st_size >= bound)
			what = dot && (strcmp(dot, ".i") == 0 || strcmp(dot, ".ii") == 0)
				       ? "preprocessed"
				       : "other";
		if (what && strcmp(what, "preprocessed") == 0)
			break;
	}
	if (d)
		(void)closedir(d);
	return what;
}

gpux_status wrk_host_compile_failure(const struct wrk_host_cage *cg, const char *dir, int r, int st,
				     const char *log, char **ret_log)
{
	const char *text = log ? log : "";
	const char *bound = cg->file_max ? file_at_bound(dir, cg->file_max, text) : NULL;

	if (r == -ETIMEDOUT) {
		*ret_log =
			wrk_strdup_printf("the compiler ran past its %g s limit%s%s",
					  (double)cg->timeout_ns / 1e9, *text ? ":\n" : "", text);
		return GPUX_E_COMPILE;
	}
	if (bound && strcmp(bound, "preprocessed") == 0) {
		*ret_log = wrk_strdup_printf("the preprocessed source passed its %llu MiB limit",
					     (unsigned long long)(cg->file_max / MiB));
		return GPUX_E_COMPILE;
	}
	if (bound) {
		*ret_log = wrk_strdup_printf("the compiled module takes more than the %llu MiB a "
					     "client's modules may",
					     WRK_CLIENT_MOD_BYTES / MiB);
		return GPUX_E_QUOTA;
	}
	if (r == 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
		*ret_log =
			wrk_strdup_printf("the compiler was killed%s%s", *text ? ":\n" : "", text);
		return GPUX_E_COMPILE;
	}
	if (cg->memory && (strstr(text, "out of memory") || strstr(text, "memory exhausted") ||
			   strstr(text, "Cannot allocate memory"))) {
		*ret_log = wrk_strdup_printf("the compiler ran out of its %llu MiB of memory "
					     "(gpuxd --compile-memory):\n%s",
					     (unsigned long long)(cg->memory / MiB), text);
		return GPUX_E_COMPILE;
	}
	*ret_log = *text ? strdup(text)
			 : wrk_strdup_printf("the compiler failed: %s",
					     r < 0 ? strerror(-r) : "no output");
	return GPUX_E_COMPILE;
}

gpux_status wrk_host_build(const struct wrk_host_cage *cg, const char *cc,
			   const struct wrk_build *b, uint8_t **ret_image, size_t *ret_len,
			   char **ret_log)
{
	char dir[4096], path[4200], out[4200];
	char *argv[64] = { NULL };
	unsigned nopt = 0, argc = 0;
	uint8_t *log = NULL;
	size_t loglen = 0;
	gpux_status rc;
	int r, st = 0;

	if (b->lang != GPUX_LANG_HOST) {
		*ret_log = strdup("the host back end compiles C (GPUX_LANG_HOST) and CUDA C++: PTX "
				  "and cubin modules need a GPU");
		return GPUX_E_INVAL;
	}
	rc = options_split(b->options, argv + 2 + ARRAY_SIZE(cc_fixed), &nopt, ret_log);
	if (rc < 0)
		return rc;

	/* A fresh private directory (mkdtemp: 0700, ours): nobody can swap the output. */
	(void)snprintf(dir, sizeof(dir), "%s/gpux-build-XXXXXX",
		       getenv("TMPDIR") && *getenv("TMPDIR") == '/' ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir)) {
		*ret_log = wrk_strdup_printf("mkdtemp %s: %s", dir, strerror(errno));
		rc = GPUX_E_IO;
		goto out;
	}
	(void)snprintf(path, sizeof(path), "%s/kernel.c", dir);
	r = write_file(path, gpux_host_kernel_prelude, sizeof(gpux_host_kernel_prelude) - 1,
		       "\n#line 1 \"kernel.c\"\n", 20);
	if (r == 0) {
		_cleanup_(closep) int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
		r = fd < 0 ? -errno : write_all(fd, b->code, b->code_len);
	}
	if (r < 0) {
		*ret_log = wrk_strdup_printf("writing the source: %s", strerror(-r));
		rc = GPUX_E_IO;
		goto out_rm;
	}

	(void)snprintf(out, sizeof(out), "%s/kernel.so", dir);
	argv[argc++] = (char *)cc;
	for (unsigned i = 0; i < ARRAY_SIZE(cc_fixed); i++)
		argv[argc++] = (char *)cc_fixed[i];
	argv[argc++] = out;
	argc += nopt;
	argv[argc++] = path;
	for (unsigned i = 0; i < ARRAY_SIZE(cc_libs); i++)
		argv[argc++] = (char *)cc_libs[i];
	argv[argc] = NULL;
	{
		char logp[4200];
		(void)snprintf(logp, sizeof(logp), "%s/log", dir);
		r = wrk_host_run_compiler(cg, argv, dir, logp, &st);
		(void)snprintf(path, sizeof(path), "%s", logp);
	}
	(void)wrk_host_read_file(path, WRK_HOST_LOG_MAX, true, &log, &loglen);
	if (r == -ENOENT || (r == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 127)) {
		*ret_log = wrk_strdup_printf(
			"no C compiler \"%s\" (set GPUX_HOST_CC or install gcc)", cc);
		rc = GPUX_E_COMPILE;
		goto out_rm;
	}
	if (r < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		rc = wrk_host_compile_failure(cg, dir, r, st, (const char *)log, ret_log);
		goto out_rm;
	}
	/* What the client's source made: more than its modules may hold is never read in. */
	r = wrk_host_read_file(out, WRK_CLIENT_MOD_BYTES, false, ret_image, ret_len);
	if (r == -EFBIG) {
		*ret_log = wrk_strdup_printf("the compiled module takes more than the %llu MiB a "
					     "client's modules may",
					     WRK_CLIENT_MOD_BYTES / MiB);
		rc = GPUX_E_QUOTA;
		goto out_rm;
	}
	if (r < 0) {
		*ret_log = wrk_strdup_printf("reading the compiled module: %s", strerror(-r));
		rc = GPUX_E_IO;
		goto out_rm;
	}
	if (log && loglen)
		*ret_log = (char *)TAKE_PTR(log);
	rc = GPUX_OK;
out_rm:
	rm_build_dir(dir);
out:
	free(log);
	for (unsigned i = 0; i < nopt; i++)
		free(argv[2 + ARRAY_SIZE(cc_fixed) + i]);
	return rc;
}
