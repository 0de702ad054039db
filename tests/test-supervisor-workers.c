/* SPDX-License-Identifier: MIT */
/* tests/test-supervisor-workers.c: a worker's life in gpuxd, event by event, on a fake worker. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "helpers.h"
#include "macro.h"
#include "sup.h"

#define WAIT_NS (5 * NSEC_PER_SEC) /* for a death to be reaped; a broken test fails after it */

/*
 * The worker gpuxd spawns here is this program again (see main): it says READY on its control
 * socket, as a worker does, and waits for a signal. $GPUX_TEST_WORKER, when it is spawned,
 * makes it "silent" (no READY), "ignore-term" (only SIGKILL ends it), "exit-on-drain"
 * (it exits when gpuxd sends IPC_DRAIN) or "fault-slowly" (FAKE_EXIT_MS).
 */
#define FAKE_WORKER "/proc/self/exe"
#define FAKE_ENV "GPUX_TEST_WORKER"
#define FAKE_DRAINED 3 /* "exit-on-drain": its exit status once told to drain */
/* "fault-slowly": on SIGUSR1 its page says a kernel faulted, it closes its control socket, and
 * exits (status 3) this long after, as a worker whose context the driver tears down. */
#define FAKE_EXIT_MS 1000

/* clang-format off */
static const char *const state_names[W_STATE_N] = {
	[W_DOWN] = "down",         [W_STARTING] = "starting", [W_READY] = "ready",
	[W_BACKOFF] = "restarting", [W_FAILED] = "failed",     [W_STOPPING] = "stopping",
};
/* clang-format on */

/* ---- fixture: a gpuxd with one device and no clients, and the fds it had before ---- */

struct fixture {
	struct sup s;
	struct sup_worker *w;
	int fds_before;
};

static void on_timer(struct ipc_timer *t, void *userdata)
{
	sup_worker_event(userdata, E_TIMER);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->fds_before = test_fd_count();
	assert_int_equal(ipc_loop_new(IPC_LOOP_AUTO, &f->s.loop), 0);
	f->s.opts.worker_path = FAKE_WORKER;
	f->s.opts.backend = "host";
	f->s.listen_fd = f->s.lock_fd = f->s.signal_fd = -1;
	f->s.nworkers = 1;
	f->w = &f->s.workers[0];
	*f->w = (struct sup_worker){ .s = &f->s,
				     .pidfd = -1,
				     .status_fd = -1,
				     .status_ro_fd = -1,
				     .clients_fd = -1,
				     .log_fd = -1,
				     .exiting_pidfd = -1 };
	(void)snprintf(f->w->backend, sizeof(f->w->backend), "host");
	/* What sup_workers_start() makes, without starting the worker. */
	assert_int_equal(ipc_timer_new(f->s.loop, on_timer, f->w, &f->w->timer), 0);
	assert_int_equal(unsetenv(FAKE_ENV), 0);
	*state = f;
	return 0;
}

/* Kills and reaps whatever worker is left, and checks that nothing else is. */
static int teardown(void **state)
{
	struct fixture *f = *state;

	sup_workers_free(&f->s);
	ipc_loop_free(f->s.loop);
	assert_no_fd_leak(f->fds_before);
	assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
	free(f);
	return 0;
}

#define FIXTURE_TEST(t) cmocka_unit_test_setup_teardown(t, setup, teardown)

static uint64_t timer_when(const struct sup_worker *w)
{
	return ipc_timer_when(w->timer);
}

/* The worker's timer fires between `before + delay` and `after + delay`. */
static void assert_timer_in(const struct sup_worker *w, uint64_t before, uint64_t after,
			    uint64_t delay)
{
	assert_in_range(timer_when(w), before + delay, after + delay);
}

