/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/gpux_cuda.h: the CUDA device dialect on the host, put in front of every source. */
#ifndef GPUX_CUDA_H
#define GPUX_CUDA_H
#pragma GCC system_header

/*
 * The host back end compiles CUDA C++ with the system's C++ compiler and this header in front
 * (-include), as NVRTC compiles it with its own: what a kernel may use without an #include.
 * It gives the qualifiers (__global__, __device__, __host__, __shared__, __constant__), the
 * built-in variables (threadIdx, blockIdx, blockDim, gridDim, warpSize), the vector types,
 * __syncthreads() and its variants, warp votes and shuffles, atomics, fences, clocks, the
 * math functions and intrinsics, printf and assert. The headers beside it stand for the
 * toolkit's: cuda_runtime.h, cooperative_groups.h (and /reduce.h), cuda_fp16.h.
 *
 * What it cannot give is refused when the module is compiled, with a message naming it:
 * texture and surface objects, grid-wide synchronization, kernel launches from the device,
 * inline assembly, the toolkit's other libraries (CUB, Thrust, libcu++).
 *
 * __shared__ variables are thread_local: all threads of a block run on one CPU thread, and
 * the blocks on one CPU thread one after another, so each block has its own.
 */

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gpux_cuda_block.h"

#define __CUDACC__ 1
#define GPUX_CUDA_HOST 1

#ifdef GPUX_CU_SCAN
/* The first pass (the preprocessor only): the worker finds kernels, dynamic shared arrays
 * and the module's variables by these words. */
#define __global__ __gpux_global__
#define __shared__ __gpux_shared__
#define __device__ __gpux_device__
#define __constant__ __gpux_constant__
#else
#define __global__ __attribute__((visibility("default")))
#define __shared__ thread_local
#define __device__
#define __constant__
#endif
#define __host__
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __maxnreg__(n)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(n) __attribute__((aligned(n)))
#define __cudart_builtin__
#define __CUDA_ALIGN__(n) __attribute__((aligned(n)))

#define threadIdx (::gpux_cu::cur->tid)
#define blockIdx (::gpux_cu::cur->bid)
#define blockDim (::gpux_cu::cur->bdim)
#define gridDim (::gpux_cu::cur->gdim)
static constexpr int warpSize = 32;

#define GPUX_CU_UNSUPPORTED(what)                                                                  \
	__attribute__((unavailable("not supported by gpux's host back end: " what)))

/* ---- synchronization ---- */

static inline void __syncthreads() { (void)::gpux_cu::barrier(0, nullptr); }
static inline int __syncthreads_count(int pred)
{
	return (int)::gpux_cu::barrier(pred != 0, nullptr);
}
static inline int __syncthreads_and(int pred)
{
	uint32_t n;

	return ::gpux_cu::barrier(pred != 0, &n) == n;
}
static inline int __syncthreads_or(int pred) { return ::gpux_cu::barrier(pred != 0, nullptr) != 0; }
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
	(void)::gpux_cu::warp_op(::gpux_cu::W_SYNC, mask, 0, 0, 32);
}
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* A counter that only goes up; clock() is the C library's (processor time). */
static inline long long clock64()
{
#if defined(__x86_64__)
	return (long long)__builtin_ia32_rdtsc();
#else
	unsigned long long v;

	__asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
	return (long long)v;
#endif
}
static inline unsigned long long __globaltimer()
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_REALTIME, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
static inline void __nanosleep(unsigned ns)
{
	struct timespec ts = { 0, (long)ns };

	(void)nanosleep(&ts, nullptr);
}

/* ---- warp votes and shuffles: every lane of the mask takes part ---- */

namespace gpux_cu {
template <class T> static inline uint64_t bits_of(T v)
{
	static_assert(sizeof(T) <= 8, "warp operations take values of at most 8 bytes");
	uint64_t u = 0;

	memcpy(&u, &v, sizeof(v));
	return u;
}
template <class T> static inline T of_bits(uint64_t u)
{
	T v;

	memcpy(&v, &u, sizeof(v));
	return v;
}
} /* namespace gpux_cu */

