/* SPDX-License-Identifier: MIT */
/* worker/cuda/cuda-slot.c: the CUDA back end's slots: their streams, groups in flight, waiters, faults. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "cuda-dev.h"
#include "macro.h"
#include "spin.h"

/*
 * What the loop thread enqueues on a slot's stream ends in groups (worker/cuda/cuda-launch.c): a
 * graph's requests, or one request on its own, each followed by one event. One waiter thread
 * per slot waits for the groups in order (spinning briefly, then napping) and reports their
 * requests' ends to the loop; a sticky error is blamed here on one group.
 */

/* Between two looks at an event while spinning. */
#define QUERY_GAP_NS 600u
/* A waiter sleeps through a long copy in naps this long at most until NAP_EARLY_NS before it
 * should end (its timer slack is set to 1 µs, so naps are about as long as asked). */
#define NAP_MAX_NS (200 * NSEC_PER_USEC)
#define NAP_EARLY_NS (30 * NSEC_PER_USEC)
/* A kernel still running after the spin is looked at after naps that double from NAP_FINE_NS
 * up to NAP_LONG_NS (1 ms where threads must not spin): a look every 100 µs is 1% of a CPU, and
 * finds the end sooner than a blocked cuEventSynchronize woke (0.2-0.4 ms late on an H200). */
#define NAP_FINE_NS (10 * NSEC_PER_USEC)
#define NAP_LONG_NS (100 * NSEC_PER_USEC)
#define NAP_LONG_NOSPIN_NS (1000 * NSEC_PER_USEC)
#define WAITER_TIMER_SLACK_NS 1000ul

/* d->culprit when several groups may have broken the device. */
#define CULPRIT_UNKNOWN UINT64_MAX

/* Whether any of a group's work was handed to the device (a request cancelled, or whose launch
 * was refused, ran nothing). Read where its launch is known to be over: under its slot's lock
 * once pushed, or by the thread that launched it. */
static bool group_ran(const struct cuda_group *g)
{
	for (unsigned i = 0; i < g->n; i++)
		if (g->reqs[i]->launched)
			return true;
	return false;
}

/* Whether a group holds requests of more than one client (a graph's may). */
static bool group_shared(const struct cuda_group *g)
{
	for (unsigned i = 1; i < g->n; i++)
		if (g->reqs[i]->client != g->reqs[0]->client)
			return true;
	return false;
}

/* Whether a group may have broken the device: it ran, and not every one of its requests was
 * seen through to its end by the device (the DONE its stream writes after the copies back). */
static bool group_suspect(const struct cuda_group *g)
{
	if (!group_ran(g))
		return false;
	for (unsigned i = 0; i < g->n; i++)
		if (!wrk_mark_done(g->reqs[i]))
			return true;
	return false;
}

/*
 * Which group a sticky error is blamed on, decided once: every stream sees the error at about
 * the same time, so the first to see it tells nothing. A slot's groups run in order, so what
 * broke the device is a group that ran: the suspects are each slot's oldest not ended (for a
 * waiter, the one it waited for is still its slot's first) and `mine`, those whose work was
 * launched and did not end on the device (a request's stream writes DONE after its copies
 * back, for a client that reads it: that one ran to its end). With one suspect of one client
 * the blame is exact, to the group. A group of several clients' requests (a graph) counts as
 * two suspects: which of its nodes faulted the device does not say. With several the device
 * does not say which (on an H200 under load a kernel that faulted at once was followed by
 * neighbours' launches before the error reached the host, and taking the one launched last
 * blamed an innocent in each of three faults): nobody is blamed (CULPRIT_UNKNOWN), the status
 * page says so, and their clients send them again, each to run alone (IPC_SUBMIT_ALONE,
 * worker/core/queue.c), where a fault has one suspect. None: `mine` when nothing ran (its
 * launch met the error), else not known either.
 */
