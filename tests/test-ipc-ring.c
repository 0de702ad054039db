/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-ring.c: the shared rings: order, wrap, stamps, kicks, every hand-off, a hostile peer. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "macro.h"
#include "ring.h"
#include "segment.h"
#include "spin.h"

struct fixture {
	int fd;
	struct ipc_rings *area;
	struct ipc_ring prod, cons; /* the two ends of IPC_RING_UP */
	int fds_before;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->fds_before = test_fd_count();
	assert_int_equal(ipc_rings_create(&f->fd, &f->area), 0);
	ipc_ring_init(&f->prod, f->area, IPC_RING_UP);
	ipc_ring_init(&f->cons, f->area, IPC_RING_UP);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(munmap(f->area, IPC_RINGS_BYTES), 0);
	(void)close(f->fd);
	assert_no_fd_leak(f->fds_before);
	free(f);
	return 0;
}

/* A message of len bytes whose content says which it is. */
static void fill(uint8_t *buf, uint32_t len, uint32_t which)
{
	test_random_fill(buf, len, which);
}

static void test_ring_area_is_sealed_and_zeroed(void **state)
{
	struct fixture *f = *state;
	int seals = fcntl(f->fd, F_GET_SEALS);

	assert_true(seals & F_SEAL_SHRINK);
	assert_true(seals & F_SEAL_GROW);
	/* What a client checks before mapping it: a memfd, sealed, as large as it says. */
	assert_int_equal(ipc_segment_check(f->fd, IPC_RINGS_BYTES, false), 0);
	assert_int_equal(ftruncate(f->fd, 4096), -1);
	assert_int_equal(errno, EPERM);
	assert_true(test_fd_cloexec(f->fd));
	for (unsigned i = 0; i < 2; i++) {
		assert_int_equal(atomic_load(&f->area->ctl[i].tail), 0);
		assert_int_equal(atomic_load(&f->area->ctl[i].head), 0);
		assert_int_equal(atomic_load(&f->area->ctl[i].polling), 0);
	}
	assert_false(ipc_ring_pending(&f->cons));
}

static void test_ring_carries_messages_in_order_across_wraps(void **state)
{
	struct fixture *f = *state;
	static uint8_t in[IPC_RING_REC_MAX], out[IPC_RING_REC_MAX], want[IPC_RING_REC_MAX];
	const uint32_t max = IPC_RING_REC_MAX - sizeof(struct ipc_ring_rec);
	uint32_t put = 0, got = 0, seed = 7;
	uint64_t bytes = 0;

	/* Many times round the ring, with sizes that make pads at its end: up to 2 in flight. */
	while (bytes < 8ull * IPC_RING_SIZE) {
		uint32_t len = 1 + (seed = seed * 1103515245u + 12345u) % max;

		fill(in, len, put);
		assert_true(ipc_ring_put(&f->prod, in, len, 0) >= 0);
		put++;
		bytes += len;
		while (put - got > (seed % 2)) {
			int n = ipc_ring_get(&f->cons, out, sizeof(out), 0);

			assert_true(n >= 0);
			fill(want, (uint32_t)n, got);
			assert_memory_equal(out, want, (size_t)n);
			got++;
		}
	}
	while (got < put) {
		int n = ipc_ring_get(&f->cons, out, sizeof(out), 0);

		assert_true(n >= 0);
		fill(want, (uint32_t)n, got);
		assert_memory_equal(out, want, (size_t)n);
		got++;
	}
	assert_false(ipc_ring_pending(&f->cons));
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), 0);
	assert_int_equal(atomic_load(&f->area->ctl[IPC_RING_UP].head), f->prod.pos);
	/* The other ring was never touched. */
	assert_int_equal(atomic_load(&f->area->ctl[IPC_RING_DOWN].tail), 0);
}

