/* SPDX-License-Identifier: MIT */
/* worker/host/sandbox.c: the seccomp filter a host back end's slot thread runs kernels under. */
#include <errno.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "macro.h"
#include "sandbox.h"
#include "seccomp.h"
#include "wrk.h"

/*
 * What a kernel, and the slot thread around it, may ask of the system: memory (malloc and
 * free), locks, clocks and sleeping, signal frames (its own faults). Nothing that reaches a
 * file, a socket, another process or a credential, and no end of the thread or the process:
 * a slot thread in the sandbox never ends (worker/host/host.c), so a kernel's exit(),
 * exit_group() or thread exit is a fault like any other forbidden call.
 */
static const long allowed[] = {
	SYS_futex,
	SYS_sched_yield,
	SYS_nanosleep,
	SYS_clock_nanosleep,
	SYS_clock_gettime,
	SYS_clock_getres,
	SYS_gettimeofday,
	SYS_getpid,
	SYS_gettid,
	SYS_getrandom,
	SYS_getcpu,
	SYS_sched_getaffinity, /* pthread_getattr_np(), which sanitizers call on siglongjmp() */
	SYS_rt_sigreturn,
	SYS_sigaltstack,
	SYS_restart_syscall,
	SYS_brk,
	SYS_munmap,
	SYS_madvise,
	SYS_mremap,
	SYS_mprotect,
#ifdef SYS_time
	SYS_time,
#endif
};

/* For messages: the calls a kernel is most likely to try. */
static const struct {
	int nr;
	const char *name;
} names[] = {
#ifdef SYS_open
	{ SYS_open, "open" },
#endif
	{ SYS_openat, "openat" },
	{ SYS_read, "read" },
	{ SYS_write, "write" },
	{ SYS_close, "close" },
	{ SYS_socket, "socket" },
	{ SYS_connect, "connect" },
	{ SYS_sendto, "sendto" },
	{ SYS_execve, "execve" },
	{ SYS_clone, "clone" },
#ifdef SYS_fork
	{ SYS_fork, "fork" },
#endif
	{ SYS_kill, "kill" },
	{ SYS_tgkill, "tgkill" },
	{ SYS_ptrace, "ptrace" },
	{ SYS_mmap, "mmap" },
	{ SYS_rt_sigaction, "rt_sigaction" },
	{ SYS_ioctl, "ioctl" },
	{ SYS_prctl, "prctl" },
	{ SYS_setuid, "setuid" },
	{ SYS_io_uring_setup, "io_uring_setup" },
	{ SYS_unlinkat, "unlinkat" },
	{ SYS_fstat, "fstat" },
	{ SYS_exit, "exit" },
	{ SYS_exit_group, "exit_group" },
	{ SYS_clone3, "clone3" },
#ifdef SYS_vfork
	{ SYS_vfork, "vfork" },
#endif
	{ SYS_rt_sigprocmask, "rt_sigprocmask: blocking signals, as abort(), fork(), "
			      "pthread_create() and posix_spawn() do first" },
};

static const char *call_name(int nr)
{
	for (unsigned i = 0; i < ARRAY_SIZE(names); i++)
		if (names[i].nr == nr)
			return names[i].name;
	return "?";
}

char *wrk_sandbox_fault_text(const char *kernel, int nr, unsigned arch)
{
	static const char why[] = "host kernels of this gpuxd run in a sandbox (no files, "
				  "sockets, processes or signals)";

#ifdef WRK_BPF_ARCH
	if (arch != WRK_BPF_ARCH)
		return wrk_strdup_printf("kernel \"%s\": system call %d of another architecture "
					 "(%#x): %s",
					 kernel, nr, arch, why);
#endif
	if ((unsigned)nr & WRK_BPF_X32_BIT)
		return wrk_strdup_printf("kernel \"%s\": x32 system call %#x: %s", kernel,
					 (unsigned)nr, why);
	return wrk_strdup_printf("kernel \"%s\": system call %d (%s) is not allowed: %s", kernel,
				 nr, call_name(nr), why);
}

int wrk_sandbox_enter(int wake_fd)
{
	const uint32_t wake = (uint32_t)wake_fd, self = (uint32_t)getpid();
	struct wrk_bpf p;
	int r;

	/* Another architecture's numbers (int 0x80 on x86-64) or x32's: never. */
	wrk_bpf_begin(&p, SECCOMP_RET_TRAP);
	wrk_bpf_allow(&p, allowed, ARRAY_SIZE(allowed));
	/* write() only to the worker's wake-up eventfd (a request's completion). */
	wrk_bpf_allow_if(&p, SYS_write, 0, &wake, 1, SECCOMP_RET_TRAP);
	/* mmap() of anonymous memory only (malloc), no file. */
	wrk_bpf_allow_with(&p, SYS_mmap, 3, MAP_ANONYMOUS, SECCOMP_RET_TRAP);
	/* tgkill() of this process only: a bug of ours that crashes this thread (host.c). */
	wrk_bpf_allow_if(&p, SYS_tgkill, 0, &self, 1, SECCOMP_RET_TRAP);
	/*
	 * Signals unblocked, a mask set (siglongjmp()) or read (a NULL set), never blocked:
	 * what blocks them all first (fork(), pthread_create(), posix_spawn(), raise()) would
	 * otherwise meet this filter with SIGSYS blocked, and the kernel kills the whole
	 * worker for that, instead of failing the request.
	 */
	wrk_bpf_allow_unless(&p, SYS_rt_sigprocmask, 0, SIG_BLOCK, 1, SECCOMP_RET_TRAP);
	r = wrk_bpf_end(&p, SECCOMP_RET_TRAP);
	if (r < 0)
		return r;
	/* This thread only (no TSYNC): the worker's other threads need what kernels may not. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	return wrk_bpf_load(&p, 0);
}
