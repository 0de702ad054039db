/* SPDX-License-Identifier: MIT */
/* worker/cubin.h: the kernels of a module's code (a cubin, a fatbin or PTX). */
#pragma once

#include <stddef.h>
#include <stdint.h>

/*
 * Call fn(name, userdata) for each kernel (entry function) of a module's code: a cubin (its
 * symbol table, read within the checks of its structure), a fatbin (its first entry that is
 * not compressed) or PTX (its .entry directives; NUL-terminated). fn returning < 0 stops it with that value. Returns 0,
 * or -ENOENT when the code does not say (a fatbin whose entries are all compressed).
 */
typedef int wrk_entry_fn(const char *name, void *userdata);
int wrk_code_entries(const uint8_t *p, size_t len, wrk_entry_fn *fn, void *userdata);
