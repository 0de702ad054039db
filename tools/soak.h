/* SPDX-License-Identifier: MIT */
/* tools/soak.h: gpux soak: what its forked clients and the process that watches them share. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <gpux/gpux.h>

#define SOAK_CLIENTS_MAX 64
/* gpuxd serves this many host devices. */
#define SOAK_DEVICES 2u
/* Deaths of one device (a kill, a faulting kernel, a hanging one) are this far apart at
 * least, which keeps it short of being marked failed (5 in 60 s). Clients wait longer for
 * their turn than the killer. */
#define SOAK_DEATH_GAP_NS (16ull * 1000000000ull)
#define SOAK_CLIENT_DEATH_GAP_NS (18ull * 1000000000ull)
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
	SOAK_FAULT,  /* a kernel that crashes, breaks its launch or makes a forbidden call */
	SOAK_HANG,   /* a kernel that runs past its deadline */
	SOAK_OP_N
};

/* How a faulting kernel of the soak faults. */
enum soak_fault {
	SOAK_FAULT_SEGV,       /* an illegal address */
	SOAK_FAULT_FAR,        /* an address outside the address space (x86-64) */
	SOAK_FAULT_LAUNCH,     /* a write to its launch description */
	SOAK_FAULT_FORK,       /* fork() */
	SOAK_FAULT_EXIT,       /* syscall(SYS_exit): the end of its thread */
	SOAK_FAULT_EXIT_GROUP, /* the end of its worker */
	SOAK_FAULT_ABORT,      /* abort() */
	SOAK_FAULT_N
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
	atomic_uint_fast64_t max_ns[SOAK_OP_N];     /* the longest operation of each kind */
	atomic_uint_fast64_t requests_ok;           /* requests whose results were checked */
	atomic_uint_fast64_t status[SOAK_STATUS_N]; /* failed requests and calls, by status */
	atomic_uint_fast64_t wrong[SOAK_OP_N];      /* results that were not right, by operation */
	atomic_uint_fast64_t unexpected;            /* statuses no kill explains */
	atomic_uint_fast64_t forks;
	atomic_uint_fast64_t crashes; /* clients or their children killed by a signal */
	/* When each device last died, or was made to (soak_death_take()); the run's quiet end,
	 * in which nothing is. */
	_Atomic uint64_t death_at[SOAK_DEVICES];
	atomic_bool quiet;
	/* Faulting kernels by how, and those that ended as they should (GPUX_E_KERNEL_FAULT, the
	 * message saying how); hanging kernels, and those that ended GPUX_E_TIMEOUT. */
	atomic_uint_fast64_t faults[SOAK_FAULT_N], faults_as_expected[SOAK_FAULT_N];
	atomic_uint_fast64_t hangs, hangs_as_expected;
	/* The long-lived client's own fds and memfd mappings after disconnecting, minus before. */
	atomic_int client_fd_leak, client_memfd_leak;
	atomic_bool client_checked;
	atomic_bool told; /* the first problem has been described */
	char first_problem[512];
};

/*
 * A client process's life: connect, load the kernels, run random operations until `budget`
 * have run (0: until the board says stop), then free everything and disconnect. The
 * long-lived one checks its own fds and memfds afterwards. Returns the exit code.
 */
int soak_client(struct soak_board *b, unsigned slot, uint64_t seed, unsigned budget,
		bool long_lived);

/*
 * Take device dev's next death, when the last one is at least gap ago and the run is not in
 * its quiet end: whether it was taken (the caller kills the worker, or makes it die).
 */
bool soak_death_take(struct soak_board *b, unsigned dev, uint64_t gap);

extern const char *const soak_fault_names[SOAK_FAULT_N];

/* Count memfd mappings of a process (-1 when it cannot be read); its open fds:
 * proc_fd_count(). */
int soak_count_memfds(pid_t pid, const char *except);
/* VmRSS in KiB, or 0. */
uint64_t soak_rss_kib(pid_t pid);

uint64_t soak_now(void);
