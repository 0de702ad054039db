/* SPDX-License-Identifier: MIT */
/* ipc/loop.h: the event loop of gpuxd and gpux-worker, on io_uring or on epoll. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/*
 * One single-threaded loop serves message connections (SOCK_SEQPACKET, with fds), listening
 * sockets, readiness of any other fd (pidfd, eventfd, signalfd) and timers. Two
 * implementations: io_uring (receives, sends and accepts are io_uring operations, submitted
 * in one batch per iteration) and epoll (readiness, then non-blocking system calls).
 *
 * Objects are freed with their _free(); that is allowed inside any callback, for the object
 * whose callback runs or any other. Callbacks never run for a freed object.
 */

struct ipc_loop;
struct ipc_watch;
struct ipc_timer;
struct ipc_conn;
struct ipc_listener;

enum ipc_loop_kind {
	IPC_LOOP_AUTO = 0, /* $GPUX_LOOP ("io_uring" or "epoll"), else io_uring, else epoll */
	IPC_LOOP_URING = 1,
	IPC_LOOP_EPOLL = 2,
};

/*
 * A new loop. AUTO falls back from io_uring to epoll only when io_uring is refused
 * (-ENOSYS, -EPERM, -EINVAL: seccomp profiles, kernel.io_uring_disabled, gVisor) or lacks an
 * operation gpux uses; ipc_loop_fallback() then says why.
 */
int ipc_loop_new(enum ipc_loop_kind kind, struct ipc_loop **ret);
/*
 * ipc_loop_new() with flags. IPC_LOOP_SQPOLL: with io_uring, a kernel thread of the process
 * takes the loop's submissions (sends to peers, above all) off its thread, spinning while they
 * come and sleeping after IPC_LOOP_SQPOLL_IDLE_MS without; a kernel that refuses it gets a
 * plain ring (ipc_loop_sqpoll() says which).
 */
#define IPC_LOOP_SQPOLL 0x1u
#define IPC_LOOP_SQPOLL_IDLE_MS 2u
int ipc_loop_new_ex(enum ipc_loop_kind kind, unsigned flags, struct ipc_loop **ret);
void ipc_loop_free(struct ipc_loop *l);

/* "io_uring" or "epoll". */
const char *ipc_loop_name(const struct ipc_loop *l);

/* Whether a kernel thread takes the loop's submissions (IPC_LOOP_SQPOLL, granted). */
bool ipc_loop_sqpoll(const struct ipc_loop *l);

/* The -errno that made AUTO fall back to epoll, or 0. */
int ipc_loop_fallback(const struct ipc_loop *l);

/* Run until ipc_loop_exit(); returns the code given there, or -errno if waiting failed. */
int ipc_loop_run(struct ipc_loop *l);

/* One round: wait up to timeout_ns (-1: until something happens) and dispatch. */
int ipc_loop_iterate(struct ipc_loop *l, int64_t timeout_ns);

void ipc_loop_exit(struct ipc_loop *l, int code);

/* ---- spinning ---- */

/*
 * Look for work that arrives without an fd (another thread's hand-off, a shared ring) and
 * take it; returns whether there was some. `sleeping`: the loop is about to sleep (producers
 * must be told to wake it from now on), and this is the last look before it does.
 */
typedef bool ipc_loop_poll_fn(void *userdata, bool sleeping);

/*
 * ipc_loop_run() calls poll (when not NULL) after each round, and with `sleeping` before it
 * sleeps. After a round that served something it keeps looking without sleeping for spin_ns
 * (0, the default: it sleeps at once). While it spins, ipc_loop_spinning() is true, and a
 * thread handing work to it may skip the wake-up (an eventfd write).
 */
void ipc_loop_set_spin(struct ipc_loop *l, uint64_t spin_ns, ipc_loop_poll_fn *poll,
		       void *userdata);

/* Any thread. */
bool ipc_loop_spinning(struct ipc_loop *l);

/* ---- readiness of an fd (POLLIN/POLLOUT/POLLPRI; POLLERR and POLLHUP always) ---- */

typedef void ipc_watch_fn(struct ipc_watch *w, int fd, uint32_t revents, void *userdata);

