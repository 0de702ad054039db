/* SPDX-License-Identifier: MIT */
/* worker/core/populate.h: a segment's pages faulted in by several threads at once, before it is registered. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Helper threads at most (the thread that asks works too). */
#define WRK_POPULATE_HELPERS 3u
/* A helper's piece of the work: a segment of this size or less is faulted in by the thread
 * that asks, alone. */
#define WRK_POPULATE_CHUNK (2u << 20)

struct wrk_populate {
	pthread_t threads[WRK_POPULATE_HELPERS];
	unsigned nthreads;
	pthread_mutex_t caller; /* one segment at a time */
	pthread_mutex_t lock;
	pthread_cond_t work, idle;
	/* The segment being faulted in (addr NULL: none), and where its next chunk begins. */
	uint8_t *addr;
	size_t size, next;
	int advice;
	unsigned busy;   /* chunks being faulted in now */
	uint64_t helped; /* chunks the helpers took, ever */
	bool stop;
};

/* Start `helpers` helper threads (at most WRK_POPULATE_HELPERS; 0: the asking thread does it
 * all). Returns 0 or -errno; p is usable (without helpers) either way, and stopped by
 * wrk_populate_stop(). */
int wrk_populate_start(struct wrk_populate *p, unsigned helpers);
void wrk_populate_stop(struct wrk_populate *p);

/*
 * Fault in the pages of [addr, addr + size), writable ones (MADV_POPULATE_WRITE) or read-only
 * ones (MADV_POPULATE_READ), with the helpers; back when all are in, or could not be (a
 * kernel older than 5.14 has no such advice: then whoever touches them faults them in).
 * Before wrk_populate_start() or after wrk_populate_stop(), the calling thread does it alone.
 */
void wrk_populate(struct wrk_populate *p, void *addr, size_t size, bool write);
