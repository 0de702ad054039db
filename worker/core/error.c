/* SPDX-License-Identifier: MIT */
/* worker/core/error.c: the one place an errno becomes a status in the worker. */
#include <errno.h>

#include "wrk.h"

gpux_status wrk_status_from_errno(int err, gpux_status otherwise)
{
	if (err == 0)
		return GPUX_OK;
	if (err == -ENOMEM)
		return GPUX_E_NOMEM;
	return otherwise;
}
