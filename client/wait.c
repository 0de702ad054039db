/* SPDX-License-Identifier: MIT */
/* client/wait.c: waiting for the workers: spinning on the rings, then sleeping in epoll. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <sys/epoll.h>

#include "cli.h"
#include "macro.h"
#include "spin.h"

static void wake_reader(gpux_ctx *ctx)
{
	uint64_t one = 1;

	if (ctx->reader && ctx->wake_fd >= 0)
		(void)write(ctx->wake_fd, &one, sizeof(one));
}

/* The rings a reader spins on, each held (refs) while the lock is not. */
struct spin_set {
	unsigned n;
	struct cli_rings *rings[IPC_DEVICES_MAX];
	uint32_t seen[IPC_DEVICES_MAX]; /* down's tail when the spin began */
};

static bool spin_set_changed(const struct spin_set *s)
{
	for (unsigned i = 0; i < s->n; i++)
		if (atomic_load(&s->rings[i]->down.ctl->tail) != s->seen[i])
			return true;
	return false;
}

/* How long a spinning reader goes between two looks at the fds and two offers of the CPU (a
 * system call each): many spinning clients must not starve the worker they wait for. Not a
 * count of spins: 16 spins are about a microsecond, and news on a ring that came during the
 * calls waited for them. */
#define SPIN_FD_GAP_NS (10 * NSEC_PER_USEC)

/*
 * Whether this reader may spin: only while every client process that may be waiting, and the
 * workers' loop and waiter threads, could have a CPU each. Beyond that, spinners would take
 * the CPUs that the workers need (measured: 64 spinning clients on 16 CPUs cut the rate
 * 4-fold). Clients that may be waiting are those with requests in flight, which each worker
 * counts, summed over the devices, this one counted too, and never more than gpuxd's count
 * of processes (a process that uses several devices is counted by each): idle clients,
 * however many, do not stop the spinning. (Not the workers' active clients: with hundreds of
 * clients and long queues, most are quiet while their requests wait, and all of them spun
 * for their answers: on two H200s, 512 processes made 268 k/s where 386 k/s had been
 * made.) Both counts sit at the end of each status page, written only as they change (the
 * workers' other counters are rewritten at every completion, so a read there costs a cache
 * miss on both sides, at every wait).
 */
static bool spin_fits(const gpux_ctx *ctx)
{
	uint64_t threads = 0, processes = 0, busy = 1;

	for (uint32_t i = 0; i < ctx->ndevices; i++) {
		const struct cli_dev *d = &ctx->devs[i];

		if (!d->status)
			continue;
		threads += 2;
		processes =
			MAX(processes, __atomic_load_n(&d->status->processes, __ATOMIC_RELAXED));
		busy += __atomic_load_n(&d->status->busy, __ATOMIC_RELAXED);
	}
	return ipc_spin_fits((processes ? MIN(processes, busy) : busy) + threads);
}

/*
 * Wait for something to take in, for up to ms (-1: no limit). For the first ipc_spin_ns() of
 * it (ipc_spin_urgent_ns() in a process with latency-critical queues; not past the deadline)
 * look without sleeping: at the rings, which then tell the workers that no kick is needed,
 * and now and then at the fds; then sleep in epoll. Called and returns with the lock held,
 * which it drops meanwhile. Returns epoll's count (0 when only a ring has news, *ret_ring
 * then set), or -1 with errno.
 */
static int wait_events(gpux_ctx *ctx, struct epoll_event *ev, int nev, int ms, uint64_t deadline,
		       const struct gpux_req *mine, bool *ret_ring)
{
	/* A process with latency-critical queues spins for their answers whatever the load,
	 * and for longer. */
	uint64_t spin = ctx->urgent ? ipc_spin_urgent_ns() : spin_fits(ctx) ? ipc_spin_ns() : 0;
	uint64_t until = spin ? mono_ns() + spin : 0;
	struct spin_set s = { 0 };
	bool taken = false;
	int n = 0;

	if (deadline && deadline < until)
		until = deadline;
	for (uint32_t i = 0; i < ctx->ndevices && until > 0; i++) {
		struct cli_rings *r = ctx->devs[i].rings;

		if (!r)
			continue;
		r->refs++;
		ipc_ring_set_polling(&r->down, true);
		s.seen[s.n] = atomic_load(&r->down.ctl->tail);
		s.rings[s.n++] = r;
	}
	/*
	 * What a worker published since the caller last looked and before it saw the polling
	 * word came without a kick, and is older than `seen`: take it now. Whatever is left
	 * waits for a socket message (its stamp), which will wake us.
	 */
	ctx->taking_for = mine;
	if (s.n > 0 && cli_rings_take_all(ctx)) {
		until = 0;
		taken = true;
	}
	ctx->taking_for = NULL;
	(void)pthread_mutex_unlock(&ctx->lock);
	for (uint64_t now = mono_ns(), fd_next = now; now < until; now = mono_ns()) {
		if (spin_set_changed(&s))
			break;
		if (now >= fd_next) {
			n = epoll_wait(ctx->epfd, ev, nev, 0);
			if (n != 0)
				break;
			/* A latency-critical waiter keeps its CPU: among many runnable processes a
			 * yield can cost it a scheduler's slice. */
			if (!ctx->urgent)
				(void)sched_yield();
			fd_next = mono_ns() + SPIN_FD_GAP_NS;
		}
		cpu_relax();
	}
	(void)pthread_mutex_lock(&ctx->lock);
	/* From now on the workers kick; what came before that without one is seen here. */
	for (unsigned i = 0; i < s.n; i++)
		ipc_ring_set_polling(&s.rings[i]->down, false);
	*ret_ring = taken || spin_set_changed(&s);
	for (unsigned i = 0; i < s.n; i++)
		cli_rings_unref(s.rings[i]);
	if (n != 0 || *ret_ring)
		return n;
	(void)pthread_mutex_unlock(&ctx->lock);
	n = epoll_wait(ctx->epfd, ev, nev, ms);
	(void)pthread_mutex_lock(&ctx->lock);
	return n;
}

