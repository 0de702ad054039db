/* SPDX-License-Identifier: MIT */
/* ipc/segment.h: shared-memory segments (sealed memfds) and their safe attachment. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The seals every segment carries before it is sent: its size can never change. */
#define IPC_SEGMENT_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

struct ipc_segment {
	int fd;
	void *addr;
	uint64_t size;
	bool frozen; /* sealed against writing, mapped read-only */
};

/* clang-format takes a braced initializer in a macro for a function's body: kept as written. */
/* clang-format off */
#define IPC_SEGMENT_INIT { .fd = -1, .addr = NULL, .size = 0, .frozen = false }
/* clang-format on */

/*
 * Create a memfd of `size` bytes, named `name` (for /proc), close-on-exec, its memory
 * allocated at once (posix_fallocate: no SIGBUS later for lack of memory) and sealed
 * against shrinking and growing. On success *ret_fd owns it.
 */
int ipc_segment_create(const char *name, uint64_t size, int *ret_fd);

/*
 * Seal a segment's bytes against writing, and against further seals. Fails with -EBUSY
 * while any writable shared mapping of it exists, in any process.
 */
int ipc_segment_seal_write(int fd);

/*
 * Check a segment fd received from a peer before mapping it: a regular memfd on shmem (not
 * hugetlbfs) sealed at least against shrinking (and against writing when `frozen`), at
 * least `size` bytes long.
 * Returns 0, or -EBADF (not a memfd or not sealed: a shm_open file, a pipe, a plain file),
 * -ENOSPC (shorter than claimed), -EPERM (frozen claimed but writes are not sealed).
 */
int ipc_segment_check(int fd, uint64_t size, bool frozen);

/*
 * Check and map a received segment: read-write, or read-only when frozen. On success the
 * segment owns fd; on failure fd is closed. Access never raises SIGBUS, whatever the peer
 * does to its own fd afterwards.
 */
int ipc_segment_attach_take_fd(int fd, uint64_t size, bool frozen, struct ipc_segment *ret);

/* Map a segment this process created (the owner's side). The fd stays the caller's. */
int ipc_segment_map(int fd, uint64_t size, bool writable, void **ret_addr);

/* Unmap and close; accepts a segment left at IPC_SEGMENT_INIT. */
void ipc_segment_done(struct ipc_segment *s);

/*
 * Blobs: bytes handed over once (large module code, a compiled image), in a memfd sealed
 * against every change. ipc_blob_new() writes and seals one; *ret_fd owns it.
 */
int ipc_blob_new(const char *name, const void *data, size_t len, int *ret_fd);

/*
 * Read `len` bytes (0: all of it, at most `max`) of a blob received from a peer, into a new
 * buffer with a NUL after them. Refuses (-EBADF) anything but a regular file sealed against
 * writing and shrinking, at least `len` long.
 */
int ipc_blob_read(int fd, size_t len, size_t max, uint8_t **ret, size_t *ret_len);
