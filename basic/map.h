/* SPDX-License-Identifier: MIT */
/* basic/map.h: a hash map from 64-bit ids to pointers (open addressing, linear probing). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ipc_map {
	uint64_t *keys;
	void **vals; /* NULL marks an empty slot: values are never NULL */
	size_t cap;  /* a power of two, or 0 */
	size_t n;
};

/* clang-format takes a braced initializer in a macro for a function's body: kept as written. */
/* clang-format off */
#define IPC_MAP_INIT { NULL, NULL, 0, 0 }
/* clang-format on */

/* Free the table (not the values). */
void ipc_map_done(struct ipc_map *m);

/* Insert; val must not be NULL. Returns 0, -EEXIST, or -ENOMEM. */
int ipc_map_put(struct ipc_map *m, uint64_t key, void *val);

/* The value, or NULL. */
void *ipc_map_get(const struct ipc_map *m, uint64_t key);

/* Remove and return the value, or NULL when absent. */
void *ipc_map_remove(struct ipc_map *m, uint64_t key);

static inline size_t ipc_map_size(const struct ipc_map *m)
{
	return m->n;
}

/*
 * Iterate: `for (size_t i = 0; ipc_map_next(m, &i, &key, &val);)`. The map must not change
 * during the iteration.
 */
bool ipc_map_next(const struct ipc_map *m, size_t *iter, uint64_t *ret_key, void **ret_val);

/* Take any one value out (removing it), or NULL when empty: for draining a map. */
void *ipc_map_pop(struct ipc_map *m);