template <class T> static inline T __shfl_sync(unsigned mask, T var, int src, int width = 32)
{
	return ::gpux_cu::of_bits<T>(
		::gpux_cu::warp_op(::gpux_cu::W_SHFL, mask, ::gpux_cu::bits_of(var), src, width));
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T var, unsigned d, int width = 32)
{
	return ::gpux_cu::of_bits<T>(
		::gpux_cu::warp_op(::gpux_cu::W_UP, mask, ::gpux_cu::bits_of(var), (int)d, width));
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned d, int width = 32)
{
	return ::gpux_cu::of_bits<T>(
		::gpux_cu::warp_op(::gpux_cu::W_DOWN, mask, ::gpux_cu::bits_of(var), (int)d, width));
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T var, int lanes, int width = 32)
{
	return ::gpux_cu::of_bits<T>(
		::gpux_cu::warp_op(::gpux_cu::W_XOR, mask, ::gpux_cu::bits_of(var), lanes, width));
}
static inline unsigned __ballot_sync(unsigned mask, int pred)
{
	return (unsigned)::gpux_cu::warp_op(::gpux_cu::W_BALLOT, mask, pred != 0, 0, 32);
}
static inline int __any_sync(unsigned mask, int pred)
{
	return (int)::gpux_cu::warp_op(::gpux_cu::W_ANY, mask, pred != 0, 0, 32);
}
static inline int __all_sync(unsigned mask, int pred)
{
	return (int)::gpux_cu::warp_op(::gpux_cu::W_ALL, mask, pred != 0, 0, 32);
}
static inline int __uni_sync(unsigned mask, int pred)
{
	unsigned b = __ballot_sync(mask, pred);

	return b == 0 || b == (mask & ::gpux_cu::active_mask());
}
static inline unsigned __activemask() { return ::gpux_cu::active_mask(); }
template <class T> static inline unsigned __match_any_sync(unsigned mask, T v)
{
	return (unsigned)::gpux_cu::warp_op(::gpux_cu::W_MATCH_ANY, mask, ::gpux_cu::bits_of(v), 0, 32);
}
template <class T> static inline unsigned __match_all_sync(unsigned mask, T v, int *pred)
{
	unsigned r = (unsigned)::gpux_cu::warp_op(::gpux_cu::W_MATCH_ALL, mask,
						  ::gpux_cu::bits_of(v), 0, 32);

	*pred = r != 0;
	return r;
}
#define GPUX_CU_REDUCE(name, T, op)                                                                \
	static inline T name(unsigned mask, T v)                                                   \
	{                                                                                          \
		return (T)::gpux_cu::warp_op(::gpux_cu::op, mask, (uint32_t)v, 0, 32);             \
	}
GPUX_CU_REDUCE(__reduce_add_sync, unsigned, W_ADD)
GPUX_CU_REDUCE(__reduce_add_sync, int, W_ADD)
GPUX_CU_REDUCE(__reduce_min_sync, unsigned, W_UMIN)
GPUX_CU_REDUCE(__reduce_min_sync, int, W_MIN)
GPUX_CU_REDUCE(__reduce_max_sync, unsigned, W_UMAX)
GPUX_CU_REDUCE(__reduce_max_sync, int, W_MAX)
GPUX_CU_REDUCE(__reduce_and_sync, unsigned, W_AND)
GPUX_CU_REDUCE(__reduce_or_sync, unsigned, W_OR)
GPUX_CU_REDUCE(__reduce_xor_sync, unsigned, W_XOR_RED)
#undef GPUX_CU_REDUCE

#include "gpux_cuda_math.h"

/* ---- printf, assert, __trap ---- */

/*
 * printf() is checked as the C library's is when the module is compiled, and runs; its text
 * goes where a GPU's goes under gpuxd: nowhere (a worker's standard output is /dev/null).
 * The module's own definition (-Bsymbolic binds its calls), so no kernel writes to a file.
 */
extern "C" __attribute__((format(printf, 1, 2))) int printf(const char *__restrict fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(nullptr, 0, fmt, ap);
	va_end(ap);
	return n;
}

/* A failed assert() fails the request with what it says (on a GPU: a sticky fault). */
extern "C" void __assert_fail(const char *expr, const char *file, unsigned int line,
			      const char *func) noexcept
{
	::gpux_cu::fail("assertion \"%s\" failed (%s:%u, %s)", expr, file, line, func);
}

[[noreturn]] static inline void __trap() { ::gpux_cu::fail("the kernel called __trap()"); }
[[noreturn]] static inline void __brkpt() { ::gpux_cu::fail("the kernel called __brkpt()"); }

/* ---- what the host back end does not have ---- */

typedef unsigned long long cudaTextureObject_t GPUX_CU_UNSUPPORTED("texture objects");
typedef unsigned long long cudaSurfaceObject_t GPUX_CU_UNSUPPORTED("surface objects");
template <class T, int D = 1, int M = 0> struct GPUX_CU_UNSUPPORTED("texture references") texture;
template <class T, int D = 1> struct GPUX_CU_UNSUPPORTED("surface references") surface;
#define GPUX_CU_NO_TEX(name)                                                                       \
	template <class... A> void name(A...) GPUX_CU_UNSUPPORTED("texture and surface functions");
GPUX_CU_NO_TEX(tex1Dfetch) GPUX_CU_NO_TEX(tex1D) GPUX_CU_NO_TEX(tex2D) GPUX_CU_NO_TEX(tex3D)
GPUX_CU_NO_TEX(tex1DLayered) GPUX_CU_NO_TEX(tex2DLayered) GPUX_CU_NO_TEX(texCubemap)
GPUX_CU_NO_TEX(tex2Dgather) GPUX_CU_NO_TEX(tex1DLod) GPUX_CU_NO_TEX(tex2DLod)
GPUX_CU_NO_TEX(tex3DLod) GPUX_CU_NO_TEX(tex1DGrad) GPUX_CU_NO_TEX(tex2DGrad)
GPUX_CU_NO_TEX(surf1Dread) GPUX_CU_NO_TEX(surf1Dwrite) GPUX_CU_NO_TEX(surf2Dread)
GPUX_CU_NO_TEX(surf2Dwrite) GPUX_CU_NO_TEX(surf3Dread) GPUX_CU_NO_TEX(surf3Dwrite)
#undef GPUX_CU_NO_TEX
#define GPUX_CU_NO_DP(name)                                                                        \
	template <class... A> int name(A...) GPUX_CU_UNSUPPORTED("kernel launches from the device " \
								"(dynamic parallelism)");
