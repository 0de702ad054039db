/* SPDX-License-Identifier: MIT */
/* worker/host-cuda.h: the host back end's CUDA C++: compiled by c++ against gpux's own headers. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "host-cage.h"
#include "key.h"

/* What makes a CUDA C++ module built by cxx what it is, besides its source, options, headers
 * and name expressions: the compiler and its version, its fixed arguments, gpux's headers. */
void wrk_host_cuda_key(const char *cxx, const char *cxx_version, struct ipc_key_state *s);

/*
 * Compile b (GPUX_LANG_CUDA, its headers and name expressions in b->extra) with cxx in cage
 * cg (worker/host/host-cage.h), in a fresh private directory (compile thread): the shared object's
 * bytes in *ret_image (to free), which exports `gpux_cu_module_info`
 * (include/gpux/cuda-host/gpux_cuda_abi.h). GPUX_E_COMPILE with the log (or with what the source
 * uses that the host back end does not have), GPUX_E_INVAL for options NVRTC would not take,
 * GPUX_E_QUOTA for an object larger than a client's modules may be, GPUX_E_NOMEM, GPUX_E_IO.
 * *ret_log may hold warnings on success.
 */
gpux_status wrk_host_cuda_build(const struct wrk_host_cage *cg, const char *cxx,
				const struct wrk_build *b, uint8_t **ret_image, size_t *ret_len,
				char **ret_log);
