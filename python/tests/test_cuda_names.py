# SPDX-License-Identifier: MIT
# CUDA C++ modules with headers by name and name expressions, compiled by the real NVRTC in
# the worker and loaded on tests/fake-cuda ($GPUX_CUDA_LIB; meson's python-cuda test). The
# fake runs a few kernels for real, by their symbol (saxpy among them); any other launch
# still finds the kernel by its name and checks the arguments against the cubin's parameters,
# so a launch that ends well found the instance asked for.
import os
import pickle

import numpy as np
import pytest

import gpux
from conftest import start_gpuxd, stop_gpuxd
from gpux._errors import E_NOTFOUND

pytestmark = pytest.mark.skipif(
    not os.environ.get("GPUX_CUDA_LIB")
    or not (os.access("/usr/local/cuda/lib64/libnvrtc.so", os.R_OK)
            or os.environ.get("GPUX_NVRTC_LIB")),
    reason="needs GPUX_CUDA_LIB (the fake libcuda: meson's python-cuda test) and NVRTC")

TEMPLATES = r"""
template <typename T> __global__ void fill(T *p, int n, T v) { if (n) *p = v; }
template <typename T, int B> __global__ void reduce(const T *in, T *out)
{ __shared__ T s[B]; s[threadIdx.x] = in[threadIdx.x]; __syncthreads(); *out = s[0]; }
"""

# The fake's saxpy(u64 n, f32 a, f32 *x, f32 *y, f32 *out), its types from a header.
SAXPY = r"""
#include "real.cuh"
extern "C" __global__ void saxpy(count_t n, real a, const real *x, const real *y, real *out)
{ count_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a * x[i] + y[i]; }
"""
REAL_H = '#pragma once\n#include "lib/count.h"\ntypedef float real;\n'
COUNT_H = b"typedef unsigned long long count_t;\n"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    """gpuxd with the CUDA back end on the fake driver. This file runs alone (python-cuda),
    so the process's default context is made on this daemon too: unpickled modules load
    there."""
    d = tmp_path_factory.mktemp("gpuxd-cuda")
    proc, sock = start_gpuxd(d, "--backend", "cuda")
    os.environ["GPUX_SOCKET"] = sock
    c = gpux.Context(sock)
    yield c
    del c
    stop_gpuxd(proc, d)


def test_template_instances_by_name_expression(ctx):
    m = gpux.SourceModule(TEMPLATES, name_expressions=["fill<double>", "reduce<int, 256>"],
                          context=ctx)
    assert m.name_expressions == ("fill<double>", "reduce<int, 256>")
    p = gpux.zeros(1, np.float64, context=ctx)
    fill = m.get_function("fill<double>")
    assert fill.name == "fill<double>"
    fill(1, 1, (p, np.int32(1), np.float64(2)))
    # The instance found is fill<double>: its third parameter is 8 bytes, not a float's 4.
    with pytest.raises(gpux.InvalidError, match="argument 2"):
        fill(1, 1, (p, np.int32(1), np.float32(2)))
    # However spaced, as NVRTC reads it.
    ints = gpux.zeros(256, np.int32, context=ctx)
    m.get_function("reduce<int,256>")(1, 256, (ints, ints[:1]))
    m["reduce< int, 256 >"](1, 256, (ints, ints[:1]))


def test_unlisted_instance_is_not_found_with_the_workers_message(ctx):
    m = gpux.SourceModule(TEMPLATES, name_expressions=["fill<double>"], context=ctx)
    p = gpux.zeros(1, np.float32, context=ctx)
    with pytest.raises(gpux.KernelNotFoundError) as e:
        m.get_function("fill<float>")(1, 1, (p, np.int32(1), np.float32(2)))
    assert e.value.status == E_NOTFOUND
    assert 'no kernel "fill<float>"' in e.value.detail
    assert "name expression" in e.value.detail
    # A template's bare name says it is one.
    with pytest.raises(gpux.KernelNotFoundError, match="it is a template"):
        m.get_function("fill")(1, 1, (p, np.int32(1), np.float32(2)))


def test_name_expression_that_names_nothing_fails_the_compile(ctx):
    with pytest.raises(gpux.CompileError) as e:
        gpux.SourceModule(TEMPLATES, name_expressions=["nosuch<int>"], context=ctx)
    assert "nosuch" in e.value.log


def test_raw_module_and_raw_kernel_as_cupy(ctx):
    m = gpux.RawModule(TEMPLATES, ("-std=c++17",), name_expressions=("fill<double>",),
                       context=ctx)
    p = gpux.zeros(1, np.float64, context=ctx)
    m.get_function("fill<double>")(1, 1, (p, np.int32(1), np.float64(2)))
    # RawKernel lists a template instance's name itself.
    k = gpux.RawKernel(TEMPLATES, "fill<double>", context=ctx)
    k(1, 1, (p, np.int32(1), np.float64(2)))
    assert k.owner.name_expressions == ("fill<double>",)
    with pytest.raises(gpux.InvalidError, match="argument 2"):
        k(1, 1, (p, np.int32(1), np.float32(2)))


