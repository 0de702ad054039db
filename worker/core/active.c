/* SPDX-License-Identifier: MIT */
/* worker/core/active.c: the active clients: joining, leaving after a pause, their ring words. */
#include "active.h"

static void set_word(struct wrk_act *a, bool on)
{
	if (a->up && a->polling != on)
		ipc_ring_set_polling(a->up, on);
	a->polling = on;
}

void wrk_active_join(struct wrk_active *s, struct wrk_act *a, uint64_t now)
{
	if (a->on)
		return;
	a->on = true;
	a->seen_ns = now;
	a->next = NULL;
	a->prev = s->tail;
	if (s->tail)
		s->tail->next = a;
	else
		s->head = a;
	s->tail = a;
	s->n++;
	set_word(a, s->polling);
}

void wrk_active_leave(struct wrk_active *s, struct wrk_act *a)
{
	if (!a->on)
		return;
	if (a->prev)
		a->prev->next = a->next;
	else
		s->head = a->next;
	if (a->next)
		a->next->prev = a->prev;
	else
		s->tail = a->prev;
	a->prev = a->next = NULL;
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
	if (now - a->seen_ns < WRK_ACTIVE_IDLE_NS)
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
