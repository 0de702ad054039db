/* SPDX-License-Identifier: MIT */
/* tests/kernels/warp.cu: warp votes and shuffles on full warps, of ints and doubles, over whole
 * warps and segments; tiles of 16 threads of cooperative groups. */
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

#define FULL 0xffffffffu

__global__ void votes(const int *in, unsigned *ballot, int *any, int *all, unsigned *active)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;

	ballot[i] = __ballot_sync(FULL, in[i] & 1);
	any[i] = __any_sync(FULL, in[i] > 90);
	all[i] = __all_sync(FULL, in[i] >= 0);
	active[i] = __activemask();
}

/* out[k * n + i] for thread i: lane 7's value; the warp's inclusive prefix sum; a sum down the
 * lanes; the warp's maximum by butterfly; the value 3 lanes on within segments of 8. */
__global__ void shuffles(const int *in, int *out, unsigned n)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
	int v = in[i], s = v, r = v, x = v;

	out[i] = __shfl_sync(FULL, v, 7);
	for (unsigned d = 1; d < 32; d *= 2) {
		int o = __shfl_up_sync(FULL, s, d);

		if (lane >= d)
			s += o;
	}
	out[n + i] = s;
	for (unsigned d = 16; d > 0; d /= 2)
		r += __shfl_down_sync(FULL, r, d);
	out[2 * n + i] = r;
	for (int m = 16; m > 0; m /= 2)
		x = max(x, __shfl_xor_sync(FULL, x, m));
	out[3 * n + i] = x;
	out[4 * n + i] = __shfl_down_sync(FULL, v, 3, 8);
}

/* Doubles through shuffles: each lane takes its neighbour's (lane ^ 1). */
__global__ void shuffle_double(const double *in, double *out)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;

	out[i] = __shfl_xor_sync(FULL, in[i], 1);
}

/* Tiles of 16: each thread gets its tile's sum and its tile's ballot of odd values. */
__global__ void tiles16(const int *in, int *sum, unsigned *ballot)
{
	cg::thread_block_tile<16> t = cg::tiled_partition<16>(cg::this_thread_block());
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;

	sum[i] = cg::reduce(t, in[i], cg::plus<int>());
	ballot[i] = t.ballot(in[i] & 1);
}
