/* SPDX-License-Identifier: MIT */
/* ipc/ledger.h: device memory by user over every worker: a shared page the workers write. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "proto.h"

/*
 * What each user other than gpuxd's own and root holds on each device (device buffers and
 * cached inputs), so that a per-user cap holds over all of a user's clients and devices:
 * one worker cannot see what the others hold. gpuxd makes the ledger (a sealed memfd) and
 * hands it to every worker it starts; each worker writes its device's column only, and
 * gpuxd clears a column when that device's worker has died (its memory went with it).
 *
 * A charge is checked and made under one lock (a robust, process-shared mutex: a worker
 * that dies holding it leaves it to the next), so that two workers charging one user at the
 * same moment cannot both pass a cap only one fits under. A credit is an atomic subtraction.
 * A row belongs to a user while any column of it is not zero; an empty row is taken again,
 * under the lock, by the next user who needs one. The `others` row adds up every user's
 * bytes: what all of them together may take is short of the device by gpuxd's owner's
 * reserve.
 */

/* Users holding device memory at once: a client each, at most. */
#define IPC_LEDGER_USERS IPC_WORKER_CLIENTS_MAX
#define IPC_LEDGER_MAGIC 0x4c585047u /* "GPXL" */

struct ipc_ledger_row {
	_Atomic uint32_t uid;
	uint32_t reserved;
	_Atomic uint64_t bytes[IPC_DEVICES_MAX];
};

struct ipc_ledger {
	uint32_t magic;
	uint32_t ndevices;
	pthread_mutex_t lock; /* over charges: robust, process-shared */
	/* A bit per row ever taken: a probe for a user ends at one that never was (and rows
	 * never taken are never touched: the memfd's pages stay unallocated). */
	_Atomic uint64_t taken[IPC_LEDGER_USERS / 64];
	struct ipc_ledger_row others;
	struct ipc_ledger_row users[IPC_LEDGER_USERS];
};

/* What a charge may reach: the user's cap over all devices; all users' together, over all
 * devices (`shared_memory`: the host back end's devices are one machine's memory) or on the
 * device charged. */
struct ipc_ledger_caps {
	uint64_t user;
	uint64_t others;
	bool shared_memory;
};

/* Where a refused charge stood: the user's bytes (or all users') and the cap it met. */
struct ipc_ledger_refusal {
	uint64_t held;
	uint64_t cap;
};

/* gpuxd: a new ledger for ndevices devices, in a sealed memfd (*ret_fd, close-on-exec) mapped
 * at *ret. 0 or -errno. */
int ipc_ledger_new(unsigned ndevices, int *ret_fd, struct ipc_ledger **ret);

/* A worker: the ledger in fd (not taken), mapped writable: checked to be one. 0 or -errno. */
int ipc_ledger_map(int fd, struct ipc_ledger **ret);

void ipc_ledger_unmap(struct ipc_ledger *l);

/*
 * Charge `bytes` to user uid on device dev: *ret_row is the row to credit them back to.
 * -EDQUOT: past the user's cap; -ENOSPC: past all users' cap (gpuxd's owner's reserve);
 * *ret_why says where it stood. -EUSERS: no row free; -ETIMEDOUT: the lock was not had
 * within a second.
 */
int ipc_ledger_charge(struct ipc_ledger *l, uint32_t uid, unsigned dev, uint64_t bytes,
		      const struct ipc_ledger_caps *caps, unsigned *ret_row,
		      struct ipc_ledger_refusal *ret_why);

/* Give back bytes charged on device dev to row `row`. Any thread, no lock. */
void ipc_ledger_credit(struct ipc_ledger *l, unsigned row, unsigned dev, uint64_t bytes);

/* gpuxd: device dev's worker is dead and its memory with it: its column is cleared. */
void ipc_ledger_forget_device(struct ipc_ledger *l, unsigned dev);

/* What user uid holds on all devices together (0: no row). */
uint64_t ipc_ledger_user_bytes(struct ipc_ledger *l, uint32_t uid);
