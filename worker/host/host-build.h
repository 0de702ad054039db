/* SPDX-License-Identifier: MIT */
/* worker/host/host-build.h: the host back end's compiler: C source to a shared object, by cc. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "key.h"

/* The first line of `cc --version` into buf (empty when it says nothing). */
void wrk_host_cc_version(const char *cc, char *buf, size_t size);

/* What makes a module built by cc what it is, besides its source and options: module keys. */
void wrk_host_build_key(const char *cc, const char *cc_version, struct ipc_key_state *s);

/*
 * Compile b (GPUX_LANG_HOST) with cc in a fresh private directory (compile thread): the
 * shared object's bytes in *ret_image (to free), or GPUX_E_COMPILE with the log, GPUX_E_INVAL
 * for options outside the documented set, GPUX_E_QUOTA for an object larger than a client's
 * modules may be (WRK_CLIENT_MOD_BYTES; never read in), GPUX_E_IO. *ret_log may hold
 * warnings on success.
 */
gpux_status wrk_host_build(const char *cc, const struct wrk_build *b, uint8_t **ret_image,
			   size_t *ret_len, char **ret_log);
