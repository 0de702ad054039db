/* SPDX-License-Identifier: MIT */
/* worker/host/host-cage.c: the host compiler's cage: what it may read and run, its limits. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host-cage.h"
#include "landlock.h"
#include "macro.h"
#include "wrk.h"

extern char **environ;

/*
 * Where a toolchain lives on any system (each only if it exists): programs, the libraries
 * they load, the headers. A compiler elsewhere names its own directories (below).
 */
static const char *const system_dirs[] = { "/usr",    "/lib", "/lib64", "/lib32",
					   "/libx32", "/bin", "/sbin" };
/* Files beside them: the dynamic loader's cache (read), the null device (read, written). */
static const char *const read_files[] = { "/etc/ld.so.cache" };
static const char *const rw_files[] = { "/dev/null" };

/* What no compiler asks for: refused (EPERM), in case a client's source takes one over.
 * Kept as written, several a line. */
/* clang-format off */
static const long refused[] = {
	SYS_socket, SYS_socketpair, SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev,
	SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register, SYS_bpf,
	SYS_perf_event_open, SYS_userfaultfd, SYS_open_by_handle_at, SYS_name_to_handle_at,
	SYS_keyctl, SYS_add_key, SYS_request_key, SYS_mount, SYS_umount2, SYS_pivot_root,
	SYS_chroot, SYS_unshare, SYS_setns, SYS_init_module, SYS_finit_module, SYS_kexec_load,
};
/* clang-format on */

int wrk_host_cage_find(const char *cc, char *ret, size_t size)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	if (strchr(cc, '/'))
		return realpath(cc, ret) && access(ret, X_OK) == 0 ? 0 : -ENOENT;
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (const char *p = path; *p;) {
		size_t n = strcspn(p, ":");

		int k = snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, cc);

		if (n > 0 && (size_t)k < sizeof(buf) && access(buf, X_OK) == 0 &&
		    realpath(buf, ret) && strlen(ret) < size)
			return 0;
		p += n + (p[n] == ':');
	}
	return -ENOENT;
}

