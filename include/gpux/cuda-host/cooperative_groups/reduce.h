/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/cooperative_groups/reduce.h: reductions over a tile of threads, on the host. */
#ifndef GPUX_CUDA_COOPERATIVE_GROUPS_REDUCE_H
#define GPUX_CUDA_COOPERATIVE_GROUPS_REDUCE_H
#pragma GCC system_header

#include <cooperative_groups.h>

namespace cooperative_groups {

template <class T> struct plus {
	T operator()(T a, T b) const { return a + b; }
};
template <class T> struct less {
	T operator()(T a, T b) const { return a < b ? a : b; }
};
template <class T> struct greater {
	T operator()(T a, T b) const { return a < b ? b : a; }
};
template <class T> struct bit_and {
	T operator()(T a, T b) const { return a & b; }
};
template <class T> struct bit_or {
	T operator()(T a, T b) const { return a | b; }
};
template <class T> struct bit_xor {
	T operator()(T a, T b) const { return a ^ b; }
};

/* Every thread of the tile gets op over the tile's values (a butterfly of shuffles). */
template <unsigned N, class T, class Op>
static inline T reduce(const thread_block_tile<N> &g, T v, Op op)
{
	for (unsigned d = N / 2; d > 0; d /= 2)
		v = op(v, g.shfl_xor(v, (int)d));
	return v;
}

} /* namespace cooperative_groups */

#endif
