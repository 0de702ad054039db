/* SPDX-License-Identifier: MIT */
/* ipc/segment.c: memfd segments, sealed so that a peer can never make us take SIGBUS. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "macro.h"
#include "segment.h"

int ipc_segment_create(const char *name, uint64_t size, int *ret_fd)
{
	_cleanup_(closep) int fd = -1;
	int r;

	if (size == 0 || size > (uint64_t)INT64_MAX)
		return -EINVAL;
	fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	r = posix_fallocate(fd, 0, (off_t)size);
	if (r != 0)
		return -r;
	if (fcntl(fd, F_ADD_SEALS, IPC_SEGMENT_SEALS) < 0)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

int ipc_segment_seal_write(int fd)
{
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		return -errno;
	return 0;
}

int ipc_segment_check(int fd, uint64_t size, bool frozen)
{
	struct stat st;
	int seals;

	if (size == 0 || size > SIZE_MAX)
		return -EINVAL;
	struct statfs sfs;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EBADF;
	/* A hugetlbfs memfd takes seals too, but its pages can run out under a mapping
	 * (SIGBUS): only shmem, which memfd_create() gives without MFD_HUGETLB. */
	if (fstatfs(fd, &sfs) < 0 || sfs.f_type != TMPFS_MAGIC)
		return -EBADF;
	/* Only memfds (and hugetlbfs) answer F_GET_SEALS; a shm_open or O_TMPFILE file says
	 * F_SEAL_SEAL alone, which the check below refuses as well. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return -EBADF;
	if ((seals & F_SEAL_SHRINK) == 0)
		return -EBADF;
	if (frozen && (seals & F_SEAL_WRITE) == 0)
		return -EPERM;
	if (st.st_size < 0 || (uint64_t)st.st_size < size)
		return -ENOSPC;
	return 0;
}

int ipc_segment_map(int fd, uint64_t size, bool writable, void **ret_addr)
{
	void *p;

	if (size == 0 || size > SIZE_MAX)
		return -EINVAL;
	p = mmap(NULL, (size_t)size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*ret_addr = p;
	return 0;
}

int ipc_segment_attach_take_fd(int fd, uint64_t size, bool frozen, struct ipc_segment *ret)
{
	_cleanup_(closep) int owned = fd;
	void *addr;
	int r;

	r = ipc_segment_check(owned, size, frozen);
	if (r < 0)
		return r;
	r = ipc_segment_map(owned, size, !frozen, &addr);
	if (r < 0)
		return r;
	*ret = (struct ipc_segment){
		.fd = TAKE_FD(owned),
		.addr = addr,
		.size = size,
		.frozen = frozen,
	};
	return 0;
}

void ipc_segment_done(struct ipc_segment *s)
{
	if (s->addr)
		(void)munmap(s->addr, (size_t)s->size);
	s->addr = NULL;
	s->fd = safe_close(s->fd);
	s->size = 0;
}

int ipc_blob_new(const char *name, const void *data, size_t len, int *ret_fd)
{
	_cleanup_(closep) int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int r;

	if (fd < 0)
		return -errno;
	r = write_all(fd, data, len);
	if (r < 0)
		return r;
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

int ipc_blob_read(int fd, size_t len, size_t max, uint8_t **ret, size_t *ret_len)
{
	int seals = fcntl(fd, F_GET_SEALS);
	struct stat st;
	uint8_t *p;

	if (seals < 0 || (seals & (F_SEAL_WRITE | F_SEAL_SHRINK)) != (F_SEAL_WRITE | F_SEAL_SHRINK))
		return -EBADF;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return -EBADF;
	if (len == 0)
		len = (size_t)st.st_size;
	if ((uint64_t)st.st_size < len || len > max || len == 0)
		return -EBADF;
	p = malloc(len + 1);
	if (!p)
		return -ENOMEM;
	if (pread(fd, p, len, 0) != (ssize_t)len) {
		free(p);
		return -EIO;
	}
	p[len] = 0;
	*ret = p;
	if (ret_len)
		*ret_len = len;
	return 0;
}