/* Run the loop until the worker's process has been reaped (its death is an E_DIED). */
static void wait_reaped(struct fixture *f)
{
	uint64_t until = mono_ns() + WAIT_NS;

	while (f->w->pid > 0 && mono_ns() < until)
		assert_true(ipc_loop_iterate(f->s.loop, 10 * (int64_t)NSEC_PER_MSEC) >= 0);
	assert_int_equal(f->w->pid, 0);
}

/* Run the loop until the worker's READY has come in. */
static void wait_ready(struct fixture *f)
{
	uint64_t until = mono_ns() + WAIT_NS;

	while (f->w->state == W_STARTING && mono_ns() < until)
		assert_true(ipc_loop_iterate(f->s.loop, 10 * (int64_t)NSEC_PER_MSEC) >= 0);
	assert_int_equal(f->w->state, W_READY);
}

/*
 * Run the loop until a death that is no strike has been seen and the worker started again,
 * with no pause between the two.
 */
static void wait_restarted(struct fixture *f)
{
	uint64_t until = mono_ns() + WAIT_NS, died = f->w->died_ns;
	uint32_t restarts = f->w->restarts;

	while (f->w->restarts == restarts && mono_ns() < until)
		assert_true(ipc_loop_iterate(f->s.loop, 10 * (int64_t)NSEC_PER_MSEC) >= 0);
	assert_int_equal(f->w->restarts, restarts + 1);
	assert_int_not_equal(f->w->died_ns, died);
	assert_int_equal(f->w->state, W_STARTING);
	assert_true(f->w->spawned_ns - f->w->died_ns < SUP_BACKOFF_MIN_NS);
	assert_int_equal(sup_worker_recent_deaths(f->w), 0);
}

/* Kill the worker's process and wait for gpuxd to see the death. */
static void kill_worker(struct fixture *f)
{
	assert_true(f->w->pid > 0);
	assert_int_equal(kill(f->w->pid, SIGKILL), 0);
	wait_reaped(f);
}

static void start_ready(struct fixture *f)
{
	sup_worker_event(f->w, E_START);
	assert_int_equal(f->w->state, W_STARTING);
	wait_ready(f);
}

/* ---- the table ---- */

/*
 * What each event does in each state, as ARCHITECTURE.md says; -1: nothing at all (the state
 * and the timer stay as they were).
 */
/* clang-format off */
static const int expected[W_STATE_N][E_EVENT_N] = {
	/*               E_START     E_READY  E_DIED     E_TIMER     E_STOP */
	[W_DOWN] =     { W_STARTING, -1,      -1,        -1,         -1 },
	[W_STARTING] = { -1,         W_READY, W_BACKOFF, W_STARTING, W_STOPPING },
	[W_READY] =    { -1,         -1,      W_BACKOFF, W_READY,    W_STOPPING },
	[W_BACKOFF] =  { -1,         -1,      -1,        W_STARTING, W_DOWN },
	[W_FAILED] =   { -1,         -1,      -1,        W_STARTING, W_DOWN },
	[W_STOPPING] = { -1,         -1,      W_DOWN,    W_STOPPING, -1 },
};
/* clang-format on */

static void test_workers_every_state_and_event(void **state)
{
	static const char *const event_names[E_EVENT_N] = { "start", "ready", "died", "timer",
							    "stop" };
	struct fixture *f = *state;
	struct sup_worker *w = f->w;

	for (unsigned st = 0; st < W_STATE_N; st++) {
		for (unsigned ev = 0; ev < E_EVENT_N; ev++) {
			uint64_t armed = mono_ns() + 3600 * NSEC_PER_SEC;
			unsigned want = expected[st][ev] < 0 ? st : (unsigned)expected[st][ev];

			/* A worker with no process: only the spawns make one. */
			w->state = st;
			w->ndeaths = 0;
			ipc_timer_arm(w->timer, armed);
			sup_worker_event(w, ev);
			if (w->state != want)
				fail_msg("%s + %s: %s, not %s", state_names[st], event_names[ev],
					 state_names[w->state], state_names[want]);
			if (expected[st][ev] < 0)
				assert_int_equal(timer_when(w), armed);
			if (w->pid > 0)
				kill_worker(f);
		}
	}
}

