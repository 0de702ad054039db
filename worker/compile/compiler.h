/* SPDX-License-Identifier: MIT */
/* worker/compile/compiler.h: NVRTC in a sandboxed helper process (gpux-worker --compiler). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"
#include "compiler-proto.h"
#include "toolkit.h"

/* The worker's side of its helper. Used by one thread at a time. */
struct wrk_compiler {
	pid_t pid;
	uint64_t memory;     /* the helper's address space at most (RLIMIT_AS); 0: no limit */
	uint64_t timeout_ns; /* a compile's time at most: then the helper is killed */
	int fd;
	bool greeted;  /* its hello has been read */
	bool targeted; /* cc, arch and tk are set */
	unsigned cc;   /* the device's compute capability, major * 10 + minor */
	char arch[CC_ARCH_MAX];
	struct wrk_toolkit tk;
	char pch_dir[PATH_MAX]; /* the helper's precompiled headers, or "" */
};

/* clang-format takes a braced initializer in a macro for a function's body: kept as written. */
/* clang-format off */
#define WRK_COMPILER_INIT { .pid = 0, .fd = -1, .timeout_ns = 120ULL * 1000000000ULL }
/* clang-format on */

/*
 * NVRTC's version (major * 1000 + minor * 10) as the helper will load it, or 0 if there is
 * none; *ret_tk: the toolkit include directories its compiles may read (worker/compile/toolkit.h).
 */
uint32_t wrk_nvrtc_probe(struct wrk_toolkit *ret_tk);

/*
 * The helper process's main: serve compile requests on fd until it closes or parent dies,
 * with an address space of `memory` bytes at most (0: no limit; none under AddressSanitizer,
 * whose shadow alone takes terabytes of it) and, started as root, no capabilities.
 */
int wrk_compiler_main(int fd, pid_t parent, uint64_t memory);

/*
 * Start the helper now, so that it loads NVRTC and warms up while the worker opens its
 * device; not waited for. Returns 0, or -errno with a message (to free) in *ret_msg.
 */
int wrk_compiler_spawn(struct wrk_compiler *c, char **ret_msg);

/*
 * What to compile for (the compute capability cc, major * 10 + minor: 90 is sm_90) and with
 * which headers; sent to the helper now if it runs.
 */
void wrk_compiler_target(struct wrk_compiler *c, unsigned cc, const struct wrk_toolkit *tk);

void wrk_compiler_stop(struct wrk_compiler *c);

/*
 * Give the helper a directory of its own for NVRTC's precompiled headers, in cache_dir (a
 * directory of this user's alone, or nothing is made): made now (and emptied by each helper
 * as it starts), removed by wrk_compiler_forget_pch(). Directories left by workers that are
 * gone are removed first. Before wrk_compiler_target().
 */
void wrk_compiler_pch_dir(struct wrk_compiler *c, const char *cache_dir);
void wrk_compiler_forget_pch(struct wrk_compiler *c);

/*
 * Wait until the helper has warmed up and said hello (NVRTC loaded, its first compiles
 * done), at most until the deadline: a compile asked for after this starts at once. A helper
 * that could not start is left for the first compile, which says why.
 */
void wrk_compiler_wait_warm(struct wrk_compiler *c, uint64_t deadline);

/*
 * Compile CUDA C++ (b: code, options, headers, name expressions) to an image
 * (worker/compile/cuda-image.h). Starts a helper if none runs, and waits for it to be ready.
 * The helper compiles a client's source: what it sends back is checked as a client's cubin is
 * (worker/compile/cubin.h) before the driver may see it, and a status it makes up is a
 * compile error.
 * Returns 0 with *ret_image (to free) and maybe a warnings log, or a gpux_status with the
 * log (GPUX_E_COMPILE: NVRTC's log, a crash, a forbidden system call, a timeout, an image
 * that fails its checks): the answer of the client's MOD_LOAD.
 */
gpux_status wrk_compiler_build(struct wrk_compiler *c, const struct wrk_build *b,
			       uint8_t **ret_image, size_t *ret_len, char **ret_log);