def test_header_by_name_is_what_the_source_includes(ctx):
    n = 1000
    rng = np.random.default_rng(3)
    x = gpux.asarray(rng.random(n, dtype=np.float32), context=ctx)
    y = gpux.asarray(rng.random(n, dtype=np.float32), context=ctx)
    out = gpux.full(n, np.nan, np.float32, context=ctx)
    headers = {"real.cuh": REAL_H, "lib/count.h": COUNT_H}
    m = gpux.SourceModule(SAXPY, headers=headers, context=ctx)
    assert m.headers == headers
    m.get_function("saxpy")(4, 256, (np.uint64(n), np.float32(0.5), x, y, gpux.Out(out)))
    np.testing.assert_allclose(out, 0.5 * x + y, rtol=1e-6)
    # The header's text decides the kernel's parameters: with double, a float32 is refused.
    m = gpux.SourceModule(SAXPY, headers={"real.cuh": REAL_H.replace("float", "double"),
                                          "lib/count.h": COUNT_H}, context=ctx)
    with pytest.raises(gpux.InvalidError, match="argument 1"):
        m.get_function("saxpy")(4, 256, (np.uint64(n), np.float32(0.5), x, y, out))
    # Without it, nothing of the client's is found.
    with pytest.raises(gpux.CompileError) as e:
        gpux.SourceModule(SAXPY, headers={"real.cuh": REAL_H}, context=ctx)
    assert "lib/count.h" in e.value.log


def test_module_pickles_with_its_headers_and_names(ctx):
    m = gpux.SourceModule(SAXPY, headers={"real.cuh": REAL_H, "lib/count.h": COUNT_H},
                          context=ctx)
    m2 = pickle.loads(pickle.dumps(m))
    assert m2.headers == m.headers and m2.context is not None
    t = gpux.SourceModule(TEMPLATES, name_expressions=["fill<double>"], context=ctx)
    k = pickle.loads(pickle.dumps(t.get_function("fill<double>")))
    assert k.name == "fill<double>" and k.owner.name_expressions == ("fill<double>",)
    p = gpux.zeros(1, np.float64)
    k(1, 1, (p, np.int32(1), np.float64(2)))


def test_bad_types_are_type_errors(ctx):
    def load(**kw):
        gpux.SourceModule(TEMPLATES, context=ctx, **kw)

    with pytest.raises(TypeError, match="headers: a mapping"):
        load(headers=[("a.h", "")])
    with pytest.raises(TypeError, match="headers: a mapping"):
        load(headers="a.h")
    with pytest.raises(TypeError, match="a header's name is a str, not int"):
        load(headers={1: ""})
    with pytest.raises(TypeError, match=r"headers\['a.h'\]: the text is a str or bytes, not "
                                        "NoneType"):
        load(headers={"a.h": None})
    with pytest.raises(TypeError, match="name_expressions: a sequence of str.*not str"):
        load(name_expressions="fill<float>")
    with pytest.raises(TypeError, match=r"name_expressions\[1\]: a str, not bytes"):
        load(name_expressions=["fill<float>", b"fill<int>"])


def test_limits_and_bad_values_are_invalid_errors(ctx):
    def load(lang="cuda", **kw):
        gpux.Module(TEMPLATES, lang, context=ctx, **kw)

    too_many = {f"h{i}.h": "" for i in range(gpux.MODULE_HEADERS_MAX + 1)}
    with pytest.raises(gpux.InvalidError, match="headers: at most 256 of them, not 257"):
        load(headers=too_many)
    with pytest.raises(ValueError, match="name_expressions: at most 1024 of them, not 1025"):
        load(name_expressions=["fill<int>"] * (gpux.MODULE_NAMES_MAX + 1))
    with pytest.raises(gpux.InvalidError, match="a header's name has 1 to 255 bytes"):
        load(headers={"": ""})
    with pytest.raises(gpux.InvalidError, match="a header's name has 1 to 255 bytes"):
        load(headers={"h" * 256: ""})
    with pytest.raises(gpux.InvalidError, match="NUL"):
        load(headers={"a.h": "int x;\0"})
    with pytest.raises(gpux.InvalidError, match=r"name_expressions\[0\]: 1 to 255 bytes"):
        load(name_expressions=["f" * 256])
    with pytest.raises(gpux.InvalidError, match=r"name_expressions\[0\]: 1 to 255 bytes"):
        load(name_expressions=[""])
    with pytest.raises(gpux.InvalidError, match="64 MiB"):
        load(headers={"big.h": "x" * (64 << 20)})
    with pytest.raises(gpux.InvalidError, match="CUDA C\\+\\+ only"):
        load("ptx", name_expressions=["fill<int>"])
    # At the limits, they load.
    exact = {f"h{i}.h": "" for i in range(gpux.MODULE_HEADERS_MAX)}
    exact["h0.h"] = b"/* bytes */"
    gpux.Module(TEMPLATES, "cuda", context=ctx, headers=exact,
                name_expressions=["fill<int>"] * 4 + ["fill<" + " " * 240 + "long>"])


def test_attributes_and_variables_by_name(ctx):
    m = gpux.RawModule(r"""
__constant__ float coeffs[4] = { 1, 2, 3, 4 };
namespace ns { __device__ double scale = 2.5; }
extern "C" __global__ void apply(float *y) { y[threadIdx.x] = coeffs[threadIdx.x] * ns::scale; }
""", context=ctx)
    k = m.get_function("apply")
    # The fake driver's numbers (tests/fake-cuda), each where it belongs.
    a = k.attributes
    assert a["num_regs"] == 23 and a["ptx_version"] == 80 and a["binary_version"] == 90
    assert a["max_dynamic_shared_size_bytes"] == 227 * 1024 and a["nparams"] == 1
    assert k.get_attribute(gpux.function_attribute.CONST_SIZE_BYTES) == 44
    # The cubin's variables, with their initial values; by a qualified name too.
    c = m.get_global("coeffs", np.float32)
    assert list(c.get()) == [1, 2, 3, 4]
    c.set(np.array([5, 6, 7, 8], np.float32))
    assert list(c.get()) == [5, 6, 7, 8]
    assert m.get_global("ns::scale", np.float64).get()[0] == 2.5
    with pytest.raises(gpux.KernelNotFoundError):
        m.get_global("apply")