static void test_workers_state_names(void **state)
{
	for (unsigned st = 0; st < W_STATE_N; st++)
		assert_string_equal(sup_state_name(st), state_names[st]);
	assert_string_equal(sup_state_name(W_STATE_N), "?");
}

static void test_workers_public_state(void **state)
{
	static const struct {
		enum sup_state st;
		uint32_t generation;
		uint32_t want;
	} cases[] = {
		/* clang-format off */
		{ W_DOWN, 0, GPUX_DEVICE_RESTARTING },
		{ W_STARTING, 0, GPUX_DEVICE_STARTING },
		{ W_STARTING, 1, GPUX_DEVICE_RESTARTING },
		{ W_READY, 1, GPUX_DEVICE_READY },
		{ W_BACKOFF, 1, GPUX_DEVICE_RESTARTING },
		{ W_FAILED, 1, GPUX_DEVICE_FAILED },
		{ W_STOPPING, 1, GPUX_DEVICE_RESTARTING },
		/* clang-format on */
	};

	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		struct sup_worker w = { .state = cases[i].st, .generation = cases[i].generation };

		assert_int_equal(sup_public_state(&w), cases[i].want);
	}
}

/* ---- the named transitions, on a real process ---- */

static void test_workers_start_then_ready(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;
	uint64_t before = mono_ns(), after;
	int seals;

	sup_worker_event(w, E_START);
	after = mono_ns();
	assert_int_equal(w->state, W_STARTING);
	assert_true(w->pid > 0);
	assert_true(w->pidfd >= 0 && w->status_fd >= 0 && w->status_ro_fd >= 0);
	assert_int_equal(w->restarts, 0);
	assert_int_equal(sup_public_state(w), GPUX_DEVICE_STARTING);
	/* It has a minute to say READY. */
	assert_timer_in(w, before, after, SUP_START_TIMEOUT_NS);

	/* The worker's READY carries its device's description. */
	wait_ready(f);
	assert_int_equal(w->generation, 1);
	assert_int_equal(timer_when(w), 0);
	assert_string_equal(w->info.name, "fake");
	assert_int_equal(w->info.index, 0);
	assert_int_equal(sup_public_state(w), GPUX_DEVICE_READY);
	/* Sealed before any client gets the read-only fd. */
	seals = fcntl(w->status_fd, F_GET_SEALS);
	assert_true(seals >= 0 && (seals & F_SEAL_FUTURE_WRITE));
	assert_int_equal(w->status->gone, 0);
}

/* Every worker's status page says how many client processes gpuxd serves, from its ready on
 * (a worker clears its page as it starts). */
static void test_workers_status_page_counts_processes(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;

	assert_int_equal(ipc_map_put(&f->s.per_pid, 4242, (void *)1), 0);
	sup_worker_event(w, E_START);
	wait_ready(f);
	assert_int_equal(__atomic_load_n(&w->status->processes, __ATOMIC_RELAXED), 1);
	assert_int_equal(ipc_map_put(&f->s.per_pid, 4343, (void *)2), 0);
	sup_workers_tell_processes(&f->s);
	assert_int_equal(__atomic_load_n(&w->status->processes, __ATOMIC_RELAXED), 2);
	ipc_map_done(&f->s.per_pid);
	sup_workers_tell_processes(&f->s);
	assert_int_equal(__atomic_load_n(&w->status->processes, __ATOMIC_RELAXED), 0);
}

static void test_workers_no_ready_in_time_is_killed(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;

	assert_int_equal(setenv(FAKE_ENV, "silent", 1), 0);
	sup_worker_event(w, E_START);
	/* The minute is over. */
	sup_worker_event(w, E_TIMER);
	assert_int_equal(w->state, W_STARTING);
	wait_reaped(f);
	assert_true(WIFSIGNALED(w->last_exit) && WTERMSIG(w->last_exit) == SIGKILL);
	assert_int_equal(w->state, W_BACKOFF);
	assert_int_equal(sup_worker_recent_deaths(w), 1);
}

