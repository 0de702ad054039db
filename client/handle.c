/* SPDX-License-Identifier: MIT */
/* client/handle.c: handles checked before use: a magic per type, freed objects kept a while. */
#include <stdlib.h>

#include "cli.h"

/*
 * A handle the application passes back is checked for its type's magic, so that a handle
 * freed already, or of another type, is refused (GPUX_E_INVAL) instead of used. For that
 * the memory must still be there: a freed object is marked dead and kept in its context's
 * quarantine, and free()d only when CLI_RETIRED_MAX newer ones have followed it (or with its
 * context). That costs a few kilobytes and one load per call, where handles that are not
 * pointers (an index and a generation in a table) would cost a lookup and a lock on every
 * call and change what the API hands out. Past the quarantine, a freed handle is undefined,
 * as a freed pointer is.
 */

bool cli_alive(const void *obj, uint32_t magic)
{
	return obj && __atomic_load_n((const uint32_t *)obj, __ATOMIC_ACQUIRE) == magic;
}

void cli_retire(gpux_ctx *ctx, void *obj)
{
	void **slot = &ctx->retired[ctx->nretired++ % CLI_RETIRED_MAX];

	__atomic_store_n((uint32_t *)obj, CLI_DEAD_MAGIC, __ATOMIC_RELEASE);
	free(*slot);
	*slot = obj;
}

void cli_retired_free_all(gpux_ctx *ctx)
{
	for (unsigned i = 0; i < CLI_RETIRED_MAX; i++) {
		free(ctx->retired[i]);
		ctx->retired[i] = NULL;
	}
	ctx->nretired = 0;
}
