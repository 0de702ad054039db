/* SPDX-License-Identifier: MIT */
/* ipc/status.h: a worker's status page, shared read-only with gpuxd and clients. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "proto.h"

/*
 * Each worker writes one page that gpuxd created (a sealed memfd), and that gpuxd and every
 * client map read-only: the worker's counters, what each of its streams is running now (so
 * that gpuxd can enforce deadlines without asking) and which cached inputs it holds (so
 * that clients can send work where its data already is). Writers bracket every change with
 * a sequence count (odd while writing); readers copy the page and retry until the count was
 * even and unchanged, then use only the copy.
 */

#define IPC_STATUS_MAGIC 0x33585047u /* "GPX3": the layout of protocol version 3 */
#define IPC_STATUS_SLOTS 64u         /* streams a worker runs at once */
#define IPC_AFFINITY_BITS 4096u

struct ipc_running {
	uint64_t client_id; /* 0: the slot is idle */
	uint32_t req_id;
	uint32_t generation;
	uint64_t started_ns;  /* CLOCK_MONOTONIC */
	uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0: none */
};

/* The device's launch limits, written before the worker is ready and never changed. */
struct ipc_launch_limits {
	uint32_t max_threads_per_block;
	uint32_t max_block[3];
	uint32_t max_grid[3];
	uint32_t max_shared_per_block; /* dynamic shared memory, the kernel's limit raised */
};
_Static_assert(sizeof(struct ipc_launch_limits) == 32, "status page ABI");

/*
 * Why a worker is about to die, written once before it does: by the worker as it gives up
 * after a kernel broke its device (the request blamed, or none: several were running and the
 * device does not say which), or by gpuxd as it kills it for a request past its deadline.
 * Clients read it after the death, to tell whose requests may run again (client/replay.c);
 * gpuxd hands no new channel to a worker that has one.
 */
#define IPC_FAULT_KERNEL 1u   /* a kernel faulted: the worker exits */
#define IPC_FAULT_DEADLINE 2u /* a request ran past its deadline: gpuxd kills the worker */
/* A kernel faulted while several requests that may have been it ran: none is blamed (client_id
 * and req_id 0), and they run again, each alone (IPC_SUBMIT_ALONE). A reader that does not
 * know the value takes it for a death of unknown cause, which runs none of them again. */
#define IPC_FAULT_UNKNOWN 3u
#define IPC_FAULT_WRITING 0x80000000u /* being written: not to be read yet */

struct ipc_fault {
	uint64_t client_id; /* gpuxd's id of the culprit's client; 0: IPC_FAULT_UNKNOWN */
	uint32_t req_id;    /* the culprit (of a CUDA graph: its first request) */
	uint32_t cause;     /* IPC_FAULT_*; 0: none */
};

struct ipc_status_page {
	uint32_t magic;
	uint32_t seq;
	uint32_t ready;
	uint32_t nslots;
	uint32_t gone;     /* set by gpuxd once the worker is dead: its channel leads nowhere */
	uint32_t draining; /* set by the worker once it takes no new work (IPC_DRAIN) */
	struct ipc_stats stats;
	struct ipc_running running[IPC_STATUS_SLOTS];
	uint64_t affinity[IPC_AFFINITY_BITS / 64];
	struct ipc_launch_limits limits; /* so that a client refuses what the device would */
	/* Set by gpuxd: the processes connected to it, of every device and user (0: unknown).
	 * What a client weighs its spinning against (client/wait.c), with `busy`. */
	uint32_t processes;
	/* Set by the worker as it changes, outside the sequence count: its clients with requests
	 * in flight, each of which may be waiting for an answer, up to the CPUs (past them, no
	 * client spins). */
	uint32_t busy;
	struct ipc_fault fault; /* outside the sequence count: ipc_status_fault_*() */
	uint32_t features;      /* IPC_STATUS_*, set once before the worker is ready; 0 before */
	uint32_t reserved_features;
};

/* The worker writes IPC_MARK_DONE for requests sent with IPC_SUBMIT_MARK_DONE. */
#define IPC_STATUS_MARK_DONE 0x1u
/* The worker has marks: each client is offered a page of them (IPC_MARKS) on its channel
 * as it is attached, before anything else the worker sends there but its rings. */
#define IPC_STATUS_MARKS 0x2u

