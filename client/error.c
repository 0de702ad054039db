/* SPDX-License-Identifier: MIT */
/* client/error.c: status codes: their texts, the one place an errno becomes one; the version. */
#include <errno.h>

#include "cli.h"

/*
 * What comes off the wire is handed to the caller as it is (a DONE's status, a device's
 * back end and state, a module's source) and what the caller gives goes on it the same way
 * (a language, argument kinds, flags): the wire's codes have the values of gpux.h's.
 */
IPC_ASSERT_PUBLIC()

/*
 * Inside the library a failure is a -errno; an exported function turns it into its status
 * here, once. Each status that a failure here can be has one errno (the first below), and
 * cli_errno_from_status() gives it back:
 *
 *   GPUX_E_INVAL        -EINVAL
 *   GPUX_E_NOMEM        -ENOMEM, -ENOSPC (a memfd that cannot be filled)
 *   GPUX_E_PROTO        -EPROTO, -EBADMSG (a message that does not decode)
 *   GPUX_E_CONNECT      -ECONNREFUSED
 *   GPUX_E_PERM         -EACCES
 *   GPUX_E_NODEV        -ENODEV
 *   GPUX_E_WORKER_LOST  -EPIPE, -ECONNRESET
 *   GPUX_E_TIMEOUT      -ETIMEDOUT
 *   GPUX_E_QUOTA        -EDQUOT
 *   GPUX_E_AGAIN        -EAGAIN
 *   GPUX_E_VERSION      -EPROTONOSUPPORT
 *   GPUX_E_STOPPING     -ESHUTDOWN (gpuxd drains before it stops)
 *   GPUX_E_DBUF_LOST    -ESTALE (a device buffer whose worker is gone)
 *   GPUX_E_IO           any other errno: a system call failed
 *
 * GPUX_E_KERNEL_FAULT, GPUX_E_COMPILE, GPUX_E_NOTFOUND, GPUX_E_NODRIVER and GPUX_E_DEVICE
 * have no errno: only a worker says them, in a DONE, and they stay data (a request's
 * status), never a return value. So do the TIMEOUT and WORKER_LOST that the library itself
 * gives the requests of a worker that died.
 */
gpux_status cli_status_from_errno(int err)
{
	switch (err) {
	case 0:
		return GPUX_OK;
	case -EINVAL:
		return GPUX_E_INVAL;
	case -ENOMEM:
	case -ENOSPC:
		return GPUX_E_NOMEM;
	case -EPROTO:
	case -EBADMSG:
		return GPUX_E_PROTO;
	case -ECONNREFUSED:
		return GPUX_E_CONNECT;
	case -EACCES:
		return GPUX_E_PERM;
	case -ENODEV:
		return GPUX_E_NODEV;
	case -EPIPE:
	case -ECONNRESET:
		return GPUX_E_WORKER_LOST;
	case -ETIMEDOUT:
		return GPUX_E_TIMEOUT;
	case -EDQUOT:
		return GPUX_E_QUOTA;
	case -EAGAIN:
		return GPUX_E_AGAIN;
	case -EPROTONOSUPPORT:
		return GPUX_E_VERSION;
	case -ESHUTDOWN:
		return GPUX_E_STOPPING;
	case -ESTALE:
		return GPUX_E_DBUF_LOST;
	default:
		return GPUX_E_IO;
	}
}

int cli_errno_from_status(int32_t status)
{
	switch (status) {
	case GPUX_OK:
		return 0;
	case GPUX_E_INVAL:
		return -EINVAL;
	case GPUX_E_NOMEM:
		return -ENOMEM;
	case GPUX_E_PROTO:
		return -EPROTO;
	case GPUX_E_CONNECT:
		return -ECONNREFUSED;
	case GPUX_E_PERM:
		return -EACCES;
	case GPUX_E_NODEV:
		return -ENODEV;
	case GPUX_E_WORKER_LOST:
		return -EPIPE;
	case GPUX_E_TIMEOUT:
		return -ETIMEDOUT;
	case GPUX_E_QUOTA:
		return -EDQUOT;
	case GPUX_E_AGAIN:
		return -EAGAIN;
	case GPUX_E_VERSION:
		return -EPROTONOSUPPORT;
	case GPUX_E_STOPPING:
		return -ESHUTDOWN;
	case GPUX_E_DBUF_LOST:
		return -ESTALE;
	case GPUX_E_IO:
		return -EIO;
	default:
		/* Not one a peer may answer with here: it broke the protocol. */
		return -EPROTO;
	}
}

GPUX_EXPORT const char *gpux_strerror(gpux_status status)
{
	return ipc_status_text(status);
}

GPUX_EXPORT const char *gpux_version(void)
{
	return GPUX_VERSION_STRING;
}
