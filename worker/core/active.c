/* SPDX-License-Identifier: MIT */
/* worker/core/active.c: the active clients: joining, leaving after a pause, their ring words. */
#include <assert.h>

#include "active.h"

static void set_word(struct wrk_act *a, bool on)
{
	if (a->up && a->polling != on)
		ipc_ring_set_polling(a->up, on);
	a->polling = on;
}

static void list_add(struct wrk_active *s, struct wrk_act *a)
{
	unsigned l = a->level;

	a->next = NULL;
	a->prev = s->tail[l];
	if (s->tail[l])
		s->tail[l]->next = a;
	else
		s->head[l] = a;
	s->tail[l] = a;
	s->nlevel[l]++;
}

static void list_remove(struct wrk_active *s, struct wrk_act *a)
{
	unsigned l = a->level;

	if (a->prev)
		a->prev->next = a->next;
	else
		s->head[l] = a->next;
	if (a->next)
		a->next->prev = a->prev;
	else
		s->tail[l] = a->prev;
	a->prev = a->next = NULL;
	s->nlevel[l]--;
}

void wrk_active_join(struct wrk_active *s, struct wrk_act *a, uint64_t now)
{
	if (a->on)
		return;
	a->on = true;
	a->seen_ns = now;
	list_add(s, a);
	s->n++;
	set_word(a, s->polling);
}

void wrk_active_set_level(struct wrk_active *s, struct wrk_act *a, unsigned level)
{
	assert(level < IPC_PRIO_LEVELS);
	if (a->level == level)
		return;
	if (!a->on) {
		a->level = level;
		return;
	}
	list_remove(s, a);
	a->level = level;
	list_add(s, a);
}

void wrk_active_leave(struct wrk_active *s, struct wrk_act *a)
{
	if (!a->on)
		return;
	list_remove(s, a);
	a->on = false;
	s->n--;
}

void wrk_active_sync(struct wrk_active *s, struct wrk_act *a)
{
	if (a->polling != s->polling)
		set_word(a, s->polling);
}

bool wrk_active_settle(struct wrk_active *s, struct wrk_act *a, bool found, uint64_t now)
{
	if (found || a->touched) {
		a->touched = false;
		a->seen_ns = now;
		return true;
	}
	if (now - a->seen_ns <
	    (a->level > wrk_prio_level(0) ? WRK_ACTIVE_IDLE_URGENT_NS : WRK_ACTIVE_IDLE_NS))
		return true;
	return wrk_active_rest(s, a, now);
}

bool wrk_active_rest(struct wrk_active *s, struct wrk_act *a, uint64_t now)
{
	/* From now on the client kicks; what it published before it could see that is here. */
	set_word(a, false);
	if (a->up && ipc_ring_pending(a->up)) {
		a->seen_ns = now;
		return true;
	}
	a->touched = false;
	wrk_active_leave(s, a);
	return false;
}