static uint64_t culprit(struct cuda_dev *d, const struct cuda_group *mine, bool mine_ran)
{
	uint64_t turn = atomic_load(&d->launch_turn);
	uint64_t c;

	/*
	 * A group the loop thread is launching may have broken the device (a fault as its
	 * kernel starts, seen first by a waiter looking at an older group's end): once it is on
	 * its slot, it is a suspect too. Not when the loop thread asks about that group itself;
	 * and before the lock, which the loop thread may need before it gets there.
	 */
	if ((turn & 1) && atomic_load(&d->launching) != mine)
		while (atomic_load(&d->launch_turn) == turn)
			cpu_relax();
	(void)pthread_mutex_lock(&d->fault_lock);
	if (!d->culprit) {
		bool mine_in = mine_ran && group_suspect(mine);
		uint64_t ran = mine_in ? mine->seq : 0;
		unsigned suspects = mine_in ? 1u + group_shared(mine) : 0;

		for (unsigned i = 0; i < d->nslots; i++) {
			struct cuda_slot *s = &d->slots[i];
			const struct cuda_group *g;

			/* A group its waiter has just seen end is no culprit: wait for it to go. */
			while (atomic_load(&s->looking))
				cpu_relax();
			(void)pthread_mutex_lock(&s->lock);
			g = s->head;
			if (g && g != mine && group_suspect(g)) {
				suspects += 1u + group_shared(g);
				ran = MAX(ran, g->seq);
			}
			(void)pthread_mutex_unlock(&s->lock);
		}
		/* Several, or none where `mine` ran to its end: not known; so too a refused launch
		 * of several clients' requests that ran nothing. */
		if (suspects > 1 || (!suspects && mine_ran && group_ran(mine)) ||
		    (!suspects && group_shared(mine))) {
			d->culprit = CULPRIT_UNKNOWN;
			wrk_fault_unknown(d->w);
		} else {
			d->culprit = ran ? ran : mine->seq;
		}
	}
	c = d->culprit;
	(void)pthread_mutex_unlock(&d->fault_lock);
	return c;
}

/*
 * Request i of group g failed with e (what: where); `ran`: g's work had been launched (any
 * error its waiter sees; one the loop thread meets after g's launch). Returns whether the
 * context is gone.
 */
bool cuda_group_fail(struct cuda_dev *d, struct cuda_group *g, unsigned i, CUresult e,
		     const char *what, bool ran)
{
	struct wrk_req *r = g->reqs[i];
	bool sticky;
	gpux_status st = wrk_cu_err(e, &sticky);
	uint64_t c;

	free(r->error);
	if (sticky && (c = culprit(d, g, ran)) != g->seq) {
		r->status = GPUX_E_WORKER_LOST;
		r->error = wrk_strdup_printf("%s broke the device: %s",
					     c == CULPRIT_UNKNOWN ? "one of the requests running"
								  : "another request",
					     cu_err_name(&d->cu, e));
	} else if (g->n > 1) {
		/* Which node of a graph failed, the device does not say. */
		r->status = st;
		r->error = wrk_strdup_printf("kernel \"%s\": %s: %s (one of %u kernels%s launched "
					     "together)",
					     r->name, what, cu_err_name(&d->cu, e), g->n,
					     group_shared(g) ? "" : " of this process");
	} else {
		r->status = st;
		r->error = wrk_strdup_printf("kernel \"%s\": %s: %s", r->name, what,
					     cu_err_name(&d->cu, e));
	}
	return sticky;
}

/* ---- groups ---- */

struct cuda_group *cuda_group_get(struct cuda_dev *d, CUresult *err)
{
	struct cuda_group *g;
	CUresult r;

	/* Launched before the group to come: the waiter must have it first. */
	cuda_held_release(d);
	(void)pthread_mutex_lock(&d->free_lock);
	g = d->free_groups;
	if (g)
		d->free_groups = g->next;
	(void)pthread_mutex_unlock(&d->free_lock);
	if (g)
		return g;
	g = calloc(1, sizeof(*g));
	if (!g) {
		*err = CUDA_ERROR_OUT_OF_MEMORY;
		return NULL;
	}
	/* Plain events: one made with CU_EVENT_BLOCKING_SYNC costs every launch that records it
	 * (measured on an H200: a request's launch 5.1 us against 3.8 us, the round trip 11.8
	 * against 10.7 us), and a waiter never synchronizes on them (wait_event()). */
	r = d->cu.cuEventCreate(&g->start, 0);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuEventCreate(&g->end, 0);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuEventCreate(&g->done, CU_EVENT_DISABLE_TIMING);
	if (r != CUDA_SUCCESS) {
		if (g->start)
			(void)d->cu.cuEventDestroy(g->start);
		if (g->end)
			(void)d->cu.cuEventDestroy(g->end);
		free(g);
		*err = r;
		return NULL;
	}
	return g;
}