/* Each death within the minute doubles the pause before the restart, from 100 ms. */
static void test_workers_deaths_back_off(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;

	start_ready(f);
	for (unsigned death = 1; death < SUP_DEATHS_MAX; death++) {
		uint64_t before = mono_ns(), after;

		kill_worker(f);
		after = mono_ns();
		assert_int_equal(w->state, W_BACKOFF);
		assert_int_equal(sup_public_state(w), GPUX_DEVICE_RESTARTING);
		/* Clients look at the page before they use a channel. */
		assert_int_equal(w->status->gone, 1);
		assert_int_equal(sup_worker_recent_deaths(w), death);
		assert_timer_in(w, before, after, SUP_BACKOFF_MIN_NS << (death - 1));

		sup_worker_event(w, E_TIMER);
		assert_int_equal(w->state, W_STARTING);
		assert_int_equal(w->restarts, death);
		assert_int_equal(sup_public_state(w), GPUX_DEVICE_RESTARTING);
		wait_ready(f);
		assert_int_equal(w->generation, death + 1);
	}
}

static void test_workers_five_deaths_in_a_minute_fail(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;
	uint64_t before, after;

	sup_worker_event(w, E_START);
	for (unsigned death = 1; death < SUP_DEATHS_MAX; death++) {
		kill_worker(f);
		assert_int_equal(w->state, W_BACKOFF);
		sup_worker_event(w, E_TIMER);
	}
	before = mono_ns();
	kill_worker(f);
	after = mono_ns();
	assert_int_equal(w->state, W_FAILED);
	assert_int_equal(sup_public_state(w), GPUX_DEVICE_FAILED);
	/* Tried once more after five minutes, as a restart. */
	assert_timer_in(w, before, after, SUP_FAILED_RETRY_NS);
	sup_worker_event(w, E_TIMER);
	assert_int_equal(w->state, W_STARTING);
	assert_int_equal(w->restarts, SUP_DEATHS_MAX);
	assert_true(w->pid > 0);
}

static void test_workers_old_deaths_do_not_count(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;
	uint64_t before, after;

	start_ready(f);
	/* Four deaths a minute and a second ago: out of the window. */
	for (unsigned i = 0; i < SUP_DEATHS_MAX - 1; i++)
		w->deaths[i] = mono_ns() - SUP_DEATH_WINDOW_NS - NSEC_PER_SEC;
	w->ndeaths = SUP_DEATHS_MAX - 1;
	before = mono_ns();
	kill_worker(f);
	after = mono_ns();
	assert_int_equal(w->state, W_BACKOFF);
	assert_int_equal(sup_worker_recent_deaths(w), 1);
	assert_timer_in(w, before, after, SUP_BACKOFF_MIN_NS);
}

/* A worker killed for a client's deadline did nothing wrong: its death is no strike. */
static void test_workers_deadline_kill_is_no_strike(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;

	start_ready(f);
	/* What the deadline check does: tell the client, mark, and fire the timer at once. */
	w->killed_deadline = true;
	sup_worker_event(w, E_TIMER);
	assert_int_equal(w->state, W_READY);
	wait_restarted(f);
	assert_true(WIFSIGNALED(w->last_exit) && WTERMSIG(w->last_exit) == SIGKILL);
	/* The next start cleared the mark: a later death counts again. */
	assert_false(w->killed_deadline);
	wait_ready(f);
	kill_worker(f);
	assert_int_equal(sup_worker_recent_deaths(w), 1);
}

/*
 * A worker that died of a kernel fault, blamed on one client's request or on none of several
 * (its page says which), is started again at once, and the death is no strike; one that died
 * of anything else waits as any death does.
 */
