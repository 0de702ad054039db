/* SPDX-License-Identifier: MIT */
/* basic/key.h: 128-bit content keys (XXH3-128) for the module and device caches. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ipc_key {
	uint64_t lo, hi;
};

#define IPC_KEY_HEX_LEN 32

/* Incremental hashing of several parts into one key. */
struct ipc_key_state {
	void *xxh; /* XXH3_state_t, kept opaque so that users need no xxhash.h */
};

/* The key of `len` bytes. */
struct ipc_key ipc_key_of(const void *data, size_t len);

int ipc_key_begin(struct ipc_key_state *s);
/* Add one part; its length is hashed too, so ("ab","c") and ("a","bc") differ. */
void ipc_key_add(struct ipc_key_state *s, const void *data, size_t len);
void ipc_key_add_u64(struct ipc_key_state *s, uint64_t v);
/* Finish and free the state. */
struct ipc_key ipc_key_end(struct ipc_key_state *s);
/* Free a state that will not be finished. */
void ipc_key_abort(struct ipc_key_state *s);

bool ipc_key_equal(struct ipc_key a, struct ipc_key b);
int ipc_key_cmp(struct ipc_key a, struct ipc_key b);

/* 32 lower-case hex digits and a NUL, high half first. */
void ipc_key_hex(struct ipc_key k, char out[IPC_KEY_HEX_LEN + 1]);
/* Parse exactly 32 hex digits; -EINVAL otherwise. */
int ipc_key_from_hex(const char *s, struct ipc_key *ret);
