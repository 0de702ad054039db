/* SPDX-License-Identifier: MIT */
/* worker/core/ratelimit.c: how many log lines each user's clients may cause: a burst a window, then a count. */
#include <stddef.h>

#include "ratelimit.h"

/*
 * The key's slot, or the one it takes: a free one, else the one whose window ended longest
 * ago (its key would start afresh anyway; what it left out is carried into rl->unreported).
 * While every slot's window is still open, none is taken from its key, which would start
 * afresh with a slot of its own: the key shares rl->others instead.
 */
static struct wrk_ratelimit_key *slot(struct wrk_ratelimit *rl, uint32_t key, uint64_t now)
{
	struct wrk_ratelimit_key *take = NULL;

	for (unsigned i = 0; i < WRK_RATELIMIT_KEYS; i++) {
		struct wrk_ratelimit_key *k = &rl->keys[i];

		if (k->window && k->key == key)
			return k;
		if ((!k->window || now - k->window >= rl->window_ns) &&
		    (!take || k->window < take->window))
			take = k;
	}
	if (!take)
		return &rl->others;
	rl->unreported += take->missed;
	*take = (struct wrk_ratelimit_key){ .key = key };
	return take;
}

int64_t wrk_ratelimit_take(struct wrk_ratelimit *rl, uint32_t key, uint64_t now)
{
	struct wrk_ratelimit_key *k = slot(rl, key, now);
	uint64_t missed;

	if (!k->window || now - k->window >= rl->window_ns) {
		k->window = now;
		k->n = 0;
	}
	if (k->n >= rl->burst) {
		/* Lines of keys without a slot are told of by whichever line goes next. */
		if (k == &rl->others)
			rl->unreported++;
		else
			k->missed++;
		return -1;
	}
	k->n++;
	missed = k->missed + rl->unreported;
	k->missed = 0;
	rl->unreported = 0;
	return (int64_t)missed;
}