void cuda_group_put(struct cuda_dev *d, struct cuda_group *g)
{
	g->n = 0;
	g->ntemp = 0;
	g->copy_ns = 0;
	(void)pthread_mutex_lock(&d->free_lock);
	g->next = d->free_groups;
	d->free_groups = g;
	(void)pthread_mutex_unlock(&d->free_lock);
}

static void group_free(struct cuda_dev *d, struct cuda_group *g)
{
	(void)d->cu.cuEventDestroy(g->start);
	(void)d->cu.cuEventDestroy(g->end);
	(void)d->cu.cuEventDestroy(g->done);
	free(g);
}

/*
 * A request without a group (none could be made): it ends with the error once what its slot
 * holds before it has ended (requests of a slot end in order), which is waited for here: this
 * is the rare way of an allocation that failed.
 */
void cuda_group_abandon(struct cuda_dev *d, struct cuda_slot *s, struct wrk_req *r, CUresult e,
			const char *what)
{
	bool sticky;

	free(r->error);
	r->status = wrk_cu_err(e, &sticky);
	r->error =
		wrk_strdup_printf("kernel \"%s\": %s: %s", r->name, what, cu_err_name(&d->cu, e));
	/* Its stream done, the slot's waiter hands over what it holds, then this one follows. */
	if (!sticky && d->cu.cuStreamSynchronize(s->stream) == CUDA_SUCCESS)
		while (atomic_load(&s->queued))
			(void)usleep(50);
	wrk_reqs_complete(&r, 1, sticky);
}

/* Hand a group's requests to the loop and let the group go. */
static void group_complete(struct cuda_dev *d, struct cuda_group *g, bool fatal)
{
	struct wrk_req *reqs[CUDA_GRAPH_MAX];
	unsigned n = g->n;

	memcpy(reqs, g->reqs, n * sizeof(*reqs));
	cuda_group_put(d, g);
	wrk_reqs_complete(reqs, n, fatal);
}

static bool group_result(struct cuda_dev *d, struct cuda_group *g, CUresult e);

/*
 * A group whose event could not be recorded (e): its requests end now. Unless e broke the
 * context, what went on the stream still runs: the stream is waited for, then what its waiter
 * holds before the group (a slot's requests end in order), and the requests end as they ran.
 */
void cuda_group_end_now(struct cuda_dev *d, struct cuda_group *g, CUresult e)
{
	struct cuda_slot *s = &d->slots[g->slot];
	bool sticky, fatal = false;

	(void)wrk_cu_err(e, &sticky);
	if (!sticky && (e = d->cu.cuStreamSynchronize(s->stream)) == CUDA_SUCCESS) {
		/* Before the wait for the slot's waiter, which may be waiting for this end. */
		cuda_launch_end(d);
		while (atomic_load(&s->queued))
			(void)usleep(50);
		group_complete(d, g, group_result(d, g, CUDA_SUCCESS));
		return;
	}
	for (unsigned i = 0; i < g->n; i++)
		if (g->reqs[i]->status == 0)
			fatal |= cuda_group_fail(d, g, i, e, "cuEventRecord", g->reqs[i]->launched);
		else
			fatal |= g->reqs[i]->sticky;
	cuda_launch_end(d);
	group_complete(d, g, fatal);
}

/* Hand a launched group to its slot's waiter. */
void cuda_group_push(struct cuda_slot *s, struct cuda_group *g)
{
	(void)pthread_mutex_lock(&s->lock);
	g->next = NULL;
	if (s->tail)
		s->tail->next = g;
	else
		s->head = g;
	s->tail = g;
	atomic_fetch_add(&s->queued, 1);
	(void)pthread_cond_signal(&s->cond);
	(void)pthread_mutex_unlock(&s->lock);
}

/*
 * A lone group: when nothing else of the device is in flight, the loop thread that launched
 * it looks at its end itself between its looks at the rings (cuda_poll()), and no waiter
 * hands it on. That saves a round trip the hand-off to the waiter and back to the loop (0.3
 * and 0.6 µs of 10.5 on an H200, docs/PERFORMANCE-LOG.md) and the pacing of the waiter's looks. The
 * group goes to its slot's waiter as soon as another group is to be launched, the loop is
 * about to sleep, a look says anything but "not ready" (a fault is the waiter's to blame), or
 * it has been held for a spin. Nowhere threads must not spin, and not a group with copies
 * longer than a spin: the waiter naps through those. Only the loop thread adds to the slots'
 * counts, so a group that will be held when launched still will be once it is.
 */
