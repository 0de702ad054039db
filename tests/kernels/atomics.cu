/* SPDX-License-Identifier: MIT */
/* tests/kernels/atomics.cu: atomics on int, unsigned, 64-bit, float and double from every
 * thread of every block; shared-memory atomics; the last block found with __threadfence(). */

/* bins[v[i] % nbins] counted, a grid-striding loop. */
__global__ void histogram(const unsigned *v, unsigned n, unsigned *bins, unsigned nbins)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
		atomicAdd(&bins[v[i] % nbins], 1u);
}

/* What atomics() leaves; the client lays it out the same way. */
struct atomic_results {
	int isum;
	int isub;
	int imin;
	int imax;
	unsigned umin;
	unsigned umax;
	unsigned inc;
	unsigned dec;
	int casmax;
	int exch;
	float fsum;
	float pad;
	double dsum;
	unsigned long long usum;
};

__global__ void atomics(const int *v, unsigned n, atomic_results *r)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
		int x = v[i], old, seen;

		atomicAdd(&r->isum, x);
		atomicSub(&r->isub, x);
		atomicMin(&r->imin, x);
		atomicMax(&r->imax, x);
		atomicMin(&r->umin, (unsigned)(x + 1000));
		atomicMax(&r->umax, (unsigned)(x + 1000));
		atomicInc(&r->inc, 9u);
		atomicDec(&r->dec, 6u);
		atomicExch(&r->exch, x);
		atomicAdd(&r->fsum, (float)x);
		atomicAdd(&r->dsum, x * 0.5);
		atomicAdd(&r->usum, (unsigned long long)(x + 1000) << 20);
		/* A maximum by compare-and-swap. */
		old = r->casmax;
		do {
			seen = old;
			old = atomicCAS(&r->casmax, seen, max(seen, x));
		} while (old != seen);
	}
}

/* Each block sums its share in shared memory; the last block to end adds the blocks' sums. */
__global__ void sum_last_block(const int *v, unsigned n, int *partial, unsigned *done, int *total)
{
	__shared__ int sum;
	__shared__ bool last;

	if (threadIdx.x == 0)
		sum = 0;
	__syncthreads();
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
		atomicAdd(&sum, v[i]);
	__syncthreads();
	if (threadIdx.x == 0) {
		partial[blockIdx.x] = sum;
		__threadfence();
		last = atomicInc(done, gridDim.x) == gridDim.x - 1;
	}
	__syncthreads();
	if (last && threadIdx.x == 0) {
		int t = 0;

		for (unsigned b = 0; b < gridDim.x; b++)
			t += ((volatile int *)partial)[b];
		*total = t;
	}
}
