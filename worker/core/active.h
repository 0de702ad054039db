/* SPDX-License-Identifier: MIT */
/* worker/core/active.h: the clients whose rings the worker's loop looks at, and when one leaves. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"
#include "proto.h"
#include "ring.h"

/*
 * A worker serves thousands of clients, most of them idle at any moment. Its loop looks at
 * the rings of its active clients only, so that finding work costs in proportion to the
 * clients that have some, never to those connected. A client joins the set whenever
 * something passes between it and the worker (a socket message, a record on its ring, an
 * answer the worker sends it: it will likely answer back), and leaves it after
 * WRK_ACTIVE_IDLE_NS without any (WRK_ACTIVE_IDLE_URGENT_NS above the default priority).
 * While the loop spins, an active client's ring has its `polling` word up, so the client puts
 * records there without a kick; an idle client's word is down, so its first record after the
 * pause comes with a kick (ipc/ring.h), which makes it active again. Leaving follows the
 * ring's hand-off: the word goes down, then the ring is looked at once more, and a record
 * published meanwhile keeps the client in the set.
 *
 * The words are each client's own, in the area only it and the worker share: a client can
 * write its word, and at worst misses its own kicks. Nothing of one client's can make the
 * worker overlook another's work.
 *
 * The set is a list per priority level (a client's is its highest queue's): the loop looks at
 * the levels highest first, and takes a bounded number of records from each client of a level
 * in turn; between two clients of a level it looks at the clients of the levels above again
 * (worker/core/server.c), so that a busy round does not hold up latency-critical work.
 */

/* How long an active client may be quiet before it leaves the set: about the cost of a kick
 * (a system call at each end) in looks at an empty ring, with the time a client woken by an
 * answer takes to be scheduled and send its next request on many busy CPUs. */
#define WRK_ACTIVE_IDLE_NS (200 * NSEC_PER_USEC)
/* The same for a client of a level above the default one: a kick costs such a client most of
 * its round trip on a busy machine, and such clients are few. */
#define WRK_ACTIVE_IDLE_URGENT_NS (5 * NSEC_PER_MSEC)

/* A priority's level: 0 for IPC_PRIO_MIN, up to IPC_PRIO_LEVELS - 1. */
static inline unsigned wrk_prio_level(int prio)
{
	return (unsigned)(prio - IPC_PRIO_MIN);
}

/* A client's place in the set (embedded in struct wrk_client). */
struct wrk_act {
	struct wrk_act *prev, *next;
	struct ipc_ring *up; /* the client's ring to the worker; NULL: it has none */
	uint64_t seen_ns;    /* when something last passed, as far as the set knows */
	bool on;             /* in the set */
	bool polling;        /* up's polling word is up */
	bool touched;        /* something passed since the last look (its time not read yet) */
	unsigned level;      /* its client's priority level (0: the lowest), its list's */
};

struct wrk_active {
	struct wrk_act *head[IPC_PRIO_LEVELS], *tail[IPC_PRIO_LEVELS]; /* a list per level */
	unsigned n;
	unsigned nlevel[IPC_PRIO_LEVELS];
	bool polling; /* the loop spins: the set's words are to be up */
};

/* Put a in the set (at the end of its level's list), its word as the set's; seen at `now`.
 * Nothing if it is in. */
void wrk_active_join(struct wrk_active *s, struct wrk_act *a, uint64_t now);

/* a's client has another priority level: in the set, a moves to the end of that level's list. */
void wrk_active_set_level(struct wrk_active *s, struct wrk_act *a, unsigned level);

/* Whether a client of a level above `level` is in the set. */
static inline bool wrk_active_above(const struct wrk_active *s, unsigned level)
{
	for (unsigned l = level + 1; l < IPC_PRIO_LEVELS; l++)
		if (s->nlevel[l])
			return true;
	return false;
}

/* Take a out of the set at once (its client goes), its word left as it is. */
void wrk_active_leave(struct wrk_active *s, struct wrk_act *a);

/* Something passed between a's client and the worker: a is active (joining at mono_ns()). */
static inline void wrk_active_touch(struct wrk_active *s, struct wrk_act *a)
{
	a->touched = true;
	if (!a->on)
		wrk_active_join(s, a, mono_ns());
}

/* Raise or lower a's word to what the set's is (s->polling). */
void wrk_active_sync(struct wrk_active *s, struct wrk_act *a);

/*
 * After the loop looked at a's ring at `now` (`found`: it took something): a stays while
 * something passed within WRK_ACTIVE_IDLE_NS (WRK_ACTIVE_IDLE_URGENT_NS above the default
 * priority); else its word goes down and the ring is looked at once more, and it leaves
 * unless a record waits. Returns whether a is still in the set.
 */
bool wrk_active_settle(struct wrk_active *s, struct wrk_act *a, bool found, uint64_t now);

/*
 * The loop is about to sleep, and found nothing on a's ring: a's word goes down (every client
 * kicks a sleeping worker), the ring is looked at once more, and a leaves unless a record
 * waits. So a worker asleep has no active clients. Returns whether a is still in the set.
 */
bool wrk_active_rest(struct wrk_active *s, struct wrk_act *a, uint64_t now);
