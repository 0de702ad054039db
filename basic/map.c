/* SPDX-License-Identifier: MIT */
/* basic/map.c: a small hash map of 64-bit ids, with backward-shift deletion (no tombstones). */
#include <errno.h>
#include <stdlib.h>

#include "map.h"

static size_t slot_of(uint64_t key, size_t cap)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (size_t)key & (cap - 1);
}

void ipc_map_done(struct ipc_map *m)
{
	free(m->keys);
	free(m->vals);
	*m = (struct ipc_map)IPC_MAP_INIT;
}

static void insert(struct ipc_map *m, uint64_t key, void *val)
{
	size_t i = slot_of(key, m->cap);

	while (m->vals[i])
		i = (i + 1) & (m->cap - 1);
	m->keys[i] = key;
	m->vals[i] = val;
	m->n++;
}

static int grow(struct ipc_map *m)
{
	struct ipc_map old = *m;
	size_t cap = old.cap ? old.cap * 2 : 16;

	m->keys = calloc(cap, sizeof(*m->keys));
	m->vals = calloc(cap, sizeof(*m->vals));
	if (!m->keys || !m->vals) {
		free(m->keys);
		free(m->vals);
		*m = old;
		return -ENOMEM;
	}
	m->cap = cap;
	m->n = 0;
	for (size_t i = 0; i < old.cap; i++)
		if (old.vals[i])
			insert(m, old.keys[i], old.vals[i]);
	free(old.keys);
	free(old.vals);
	return 0;
}

static size_t find(const struct ipc_map *m, uint64_t key)
{
	size_t i;

	if (m->cap == 0)
		return SIZE_MAX;
	for (i = slot_of(key, m->cap); m->vals[i]; i = (i + 1) & (m->cap - 1))
		if (m->keys[i] == key)
			return i;
	return SIZE_MAX;
}

int ipc_map_put(struct ipc_map *m, uint64_t key, void *val)
{
	if (find(m, key) != SIZE_MAX)
		return -EEXIST;
	/* Keep the load under 3/4. */
	if ((m->n + 1) * 4 > m->cap * 3) {
		int r = grow(m);
		if (r < 0)
			return r;
	}
	insert(m, key, val);
	return 0;
}

void *ipc_map_get(const struct ipc_map *m, uint64_t key)
{
	size_t i = find(m, key);

	return i == SIZE_MAX ? NULL : m->vals[i];
}

static void remove_at(struct ipc_map *m, size_t i)
{
	size_t mask = m->cap - 1;
	size_t j = i;

	m->vals[i] = NULL;
	m->n--;
	/* Move later entries of the probe run back into the hole when their home allows. */
	for (;;) {
		size_t home;

		j = (j + 1) & mask;
		if (!m->vals[j])
			return;
		home = slot_of(m->keys[j], m->cap);
		if (((j - home) & mask) >= ((j - i) & mask)) {
			m->keys[i] = m->keys[j];
			m->vals[i] = m->vals[j];
			m->vals[j] = NULL;
			i = j;
		}
	}
}

void *ipc_map_remove(struct ipc_map *m, uint64_t key)
{
	size_t i = find(m, key);
	void *v;

	if (i == SIZE_MAX)
		return NULL;
	v = m->vals[i];
	remove_at(m, i);
	return v;
}

bool ipc_map_next(const struct ipc_map *m, size_t *iter, uint64_t *ret_key, void **ret_val)
{
	for (size_t i = *iter; i < m->cap; i++)
		if (m->vals[i]) {
			*iter = i + 1;
			if (ret_key)
				*ret_key = m->keys[i];
			if (ret_val)
				*ret_val = m->vals[i];
			return true;
		}
	*iter = m->cap;
	return false;
}

void *ipc_map_pop(struct ipc_map *m)
{
	for (size_t i = 0; i < m->cap; i++)
		if (m->vals[i]) {
			void *v = m->vals[i];
			remove_at(m, i);
			return v;
		}
	return NULL;
}
