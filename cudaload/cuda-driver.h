/* SPDX-License-Identifier: MIT */
/* cudaload/cuda-driver.h: the CUDA Driver API as one table of function pointers, loaded at run time. */
#pragma once

#include <stdbool.h>

#include <cuda.h>

#include <gpux/gpux.h>

/*
 * libcuda is never linked: cu_driver_load() dlopen()s it ("libcuda.so.1", or $GPUX_CUDA_LIB)
 * and resolves every entry point with cuGetProcAddress, for the API version these headers
 * describe. Everything the worker does with the device goes through this table, so a test
 * can give the worker another libcuda (a fake that fails on the Nth call) by $GPUX_CUDA_LIB.
 */

#define CU_FN(name) __typeof__(&name) name

struct cu_driver {
	void *lib;
	int version; /* cuDriverGetVersion */
	CU_FN(cuInit);
	CU_FN(cuGetErrorName);
	CU_FN(cuDeviceGetCount);
	CU_FN(cuDeviceGet);
	CU_FN(cuDeviceGetName);
	CU_FN(cuDeviceGetUuid);
	CU_FN(cuDeviceTotalMem);
	CU_FN(cuDeviceGetAttribute);
	CU_FN(cuDevicePrimaryCtxRetain);
	CU_FN(cuDevicePrimaryCtxRelease);
	CU_FN(cuCtxSetCurrent);
	CU_FN(cuMemGetInfo);
	CU_FN(cuStreamCreate);
	CU_FN(cuStreamDestroy);
	CU_FN(cuStreamSynchronize);
	CU_FN(cuStreamWaitEvent);
	CU_FN(cuEventCreate);
	CU_FN(cuEventDestroy);
	CU_FN(cuEventRecord);
	CU_FN(cuEventQuery);
	CU_FN(cuEventSynchronize);
	CU_FN(cuEventElapsedTime);
	CU_FN(cuMemHostRegister);
	CU_FN(cuMemHostUnregister);
	CU_FN(cuMemHostGetDevicePointer);
	CU_FN(cuMemcpyHtoDAsync);
	CU_FN(cuMemcpyDtoHAsync);
	CU_FN(cuDeviceGetDefaultMemPool);
	CU_FN(cuMemPoolSetAttribute);
	CU_FN(cuMemPoolGetAttribute);
	CU_FN(cuMemAllocFromPoolAsync);
	CU_FN(cuMemFreeAsync);
	CU_FN(cuModuleLoadData);
	CU_FN(cuModuleUnload);
	CU_FN(cuModuleGetFunction);
	CU_FN(cuModuleGetGlobal);
	CU_FN(cuFuncGetAttribute);
	CU_FN(cuFuncSetAttribute);
	CU_FN(cuFuncGetParamInfo); /* CUDA 12.4 and later; NULL before */
	CU_FN(cuLaunchKernel);
	CU_FN(cuGraphCreate);
	CU_FN(cuGraphDestroy);
	CU_FN(cuGraphAddKernelNode);
	CU_FN(cuGraphInstantiateWithFlags);
	CU_FN(cuGraphExecDestroy);
	CU_FN(cuGraphExecKernelNodeSetParams);
	CU_FN(cuGraphLaunch);
	CU_FN(cuStreamWriteValue64); /* NULL where the driver will not */
	CU_FN(cuCtxGetStreamPriorityRange);
	CU_FN(cuStreamCreateWithPriority);
	CU_FN(cuStreamGetPriority);
	/* Green contexts (compute shares): CUDA 12.4, the streams 12.5; NULL before. */
	CU_FN(cuDeviceGetDevResource);
	CU_FN(cuDevSmResourceSplitByCount);
	CU_FN(cuDevResourceGenerateDesc);
	CU_FN(cuGreenCtxCreate);
	CU_FN(cuGreenCtxDestroy);
	CU_FN(cuGreenCtxStreamCreate);
	CU_FN(cuStreamWriteValue32); /* NULL where the driver will not */
};

/*
 * Load libcuda and resolve the table. Returns 0, or a gpux_status with a message (to free):
 * GPUX_E_NODRIVER when there is no driver (or it is too old to have cuGetProcAddress).
 */
gpux_status cu_driver_load(struct cu_driver *d, char **ret_msg);

void cu_driver_unload(struct cu_driver *d);

/*
 * The one place a CUresult becomes a gpux_status. *ret_sticky says whether the context is
 * unusable from now on (illegal address, misaligned address, invalid PC, launch failure,
 * assert, ECC, ...): the worker must fail what is in flight and exit. Out of memory is not.
 */
gpux_status wrk_cu_err(CUresult r, bool *ret_sticky);

/* The error's name ("CUDA_ERROR_ILLEGAL_ADDRESS"), or its number. Never NULL. */
const char *cu_err_name(const struct cu_driver *d, CUresult r);
