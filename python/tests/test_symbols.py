# SPDX-License-Identifier: MIT
# Kernels' attributes (CuPy's RawKernel.attributes, PyCUDA's get_attribute) and modules'
# variables (get_global), on the host back end: CUDA C++ and C.
import numpy as np
import pytest

import gpux

CUDA = r"""
__constant__ float coeffs[4] = { 1, 2, 3, 4 };
namespace ns { __device__ double scale = 2.5; }
__device__ unsigned long long counter;
extern "C" __global__ void apply(float *y, unsigned n)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = coeffs[i % 4] * (float)ns::scale;
	if (i == 0)
		atomicAdd(&counter, 1ull);
}
extern "C" __global__ void sum2(const int *p, int *out) { out[0] = p[0] + p[1]; }
__device__ int pair[2] = { 5, 6 };
"""

HOST_C = r"""
GPUX_HOST_GLOBAL int offset = 3;
GPUX_HOST_GLOBAL const int limit = 7;
GPUX_HOST_PARAMS(add, sizeof(int *));
GPUX_HOST_KERNEL(add) { int *x = GPUX_ARG(int *, 0); GPUX_FOR_EACH_THREAD(t) x[t.x] += offset; }
"""


@pytest.fixture(scope="module")
def cuda():
    return gpux.RawModule(CUDA)


def test_attributes_as_cupy_and_pycuda_name_them(cuda):
    k = cuda.get_function("apply")
    a = k.attributes
    assert set(a) == {"max_threads_per_block", "num_regs", "shared_size_bytes",
                      "const_size_bytes", "local_size_bytes", "max_dynamic_shared_size_bytes",
                      "ptx_version", "binary_version", "cache_mode_ca",
                      "preferred_shared_memory_carveout", "nparams"}
    assert a["max_threads_per_block"] == 1024
    assert a["nparams"] == 2
    assert a["max_dynamic_shared_size_bytes"] == 64 * 1024
    # What a CPU has no notion of is None, not a number made up.
    assert a["num_regs"] is None and a["ptx_version"] is None
    assert k.max_threads_per_block == 1024 and k.num_regs is None
    assert k.get_attribute(gpux.function_attribute.MAX_THREADS_PER_BLOCK) == 1024
    assert k.get_attribute("max_dynamic_shared_size_bytes") == 64 * 1024
    assert k.get_attributes(device=1)["nparams"] == 2
    with pytest.raises(ValueError):
        k.get_attribute(42)
    with pytest.raises(gpux.KernelNotFoundError, match="nope"):
        cuda.get_function("nope").attributes


def test_get_global_is_the_variable_itself(cuda):
    c = cuda.get_global("coeffs", np.float32)
    assert isinstance(c, gpux.DeviceArray) and c.shape == (4,) and c.device == 0
    assert list(c.get()) == [1, 2, 3, 4]
    c.set(np.array([10, 20, 30, 40], np.float32))
    # The module's kernels read it on its device, in the queue's order.
    y = gpux.zeros(8, np.float32)
    cuda.get_function("apply")((1,), (8,), (y, np.uint32(8)), device=c.device)
    assert list(y) == [25, 50, 75, 100] * 2
    assert cuda.get_global("counter", np.uint64).get()[0] == 1
    # By its qualified name or its symbol; bytes unless a dtype is given.
    assert cuda.get_global("ns::scale", np.float64).get()[0] == 2.5
    assert cuda.get_global("_ZN2ns5scaleE").shape == (8,)
    # Another module's kernel takes it as a pointer.
    out = gpux.zeros(1, np.int32)
    cuda.get_function("sum2")((1,), (1,), (cuda.get_global("pair", np.int32), out), device=0)
    assert out[0] == 11
    # No more than the variable holds.
    with pytest.raises(ValueError):
        cuda.get_global("coeffs", np.float32, (5,))
    with pytest.raises(gpux.KernelNotFoundError, match='no variable "apply"'):
        cuda.get_global("apply")
    with pytest.raises(ValueError):
        cuda.get_global("")
    c.set(np.array([1, 2, 3, 4], np.float32))


def test_each_device_has_its_own(cuda):
    on1 = cuda.get_global("pair", np.int32, device=1)
    assert on1.device == 1
    on1.set(np.array([50, 60], np.int32))
    assert list(cuda.get_global("pair", np.int32, device=0).get()) == [5, 6]
    assert list(on1.get()) == [50, 60]
    on1.set(np.array([5, 6], np.int32))


def test_source_module_get_global_is_pycudas(kernels):
    m = gpux.SourceModule("__device__ int v[3] = { 1, 2, 3 };\n"
                          "__global__ void read(int *o) { o[0] = v[2]; }\n")
    buf, size = m.get_global("v")
    assert isinstance(buf, gpux.DeviceBuffer) and size == 12 == buf.size
    host = gpux.zeros(3, np.int32)
    buf.read(host)
    assert list(host) == [1, 2, 3]
    buf.write(np.array([7, 8, 9], np.int32))
    o = gpux.zeros(1, np.int32)
    m.get_function("read")(o, block=(1, 1, 1), grid=(1, 1), queue=gpux.Queue(buf.device))
    assert o[0] == 9


def test_host_c_variables():
    m = gpux.Module(HOST_C, "host")
    off = m.get_global("offset", np.int32)
    off.set(np.array([10], np.int32))
    x = gpux.zeros(4, np.int32)
    m.get_function("add")(1, 4, (x,), device=off.device)
    assert list(x) == [10] * 4
    assert m.get_function("add").attributes["shared_size_bytes"] == 0
    # A const variable is read, not written.
    limit = m.get_global("limit", np.int32)
    assert limit.get()[0] == 7
    with pytest.raises(gpux.InvalidError):
        limit.set(np.array([1], np.int32))
