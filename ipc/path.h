/* SPDX-License-Identifier: MIT */
/* ipc/path.h: where gpuxd listens by default, shared by gpuxd and libgpuxclient. */
#pragma once

#include <stddef.h>

/*
 * The per-user default socket: $XDG_RUNTIME_DIR/gpux/gpuxd.sock, else
 * /tmp/gpux-<uid>/gpuxd.sock. Writes the directory and the socket path (each of `len`
 * bytes). Returns 0 or -ENAMETOOLONG.
 */
int ipc_default_socket(char *ret_dir, char *ret_path, size_t len);

/*
 * Make sure a private directory exists: created 0700 if absent; otherwise it must be a
 * real directory (no symlink) owned by this user with no access for others. -EPERM if not.
 */
int ipc_private_dir(const char *dir);

/* The longest socket path AF_UNIX takes. */
#define IPC_SOCKET_PATH_MAX 108
