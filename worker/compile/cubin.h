/* SPDX-License-Identifier: MIT */
/* worker/compile/cubin.h: checking a client's cubin or fatbin, and listing the kernels of a module's code. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/*
 * Check a cubin (a CUDA ELF) or a fatbin before the driver sees it: the driver takes a bare
 * pointer and believes every size and offset inside. Checked: the ELF header (magic, 64-bit,
 * little-endian, EM_CUDA, an executable), every program and section header and what it
 * points at lying inside the `len` bytes, string and symbol tables; the architecture against
 * the device's compute capability `cc` (major * 10 + minor: a cubin runs on its own major
 * version at its minor or later); a fatbin's header and entries likewise, with at least one
 * entry the device can run (a cubin as above, or PTX for it or an older one), and none of
 * those that the driver might pick compressed (compressed code cannot be checked).
 * Returns 0, or -EINVAL with *ret_msg (to free) saying what is wrong: what a client's
 * MOD_LOAD is answered with (GPUX_E_INVAL).
 */
int wrk_cubin_check(const uint8_t *p, size_t len, unsigned cc, char **ret_msg);

/*
 * Call fn(name, userdata) for each kernel (entry function) of a module's code: a checked
 * cubin (its symbol table), a fatbin (its first cubin that is not compressed) or PTX (its
 * .entry directives; NUL-terminated). fn returning < 0 stops it with that value. Returns 0,
 * or -ENOENT when the code does not say (a fatbin without an uncompressed cubin).
 */
typedef int wrk_entry_fn(const char *name, void *userdata);
int wrk_code_entries(const uint8_t *p, size_t len, wrk_entry_fn *fn, void *userdata);
