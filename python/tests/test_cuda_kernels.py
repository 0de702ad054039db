# SPDX-License-Identifier: MIT
# ElementwiseKernel and ReductionKernel generated as CUDA C++: compiled by the real NVRTC in
# the worker and launched on tests/fake-cuda ($GPUX_CUDA_LIB; meson's python-cuda test),
# which checks each launch's arguments against the cubin's parameters (it does not run
# these kernels: their results are checked on the host back end, test_compat.py).
import os

import numpy as np
import pytest

import gpux
from conftest import start_gpuxd, stop_gpuxd

pytestmark = pytest.mark.skipif(
    not os.environ.get("GPUX_CUDA_LIB")
    or not (os.access("/usr/local/cuda/lib64/libnvrtc.so", os.R_OK)
            or os.environ.get("GPUX_NVRTC_LIB")),
    reason="needs GPUX_CUDA_LIB (the fake libcuda: meson's python-cuda test) and NVRTC")


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpuxd-cuda-kernels")
    proc, sock = start_gpuxd(d, "--backend", "cuda")
    c = gpux.Context(sock)
    yield c
    del c
    stop_gpuxd(proc, d)


def test_elementwise_kernels_compile_and_launch_as_cuda(ctx):
    assert gpux.devices(ctx)[0]["backend"] is gpux.Backend.CUDA
    k = gpux.ElementwiseKernel("T x, raw T y, float32 s", "T z",
                               "z = x * s + y[i] + min(x, (T)1) + sqrt((float)x)", "ew")
    x = gpux.zeros(100, np.float32, context=ctx)
    z = k(x, x, np.float32(2))
    assert z.shape == (100,) and z.dtype == np.float32
    d = gpux.DeviceArray(100, np.float64, device=0, context=ctx)
    assert isinstance(k(d, d, 2.0), gpux.DeviceArray)
    h = gpux.ElementwiseKernel("float16 x", "float16 y", "y = x + x", "twice")
    h(gpux.zeros(8, np.float16, context=ctx))


def test_reduction_kernels_compile_and_launch_as_cuda(ctx):
    k = gpux.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt((double)a)", "0",
                             "rownorm")
    a = gpux.zeros((4, 64), np.float64, context=ctx)
    assert k(a, axis=1).shape == (4,)
    assert k(a).shape == ()
    # Long enough to be split over several blocks, then combined by a second kernel.
    big = gpux.zeros(1 << 20, np.float32, context=ctx)
    assert k(big).dtype == np.float32
    mx = gpux.ReductionKernel("int32 x", "int32 y", "x", "max(a, b)", "y = a", "-2147483647",
                              "imax", reduce_type="int32")
    assert mx(gpux.DeviceArray((3, 10), np.int32, context=ctx), axis=0).shape == (10,)
