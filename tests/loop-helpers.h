/* SPDX-License-Identifier: MIT */
/* tests/loop-helpers.h: what the tests of ipc/loop share: a loop of each kind, and recorders. */
#pragma once

#include "helpers.h"
#include "loop.h"

#define WAIT_MS 2000 /* long enough for any event here; a broken test fails after it */

/* Buffers for the message a test sends and the one it receives. */
extern uint8_t test_sbuf[IPC_MSG_MAX], test_rbuf[IPC_MSG_MAX];

/* ---- fixture: a loop of the test's kind, and an fd count taken before it ---- */

extern enum ipc_loop_kind test_kind_uring, test_kind_epoll;

/* What *state points to in a LOOP_TEST. */
struct test_loop_fixture {
	enum ipc_loop_kind kind;
	struct ipc_loop *l; /* NULL: this kind cannot run here */
	int fds_before;
};

int test_loop_setup(void **state);
/* Every test frees what it made: after the loop, no fd may be left. */
int test_loop_teardown(void **state);
/* The test's loop; skips the test when its kind cannot run here. */
struct ipc_loop *test_loop_of(void **state);

/* Run tests both ways; the name says which. */
#define LOOP_TEST_ON(f, kind, kind_name)                                                           \
	{                                                                                          \
		.name = #f "(" kind_name ")", .test_func = f, .setup_func = test_loop_setup,       \
		.teardown_func = test_loop_teardown, .initial_state = &(kind),                     \
	}
#define LOOP_TEST(f)                                                                               \
	LOOP_TEST_ON(f, test_kind_uring, "io_uring"), LOOP_TEST_ON(f, test_kind_epoll, "epoll")

/* ---- a connection that records what happens to it ---- */

struct test_rec {
	struct ipc_conn *c;
	unsigned msgs, closes;
	int error;
	unsigned msgs_at_close;
	uint32_t next_id; /* the id the next message should have */
	bool out_of_order;
	bool free_on_msg, free_on_close;
	int send_in_close;  /* what ipc_conn_send() answered inside on_close */
	bool last_word;     /* on_close sends a header on the socket itself, as a worker does */
	int last_word_sent; /* what that send answered */
	struct ipc_hdr hdr; /* of the last message */
	uint8_t payload[256];
	int fds[IPC_FDS_MAX]; /* taken from the last message */
	unsigned nfds;
};

/* Serve fd (taken) on l, recording into r. */
void test_rec_init(struct test_rec *r, struct ipc_loop *l, int fd);
void test_rec_done(struct test_rec *r);

/* A peer that answers every message with the same message and fds. */
void test_echo_on_msg(struct ipc_conn *c, struct ipc_msg *msg, void *userdata);
void test_fail_on_close(struct ipc_conn *c, int error, void *userdata);
void test_fail_on_msg(struct ipc_conn *c, struct ipc_msg *msg, void *userdata);

/*
 * Whether the peer sees the other end gone within WAIT_MS: a hang-up, or ECONNRESET when
 * records it sent were still unread there.
 */
bool test_peer_sees_hangup(int sock);

/* ---- a watch and a timer that record their calls ---- */

struct test_watch_rec {
	struct ipc_watch *w;
	unsigned calls;
	uint32_t revents;
	int fd;
	bool drain; /* read the fd (eventfd, signalfd) */
	bool free_self;
	struct ipc_watch **free_other;
	uint32_t signo;
};

void test_watch_cb(struct ipc_watch *w, int fd, uint32_t revents, void *userdata);

struct test_timer_rec {
	struct ipc_timer *t;
	unsigned *order; /* where to write our number when we fire */
	unsigned *fired;
	unsigned number;
	uint64_t due, at;
	unsigned rearm; /* re-arm ourselves this many times */
	struct ipc_timer **free_other;
	struct ipc_loop *exit_loop;
};

void test_timer_cb(struct ipc_timer *t, void *userdata);
