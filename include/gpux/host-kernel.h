/* SPDX-License-Identifier: MIT */
/* gpux/host-kernel.h: the signature of kernels for the host (CPU) back end. */
#ifndef GPUX_HOST_KERNEL_H
#define GPUX_HOST_KERNEL_H

#include <stddef.h>
#include <stdint.h>

/*
 * A host kernel is C code, compiled by the worker with the system C compiler into a shared
 * object. gpux puts this header in front of the source, so the source needs no #include of
 * it. Each kernel is an exported function
 *
 *     GPUX_HOST_KERNEL(name) { ... }
 *
 * called once per block of the launch grid, blocks in any order, possibly several blocks at
 * once on different threads. Inside, `gpux` describes the block (its index, the grid and
 * block dimensions, its dynamic shared memory) and `gpux_args[i]` points at the value of
 * argument i, as kernelParams does for cuLaunchKernel: for a buffer argument that value is
 * the data pointer, so
 *
 *     float *x = GPUX_ARG(float *, 0);
 *     float a = GPUX_ARG(float, 1);
 *
 * A block loops over its threads itself, with GPUX_FOR_EACH_THREAD(t), where t.x, t.y, t.z
 * is threadIdx; a point where CUDA code would call __syncthreads() ends one loop over the
 * threads and starts the next.
 *
 * A kernel may declare the sizes of its parameters, so that the worker checks each launch's
 * arguments against them as it does for CUDA kernels:
 *
 *     GPUX_HOST_PARAMS(saxpy, sizeof(uint64_t), sizeof(float), sizeof(float *));
 *
 * A variable that a client reaches by its name (gpux_module_global(), as a __device__ or
 * __constant__ one of CUDA C++) is one the module exports:
 *
 *     GPUX_HOST_GLOBAL float coeffs[16] = { 1 };
 *
 * (a `const` one can be read, not written). Other variables stay the module's own.
 *
 * A kernel must not write its IN arguments; a crashing kernel fails its request with
 * GPUX_E_KERNEL_FAULT and its worker restarts, as after a sticky CUDA error. So does one
 * that calls abort(), exit() or fork(), or writes `gpux` or the array `gpux_args` (both are
 * read-only; the values the array points at are the kernel's own copies).
 *
 * Only gpuxd's own user and root may load host kernels. On a gpuxd that serves a group or
 * runs as root (gpuxd --host-sandbox), kernels run under a seccomp filter: they may compute
 * on their arguments, allocate and free memory, read clocks and sleep; any other system call
 * (files, sockets, processes, signals, the end of its thread or process) is not made and
 * fails the request with GPUX_E_KERNEL_FAULT naming the call, as a crash does. There a module may
 * have no constructors, destructors or IFUNC resolvers (GPUX_E_INVAL at load): they would run
 * outside the filter.
 */

struct gpux_dim3 {
	uint32_t x, y, z;
};

struct gpux_host_launch {
	struct gpux_dim3 grid_dim;
	struct gpux_dim3 block_dim;
	struct gpux_dim3 block_idx;
	uint32_t shared_bytes;
	void *shared;
};

typedef void gpux_host_kernel_fn(const struct gpux_host_launch *gpux, void *const *gpux_args);

#define GPUX_HOST_KERNEL(name)                                                                     \
	__attribute__((visibility("default"))) void name(const struct gpux_host_launch *gpux,      \
							 void *const *gpux_args)

#define GPUX_HOST_PARAMS(name, ...)                                                                \
	__attribute__((visibility("default"))) const uint32_t gpux_params_##name[] = {             \
		sizeof((uint32_t[]){ __VA_ARGS__ }) / sizeof(uint32_t), ##__VA_ARGS__              \
	}

/* A variable of the module that gpux_module_global() finds by its name. */
#define GPUX_HOST_GLOBAL __attribute__((visibility("default")))

#define GPUX_ARG(type, i) (*(type *)gpux_args[(i)])

#define GPUX_FOR_EACH_THREAD(t)                                                                    \
	for (struct gpux_dim3 t = { 0, 0, 0 }; t.z < gpux->block_dim.z; t.z++)                     \
		for (t.y = 0; t.y < gpux->block_dim.y; t.y++)                                      \
			for (t.x = 0; t.x < gpux->block_dim.x; t.x++)

/* The global index along x of thread t, as blockIdx.x * blockDim.x + threadIdx.x. */
#define GPUX_GLOBAL_X(t) ((uint64_t)gpux->block_idx.x * gpux->block_dim.x + (t).x)

#endif