static void test_ring_refuses_what_does_not_fit(void **state)
{
	struct fixture *f = *state;
	static uint8_t buf[IPC_RING_REC_MAX];
	const uint32_t max = IPC_RING_REC_MAX - sizeof(struct ipc_ring_rec);
	unsigned n = 0;

	assert_int_equal(ipc_ring_put(&f->prod, buf, max + 1, 0), -EMSGSIZE);
	assert_int_equal(ipc_ring_put(&f->prod, buf, UINT32_MAX, 0), -EMSGSIZE);
	while (ipc_ring_put(&f->prod, buf, max, 0) >= 0)
		n++;
	assert_int_equal(n, IPC_RING_SIZE / IPC_RING_REC_MAX);
	assert_int_equal(ipc_ring_put(&f->prod, buf, 1, 0), -ENOSPC);
	assert_int_equal(ipc_ring_put(&f->prod, buf, 0, 0), -EINVAL);
	/* Taking one makes room for one. */
	assert_int_equal(ipc_ring_get(&f->cons, buf, sizeof(buf), 0), (int)max);
	assert_true(ipc_ring_put(&f->prod, buf, max, 0) >= 0);
	assert_int_equal(ipc_ring_put(&f->prod, buf, 8, 0), -ENOSPC);
}

static void test_ring_stamps_hold_records_back(void **state)
{
	struct fixture *f = *state;
	uint8_t a = 'a', b = 'b', out[8];

	assert_true(ipc_ring_put(&f->prod, &a, 1, 3) >= 0);
	assert_true(ipc_ring_put(&f->prod, &b, 1, 5) >= 0);
	/* Three socket messages taken: the first may go, the second waits for two more. */
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 2), 0);
	assert_true(ipc_ring_pending(&f->cons));
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 3), 1);
	assert_int_equal(out[0], 'a');
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 4), 0);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 5), 1);
	assert_int_equal(out[0], 'b');
	/* Stamps compare across the wrap of the counter. */
	assert_true(ipc_ring_put(&f->prod, &a, 1, 2) >= 0);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), UINT32_MAX - 5), 0);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 2), 1);
	assert_true(ipc_ring_put(&f->prod, &b, 1, UINT32_MAX) >= 0);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 1), 1);
}

static void test_ring_kicks_only_a_consumer_that_may_sleep(void **state)
{
	struct fixture *f = *state;
	uint8_t m[16] = { 0 }, out[16];

	/* Caught up and not spinning: kick. With an older record still there: the consumer will
	 * see this one when it takes that, no kick. */
	assert_int_equal(ipc_ring_put(&f->prod, m, sizeof(m), 0), 1);
	assert_int_equal(ipc_ring_put(&f->prod, m, sizeof(m), 0), 0);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), 16);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), 16);
	assert_int_equal(ipc_ring_put(&f->prod, m, sizeof(m), 0), 1);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), 16);
	/* Spinning: no kick. */
	ipc_ring_set_polling(&f->cons, true);
	assert_int_equal(ipc_ring_put(&f->prod, m, sizeof(m), 0), 0);
	ipc_ring_set_polling(&f->cons, false);
	assert_true(ipc_ring_pending(&f->cons));
}

/* The consumer's head is the peer's to write: the producer checks it against its own tail. */
static void test_ring_producer_refuses_impossible_head(void **state)
{
	struct fixture *f = *state;
	struct ipc_ring_ctl *ctl = &f->area->ctl[IPC_RING_UP];
	const uint32_t bad[] = { 8, 4, (uint32_t)-IPC_RING_SIZE - 8, 0x80000000u, 3 };
	uint8_t m[8] = { 0 };

	assert_true(ipc_ring_put(&f->prod, m, sizeof(m), 0) >= 0);
	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		/* Ahead of what was published, misaligned, or further behind than the ring. */
		atomic_store(&ctl->head, f->prod.pos + bad[i]);
		assert_int_equal(ipc_ring_put(&f->prod, m, sizeof(m), 0), -EPROTO);
	}
	atomic_store(&ctl->head, f->prod.pos);
	assert_true(ipc_ring_put(&f->prod, m, sizeof(m), 0) >= 0);
}

