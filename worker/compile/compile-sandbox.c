/* SPDX-License-Identifier: MIT */
/* worker/compile/compile-sandbox.c: the compiler helper's cage: Landlock for files, a seccomp allow-list for the rest. */
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "compile-sandbox.h"
#include "landlock.h"
#include "macro.h"
#include "seccomp.h"

/*
 * A seccomp filter cannot look at path strings, so files are Landlock's: the helper may read
 * beneath the toolkit's include directories and nothing else, wherever a path (absolute,
 * "../..", a symlink) leads. Everything else is seccomp's: an allow-list of the calls that
 * tracing NVRTC's compiles showed (strace -f of the helper compiling kernels with and without
 * the toolkit's headers, name expressions, errors), each narrowed by its arguments where that
 * is possible. What is not on the list kills the helper; the worker sees SIGSYS, says so, and
 * starts a new one for the next compile.
 */

int wrk_compile_sandbox_landlock_abi(void)
{
	return wrk_landlock_abi();
}

/* Reading beneath dirs; files made, written, read and removed in write_dir (no directories,
 * links, devices, nothing executed); nothing else: worker/core/landlock.c handles every right
 * of the ABI. */
static int landlock(int abi, const char *const *dirs, unsigned ndirs, const char *write_dir)
{
	_cleanup_(closep) int ruleset = -1;
	int r = wrk_landlock_new(abi, &ruleset);

	for (unsigned i = 0; r == 0 && i < ndirs; i++)
		r = wrk_landlock_allow(ruleset, abi, dirs[i], WRK_LL_READ);
	if (r == 0 && write_dir)
		r = wrk_landlock_allow(ruleset, abi, write_dir,
				       WRK_LL_READ | WRK_LL_WRITE_FILE | WRK_LL_MAKE_REG |
					       WRK_LL_REMOVE_FILE | WRK_LL_TRUNCATE);
	return r < 0 ? r : wrk_landlock_enforce(ruleset);
}

/* ---- the seccomp program ---- */

#ifndef WRK_BPF_ARCH
#error "the compiler's sandbox needs this architecture's audit number"
#endif

#define RET_KILL (SECCOMP_RET_KILL_PROCESS)
#define RET_EACCES (SECCOMP_RET_ERRNO | (EACCES & SECCOMP_RET_DATA))

static const long plain[] = {
	/* memory (mmap and mprotect are below: never executable) */
	SYS_brk,
	SYS_munmap,
	SYS_mremap,
	SYS_madvise,
	/* files it already has, and what it may open (Landlock decides which); what a path
	 * is (a C library or NVRTC other than the ones traced may ask it otherwise than
	 * stat: it says no more than stat does) */
	SYS_read,
	SYS_write,
	SYS_pread64,
	SYS_readv,
	SYS_writev,
	SYS_lseek,
	SYS_close,
	SYS_fstat,
	SYS_newfstatat,
	SYS_statx,
	SYS_getcwd,
	SYS_readlinkat,
	SYS_faccessat,
	SYS_getdents64,
#ifdef SYS_faccessat2
	SYS_faccessat2,
#endif
#ifdef SYS_stat
	SYS_stat,
	SYS_lstat,
	SYS_readlink,
	SYS_access,
#endif
	/* time, identity, limits of its own */
	SYS_clock_gettime,
	SYS_clock_getres,
	SYS_clock_nanosleep,
	SYS_nanosleep,
	SYS_gettimeofday,
#ifdef SYS_time
	SYS_time,
#endif
	SYS_gettid,
	SYS_getpid,
	SYS_getppid,
	SYS_getuid,
	SYS_geteuid,
	SYS_getgid,
	SYS_getegid,
	SYS_getrusage,
	SYS_times,
	SYS_sysinfo,
	SYS_uname,
	SYS_getrandom,
#ifdef SYS_getrlimit
	SYS_getrlimit,
	SYS_setrlimit,
#endif
	SYS_sched_yield,
	SYS_sched_getaffinity,
	SYS_sched_get_priority_min,
	SYS_sched_get_priority_max,
	SYS_futex,
	/* signals to itself, and the way out (sanitizers' _exit looks at its signal stack) */
	SYS_rt_sigreturn,
	SYS_rt_sigprocmask,
	SYS_rt_sigaction,
	SYS_sigaltstack,
	SYS_restart_syscall,
	SYS_exit,
	SYS_exit_group,
};

