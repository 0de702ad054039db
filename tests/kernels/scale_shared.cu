/* SPDX-License-Identifier: MIT */
/* tests/kernels/scale_shared.cu: each block reverses its elements through dynamic shared
 * memory and scales them by the block's size; a kernel template with the client's header. */
#include "block_shared.cuh"

template <class T> __global__ void reverse_scale(const T *in, T *out)
{
	T *s = block_shared<T>::get();
	unsigned t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;

	s[t] = in[base + t];
	__syncthreads();
	out[base + t] = s[n - 1 - t] * (T)n;
}
