/* SPDX-License-Identifier: MIT */
/* tests/nvrtc-helpers.h: cubins, PTX and fatbins made in the test, as a client would make them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Compile src with NVRTC in this process for arch: a cubin ("sm_90"), or PTX when ptx is true
 * ("compute_90"). Asserts that every step succeeds; *ret_len gets the length; free() the code.
 */
uint8_t *test_nvrtc_compile(const char *src, const char *arch, bool ptx, size_t *ret_len);

/* A fatbin of one uncompressed cubin entry for sm, as nvcc -fatbin lays it out. Asserts;
 * free() it. */
uint8_t *test_fatbin(const uint8_t *cubin, size_t len, uint32_t sm, size_t *ret_len);
