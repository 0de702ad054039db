/* SPDX-License-Identifier: MIT */
/* basic/path.h: where gpuxd listens by default, shared by gpuxd and libgpuxclient. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Where the system-wide gpuxd listens (gpuxd.socket; meson -Dsystem_socket=). */
#ifndef GPUX_SYSTEM_SOCKET
#define GPUX_SYSTEM_SOCKET "/run/gpux/gpuxd.sock"
#endif

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

/*
 * Where a client connects when told nothing: $GPUX_SOCKET; else the per-user socket when it
 * exists; else the system-wide one when it exists; else the per-user path, where a private
 * gpuxd may be started (*ret_private then true). Returns 0 or -ENAMETOOLONG.
 */
int ipc_client_socket(char *ret_path, size_t len, bool *ret_private);

/*
 * Where a private gpuxd logs: $GPUX_LOG_FILE, else $XDG_STATE_HOME/gpux/gpuxd.log, else
 * $HOME/.local/state/gpux/gpuxd.log. Returns 0, -ENOENT (no HOME) or -ENAMETOOLONG.
 */
int ipc_private_log(char *ret_path, size_t len);

/* The longest socket path AF_UNIX takes. */
#define IPC_SOCKET_PATH_MAX 108