static void test_workers_kernel_fault_restarts_at_once(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;
	uint64_t before, after;

	start_ready(f);
	assert_true(ipc_status_fault_set(w->status, 7, 1, IPC_FAULT_KERNEL));
	assert_int_equal(kill(w->pid, SIGKILL), 0);
	wait_restarted(f);
	wait_ready(f);
	assert_true(ipc_status_fault_set(w->status, 0, 0, IPC_FAULT_UNKNOWN));
	assert_int_equal(kill(w->pid, SIGKILL), 0);
	wait_restarted(f);
	wait_ready(f);
	before = mono_ns();
	kill_worker(f);
	after = mono_ns();
	assert_int_equal(w->state, W_BACKOFF);
	assert_int_equal(sup_worker_recent_deaths(w), 1);
	assert_timer_in(w, before, after, SUP_BACKOFF_MIN_NS);
}

/*
 * A worker whose page says why it dies, and which closed its control socket, is gone at once,
 * its process (slow to exit, as the driver tears its context down) reaped after: the next
 * worker does not wait for it.
 */
static void test_workers_exiting_worker_is_followed_at_once(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;
	uint64_t until = mono_ns() + WAIT_NS;
	pid_t old;

	assert_int_equal(setenv(FAKE_ENV, "fault-slowly", 1), 0);
	start_ready(f);
	old = w->pid;
	assert_int_equal(kill(old, SIGUSR1), 0);
	wait_restarted(f);
	assert_int_equal(w->exiting_pid, old);
	assert_int_equal(kill(old, 0), 0);
	assert_true(w->pid > 0 && w->pid != old);
	while (w->exiting_pid && mono_ns() < until)
		assert_true(ipc_loop_iterate(f->s.loop, 10 * (int64_t)NSEC_PER_MSEC) >= 0);
	assert_int_equal(w->exiting_pid, 0);
	assert_true(WIFEXITED(w->last_exit) && WEXITSTATUS(w->last_exit) == 3);
	assert_int_equal(w->exiting_pidfd, -1);
	wait_ready(f);
}

static void test_workers_stop_terms(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;
	uint64_t before, after;

	start_ready(f);
	before = mono_ns();
	sup_worker_event(w, E_STOP);
	after = mono_ns();
	assert_int_equal(w->state, W_STOPPING);
	assert_timer_in(w, before, after, SUP_STOP_GRACE_NS);
	wait_reaped(f);
	assert_true(WIFSIGNALED(w->last_exit) && WTERMSIG(w->last_exit) == SIGTERM);
	assert_int_equal(w->state, W_DOWN);
	assert_int_equal(timer_when(w), 0);
	assert_int_equal(sup_worker_recent_deaths(w), 0);
}

/* A worker that ignores SIGTERM gets SIGKILL when the grace period is over. */
static void test_workers_stop_kills_after_grace(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;

	assert_int_equal(setenv(FAKE_ENV, "ignore-term", 1), 0);
	start_ready(f);
	sup_worker_event(w, E_STOP);
	assert_int_equal(w->state, W_STOPPING);
	/* The grace period, as the timer would end it. */
	sup_worker_event(w, E_TIMER);
	assert_int_equal(w->state, W_STOPPING);
	wait_reaped(f);
	assert_true(WIFSIGNALED(w->last_exit) && WTERMSIG(w->last_exit) == SIGKILL);
	assert_int_equal(w->state, W_DOWN);
}

/* A worker that cannot be spawned died at birth. */
static void test_workers_spawn_failure_is_a_death(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;

	f->s.opts.worker_path = "/nonexistent/gpux-worker";
	sup_worker_event(w, E_START);
	assert_int_equal(w->state, W_BACKOFF);
	assert_int_equal(w->pid, 0);
	assert_int_equal(sup_worker_recent_deaths(w), 1);
}

/* What the pipe holds unread. */
static int pipe_unread(int fd)
{
	int n = -1;

	assert_int_equal(ioctl(fd, FIONREAD, &n), 0);
	return n;
}

