/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/cuda_runtime_api.h: the toolkit's header, which gpux_cuda.h stands for. */
#pragma once
#pragma GCC system_header