/*
 * Watch fd until freed; fd stays the caller's, and must stay open while watched (free the
 * watch first, then close the fd). The callback runs on each readiness. Should the fd be
 * closed anyway, the watch goes quiet (io_uring may report POLLNVAL once).
 */
int ipc_watch_new(struct ipc_loop *l, int fd, uint32_t events, ipc_watch_fn *fn, void *userdata,
		  struct ipc_watch **ret);
void ipc_watch_free(struct ipc_watch *w);

/* ---- timers (CLOCK_MONOTONIC) ---- */

typedef void ipc_timer_fn(struct ipc_timer *t, void *userdata);

int ipc_timer_new(struct ipc_loop *l, ipc_timer_fn *fn, void *userdata, struct ipc_timer **ret);
/* Fire once at `when_ns` (mono_ns() clock); 0 disarms. Re-arming moves it. */
void ipc_timer_arm(struct ipc_timer *t, uint64_t when_ns);
/* When it fires next (mono_ns() clock), or 0 when it is not armed. */
uint64_t ipc_timer_when(const struct ipc_timer *t);
void ipc_timer_free(struct ipc_timer *t);

/* ---- message connections ---- */

/*
 * A message arrived, its header checked (ipc_msg_parse). The callee may take fds out of msg
 * (ipc_msg_take_fd); the rest are closed when it returns. The payload is valid only during
 * the call.
 */
typedef void ipc_conn_msg_fn(struct ipc_conn *c, struct ipc_msg *msg, void *userdata);

/*
 * The connection ended: `error` is 0 when the peer hung up, else why it was dropped
 * (-EBADMSG for a bad header or control data, -ETOOMANYREFS for too many fds, -EMSGSIZE for
 * an oversized record, -ENOBUFS when its send queue overflowed, a send or receive error).
 * No callback runs for it again; free it.
 */
typedef void ipc_conn_close_fn(struct ipc_conn *c, int error, void *userdata);

/* Serve a SOCK_SEQPACKET socket; the connection owns fd from now, on failure too. */
int ipc_conn_new_take_fd(struct ipc_loop *l, int fd, ipc_conn_msg_fn *on_msg,
			 ipc_conn_close_fn *on_close, void *userdata, struct ipc_conn **ret);

/*
 * Queue one message with fds for sending, in order. The bytes are copied and the fds
 * duplicated: the caller keeps its own. Returns 0, -EPIPE when the connection has ended, or
 * -ENOBUFS when the peer has not been reading (the connection is then closed as well).
 */
int ipc_conn_send(struct ipc_conn *c, const void *buf, size_t len, const int *fds, unsigned nfds);

/* Stop serving; closes the fd. Queued messages not yet sent are dropped. */
void ipc_conn_free(struct ipc_conn *c);

int ipc_conn_fd(const struct ipc_conn *c);
void *ipc_conn_userdata(const struct ipc_conn *c);
void ipc_conn_set_userdata(struct ipc_conn *c, void *userdata);
/* Messages queued and not yet sent. */
size_t ipc_conn_queued(const struct ipc_conn *c);

/*
 * Upper bounds of a connection's send queue: past them the peer is dropped. Fds count too
 * (each queued one is open in this process until sent): IPC_CONN_QUEUE_FDS, or `max` once
 * set here (a daemon gives connections of untrusted peers less).
 */
#define IPC_CONN_QUEUE_MSGS 4096u
#define IPC_CONN_QUEUE_BYTES (16u * 1024u * 1024u)
#define IPC_CONN_QUEUE_FDS 4096u
void ipc_conn_set_queue_fds(struct ipc_conn *c, size_t max);

/* ---- listening sockets ---- */

/* A connection was accepted: fd is the caller's (close-on-exec). */
typedef void ipc_accept_fn(struct ipc_listener *li, int fd, void *userdata);

/*
 * Accept on listen_fd until freed; listen_fd stays the caller's (the epoll back end makes it
 * non-blocking).
 */
int ipc_listener_new(struct ipc_loop *l, int listen_fd, ipc_accept_fn *fn, void *userdata,
		     struct ipc_listener **ret);
void ipc_listener_free(struct ipc_listener *li);
