# SPDX-License-Identifier: MIT
# What CuPy and PyCUDA users call by the names they know, on the host back end: PyCUDA's
# calling convention, DeviceArray, ElementwiseKernel and ReductionKernel (the last two
# generated as C here; as CUDA C++ on a GPU: test_cuda_kernels.py).
import numpy as np
import pytest

import gpux
from conftest import HOST_KERNELS


@pytest.fixture(scope="module")
def pycuda_module():
    return gpux.Module(HOST_KERNELS, "host", pycuda=True)


def test_pycuda_calling_convention(pycuda_module):
    f = pycuda_module.get_function("saxpy")
    assert f.pycuda
    x = np.arange(8, dtype=np.float32)
    y = np.ones(8, np.float32)
    out = np.zeros(8, np.float32)
    f(np.uint64(8), np.float32(2), gpux.In(x), gpux.In(y), gpux.Out(out), block=(8, 1, 1),
      grid=(1, 1))
    assert (out == 2 * x + 1).all()
    # grid left out (1, 1); the kernel's own time back, in seconds.
    q = gpux.Queue(1)
    t = f(np.uint64(8), np.float32(3), x, y, gpux.Out(out), block=(8, 1, 1), stream=q,
          time_kernel=True)
    assert isinstance(t, float) and t > 0 and (out == 3 * x + 1).all()
    # CuPy's call works on the same kernel.
    f(1, 8, (np.uint64(8), np.float32(1), x, y, out))
    assert (out == x + 1).all()
    f.prepare("QfPPP").prepared_call((1, 1), (8, 1, 1), np.uint64(8), np.float32(4), x, y, out)
    assert (out == 4 * x + 1).all()
    fut = f.prepared_async_call((1, 1), (8, 1, 1), q, np.uint64(8), np.float32(5), x, y, out)
    fut.result()
    assert (out == 5 * x + 1).all()
    assert f.prepared_timed_call((1, 1), (8, 1, 1), np.uint64(8), np.float32(6), x, y,
                                 out)() > 0
    with pytest.raises(TypeError, match="texrefs"):
        f(np.uint64(8), block=(8, 1, 1), texrefs=[object()])
    with pytest.raises(TypeError, match="unexpected keyword argument 'blocks'"):
        f(np.uint64(8), block=(8, 1, 1), blocks=1)
    # Not a SourceModule's kernel: block= is CuPy's keyword.
    with pytest.raises(ValueError, match="grid"):
        gpux.Module(HOST_KERNELS, "host").get_function("saxpy")(np.uint64(8), block=(8, 1, 1))


def test_source_module_refuses_what_it_cannot_do():
    with pytest.raises(gpux.InvalidError, match="include_dirs"):
        gpux.SourceModule("", include_dirs=["/usr/include"])
    with pytest.raises(gpux.InvalidError, match="extern"):
        gpux.SourceModule("", no_extern_c=False)


def test_device_arrays_stay_on_the_device(kernels):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    d = gpux.to_device(a, device=1)
    assert (d.shape, d.dtype, d.device, d.size, d.nbytes) == ((4, 6), np.float32, 1, 24, 96)
    assert d.strides == (24, 4) and len(d) == 4 and "shape=(4, 6)" in repr(d)
    assert (d.get() == a).all() and isinstance(d.get(), gpux.ndarray)
    assert (gpux.asarray(d) == a).all()
    with pytest.raises(TypeError, match="get"):
        np.asarray(d)
    # Views of contiguous ranges, along the first axis; set and get through them.
    assert (d[1:3].get() == a[1:3]).all() and (d[2].get() == a[2]).all()
    assert (d[-1].get() == a[-1]).all()
    d[1] = np.full(6, -1, np.float32)
    a[1] = -1
    assert (d.get() == a).all()
    with pytest.raises(IndexError, match="contiguous"):
        d[::2]
    flat = d.reshape(-1)
    assert flat.shape == (24,) and (flat[6:12].get() == a[1]).all()
    # A kernel argument as itself: a pointer to its first element, on its device.
    add1 = kernels.get_function("add1")
    out = gpux.device_zeros(6, np.float32, device=1)
    add1(1, 8, (np.uint64(6), d[2], out))
    assert (out.get() == a[2] + 1).all()
    # A view's offset reaches the kernel: the row written is the one named.
    add1(1, 8, (np.uint64(6), out, d.reshape(4, 6)[3]))
    assert (d.get()[3] == a[2] + 2).all()
    assert (gpux.device_full(3, 7, np.int64).get() == 7).all()
    assert d.copy().get().tolist() == d.get().tolist()
    with pytest.raises(TypeError, match="pickled"):
        import pickle
        pickle.dumps(d)


def test_shared_arrays_get_as_cupy():
    a = gpux.asarray(np.arange(5.0))
    g = a.get()
    assert type(g) is np.ndarray and (g == a).all()
    g[0] = 9
    assert a[0] == 0


