/* SPDX-License-Identifier: MIT */
/* worker/backend.c: the back ends this build has, by name. */
#include <string.h>

#include "backend.h"

const struct wrk_backend_ops *wrk_backend_find(const char *name)
{
	if (strcmp(name, "host") == 0)
		return &wrk_backend_host;
#ifdef GPUX_HAVE_CUDA
	if (strcmp(name, "cuda") == 0)
		return &wrk_backend_cuda;
#endif
	return NULL;
}