bool cuda_group_will_hold(const struct cuda_dev *d, const struct cuda_group *g)
{
	bool idle = d->w->spin_ns > 0 && g->copy_ns <= d->w->spin_ns;

	for (unsigned i = 0; i < d->nslots && idle; i++)
		idle = atomic_load(&d->slots[i].queued) == 0;
	return idle;
}

void cuda_launch_begin(struct cuda_dev *d, const struct cuda_group *g)
{
	atomic_store(&d->launching, g);
	atomic_fetch_add(&d->launch_turn, 1);
}

void cuda_launch_end(struct cuda_dev *d)
{
	atomic_fetch_add(&d->launch_turn, 1);
	atomic_store(&d->launching, NULL);
}

void cuda_group_launched(struct cuda_dev *d, struct cuda_slot *s, struct cuda_group *g)
{
	if (!cuda_group_will_hold(d, g)) {
		cuda_group_push(s, g);
	} else {
		d->held = g;
		d->held_until = mono_ns() + d->w->spin_ns;
	}
	cuda_launch_end(d);
}

void cuda_held_release(struct cuda_dev *d)
{
	struct cuda_group *g = d->held;

	if (g) {
		d->held = NULL;
		cuda_group_push(&d->slots[g->slot], g);
	}
}

/* ---- waiting ---- */

/*
 * A waiter's look at one of its slot's events. From just before it until the group is off
 * the slot (slot_take()), a look that says it ended keeps the slot marked `looking`, which
 * culprit() waits out: else it could blame a group whose end was seen but that is still its
 * slot's first, and nobody would get the fault.
 */
static CUresult look(struct cuda_dev *d, const struct cuda_group *g, CUevent ev)
{
	struct cuda_slot *s = &d->slots[g->slot];
	CUresult r;

	atomic_store(&s->looking, true);
	r = d->cu.cuEventQuery(ev);
	if (r != CUDA_SUCCESS)
		atomic_store(&s->looking, false);
	return r;
}

/*
 * Wait for a group's event. A group with copies longer than a spin naps through most of them,
 * then looks closely from shortly before they should end (a nap may end late), for a spin and
 * an eighth of their time, as copies can be that much slower than COPY_BYTES_PER_NS; any
 * other looks briefly (the round trip of short kernels; its slot's spin, a latency-critical
 * one above priority 0); then it naps between looks. It never calls cuEventSynchronize: on an
 * event made without CU_EVENT_BLOCKING_SYNC that spins for as long as the kernel runs, and the
 * flag costs every launch. Looks are paced: each query takes a lock of the driver's that the
 * launching thread needs (measured on an H200: a thread querying without pause costs launches
 * 23% of their rate).
 */
static CUresult wait_event(struct cuda_dev *d, struct cuda_group *g)
{
	uint64_t spin = d->slots[g->slot].spin_ns, now = mono_ns(), until = now + spin;
	CUevent ev = g->fin;
	CUresult r;

	/* Naps are a kind of spinning: not where threads must not spin (GPUX_SPIN_US=0). */
	if (d->w->spin_ns > 0 && g->copy_ns > d->w->spin_ns) {
		uint64_t coarse = now + g->copy_ns - MIN(g->copy_ns, NAP_EARLY_NS);

		while ((r = look(d, g, ev)) == CUDA_ERROR_NOT_READY && now < coarse) {
			struct timespec ts = { .tv_sec = 0,
					       .tv_nsec = (long)MIN(coarse - now, NAP_MAX_NS) };

			(void)nanosleep(&ts, NULL);
			now = mono_ns();
		}
		if (r != CUDA_ERROR_NOT_READY)
			return r;
		wrk_req_soon(g->reqs[0]);
		until = now + spin + g->copy_ns / 8;
	}
	for (;;) {
		r = look(d, g, ev);
		if (r != CUDA_ERROR_NOT_READY)
			return r;
		for (uint64_t next = now + QUERY_GAP_NS; (now = mono_ns()) < next;)
			cpu_relax();
		if (now >= until)
			break;
	}
	atomic_fetch_add(&d->w->blocking_waits, 1);
	for (uint64_t nap = NAP_FINE_NS, most = d->w->spin_ns ? NAP_LONG_NS : NAP_LONG_NOSPIN_NS;;
	     nap = MIN(2 * nap, most)) {
		struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)nap };

		(void)nanosleep(&ts, NULL);
		r = look(d, g, ev);
		if (r != CUDA_ERROR_NOT_READY)
			return r;
	}
}

