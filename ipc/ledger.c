/* SPDX-License-Identifier: MIT */
/* ipc/ledger.c: device memory by user over every worker: a shared page the workers write. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ledger.h"
#include "macro.h"

#define LOCK_WAIT_S 1

int ipc_ledger_new(unsigned ndevices, int *ret_fd, struct ipc_ledger **ret)
{
	_cleanup_(closep) int fd = -1;
	pthread_mutexattr_t attr;
	struct ipc_ledger *l;
	int r;

	if (ndevices == 0 || ndevices > IPC_DEVICES_MAX)
		return -EINVAL;
	fd = memfd_create("gpux-ledger", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, sizeof(*l)) < 0)
		return -errno;
	l = mmap(NULL, sizeof(*l), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (l == MAP_FAILED)
		return -errno;
	l->magic = IPC_LEDGER_MAGIC;
	l->ndevices = ndevices;
	r = pthread_mutexattr_init(&attr);
	if (r == 0)
		r = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	if (r == 0)
		r = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	if (r == 0)
		r = pthread_mutex_init(&l->lock, &attr);
	(void)pthread_mutexattr_destroy(&attr);
	if (r == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		r = errno;
	if (r != 0) {
		(void)munmap(l, sizeof(*l));
		return -r;
	}
	*ret_fd = TAKE_FD(fd);
	*ret = l;
	return 0;
}

int ipc_ledger_map(int fd, struct ipc_ledger **ret)
{
	struct ipc_ledger *l;
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (fstat(fd, &st) < 0 || seals < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (size_t)st.st_size != sizeof(*l) || !(seals & F_SEAL_SHRINK))
		return -EINVAL;
	l = mmap(NULL, sizeof(*l), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (l == MAP_FAILED)
		return -errno;
	if (l->magic != IPC_LEDGER_MAGIC || l->ndevices == 0 || l->ndevices > IPC_DEVICES_MAX) {
		(void)munmap(l, sizeof(*l));
		return -EINVAL;
	}
	*ret = l;
	return 0;
}

void ipc_ledger_unmap(struct ipc_ledger *l)
{
	if (l)
		(void)munmap(l, sizeof(*l));
}

static uint64_t row_total(const struct ipc_ledger *l, const struct ipc_ledger_row *row)
{
	uint64_t n = 0;

	for (unsigned d = 0; d < l->ndevices; d++)
		n += atomic_load(&row->bytes[d]);
	return n;
}

static bool row_empty(const struct ipc_ledger *l, const struct ipc_ledger_row *row)
{
	for (unsigned d = 0; d < l->ndevices; d++)
		if (atomic_load(&row->bytes[d]))
			return false;
	return true;
}

/*
 * The row of uid (lock held): its own, else the first empty one of its probe (from its hash,
 * to a row never taken), which becomes its. -EUSERS when every row is someone's.
 */
static bool taken(struct ipc_ledger *l, unsigned i)
{
	return atomic_load(&l->taken[i / 64]) & (1ULL << (i % 64));
}

static int row_find(struct ipc_ledger *l, uint32_t uid, unsigned *ret)
{
	unsigned start = (uint32_t)(uid * 2654435761u) % IPC_LEDGER_USERS, empty = UINT32_MAX;

	for (unsigned k = 0; k < IPC_LEDGER_USERS; k++) {
		unsigned i = (start + k) % IPC_LEDGER_USERS;
		struct ipc_ledger_row *row = &l->users[i];

		if (!taken(l, i)) {
			if (empty == UINT32_MAX)
				empty = i;
			break;
		}
		if (atomic_load(&row->uid) == uid) {
			*ret = i;
			return 0;
		}
		if (empty == UINT32_MAX && row_empty(l, row))
			empty = i;
	}
	if (empty == UINT32_MAX)
		return -EUSERS;
	atomic_store(&l->users[empty].uid, uid);
	atomic_fetch_or(&l->taken[empty / 64], 1ULL << (empty % 64));
	*ret = empty;
	return 0;
}

static int lock(struct ipc_ledger *l)
{
	struct timespec until;
	int r;

	(void)clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += LOCK_WAIT_S;
	r = pthread_mutex_timedlock(&l->lock, &until);
	/* Its holder died (a worker killed): what it wrote is whole, each field on its own. */
	if (r == EOWNERDEAD)
		r = pthread_mutex_consistent(&l->lock);
	return -r;
}

int ipc_ledger_charge(struct ipc_ledger *l, uint32_t uid, unsigned dev, uint64_t bytes,
		      const struct ipc_ledger_caps *caps, unsigned *ret_row,
		      struct ipc_ledger_refusal *ret_why)
{
	uint64_t held, all;
	unsigned i;
	int r;

	if (dev >= l->ndevices)
		return -EINVAL;
	r = lock(l);
	if (r < 0)
		return r;
	r = row_find(l, uid, &i);
	if (r < 0)
		goto out;
	held = row_total(l, &l->users[i]);
	all = caps->shared_memory ? row_total(l, &l->others) : atomic_load(&l->others.bytes[dev]);
	if (bytes > caps->user || held > caps->user - bytes) {
		*ret_why = (struct ipc_ledger_refusal){ .held = held, .cap = caps->user };
		r = -EDQUOT;
	} else if (bytes > caps->others || all > caps->others - bytes) {
		*ret_why = (struct ipc_ledger_refusal){ .held = all, .cap = caps->others };
		r = -ENOSPC;
	} else {
		atomic_fetch_add(&l->users[i].bytes[dev], bytes);
		atomic_fetch_add(&l->others.bytes[dev], bytes);
		*ret_row = i;
	}
out:
	(void)pthread_mutex_unlock(&l->lock);
	return r;
}

void ipc_ledger_credit(struct ipc_ledger *l, unsigned row, unsigned dev, uint64_t bytes)
{
	atomic_fetch_sub(&l->users[row].bytes[dev], bytes);
	atomic_fetch_sub(&l->others.bytes[dev], bytes);
}

void ipc_ledger_forget_device(struct ipc_ledger *l, unsigned dev)
{
	if (dev >= l->ndevices)
		return;
	for (unsigned i = 0; i < IPC_LEDGER_USERS; i++)
		if (taken(l, i))
			atomic_store(&l->users[i].bytes[dev], 0);
	atomic_store(&l->others.bytes[dev], 0);
}

uint64_t ipc_ledger_user_bytes(struct ipc_ledger *l, uint32_t uid)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < IPC_LEDGER_USERS; i++)
		if (taken(l, i) && atomic_load(&l->users[i].uid) == uid)
			n += row_total(l, &l->users[i]);
	return n;
}
