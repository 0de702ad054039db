/* SPDX-License-Identifier: MIT */
/* tests/kernels/half_math.cu: __half from cuda_fp16.h; the math functions on float and double;
 * integer and bit intrinsics. */
#include <cuda_fp16.h>

/* h = x as a half; back = h as a float; fma = h * 1.5 + (h + 1.5) in halves. */
__global__ void halves(const float *x, __half *h, float *back, float *fma)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	__half a = __float2half(x[i]), b = __float2half(1.5f);

	h[i] = a;
	back[i] = __half2float(a);
	fma[i] = __half2float(__hfma(a, b, __hadd(a, b)));
}

#define MATH_F 16
/* out[k * n + i]: function k of x[i]. */
__global__ void math_float(const float *x, float *out, unsigned n)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	float v = x[i], a = fabsf(v);
	float r[MATH_F] = {
		sinf(v), cosf(v), tanf(v), expf(v), logf(a + 1.0f), sqrtf(a), rsqrtf(a + 1.0f),
		powf(a, 1.5f), tanhf(v), erff(v), atan2f(v, 1.5f), fmaf(v, 2.0f, 1.0f), cbrtf(v),
		exp2f(v), floorf(v * 10.0f), fminf(v, 0.25f),
	};

	for (unsigned k = 0; k < MATH_F; k++)
		out[k * n + i] = r[k];
}

#define MATH_D 12
__global__ void math_double(const double *x, double *out, unsigned n)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	double v = x[i], a = fabs(v);
	double r[MATH_D] = {
		sin(v), cos(v), exp(v), log(a + 1.0), sqrt(a), pow(a, 1.5), tanh(v), erf(v),
		atan2(v, 1.5), fma(v, 2.0, 1.0), cbrt(v), hypot(v, 2.0),
	};

	for (unsigned k = 0; k < MATH_D; k++)
		out[k * n + i] = r[k];
}

#define BITS 10
__global__ void bits(const unsigned *x, unsigned *out, unsigned n)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x, v = x[i];
	unsigned r[BITS] = {
		(unsigned)__popc(v), (unsigned)__clz((int)v), __brev(v), (unsigned)__ffs((int)v),
		__byte_perm(v, 0x11223344u, 0x5140u), __umulhi(v, 0x9e3779b9u),
		(unsigned)__float_as_int((float)(v & 0xffffu)), min(v, 1000u), max((int)v, -5) < 0 ? 1u : 0u,
		(unsigned)__popcll(((unsigned long long)v << 32) | v),
	};

	for (unsigned k = 0; k < BITS; k++)
		out[k * n + i] = r[k];
}
