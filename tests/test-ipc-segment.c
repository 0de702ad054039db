/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-segment.c: memfd segments: seals, checks on received fds, never SIGBUS. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "macro.h"
#include "segment.h"
#include "status.h"

#define SEG_SIZE (3 * 4096 + 5)

static int seals_of(int fd)
{
	int seals = fcntl(fd, F_GET_SEALS);

	assert_true(seals >= 0);
	return seals;
}

static bool fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* A peer's view of our segment: its own fd to the same memfd. */
static int dup_fd(int fd)
{
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);

	assert_true(d >= 0);
	return d;
}

/* Attach must refuse fd with `error`, close it, and leave *ret alone. */
static void assert_attach_refused(int fd, uint64_t size, bool frozen, int error)
{
	struct ipc_segment s = { .fd = -7 };
	int before = test_fd_count();

	assert_int_equal(ipc_segment_attach_take_fd(fd, size, frozen, &s), error);
	assert_false(fd_is_open(fd));
	assert_int_equal(s.fd, -7);
	assert_null(s.addr);
	assert_int_equal(test_fd_count(), before - 1);
}

static void test_segment_create_is_sealed_and_sized(void **state)
{
	int before = test_fd_count();
	struct stat st;
	int fd = -1;

	assert_int_equal(ipc_segment_create("test", SEG_SIZE, &fd), 0);
	assert_true(test_fd_cloexec(fd));
	assert_int_equal(seals_of(fd), IPC_SEGMENT_SEALS);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, SEG_SIZE);
	/* Allocated at once, so that touching it later cannot fail for lack of memory. */
	assert_true((uint64_t)st.st_blocks * 512 >= SEG_SIZE);
	assert_int_equal(ftruncate(fd, 4096), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(ftruncate(fd, 2 * SEG_SIZE), -1);
	assert_int_equal(errno, EPERM);
	(void)close(fd);
	assert_no_fd_leak(before);
}

static void test_segment_create_rejects_bad_size(void **state)
{
	int before = test_fd_count();
	int fd = -7;

	assert_int_equal(ipc_segment_create("test", 0, &fd), -EINVAL);
	assert_int_equal(ipc_segment_create("test", (uint64_t)INT64_MAX + 1, &fd), -EINVAL);
	assert_int_equal(ipc_segment_create("test", UINT64_MAX, &fd), -EINVAL);
	assert_int_equal(fd, -7);
	assert_no_fd_leak(before);
}

static void test_segment_map_write_read(void **state)
{
	static uint8_t pattern[SEG_SIZE];
	int before = test_fd_count();
	struct ipc_segment peer = IPC_SEGMENT_INIT;
	void *owner;
	int fd;

	test_random_fill(pattern, sizeof(pattern), 3);
	assert_int_equal(ipc_segment_create("test", SEG_SIZE, &fd), 0);
	assert_int_equal(ipc_segment_map(fd, SEG_SIZE, true, &owner), 0);
	memcpy(owner, pattern, SEG_SIZE);

	assert_int_equal(ipc_segment_attach_take_fd(dup_fd(fd), SEG_SIZE, false, &peer), 0);
	assert_true(test_same_file(peer.fd, fd));
	assert_int_equal(peer.size, SEG_SIZE);
	assert_false(peer.frozen);
	assert_memory_equal(peer.addr, pattern, SEG_SIZE);

	/* Both sides see each other's writes: one memory. */
	((uint8_t *)peer.addr)[SEG_SIZE - 1] ^= 0xff;
	assert_int_equal(((uint8_t *)owner)[SEG_SIZE - 1], pattern[SEG_SIZE - 1] ^ 0xff);

	ipc_segment_done(&peer);
	assert_null(peer.addr);
	assert_int_equal(peer.fd, -1);
	assert_int_equal(munmap(owner, SEG_SIZE), 0);
	(void)close(fd);
	assert_no_fd_leak(before);
}

static void test_segment_map_rejects_zero_size(void **state)
{
	void *p = (void *)1;
	int fd;

	assert_int_equal(ipc_segment_create("test", 4096, &fd), 0);
	assert_int_equal(ipc_segment_map(fd, 0, true, &p), -EINVAL);
	assert_ptr_equal(p, (void *)1);
	(void)close(fd);
}

static void test_segment_done_accepts_init(void **state)
{
	struct ipc_segment s = IPC_SEGMENT_INIT;

	ipc_segment_done(&s);
	ipc_segment_done(&s);
	assert_int_equal(s.fd, -1);
	assert_null(s.addr);
}