/* Write a record header at the consumer's position, as a hostile producer would. */
static void forge(struct fixture *f, uint32_t at, uint32_t len, uint32_t seq, uint32_t tail)
{
	struct ipc_ring_rec rec = { .len = len, .seq = seq };

	memcpy(f->area->data[IPC_RING_UP] + at % IPC_RING_SIZE, &rec, sizeof(rec));
	atomic_store(&f->area->ctl[IPC_RING_UP].tail, tail);
}

static void test_ring_consumer_refuses_forged_records(void **state)
{
	struct fixture *f = *state;
	static uint8_t out[IPC_RING_REC_MAX];
	uint32_t p = f->cons.pos;

	/* An empty record (a reader could not tell it from nothing). */
	forge(f, p, 0, 0, p + 8);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), -EBADMSG);
	/* A tail further than the ring, or misaligned. */
	forge(f, p, 8, 0, p + IPC_RING_SIZE + 8);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), -EBADMSG);
	forge(f, p, 8, 0, p + 12);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), -EBADMSG);
	/* A length beyond what was published, beyond the record limit, beyond the reader's
	 * buffer. */
	forge(f, p, 64, 0, p + 16);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), -EBADMSG);
	forge(f, p, IPC_RING_REC_MAX, 0, p + IPC_RING_SIZE);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), -EBADMSG);
	forge(f, p, 100, 0, p + 112);
	assert_int_equal(ipc_ring_get(&f->cons, out, 64, 0), -EBADMSG);
	/* A record that runs past the end of the ring instead of a pad. */
	f->cons.pos = p = IPC_RING_SIZE - 16;
	forge(f, p, 64, 0, p + 72);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), -EBADMSG);
	/* A pad beyond what was published. */
	forge(f, p, IPC_RING_PAD, 0, p + 8);
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), -EBADMSG);
	/* Nothing was taken by any of these. */
	assert_int_equal(f->cons.pos, p);
	/* A good pad then a good record still work from there. */
	forge(f, p, IPC_RING_PAD, 0, p + 16 + 16);
	{
		struct ipc_ring_rec rec = { .len = 5, .seq = 0 };
		memcpy(f->area->data[IPC_RING_UP], &rec, sizeof(rec));
		memcpy(f->area->data[IPC_RING_UP] + 8, "hello", 5);
	}
	assert_int_equal(ipc_ring_get(&f->cons, out, sizeof(out), 0), 5);
	assert_memory_equal(out, "hello", 5);
}

/* ---- every hand-off state, one step at a time ---- */

/*
 * A script of one producer's and one consumer's steps, run in order in one thread:
 *   p  put a record (a kick is owed when put says so)
 *   P  send a socket message, then put a record (stamped after it: it waits for that one)
 *   k  the consumer reads one socket message (a kick, or the one a stamp waits for)
 *   o  the consumer sets its polling word     f  it clears it
 *   t  the consumer takes everything it may   s  the consumer goes to sleep
 * and what each step must give: for p/P whether it asks for a kick, for t how many it took.
 * At every sleep, what is left on the ring must have a socket message owed: else a record
 * would wait for a wake-up that never comes. That is the whole contract of ipc/ring.h.
 */
struct handoff_step {
	char op;
	int want; /* p/P: 1 kick, 0 none; t: records taken */
};

struct handoff_case {
	const char *what;
	struct handoff_step steps[12];
};

