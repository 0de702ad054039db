/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/cooperative_groups.h: cooperative groups of a block on the host. */
#ifndef GPUX_CUDA_COOPERATIVE_GROUPS_H
#define GPUX_CUDA_COOPERATIVE_GROUPS_H
#pragma GCC system_header

/*
 * The block (this_thread_block()) and its tiles of 1 to 32 threads
 * (tiled_partition<N>(), the whole warp or part of it) with sync(), ranks and sizes, and a
 * tile's shuffles, votes and match_any. A grid (this_grid()) is for grid-wide
 * synchronization, which needs a cooperative launch: it is refused when compiled.
 */

namespace cooperative_groups {

class thread_block {
public:
	void sync() const { __syncthreads(); }
	unsigned long long thread_rank() const { return ::gpux_cu::cur->lin; }
	unsigned long long size() const { return ::gpux_cu::cur->n; }
	unsigned long long num_threads() const { return ::gpux_cu::cur->n; }
	dim3 group_index() const { return dim3(blockIdx); }
	dim3 thread_index() const { return dim3(threadIdx); }
	dim3 group_dim() const { return blockDim; }
	dim3 dim_threads() const { return blockDim; }
};

static inline thread_block this_thread_block() { return thread_block(); }

/* A tile of N threads (a power of two, at most 32): lanes [k * N, k * N + N) of a warp. */
template <unsigned N> class thread_block_tile {
	static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0,
		      "tiles of 1, 2, 4, 8, 16 or 32 threads on the host");

public:
	unsigned mask() const
	{
		unsigned lane = ::gpux_cu::cur->lin % 32;

		return N == 32 ? 0xffffffffu : ((1u << N) - 1) << (lane & ~(N - 1));
	}
	void sync() const { __syncwarp(mask()); }
	unsigned long long thread_rank() const { return ::gpux_cu::cur->lin % N; }
	unsigned long long size() const { return N; }
	unsigned long long num_threads() const { return N; }
	unsigned long long meta_group_rank() const { return ::gpux_cu::cur->lin / N; }
	unsigned long long meta_group_size() const { return (::gpux_cu::cur->n + N - 1) / N; }
	template <class T> T shfl(T v, int src) const { return __shfl_sync(mask(), v, src, N); }
	template <class T> T shfl_up(T v, unsigned d) const { return __shfl_up_sync(mask(), v, d, N); }
	template <class T> T shfl_down(T v, unsigned d) const
	{
		return __shfl_down_sync(mask(), v, d, N);
	}
	template <class T> T shfl_xor(T v, int m) const { return __shfl_xor_sync(mask(), v, m, N); }
	int any(int pred) const { return __any_sync(mask(), pred); }
	int all(int pred) const { return __all_sync(mask(), pred); }
	unsigned ballot(int pred) const
	{
		return (__ballot_sync(mask(), pred) >> (::gpux_cu::cur->lin % 32 & ~(N - 1))) &
		       (N == 32 ? 0xffffffffu : (1u << N) - 1);
	}
	template <class T> unsigned match_any(T v) const
	{
		return (__match_any_sync(mask(), v) >> (::gpux_cu::cur->lin % 32 & ~(N - 1))) &
		       (N == 32 ? 0xffffffffu : (1u << N) - 1);
	}
};

template <unsigned N, class Parent>
static inline thread_block_tile<N> tiled_partition(const Parent &)
{
	return thread_block_tile<N>();
}

template <class Group> static inline void sync(const Group &g) { g.sync(); }

class GPUX_CU_UNSUPPORTED("grid-wide groups (a cooperative launch)") grid_group;
grid_group this_grid() GPUX_CU_UNSUPPORTED("grid-wide groups (a cooperative launch)");
template <class... A>
void memcpy_async(A...) GPUX_CU_UNSUPPORTED("cooperative_groups::memcpy_async");

} /* namespace cooperative_groups */

#endif
