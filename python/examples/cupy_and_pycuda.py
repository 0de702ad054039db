#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# One saxpy three ways, as CuPy and PyCUDA users write it, then an elementwise kernel, a
# reduction, arrays that stay on the device, a kernel's attributes and a module's variable.
# Runs on a GPU and on the host back end, which needs no GPU:
#
#     python3 python/examples/cupy_and_pycuda.py
import numpy as np

import gpux

CUDA = r"""
extern "C" __global__ void saxpy(unsigned long long n, float a, const float *x, float *y)
{
	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}
"""

HOST = r"""
GPUX_HOST_PARAMS(saxpy, 8, 4, sizeof(float *), sizeof(float *));
GPUX_HOST_KERNEL(saxpy)
{
	uint64_t n = GPUX_ARG(uint64_t, 0);
	float a = GPUX_ARG(float, 1);
	const float *x = GPUX_ARG(const float *, 2);
	float *y = GPUX_ARG(float *, 3);
	GPUX_FOR_EACH_THREAD(t) {
		uint64_t i = GPUX_GLOBAL_X(t);
		if (i < n)
			y[i] = a * x[i] + y[i];
	}
}
"""


CONSTS = r"""
__constant__ float coeffs[4] = { 1, 2, 3, 4 };
extern "C" __global__ void scale(float *v, unsigned n)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		v[i] *= coeffs[i % 4];
}
"""


def on_gpu() -> bool:
    return gpux.devices()[0]["backend"] is gpux.Backend.CUDA


def main() -> None:
    n = 1 << 16
    x = gpux.asarray(np.arange(n, dtype=np.float32))  # shared memory: kernels use it in place
    y = gpux.ones(n, np.float32)

    # CuPy: RawKernel, kernel(grid, block, args).
    saxpy: gpux.Kernel = (gpux.RawKernel(CUDA, "saxpy") if on_gpu()
                          else gpux.Module(HOST, "host").get_function("saxpy"))
    saxpy(((n + 255) // 256,), (256,), (np.uint64(n), np.float32(2), x, y))
    assert y[3] == 7

    # PyCUDA: SourceModule, f(*args, block=, grid=), In/Out, time_kernel.
    mod = gpux.SourceModule(CUDA) if on_gpu() else gpux.Module(HOST, "host", pycuda=True)
    f = mod.get_function("saxpy")
    out = np.ones(n, np.float32)  # plain numpy: copied in and back
    seconds = f(np.uint64(n), np.float32(2), gpux.In(x), gpux.InOut(out),
                block=(256, 1, 1), grid=((n + 255) // 256, 1), time_kernel=True)
    assert out[3] == 7 and seconds >= 0

    # Futures: submit, then the request's own timings by name.
    fut = saxpy.submit(((n + 255) // 256,), (256,), (np.uint64(n), np.float32(1), x, y),
                       timed=True)
    fut.result()
    times = fut.times
    assert times is not None and times.run_ns > 0

    # ElementwiseKernel and ReductionKernel, as CuPy's: CUDA C++ on either back end.
    lerp = gpux.ElementwiseKernel("T a, T b, T t", "T out", "out = a + (b - a) * t", "lerp")
    mid = lerp(x, y, np.float32(0.5))
    norm = gpux.ReductionKernel("T v", "T r", "v * v", "a + b", "r = sqrt(a)", "0", "l2")
    assert np.isclose(float(norm(np.asarray(mid))), np.linalg.norm(np.asarray(mid)), rtol=1e-4)

    # Arrays that stay on the device between kernels; get() brings them back.
    d = gpux.to_device(np.arange(8, dtype=np.float32))
    twice = lerp(d, d, np.float32(0))
    assert isinstance(twice, gpux.DeviceArray)
    head: np.ndarray = twice[:4].get()
    assert head.tolist() == [0, 1, 2, 3]

    # A kernel's attributes and a module's __constant__ variable, as CuPy's
    # RawKernel.attributes and RawModule.get_global (CUDA C++ runs on the host back end too).
    consts = gpux.RawModule(CONSTS)
    scale = consts.get_function("scale")
    assert scale.attributes["nparams"] == 2 and scale.max_threads_per_block is not None
    coeffs = consts.get_global("coeffs", np.float32)
    coeffs.set(np.full(4, 2, np.float32))
    v = gpux.ones(8, np.float32)
    scale((1,), (8,), (v, np.uint32(8)), device=coeffs.device)
    assert v.tolist() == [2] * 8

    # The memory pool: what an array leaves when it goes serves the next one of its size.
    pool = gpux.get_default_memory_pool()
    del v
    print("ok:", saxpy, mod, times, pool)


if __name__ == "__main__":
    main()
