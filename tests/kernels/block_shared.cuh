/* SPDX-License-Identifier: MIT */
/* tests/kernels/block_shared.cuh: a block's dynamic shared memory as an array of T, for kernel
 * templates (one extern array per type: arrays of one name must have one type). The client
 * hands this header over by name. */
#pragma once

template <class T> struct block_shared;

template <> struct block_shared<float> {
	__device__ static float *get()
	{
		extern __shared__ float block_shared_f[];
		return block_shared_f;
	}
};

template <> struct block_shared<int> {
	__device__ static int *get()
	{
		extern __shared__ int block_shared_i[];
		return block_shared_i;
	}
};

template <> struct block_shared<double> {
	__device__ static double *get()
	{
		extern __shared__ double block_shared_d[];
		return block_shared_d;
	}
};
