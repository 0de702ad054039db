/* SPDX-License-Identifier: MIT */
/* tests/test-worker-active.c: the worker's active clients: joining, leaving, every hand-off. */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "active.h"
#include "helpers.h"
#include "ring.h"

struct fixture {
	int fd;
	struct ipc_rings *area;
	struct ipc_ring prod, cons; /* the client's end of its ring to the worker, the worker's */
	struct wrk_active set;
	struct wrk_act act;
	int fds_before;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->fds_before = test_fd_count();
	assert_int_equal(ipc_rings_create(&f->fd, &f->area), 0);
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

/*
 * A case is a sequence of steps by the client (its ring's producer, and its kicks) and the
 * worker's loop (the set, the ring's consumer), each with what it must give:
 *   j  the client joins at the current time (its first message)
 *   o  the loop spins: the set's words go up (want: whether the client's is up)
 *   f  the loop is about to sleep: the set's words go down at the next look
 *   p  the client publishes a record (want: whether it kicks)
 *   P  the same, stamped after a socket message the worker has not taken yet
 *   d  the client's word goes down by the worker's hand, and nothing else yet (the first
 *      half of a leave)
 *   k  a kick (or any socket message) arrives: the client is touched
 *   a  the worker answers the client (sends it something): the client is touched
 *   t  the loop takes what the ring holds (want: how many)
 *   h  half the idle time passes
 *   q  the whole idle time passes
 *   e  the loop settles the client after its look, finding what the last `t` took
 *      (want: whether it is still in the set)
 *   r  the loop settles it before sleeping (want: whether it is still in the set)
 * After every step the invariant: a record the worker has not taken, from a client not in
 * the set, has a kick on its way. Otherwise it would wait for the client's next one.
 */
struct step {
	char op;
	int want;
};

struct handoff_case {
	const char *what;
	struct step steps[16];
};

/* clang-format off */
static const struct handoff_case cases[] = {
	{ "a quiet client leaves after the pause; its next record kicks it back in",
	  { { 'j', 0 }, { 'o', 1 }, { 't', 0 }, { 'e', 1 }, { 'q', 0 }, { 'e', 0 }, { 'p', 1 },
	    { 'k', 0 }, { 't', 1 }, { 'e', 1 } } },
	{ "published while its word was up: found when it would leave, so it stays",
	  { { 'j', 0 }, { 'o', 1 }, { 't', 0 }, { 'p', 0 }, { 'q', 0 }, { 'e', 1 }, { 't', 1 },
	    { 'e', 1 }, { 'q', 0 }, { 'e', 0 }, { 'p', 1 } } },
	{ "published between the word going down and the look: stays, the kick spurious",
	  { { 'j', 0 }, { 'o', 1 }, { 't', 0 }, { 'q', 0 }, { 'd', 0 }, { 'p', 1 }, { 'e', 1 },
	    { 'k', 0 }, { 't', 1 }, { 'e', 1 } } },
	{ "the loop sleeps: a client with nothing left leaves, its next record kicks",
	  { { 'j', 0 }, { 'o', 1 }, { 't', 0 }, { 'f', 0 }, { 'r', 0 }, { 'p', 1 }, { 'k', 0 },
	    { 't', 1 }, { 'e', 1 } } },
	{ "the loop sleeps with a record waiting: the client stays, its word down",
	  { { 'j', 0 }, { 'o', 1 }, { 't', 0 }, { 'p', 0 }, { 'f', 0 }, { 'r', 1 }, { 'p', 0 },
	    { 't', 2 }, { 'e', 1 } } },
	{ "a quiet client touched again starts its pause anew",
	  { { 'j', 0 }, { 'o', 1 }, { 't', 0 }, { 'h', 0 }, { 'a', 0 }, { 'e', 1 }, { 'h', 0 },
	    { 'e', 1 }, { 'h', 0 }, { 'e', 0 } } },
	{ "a record stamped after a socket message keeps its client in until that comes",
	  { { 'j', 0 }, { 'o', 1 }, { 'P', 0 }, { 't', 0 }, { 'q', 0 }, { 'e', 1 }, { 'k', 0 },
	    { 't', 1 }, { 'e', 1 }, { 'q', 0 }, { 'e', 0 } } },
	{ "a client that joins while the loop spins gets its word up: no kick",
	  { { 'o', 0 }, { 'j', 0 }, { 'p', 0 }, { 't', 1 }, { 'e', 1 } } },
	{ "a client that joins while the loop sleeps kicks",
	  { { 'f', 0 }, { 'j', 0 }, { 'p', 1 }, { 'k', 0 }, { 't', 1 }, { 'e', 1 } } },
};
/* clang-format on */

static void run_case(struct fixture *f, const struct handoff_case *c)
{
	uint8_t msg[24] = { 0 }, out[64];
	uint64_t now = 1000 * NSEC_PER_SEC;
	uint32_t sent = 0, read = 0; /* socket messages: sent by the client, taken by the worker */
	unsigned owed = 0;           /* of them not taken yet */
	int took = 0;

	for (unsigned i = 0; i < ARRAY_SIZE(c->steps) && c->steps[i].op; i++) {
		const struct step *st = &c->steps[i];
		int r = 0;

		switch (st->op) {
		case 'j':
			wrk_active_join(&f->set, &f->act, now);
			break;
		case 'o':
		case 'f':
			f->set.polling = st->op == 'o';
			if (f->act.on)
				wrk_active_sync(&f->set, &f->act);
			if (st->op == 'o' && (int)atomic_load(&f->cons.ctl->polling) != st->want)
				fail_msg("%s: step %u: the word is %u", c->what, i,
					 atomic_load(&f->cons.ctl->polling));
			break;
		case 'p':
		case 'P':
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
		case 'd':
			ipc_ring_set_polling(&f->cons, false);
			break;
		case 'k':
			if (owed == 0)
				fail_msg("%s: step %u: no kick was sent", c->what, i);
			owed--;
			read++;
			/* A socket message: the worker takes what came before it, then the client
			 * is touched (worker/core/server.c). */
			wrk_active_touch(&f->set, &f->act);
			break;
		case 'a':
			wrk_active_touch(&f->set, &f->act);
			break;
		case 't':
			took = 0;
			while ((r = ipc_ring_get(&f->cons, out, sizeof(out), read)) > 0)
				took++;
			assert_int_equal(r, 0);
			if (took != st->want)
				fail_msg("%s: step %u: took %d, want %d", c->what, i, took,
					 st->want);
			break;
		case 'h':
			now += WRK_ACTIVE_IDLE_NS / 2;
			break;
		case 'q':
			now += WRK_ACTIVE_IDLE_NS;
			break;
		case 'e':
		case 'r':
			if (!f->act.on)
				fail_msg("%s: step %u: settling a client not in the set", c->what,
					 i);
			r = st->op == 'e' ? wrk_active_settle(&f->set, &f->act, took > 0, now)
					  : wrk_active_rest(&f->set, &f->act, now);
			took = 0;
			if (r != st->want)
				fail_msg("%s: step %u: in the set: %d, want %d", c->what, i, r,
					 st->want);
			break;
		}
		if (!f->act.on && ipc_ring_pending(&f->cons) && owed == 0)
			fail_msg("%s: step %u: a record left with no kick on its way", c->what, i);
		if (f->set.n != (f->act.on ? 1u : 0u))
			fail_msg("%s: step %u: %u in the set", c->what, i, f->set.n);
	}
}

static void test_active_every_handoff_state(void **state)
{
	struct fixture *f = *state;

	for (unsigned k = 0; k < ARRAY_SIZE(cases); k++) {
		memset(f->area, 0, sizeof(f->area->ctl));
		ipc_ring_init(&f->prod, f->area, IPC_RING_UP);
		ipc_ring_init(&f->cons, f->area, IPC_RING_UP);
		f->set = (struct wrk_active){ 0 };
		f->act = (struct wrk_act){ .up = &f->cons };
		run_case(f, &cases[k]);
	}
}

/* Take i out of its level's order of arrival. */
static void order_remove(unsigned *order, unsigned *n, unsigned i)
{
	unsigned k = 0;

	while (order[k] != i)
		k++;
	memmove(&order[k], &order[k + 1], (*n - k - 1) * sizeof(order[0]));
	(*n)--;
}

/*
 * Thousands of clients of every priority level, a few of them active: each level's list holds
 * that level's active ones, in the order they came (a client whose level changes comes last
 * to its new level), whatever their places among the others, through joins, leaves and
 * changes of level in any order.
 */
static void test_active_set_holds_the_active_in_order(void **state)
{
	enum { N = 4096, L = IPC_PRIO_LEVELS };
	struct wrk_act *acts = calloc(N, sizeof(*acts));
	static unsigned order[L][N];
	unsigned norder[L] = { 0 };
	struct wrk_active s = { 0 };
	uint64_t seed = 7;

	(void)state;
	assert_non_null(acts);
	for (unsigned i = 0; i < N; i++)
		acts[i].level = i % L;
	for (unsigned round = 0; round < 20000; round++) {
		unsigned i = (unsigned)(test_random_next(&seed) % N), l = acts[i].level, all = 0;
		unsigned what = (unsigned)(test_random_next(&seed) % 6);

		if (what < 4 && !acts[i].on) {
			wrk_active_join(&s, &acts[i], round);
			order[l][norder[l]++] = i;
		} else if (what == 4 && acts[i].on) {
			wrk_active_leave(&s, &acts[i]);
			order_remove(order[l], &norder[l], i);
		} else if (what == 5) {
			unsigned to = (unsigned)(test_random_next(&seed) % L);

			wrk_active_set_level(&s, &acts[i], to);
			assert_int_equal(acts[i].level, to);
			if (acts[i].on && to != l) {
				order_remove(order[l], &norder[l], i);
				order[to][norder[to]++] = i;
			}
		}
		/* Joining twice changes nothing. */
		if (norder[l] > 0)
			wrk_active_join(&s, &acts[order[l][0]], round);
		for (unsigned k = 0; k < L; k++) {
			bool above = false;

			for (unsigned j = k + 1; j < L; j++)
				above |= norder[j] > 0;
			all += norder[k];
			assert_int_equal(s.nlevel[k], norder[k]);
			assert_int_equal(wrk_active_above(&s, k), above);
		}
		if (round % 97 == 0 || round == 19999)
			for (unsigned lv = 0; lv < L; lv++) {
				unsigned k = 0;

				for (struct wrk_act *a = s.head[lv]; a; a = a->next, k++) {
					assert_true(k < norder[lv]);
					assert_ptr_equal(a, &acts[order[lv][k]]);
					assert_ptr_equal(a->prev,
							 k ? &acts[order[lv][k - 1]] : NULL);
				}
				assert_int_equal(k, norder[lv]);
				assert_ptr_equal(s.tail[lv],
						 norder[lv] ? &acts[order[lv][norder[lv] - 1]]
							    : NULL);
			}
		assert_int_equal(s.n, all);
	}
	free(acts);
}

/* A client without rings (the socket only) joins and leaves on time alone. */
static void test_active_without_a_ring(void **state)
{
	struct wrk_active s = { .polling = true };
	struct wrk_act a = { 0 };

	(void)state;
	wrk_active_join(&s, &a, 100);
	assert_true(a.on);
	assert_true(wrk_active_settle(&s, &a, false, 100 + WRK_ACTIVE_IDLE_NS - 1));
	assert_false(wrk_active_settle(&s, &a, false, 100 + WRK_ACTIVE_IDLE_NS));
	assert_false(a.on);
	assert_int_equal(s.n, 0);
	wrk_active_touch(&s, &a);
	assert_true(a.on);
	assert_false(wrk_active_rest(&s, &a, 200));
	assert_false(a.on);
}

/* A latency-critical client stays in the set through a pause that sends one of the default
 * level away (a kick would cost it most of its round trip). */
static void test_active_urgent_stays_longer(void **state)
{
	struct wrk_active s = { .polling = true };
	struct wrk_act dflt = { .level = wrk_prio_level(0) };
	struct wrk_act urgent = { .level = IPC_PRIO_LEVELS - 1 };

	(void)state;
	assert_true(WRK_ACTIVE_IDLE_URGENT_NS > WRK_ACTIVE_IDLE_NS);
	wrk_active_join(&s, &dflt, 100);
	wrk_active_join(&s, &urgent, 100);
	assert_false(wrk_active_settle(&s, &dflt, false, 100 + WRK_ACTIVE_IDLE_NS));
	assert_true(wrk_active_settle(&s, &urgent, false, 100 + WRK_ACTIVE_IDLE_NS));
	assert_true(wrk_active_settle(&s, &urgent, false, 100 + WRK_ACTIVE_IDLE_URGENT_NS - 1));
	assert_true(urgent.on);
	assert_int_equal(s.nlevel[IPC_PRIO_LEVELS - 1], 1);
	assert_false(wrk_active_settle(&s, &urgent, false, 100 + WRK_ACTIVE_IDLE_URGENT_NS));
	assert_false(urgent.on);
	assert_int_equal(s.n, 0);
}

#define ACTIVE_TEST(t) cmocka_unit_test_setup_teardown(t, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		ACTIVE_TEST(test_active_every_handoff_state),
		cmocka_unit_test(test_active_set_holds_the_active_in_order),
		cmocka_unit_test(test_active_without_a_ring),
		cmocka_unit_test(test_active_urgent_stays_longer),
	};

	return cmocka_run_group_tests_name("worker-active", tests, NULL, NULL);
}
