/* SPDX-License-Identifier: MIT */
/* worker/core/ratelimit.h: how many log lines each user's clients may cause: a burst a window, then a count. */
#pragma once

#include <stdint.h>

/*
 * Keys followed at once, each with a slot. One more takes the slot of a key whose window
 * ended; while none has, it shares `others` with every key that found no slot.
 */
#define WRK_RATELIMIT_KEYS 64u

struct wrk_ratelimit_key {
	uint32_t key;
	uint64_t window; /* when its current window began (ns); 0: the slot is free */
	unsigned n;      /* lines let through in that window */
	uint64_t missed; /* lines left out since the last one let through */
};

struct wrk_ratelimit {
	uint64_t window_ns;
	unsigned burst;
	struct wrk_ratelimit_key keys[WRK_RATELIMIT_KEYS];
	struct wrk_ratelimit_key others; /* the keys without a slot, limited as one */
	uint64_t unreported; /* lines left out of `others`, or of keys whose slot was taken */
};

/* clang-format takes a braced initializer in a macro for a function's body: kept as written. */
/* clang-format off */
#define WRK_RATELIMIT_INIT(window, lines) { .window_ns = (window), .burst = (lines) }
/* clang-format on */

/*
 * A line for `key` at time `now` (ns, > 0, never going back): whether it may be written. At
 * most rl->burst lines a window for each key. Returns how many lines were left out before
 * this one (to say so first), or -1 when this one is left out. Keys that find no slot (more
 * than WRK_RATELIMIT_KEYS in one window) are limited together, as one; the lines they had
 * left out, and those of a key whose slot was taken after its window, are counted with the
 * next line let through, whichever key's. Not locked.
 */
int64_t wrk_ratelimit_take(struct wrk_ratelimit *rl, uint32_t key, uint64_t now);
