/* SPDX-License-Identifier: MIT */
/* ipc/path.c: the default socket location, and a check that its directory is ours alone. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "path.h"

int ipc_default_socket(char *ret_dir, char *ret_path, size_t len)
{
	const char *rt = getenv("XDG_RUNTIME_DIR");
	int n;

	if (rt && *rt == '/')
		n = snprintf(ret_dir, len, "%s/gpux", rt);
	else
		n = snprintf(ret_dir, len, "/tmp/gpux-%u", (unsigned)geteuid());
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	n = snprintf(ret_path, len, "%s/gpuxd.sock", ret_dir);
	if (n < 0 || (size_t)n >= len || (size_t)n >= IPC_SOCKET_PATH_MAX)
		return -ENAMETOOLONG;
	return 0;
}

int ipc_private_dir(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	/* In /tmp anybody could have made it first: it must be ours, and closed to others. */
	if (lstat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0)
		return -EPERM;
	return 0;
}