static void test_segment_check_refuses_unsealed_memfd(void **state)
{
	int before = test_fd_count();
	int plain = memfd_create("plain", MFD_CLOEXEC);
	int sealable = memfd_create("sealable", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int grow_only = memfd_create("grow-only", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	assert_true(plain >= 0 && sealable >= 0 && grow_only >= 0);
	assert_int_equal(ftruncate(plain, 4096), 0);
	assert_int_equal(ftruncate(sealable, 4096), 0);
	assert_int_equal(ftruncate(grow_only, 4096), 0);
	assert_int_equal(fcntl(grow_only, F_ADD_SEALS, F_SEAL_GROW), 0);

	assert_int_equal(ipc_segment_check(plain, 4096, false), -EBADF);
	assert_int_equal(ipc_segment_check(sealable, 4096, false), -EBADF);
	assert_int_equal(ipc_segment_check(grow_only, 4096, false), -EBADF);
	assert_attach_refused(plain, 4096, false, -EBADF);
	assert_attach_refused(sealable, 4096, false, -EBADF);
	assert_attach_refused(grow_only, 4096, false, -EBADF);
	assert_no_fd_leak(before);
}

static void test_segment_check_refuses_shm_open(void **state)
{
	int before = test_fd_count();
	char name[64];
	int fd;

	(void)snprintf(name, sizeof(name), "/gpux-test-%d", (int)getpid());
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		skip();
	assert_int_equal(shm_unlink(name), 0);
	assert_int_equal(ftruncate(fd, 4096), 0);
	assert_int_equal(ipc_segment_check(fd, 4096, false), -EBADF);
	assert_attach_refused(fd, 4096, false, -EBADF);
	assert_no_fd_leak(before);
}

static void test_segment_check_refuses_regular_file(void **state)
{
	int before = test_fd_count();
	char *dir = test_mkdtemp();
	char *path;
	int fd;

	assert_true(asprintf(&path, "%s/file", dir) > 0);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4096), 0);
	assert_int_equal(ipc_segment_check(fd, 4096, false), -EBADF);
	assert_int_equal(ipc_segment_check(fd, 4096, true), -EBADF);
	assert_attach_refused(fd, 4096, false, -EBADF);
	free(path);
	test_rmtree(dir);
	free(dir);
	assert_no_fd_leak(before);
}

static void test_segment_check_refuses_other_files(void **state)
{
	int before = test_fd_count();
	int p[2], dir;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(ipc_segment_check(p[0], 1, false), -EBADF);
	assert_int_equal(ipc_segment_check(p[1], 1, false), -EBADF);
	assert_attach_refused(p[0], 1, false, -EBADF);
	assert_attach_refused(p[1], 1, true, -EBADF);

	dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dir >= 0);
	assert_attach_refused(dir, 1, false, -EBADF);

	/* A closed fd: fstat's own error. */
	assert_int_equal(ipc_segment_check(p[0], 1, false), -EBADF);
	assert_no_fd_leak(before);
}

static void test_segment_check_refuses_short_memfd(void **state)
{
	int before = test_fd_count();
	int fd;

	assert_int_equal(ipc_segment_create("test", 4096, &fd), 0);
	assert_int_equal(ipc_segment_check(fd, 1, false), 0);
	assert_int_equal(ipc_segment_check(fd, 4096, false), 0);
	assert_int_equal(ipc_segment_check(fd, 4097, false), -ENOSPC);
	assert_int_equal(ipc_segment_check(fd, UINT64_MAX, false), -ENOSPC);
	assert_int_equal(ipc_segment_check(fd, 0, false), -EINVAL);
	assert_attach_refused(dup_fd(fd), 4097, false, -ENOSPC);
	assert_attach_refused(dup_fd(fd), 0, false, -EINVAL);
	(void)close(fd);
	assert_no_fd_leak(before);
}

static void test_segment_check_refuses_frozen_without_write_seal(void **state)
{
	int before = test_fd_count();
	int fd;

	assert_int_equal(ipc_segment_create("test", 4096, &fd), 0);
	assert_int_equal(ipc_segment_check(fd, 4096, true), -EPERM);
	assert_attach_refused(dup_fd(fd), 4096, true, -EPERM);
	(void)close(fd);
	assert_no_fd_leak(before);
}

