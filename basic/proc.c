/* SPDX-License-Identifier: MIT */
/* basic/proc.c: what /proc says of a process: its open fds, the fields of its stat line. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"

int proc_fd_count(pid_t pid)
{
	char path[64];
	const struct dirent *e;
	DIR *d;
	int n = 0;

	(void)snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	(void)closedir(d);
	return n - (pid == getpid());
}

const char *proc_stat_fields(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	const char *p;
	ssize_t n;

	if (fd < 0)
		return NULL;
	n = read(fd, buf, size - 1);
	(void)close(fd);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	/* "pid (comm) state ...": the last ')' closes the name. */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p + 2 : NULL;
}
