/* SPDX-License-Identifier: MIT */
/* cudaload/nvrtc-loader.h: NVRTC, loaded with dlopen() (never linked), as a small table. */
#pragma once

#include <stddef.h>

#include <nvrtc.h>

struct nvrtc {
	void *lib;
	nvrtcResult (*version)(int *, int *);
	nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *,
			      const char *const *);
	nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
	nvrtcResult (*log_size)(nvrtcProgram, size_t *);
	nvrtcResult (*log)(nvrtcProgram, char *);
	nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
	nvrtcResult (*cubin)(nvrtcProgram, char *);
	nvrtcResult (*destroy)(nvrtcProgram *);
	nvrtcResult (*add_name)(nvrtcProgram, const char *);
	nvrtcResult (*lowered_name)(nvrtcProgram, const char *, const char **);
	const char *(*error)(nvrtcResult);
	/* Precompiled headers (CUDA 12.8 and later): NULL in an older NVRTC. */
	nvrtcResult (*pch_create_status)(nvrtcProgram);
	nvrtcResult (*pch_heap_required)(nvrtcProgram, size_t *);
	nvrtcResult (*pch_heap_set)(size_t);
};

/*
 * Load NVRTC: $GPUX_NVRTC_LIB, $CUDA_PATH/lib64, the loader's path, /usr/local/cuda/lib64.
 * Returns 0, or -ENOENT with why (why_len bytes) said.
 */
int nvrtc_load(struct nvrtc *n, char *why, size_t why_len);

/* The file NVRTC was loaded from (borrowed from the dynamic loader), or NULL. */
const char *nvrtc_file(const struct nvrtc *n);
