/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/cooperative_groups/scan.h: scans over a tile of threads, on the host. */
#ifndef GPUX_CUDA_COOPERATIVE_GROUPS_SCAN_H
#define GPUX_CUDA_COOPERATIVE_GROUPS_SCAN_H
#pragma GCC system_header

#include "reduce.h"

namespace cooperative_groups {

/* Inclusive and exclusive scans over the tile. */
template <unsigned N, class T, class Op>
static inline T inclusive_scan(const thread_block_tile<N> &g, T v, Op op)
{
	for (unsigned d = 1; d < N; d *= 2) {
		T o = g.shfl_up(v, d);

		if (g.thread_rank() >= d)
			v = op(v, o);
	}
	return v;
}
template <unsigned N, class T> static inline T inclusive_scan(const thread_block_tile<N> &g, T v)
{
	return inclusive_scan(g, v, plus<T>());
}
template <unsigned N, class T, class Op>
static inline T exclusive_scan(const thread_block_tile<N> &g, T v, Op op)
{
	T in = inclusive_scan(g, v, op), prev = g.shfl_up(in, 1);

	return g.thread_rank() == 0 ? T() : prev;
}
template <unsigned N, class T> static inline T exclusive_scan(const thread_block_tile<N> &g, T v)
{
	return exclusive_scan(g, v, plus<T>());
}

} /* namespace cooperative_groups */

#endif