/*
 * A worker's stderr is read a round at a time, so that one writing without end does not hold
 * up gpuxd's loop, and into lines of SUP_LOG_LINE_MAX at most, with no terminal escapes.
 */
static void test_workers_log_pipe_is_read_in_bounded_rounds(void **state)
{
	static char text[60000], logged[128 * 1024];
	struct fixture *f = *state;
	struct sup_worker *w = f->w;
	char path[] = "/tmp/gpux-test-log-XXXXXX";
	size_t off = 0;
	unsigned lines = 0, rounds = 0, fillers = 0;
	int p[2], fd;
	ssize_t n;

	fd = mkstemp(path);
	assert_true(fd >= 0);
	(void)close(fd);
	assert_int_equal(sup_log_open(SUP_LOG_FILE, path, LOG_DEBUG), 0);
	off += (size_t)snprintf(text, sizeof(text), "gpux-worker[0]: first\n\x1b[2Jsecond\n");
	memset(text + off, 'x', 5000);
	off += 5000;
	text[off++] = '\n';
	while (off + 100 <= sizeof(text)) {
		memset(text + off, 'f', 99);
		text[off + 99] = '\n';
		off += 100;
		fillers++;
	}
	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	assert_int_equal(write(p[1], text, off), (ssize_t)off);
	w->log_fd = p[0];

	sup_worker_log_read(w);
	assert_int_equal(pipe_unread(p[0]), (int)(off - SUP_LOG_ROUND_BYTES));
	while (pipe_unread(p[0]) > 0 && rounds++ < 10)
		sup_worker_log_read(w);
	assert_int_equal(pipe_unread(p[0]), 0);
	assert_int_equal(w->log_fd, p[0]);
	/* Its end closes it. */
	(void)close(p[1]);
	sup_worker_log_read(w);
	assert_int_equal(w->log_fd, -1);
	sup_log_close();

	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	n = read(fd, logged, sizeof(logged) - 1);
	(void)close(fd);
	(void)unlink(path);
	assert_true(n > 0);
	logged[n] = '\0';
	assert_null(strchr(logged, '\x1b'));
	for (char *line = logged, *end; (end = strchr(line, '\n')); line = end + 1) {
		static const char *const want[] = { "first", "?[2Jsecond" };
		const char *said = strstr(line, "device 0: worker 0: ");

		*end = '\0';
		assert_non_null(said);
		said += strlen("device 0: worker 0: ");
		if (lines < 2) {
			assert_string_equal(said, want[lines]);
		} else if (lines == 2) {
			assert_int_equal(strspn(said, "x"), SUP_LOG_LINE_MAX);
			assert_string_equal(said + SUP_LOG_LINE_MAX, " [cut]");
		} else {
			assert_int_equal(strspn(said, "f"), 99);
			assert_int_equal(strlen(said), 99);
		}
		lines++;
	}
	assert_int_equal(lines, 3 + fillers);
}

/* A worker that comes back while gpuxd drains is told to drain, as READY comes in. */
static void test_workers_back_while_stopping_drains(void **state)
{
	struct fixture *f = *state;
	struct sup_worker *w = f->w;

	assert_int_equal(setenv(FAKE_ENV, "exit-on-drain", 1), 0);
	start_ready(f);
	kill_worker(f);
	assert_int_equal(w->state, W_BACKOFF);
	/* SIGTERM came while it was down: the drain reached no worker. */
	f->s.stopping = true;
	sup_workers_drain(&f->s);
	sup_worker_event(w, E_TIMER);
	assert_int_equal(w->state, W_STARTING);
	wait_ready(f);
	wait_reaped(f);
	assert_true(WIFEXITED(w->last_exit));
	assert_int_equal(WEXITSTATUS(w->last_exit), FAKE_DRAINED);
}