/*
 * The filter; `files`: opening for reading is allowed (Landlock decides what); `writes`:
 * opening to write and removing files too (Landlock allows it beneath one directory).
 */
static int build(struct wrk_bpf *p, int channel_fd, bool files, bool writes_ok)
{
	static const uint32_t fcntl_cmds[] = { F_GETFD,         F_SETFD,     F_GETFL,
					       F_DUPFD_CLOEXEC, F_ADD_SEALS, F_GET_SEALS };
	const uint32_t writes = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND | __O_TMPFILE;
	const uint32_t memfd_flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
	const uint32_t self = 0, chan = (uint32_t)channel_fd;

	wrk_bpf_begin(p, RET_KILL);
	wrk_bpf_allow(p, plain, ARRAY_SIZE(plain));
	/* Opening for reading only, and only under Landlock: without it, nothing. Either way a
	 * refusal fails as Landlock's would. */
	if (files && writes_ok) {
		/* NVRTC's precompiled headers: its heap's file and the headers' (unlinked). */
		static const long rw[] = {
			SYS_openat,
			SYS_unlinkat,
#ifdef SYS_open
			SYS_open,
			SYS_unlink,
#endif
		};

		wrk_bpf_allow(p, rw, ARRAY_SIZE(rw));
	} else if (files) {
		wrk_bpf_allow_without(p, SYS_openat, 2, writes, RET_EACCES);
#ifdef SYS_open
		wrk_bpf_allow_without(p, SYS_open, 1, writes, RET_EACCES);
#endif
	} else {
		wrk_bpf_refuse(p, SYS_openat, RET_EACCES);
#ifdef SYS_open
		wrk_bpf_refuse(p, SYS_open, RET_EACCES);
#endif
	}
	wrk_bpf_allow_without(p, SYS_mmap, 2, PROT_EXEC, RET_KILL);
	wrk_bpf_allow_without(p, SYS_mprotect, 2, PROT_EXEC, RET_KILL);
	/* NVRTC raises its own stack limit; no other process's. */
	wrk_bpf_allow_if(p, SYS_prlimit64, 0, &self, 1, RET_KILL);
	wrk_bpf_allow_if(p, SYS_recvmsg, 0, &chan, 1, RET_KILL);
	wrk_bpf_allow_if(p, SYS_sendmsg, 0, &chan, 1, RET_KILL);
	wrk_bpf_allow_if(p, SYS_fcntl, 1, fcntl_cmds, ARRAY_SIZE(fcntl_cmds), RET_KILL);
	wrk_bpf_allow_if(p, SYS_memfd_create, 1, &memfd_flags, 1, RET_KILL);
	return wrk_bpf_end(p, RET_KILL);
}

int wrk_compile_sandbox_seal_abi(int abi, const char *const *read_dirs, unsigned ndirs,
				 const char *write_dir, int channel_fd)
{
	struct wrk_bpf p;
	int r = build(&p, channel_fd, abi > 0, abi > 0 && write_dir);

	if (r < 0)
		return r;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	if (abi > 0) {
		r = landlock(abi, read_dirs, ndirs, write_dir);
		if (r < 0)
			return r;
	}
	return wrk_bpf_load(&p, SECCOMP_FILTER_FLAG_TSYNC);
}

int wrk_compile_sandbox_seal(const char *const *read_dirs, unsigned ndirs, const char *write_dir,
			     int channel_fd, bool *ret_landlocked)
{
	int abi = wrk_compile_sandbox_landlock_abi();
	int r = wrk_compile_sandbox_seal_abi(abi, read_dirs, ndirs, write_dir, channel_fd);

	if (r < 0)
		return r;
	*ret_landlocked = abi > 0;
	return 0;
}