def test_elementwise_kernels():
    k = gpux.ElementwiseKernel("T x, T y", "T z", "z = x + y * 2", "add2")
    x = np.arange(10, dtype=np.float32)
    y = np.ones(10, np.float32)
    z = k(x, y)
    assert isinstance(z, gpux.ndarray) and z.dtype == np.float32 and (z == x + 2).all()
    # Scalars by value, broadcast arrays, a given output (numpy memory, copied back).
    assert (k(x, np.float32(3)) == x + 6).all()
    m = np.arange(12.0).reshape(3, 4)
    out = np.zeros((3, 4))
    assert k(m, np.arange(4.0), out) is out and (out == m + 2 * np.arange(4.0)).all()
    # <math.h>, min and max; raw arrays indexed freely; i.
    f = gpux.ElementwiseKernel("float64 x, raw float64 r", "float64 y",
                               "y = exp(x) + min(x, 1.0) + r[(i + 1) % 3] + i", "ex")
    v = np.arange(3.0)
    assert np.allclose(f(v, v), np.exp(v) + np.minimum(v, 1) + np.roll(v, -1) + v)
    # DeviceArrays in, a DeviceArray out on the same device.
    d = k(gpux.to_device(x, device=1), gpux.to_device(y, device=1))
    assert isinstance(d, gpux.DeviceArray) and d.device == 1 and (d.get() == x + 2).all()
    # Two outputs; size= for raw arrays only.
    two = gpux.ElementwiseKernel("int32 a", "int32 s, int32 p", "s = a + a; p = a * a", "two")
    s, p = two(np.arange(4, dtype=np.int32))
    assert s.tolist() == [0, 2, 4, 6] and p.tolist() == [0, 1, 4, 9]
    fill = gpux.ElementwiseKernel("", "raw int64 o", "o[i] = 3 * i", "fill")
    o = gpux.zeros(5, np.int64)
    fill(o, size=5)
    assert o.tolist() == [0, 3, 6, 9, 12]
    with pytest.raises(ValueError, match="size="):
        fill(o)
    with pytest.raises(TypeError, match="T is"):
        k(x, np.ones(10))
    with pytest.raises(ValueError, match="parameter"):
        gpux.ElementwiseKernel("float32", "float32 y", "y = 1")
    with pytest.raises(gpux.CompileError):
        gpux.ElementwiseKernel("float32 x", "float32 y", "y = x +", "bad")(x)
    # The same CUDA C++ on the host back end as on a GPU: a device template in the preamble.
    tw = gpux.ElementwiseKernel("T x", "T y", "y = twice(x)", "tw",
                                preamble="template <typename U> __device__ U twice(U v) "
                                         "{ return v + v; }")
    assert (tw(x) == 2 * x).all()


def test_reduction_kernels():
    ssq = gpux.ReductionKernel("T x", "T y", "x * x", "a + b", "y = a", "0", "sumsq")
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    r = ssq(a)
    assert r.shape == () and r == (a * a).sum()
    assert np.allclose(ssq(a, axis=1), (a * a).sum(1))
    assert np.allclose(ssq(a, axis=0), (a * a).sum(0))
    b = np.random.default_rng(1).random((4, 5, 6))
    assert np.allclose(ssq(b, axis=1), (b * b).sum(1))
    assert np.allclose(ssq(b, axis=(0, 1), keepdims=True), (b * b).sum((0, 1), keepdims=True))
    assert np.allclose(ssq(b, axis=-1), (b * b).sum(-1))
    # Long: split in parts, then combined.
    big = np.random.default_rng(2).random(3_000_000)
    assert np.isclose(ssq(big), (big * big).sum())
    # A post-map, another reduce type, two inputs, out=.
    norm = gpux.ReductionKernel("float32 x, float32 w", "float32 y", "x * w", "a + b",
                                "y = sqrt(a)", "0", "wnorm", reduce_type="float64")
    x = np.arange(5, dtype=np.float32)
    out = gpux.zeros((), np.float32)
    assert norm(x, x, out=out) is out and np.isclose(out, np.sqrt((x * x).sum()))
    mx = gpux.ReductionKernel("int32 x", "int32 y", "x", "max(a, b)", "y = a",
                              "-2147483647", "imax")
    v = np.array([[3, -9, 7], [1, 11, -2]], np.int32)
    assert mx(v, axis=0).tolist() == [3, 11, 7] and mx(v) == 11
    # On the device: leading or trailing axes.
    d = gpux.to_device(a, device=0)
    assert np.allclose(ssq(d, axis=1).get(), (a * a).sum(1))
    assert np.allclose(ssq(d, axis=0).get(), (a * a).sum(0))
    with pytest.raises(ValueError, match="leading or trailing"):
        ssq(gpux.to_device(b), axis=1)
