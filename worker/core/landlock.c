/* SPDX-License-Identifier: MIT */
/* worker/core/landlock.c: Landlock rulesets, for the cages of the worker's two compilers. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "landlock.h"
#include "macro.h"

#define LL_FS_ABI1 ((1ULL << 13) - 1) /* EXECUTE .. MAKE_SYM */
#define LL_FS_REFER (1ULL << 13)      /* ABI 2 */
#define LL_FS_IOCTL_DEV (1ULL << 15)  /* ABI 5 */
#define LL_FS_FILE                                                                                 \
	(WRK_LL_EXECUTE | WRK_LL_WRITE_FILE | WRK_LL_READ_FILE | WRK_LL_TRUNCATE | LL_FS_IOCTL_DEV)
#define LL_NET_ALL 0x3ULL   /* ABI 4: bind, connect (TCP) */
#define LL_SCOPE_ALL 0x3ULL /* ABI 6: abstract unix sockets, signals */
#define LL_RULE_PATH_BENEATH 1
#define LL_CREATE_RULESET_VERSION 1u

struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net; /* ABI 4 */
	uint64_t scoped;             /* ABI 6 */
};

struct ll_path_beneath_attr {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

int wrk_landlock_abi(void)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);

	return abi > 0 ? (int)abi : 0;
}

/* The file-system rights ABI abi knows. */
static uint64_t fs_rights(int abi)
{
	uint64_t r = LL_FS_ABI1;

	if (abi >= 2)
		r |= LL_FS_REFER;
	if (abi >= 3)
		r |= WRK_LL_TRUNCATE;
	if (abi >= 5)
		r |= LL_FS_IOCTL_DEV;
	return r;
}

int wrk_landlock_new(int abi, int *ret_fd)
{
	struct ll_ruleset_attr attr = { .handled_access_fs = fs_rights(abi) };
	size_t size = offsetof(struct ll_ruleset_attr, handled_access_net);
	int fd;

	if (abi >= 4) {
		attr.handled_access_net = LL_NET_ALL;
		size = offsetof(struct ll_ruleset_attr, scoped);
	}
	if (abi >= 6) {
		attr.scoped = LL_SCOPE_ALL;
		size = sizeof(attr);
	}
	fd = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
	if (fd < 0)
		return -errno;
	*ret_fd = fd;
	return 0;
}

int wrk_landlock_allow(int ruleset, int abi, const char *path, uint64_t access)
{
	struct ll_path_beneath_attr rule = { .allowed_access = access & fs_rights(abi) };
	_cleanup_(closep) int fd = open(path, O_PATH | O_CLOEXEC);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		rule.allowed_access &= LL_FS_FILE;
	rule.parent_fd = fd;
	if (syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &rule, 0) < 0)
		return -errno;
	return 0;
}

int wrk_landlock_enforce(int ruleset)
{
	return syscall(SYS_landlock_restrict_self, ruleset, 0) < 0 ? -errno : 0;
}
