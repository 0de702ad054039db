/* SPDX-License-Identifier: MIT */
/* worker/host-cumod.h: a CUDA C++ module on the host: its kernels, by the names a GPU's go by. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <gpux/cuda-host/gpux_cuda_abi.h>

#include "backend.h"

/*
 * The table a module built by worker/host-cuda.c exports (gpux_cu_module_info), read once
 * it is loaded: each kernel's symbol (the exported one at its address, as a cubin lists
 * it), its name expression, its block function and parameters. A kernel is then asked for
 * as on a GPU (worker/knames.h): a name expression the module was built with, its symbol,
 * or its plain or qualified C++ name.
 */
struct host_cumod;

/* The kernels of the module loaded at `base` whose table is mi, at most max_bytes of
 * names: 0, or GPUX_E_INVAL (a table this worker does not know), GPUX_E_QUOTA, GPUX_E_NOMEM
 * with *ret_msg. */
gpux_status host_cumod_new(const struct gpux_cu_module *mi, uintptr_t base, size_t max_bytes,
			   struct host_cumod **ret, char **ret_msg);
void host_cumod_free(struct host_cumod *m);

/* What it holds, in bytes (its clients are charged them). */
size_t host_cumod_bytes(const struct host_cumod *m);

/* The kernel `name`: its block function in ret->fn, its parameters. 0, GPUX_E_NOTFOUND, or
 * GPUX_E_INVAL (a name that is several overloads), with *ret_msg. */
gpux_status host_cumod_kernel(const struct host_cumod *m, const char *name,
			      struct wrk_kernel_info *ret, char **ret_msg);

/* The variable `name` (its symbol, or its qualified name) as the module's table has it: its
 * address and size, which the caller checks against the module's memory. 0, or
 * GPUX_E_NOTFOUND with *ret_msg. */
gpux_status host_cumod_global(const struct host_cumod *m, const char *name, const void **ret_addr,
			      uint64_t *ret_size, char **ret_msg);
