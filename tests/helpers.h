/* SPDX-License-Identifier: MIT */
/* tests/helpers.h: what gpux's cmocka tests share: fd accounting, messages, loops, temp dirs. */
#pragma once

/* cmocka.h needs these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>

#include "loop.h"
#include "proc.h"
#include "proto.h"

/* ---- file descriptors ---- */

/* The number of fds open in this process, not counting the one used to count them. */
int test_fd_count(void);

/* The number of fds open in process pid (this user's, or any as root). Asserts. */
int test_fd_count_of(pid_t pid);

/*
 * Fail the running test, at the caller's line, when the number of open fds is not `before`
 * (a test_fd_count() taken at its start); the open fds are listed to show what leaked.
 */
#define assert_no_fd_leak(before) test_assert_fd_count_at((before), __FILE__, __LINE__)
void test_assert_fd_count_at(int before, const char *file, int line);

/*
 * Wait for child pid and fail the running test, at the caller's line, unless it exited with
 * status 0; how it ended is printed (a child's exit code often says which of its checks failed).
 */
#define assert_child_ok(pid) test_assert_child_ok_at((pid), __FILE__, __LINE__)
void test_assert_child_ok_at(pid_t pid, const char *file, int line);

/* Whether two fds refer to the same file (st_dev and st_ino). */
bool test_same_file(int a, int b);

/* Whether fd is open and close-on-exec. */
bool test_fd_cloexec(int fd);

/* Open n distinct files (close-on-exec memfds) into fds: something to pass around. Asserts. */
void test_open_files(int *fds, unsigned n);

/* Close n fds and set them to -1. */
void test_close_all(int *fds, unsigned n);

/* ---- messages ---- */

/*
 * Encode a message of `type` whose payload is `len` bytes of `payload`, announcing nfds fds,
 * into buf (IPC_MSG_MAX bytes). Asserts success and returns the message's length. The
 * payload need not be valid for the type: ipc_msg_parse() does not look at it.
 */
size_t test_msg_make(void *buf, uint16_t type, uint32_t id, unsigned nfds, const void *payload,
		     size_t len);

/* Read or overwrite the header at the start of a message (which need not be aligned). */
struct ipc_hdr test_hdr_get(const void *buf);
void test_hdr_set(void *buf, const struct ipc_hdr *h);

/* A sample of a valid message, as test_msg_sample() builds it. */
struct test_sample {
	const char *name; /* short, usable as a file name: "hello", "mod-load-fd" */
	uint16_t type;
	unsigned nfds; /* fds the message must travel with */
	size_t len;    /* bytes, header included */
};

/*
 * Build valid sample message number i into buf (cap bytes; IPC_MSG_MAX is always enough).
 * Samples cover every message type, several forms of some (a DEVICE with and without its
 * channel, inline and memfd code, a copy each way). Returns false when there is no sample i:
 * iterate from 0.
 */
bool test_msg_sample(unsigned i, void *buf, size_t cap, struct test_sample *ret);

/* ---- event loops ---- */

/* Whether an io_uring loop can be made here (not refused by seccomp, sysctl or gVisor). */
bool test_uring_available(void);

/*
 * Run loop rounds until *count reaches want or timeout_ms passes, so that a broken test
 * fails instead of hanging. Asserts that every round succeeds. Returns *count >= want.
 */
bool test_loop_until(struct ipc_loop *l, const unsigned *count, unsigned want, unsigned timeout_ms);

/* Run loop rounds for ms milliseconds: for checking that something does not happen. */
void test_loop_spin(struct ipc_loop *l, unsigned ms);

/*
 * Receive one record on sock, a peer of something the loop serves, running loop rounds while
 * waiting (at most timeout_ms, then -EAGAIN). As ipc_channel_recv() otherwise.
 */
ssize_t test_loop_recv(struct ipc_loop *l, int sock, void *buf, size_t cap, int *fds,
		       unsigned *ret_nfds, unsigned timeout_ms);

/* ---- files and sockets ---- */

/* A whole file in a buffer of exactly its size (ASan sees any read past the end), or NULL;
 * free() it. Asserts nothing: a helper process may call it too. */
uint8_t *test_read_file(const char *path, size_t *ret_len);

/* A new empty directory under $TMPDIR (or /tmp), mode 0700; free() the path. Asserts. */
char *test_mkdtemp(void);

/* Remove a directory tree (what test_mkdtemp() gave, with what the test put in it). */
void test_rmtree(const char *path);

/* A SOCK_SEQPACKET socket listening at path, close-on-exec. Asserts. */
int test_listen_unix(const char *path);

/* A SOCK_SEQPACKET socket connected to path, close-on-exec; -errno on failure. */
int test_connect_unix(const char *path);

/*
 * sendmsg() one record with any number of fds (up to TEST_RAW_FDS_MAX), as a hostile peer
 * could, bypassing ipc_channel_send()'s checks. Asserts that the record went whole.
 */
#define TEST_RAW_FDS_MAX 16u
void test_send_raw(int sock, const void *buf, size_t len, const int *fds, unsigned nfds);

/* ipc_channel_recv() that waits at most timeout_ms for a record, then gives -EAGAIN. */
ssize_t test_recv_wait(int sock, void *buf, size_t cap, int *fds, unsigned *ret_nfds,
		       unsigned timeout_ms);

/* splitmix64: the next of a pseudo-random sequence, the same for the same seed. */
uint64_t test_random_next(uint64_t *seed);

/* Fill buf with len pseudo-random bytes, the same for the same seed (test_random_next). */
void test_random_fill(void *buf, size_t len, uint64_t seed);
