/* SPDX-License-Identifier: MIT */
/* basic/path.c: the default socket location, and a check that its directory is ours alone. */
#include <errno.h>
#include <stdbool.h>
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

static bool is_socket(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

int ipc_client_socket(char *ret_path, size_t len, bool *ret_private)
{
	const char *env = getenv("GPUX_SOCKET");
	char dir[IPC_SOCKET_PATH_MAX + 16];
	int n, r;

	*ret_private = false;
	if (env && *env) {
		n = snprintf(ret_path, len, "%s", env);
		return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
	}
	r = ipc_default_socket(dir, ret_path, len);
	if (r < 0)
		return r;
	/* A shared gpuxd serves those who run none of their own. */
	if (!is_socket(ret_path) && is_socket(GPUX_SYSTEM_SOCKET)) {
		n = snprintf(ret_path, len, "%s", GPUX_SYSTEM_SOCKET);
		return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
	}
	*ret_private = true;
	return 0;
}

int ipc_private_log(char *ret_path, size_t len)
{
	const char *env = getenv("GPUX_LOG_FILE"), *state = getenv("XDG_STATE_HOME");
	const char *home = getenv("HOME");
	int n;

	if (env && *env)
		n = snprintf(ret_path, len, "%s", env);
	else if (state && *state == '/')
		n = snprintf(ret_path, len, "%s/gpux/gpuxd.log", state);
	else if (home && *home == '/')
		n = snprintf(ret_path, len, "%s/.local/state/gpux/gpuxd.log", home);
	else
		return -ENOENT;
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}
