/* SPDX-License-Identifier: MIT */
/* client/error.c: status texts and the library's version. */
#include "cli.h"

GPUX_EXPORT const char *gpux_strerror(gpux_status status)
{
	return ipc_status_text(status);
}

GPUX_EXPORT const char *gpux_version(void)
{
	return GPUX_VERSION_STRING;
}
