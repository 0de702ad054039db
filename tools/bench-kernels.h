/* SPDX-License-Identifier: MIT */
/* tools/bench-kernels.h: the CUDA C++ kernels both sides of gpux bench run. */
#pragma once

static const char bench_kernels[] =
	"extern \"C\" __global__ void empty()\n"
	"{\n"
	"}\n"
	/* An empty kernel with a parameter: launches that differ each time. */
	"extern \"C\" __global__ void scalar(unsigned v)\n"
	"{\n"
	"}\n"
	/* Touches one element: the arguments' copies are what is measured. */
	"extern \"C\" __global__ void touch(float *p)\n"
	"{\n"
	"	if (threadIdx.x == 0 && blockIdx.x == 0 && p[0] == 12345.0f)\n"
	"		p[0] = 0.0f;\n"
	"}\n"
	/* Reads at memory speed (16-byte loads, several in flight): x must be 16-byte aligned. */
	"extern \"C\" __global__ void block_sum(unsigned long long n, const float *x, float *out)\n"
	"{\n"
	"	__shared__ float sh[256];\n"
	"	const float4 *x4 = (const float4 *)x;\n"
	"	unsigned long long first = blockIdx.x * 256ull + threadIdx.x;\n"
	"	unsigned long long stride = (unsigned long long)gridDim.x * 256ull;\n"
	"	float acc = 0.0f;\n"
	"#pragma unroll 4\n"
	"	for (unsigned long long i = first; i < n / 4; i += stride) {\n"
	"		float4 v = x4[i];\n"
	"		acc += (v.x + v.y) + (v.z + v.w);\n"
	"	}\n"
	"	for (unsigned long long i = n / 4 * 4 + first; i < n; i += stride)\n"
	"		acc += x[i];\n"
	"	sh[threadIdx.x] = acc;\n"
	"	__syncthreads();\n"
	"	for (unsigned s = 128; s > 0; s >>= 1) {\n"
	"		if (threadIdx.x < s)\n"
	"			sh[threadIdx.x] += sh[threadIdx.x + s];\n"
	"		__syncthreads();\n"
	"	}\n"
	"	if (threadIdx.x == 0)\n"
	"		out[blockIdx.x] = sh[0];\n"
	"}\n"
	/* Compute-bound: iters dependent FMAs per thread. */
	"extern \"C\" __global__ void burn(unsigned long long iters, float *out)\n"
	"{\n"
	"	float a = threadIdx.x * 1e-3f, b = 1.0000001f, c = 1e-7f;\n"
	"	for (unsigned long long i = 0; i < iters; i++)\n"
	"		a = fmaf(a, b, c);\n"
	"	if (a == 123.0f)\n"
	"		out[0] = a;\n"
	"}\n";

/* The same as host kernels, for a gpux without a GPU. */
static const char bench_kernels_host[] =
	"GPUX_HOST_PARAMS(empty);\n"
	"GPUX_HOST_KERNEL(empty)\n"
	"{\n"
	"}\n"
	"GPUX_HOST_PARAMS(scalar, 4);\n"
	"GPUX_HOST_KERNEL(scalar)\n"
	"{\n"
	"}\n"
	"GPUX_HOST_PARAMS(touch, sizeof(float *));\n"
	"GPUX_HOST_KERNEL(touch)\n"
	"{\n"
	"	float *p = GPUX_ARG(float *, 0);\n"
	"	if (p[0] == 12345.0f)\n"
	"		p[0] = 0.0f;\n"
	"}\n"
	"GPUX_HOST_PARAMS(block_sum, 8, sizeof(float *), sizeof(float *));\n"
	"GPUX_HOST_KERNEL(block_sum)\n"
	"{\n"
	"	uint64_t n = GPUX_ARG(uint64_t, 0);\n"
	"	const float *x = GPUX_ARG(const float *, 1);\n"
	"	float *out = GPUX_ARG(float *, 2), acc = 0;\n"
	"	for (uint64_t i = gpux->block_idx.x * 256ull; i < n; i += gpux->grid_dim.x * "
	"256ull)\n"
	"		for (uint64_t j = i; j < i + 256 && j < n; j++)\n"
	"			acc += x[j];\n"
	"	out[gpux->block_idx.x] = acc;\n"
	"}\n"
	"GPUX_HOST_PARAMS(burn, 8, sizeof(float *));\n"
	"GPUX_HOST_KERNEL(burn)\n"
	"{\n"
	"	uint64_t iters = GPUX_ARG(uint64_t, 0);\n"
	"	volatile float a = 0.5f;\n"
	"	if (gpux->block_idx.x == 0)\n"
	"		for (uint64_t i = 0; i < iters / 64; i++)\n"
	"			a = a * 1.0000001f + 1e-7f;\n"
	"	if (a == 123.0f)\n"
	"		GPUX_ARG(float *, 1)[0] = a;\n"
	"}\n";

/*
 * Two different kernels of cooperative_groups.h, and two of CUB's block reduce, each pair
 * beginning with the same #include: the second of a pair compiled after the first (what a
 * long-lived compiler can keep from one compile for the next: NVRTC's precompiled headers).
 */
static const char *const bench_cg_kernels[2] = {
	"#include <cooperative_groups.h>\n"
	"namespace cg = cooperative_groups;\n"
	"extern \"C\" __global__ void cg_rank(int *p)\n"
	"{\n"
	"	cg::thread_block b = cg::this_thread_block();\n"
	"	p[b.group_index().x * b.size() + b.thread_rank()] = (int)b.thread_rank();\n"
	"}\n",
	"#include <cooperative_groups.h>\n"
	"namespace cg = cooperative_groups;\n"
	"extern \"C\" __global__ void cg_tile(float *p)\n"
	"{\n"
	"	auto t = cg::tiled_partition<32>(cg::this_thread_block());\n"
	"	p[threadIdx.x] = t.shfl_down(p[threadIdx.x], 1) + (float)t.meta_group_rank();\n"
	"}\n",
};

static const char *const bench_cub_kernels[2] = {
	"#include <cub/block/block_reduce.cuh>\n"
	"extern \"C\" __global__ void cub_sum(const int *in, int *out)\n"
	"{\n"
	"	typedef cub::BlockReduce<int, 128> R;\n"
	"	__shared__ typename R::TempStorage t;\n"
	"	int s = R(t).Sum(in[threadIdx.x]);\n"
	"	if (threadIdx.x == 0)\n"
	"		*out = s;\n"
	"}\n",
	"#include <cub/block/block_reduce.cuh>\n"
	"extern \"C\" __global__ void cub_max(const float *in, float *out)\n"
	"{\n"
	"	typedef cub::BlockReduce<float, 256> R;\n"
	"	__shared__ typename R::TempStorage t;\n"
	"	float m = R(t).Reduce(in[threadIdx.x], cuda::maximum<>{});\n"
	"	if (threadIdx.x == 0)\n"
	"		*out = m;\n"
	"}\n",
};
