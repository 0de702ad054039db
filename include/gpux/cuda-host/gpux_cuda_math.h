/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/gpux_cuda_math.h: CUDA's atomics, math functions and intrinsics, for the host. */
#ifndef GPUX_CUDA_MATH_H
#define GPUX_CUDA_MATH_H
#pragma GCC system_header

/*
 * The math functions of <math.h> (sinf, expf, fmaf, ... and the C++ overloads) are the C
 * library's; what follows are CUDA's own names. Intrinsics with a rounding mode exist in
 * round-to-nearest (_rn) only. Atomics are the compiler's, relaxed as on a GPU; blocks run
 * on several CPU threads at once, so they are atomic between blocks too.
 */

/* ---- atomics ---- */

#define GPUX_CU_ATOMIC_OP(name, T, builtin)                                                        \
	static inline T name(T *p, T v) { return builtin(p, v, __ATOMIC_RELAXED); }
#define GPUX_CU_ATOMIC_INT(T)                                                                      \
	GPUX_CU_ATOMIC_OP(atomicAdd, T, __atomic_fetch_add)                                        \
	GPUX_CU_ATOMIC_OP(atomicAnd, T, __atomic_fetch_and)                                        \
	GPUX_CU_ATOMIC_OP(atomicOr, T, __atomic_fetch_or)                                          \
	GPUX_CU_ATOMIC_OP(atomicXor, T, __atomic_fetch_xor)                                        \
	GPUX_CU_ATOMIC_OP(atomicExch, T, __atomic_exchange_n)                                      \
	static inline T atomicCAS(T *p, T cmp, T v)                                                \
	{                                                                                          \
		(void)__atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED,             \
						  __ATOMIC_RELAXED);                               \
		return cmp;                                                                        \
	}                                                                                          \
	static inline T atomicMin(T *p, T v)                                                       \
	{                                                                                          \
		T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                      \
		while (v < old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, \
							       __ATOMIC_RELAXED))                  \
			;                                                                          \
		return old;                                                                        \
	}                                                                                          \
	static inline T atomicMax(T *p, T v)                                                       \
	{                                                                                          \
		T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                      \
		while (v > old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, \
							       __ATOMIC_RELAXED))                  \
			;                                                                          \
		return old;                                                                        \
	}
GPUX_CU_ATOMIC_INT(int)
GPUX_CU_ATOMIC_INT(unsigned int)
GPUX_CU_ATOMIC_INT(unsigned long long)
GPUX_CU_ATOMIC_INT(long long)
#undef GPUX_CU_ATOMIC_INT
#undef GPUX_CU_ATOMIC_OP
static inline int atomicSub(int *p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
static inline unsigned int atomicSub(unsigned int *p, unsigned int v)
{
	return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);
}
static inline unsigned short atomicCAS(unsigned short *p, unsigned short cmp, unsigned short v)
{
	(void)__atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	return cmp;
}

