/* SPDX-License-Identifier: MIT */
/* cudaload/cuda-driver.c: dlopen() of libcuda, cuGetProcAddress for every entry, CUresult classes. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gpux/gpux.h>

#include "cuda-driver.h"

typedef CUresult get_proc_v2_fn(const char *symbol, void **pfn, int version, cuuint64_t flags,
				CUdriverProcAddressQueryResult *status);

struct entry {
	const char *name;
	size_t offset;
	int min_version; /* the driver that introduced it; older drivers leave it NULL */
};

/* clang-format takes a braced initializer in a macro for a function's body: kept as written. */
/* clang-format off */
#define E(name, v) { #name, offsetof(struct cu_driver, name), v }
/* clang-format on */

static const struct entry entries[] = {
	E(cuInit, 2000),
	E(cuGetErrorName, 6000),
	E(cuDeviceGetCount, 2000),
	E(cuDeviceGet, 2000),
	E(cuDeviceGetName, 2000),
	E(cuDeviceGetUuid, 11040),
	E(cuDeviceTotalMem, 3020),
	E(cuDeviceGetAttribute, 2000),
	E(cuDevicePrimaryCtxRetain, 7000),
	E(cuDevicePrimaryCtxRelease, 11000),
	E(cuCtxSetCurrent, 4000),
	E(cuMemGetInfo, 3020),
	E(cuStreamCreate, 2000),
	E(cuStreamDestroy, 4000),
	E(cuStreamSynchronize, 2000),
	E(cuStreamWaitEvent, 3020),
	E(cuEventCreate, 2000),
	E(cuEventDestroy, 4000),
	E(cuEventRecord, 2000),
	E(cuEventQuery, 2000),
	E(cuEventSynchronize, 2000),
	E(cuEventElapsedTime, 2000),
	E(cuMemHostRegister, 6050),
	E(cuMemHostUnregister, 4000),
	E(cuMemHostGetDevicePointer, 3020),
	E(cuMemcpyHtoDAsync, 3020),
	E(cuMemcpyDtoHAsync, 3020),
	E(cuDeviceGetDefaultMemPool, 11020),
	E(cuMemPoolSetAttribute, 11020),
	E(cuMemPoolGetAttribute, 11020),
	E(cuMemAllocFromPoolAsync, 11020),
	E(cuMemFreeAsync, 11020),
	E(cuModuleLoadData, 2000),
	E(cuModuleUnload, 2000),
	E(cuModuleGetFunction, 2000),
	E(cuModuleGetGlobal, 3020),
	E(cuFuncGetAttribute, 2020),
	E(cuFuncSetAttribute, 9000),
	E(cuFuncGetParamInfo, 12040),
	E(cuLaunchKernel, 4000),
	E(cuGraphCreate, 10000),
	E(cuGraphDestroy, 10000),
	E(cuGraphAddKernelNode, 12000),
	E(cuGraphInstantiateWithFlags, 11040),
	E(cuGraphExecDestroy, 10000),
	E(cuGraphExecKernelNodeSetParams, 12000),
	E(cuGraphLaunch, 10000),
	E(cuStreamWriteValue64, 12000),
	E(cuCtxGetStreamPriorityRange, 5050),
	E(cuStreamCreateWithPriority, 5050),
	E(cuStreamGetPriority, 5050),
	E(cuDeviceGetDevResource, 12040),
	E(cuDevSmResourceSplitByCount, 12040),
	E(cuDevResourceGenerateDesc, 12040),
	E(cuGreenCtxCreate, 12040),
	E(cuGreenCtxDestroy, 12040),
	E(cuGreenCtxStreamCreate, 12050),
	E(cuStreamWriteValue32, 12000),
};

/* Entries the worker does without: older drivers, and drivers that will not. */
static const char *const optional[] = {
	"cuFuncGetParamInfo",          "cuStreamWriteValue64",      "cuDeviceGetDevResource",
	"cuDevSmResourceSplitByCount", "cuDevResourceGenerateDesc", "cuGreenCtxCreate",
	"cuGreenCtxDestroy",           "cuGreenCtxStreamCreate",    "cuStreamWriteValue32",
};

/* Entries the worker cannot do without. */
static bool required(const struct entry *e)
{
	for (size_t i = 0; i < sizeof(optional) / sizeof(optional[0]); i++)
		if (strcmp(e->name, optional[i]) == 0)
			return false;
	return true;
}

