/* SPDX-License-Identifier: MIT */
/* worker/host/host-cage.h: the host compiler's cage: what it may read and run, its limits. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "seccomp.h"

/* Directories the compiler may read and run beneath, at most. */
#define WRK_HOST_CAGE_DIRS_MAX 48u

/*
 * The host compilers (cc, c++ and the programs they run: cc1, as, ld) run as processes of
 * their own with, beside the build directory, only the toolchain to read: Landlock lets them
 * read and run beneath the system's program and library directories and those each compiler
 * names (its search dirs, its include path), write only in the build directory (where gpux's
 * own headers are written too), and nothing else (no other file, no TCP, no signal or
 * abstract socket out). Also: an address space of `memory` bytes (RLIMIT_AS), files of
 * `file_max` bytes (RLIMIT_FSIZE: the preprocessed source, the assembly, the object, the
 * module), `timeout_ns` of time (then the process group is killed; RLIMIT_CPU behind that),
 * no capabilities, no new privileges, and a seccomp filter that refuses what no compiler does
 * (sockets, ptrace, io_uring, bpf, ...).
 */
struct wrk_host_cage {
	char *dirs[WRK_HOST_CAGE_DIRS_MAX];
	unsigned ndirs;
	int landlock_abi; /* 0: no Landlock here; the compiler reads what the worker may */
	uint64_t memory;  /* 0: no limit */
	uint64_t file_max;
	uint64_t timeout_ns;
	struct wrk_bpf filter;
};

/* A cage of the system's directories and these limits: 0 or -errno. Free with
 * wrk_host_cage_done(). */
int wrk_host_cage_init(struct wrk_host_cage *cg, uint64_t memory, uint64_t file_max,
		       uint64_t timeout_ns);
/*
 * Let the compiler cc (a path, or a name on $PATH) read what it needs: its own directory and
 * those it names (asked: -print-search-dirs, the include path of -v). A compiler not found
 * adds nothing (its builds say so). 0 or -ENOMEM.
 */
int wrk_host_cage_add_compiler(struct wrk_host_cage *cg, const char *cc);
void wrk_host_cage_done(struct wrk_host_cage *cg);

/* Where the program cc is (a path, or a name on $PATH), into ret: 0 or -ENOENT. */
int wrk_host_cage_find(const char *cc, char *ret, size_t size);

/*
 * Run the compiler argv[0] (found as wrk_host_cage_find() does; -ENOENT when it is not) in
 * the cage, in directory dir (which it may write; its temporary files go there too), its
 * output appended to log_path: 0 and how it ended in *ret_status (a wait status),
 * -ETIMEDOUT when it ran past timeout_ns (it and its children were killed), or -errno.
 */
int wrk_host_cage_run(const struct wrk_host_cage *cg, char *const *argv, const char *dir,
		      const char *log_path, int *ret_status);