static const struct handoff_case handoff_cases[] = {
	{ "caught up, not polling: a kick", { { 'p', 1 }, { 'k', 0 }, { 't', 1 }, { 's', 0 } } },
	{ "polling: no kick, the spin finds it",
	  { { 'o', 0 }, { 'p', 0 }, { 't', 1 }, { 'f', 0 }, { 't', 0 }, { 's', 0 } } },
	{ "published while the word goes down: the last look finds it",
	  { { 'o', 0 }, { 't', 0 }, { 'p', 0 }, { 'f', 0 }, { 't', 1 }, { 's', 0 } } },
	{ "published after the word went down: a kick",
	  { { 'o', 0 },
	    { 't', 0 },
	    { 'f', 0 },
	    { 't', 0 },
	    { 'p', 1 },
	    { 's', 0 },
	    { 'k', 0 },
	    { 't', 1 } } },
	{ "an older record left: no kick, taken with it",
	  { { 'p', 1 }, { 'p', 0 }, { 'p', 0 }, { 'k', 0 }, { 't', 3 }, { 's', 0 } } },
	{ "records left without a kick before a spin: its first look takes them",
	  { { 'p', 1 },
	    { 'k', 0 },
	    { 'p', 0 },
	    { 'o', 0 },
	    { 't', 2 },
	    { 'p', 0 },
	    { 'f', 0 },
	    { 't', 1 },
	    { 's', 0 } } },
	{ "stamped ahead: held back until its socket message, which wakes",
	  { { 'P', 1 }, { 't', 0 }, { 's', 0 }, { 'k', 0 }, { 't', 1 }, { 's', 0 } } },
	{ "stamped ahead while polling: no kick, its socket message wakes",
	  { { 'o', 0 },
	    { 'P', 0 },
	    { 't', 0 },
	    { 'f', 0 },
	    { 't', 0 },
	    { 's', 0 },
	    { 'k', 0 },
	    { 't', 1 } } },
};

static void run_handoff(struct fixture *f, const struct handoff_case *c)
{
	uint8_t msg[40] = { 0 }, out[64];
	uint32_t sent = 0,
		 read = 0; /* socket messages: sent by the producer, read by the consumer */
	unsigned owed = 0; /* of them not read yet */

	for (unsigned i = 0; i < ARRAY_SIZE(c->steps) && c->steps[i].op; i++) {
		const struct handoff_step *st = &c->steps[i];
		int r, n = 0;

		switch (st->op) {
		case 'p':
		case 'P':
			/* P: a socket message (one with fds, say) went just before the record. */
			if (st->op == 'P') {
				sent++;
				owed++;
			}
			r = ipc_ring_put(&f->prod, msg, sizeof(msg), sent);
			if (r < 0 || r != st->want)
				fail_msg("%s: step %u: put gave %d, want %d", c->what, i, r,
					 st->want);
			if (r == 1) {
				sent++;
				owed++;
			}
			break;
		case 'k':
			assert_true(owed > 0);
			owed--;
			read++;
			break;
		case 'o':
		case 'f':
			ipc_ring_set_polling(&f->cons, st->op == 'o');
			break;
		case 't':
			while ((r = ipc_ring_get(&f->cons, out, sizeof(out), read)) > 0)
				n++;
			assert_int_equal(r, 0);
			if (n != st->want)
				fail_msg("%s: step %u: took %d, want %d", c->what, i, n, st->want);
			break;
		case 's':
			if (ipc_ring_pending(&f->cons) && owed == 0)
				fail_msg("%s: step %u: asleep with a record and no wake-up owed",
					 c->what, i);
			break;
		}
	}
}

static void test_ring_every_handoff_state(void **state)
{
	for (unsigned k = 0; k < ARRAY_SIZE(handoff_cases); k++) {
		struct fixture *f = *state;

		/* Each case from a fresh ring, at a place that makes it wrap half-way too. */
		for (unsigned wrap = 0; wrap < 2; wrap++) {
			uint8_t m[IPC_RING_REC_MAX / 2], out[IPC_RING_REC_MAX];

			ipc_ring_set_polling(&f->cons, false);
			memset(f->area, 0, sizeof(f->area->ctl));
			ipc_ring_init(&f->prod, f->area, IPC_RING_UP);
			ipc_ring_init(&f->cons, f->area, IPC_RING_UP);
			for (unsigned i = 0; wrap && i < 2 * IPC_RING_SIZE / sizeof(m) - 1; i++) {
				assert_true(ipc_ring_put(&f->prod, m, sizeof(m) - 8, 0) >= 0);
				assert_true(ipc_ring_get(&f->cons, out, sizeof(out), 0) > 0);
			}
			run_handoff(f, &handoff_cases[k]);
		}
	}
}