#define IPC_STATUS_PAGE_SIZE 8192u
_Static_assert(sizeof(struct ipc_status_page) <= IPC_STATUS_PAGE_SIZE, "status page");

/*
 * A worker's clients, for gpux top: a row per client channel the worker serves, in a memfd
 * of its own that gpuxd makes for each worker life (--clients-fd) and alone reads: clients,
 * who map the status page, never see it. The worker takes a free row when a channel comes
 * (client_id last), gives it back when it goes (client_id first), and stores each counter as
 * it changes; every field is read and written whole (relaxed atomics), a row as a whole may
 * be a moment's mix, which a view of rates does not mind.
 */
struct ipc_client_row {
	uint64_t client_id;    /* gpuxd's id of the client; 0: the row is free */
	uint64_t requests;     /* its requests that ended here */
	uint64_t shared_bytes; /* its shared segments this worker maps */
	uint64_t device_bytes; /* its device buffers */
	uint64_t inflight;     /* its requests here, queued or running */
	uint64_t reserved[3];
};
_Static_assert(sizeof(struct ipc_client_row) == 64, "a row per cache line");

#define IPC_CLIENT_TABLE_MAGIC 0x31545047u /* "GPT1" */

struct ipc_client_table {
	uint32_t magic;
	uint32_t nrows;
	uint64_t reserved[7];
	struct ipc_client_row rows[IPC_WORKER_CLIENTS_MAX];
};

#define IPC_CLIENT_TABLE_SIZE ((sizeof(struct ipc_client_table) + 4095u) & ~(size_t)4095u)

static inline void ipc_status_write_begin(struct ipc_status_page *p)
{
	__atomic_store_n(&p->seq, p->seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void ipc_status_write_end(struct ipc_status_page *p)
{
	__atomic_store_n(&p->seq, p->seq + 1, __ATOMIC_RELEASE);
}

/* Copy a consistent snapshot; false when the writer kept it busy (try again later). */
static inline bool ipc_status_read(const struct ipc_status_page *p, struct ipc_status_page *ret)
{
	for (int tries = 0; tries < 1000; tries++) {
		uint32_t s0 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);

		if (s0 & 1)
			continue;
		memcpy(ret, (const void *)p, sizeof(*ret));
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&p->seq, __ATOMIC_RELAXED) == s0)
			return ret->magic == IPC_STATUS_MAGIC && ret->nslots <= IPC_STATUS_SLOTS;
	}
	return false;
}

/* Record why the worker dies (the first to write wins); false when it was recorded already. */
static inline bool ipc_status_fault_set(struct ipc_status_page *p, uint64_t client_id,
					uint32_t req_id, uint32_t cause)
{
	uint32_t none = 0;

	if (!__atomic_compare_exchange_n(&p->fault.cause, &none, IPC_FAULT_WRITING, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return false;
	__atomic_store_n(&p->fault.client_id, client_id, __ATOMIC_RELAXED);
	__atomic_store_n(&p->fault.req_id, req_id, __ATOMIC_RELAXED);
	__atomic_store_n(&p->fault.cause, cause, __ATOMIC_RELEASE);
	return true;
}

/* Why the worker dies, when that was recorded (whole); 0 and nothing written otherwise. */
static inline uint32_t ipc_status_fault_get(const struct ipc_status_page *p, struct ipc_fault *ret)
{
	uint32_t cause = __atomic_load_n(&p->fault.cause, __ATOMIC_ACQUIRE);

	if (cause != IPC_FAULT_KERNEL && cause != IPC_FAULT_DEADLINE && cause != IPC_FAULT_UNKNOWN)
		return 0;
	ret->client_id = __atomic_load_n(&p->fault.client_id, __ATOMIC_RELAXED);
	ret->req_id = __atomic_load_n(&p->fault.req_id, __ATOMIC_RELAXED);
	ret->cause = cause;
	return cause;
}

/* The affinity filter's two bit positions for a (uid, content key) pair. */
static inline void ipc_affinity_bits(uint32_t uid, uint64_t key_lo, uint64_t key_hi,
				     uint32_t ret[2])
{
	uint64_t h = (key_lo ^ ((uint64_t)uid * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;

	ret[0] = (uint32_t)(h % IPC_AFFINITY_BITS);
	ret[1] = (uint32_t)((key_hi ^ (h >> 29)) % IPC_AFFINITY_BITS);
}
