/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/device_launch_parameters.h: the toolkit's header, which gpux_cuda.h stands for. */
#pragma once
#pragma GCC system_header
