/* SPDX-License-Identifier: MIT */
/* cudaload/nvrtc-loader.c: finding and loading NVRTC at run time. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "macro.h"
#include "nvrtc-loader.h"

int nvrtc_load(struct nvrtc *n, char *why, size_t why_len)
{
	static const char *const names[] = {
		"libnvrtc.so.13",
		"libnvrtc.so.12",
		"libnvrtc.so",
		"/usr/local/cuda/lib64/libnvrtc.so.13",
		"/usr/local/cuda/lib64/libnvrtc.so.12",
		"/usr/local/cuda/lib64/libnvrtc.so",
	};
	const char *env = getenv("GPUX_NVRTC_LIB");
	const char *cuda = getenv("CUDA_PATH");
	char path[512];

	if (env && *env)
		n->lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
	if (!n->lib && cuda && *cuda) {
		(void)snprintf(path, sizeof(path), "%s/lib64/libnvrtc.so", cuda);
		n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
	for (unsigned i = 0; !n->lib && i < ARRAY_SIZE(names); i++)
		n->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!n->lib) {
		(void)snprintf(why, why_len, "NVRTC not found (libnvrtc.so; set GPUX_NVRTC_LIB)");
		return -ENOENT;
	}
#define SYM(field, name)                                                                           \
	do {                                                                                       \
		*(void **)&n->field = dlsym(n->lib, name);                                         \
		if (!n->field) {                                                                   \
			(void)snprintf(why, why_len, "NVRTC lacks %s", name);                      \
			return -ENOENT;                                                            \
		}                                                                                  \
	} while (0)
	SYM(version, "nvrtcVersion");
	SYM(create, "nvrtcCreateProgram");
	SYM(compile, "nvrtcCompileProgram");
	SYM(log_size, "nvrtcGetProgramLogSize");
	SYM(log, "nvrtcGetProgramLog");
	SYM(cubin_size, "nvrtcGetCUBINSize");
	SYM(cubin, "nvrtcGetCUBIN");
	SYM(destroy, "nvrtcDestroyProgram");
	SYM(error, "nvrtcGetErrorString");
	SYM(add_name, "nvrtcAddNameExpression");
	SYM(lowered_name, "nvrtcGetLoweredName");
#undef SYM
	*(void **)&n->pch_create_status = dlsym(n->lib, "nvrtcGetPCHCreateStatus");
	*(void **)&n->pch_heap_required = dlsym(n->lib, "nvrtcGetPCHHeapSizeRequired");
	*(void **)&n->pch_heap_set = dlsym(n->lib, "nvrtcSetPCHHeapSize");
	return 0;
}

const char *nvrtc_file(const struct nvrtc *n)
{
	Dl_info info;

	if (!n->version || !dladdr(*(void **)&n->version, &info))
		return NULL;
	return info.dli_fname;
}
