/* SPDX-License-Identifier: MIT */
/* basic/macro.h: small helpers every part of gpux uses (cleanup attributes, clocks, sizes). */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define ALIGN_UP(x, a) (((x) + ((a)-1)) & ~((__typeof__(x))(a)-1))
#define KiB (1024ULL)
#define MiB (1024ULL * KiB)
#define GiB (1024ULL * MiB)
#define NSEC_PER_USEC 1000ULL
#define NSEC_PER_MSEC 1000000ULL
#define NSEC_PER_SEC 1000000000ULL

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)

static inline void freep(void *p)
{
	free(*(void **)p);
}

/* Close an fd, keeping errno, and accept -1: for cleanup paths. */
static inline int safe_close(int fd)
{
	if (fd >= 0) {
		int saved = errno;
		(void)close(fd);
		errno = saved;
	}
	return -1;
}

static inline void closep(int *fd)
{
	*fd = safe_close(*fd);
}

/* Hand an owned value out of a cleanup-managed local: the local is left empty. */
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _fd = (fd);                                                                    \
		(fd) = -1;                                                                         \
		_fd;                                                                               \
	})
#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _p = (p);                                                            \
		(p) = NULL;                                                                        \
		_p;                                                                                \
	})

/* Lists linked both ways through members `prev` and `next`, from a head pointer: one list's
 * item is put first, or taken out (its own links cleared). */
#define LIST_PREPEND(head, item)                                                                   \
	do {                                                                                       \
		__typeof__(item) _item = (item);                                                   \
		_item->prev = NULL;                                                                \
		_item->next = (head);                                                              \
		if (_item->next)                                                                   \
			_item->next->prev = _item;                                                 \
		(head) = _item;                                                                    \
	} while (0)
#define LIST_REMOVE(head, item)                                                                    \
	do {                                                                                       \
		__typeof__(item) _item = (item);                                                   \
		if (_item->prev)                                                                   \
			_item->prev->next = _item->next;                                           \
		else                                                                               \
			(head) = _item->next;                                                      \
		if (_item->next)                                                                   \
			_item->next->prev = _item->prev;                                           \
		_item->prev = _item->next = NULL;                                                  \
	} while (0)

static inline uint64_t now_ns(clockid_t clock)
{
	struct timespec ts;
	(void)clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mono_ns(void)
{
	return now_ns(CLOCK_MONOTONIC);
}

/* Write all of buf, through short writes and EINTR: 0 or -errno. */
static inline int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* a + b, or false when it overflows. */
static inline int add_ok(uint64_t a, uint64_t b, uint64_t *ret)
{
	return !__builtin_add_overflow(a, b, ret);
}

/* An offset and length that lie inside [0, size). */
static inline int range_ok(uint64_t off, uint64_t len, uint64_t size)
{
	uint64_t end;
	return add_ok(off, len, &end) && end <= size;
}
