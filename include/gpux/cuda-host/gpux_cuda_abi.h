/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/gpux_cuda_abi.h: how the worker runs a CUDA C++ module built for the host. */
#ifndef GPUX_CUDA_ABI_H
#define GPUX_CUDA_ABI_H
#pragma GCC system_header

#include <stddef.h>
#include <stdint.h>

/*
 * The host back end compiles CUDA C++ with the system's C++ compiler against gpux's own
 * headers (this folder), and adds to the source one entry per kernel: a function that runs
 * one block of the launch grid. This header is the contract between that module and the
 * worker; both sides are built from it, and a module whose `abi` differs is refused.
 *
 * The module exports `gpux_cu_module_info`: its kernels, each with the function the programmer
 * wrote (its symbol is the kernel's name, as in a cubin), the block function and the sizes
 * of its parameters (what cuFuncGetParamInfo gives for a GPU kernel); and its variables
 * (__device__ and __constant__ ones at namespace scope), as cuModuleGetGlobal finds them.
 */
#define GPUX_CU_ABI 2u

/* Bytes of a fiber's stack (a CUDA thread that waits at a barrier or a warp operation keeps
 * its own), with an unmapped guard page below it. */
#define GPUX_CU_STACK_BYTES (256u * 1024u)
/* Bytes of dynamic shared memory (extern __shared__) a block may have. */
#define GPUX_CU_DYN_SHARED_MAX (64u * 1024u)
/* Bytes of the message a block leaves when it fails. */
#define GPUX_CU_ERROR_MAX 512u

#ifdef __cplusplus
extern "C" {
#endif

struct gpux_cu_dim3 {
	uint32_t x, y, z;
};

/* One block's launch, made by the worker; the block function fills `error` when it fails. */
struct gpux_cu_launch {
	uint32_t abi;
	struct gpux_cu_dim3 grid_dim, block_dim, block_idx;
	uint32_t shared_bytes; /* dynamic shared memory asked for */
	/* The top (highest address, 16-aligned) of fiber i's stack, i < block threads, kept by
	 * the worker for the CPU thread that calls it; NULL when there is no memory for it. */
	void *(*stack)(uint32_t i);
	char error[GPUX_CU_ERROR_MAX];
};

/* What a block function returns besides 0: the kernel failed (a deadlock, an assertion,
 * __trap()), or the launch asks for what a block cannot have (GPUX_E_INVAL). */
#define GPUX_CU_FAILED 1
#define GPUX_CU_REFUSED 2

/* Run block l->block_idx with arguments args (args[i] points at argument i's value, as for
 * cuLaunchKernel): 0, or GPUX_CU_FAILED or GPUX_CU_REFUSED with l->error saying why. */
typedef int gpux_cu_block_fn(struct gpux_cu_launch *l, void *const *args);

struct gpux_cu_kernel {
	const void *kernel;          /* the __global__ function itself */
	gpux_cu_block_fn *run;
	const char *name;            /* the name expression, or the name as declared ("ns::f") */
	uint32_t nparams;
	const uint32_t *param_size;  /* nparams sizes */
};

/* A variable of the module, for gpux_module_global(). */
struct gpux_cu_global {
	const char *name;   /* qualified, anonymous namespaces left out: "ns::coeffs" */
	const char *symbol; /* its symbol: "coeffs", "_ZN2ns6coeffsE" */
	const void *addr;
	uint64_t size;
};

/* Kernels [0, nexprs) are the name expressions the module was built with, in their order;
 * the rest are the source's own kernels (not templates). Exported as `gpux_cu_module_info`. */
struct gpux_cu_module {
	uint32_t abi;
	uint32_t nkernels;
	uint32_t nexprs;
	const void *const *kernels; /* nkernels, each laid out as a struct gpux_cu_kernel */
	uint32_t nglobals;
	const struct gpux_cu_global *globals; /* nglobals (ABI 2) */
};

#ifdef __cplusplus
}
#endif

#endif