/* A group's requests' ends, the event having said e: their times, or why they failed.
 * Returns whether the device is broken. */
static bool group_result(struct cuda_dev *d, struct cuda_group *g, CUresult e)
{
	uint64_t now = mono_ns();
	bool fatal = false;
	float ms = 0;

	for (unsigned i = 0; i < g->n; i++) {
		struct wrk_req *r = g->reqs[i];

		r->t_end = now;
		if (e == CUDA_SUCCESS) {
			if (r->timed &&
			    d->cu.cuEventElapsedTime(&ms, g->start, g->end) == CUDA_SUCCESS)
				r->device_ns = (uint64_t)((double)ms * 1e6);
		} else {
			r->sticky |= cuda_group_fail(d, g, i, e, "running", true);
		}
		fatal |= r->sticky;
	}
	return fatal;
}

/* Take the slot's groups up to `last` off its list (the loop thread appends meanwhile). */
static void slot_take(struct cuda_slot *s, struct cuda_group *last)
{
	(void)pthread_mutex_lock(&s->lock);
	s->head = last->next;
	if (!s->head)
		s->tail = NULL;
	(void)pthread_mutex_unlock(&s->lock);
	atomic_store(&s->looking, false);
}

static void *waiter_main(void *arg)
{
	struct cuda_slot *s = arg;
	struct cuda_dev *d = s->d;
	sigset_t all;

	sigfillset(&all);
	(void)pthread_sigmask(SIG_BLOCK, &all, NULL);
	(void)prctl(PR_SET_TIMERSLACK, WAITER_TIMER_SLACK_NS);
	(void)d->cu.cuCtxSetCurrent(d->ctx);
	for (;;) {
		struct cuda_group *g, *last;
		CUresult e;

		(void)pthread_mutex_lock(&s->lock);
		if (!s->head && !s->stop) {
			(void)pthread_mutex_unlock(&s->lock);
			wrk_spin_for_work(s->spin_ns, &s->queued);
			(void)pthread_mutex_lock(&s->lock);
		}
		while (!s->head && !s->stop)
			(void)pthread_cond_wait(&s->cond, &s->lock);
		g = s->head;
		last = s->tail;
		(void)pthread_mutex_unlock(&s->lock);
		if (!g)
			return NULL;
		/* Under load, many wait in line: when the newest is done, all are (one stream), and
		 * one query of the driver's stands for them all. */
		if (last != g && look(d, last, last->fin) == CUDA_SUCCESS) {
			e = CUDA_SUCCESS;
		} else {
			last = g;
			e = wait_event(d, g);
		}
		if (e != CUDA_SUCCESS) {
			/* Its requests learn why while it is still its slot's first: that is where
			 * the culprit of a fault is looked for. */
			bool fatal = group_result(d, g, e);

			slot_take(s, g);
			group_complete(d, g, fatal);
			atomic_fetch_sub(&s->queued, 1);
			continue;
		}
		slot_take(s, last);
		for (;;) {
			struct cuda_group *next = g->next;
			bool end = g == last;

			group_complete(d, g, group_result(d, g, CUDA_SUCCESS));
			atomic_fetch_sub(&s->queued, 1);
			if (end)
				break;
			g = next;
		}
	}
}

bool cuda_poll(void *dv, bool sleeping)
{
	struct cuda_dev *d = dv;
	struct cuda_group *g = d->held;
	CUresult e;

	if (!g)
		return false;
	if (sleeping)
		e = CUDA_ERROR_NOT_READY;
	else if (g->word)
		/* Written once the stream is past the group's event: a fault never writes it, and
		 * the group goes to its waiter, which blames it, a spin later. */
		e = atomic_load_explicit(&d->ends[g->slot * CUDA_END_WORD_STRIDE],
					 memory_order_acquire) >= g->seq
			    ? CUDA_SUCCESS
			    : CUDA_ERROR_NOT_READY;
	else
		e = d->cu.cuEventQuery(g->fin);
	if (e == CUDA_SUCCESS) {
		d->held = NULL;
		d->w->stats.loop_waits += g->n;
		group_complete(d, g, group_result(d, g, e));
		return true;
	}
	if (e == CUDA_ERROR_NOT_READY && !sleeping && mono_ns() < d->held_until)
		return true;
	cuda_held_release(d);
	return false;
}

