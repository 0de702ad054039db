/* SPDX-License-Identifier: MIT */
/* worker/sandbox.c: the seccomp filter a host back end's slot thread runs kernels under. */
#include <assert.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ipc/macro.h"
#include "sandbox.h"
#include "wrk.h"

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#endif

/* x86-64's x32 ABI: the same arch in seccomp_data, numbers with this bit set. */
#define X32_SYSCALL_BIT 0x40000000u

/*
 * What a kernel, and the slot thread around it, may ask of the system: memory (malloc and
 * free), locks, clocks and sleeping, signal frames (its own faults), the end of the thread.
 * Nothing that reaches a file, a socket, another process or a credential.
 */
static const int allowed[] = {
	SYS_futex, SYS_sched_yield, SYS_nanosleep, SYS_clock_nanosleep, SYS_clock_gettime,
	SYS_clock_getres, SYS_gettimeofday, SYS_getpid, SYS_gettid, SYS_getrandom, SYS_getcpu,
	SYS_sched_getaffinity, /* pthread_getattr_np(), which sanitizers call on siglongjmp() */
	SYS_rt_sigreturn, SYS_rt_sigprocmask, SYS_sigaltstack, SYS_restart_syscall, SYS_exit,
	SYS_exit_group, SYS_brk, SYS_munmap, SYS_madvise, SYS_mremap, SYS_mprotect,
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
	{ SYS_openat, "openat" }, { SYS_read, "read" }, { SYS_write, "write" },
	{ SYS_close, "close" }, { SYS_socket, "socket" }, { SYS_connect, "connect" },
	{ SYS_sendto, "sendto" }, { SYS_execve, "execve" }, { SYS_clone, "clone" },
#ifdef SYS_fork
	{ SYS_fork, "fork" },
#endif
	{ SYS_kill, "kill" }, { SYS_tgkill, "tgkill" }, { SYS_ptrace, "ptrace" },
	{ SYS_mmap, "mmap" }, { SYS_rt_sigaction, "rt_sigaction" }, { SYS_ioctl, "ioctl" },
	{ SYS_prctl, "prctl" }, { SYS_setuid, "setuid" }, { SYS_io_uring_setup, "io_uring_setup" },
	{ SYS_unlinkat, "unlinkat" }, { SYS_fstat, "fstat" },
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

#ifdef NATIVE_ARCH
	if (arch != NATIVE_ARCH)
		return wrk_strdup_printf("kernel \"%s\": system call %d of another architecture "
					 "(%#x): %s", kernel, nr, arch, why);
#endif
	if ((unsigned)nr & X32_SYSCALL_BIT)
		return wrk_strdup_printf("kernel \"%s\": x32 system call %#x: %s", kernel,
					 (unsigned)nr, why);
	return wrk_strdup_printf("kernel \"%s\": system call %d (%s) is not allowed: %s", kernel,
				 nr, call_name(nr), why);
}

#define STMT(code, k) ((struct sock_filter)BPF_STMT((code), (k)))
#define JUMP(code, k, jt, jf) ((struct sock_filter)BPF_JUMP((code), (k), (jt), (jf)))
/* The low half of argument i (the whole of an int argument: the kernel reads no more). */
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))

int wrk_sandbox_enter(int wake_fd)
{
#ifdef NATIVE_ARCH
	struct sock_filter f[8 + 2 * ARRAY_SIZE(allowed) + 16];
	struct sock_fprog prog = { .filter = f };
	unsigned k = 0;

	/* Another architecture's numbers (int 0x80 on x86-64) or x32's: never. */
	f[k++] = STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	f[k++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0);
	f[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
	f[k++] = STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
#if defined(__x86_64__)
	f[k++] = JUMP(BPF_JMP | BPF_JSET | BPF_K, X32_SYSCALL_BIT, 0, 1);
	f[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
#endif
	for (unsigned i = 0; i < ARRAY_SIZE(allowed); i++) {
		f[k++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)allowed[i], 0, 1);
		f[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	}
	/* write() only to the worker's wake-up eventfd (a request's completion). */
	f[k++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_write, 0, 4);
	f[k++] = STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0));
	f[k++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)wake_fd, 0, 1);
	f[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	f[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
	/* mmap() of anonymous memory only (malloc), no file. */
	f[k++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 0, 4);
	f[k++] = STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(3));
	f[k++] = JUMP(BPF_JMP | BPF_JSET | BPF_K, MAP_ANONYMOUS, 0, 1);
	f[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	f[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
	/* tgkill() of this process only: abort(), when a bug of ours crashes this thread. */
	f[k++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_tgkill, 0, 4);
	f[k++] = STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0));
	f[k++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)getpid(), 0, 1);
	f[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	f[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
	f[k++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
	assert(k <= ARRAY_SIZE(f));
	prog.len = (unsigned short)k;

	/* This thread only (no TSYNC): the worker's other threads need what kernels may not. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
		return -errno;
	return 0;
#else
	return -ENOSYS;
#endif
}
