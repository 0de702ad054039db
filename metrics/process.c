/* SPDX-License-Identifier: MIT */
/* metrics/process.c: the process_* metrics of a process (gpuxd's), from /proc. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "proc.h"
#include "mx.h"

/* The whole of a small /proc file, NUL-terminated: its length or -errno. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return -errno;
	n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	(void)fclose(f);
	return (ssize_t)n;
}

/* When the machine booted, in seconds since the epoch (btime of /proc/stat), or 0. */
static unsigned long long boot_time(void)
{
	char buf[8192];
	const char *p;

	if (read_small("/proc/stat", buf, sizeof(buf)) < 0)
		return 0;
	p = strstr(buf, "\nbtime ");
	return p ? strtoull(p + 7, NULL, 10) : 0;
}

/* The soft limit of open files ("Max open files" of /proc/PID/limits), or 0 if unlimited. */
static unsigned long long max_fds(pid_t pid)
{
	char path[64], buf[4096];
	const char *p;

	(void)snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
	if (read_small(path, buf, sizeof(buf)) < 0)
		return 0;
	p = strstr(buf, "Max open files");
	if (!p)
		return 0;
	p += strlen("Max open files");
	while (*p == ' ')
		p++;
	return strtoull(p, NULL, 10);
}

static void one(FILE *f, const char *name, const char *type, const char *help, double v)
{
	(void)fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

int mx_process_write(FILE *f, pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long utime = 0, stime = 0, start = 0, vsize = 0, rss = 0, fdmax;
	unsigned long long boot = boot_time();
	unsigned field = 3;
	long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	const char *p;
	int fds;

	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	/* Fields 3 (the state) on: utime and stime are 14 and 15, starttime 22, vsize 23, rss
	 * 24. */
	p = proc_stat_fields(path, buf, sizeof(buf));
	if (!p || ticks <= 0 || page <= 0)
		return -EIO;
	for (char *save = NULL, *t = strtok_r((char *)p, " ", &save); t && field <= 24;
	     t = strtok_r(NULL, " ", &save), field++) {
		unsigned long long v = strtoull(t, NULL, 10);

		if (field == 14)
			utime = v;
		else if (field == 15)
			stime = v;
		else if (field == 22)
			start = v;
		else if (field == 23)
			vsize = v;
		else if (field == 24)
			rss = v;
	}
	if (field <= 24)
		return -EIO;
	one(f, "process_cpu_seconds_total", "counter",
	    "User and system CPU time gpuxd spent, in seconds.",
	    (double)(utime + stime) / (double)ticks);
	one(f, "process_resident_memory_bytes", "gauge", "gpuxd's resident memory size.",
	    (double)rss * (double)page);
	one(f, "process_virtual_memory_bytes", "gauge", "gpuxd's virtual memory size.",
	    (double)vsize);
	if (boot)
		one(f, "process_start_time_seconds", "gauge",
		    "When gpuxd started, in seconds since the Unix epoch.",
		    (double)boot + (double)start / (double)ticks);
	fds = proc_fd_count(pid);
	if (fds >= 0)
		one(f, "process_open_fds", "gauge", "gpuxd's open file descriptors.", fds);
	fdmax = max_fds(pid);
	if (fdmax)
		one(f, "process_max_fds", "gauge", "gpuxd's limit of open file descriptors.",
		    (double)fdmax);
	return ferror(f) ? -EIO : 0;
}
