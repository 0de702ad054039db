/* SPDX-License-Identifier: MIT */
/* worker/core/landlock.h: Landlock rulesets, for the cages of the worker's two compilers. */
#pragma once

#include <stdint.h>

/* Landlock's file-system rights, defined as the kernel has them: libc's headers lag behind. */
#define WRK_LL_EXECUTE (1ULL << 0)
#define WRK_LL_WRITE_FILE (1ULL << 1)
#define WRK_LL_READ_FILE (1ULL << 2)
#define WRK_LL_READ_DIR (1ULL << 3)
#define WRK_LL_REMOVE_DIR (1ULL << 4)
#define WRK_LL_REMOVE_FILE (1ULL << 5)
#define WRK_LL_MAKE_CHAR (1ULL << 6)
#define WRK_LL_MAKE_DIR (1ULL << 7)
#define WRK_LL_MAKE_REG (1ULL << 8)
#define WRK_LL_TRUNCATE (1ULL << 14) /* ABI 3 */

/* What a rule may grant: reading, running, and (in a directory of one's own) making files. */
#define WRK_LL_READ (WRK_LL_READ_FILE | WRK_LL_READ_DIR)
#define WRK_LL_RUN (WRK_LL_READ | WRK_LL_EXECUTE)
#define WRK_LL_OWN                                                                                 \
	(WRK_LL_READ | WRK_LL_WRITE_FILE | WRK_LL_REMOVE_FILE | WRK_LL_MAKE_REG |                  \
	 WRK_LL_REMOVE_DIR | WRK_LL_MAKE_DIR | WRK_LL_TRUNCATE)

/* The Landlock ABI this kernel offers (1 or more), or 0 when it has none or it is disabled. */
int wrk_landlock_abi(void);

/*
 * A ruleset of ABI abi (>= 1) that handles every right that ABI knows: all of the file
 * system's, TCP's (ABI 4: bind and connect), and the scopes (ABI 6: abstract unix sockets
 * and signals out of the domain). What no rule grants is refused. *ret_fd (close-on-exec)
 * or -errno.
 */
int wrk_landlock_new(int abi, int *ret_fd);

/*
 * Grant `access` (WRK_LL_*; those abi does not know are left out) beneath the directory at
 * path, or on the file at path (its rights that apply to a file). 0 or -errno.
 */
int wrk_landlock_allow(int ruleset, int abi, const char *path, uint64_t access);

/* Put the calling thread under the ruleset, for good; no_new_privs must be set. 0 or -errno. */
int wrk_landlock_enforce(int ruleset);