static void test_segment_attach_frozen_is_read_only(void **state)
{
	int before = test_fd_count();
	struct ipc_segment peer = IPC_SEGMENT_INIT;
	void *owner;
	int fd;

	assert_int_equal(ipc_segment_create("test", SEG_SIZE, &fd), 0);
	assert_int_equal(ipc_segment_map(fd, SEG_SIZE, true, &owner), 0);
	memset(owner, 0x5a, SEG_SIZE);
	assert_int_equal(munmap(owner, SEG_SIZE), 0);
	assert_int_equal(ipc_segment_seal_write(fd), 0);
	assert_int_equal(seals_of(fd), IPC_SEGMENT_SEALS | F_SEAL_WRITE | F_SEAL_SEAL);

	assert_int_equal(ipc_segment_check(fd, SEG_SIZE, true), 0);
	assert_int_equal(ipc_segment_attach_take_fd(dup_fd(fd), SEG_SIZE, true, &peer), 0);
	assert_true(peer.frozen);
	assert_int_equal(((uint8_t *)peer.addr)[0], 0x5a);
	assert_int_equal(((uint8_t *)peer.addr)[SEG_SIZE - 1], 0x5a);
	/* Read-only for good: the mapping cannot be made writable. */
	assert_int_equal(mprotect(peer.addr, SEG_SIZE, PROT_READ | PROT_WRITE), -1);
	assert_int_equal(errno, EACCES);
	/* And nobody can change the bytes any more, not even their owner. */
	assert_int_equal(ipc_segment_map(fd, SEG_SIZE, true, &owner), -EPERM);
	assert_int_equal(pwrite(fd, "x", 1, 0), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(ipc_segment_seal_write(fd), -EPERM);
	ipc_segment_done(&peer);
	(void)close(fd);
	assert_no_fd_leak(before);
}

static void test_segment_attach_write_sealed_unfrozen_fails(void **state)
{
	int before = test_fd_count();
	int fd;

	assert_int_equal(ipc_segment_create("test", 4096, &fd), 0);
	assert_int_equal(ipc_segment_seal_write(fd), 0);
	/* Claimed writable, but the bytes are sealed: the writable mapping is refused. */
	assert_attach_refused(dup_fd(fd), 4096, false, -EPERM);
	(void)close(fd);
	assert_no_fd_leak(before);
}

static void test_segment_seal_write_busy_while_mapped(void **state)
{
	int before = test_fd_count();
	void *p;
	int fd;

	assert_int_equal(ipc_segment_create("test", SEG_SIZE, &fd), 0);
	assert_int_equal(ipc_segment_map(fd, SEG_SIZE, true, &p), 0);
	assert_int_equal(ipc_segment_seal_write(fd), -EBUSY);
	assert_int_equal(seals_of(fd), IPC_SEGMENT_SEALS);
	assert_int_equal(munmap(p, SEG_SIZE), 0);
	assert_int_equal(ipc_segment_seal_write(fd), 0);
	(void)close(fd);
	assert_no_fd_leak(before);
}

static void test_segment_peer_cannot_shrink(void **state)
{
	int before = test_fd_count();
	struct ipc_segment peer = IPC_SEGMENT_INIT;
	volatile uint8_t *p;
	unsigned sum = 0;
	void *owner;
	int fd;

	assert_int_equal(ipc_segment_create("test", SEG_SIZE, &fd), 0);
	assert_int_equal(ipc_segment_map(fd, SEG_SIZE, true, &owner), 0);
	memset(owner, 1, SEG_SIZE);
	assert_int_equal(ipc_segment_attach_take_fd(dup_fd(fd), SEG_SIZE, false, &peer), 0);

	/* The owner turns hostile: it cannot take the pages away from under the peer. */
	assert_int_equal(ftruncate(fd, 0), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(ftruncate(fd, 4096), -1);
	assert_int_equal(errno, EPERM);
	p = peer.addr;
	for (size_t i = 0; i < SEG_SIZE; i++)
		sum += p[i];
	assert_int_equal(sum, SEG_SIZE);

	/* It may zero them (punching a hole), which is no SIGBUS either. */
	assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 8192), 0);
	sum = 0;
	for (size_t i = 0; i < SEG_SIZE; i++)
		sum += p[i];
	assert_int_equal(sum, SEG_SIZE - 8192);
	p[SEG_SIZE - 1] = 2;

	ipc_segment_done(&peer);
	assert_int_equal(munmap(owner, SEG_SIZE), 0);
	(void)close(fd);
	assert_no_fd_leak(before);
}

/* ---- the status page (ipc/status.h) lives in a segment ---- */

