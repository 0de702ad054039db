/* SPDX-License-Identifier: MIT */
/* tests/kernels/matmul.cu: C = A B in square tiles of shared memory, the block synchronized
 * through cooperative groups; one device function template for both tile sizes. */
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

/* C (h x w) = A (h x k) B (k x w), all dimensions multiples of TILE; a TILE x TILE block a
 * tile of C. */
template <int TILE>
__device__ void matmul_tiles(float *c, const float *a, const float *b, int k, int w)
{
	__shared__ float ta[TILE][TILE];
	__shared__ float tb[TILE][TILE];
	cg::thread_block block = cg::this_thread_block();
	int tx = threadIdx.x, ty = threadIdx.y;
	int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
	float acc = 0.0f;

	for (int t = 0; t < k; t += TILE) {
		ta[ty][tx] = a[row * k + t + tx];
		tb[ty][tx] = b[(t + ty) * w + col];
		block.sync();
#pragma unroll
		for (int i = 0; i < TILE; i++)
			acc += ta[ty][i] * tb[i][tx];
		block.sync();
	}
	c[row * w + col] = acc;
}

__global__ void matmul_tile16(float *c, const float *a, const float *b, int k, int w)
{
	matmul_tiles<16>(c, a, b, k, w);
}

__global__ void matmul_tile32(float *c, const float *a, const float *b, int k, int w)
{
	matmul_tiles<32>(c, a, b, k, w);
}
