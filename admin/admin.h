/* SPDX-License-Identifier: MIT */
/* admin/admin.h: an admin client of gpuxd: connect, say hello, read the whole status, the clients. */
#pragma once

#include <stddef.h>

#include "proto.h"

/*
 * Connect to gpuxd at `path` as an admin client (status queries, no channels), waiting at most
 * timeout_ms for each answer. Returns the connected fd (close-on-exec), or -errno: what
 * connect() said (-ENOENT: no such socket; -ECONNREFUSED: nobody listens; -EACCES: the
 * socket's mode keeps this user out), -ETIMEDOUT, -EPROTO; or, when gpuxd refused with a
 * reason (copied into why, `why_len` bytes, when not NULL): -EPERM (this user is not
 * allowed), -ESHUTDOWN (gpuxd is stopping), -EUSERS (too many clients), -EPROTONOSUPPORT (no
 * protocol version in common).
 */
int ipc_admin_connect(const char *path, int timeout_ms, char *why, size_t why_len);

/*
 * Ask for gpuxd's status on an admin connection, page after page: *ret gets the whole (count
 * = ndevices, first = 0) and devs[0 .. ndevices) the devices; devs must hold IPC_DEVICES_MAX.
 * Returns 0 or -errno (-ETIMEDOUT, -ECONNRESET, -EBADMSG).
 */
int ipc_admin_status(int fd, int timeout_ms, struct ipc_status *ret, struct ipc_dev_status *devs);

/* The most clients ipc_admin_clients() takes: far more than gpuxd serves. */
#define IPC_ADMIN_CLIENTS_MAX (1u << 20)

/*
 * Ask for gpuxd's clients (those this user may see), page after page: *ret gets a malloc'd
 * array of *ret_n, by id (free() it; NULL when there are none). Returns 0 or -errno
 * (-ETIMEDOUT, -ECONNRESET: a gpuxd that does not know the question drops the connection;
 * -EBADMSG, -ENOMEM, -E2BIG past IPC_ADMIN_CLIENTS_MAX).
 */
int ipc_admin_clients(int fd, int timeout_ms, struct ipc_client_info **ret, size_t *ret_n);
