/* SPDX-License-Identifier: MIT */
/* worker/host/host-build.h: the host back end's compiler: C source to a shared object, by cc. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "host-cage.h"
#include "key.h"

/* At most this much of a compiler's output is read for its log. */
#define WRK_HOST_LOG_MAX (64 * 1024)

/* The first line of `cc --version` into buf (empty when it says nothing). */
void wrk_host_cc_version(const char *cc, char *buf, size_t size);

/* What makes a module built by cc what it is, besides its source and options: module keys. */
void wrk_host_build_key(const char *cc, const char *cc_version, struct ipc_key_state *s);

/*
 * Compile b (GPUX_LANG_HOST) with cc in cage cg, in a fresh private directory (compile
 * thread): the shared object's bytes in *ret_image (to free), or GPUX_E_COMPILE with the log
 * (or the limit the compile met: its time, its memory, the preprocessed source's size),
 * GPUX_E_INVAL for options outside the documented set, GPUX_E_QUOTA for an object larger than
 * a client's modules may be (WRK_CLIENT_MOD_BYTES; never read in), GPUX_E_IO. *ret_log may
 * hold warnings on success.
 */
gpux_status wrk_host_build(const struct wrk_host_cage *cg, const char *cc,
			   const struct wrk_build *b, uint8_t **ret_image, size_t *ret_len,
			   char **ret_log);

/* Run a compiler (argv[0], found in $PATH) in cage cg, in its build directory dir, with its
 * output appended to log_path: its wait status in *ret_status, or -errno (-ETIMEDOUT: it ran
 * past the cage's time and was killed; -ENOENT: there is no such compiler). */
int wrk_host_run_compiler(const struct wrk_host_cage *cg, char **argv, const char *dir,
			  const char *log_path, int *ret_status);

/*
 * What a client is told of a compile that failed (r and st as wrk_host_run_compiler() gave
 * them, log its output, NUL-terminated, or NULL): the limit of cg it met (its time, the
 * preprocessed source's size, the module's, its memory), else the log. *ret_log to free; the
 * status.
 */
gpux_status wrk_host_compile_failure(const struct wrk_host_cage *cg, const char *dir, int r, int st,
				     const char *log, char **ret_log);

/* The file at path, NUL-terminated: its first max bytes when `cut`, else all of it or -EFBIG
 * past max. */
int wrk_host_read_file(const char *path, size_t max, bool cut, uint8_t **ret, size_t *ret_len);