/* ---- priorities and compute shares ---- */

void cuda_sched_probe(struct cuda_dev *d)
{
	struct cu_driver *cu = &d->cu;
	char note[128] = "";
	const CUdevSmResource *sm = &d->sm_res.sm;
	CUresult r;

	if (cu->cuCtxGetStreamPriorityRange(&d->prio_least, &d->prio_greatest) != CUDA_SUCCESS)
		d->prio_least = d->prio_greatest = 0;
	if (!cu->cuDeviceGetDevResource || !cu->cuDevSmResourceSplitByCount ||
	    !cu->cuDevResourceGenerateDesc || !cu->cuGreenCtxCreate || !cu->cuGreenCtxDestroy ||
	    !cu->cuGreenCtxStreamCreate) {
		(void)snprintf(note, sizeof(note),
			       "the CUDA driver (%d.%d) has no green contexts "
			       "(12.5 or later)",
			       cu->version / 1000, cu->version % 1000 / 10);
	} else if ((r = cu->cuDeviceGetDevResource(d->dev, &d->sm_res, CU_DEV_RESOURCE_TYPE_SM)) !=
		   CUDA_SUCCESS) {
		(void)snprintf(note, sizeof(note), "the device's SMs: %s", cu_err_name(cu, r));
	} else if (sm->smCount < 2 * MAX(sm->minSmPartitionSize, 1u)) {
		(void)snprintf(note, sizeof(note), "%u SMs are too few to split", sm->smCount);
	} else {
		d->green_ok = true;
	}
	wrk_sched_device(d->w, d->prio_least, d->prio_greatest, d->green_ok ? sm->smCount : 0,
			 MAX(sm->smCoscheduledAlignment, 1u), MAX(sm->minSmPartitionSize, 1u),
			 note);
}

/*
 * The CUDA stream priority of a queue's: 0 and below the device's least (its default), the
 * highest its greatest, those between spread between them, rounded towards the greatest (a
 * CUDA priority is the higher the lower its number): on an H100 (0 to -5) 1 is -3, 2 is -5;
 * with two (0, -1) both are -1.
 */
static int stream_prio(const struct cuda_dev *d, int prio)
{
	if (prio <= 0)
		return d->prio_least;
	return d->prio_least +
	       ((d->prio_greatest - d->prio_least) * prio - (IPC_PRIO_MAX - 1)) / IPC_PRIO_MAX;
}

/*
 * A green context of `want` of the device's SMs (the worker rounded it to the unit), made
 * once. The device's SMs are split in groups of that many; slots of one size take the groups
 * in turn, so that two such queues run on different SMs while there are groups left, then
 * share them. NULL with *err CUDA_SUCCESS: the share is the whole device.
 */
static struct cuda_green *green_get(struct cuda_dev *d, unsigned want, CUresult *err)
{
	struct cu_driver *cu = &d->cu;
	unsigned total = d->sm_res.sm.smCount;
	unsigned max = total / MAX(d->sm_res.sm.minSmPartitionSize, 1u), n = max, same = 0;
	_cleanup_(freep) CUdevResource *groups = NULL;
	struct cuda_green *g;
	CUdevResourceDesc desc;

	*err = CUDA_SUCCESS;
	if (want >= total)
		return NULL;
	for (unsigned i = 0; i < d->ngreens; i++)
		same += d->greens[i].want == want;
	groups = calloc(max, sizeof(*groups));
	if (!groups) {
		*err = CUDA_ERROR_OUT_OF_MEMORY;
		return NULL;
	}
	*err = cu->cuDevSmResourceSplitByCount(groups, &n, &d->sm_res, NULL, 0, want);
	if (*err == CUDA_SUCCESS && n == 0)
		*err = CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	if (*err != CUDA_SUCCESS)
		return NULL;
	/* Every group has its green context already, or no room for another: reuse one. */
	if (same >= n || d->ngreens == WRK_CLASS_SLOTS_MAX) {
		unsigned k = same ? d->green_reuse++ % same : 0;

		for (unsigned i = 0; i < d->ngreens; i++)
			if (d->greens[i].want == want && k-- == 0)
				return &d->greens[i];
		*err = CUDA_ERROR_OUT_OF_MEMORY;
		return NULL;
	}
	g = &d->greens[d->ngreens];
	*err = cu->cuDevResourceGenerateDesc(&desc, &groups[same], 1);
	if (*err == CUDA_SUCCESS)
		*err = cu->cuGreenCtxCreate(&g->g, desc, d->dev, CU_GREEN_CTX_DEFAULT_STREAM);
	if (*err != CUDA_SUCCESS)
		return NULL;
	g->want = want;
	g->group = same;
	g->sms = groups[same].sm.smCount;
	d->ngreens++;
	d->w->stats.sched.share_ctxs = d->ngreens;
	return g;
}

