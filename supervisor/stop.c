/* SPDX-License-Identifier: MIT */
/* supervisor/stop.c: stopping gpuxd: drain (requests finish, new ones are refused), then stop the workers. */

#include "macro.h"
#include "sup.h"

#define DRAIN_TICK_NS (20 * NSEC_PER_MSEC)

static void drain_tick(struct ipc_timer *t, void *userdata)
{
	struct sup *s = userdata;
	uint64_t inflight = sup_workers_inflight(s);

	if ((inflight > 0 || !sup_workers_drained(s)) && mono_ns() < s->stop_deadline) {
		if (inflight != s->drain_reported) {
			sup_log("draining: %llu request%s in flight", (unsigned long long)inflight,
				inflight == 1 ? "" : "s");
			(void)sup_notify("STATUS=draining: %llu request%s in flight",
					 (unsigned long long)inflight, inflight == 1 ? "" : "s");
			s->drain_reported = inflight;
		}
		ipc_timer_arm(t, mono_ns() + DRAIN_TICK_NS);
		return;
	}
	if (inflight > 0) {
		(void)sup_notify("STATUS=stopping: %llu request%s cut short",
				 (unsigned long long)inflight, inflight == 1 ? "" : "s");
		sup_logp(LOG_WARNING,
			 "drain time (%llu ms) is over with %llu request%s in flight: stopping "
			 "anyway",
			 (unsigned long long)s->opts.drain_ms, (unsigned long long)inflight,
			 inflight == 1 ? "" : "s");
	}
	sup_workers_stop(s);
	if (sup_workers_all_down(s))
		ipc_loop_exit(s->loop, SUP_EXIT_OK);
}

int sup_stop_setup(struct sup *s)
{
	return ipc_timer_new(s->loop, drain_tick, s, &s->stop_timer);
}

/*
 * Stop: new clients are refused (GPUX_E_STOPPING) while admin queries are still answered;
 * workers finish what they hold and refuse new work, up to --drain-ms; then they are stopped.
 * The socket goes when gpuxd does.
 */
void sup_stop(struct sup *s)
{
	if (s->stopping)
		return;
	s->stopping = true;
	sup_spares_drop(s);
	s->drain_reported = UINT64_MAX;
	(void)sup_notify("STOPPING=1\nSTATUS=draining");
	sup_workers_drain(s);
	s->stop_deadline = mono_ns() + s->opts.drain_ms * NSEC_PER_MSEC;
	/* The workers take the drain in their own time: the first look is one tick away. */
	ipc_timer_arm(s->stop_timer, mono_ns() + DRAIN_TICK_NS);
}
