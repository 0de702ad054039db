/* SPDX-License-Identifier: MIT */
/* supervisor/stop.c: stopping gpuxd: let requests in flight finish, then stop the workers. */
#include <unistd.h>

#include "ipc/macro.h"
#include "sup.h"

#define DRAIN_TICK_NS (20 * NSEC_PER_MSEC)

static void drain_tick(struct ipc_timer *t, void *userdata)
{
	struct sup *s = userdata;

	if (sup_workers_inflight(s) > 0 && mono_ns() < s->stop_deadline) {
		ipc_timer_arm(t, mono_ns() + DRAIN_TICK_NS);
		return;
	}
	for (unsigned i = 0; i < s->nworkers; i++)
		sup_worker_event(&s->workers[i], E_STOP);
	if (sup_workers_all_down(s))
		ipc_loop_exit(s->loop, SUP_EXIT_OK);
}

int sup_stop_setup(struct sup *s)
{
	return ipc_timer_new(s->loop, drain_tick, s, &s->stop_timer);
}

void sup_stop(struct sup *s)
{
	if (s->stopping)
		return;
	s->stopping = true;
	ipc_listener_free(s->listener);
	s->listener = NULL;
	(void)unlink(s->socket_path);
	s->stop_deadline = mono_ns() + s->opts.drain_ms * NSEC_PER_MSEC;
	drain_tick(s->stop_timer, s);
}
