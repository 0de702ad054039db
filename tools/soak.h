/* SPDX-License-Identifier: MIT */
/* tools/soak.h: gpux soak: what its forked clients and the process that watches them share. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <gpux/gpux.h>

#define SOAK_CLIENTS_MAX 64
/* Statuses by -status: GPUX_OK .. GPUX_E_VERSION. */
#define SOAK_STATUS_N 18
/* What an operation returns when a result was wrong (beside gpux statuses, all <= 0). */
#define SOAK_WRONG 1

enum soak_op {
	SOAK_RUN,    /* a launch on IN and OUT (or INOUT) ranges, pipelined on the default queue */
	SOAK_QUEUE,  /* a queue of its own, ordered increments */
	SOAK_FROZEN, /* a frozen buffer as a cached input */
	SOAK_DBUF,   /* a device buffer written, run on, read back */
	SOAK_MODULE, /* a module of its own loaded, run, freed */
	SOAK_FORK,   /* a forked child (and its child) running on the inherited objects */
	SOAK_OP_N
};

extern const char *const soak_op_names[SOAK_OP_N];

/* One client process: what it is doing, for the watchdog. */
struct soak_slot {
	_Atomic pid_t pid;         /* 0: free */
	_Atomic int op;            /* enum soak_op while op_start is set */
	_Atomic uint64_t op_start; /* CLOCK_MONOTONIC ns; 0 between operations */
};

/* In shared memory made before the first fork: every process adds to it. */
struct soak_board {
	atomic_bool stop;
	char sock[256];
	unsigned ops_mask; /* 1 << enum soak_op: the operations to run (not 0) */
	struct soak_slot slots[SOAK_CLIENTS_MAX];
	atomic_uint_fast64_t ops[SOAK_OP_N];
	atomic_uint_fast64_t max_ns[SOAK_OP_N]; /* the longest operation of each kind */
	atomic_uint_fast64_t requests_ok;       /* requests whose results were checked */
	atomic_uint_fast64_t status[SOAK_STATUS_N]; /* failed requests and calls, by status */
	atomic_uint_fast64_t wrong[SOAK_OP_N];  /* results that were not right, by operation */
	atomic_uint_fast64_t unexpected;        /* statuses no kill explains */
	atomic_uint_fast64_t forks;
	atomic_uint_fast64_t crashes;           /* clients or their children killed by a signal */
	/* The long-lived client's own fds and memfd mappings after disconnecting, minus before. */
	atomic_int client_fd_leak, client_memfd_leak;
	atomic_bool client_checked;
	atomic_bool told;                       /* the first problem has been described */
	char first_problem[512];
};

/*
 * A client process's life: connect, load the kernels, run random operations until `budget`
 * have run (0: until the board says stop), then free everything and disconnect. The
 * long-lived one checks its own fds and memfds afterwards. Returns the exit code.
 */
int soak_client(struct soak_board *b, unsigned slot, uint64_t seed, unsigned budget,
		bool long_lived);

/* Count open fds and memfd mappings of a process (-1 when it cannot be read). */
int soak_count_fds(pid_t pid);
int soak_count_memfds(pid_t pid, const char *except);
/* VmRSS in KiB, or 0. */
uint64_t soak_rss_kib(pid_t pid);

uint64_t soak_now(void);
