/* SPDX-License-Identifier: MIT */
/* tests/kernels/reduce.cu: block sums four ways, kernel templates asked for by name expression:
 * out[b] is the sum of block b's share of in[0, n). */
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include "block_shared.cuh"

namespace cg = cooperative_groups;

/* A tree in dynamic shared memory, one element a thread. */
template <class T> __global__ void reduce_tree(const T *in, T *out, unsigned n)
{
	T *s = block_shared<T>::get();
	unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;

	s[t] = i < n ? in[i] : T(0);
	__syncthreads();
	for (unsigned d = blockDim.x / 2; d > 0; d >>= 1) {
		if (t < d)
			s[t] += s[t + d];
		__syncthreads();
	}
	if (t == 0)
		out[blockIdx.x] = s[0];
}

/* Two elements a thread, the tree down to a warp, then shuffles. */
template <class T, unsigned BLOCK> __global__ void reduce_shfl(const T *in, T *out, unsigned n)
{
	T *s = block_shared<T>::get();
	unsigned t = threadIdx.x, i = blockIdx.x * BLOCK * 2 + t;
	T v = i < n ? in[i] : T(0);

	if (i + BLOCK < n)
		v += in[i + BLOCK];
	s[t] = v;
	__syncthreads();
	for (unsigned d = BLOCK / 2; d >= 32; d >>= 1) {
		if (t < d)
			s[t] = v = v + s[t + d];
		__syncthreads();
	}
	if (t < 32) {
		for (int d = 16; d > 0; d >>= 1)
			v += __shfl_down_sync(0xffffffffu, v, d);
		if (t == 0)
			out[blockIdx.x] = v;
	}
}

/* Any number of elements a thread (a grid-striding loop), then the tree. */
template <class T, unsigned BLOCK, bool POW2>
__global__ void reduce_stride(const T *in, T *out, unsigned n)
{
	T *s = block_shared<T>::get();
	unsigned t = threadIdx.x, stride = BLOCK * 2 * gridDim.x;
	T v = T(0);

	for (unsigned i = blockIdx.x * BLOCK * 2 + t; i < n; i += stride) {
		v += in[i];
		if (POW2 || i + BLOCK < n)
			v += in[i + BLOCK];
	}
	s[t] = v;
	__syncthreads();
	for (unsigned d = BLOCK / 2; d > 0; d >>= 1) {
		if (t < d)
			s[t] += s[t + d];
		__syncthreads();
	}
	if (t == 0)
		out[blockIdx.x] = s[0];
}

/* Cooperative groups: each warp-sized tile reduces, then the first tile the tiles' sums. */
template <class T> __global__ void reduce_cg(const T *in, T *out, unsigned n)
{
	T *s = block_shared<T>::get();
	cg::thread_block block = cg::this_thread_block();
	cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
	unsigned stride = blockDim.x * gridDim.x;
	T v = T(0);

	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		v += in[i];
	v = cg::reduce(tile, v, cg::plus<T>());
	if (tile.thread_rank() == 0)
		s[tile.meta_group_rank()] = v;
	block.sync();
	if (tile.meta_group_rank() == 0) {
		v = tile.thread_rank() < tile.meta_group_size() ? s[tile.thread_rank()] : T(0);
		v = cg::reduce(tile, v, cg::plus<T>());
		if (tile.thread_rank() == 0)
			out[blockIdx.x] = v;
	}
}

/* One instance the source makes itself: found without a name expression. */
template __global__ void reduce_tree<double>(const double *, double *, unsigned);
