/* SPDX-License-Identifier: MIT */
/* worker/compile/toolkit.h: the CUDA toolkit's include directories that CUDA C++ modules may use. */
#pragma once

#include <limits.h>

#define WRK_TOOLKIT_DIRS_MAX 2u

struct wrk_toolkit {
	unsigned ndirs;
	char dirs[WRK_TOOLKIT_DIRS_MAX][PATH_MAX];
};

/*
 * The toolkit's include directory (the one holding cuda_fp16.h) and, where the toolkit keeps
 * the CUDA C++ library apart, its cccl directory (cuda/std, CUB, Thrust): found beside the
 * NVRTC at nvrtc_path (its lib64/../include), else under $CUDA_PATH, else /usr/local/cuda.
 * Only directories that nobody but root or this user can change are taken (whoever could
 * write there could plant a header that every module includes). Never chosen by a client.
 * What was found (possibly nothing) is in *ret.
 */
void wrk_toolkit_find(const char *nvrtc_path, struct wrk_toolkit *ret);
