/* SPDX-License-Identifier: MIT */
/* ipc/channel.h: one SOCK_SEQPACKET record per message, with fd passing. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "proto.h"

/* Room for the control data of one message's fds. */
#define IPC_CMSG_SPACE CMSG_SPACE(sizeof(int) * IPC_FDS_MAX)

/* A connected SOCK_SEQPACKET pair, both ends close-on-exec (and non-blocking if asked). */
int ipc_channel_pair(int ret_fds[2], bool nonblock);

/*
 * Send one message with nfds fds (the caller keeps them); flags are sendmsg()'s, such as
 * MSG_DONTWAIT. A record is sent whole or not at all. Returns 0, -EAGAIN when the socket is
 * full and the call may not block, -EPIPE when the peer is gone, or another -errno.
 */
int ipc_channel_send(int fd, const void *buf, size_t len, const int *fds, unsigned nfds, int flags);

/*
 * Receive one record into buf (cap bytes, at least IPC_MSG_MAX) and its fds into
 * fds[IPC_FDS_MAX], close-on-exec. Returns the record's length, 0 when the peer hung up,
 * -EAGAIN, or an error; on every error each fd that arrived is closed already:
 * -EMSGSIZE (record longer than cap), -ETOOMANYREFS (more fds than IPC_FDS_MAX: MSG_CTRUNC),
 * -EBADMSG (control data other than SCM_RIGHTS).
 */
ssize_t ipc_channel_recv(int fd, void *buf, size_t cap, int *fds, unsigned *ret_nfds, int flags);

/*
 * Take the fds out of a msghdr filled by recvmsg() that returned n (the io_uring loop
 * receives on its own and shares this). Same errors and guarantee as ipc_channel_recv().
 */
ssize_t ipc_channel_take_fds(const struct msghdr *mh, ssize_t n, int *fds, unsigned *ret_nfds);

/*
 * Receive one record and parse its header (ipc_msg_parse). Returns 1 with *ret filled (its
 * payload points into buf), 0 at hang-up, or an error with every received fd closed.
 */
int ipc_channel_recv_msg(int fd, void *buf, size_t cap, struct ipc_msg *ret, int flags);

/*
 * Copies of nfds fds into ret_fds, close-on-exec and above stdio, for a message to be sent
 * later (its sender may close its own meanwhile). Returns 0, or -errno with none made.
 */
int ipc_fds_dup(const int *fds, unsigned nfds, int *ret_fds);

/* Close the fds of a message that nobody took (a taker sets its slot to -1). */
void ipc_msg_close_fds(struct ipc_msg *msg);

/* Take fd i of a message: the message no longer closes it. */
int ipc_msg_take_fd(struct ipc_msg *msg, unsigned i);
