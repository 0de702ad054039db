/* SPDX-License-Identifier: MIT */
/* ipc/loop-internal.h: what the two loop implementations share with ipc/loop.c. */
#pragma once

#include <liburing.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "channel.h"
#include "loop.h"

enum obj_type {
	OBJ_WATCH,
	OBJ_CONN,
	OBJ_LISTENER,
};

/*
 * Every loop object starts with this. An object is freed by the loop, not by its _free():
 * only once it is dead, no io_uring operation refers to it any more (inflight == 0), and the
 * current round of dispatching is over (it may be on the stack of a callback).
 */
struct ipc_obj {
	struct ipc_loop *loop;
	struct ipc_obj *next_dead;
	unsigned inflight;
	enum obj_type type;
	bool dead;
	bool buried;
};

/* What an io_uring completion belongs to: its user_data points at one of these. */
enum uring_op_kind {
	UOP_RECV,
	UOP_SEND,
	UOP_POLL,
	UOP_ACCEPT,
};

struct uring_op {
	enum uring_op_kind kind;
	struct ipc_obj *obj;
	/* No submission queue entry was to be had (the ring full, and the kernel refusing to
	 * take what it holds for now): the operation, or its cancellation, waits in the loop's
	 * list for the next turn, which submits it. */
	struct uring_op *next_waiting;
	bool listed;         /* in that list */
	bool arm_waiting;    /* the operation was never submitted */
	bool cancel_waiting; /* it was, and is to be cancelled */
};

struct ipc_watch {
	struct ipc_obj obj;
	int fd;
	uint32_t events;
	ipc_watch_fn *fn;
	void *userdata;
	struct uring_op op;
};

struct ipc_timer {
	struct ipc_loop *loop;
	uint64_t when; /* 0: not armed */
	uint64_t seq; /* when it was armed, in the loop's count: those of one deadline fire in it */
	unsigned idx; /* its place in the loop's heap while armed */
	ipc_timer_fn *fn;
	void *userdata;
};

struct ipc_out {
	struct ipc_out *next;
	size_t len;
	unsigned nfds;
	int fds[IPC_FDS_MAX];
	uint8_t data[];
};

struct ipc_conn {
	struct ipc_obj obj;
	int fd;
	bool closed; /* ended, or free was asked: no more callbacks but on_close */
	int close_error;
	struct ipc_conn *next_closing; /* in the loop's list of on_close calls to make */
	ipc_conn_msg_fn *on_msg;
	ipc_conn_close_fn *on_close;
	void *userdata;
	uint8_t *rbuf; /* IPC_MSG_MAX */

	struct ipc_out *out_head, *out_tail;
	size_t out_msgs, out_bytes, out_fds;
	size_t out_fds_max; /* IPC_CONN_QUEUE_FDS, or what ipc_conn_set_queue_fds() said */

	/* io_uring */
	struct uring_op recv_op, send_op;
	bool recv_armed, send_armed;
	struct msghdr rmh, smh;
	struct iovec riov, siov;
	/* Aligned as struct cmsghdr without containing one: its flexible array member may not sit
	 * in the middle of a struct (clang: -Wgnu-variable-sized-type-not-at-end). */
	struct {
		_Alignas(struct cmsghdr) char buf[IPC_CMSG_SPACE];
	} rctl, sctl;

	/* epoll */
	uint32_t ep_events;
};

struct ipc_listener {
	struct ipc_obj obj;
	int fd;
	ipc_accept_fn *fn;
	void *userdata;
	struct uring_op op;
	bool armed;
	struct ipc_timer *resume; /* after EMFILE and the like, accept again only later */
};

struct ipc_loop_ops {
	const char *name;
	int (*init)(struct ipc_loop *l);
	void (*done)(struct ipc_loop *l);
	/* Wait up to timeout_ns (-1: no limit) and dispatch what happened; returns how many
	 * events were dispatched, or -errno. */
	int (*wait)(struct ipc_loop *l, int64_t timeout_ns);
	int (*watch_start)(struct ipc_watch *w);
	void (*watch_stop)(struct ipc_watch *w);
	int (*conn_start)(struct ipc_conn *c);
	/* A message was queued on an idle connection: send it when possible. */
	void (*conn_kick)(struct ipc_conn *c);
	void (*conn_stop)(struct ipc_conn *c);
	int (*listener_start)(struct ipc_listener *li);
	void (*listener_stop)(struct ipc_listener *li);
};

struct ipc_loop {
	const struct ipc_loop_ops *ops;
	int fallback;
	bool exit;
	int exit_code;
	/* The armed timers: a binary min-heap by (when, seq). Room for every timer made, so
	 * that arming never allocates. */
	struct ipc_timer **timers;
	unsigned ntimers, timers_made, timers_room;
	uint64_t timer_seq;
	struct ipc_obj *graveyard;
	struct ipc_conn *closing, **closing_tail;
	uint64_t spin_ns;
	ipc_loop_poll_fn *poll;
	void *poll_data;
	atomic_bool spinning;

	/* io_uring */
	struct io_uring ring;
	bool ring_ready;
	bool sqpoll_wanted, sqpoll;               /* IPC_LOOP_SQPOLL asked, granted */
	unsigned inflight;                        /* operations submitted and not completed */
	struct uring_op *waiting, **waiting_tail; /* for an entry, oldest first */

	/* epoll */
	int epfd;
};

extern const struct ipc_loop_ops ipc_loop_uring_ops;
extern const struct ipc_loop_ops ipc_loop_epoll_ops;

/* Shared by the implementations. */
void ipc_obj_release(struct ipc_obj *o);
void ipc_conn_deliver(struct ipc_conn *c, ssize_t n, int *fds, unsigned nfds);
void ipc_conn_fail(struct ipc_conn *c, int error);
void ipc_conn_pop_sent(struct ipc_conn *c);
/* Hand an accepted fd (or accept's error) over; false: stop accepting, the loop resumes later. */
bool ipc_listener_accepted(struct ipc_listener *li, int fd_or_error);
