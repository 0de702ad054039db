/* SPDX-License-Identifier: MIT */
/* worker/compile/cuda-image.h: a CUDA module as the worker caches it: code for the driver, and kernel names. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/*
 * The CUDA back end's image (what build() makes, the disk cache keeps and module_load()
 * loads): a 32-byte header, the code the driver loads (a cubin or fatbin, or PTX with its
 * NUL), then `nnames` pairs of NUL-terminated strings: a name expression the module was
 * compiled with and the symbol NVRTC lowered it to.
 */
struct wrk_cuimage {
	const uint8_t *code;
	size_t code_len;
	const char *names; /* borrowed from the image */
	size_t names_len;
	uint32_t nnames;
};

/* Put code and names (names_len bytes, nnames pairs) into a new image (*ret, to free). */
int wrk_cuimage_pack(const void *code, size_t code_len, const char *names, size_t names_len,
		     uint32_t nnames, uint8_t **ret, size_t *ret_len);

/* Read an image: 0, or -EBADMSG when it is not a whole one. *ret borrows from p. */
int wrk_cuimage_parse(const uint8_t *p, size_t len, struct wrk_cuimage *ret);
