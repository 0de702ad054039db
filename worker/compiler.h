/* SPDX-License-Identifier: MIT */
/* worker/compiler.h: NVRTC in a sandboxed helper process (gpux-worker --compiler). */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct wrk_compiler {
	pid_t pid;
	int fd;
};

#define WRK_COMPILER_INIT { .pid = 0, .fd = -1 }

/* NVRTC's version (major * 1000 + minor * 10) as the worker would load it, or 0 if none. */
uint32_t wrk_nvrtc_version(void);

/* The helper process's main: serve compile requests on fd until it closes or parent dies. */
int wrk_compiler_main(int fd, pid_t parent);

/*
 * Start the helper and wait for its hello (NVRTC loaded, sandbox closed). Returns 0, or a
 * gpux_status with a message to free: GPUX_E_NODRIVER when there is no NVRTC.
 */
int wrk_compiler_start(struct wrk_compiler *c, char **ret_msg);

void wrk_compiler_stop(struct wrk_compiler *c);

/*
 * Compile CUDA C++ for arch ("sm_90") to a cubin. Starts the helper if it is not running.
 * Returns 0 with *ret_image (to free) and maybe a warnings log, or a gpux_status with the
 * log (GPUX_E_COMPILE: NVRTC's log, a crash or a timeout of the helper).
 */
int wrk_compiler_build(struct wrk_compiler *c, const char *arch, const uint8_t *code,
		       size_t code_len, const char *options, uint8_t **ret_image, size_t *ret_len,
		       char **ret_log);