/* As a worker: READY on the control socket, then wait for a signal to end it. */
static int fake_worker(int argc, char **argv)
{
	static uint8_t buf[IPC_MSG_MAX];
	const char *how = getenv(FAKE_ENV);
	struct ipc_ready ready = { .info = { .backend = GPUX_BACKEND_HOST, .name = "fake" } };
	struct ipc_status_page *page = NULL;
	int n;

	/* Its status page cleared as it starts, as gpux-worker's is. */
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--status-fd") == 0) {
			void *p = mmap(NULL, IPC_STATUS_PAGE_SIZE, PROT_READ | PROT_WRITE,
				       MAP_SHARED, atoi(argv[i + 1]), 0);

			if (p == MAP_FAILED)
				return 1;
			memset(p, 0, sizeof(struct ipc_status_page));
			page = p;
		}
	if (how && strcmp(how, "ignore-term") == 0)
		(void)signal(SIGTERM, SIG_IGN);
	if (how && strcmp(how, "fault-slowly") == 0) {
		sigset_t usr1;

		sigemptyset(&usr1);
		sigaddset(&usr1, SIGUSR1);
		(void)sigprocmask(SIG_BLOCK, &usr1, NULL);
	}
	if (!how || strcmp(how, "silent") != 0) {
		n = ipc_encode(buf, sizeof(buf), IPC_READY, 0, 0, &ready, sizeof(ready), NULL, 0);
		if (n < 0 || ipc_channel_send(3, buf, (size_t)n, NULL, 0, 0) < 0)
			return 1;
	}
	if (how && strcmp(how, "fault-slowly") == 0) {
		sigset_t usr1;
		int sig;

		sigemptyset(&usr1);
		sigaddset(&usr1, SIGUSR1);
		(void)sigwait(&usr1, &sig);
		(void)ipc_status_fault_set(page, 9, 1, IPC_FAULT_KERNEL);
		(void)close(3);
		(void)usleep(FAKE_EXIT_MS * 1000);
		return 3;
	}
	while (how && strcmp(how, "exit-on-drain") == 0) {
		struct ipc_msg msg;

		if (ipc_channel_recv_msg(3, buf, sizeof(buf), &msg, 0) != 1)
			return 1;
		if (msg.hdr.type == IPC_DRAIN)
			return FAKE_DRAINED;
		ipc_msg_close_fds(&msg);
	}
	for (;;)
		(void)pause();
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		FIXTURE_TEST(test_workers_every_state_and_event),
		cmocka_unit_test(test_workers_state_names),
		cmocka_unit_test(test_workers_public_state),
		FIXTURE_TEST(test_workers_start_then_ready),
		FIXTURE_TEST(test_workers_status_page_counts_processes),
		FIXTURE_TEST(test_workers_no_ready_in_time_is_killed),
		FIXTURE_TEST(test_workers_deaths_back_off),
		FIXTURE_TEST(test_workers_five_deaths_in_a_minute_fail),
		FIXTURE_TEST(test_workers_old_deaths_do_not_count),
		FIXTURE_TEST(test_workers_deadline_kill_is_no_strike),
		FIXTURE_TEST(test_workers_kernel_fault_restarts_at_once),
		FIXTURE_TEST(test_workers_exiting_worker_is_followed_at_once),
		FIXTURE_TEST(test_workers_stop_terms),
		FIXTURE_TEST(test_workers_stop_kills_after_grace),
		FIXTURE_TEST(test_workers_spawn_failure_is_a_death),
		FIXTURE_TEST(test_workers_back_while_stopping_drains),
		FIXTURE_TEST(test_workers_log_pipe_is_read_in_bounded_rounds),
	};

	/* Spawned as gpux-worker (--device N ... --control-fd 3 ...). */
	if (argc > 1 && strcmp(argv[1], "--device") == 0)
		return fake_worker(argc, argv);
	return cmocka_run_group_tests_name("supervisor-workers", tests, NULL, NULL);
}
