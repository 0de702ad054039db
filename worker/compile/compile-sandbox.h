/* SPDX-License-Identifier: MIT */
/* worker/compile/compile-sandbox.h: the compiler helper's cage: Landlock for files, a seccomp allow-list for the rest. */
#pragma once

#include <stdbool.h>

/* The Landlock ABI this kernel offers (1 or more), or 0 when it has none or it is disabled. */
int wrk_compile_sandbox_landlock_abi(void);

/*
 * Close the calling process, for good, behind:
 * - Landlock (when the kernel has it): files may be read beneath `read_dirs` (ndirs of them)
 *   and nowhere else; nothing may be written, made, removed, executed or connected to, but
 *   for files made, written and removed beneath `write_dir` (NULL: none).
 *   *ret_landlocked says whether it is in force; without it every open() fails.
 * - a seccomp allow-list of what NVRTC needs to compile (found by tracing compiles): sockets
 *   only as `channel_fd` already is, no new processes, threads, executable memory, signals to
 *   others, io_uring or file changes. Any other system call, an x32 one or one of another
 *   architecture's kills the process (SIGSYS).
 * Returns 0 or -errno (nothing applied when the seccomp filter could not be).
 */
int wrk_compile_sandbox_seal(const char *const *read_dirs, unsigned ndirs, const char *write_dir,
			     int channel_fd, bool *ret_landlocked);

/* wrk_compile_sandbox_seal() with Landlock's ABI given: 0 seals as on a kernel without Landlock (no
 * file opens at all), which tests use to see that case. */
int wrk_compile_sandbox_seal_abi(int abi, const char *const *read_dirs, unsigned ndirs,
				 const char *write_dir, int channel_fd);