GPUX_CU_NO_DP(cudaDeviceSynchronize) GPUX_CU_NO_DP(cudaLaunchDevice)
GPUX_CU_NO_DP(cudaGetParameterBuffer) GPUX_CU_NO_DP(cudaStreamCreateWithFlags)
GPUX_CU_NO_DP(cudaGraphLaunch) GPUX_CU_NO_DP(cudaLaunchKernel)
#undef GPUX_CU_NO_DP

/* ---- a kernel's entry: one block ---- */

namespace gpux_cu {
template <unsigned... I> struct seq {};
template <unsigned N, unsigned... I> struct make_seq : make_seq<N - 1, N - 1, I...> {};
template <unsigned... I> struct make_seq<0, I...> {
	typedef seq<I...> type;
};
template <unsigned I, class T> struct leaf {
	T v;
};
template <class S, class... P> struct pack_of;
template <unsigned... I, class... P> struct pack_of<seq<I...>, P...> : leaf<I, P>... {
	static pack_of load(void *const *args)
	{
		pack_of p;

		(void)args;
		((void)memcpy(&static_cast<leaf<I, P> &>(p).v, args[I], sizeof(P)), ...);
		return p;
	}
	template <void (*K)(P...)> void call() { K(static_cast<leaf<I, P> &>(*this).v...); }
};

template <class F> struct entry_of;
template <class... P> struct entry_of<void (*)(P...)> {
	typedef pack_of<typename make_seq<sizeof...(P)>::type, P...> pack;
	static constexpr uint32_t sizes[sizeof...(P) + 1] = { (uint32_t)sizeof(P)..., 0 };

	template <void (*K)(P...)> static void thread_fn(void *a)
	{
		static_cast<pack *>(a)->template call<K>();
	}

	/* Every thread of the block, each to its end or to its first wait. */
	template <void (*K)(P...)> __attribute__((noinline)) static void direct(block *b, pack *a)
	{
		uint32_t x = 0, y = 0, z = 0;

		/* Said again so that the compiler sees threadIdx is b->tid in the inlined kernel. */
		cur = b;
		for (uint32_t i = 0; i < b->n; i++) {
			b->lin = i;
			b->tid = uint3{ x, y, z };
			a->template call<K>();
			if (b->fibers)
				return;
			if (++x == b->bdim.x) {
				x = 0;
				if (++y == b->bdim.y) {
					y = 0;
					z++;
				}
			}
		}
	}

	template <void (*K)(P...)> static int run(gpux_cu_launch *l, void *const *args)
	{
		pack a = pack::load(args);
		thread t[THREADS_MAX];
		block b;

		block_init(&b, l, t, &a, thread_fn<K>);
		if (l->block_dim.x * l->block_dim.y * l->block_dim.z > THREADS_MAX) {
			(void)snprintf(l->error, sizeof(l->error), "more than %u threads a block",
				       THREADS_MAX);
			return GPUX_CU_REFUSED;
		}
		if (l->shared_bytes > GPUX_CU_DYN_SHARED_MAX) {
			(void)snprintf(l->error, sizeof(l->error),
				       "%u bytes of dynamic shared memory: at most %u on the host",
				       l->shared_bytes, GPUX_CU_DYN_SHARED_MAX);
			return GPUX_CU_REFUSED;
		}
		cur = &b;
		if (__builtin_setjmp(b.abort_buf))
			return GPUX_CU_FAILED;
		direct<K>(&b, &a);
		if (b.fibers)
			fibers_finish(&b);
		return 0;
	}
};

/* A kernel's entry, laid out as struct gpux_cu_kernel (its first member the kernel's own
 * type, so that the module's table is made without a cast, as constant data). */
template <auto K> struct kernel_desc {
	decltype(K) kernel;
	gpux_cu_block_fn *run;
	const char *name;
	uint32_t nparams;
	const uint32_t *param_size;
};

template <auto K> static constexpr kernel_desc<K> describe(const char *name)
{
	typedef entry_of<decltype(K)> e;

	static_assert(sizeof(kernel_desc<K>) == sizeof(gpux_cu_kernel) &&
			      offsetof(kernel_desc<K>, param_size) ==
				      offsetof(gpux_cu_kernel, param_size),
		      "the layout of struct gpux_cu_kernel");
	return kernel_desc<K>{ K, e::template run<K>, name,
			       (uint32_t)(sizeof(e::sizes) / sizeof(e::sizes[0]) - 1), e::sizes };
}
} /* namespace gpux_cu */

#endif