/* ---- two processes: the wake-up protocol under load ---- */

#define XP_MESSAGES 500000u

/* The consumer's side, as gpux's readers do it: spin a while with `polling` set, clear it,
 * look once more, then sleep until a kick. */
static void xp_consume(struct ipc_ring *r, int kick_fd, unsigned *ret_kicks)
{
	static uint8_t out[IPC_RING_REC_MAX], want[IPC_RING_REC_MAX];
	unsigned got = 0, kicks = 0;

	while (got < XP_MESSAGES) {
		int n = ipc_ring_get(r, out, sizeof(out), 0);

		if (n > 0) {
			fill(want, (uint32_t)n, got);
			assert_memory_equal(out, want, (size_t)n);
			got++;
			continue;
		}
		assert_int_equal(n, 0);
		/* Spin a little first (or not at all): the polling word changes all the time. */
		ipc_ring_set_polling(r, true);
		for (unsigned i = 0; i < got % 5 && !ipc_ring_pending(r); i++)
			cpu_relax();
		ipc_ring_set_polling(r, false);
		if (ipc_ring_pending(r))
			continue;
		{
			struct pollfd p = { .fd = kick_fd, .events = POLLIN };
			char c;

			assert_int_equal(poll(&p, 1, 10000), 1);
			assert_int_equal(read(kick_fd, &c, 1), 1);
			kicks++;
		}
	}
	*ret_kicks = kicks;
}

static void test_ring_two_processes_lose_no_wakeup(void **state)
{
	struct fixture *f = *state;
	int sv[2];
	unsigned kicks = 0;
	pid_t pid;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* The producer: messages of random sizes, bursts and pauses, a kick when told. */
		static uint8_t in[512];
		uint32_t seed = 1;

		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (uint32_t i = 0; i < XP_MESSAGES; i++) {
			uint32_t len = 1 + (seed = seed * 1103515245u + 12345u) % sizeof(in);
			int r;

			fill(in, len, i);
			while ((r = ipc_ring_put(&f->prod, in, len, 0)) == -ENOSPC)
				(void)sched_yield();
			if (r < 0)
				_exit(2);
			if (r == 1 && write(sv[1], "k", 1) != 1)
				_exit(3);
			/* Pauses of all lengths, to land on every step of the consumer's. */
			if (seed % 16 == 0)
				for (uint32_t k = seed % 4096; k > 0; k--)
					cpu_relax();
			if (seed % 1024 == 0)
				(void)usleep(seed % 50);
		}
		_exit(0);
	}
	(void)alarm(120);
	xp_consume(&f->cons, sv[0], &kicks);
	(void)alarm(0);
	assert_child_ok(pid);
	/* Some records came by spinning, some after kicks: both paths were taken. */
	assert_true(kicks > 0);
	assert_true(kicks < XP_MESSAGES);
	(void)close(sv[0]);
	(void)close(sv[1]);
}

#define RING_TEST(t) cmocka_unit_test_setup_teardown(t, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		RING_TEST(test_ring_area_is_sealed_and_zeroed),
		RING_TEST(test_ring_carries_messages_in_order_across_wraps),
		RING_TEST(test_ring_refuses_what_does_not_fit),
		RING_TEST(test_ring_stamps_hold_records_back),
		RING_TEST(test_ring_kicks_only_a_consumer_that_may_sleep),
		RING_TEST(test_ring_every_handoff_state),
		RING_TEST(test_ring_producer_refuses_impossible_head),
		RING_TEST(test_ring_consumer_refuses_forged_records),
		RING_TEST(test_ring_two_processes_lose_no_wakeup),
	};

	return cmocka_run_group_tests_name("ipc-ring", tests, NULL, NULL);
}
