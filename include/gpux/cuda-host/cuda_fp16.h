/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/cuda_fp16.h: __half and __half2 on the host, as the compiler's _Float16. */
#ifndef GPUX_CUDA_FP16_H
#define GPUX_CUDA_FP16_H
#pragma GCC system_header

/*
 * __half is _Float16 (IEEE binary16, as a GPU's): 2 bytes, the same bits in a buffer, its
 * arithmetic done as the compiler does it (in float, rounded to half after each operation).
 * The compiler must know _Float16 (gcc 12 or later on x86-64, aarch64).
 */
#ifndef __FLT16_MAX__
#error "cuda_fp16.h on gpux's host back end needs a C++ compiler with _Float16 (gcc 12 or later)"
#endif

typedef _Float16 __half;

struct __align__(4) __half2 {
	__half x, y;
};

static inline __half __float2half(float f) { return (__half)f; }
static inline __half __float2half_rn(float f) { return (__half)f; }
static inline __half __double2half(double d) { return (__half)d; }
static inline float __half2float(__half h) { return (float)h; }
static inline __half __int2half_rn(int i) { return (__half)i; }
static inline int __half2int_rn(__half h) { return (int)nearbyintf((float)h); }
static inline int __half2int_rz(__half h) { return (int)(float)h; }
static inline __half __ushort_as_half(unsigned short u) { __half h; memcpy(&h, &u, 2); return h; }
static inline unsigned short __half_as_ushort(__half h)
{
	unsigned short u;

	memcpy(&u, &h, 2);
	return u;
}
static inline __half __short_as_half(short s) { __half h; memcpy(&h, &s, 2); return h; }
static inline short __half_as_short(__half h) { short s; memcpy(&s, &h, 2); return s; }

static inline __half __hadd(__half a, __half b) { return a + b; }
static inline __half __hsub(__half a, __half b) { return a - b; }
static inline __half __hmul(__half a, __half b) { return a * b; }
static inline __half __hdiv(__half a, __half b) { return a / b; }
static inline __half __hneg(__half a) { return -a; }
static inline __half __habs(__half a) { return a < (__half)0 ? -a : a; }
/* In double, exact for halves: one rounding, as a GPU's fused one. */
static inline __half __hfma(__half a, __half b, __half c)
{
	return (__half)fma((double)a, (double)b, (double)c);
}
static inline __half __hmax(__half a, __half b) { return a < b ? b : a; }
static inline __half __hmin(__half a, __half b) { return b < a ? b : a; }
static inline bool __heq(__half a, __half b) { return a == b; }
static inline bool __hne(__half a, __half b) { return a != b; }
static inline bool __hlt(__half a, __half b) { return a < b; }
static inline bool __hle(__half a, __half b) { return a <= b; }
static inline bool __hgt(__half a, __half b) { return a > b; }
static inline bool __hge(__half a, __half b) { return a >= b; }
static inline bool __hisnan(__half a) { return a != a; }
static inline bool __hisinf(__half a) { return __builtin_isinf((float)a); }
static inline __half hsqrt(__half a) { return (__half)sqrtf((float)a); }
static inline __half hrsqrt(__half a) { return (__half)(1.0f / sqrtf((float)a)); }
static inline __half hexp(__half a) { return (__half)expf((float)a); }
static inline __half hlog(__half a) { return (__half)logf((float)a); }
static inline __half hsin(__half a) { return (__half)sinf((float)a); }
static inline __half hcos(__half a) { return (__half)cosf((float)a); }
static inline __half hfloor(__half a) { return (__half)floorf((float)a); }
static inline __half hceil(__half a) { return (__half)ceilf((float)a); }
static inline __half htrunc(__half a) { return (__half)truncf((float)a); }
static inline __half hrint(__half a) { return (__half)rintf((float)a); }

static inline __half2 __halves2half2(__half a, __half b) { return __half2{ a, b }; }
static inline __half2 __floats2half2_rn(float a, float b)
{
	return __half2{ (__half)a, (__half)b };
}
static inline __half2 __float2half2_rn(float a) { return __half2{ (__half)a, (__half)a }; }
static inline __half2 __half2half2(__half a) { return __half2{ a, a }; }
static inline float __low2float(__half2 h) { return (float)h.x; }
static inline float __high2float(__half2 h) { return (float)h.y; }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline float2 __half22float2(__half2 h) { return float2{ (float)h.x, (float)h.y }; }
static inline __half2 __float22half2_rn(float2 f) { return __half2{ (__half)f.x, (__half)f.y }; }
static inline __half2 __hadd2(__half2 a, __half2 b) { return __half2{ a.x + b.x, a.y + b.y }; }
static inline __half2 __hsub2(__half2 a, __half2 b) { return __half2{ a.x - b.x, a.y - b.y }; }
static inline __half2 __hmul2(__half2 a, __half2 b) { return __half2{ a.x * b.x, a.y * b.y }; }
static inline __half2 __h2div(__half2 a, __half2 b) { return __half2{ a.x / b.x, a.y / b.y }; }
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c)
{
	return __half2{ __hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y) };
}
static inline __half2 __hneg2(__half2 a) { return __half2{ -a.x, -a.y }; }

static inline __half atomicAdd(__half *p, __half v)
{
	unsigned short old = __atomic_load_n((unsigned short *)p, __ATOMIC_RELAXED), nu;
	__half o, n;

	do {
		memcpy(&o, &old, 2);
		n = o + v;
		memcpy(&nu, &n, 2);
	} while (!__atomic_compare_exchange_n((unsigned short *)p, &old, nu, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return o;
}

#endif