/* ---- slots ---- */

gpux_status cuda_slot_open(void *dv, unsigned slot, struct wrk_stream *st, char **ret_msg)
{
	struct cuda_dev *d = dv;
	struct cuda_slot *s = &d->slots[slot];
	struct cuda_green *g = NULL;
	int prio = stream_prio(d, st->prio), got;
	CUresult r = CUDA_SUCCESS;
	int e;

	if (st->share && d->green_ok)
		g = green_get(d, st->share, &r);
	if (r != CUDA_SUCCESS) {
		bool sticky;
		gpux_status rc = wrk_cu_err(r, &sticky);

		if (sticky)
			wrk_device_broken(d->w);
		*ret_msg = cuda_msg(d, "a green context", r);
		return rc == GPUX_E_NOMEM ? rc : GPUX_E_DEVICE;
	}
	if (g)
		r = d->cu.cuGreenCtxStreamCreate(&s->stream, g->g, CU_STREAM_NON_BLOCKING, prio);
	else if (st->prio != 0)
		r = d->cu.cuStreamCreateWithPriority(&s->stream, CU_STREAM_NON_BLOCKING, prio);
	else
		r = d->cu.cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
	if (r != CUDA_SUCCESS) {
		s->stream = NULL;
		*ret_msg = cuda_msg(d, "a stream", r);
		return GPUX_E_DEVICE;
	}
	if (d->cu.cuStreamGetPriority(s->stream, &got) == CUDA_SUCCESS)
		st->dev_prio = got;
	st->sms = g ? g->sms : 0;
	s->green = g != NULL;
	s->spin_ns = st->prio > 0 ? d->w->spin_urgent_ns : d->w->spin_ns;
	s->d = d;
	(void)pthread_mutex_init(&s->lock, NULL);
	(void)pthread_cond_init(&s->cond, NULL);
	e = pthread_create(&s->waiter, NULL, waiter_main, s);
	if (e != 0) {
		(void)pthread_mutex_destroy(&s->lock);
		(void)pthread_cond_destroy(&s->cond);
		(void)d->cu.cuStreamDestroy(s->stream);
		memset(s, 0, sizeof(*s));
		*ret_msg = wrk_strdup_printf("pthread_create: %s", strerror(e));
		return GPUX_E_NOMEM;
	}
	s->started = true;
	d->nslots = MAX(d->nslots, slot + 1);
	return 0;
}

void cuda_slots_close(struct cuda_dev *d)
{
	cuda_held_release(d);
	for (unsigned i = 0; i < d->nslots; i++) {
		struct cuda_slot *s = &d->slots[i];

		if (s->started) {
			(void)pthread_mutex_lock(&s->lock);
			s->stop = true;
			(void)pthread_cond_signal(&s->cond);
			(void)pthread_mutex_unlock(&s->lock);
			(void)pthread_join(s->waiter, NULL);
		}
		cuda_slot_graphs_free(d, s);
		if (s->scratch)
			(void)d->cu.cuMemFreeAsync(s->scratch, s->stream);
		if (s->stream) {
			/* Its waiter saw every group's event; the end word written after one (to
			 * pages about to be unregistered) may not be yet. */
			(void)d->cu.cuStreamSynchronize(s->stream);
			(void)d->cu.cuStreamDestroy(s->stream);
		}
	}
	while (d->free_groups) {
		struct cuda_group *g = d->free_groups;

		d->free_groups = g->next;
		group_free(d, g);
	}
	/* Their streams are gone: a green context does not destroy them. */
	for (unsigned i = 0; i < d->ngreens; i++)
		(void)d->cu.cuGreenCtxDestroy(d->greens[i].g);
	d->ngreens = 0;
}