/* Add a directory (resolved, absolute, existing, not / nor beneath one added already). */
static int dir_add(struct wrk_host_cage *cg, const char *dir)
{
	char real[PATH_MAX];
	struct stat st;

	if (dir[0] != '/' || !realpath(dir, real) || stat(real, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    strcmp(real, "/") == 0)
		return 0;
	for (unsigned i = 0; i < cg->ndirs; i++) {
		size_t n = strlen(cg->dirs[i]);

		if (strncmp(real, cg->dirs[i], n) == 0 && (real[n] == '/' || real[n] == '\0'))
			return 0;
	}
	if (cg->ndirs == WRK_HOST_CAGE_DIRS_MAX)
		return 0;
	cg->dirs[cg->ndirs] = strdup(real);
	if (!cg->dirs[cg->ndirs])
		return -ENOMEM;
	cg->ndirs++;
	return 0;
}

/* Each directory of a list "a:b:c" (after "=" on gcc's lines). */
static int dirs_add_list(struct wrk_host_cage *cg, char *list)
{
	char *save = NULL;
	int r = 0;

	list += strspn(list, " =");
	for (char *d = strtok_r(list, ":\n", &save); d && r == 0; d = strtok_r(NULL, ":\n", &save))
		r = dir_add(cg, d);
	return r;
}

/*
 * What the compiler at path says it reads: its search directories (install, programs,
 * libraries) and its include path (the lines between "search starts here:" and "End of
 * search list.").
 */
static int dirs_ask(struct wrk_host_cage *cg, const char *path)
{
	static const char *const asks[] = { "-print-search-dirs",
					    "-E -v -x c /dev/null -o /dev/null" };
	char cmd[PATH_MAX + 64], line[8192];
	int r = 0;

	for (unsigned i = 0; i < ARRAY_SIZE(asks) && r == 0; i++) {
		bool in_list = false;
		FILE *f;

		(void)snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1 </dev/null", path, asks[i]);
		f = popen(cmd, "re");
		if (!f)
			return -errno;
		while (r == 0 && fgets(line, sizeof(line), f)) {
			char *colon = strchr(line, ':');

			if (strstr(line, "search starts here:"))
				in_list = true;
			else if (strncmp(line, "End of search list.", 19) == 0)
				in_list = false;
			else if (in_list)
				r = dir_add(cg, strtok(line + strspn(line, " "), " \n"));
			else if (colon && (strncmp(line, "install:", 8) == 0 ||
					   strncmp(line, "programs:", 9) == 0 ||
					   strncmp(line, "libraries:", 10) == 0))
				r = dirs_add_list(cg, colon + 1);
		}
		(void)pclose(f);
	}
	return r;
}

int wrk_host_cage_init(struct wrk_host_cage *cg, uint64_t memory, uint64_t file_max,
		       uint64_t timeout_ns)
{
	int r;

	*cg = (struct wrk_host_cage){ .memory = memory,
				      .file_max = file_max,
				      .timeout_ns = timeout_ns };
	wrk_bpf_begin(&cg->filter, SECCOMP_RET_KILL_PROCESS);
	for (unsigned i = 0; i < ARRAY_SIZE(refused); i++)
		wrk_bpf_refuse(&cg->filter, refused[i], SECCOMP_RET_ERRNO | EPERM);
	r = wrk_bpf_end(&cg->filter, SECCOMP_RET_ALLOW);
	if (r < 0 && r != -ENOSYS)
		return r;
	cg->landlock_abi = wrk_landlock_abi();
	for (unsigned i = 0; i < ARRAY_SIZE(system_dirs); i++) {
		r = dir_add(cg, system_dirs[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

int wrk_host_cage_add_compiler(struct wrk_host_cage *cg, const char *cc)
{
	char path[PATH_MAX], own[PATH_MAX];
	int r;

	if (wrk_host_cage_find(cc, path, sizeof(path)) < 0)
		return 0;
	/* Its own directory, wherever it is. */
	memcpy(own, path, sizeof(own));
	*strrchr(own, '/') = '\0';
	r = dir_add(cg, own[0] ? own : "/");
	return r < 0 ? r : dirs_ask(cg, path);
}

void wrk_host_cage_done(struct wrk_host_cage *cg)
{
	for (unsigned i = 0; i < cg->ndirs; i++)
		free(cg->dirs[i]);
	cg->ndirs = 0;
}

/* The ruleset of one build: the toolchain to read and run, dir to work in. */
static int ruleset_make(const struct wrk_host_cage *cg, const char *dir, int *ret_fd)
{
	_cleanup_(closep) int fd = -1;
	int abi = cg->landlock_abi, r = wrk_landlock_new(abi, &fd);

	for (unsigned i = 0; r == 0 && i < cg->ndirs; i++)
		r = wrk_landlock_allow(fd, abi, cg->dirs[i], WRK_LL_RUN);
	for (unsigned i = 0; r == 0 && i < ARRAY_SIZE(read_files); i++)
		if (access(read_files[i], F_OK) == 0)
			r = wrk_landlock_allow(fd, abi, read_files[i], WRK_LL_READ_FILE);
	for (unsigned i = 0; r == 0 && i < ARRAY_SIZE(rw_files); i++)
		r = wrk_landlock_allow(fd, abi, rw_files[i], WRK_LL_READ_FILE | WRK_LL_WRITE_FILE);
	if (r == 0)
		r = wrk_landlock_allow(fd, abi, dir, WRK_LL_OWN);
	if (r < 0)
		return r;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

/*
 * The environment, with TMPDIR set to dir (the compiler's temporary files go there) and
 * without LD_PRELOAD or LD_AUDIT: a library preloaded into gpuxd and its workers (a
 * sanitizer's runtime, whose shadow memory the cage's address-space limit refuses) is theirs,
 * not the compiler's. The array and its last string are to free (env_free()), the rest are
 * environ's.
 */
static char **env_make(const char *dir)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 2, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "TMPDIR=", 7) != 0 &&
		    strncmp(environ[i], "LD_PRELOAD=", 11) != 0 &&
		    strncmp(environ[i], "LD_AUDIT=", 9) != 0)
			env[k++] = environ[i];
	env[k] = wrk_strdup_printf("TMPDIR=%s", dir);
	if (!env[k]) {
		free(env);
		return NULL;
	}
	return env;
}

static void env_free(char **env)
{
	size_t n = 0;

	while (env[n])
		n++;
	free(env[n - 1]);
	free(env);
}

/*
 * The child, between fork() and exec: only system calls (the worker has other threads).
 * Its own process group (killed whole at the time limit), its output in log_fd, its limits,
 * no capabilities (a root worker's), no new privileges, Landlock, the filter; then the
 * compiler, with no signal blocked.
 */
static __attribute__((noreturn)) void child(const struct wrk_host_cage *cg, const char *path,
					    char *const *argv, char *const *env, const char *dir,
					    int log_fd, int ruleset)
{
	uint64_t cpu = cg->timeout_ns / NSEC_PER_SEC + 1;
	struct rlimit as = { cg->memory, cg->memory }, fsize = { cg->file_max, cg->file_max };
	struct rlimit none = { 0, 0 }, cpu_lim = { cpu, cpu + 1 };
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct caps[2] = { { 0 } };
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	sigset_t empty;

	(void)setpgid(0, 0);
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (null < 0 || dup2(null, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0 ||
	    chdir(dir) < 0)
		_exit(126);
	if ((cg->memory && setrlimit(RLIMIT_AS, &as) < 0) ||
	    (cg->file_max && setrlimit(RLIMIT_FSIZE, &fsize) < 0) ||
	    setrlimit(RLIMIT_CPU, &cpu_lim) < 0 || setrlimit(RLIMIT_CORE, &none) < 0)
		_exit(126);
	if ((geteuid() == 0 && syscall(SYS_capset, &hdr, caps) < 0) ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(126);
	if (ruleset >= 0 && wrk_landlock_enforce(ruleset) < 0)
		_exit(126);
#ifdef WRK_BPF_ARCH
	if (wrk_bpf_load((struct wrk_bpf *)&cg->filter, 0) < 0)
		_exit(126);
#endif
	sigemptyset(&empty);
	(void)sigprocmask(SIG_SETMASK, &empty, NULL);
	(void)execve(path, argv, env);
	_exit(127);
}

int wrk_host_cage_run(const struct wrk_host_cage *cg, char *const *argv, const char *dir,
		      const char *log_path, int *ret_status)
{
	_cleanup_(closep) int ruleset = -1, log_fd = -1;
	char path[PATH_MAX], **env;
	uint64_t until = mono_ns() + cg->timeout_ns;
	pid_t pid;
	int r, st;

	if (wrk_host_cage_find(argv[0], path, sizeof(path)) < 0)
		return -ENOENT;
	if (cg->landlock_abi > 0) {
		r = ruleset_make(cg, dir, &ruleset);
		if (r < 0)
			return r;
	}
	log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (log_fd < 0)
		return -errno;
	env = env_make(dir);
	if (!env)
		return -ENOMEM;
	pid = fork();
	if (pid == 0)
		child(cg, path, argv, env, dir, log_fd, ruleset);
	env_free(env);
	if (pid < 0)
		return -errno;
	(void)setpgid(pid, pid);
	for (unsigned sleep_us = 100;; sleep_us = MIN(sleep_us * 2, 20000u)) {
		pid_t k = waitpid(pid, &st, WNOHANG);

		if (k == pid)
			break;
		if (k < 0 && errno != EINTR) {
			r = -errno;
			(void)kill(-pid, SIGKILL);
			return r;
		}
		if (mono_ns() > until) {
			(void)kill(-pid, SIGKILL);
			(void)waitpid(pid, &st, 0);
			return -ETIMEDOUT;
		}
		(void)usleep(sleep_us);
	}
	*ret_status = st;
	return 0;
}