/* How often a waiting thread looks after requests lost with their workers (client/replay.c),
 * as CLI_CHANNEL_RETRY_NS. */
#define REPLAY_LOOK_MS 10

/*
 * Wait, lock held, until pred() holds or the deadline (mono_ns; 0: none) passes. One thread
 * at a time waits in epoll and takes in what arrives for all; the others sleep on the
 * condition variable and look again when it is done.
 */
int cli_wait_until(gpux_ctx *ctx, bool (*pred)(gpux_ctx *ctx, void *arg), void *arg,
		   const struct gpux_req *mine, uint64_t deadline)
{
	while (!pred(ctx, arg)) {
		uint64_t now = mono_ns();

		if (deadline && now >= deadline)
			return -ETIMEDOUT;
		if (!ctx->reader) {
			struct epoll_event ev[8];
			bool ring = false;
			int ms = -1, n;

			if (deadline)
				ms = (int)MIN((deadline - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC,
					      (uint64_t)INT_MAX);
			/* Requests lost with a worker wait for the next: a wish for a channel that
			 * gpuxd's full socket refused is sent again, and one that waited too long
			 * fails, without news from anybody (client/replay.c). */
			if (ctx->pending) {
				cli_replay(ctx);
				if (pred(ctx, arg))
					break;
				if (ctx->pending)
					ms = ms < 0 ? REPLAY_LOOK_MS : MIN(ms, REPLAY_LOOK_MS);
			}
			/* What reached a ring while nobody looked (no kick: older records were
			 * there) is taken before waiting. */
			ctx->taking_for = mine;
			ring = cli_rings_take_all(ctx);
			ctx->taking_for = NULL;
			if (ring) {
				(void)pthread_cond_broadcast(&ctx->cond);
				continue;
			}
			ctx->reader = true;
			n = wait_events(ctx, ev, (int)ARRAY_SIZE(ev), ms, deadline, mine, &ring);
			ctx->reader = false;
			/* epoll_wait()'s own errors (EBADF, EINVAL) mean nothing to a caller. */
			if (n < 0 && errno != EINTR) {
				(void)pthread_cond_broadcast(&ctx->cond);
				return -EIO;
			}
			ctx->taking_for = mine;
			/* A full batch may have left some out: then look at everything. */
			if (n == (int)ARRAY_SIZE(ev)) {
				uint64_t v;

				(void)read(ctx->wake_fd, &v, sizeof(v));
				cli_pump(ctx);
			} else if (n > 0)
				cli_pump_events(ctx, ev, n);
			if (ring)
				(void)cli_rings_take_all(ctx);
			ctx->taking_for = NULL;
			(void)pthread_cond_broadcast(&ctx->cond);
		} else {
			struct timespec ts;

			if (deadline) {
				ts.tv_sec = (time_t)(deadline / NSEC_PER_SEC);
				ts.tv_nsec = (long)(deadline % NSEC_PER_SEC);
				(void)pthread_cond_timedwait(&ctx->cond, &ctx->lock, &ts);
			} else {
				(void)pthread_cond_wait(&ctx->cond, &ctx->lock);
			}
		}
	}
	return 0;
}

/*
 * An event loop polls gpux_fd(), calls gpux_process() and then looks at its requests: it
 * learns of a completion only if gpux_fd() polls readable after it arrived. What any other
 * call takes in (gpux_test() or gpux_wait() of another request, a submit waiting for room,
 * a thread of the program's own) no longer makes the channels readable, so news_fd is
 * written instead, once until gpux_process() reads it. Internal requests are the library's
 * own business, and nobody calls gpux_fd() in a program without an event loop.
 */
void cli_announce(gpux_ctx *ctx, const struct gpux_req *r)
{
	uint64_t one = 1;

	if (r->internal || ctx->news || ctx->news_fd < 0 || ctx->processing || r == ctx->taking_for)
		return;
	if (write(ctx->news_fd, &one, sizeof(one)) == (ssize_t)sizeof(one))
		ctx->news = true;
}

void cli_news_read(gpux_ctx *ctx)
{
	uint64_t v;

	if (ctx->news) {
		(void)read(ctx->news_fd, &v, sizeof(v));
		ctx->news = false;
	}
}

/* Used by requests freed or finished by another thread to wake the waiting one. */
void cli_wake(gpux_ctx *ctx)
{
	wake_reader(ctx);
	(void)pthread_cond_broadcast(&ctx->cond);
}
