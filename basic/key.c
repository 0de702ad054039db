/* SPDX-License-Identifier: MIT */
/* basic/key.c: XXH3-128 content keys, with xxHash compiled inline (XXH_INLINE_ALL). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

#include "key.h"

static struct ipc_key from_xxh(XXH128_hash_t h)
{
	return (struct ipc_key){ .lo = h.low64, .hi = h.high64 };
}

struct ipc_key ipc_key_of(const void *data, size_t len)
{
	return from_xxh(XXH3_128bits(data, len));
}

int ipc_key_begin(struct ipc_key_state *s)
{
	XXH3_state_t *x = XXH3_createState();

	if (!x)
		return -ENOMEM;
	if (XXH3_128bits_reset(x) != XXH_OK) {
		XXH3_freeState(x);
		return -EINVAL;
	}
	s->xxh = x;
	return 0;
}

void ipc_key_add(struct ipc_key_state *s, const void *data, size_t len)
{
	ipc_key_add_u64(s, len);
	if (len)
		(void)XXH3_128bits_update(s->xxh, data, len);
}

void ipc_key_add_u64(struct ipc_key_state *s, uint64_t v)
{
	(void)XXH3_128bits_update(s->xxh, &v, sizeof(v));
}

struct ipc_key ipc_key_end(struct ipc_key_state *s)
{
	struct ipc_key k = from_xxh(XXH3_128bits_digest(s->xxh));

	ipc_key_abort(s);
	return k;
}

void ipc_key_abort(struct ipc_key_state *s)
{
	XXH3_freeState(s->xxh);
	s->xxh = NULL;
}

bool ipc_key_equal(struct ipc_key a, struct ipc_key b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

int ipc_key_cmp(struct ipc_key a, struct ipc_key b)
{
	if (a.hi != b.hi)
		return a.hi < b.hi ? -1 : 1;
	if (a.lo != b.lo)
		return a.lo < b.lo ? -1 : 1;
	return 0;
}

void ipc_key_hex(struct ipc_key k, char out[IPC_KEY_HEX_LEN + 1])
{
	(void)snprintf(out, IPC_KEY_HEX_LEN + 1, "%016llx%016llx", (unsigned long long)k.hi,
		       (unsigned long long)k.lo);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int ipc_key_from_hex(const char *s, struct ipc_key *ret)
{
	uint64_t half[2] = { 0, 0 };

	if (strlen(s) != IPC_KEY_HEX_LEN)
		return -EINVAL;
	for (unsigned i = 0; i < IPC_KEY_HEX_LEN; i++) {
		int v = hexval(s[i]);
		if (v < 0)
			return -EINVAL;
		half[i / 16] = (half[i / 16] << 4) | (uint64_t)v;
	}
	ret->hi = half[0];
	ret->lo = half[1];
	return 0;
}
