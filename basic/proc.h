/* SPDX-License-Identifier: MIT */
/* basic/proc.h: what /proc says of a process: its open fds, the fields of its stat line. */
#pragma once

#include <stddef.h>
#include <sys/types.h>

/* The fds pid has open (this process's own count leaves out the directory read to count
 * them), or -errno. */
int proc_fd_count(pid_t pid);

/*
 * The fields of a stat line (/proc/PID/stat, /proc/PID/task/TID/stat) after the command's
 * name, which may hold blanks and parentheses: field 3 (the state) first, blank-separated,
 * in buf (of size bytes, NUL-terminated). NULL when the file cannot be read or is not one.
 */
const char *proc_stat_fields(const char *path, char *buf, size_t size);
