/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-proc.c: basic/proc: a process's open fds and its stat line's fields. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "macro.h"

/* This process's count follows what it opens and closes, the directory read not counted;
 * another process's is its own. */
static void test_proc_fd_count(void **state)
{
	int before = proc_fd_count(getpid()), fd, p[2], child_fds = 1;
	pid_t pid;

	(void)state;
	assert_true(before >= 3);
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(proc_fd_count(getpid()), before + 1);
	(void)close(fd);
	assert_int_equal(proc_fd_count(getpid()), before);

	for (int i = 0; i < 3; i++)
		child_fds += fcntl(i, F_GETFD) >= 0;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;

		/* The standard ones that are open, and the pipe's read end. */
		for (int i = 3; i < 1024; i++)
			if (i != p[0])
				(void)close(i);
		(void)read(p[0], &c, 1);
		_exit(0);
	}
	(void)close(p[0]);
	for (int i = 0; i < 1000 && proc_fd_count(pid) != child_fds; i++)
		(void)usleep(1000);
	assert_int_equal(proc_fd_count(pid), child_fds);
	(void)close(p[1]);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	assert_int_equal(proc_fd_count(pid), -ENOENT);
}

/* The fields after the command's name, however the name looks; NULL for what is no stat
 * line. */
static void test_proc_stat_fields(void **state)
{
	char path[64], buf[512], name[16] = { 0 };
	const char *f;
	int ppid;

	(void)state;
	f = proc_stat_fields("/proc/self/stat", buf, sizeof(buf));
	assert_non_null(f);
	assert_int_equal(sscanf(f, "%*c %d", &ppid), 1);
	assert_int_equal(ppid, getppid());

	/* A name with blanks and parentheses, as any program may give its threads. */
	assert_int_equal(prctl(PR_GET_NAME, name), 0);
	assert_int_equal(prctl(PR_SET_NAME, "a) (b) R 9"), 0);
	(void)snprintf(path, sizeof(path), "/proc/self/task/%ld/stat", (long)syscall(SYS_gettid));
	f = proc_stat_fields(path, buf, sizeof(buf));
	assert_int_equal(prctl(PR_SET_NAME, name), 0);
	assert_non_null(f);
	assert_true(*f == 'R');
	assert_int_equal(sscanf(f, "%*c %d", &ppid), 1);
	assert_int_equal(ppid, getppid());

	assert_null(proc_stat_fields("/proc/0/stat", buf, sizeof(buf)));
	assert_null(proc_stat_fields("/dev/null", buf, sizeof(buf)));
	assert_null(proc_stat_fields("/proc/self/comm", buf, sizeof(buf)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proc_fd_count),
		cmocka_unit_test(test_proc_stat_fields),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
