/* SPDX-License-Identifier: MIT */
/* tests/kernels/vector_add.cu: c = a + b, one thread an element: a kernel with C++ linkage. */

__global__ void vector_add(const float *a, const float *b, float *c, int n)
{
	int i = blockDim.x * blockIdx.x + threadIdx.x;

	if (i < n)
		c[i] = a[i] + b[i];
}
