/* SPDX-License-Identifier: MIT */
/* tests/test-worker-compile-sandbox.c: the compiler helper's sandbox: what it lets through, what it kills. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compile-sandbox.h"
#include "helpers.h"
#include "macro.h"

/*
 * Each case runs in a forked child that seals itself exactly as the helper does (one
 * readable directory, a channel socket) and then tries one thing. A forbidden call must
 * kill the child with SIGSYS; a refused file must fail with EACCES and leave it running.
 */

struct env {
	char dir[64];      /* the directory the sandbox may read */
	char inside[128];  /* a file in it */
	char outside[128]; /* a file beside it */
	int chan[2];       /* chan[0] is the sandbox's channel; chan[1] another socket */
	pid_t parent;
};

static struct env env;

static int setup(void **state)
{
	char path[192];
	FILE *f;

	(void)snprintf(env.dir, sizeof(env.dir), "/tmp/gpux-sandbox-XXXXXX");
	assert_non_null(mkdtemp(env.dir));
	(void)snprintf(path, sizeof(path), "%s/readable", env.dir);
	assert_int_equal(mkdir(path, 0755), 0);
	(void)snprintf(env.inside, sizeof(env.inside), "%s/readable/h.h", env.dir);
	(void)snprintf(env.outside, sizeof(env.outside), "%s/secret", env.dir);
	f = fopen(env.inside, "w");
	assert_non_null(f);
	(void)fputs("int inside;\n", f);
	(void)fclose(f);
	f = fopen(env.outside, "w");
	assert_non_null(f);
	(void)fputs("secret\n", f);
	(void)fclose(f);
	(void)snprintf(path, sizeof(path), "%s/readable/link", env.dir);
	assert_int_equal(symlink(env.outside, path), 0);
	(void)snprintf(path, sizeof(path), "%s/pch", env.dir);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, env.chan), 0);
	env.parent = getpid();
	*state = &env;
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)close(env.chan[0]);
	(void)close(env.chan[1]);
	(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", env.dir);
	assert_int_equal(system(cmd), 0);
	return 0;
}

/* Run action sealed in a child (with a directory it may write: NVRTC's precompiled
 * headers'), its wait status. */
static int sealed_writing(int (*action)(void), bool writable)
{
	char readable[96], pch[96];
	const char *dirs[] = { readable };
	pid_t pid;
	int st;

	(void)snprintf(readable, sizeof(readable), "%s/readable", env.dir);
	(void)snprintf(pch, sizeof(pch), "%s/pch", env.dir);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		bool landlocked;

		if (wrk_compile_sandbox_seal(dirs, 1, writable ? pch : NULL, env.chan[0],
					     &landlocked) < 0)
			_exit(90);
		_exit(action());
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}

static int sealed(int (*action)(void))
{
	return sealed_writing(action, false);
}

static void assert_killed(int (*action)(void), const char *what)
{
	int st = sealed(action);

	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSYS)
		fail_msg("%s: not killed by SIGSYS (status 0x%x)", what, st);
}

static void assert_lives(int (*action)(void), const char *what)
{
	int st = sealed(action);

	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("%s: status 0x%x", what, st);
}

/* ---- what NVRTC needs goes through ---- */

static int nvrtc_needs(void)
{
	char buf[64], cwd[256];
	struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };
	struct stat st;
	void *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int fd = (int)syscall(SYS_memfd_create, "x", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	struct iovec iov = { buf, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (p == MAP_FAILED || mprotect(p, 4096, PROT_READ) < 0 || munmap(p, 1 << 20) < 0)
		return 1;
	p = malloc(64 << 20);
	if (!p)
		return 2;
	free(p);
	if (fd < 0 || write(fd, "x", 1) != 1 || fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) < 0 ||
	    fcntl(fd, F_GET_SEALS) < 0 || pread(fd, buf, 1, 0) != 1 || fstat(fd, &st) < 0)
		return 3;
	(void)close(fd);
	/* NVRTC raises its own stack limit. */
	if (prlimit(0, RLIMIT_STACK, NULL, &rl) < 0 || setrlimit(RLIMIT_STACK, &rl) < 0)
		return 4;
	if (!getcwd(cwd, sizeof(cwd)) || stat(env.dir, &st) < 0 || getpid() <= 0)
		return 5;
	buf[0] = 'x';
	if (sendmsg(env.chan[0], &mh, 0) != 1)
		return 6;
	return 0;
}

static void test_sandbox_allows_what_nvrtc_needs(void **state)
{
	assert_lives(nvrtc_needs, "memory, memfds, limits, the channel");
}

/* ---- files: Landlock ---- */