/* ((old >= v) ? 0 : old + 1) and ((old == 0 || old > v) ? v : old - 1), as CUDA's. */
static inline unsigned int atomicInc(unsigned int *p, unsigned int v)
{
	unsigned int old = __atomic_load_n(p, __ATOMIC_RELAXED);

	while (!__atomic_compare_exchange_n(p, &old, old >= v ? 0 : old + 1, true, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED))
		;
	return old;
}
static inline unsigned int atomicDec(unsigned int *p, unsigned int v)
{
	unsigned int old = __atomic_load_n(p, __ATOMIC_RELAXED);

	while (!__atomic_compare_exchange_n(p, &old, old == 0 || old > v ? v : old - 1, true,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	return old;
}

/* Floating point: a compare-and-swap of the bits. */
#define GPUX_CU_ATOMIC_FLOAT(T, U)                                                                 \
	static inline T atomicAdd(T *p, T v)                                                       \
	{                                                                                          \
		U old = __atomic_load_n((U *)p, __ATOMIC_RELAXED), nu;                             \
		T o, n;                                                                            \
		do {                                                                               \
			memcpy(&o, &old, sizeof(o));                                               \
			n = o + v;                                                                 \
			memcpy(&nu, &n, sizeof(nu));                                               \
		} while (!__atomic_compare_exchange_n((U *)p, &old, nu, true, __ATOMIC_RELAXED,    \
						      __ATOMIC_RELAXED));                          \
		return o;                                                                          \
	}                                                                                          \
	static inline T atomicSub(T *p, T v) { return atomicAdd(p, -v); }                          \
	static inline T atomicExch(T *p, T v)                                                      \
	{                                                                                          \
		U nu, old;                                                                         \
		T o;                                                                               \
		memcpy(&nu, &v, sizeof(nu));                                                       \
		old = __atomic_exchange_n((U *)p, nu, __ATOMIC_RELAXED);                           \
		memcpy(&o, &old, sizeof(o));                                                       \
		return o;                                                                          \
	}
GPUX_CU_ATOMIC_FLOAT(float, uint32_t)
GPUX_CU_ATOMIC_FLOAT(double, uint64_t)
#undef GPUX_CU_ATOMIC_FLOAT

/* The _block and _system scopes are the same memory here. */
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicSub_block atomicSub
#define atomicSub_system atomicSub
#define atomicExch_block atomicExch
#define atomicExch_system atomicExch
#define atomicMin_block atomicMin
#define atomicMin_system atomicMin
#define atomicMax_block atomicMax
#define atomicMax_system atomicMax
#define atomicInc_block atomicInc
#define atomicInc_system atomicInc
#define atomicDec_block atomicDec
#define atomicDec_system atomicDec
#define atomicCAS_block atomicCAS
#define atomicCAS_system atomicCAS
#define atomicAnd_block atomicAnd
#define atomicAnd_system atomicAnd
#define atomicOr_block atomicOr
#define atomicOr_system atomicOr
#define atomicXor_block atomicXor
#define atomicXor_system atomicXor

/* ---- min and max, as CUDA overloads them ---- */

#define GPUX_CU_MINMAX(T)                                                                          \
	static inline T min(T a, T b) { return a < b ? a : b; }                                    \
	static inline T max(T a, T b) { return a > b ? a : b; }
GPUX_CU_MINMAX(int)
GPUX_CU_MINMAX(unsigned int)
GPUX_CU_MINMAX(long)
GPUX_CU_MINMAX(unsigned long)
GPUX_CU_MINMAX(long long)
GPUX_CU_MINMAX(unsigned long long)
#undef GPUX_CU_MINMAX
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline unsigned int min(int a, unsigned int b) { return min((unsigned int)a, b); }
static inline unsigned int min(unsigned int a, int b) { return min(a, (unsigned int)b); }
static inline unsigned int max(int a, unsigned int b) { return max((unsigned int)a, b); }
static inline unsigned int max(unsigned int a, int b) { return max(a, (unsigned int)b); }
static inline unsigned int umin(unsigned int a, unsigned int b) { return min(a, b); }
static inline unsigned int umax(unsigned int a, unsigned int b) { return max(a, b); }
static inline long long llmin(long long a, long long b) { return min(a, b); }
static inline long long llmax(long long a, long long b) { return max(a, b); }
static inline unsigned long long ullmin(unsigned long long a, unsigned long long b)
{
	return min(a, b);
}
static inline unsigned long long ullmax(unsigned long long a, unsigned long long b)
{
	return max(a, b);
}

/* ---- single and double precision ---- */

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline double rcbrt(double x) { return 1.0 / cbrt(x); }
static inline float fdividef(float a, float b) { return a / b; }
static inline float sinpif(float x) { return sinf((float)M_PI * x); }
static inline float cospif(float x) { return cosf((float)M_PI * x); }
static inline double sinpi(double x) { return sin(M_PI * x); }
static inline double cospi(double x) { return cos(M_PI * x); }
static inline void sincospif(float x, float *s, float *c) { sincosf((float)M_PI * x, s, c); }
static inline void sincospi(double x, double *s, double *c) { sincos(M_PI * x, s, c); }
static inline float normcdff(float x) { return 0.5f * erfcf(-x * (float)M_SQRT1_2); }
static inline double normcdf(double x) { return 0.5 * erfc(-x * M_SQRT1_2); }
static inline float norm3df(float a, float b, float c) { return sqrtf(a * a + b * b + c * c); }
static inline double norm3d(double a, double b, double c) { return sqrt(a * a + b * b + c * c); }
static inline float rnorm3df(float a, float b, float c) { return 1.0f / norm3df(a, b, c); }
static inline float norm4df(float a, float b, float c, float d)
{
	return sqrtf(a * a + b * b + c * c + d * d);
}
static inline float rhypotf(float a, float b) { return 1.0f / hypotf(a, b); }
static inline double rhypot(double a, double b) { return 1.0 / hypot(a, b); }

static inline float __fdividef(float a, float b) { return a / b; }
/* glibc's <math.h> declares __expf, __logf, __sinf, ... itself: its own, as exact. */
#ifndef __GLIBC__
static inline float __expf(float x) { return expf(x); }
static inline float __exp10f(float x) { return exp10f(x); }
static inline float __logf(float x) { return logf(x); }
static inline float __log2f(float x) { return log2f(x); }
static inline float __log10f(float x) { return log10f(x); }
static inline float __sinf(float x) { return sinf(x); }
static inline float __cosf(float x) { return cosf(x); }
static inline float __tanf(float x) { return tanf(x); }
static inline float __powf(float a, float b) { return powf(a, b); }
static inline void __sincosf(float x, float *s, float *c) { sincosf(x, s, c); }
#endif
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline double __drcp_rn(double x) { return 1.0 / x; }
static inline double __dsqrt_rn(double x) { return sqrt(x); }

/* ---- conversions and bits ---- */

static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
static inline unsigned int __float_as_uint(float x) { unsigned int i; memcpy(&i, &x, 4); return i; }
static inline float __uint_as_float(unsigned int i) { float x; memcpy(&x, &i, 4); return x; }
static inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
static inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
static inline int __double2hiint(double x) { return (int)(__double_as_longlong(x) >> 32); }
static inline int __double2loint(double x) { return (int)__double_as_longlong(x); }
static inline double __hiloint2double(int hi, int lo)
{
	return __longlong_as_double((long long)((unsigned long long)(unsigned int)hi << 32 |
						(unsigned int)lo));
}
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned int __float2uint_rn(float x) { return (unsigned int)nearbyintf(x); }
static inline unsigned int __float2uint_rz(float x) { return (unsigned int)x; }
static inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
static inline long long __float2ll_rz(float x) { return (long long)x; }
static inline int __double2int_rn(double x) { return (int)nearbyint(x); }
static inline int __double2int_rz(double x) { return (int)x; }
static inline long long __double2ll_rn(double x) { return (long long)nearbyint(x); }
static inline float __double2float_rn(double x) { return (float)x; }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned int x) { return (float)x; }
static inline float __ll2float_rn(long long x) { return (float)x; }
static inline double __int2double_rn(int x) { return (double)x; }
static inline double __ll2double_rn(long long x) { return (double)x; }

static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned int)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned int __brev(unsigned int x)
{
	x = (x >> 1 & 0x55555555u) | (x & 0x55555555u) << 1;
	x = (x >> 2 & 0x33333333u) | (x & 0x33333333u) << 2;
	x = (x >> 4 & 0x0f0f0f0fu) | (x & 0x0f0f0f0fu) << 4;
	return __builtin_bswap32(x);
}
static inline unsigned long long __brevll(unsigned long long x)
{
	return (unsigned long long)__brev((unsigned int)x) << 32 | __brev((unsigned int)(x >> 32));
}
static inline int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
static inline unsigned int __umul24(unsigned int a, unsigned int b)
{
	return (a & 0xffffffu) * (b & 0xffffffu);
}
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned int __umulhi(unsigned int a, unsigned int b)
{
	return (unsigned int)(((unsigned long long)a * b) >> 32);
}
static inline long long __mul64hi(long long a, long long b)
{
	return (long long)(((__int128)a * b) >> 64);
}
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{
	return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline unsigned int __sad(int a, int b, unsigned int c)
{
	return c + (unsigned int)(a > b ? a - b : b - a);
}
static inline unsigned int __usad(unsigned int a, unsigned int b, unsigned int c)
{
	return c + (a > b ? a - b : b - a);
}
static inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
static inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
static inline unsigned int __uhadd(unsigned int a, unsigned int b)
{
	return (unsigned int)(((unsigned long long)a + b) >> 1);
}
static inline unsigned int __urhadd(unsigned int a, unsigned int b)
{
	return (unsigned int)(((unsigned long long)a + b + 1) >> 1);
}
static inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s)
{
	unsigned long long v = (unsigned long long)y << 32 | x;
	unsigned int r = 0;

	for (int i = 0; i < 4; i++)
		r |= (unsigned int)(v >> (8 * ((s >> (4 * i)) & 7)) & 0xff) << (8 * i);
	return r;
}
static inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int s)
{
	return (unsigned int)((((unsigned long long)hi << 32 | lo) << (s & 31)) >> 32);
}
static inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int s)
{
	return (unsigned int)(((unsigned long long)hi << 32 | lo) >> (s & 31));
}
static inline unsigned int __funnelshift_lc(unsigned int lo, unsigned int hi, unsigned int s)
{
	return (unsigned int)((((unsigned long long)hi << 32 | lo) << (s > 32 ? 32 : s)) >> 32);
}
static inline unsigned int __funnelshift_rc(unsigned int lo, unsigned int hi, unsigned int s)
{
	return (unsigned int)(((unsigned long long)hi << 32 | lo) >> (s > 32 ? 32 : s));
}

/* ---- loads and stores with cache hints: plain ones here ---- */

template <class T> static inline T __ldg(const T *p) { return *p; }
template <class T> static inline T __ldcg(const T *p) { return *p; }
template <class T> static inline T __ldca(const T *p) { return *p; }
template <class T> static inline T __ldcs(const T *p) { return *p; }
template <class T> static inline T __ldlu(const T *p) { return *p; }
template <class T> static inline T __ldcv(const T *p) { return *p; }
template <class T> static inline void __stwb(T *p, T v) { *p = v; }
template <class T> static inline void __stcg(T *p, T v) { *p = v; }
template <class T> static inline void __stcs(T *p, T v) { *p = v; }
template <class T> static inline void __stwt(T *p, T v) { *p = v; }

#endif
