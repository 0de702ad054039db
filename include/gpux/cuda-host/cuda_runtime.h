/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/cuda_runtime.h: the toolkit's cuda_runtime.h on the host: what gpux_cuda.h gives already. */
#pragma once
#pragma GCC system_header