gpux_status cu_driver_load(struct cu_driver *d, char **ret_msg)
{
	const char *path = getenv("GPUX_CUDA_LIB");
	get_proc_v2_fn *get_proc;
	int version = 0;
	CUresult r;

	memset(d, 0, sizeof(*d));
	if (!path || !*path)
		path = "libcuda.so.1";
	d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!d->lib) {
		const char *e = dlerror();
		if (asprintf(ret_msg, "no CUDA driver (%s)", e ? e : path) < 0)
			*ret_msg = NULL;
		return GPUX_E_NODRIVER;
	}
	get_proc = (get_proc_v2_fn *)dlsym(d->lib, "cuGetProcAddress_v2");
	if (!get_proc) {
		*ret_msg = strdup("the CUDA driver is too old (no cuGetProcAddress_v2: CUDA 12 or "
				  "later is needed)");
		cu_driver_unload(d);
		return GPUX_E_NODRIVER;
	}
	/* Ask for the API these headers describe, or the driver's own when it is older. */
	{
		CUresult (*ver)(int *) = (CUresult(*)(int *))dlsym(d->lib, "cuDriverGetVersion");
		if (!ver || ver(&version) != CUDA_SUCCESS)
			version = CUDA_VERSION;
	}
	d->version = version;
	for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
		const struct entry *e = &entries[i];
		CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		void *fn = NULL;

		if (version >= e->min_version) {
			r = get_proc(e->name, &fn, version < CUDA_VERSION ? version : CUDA_VERSION,
				     CU_GET_PROC_ADDRESS_DEFAULT, &found);
			if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS)
				fn = NULL;
		}
		if (!fn && required(e)) {
			if (asprintf(ret_msg, "the CUDA driver (version %d) lacks %s", version,
				     e->name) < 0)
				*ret_msg = NULL;
			cu_driver_unload(d);
			return GPUX_E_NODRIVER;
		}
		memcpy((char *)d + e->offset, &fn, sizeof(fn));
	}
	return 0;
}

void cu_driver_unload(struct cu_driver *d)
{
	if (d->lib)
		(void)dlclose(d->lib);
	memset(d, 0, sizeof(*d));
}

gpux_status wrk_cu_err(CUresult r, bool *ret_sticky)
{
	*ret_sticky = false;
	switch (r) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return GPUX_E_NOMEM;
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
	case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
	case CUDA_ERROR_STUB_LIBRARY:
		return GPUX_E_NODRIVER;
	case CUDA_ERROR_INVALID_IMAGE:
	case CUDA_ERROR_NO_BINARY_FOR_GPU:
	case CUDA_ERROR_INVALID_PTX:
	case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
	case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
	case CUDA_ERROR_JIT_COMPILATION_DISABLED:
	case CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND:
	case CUDA_ERROR_SHARED_OBJECT_INIT_FAILED:
		return GPUX_E_COMPILE;
	case CUDA_ERROR_NOT_FOUND:
		return GPUX_E_NOTFOUND;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
	case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
	case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
		return GPUX_E_INVAL;
	/* The kernel broke the context: nothing more runs in it. */
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_LAUNCH_TIMEOUT:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_LAUNCH_FAILED:
	case CUDA_ERROR_ASSERT:
	case CUDA_ERROR_TENSOR_MEMORY_LEAK:
		*ret_sticky = true;
		return GPUX_E_KERNEL_FAULT;
	/* The device or the driver broke it. */
	case CUDA_ERROR_ECC_UNCORRECTABLE:
	case CUDA_ERROR_NVLINK_UNCORRECTABLE:
	case CUDA_ERROR_CONTAINED:
	case CUDA_ERROR_CONTEXT_IS_DESTROYED:
	case CUDA_ERROR_DEVICE_UNAVAILABLE:
	case CUDA_ERROR_EXTERNAL_DEVICE:
	case CUDA_ERROR_MPS_CONNECTION_FAILED:
	case CUDA_ERROR_MPS_RPC_FAILURE:
	case CUDA_ERROR_MPS_SERVER_NOT_READY:
	case CUDA_ERROR_MPS_CLIENT_TERMINATED:
	case CUDA_ERROR_UNKNOWN:
		*ret_sticky = true;
		return GPUX_E_DEVICE;
	default:
		return GPUX_E_DEVICE;
	}
}

const char *cu_err_name(const struct cu_driver *d, CUresult r)
{
	static __thread char buf[32];
	const char *name = NULL;

	if (d->cuGetErrorName && d->cuGetErrorName(r, &name) == CUDA_SUCCESS && name)
		return name;
	(void)snprintf(buf, sizeof(buf), "CUresult %d", (int)r);
	return buf;
}