static int read_inside(void)
{
	char buf[32] = "";
	int fd = open(env.inside, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || read(fd, buf, sizeof(buf) - 1) <= 0 || strcmp(buf, "int inside;\n") != 0)
		return 1;
	return 0;
}

/* Each way out of the directory fails with EACCES, and the helper goes on. */
static int escape_fails(void)
{
	char rel[192], link[192];
	const char *paths[] = { env.outside, rel, link, "/etc/passwd" };

	(void)snprintf(rel, sizeof(rel), "%s/readable/../secret", env.dir);
	(void)snprintf(link, sizeof(link), "%s/readable/link", env.dir);
	for (unsigned i = 0; i < ARRAY_SIZE(paths); i++) {
		int fd = open(paths[i], O_RDONLY | O_CLOEXEC);

		if (fd >= 0 || errno != EACCES)
			return 10 + (int)i;
	}
	/* Nothing is written, made or removed, even where it may read. */
	if (open(env.inside, O_WRONLY | O_CLOEXEC) >= 0 || errno != EACCES)
		return 20;
	(void)snprintf(rel, sizeof(rel), "%s/readable/new", env.dir);
	if (open(rel, O_RDONLY | O_CREAT | O_CLOEXEC, 0600) >= 0 || errno != EACCES)
		return 21;
	return 0;
}

/* Without Landlock the filter alone keeps files closed: nothing opens. */
static int nothing_opens(void)
{
	char readable[96];
	const char *dirs[] = { readable };
	const char *paths[] = { env.inside, env.outside, "/etc/passwd" };

	(void)snprintf(readable, sizeof(readable), "%s/readable", env.dir);
	if (wrk_compile_sandbox_seal_abi(0, dirs, 1, NULL, env.chan[0]) < 0)
		return 90;
	for (unsigned i = 0; i < ARRAY_SIZE(paths); i++) {
		int fd = open(paths[i], O_RDONLY | O_CLOEXEC);

		if (fd >= 0 || errno != EACCES)
			return 10 + (int)i;
	}
	return 0;
}

static void test_sandbox_without_landlock_opens_nothing(void **state)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(nothing_opens());
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("status 0x%x", st);
}

static int do_unlink(void);

/* In the directory it may write: files made, written, truncated, read and removed, as NVRTC's
 * precompiled headers are; elsewhere still nothing (and no directory anywhere: mkdirat kills). */
static int write_beneath(void)
{
	char path[192], buf[8] = "";
	int fd;

	(void)snprintf(path, sizeof(path), "%s/pch/k_0.pch", env.dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "pch", 3) != 3 || pread(fd, buf, 3, 0) != 3 || strcmp(buf, "pch"))
		return 10;
	(void)close(fd);
	fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0)
		return 11;
	(void)close(fd);
	if (unlink(path) < 0)
		return 12;
	if (open(env.inside, O_WRONLY | O_CLOEXEC) >= 0 || errno != EACCES)
		return 20;
	(void)snprintf(path, sizeof(path), "%s/new", env.dir);
	if (open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600) >= 0 || errno != EACCES)
		return 21;
	if (unlink(env.outside) == 0 || errno != EACCES)
		return 22;
	return 0;
}

static void test_sandbox_writes_only_beneath_its_own_directory(void **state)
{
	int st;

	if (wrk_compile_sandbox_landlock_abi() == 0)
		skip();
	st = sealed_writing(write_beneath, true);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("status 0x%x", st);
	/* Without a directory to write, opening to write and removing stay what they were. */
	assert_killed(do_unlink, "unlinkat without a directory to write");
}

static void test_sandbox_reads_only_beneath_its_directories(void **state)
{
	if (wrk_compile_sandbox_landlock_abi() == 0)
		skip();
	assert_lives(read_inside, "a file beneath the directory");
	assert_lives(escape_fails, "files elsewhere: absolute, ../, a symlink");
}

/* ---- everything else kills ---- */

static int do_socket(void)
{
	return (int)syscall(SYS_socket, AF_UNIX, SOCK_STREAM, 0);
}

static int do_io_uring(void)
{
	char params[120] = { 0 };

	return (int)syscall(SYS_io_uring_setup, 1, params);
}

static int do_unlink(void)
{
	return (int)syscall(SYS_unlinkat, AT_FDCWD, env.inside, 0);
}

static int do_rename(void)
{
	return (int)syscall(SYS_renameat, AT_FDCWD, env.inside, AT_FDCWD, env.outside);
}

static int do_truncate(void)
{
	return (int)syscall(SYS_truncate, env.inside, 0);
}

static int do_link(void)
{
	return (int)syscall(SYS_linkat, AT_FDCWD, env.outside, AT_FDCWD, env.inside, 0);
}

