/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/device_functions.h: the toolkit's device_functions.h on the host: what gpux_cuda.h gives already. */
#pragma once
#pragma GCC system_header
