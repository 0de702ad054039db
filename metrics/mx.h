/* SPDX-License-Identifier: MIT */
/* metrics/mx.h: gpux-metrics, gpuxd's Prometheus endpoint, a process of its own beside gpuxd. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "loop.h"

/*
 * Whoever can reach the port can talk to this server, so it is bounded: one request per
 * connection, at most MX_REQUEST_MAX bytes of it, which must have come whole within
 * MX_REQUEST_TIMEOUT_NS of the connection (a scraper sends it at once), and the answer sent
 * within MX_CONN_TIMEOUT_NS. Connections are many (MX_CONNS_MAX, or what the limit of open
 * files allows), and when they are all taken a new one takes the place of the oldest that has
 * not sent its request yet: slow connections, however many, cannot keep a scraper out.
 */
#define MX_CONNS_MAX 1024u
#define MX_REQUEST_MAX 4096u
#define MX_REQUEST_TIMEOUT_NS (2ULL * 1000000000ULL)
#define MX_CONN_TIMEOUT_NS (10ULL * 1000000000ULL)
/* The metrics are collected from gpuxd at most this often; requests in between get the same. */
#define MX_BODY_MAX_AGE_NS (100ULL * 1000000ULL)

/*
 * Write the body of GET /metrics to f. Returns 0, or -errno when there is none to give (the
 * request gets 503 and `why`).
 */
typedef int mx_render_fn(FILE *f, void *userdata, char *why, size_t why_len);

struct mx_server;

/*
 * Serve HTTP on listen_fd (a listening TCP socket, which stays the caller's) in loop l, with
 * at most max_conns connections at once; render makes /metrics. 0 or -errno.
 */
int mx_server_new(struct ipc_loop *l, int listen_fd, unsigned max_conns, mx_render_fn *render,
		  void *userdata, struct mx_server **ret);
/* Close every connection and stop; NULL is fine. */
void mx_server_free(struct mx_server *srv);

/*
 * The usual process_* metrics (Prometheus' client libraries' names: start time, CPU time,
 * memory, open fds) of process pid, read from /proc. 0, or -errno when pid cannot be read.
 */
int mx_process_write(FILE *f, pid_t pid);
