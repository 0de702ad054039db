/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/device_launch_parameters.h: the toolkit's device_launch_parameters.h on the host: what gpux_cuda.h gives already. */
#pragma once
#pragma GCC system_header
