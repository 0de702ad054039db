/* SPDX-License-Identifier: MIT */
/* worker/ratelimit.c: how many log lines each user's clients may cause: a burst a window, then a count. */
#include <stddef.h>

#include "ratelimit.h"

/* The key's slot, or the one it takes: a free one, else the one whose window is oldest. */
static struct wrk_ratelimit_key *slot(struct wrk_ratelimit *rl, uint32_t key)
{
	struct wrk_ratelimit_key *oldest = &rl->keys[0];

	for (unsigned i = 0; i < WRK_RATELIMIT_KEYS; i++) {
		struct wrk_ratelimit_key *k = &rl->keys[i];

		if (k->window && k->key == key)
			return k;
		if (k->window < oldest->window)
			oldest = k;
	}
	*oldest = (struct wrk_ratelimit_key){ .key = key };
	return oldest;
}

int64_t wrk_ratelimit_take(struct wrk_ratelimit *rl, uint32_t key, uint64_t now)
{
	struct wrk_ratelimit_key *k = slot(rl, key);
	uint64_t missed;

	if (!k->window || now - k->window >= rl->window_ns) {
		k->window = now;
		k->n = 0;
	}
	if (k->n >= rl->burst) {
		k->missed++;
		return -1;
	}
	k->n++;
	missed = k->missed;
	k->missed = 0;
	return (int64_t)missed;
}
