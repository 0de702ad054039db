/* SPDX-License-Identifier: MIT */
/* tests/kernels/misc.cu: what the others do not: a structure by value, three-dimensional
 * blocks and grids, a namespace, overloads, extern "C", the counting barriers, clock64(). */

struct params {
	int scale;
	float offset;
	double factor;
};

__global__ void by_value(params p, float *out)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;

	out[i] = p.scale * (float)i + p.offset + (float)p.factor;
}

namespace lib {
/* Each thread writes its thread and block coordinates into its element. */
__global__ void coords(unsigned *out)
{
	unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
	unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	unsigned i = bx * blockDim.x * blockDim.y * blockDim.z + tx;

	out[i] = threadIdx.x | threadIdx.y << 8 | threadIdx.z << 14 | blockIdx.x << 17 |
		 blockIdx.y << 22 | blockIdx.z << 27;
}
} /* namespace lib */

__global__ void over(int *p)
{
	p[threadIdx.x] = 1;
}

__global__ void over(float *p)
{
	p[threadIdx.x] = 2.0f;
}

extern "C" __global__ void c_linkage(int *p)
{
	p[threadIdx.x] = 3;
}

/* out[3 * b + k]: block b's __syncthreads_count(), _and() and _or() of in[i] > 0. */
__global__ void sync_counts(const int *in, int *out)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	int c = __syncthreads_count(in[i] > 0);
	int a = __syncthreads_and(in[i] > 0);
	int o = __syncthreads_or(in[i] > 0);

	if (threadIdx.x == 0) {
		out[3 * blockIdx.x] = c;
		out[3 * blockIdx.x + 1] = a;
		out[3 * blockIdx.x + 2] = o;
	}
}

/* ok[i]: clock64() went forward across a barrier. */
__global__ void clocks(int *ok)
{
	long long t0 = clock64();

	__syncthreads();
	ok[blockIdx.x * blockDim.x + threadIdx.x] = clock64() > t0;
}