static int do_mkdir(void)
{
	return (int)syscall(SYS_mkdirat, AT_FDCWD, env.outside, 0700);
}

static int do_kill(void)
{
	return (int)syscall(SYS_kill, env.parent, 0);
}

static int do_pidfd_getfd(void)
{
	return (int)syscall(SYS_pidfd_getfd, 0, 0, 0);
}

static int do_bind(void)
{
	return (int)syscall(SYS_bind, env.chan[0], NULL, 0);
}

static int do_sendmsg_elsewhere(void)
{
	char c = 'x';
	struct iovec iov = { &c, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	return (int)syscall(SYS_sendmsg, env.chan[1], &mh, 0);
}

static int do_execve(void)
{
	char *argv[] = { "/bin/true", NULL };

	return (int)syscall(SYS_execve, "/bin/true", argv, NULL);
}

static int do_ptrace(void)
{
	return (int)syscall(SYS_ptrace, PTRACE_ATTACH, env.parent, 0, 0);
}

static int do_fork(void)
{
	return (int)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
}

static int do_exec_memory(void)
{
	return (int)syscall(SYS_mmap, NULL, 4096, PROT_READ | PROT_EXEC,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

static int do_mprotect_exec(void)
{
	static char page[4096] __attribute__((aligned(4096)));

	return (int)syscall(SYS_mprotect, page, sizeof(page), PROT_READ | PROT_EXEC);
}

static int do_prlimit_other(void)
{
	struct rlimit rl;

	return (int)syscall(SYS_prlimit64, env.parent, RLIMIT_NOFILE, NULL, &rl);
}

static int do_memfd_exec(void)
{
	return (int)syscall(SYS_memfd_create, "x", 0);
}

static int do_fcntl_setown(void)
{
	return (int)syscall(SYS_fcntl, env.chan[0], F_SETOWN, env.parent);
}

static int do_ioctl(void)
{
	return (int)syscall(SYS_ioctl, 0, 0x5401 /* TCGETS */, NULL);
}

static int do_landlock_again(void)
{
	return (int)syscall(SYS_landlock_create_ruleset, NULL, 0, 1);
}

#if defined(__x86_64__)
/* getpid through the x32 ABI: x86-64's audit number, the x32 bit in the call's number. */
static int do_x32(void)
{
	return (int)syscall(0x40000000 | SYS_getpid);
}

/* getpid (20) through the 32-bit entry: another architecture's audit number. */
static int do_i386(void)
{
	long r;

	__asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
	return (int)r;
}
#endif

static void test_sandbox_kills_forbidden_calls(void **state)
{
	static const struct {
		const char *what;
		int (*action)(void);
	} calls[] = {
		{ "socket", do_socket },
		{ "io_uring_setup", do_io_uring },
		{ "unlinkat", do_unlink },
		{ "renameat", do_rename },
		{ "truncate", do_truncate },
		{ "linkat", do_link },
		{ "mkdirat", do_mkdir },
		{ "kill", do_kill },
		{ "pidfd_getfd", do_pidfd_getfd },
		{ "bind", do_bind },
		{ "sendmsg on another socket", do_sendmsg_elsewhere },
		{ "execve", do_execve },
		{ "ptrace", do_ptrace },
		{ "clone", do_fork },
		{ "mmap PROT_EXEC", do_exec_memory },
		{ "mprotect PROT_EXEC", do_mprotect_exec },
		{ "prlimit of another process", do_prlimit_other },
		{ "memfd_create without close-on-exec", do_memfd_exec },
		{ "fcntl F_SETOWN", do_fcntl_setown },
		{ "ioctl", do_ioctl },
		{ "landlock_create_ruleset", do_landlock_again },
#if defined(__x86_64__)
		{ "x32 getpid", do_x32 },
		{ "i386 getpid", do_i386 },
#endif
	};

	for (unsigned i = 0; i < ARRAY_SIZE(calls); i++)
		assert_killed(calls[i].action, calls[i].what);
}

/* ThreadSanitizer's runtime starts a thread of its own in a forked child and makes calls the
 * helper never makes (clone, rseq): the filter kills the sealed children for them. */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sandbox_allows_what_nvrtc_needs),
		cmocka_unit_test(test_sandbox_reads_only_beneath_its_directories),
		cmocka_unit_test(test_sandbox_writes_only_beneath_its_own_directory),
		cmocka_unit_test(test_sandbox_without_landlock_opens_nothing),
		cmocka_unit_test(test_sandbox_kills_forbidden_calls),
	};

	if (UNDER_TSAN) {
		(void)puts("skipped: the sandboxed children cannot run ThreadSanitizer's runtime");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
