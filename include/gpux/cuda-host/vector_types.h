/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/vector_types.h: CUDA's vector types (float4, int2, ...) and make_*(). */
#ifndef GPUX_CUDA_VECTOR_TYPES_H
#define GPUX_CUDA_VECTOR_TYPES_H
#pragma GCC system_header

/* Each with the size and alignment it has on a GPU, so that buffers of them match. */
#define GPUX_CU_VEC1(T, N, A)                                                                      \
	struct __attribute__((aligned(A))) N##1 { T x; };                                          \
	static inline N##1 make_##N##1(T x) { return N##1{ x }; }
#define GPUX_CU_VEC2(T, N, A)                                                                      \
	struct __attribute__((aligned(A))) N##2 { T x, y; };                                       \
	static inline N##2 make_##N##2(T x, T y) { return N##2{ x, y }; }
#define GPUX_CU_VEC3(T, N)                                                                         \
	struct N##3 { T x, y, z; };                                                                \
	static inline N##3 make_##N##3(T x, T y, T z) { return N##3{ x, y, z }; }
#define GPUX_CU_VEC4(T, N, A)                                                                      \
	struct __attribute__((aligned(A))) N##4 { T x, y, z, w; };                                 \
	static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{ x, y, z, w }; }
#define GPUX_CU_VEC(T, N, A2, A4)                                                                  \
	GPUX_CU_VEC1(T, N, sizeof(T)) GPUX_CU_VEC2(T, N, A2) GPUX_CU_VEC3(T, N)                    \
	GPUX_CU_VEC4(T, N, A4)

GPUX_CU_VEC(signed char, char, 2, 4)
GPUX_CU_VEC(unsigned char, uchar, 2, 4)
GPUX_CU_VEC(short, short, 4, 8)
GPUX_CU_VEC(unsigned short, ushort, 4, 8)
GPUX_CU_VEC(int, int, 8, 16)
GPUX_CU_VEC(unsigned int, uint, 8, 16)
GPUX_CU_VEC(long, long, 16, 16)
GPUX_CU_VEC(unsigned long, ulong, 16, 16)
GPUX_CU_VEC(long long, longlong, 16, 16)
GPUX_CU_VEC(unsigned long long, ulonglong, 16, 16)
GPUX_CU_VEC(float, float, 8, 16)
GPUX_CU_VEC(double, double, 16, 16)

#undef GPUX_CU_VEC
#undef GPUX_CU_VEC1
#undef GPUX_CU_VEC2
#undef GPUX_CU_VEC3
#undef GPUX_CU_VEC4

#endif