static void test_segment_status_page_snapshot(void **state)
{
	int before = test_fd_count();
	struct ipc_status_page *w, snap;
	const struct ipc_status_page *r;
	void *ro;
	int fd;

	assert_int_equal(ipc_segment_create("status", IPC_STATUS_PAGE_SIZE, &fd), 0);
	assert_int_equal(ipc_segment_map(fd, IPC_STATUS_PAGE_SIZE, true, (void **)&w), 0);
	assert_int_equal(ipc_segment_map(fd, IPC_STATUS_PAGE_SIZE, false, &ro), 0);
	r = ro;

	/* Not initialised yet: no magic. */
	assert_false(ipc_status_read(r, &snap));

	ipc_status_write_begin(w);
	w->magic = IPC_STATUS_MAGIC;
	w->nslots = 2;
	w->running[1] = (struct ipc_running){ 42, 7, 1, 100, 200 };
	/* In the middle of a change: no snapshot. */
	assert_false(ipc_status_read(r, &snap));
	ipc_status_write_end(w);
	assert_int_equal(w->seq % 2, 0);

	assert_true(ipc_status_read(r, &snap));
	assert_int_equal(snap.nslots, 2);
	assert_int_equal(snap.running[1].client_id, 42);
	assert_int_equal(snap.running[1].deadline_ns, 200);

	ipc_status_write_begin(w);
	w->nslots = IPC_STATUS_SLOTS + 1;
	ipc_status_write_end(w);
	assert_false(ipc_status_read(r, &snap));

	assert_int_equal(munmap(w, IPC_STATUS_PAGE_SIZE), 0);
	assert_int_equal(munmap(ro, IPC_STATUS_PAGE_SIZE), 0);
	(void)close(fd);
	assert_no_fd_leak(before);
}

static void test_segment_status_affinity_bits(void **state)
{
	unsigned differ = 0;

	for (uint64_t i = 0; i < 1000; i++) {
		uint32_t a[2], b[2], c[2];
		uint64_t key[2];

		test_random_fill(key, sizeof(key), i);
		ipc_affinity_bits(1000, key[0], key[1], a);
		ipc_affinity_bits(1000, key[0], key[1], b);
		ipc_affinity_bits(1001, key[0], key[1], c);
		assert_true(a[0] < IPC_AFFINITY_BITS && a[1] < IPC_AFFINITY_BITS);
		assert_memory_equal(a, b, sizeof(a));
		differ += a[0] != c[0] || a[1] != c[1];
	}
	/* Another uid lands elsewhere (almost always): entries are never shared between uids. */
	assert_true(differ > 990);
}

static void test_blob_round_trip_and_refusals(void **state)
{
	static const char text[] = "extern \"C\" __global__ void k() {}";
	int before = test_fd_count(), fd, plain;
	uint8_t *p = NULL;
	size_t len = 0;

	assert_int_equal(ipc_blob_new("test-blob", text, sizeof(text) - 1, &fd), 0);
	assert_true(fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE);
	assert_int_equal(ipc_blob_read(fd, 0, 4096, &p, &len), 0);
	assert_int_equal(len, sizeof(text) - 1);
	assert_string_equal((char *)p, text);
	free(p);
	assert_int_equal(ipc_blob_read(fd, 8, 4096, &p, &len), 0);
	assert_int_equal(len, 8);
	assert_int_equal(p[8], 0);
	free(p);
	/* Longer than it is, or than the caller takes. */
	assert_int_equal(ipc_blob_read(fd, sizeof(text), 4096, &p, &len), -EBADF);
	assert_int_equal(ipc_blob_read(fd, 0, 8, &p, &len), -EBADF);
	(void)close(fd);

	/* A memfd its sender could still change is refused. */
	plain = memfd_create("test-unsealed", MFD_CLOEXEC);
	assert_true(plain >= 0);
	assert_int_equal(write(plain, text, sizeof(text)), (ssize_t)sizeof(text));
	assert_int_equal(ipc_blob_read(plain, 0, 4096, &p, &len), -EBADF);
	(void)close(plain);
	assert_int_equal(test_fd_count(), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_segment_create_is_sealed_and_sized),
		cmocka_unit_test(test_segment_create_rejects_bad_size),
		cmocka_unit_test(test_segment_map_write_read),
		cmocka_unit_test(test_segment_map_rejects_zero_size),
		cmocka_unit_test(test_segment_done_accepts_init),
		cmocka_unit_test(test_segment_check_refuses_unsealed_memfd),
		cmocka_unit_test(test_segment_check_refuses_shm_open),
		cmocka_unit_test(test_segment_check_refuses_regular_file),
		cmocka_unit_test(test_segment_check_refuses_other_files),
		cmocka_unit_test(test_segment_check_refuses_short_memfd),
		cmocka_unit_test(test_segment_check_refuses_frozen_without_write_seal),
		cmocka_unit_test(test_segment_attach_frozen_is_read_only),
		cmocka_unit_test(test_segment_attach_write_sealed_unfrozen_fails),
		cmocka_unit_test(test_segment_seal_write_busy_while_mapped),
		cmocka_unit_test(test_segment_peer_cannot_shrink),
		cmocka_unit_test(test_segment_status_page_snapshot),
		cmocka_unit_test(test_segment_status_affinity_bits),
		cmocka_unit_test(test_blob_round_trip_and_refusals),
	};

	return cmocka_run_group_tests_name("ipc-segment", tests, NULL, NULL);
}
