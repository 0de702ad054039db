# SPDX-License-Identifier: MIT
"""ElementwiseKernel and ReductionKernel, as CuPy's: kernels made from C expressions.

The code generated is CUDA C++, the same for a GPU and for the host back end (which runs
CUDA C++ on the CPU); only the launch's shape differs. Each combination of argument types is
generated once per kernel object and loaded as a gpux Module, which the workers compile once
per machine and cache by content, like any other.
"""
from __future__ import annotations

import math
import re
import threading
from typing import Any, Optional, Sequence, Union

import numpy as np

from . import _gpux
from ._array import DeviceArray
from ._core import Backend, In, InOut, Module, buffer_of, empty, get_context

__all__ = ["ElementwiseKernel", "ReductionKernel"]

# numpy type name: CUDA C++ type
_CTYPES = {
    "bool": "bool",
    "int8": "signed char",
    "uint8": "unsigned char",
    "int16": "short",
    "uint16": "unsigned short",
    "int32": "int",
    "uint32": "unsigned int",
    "int64": "long long",
    "uint64": "unsigned long long",
    "float16": "__half",
    "float32": "float",
    "float64": "double",
}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_PRELUDE = """\
#include <cuda_fp16.h>
"""
_BLOCK = 256
_GRID_MAX = 1 << 20


class _Param:
    __slots__ = ("name", "type", "raw", "dtype")

    def __init__(self, text: str) -> None:
        words = text.split()
        self.raw = bool(words) and words[0] == "raw"
        if self.raw:
            words = words[1:]
        if len(words) != 2 or not _IDENT.match(words[0]) or not _IDENT.match(words[1]):
            raise ValueError(f"a parameter is '[raw] type name', not {text.strip()!r}")
        self.type, self.name = words
        # A numpy type name, or a placeholder (T) that the arguments decide.
        self.dtype: Optional[np.dtype] = np.dtype(self.type) if self.type in _CTYPES else None


def _params(spec: str) -> list[_Param]:
    if not isinstance(spec, str):
        raise TypeError("parameters: a str such as 'float32 x, raw T y'")
    params = [_Param(p) for p in spec.split(",") if p.strip()]
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise ValueError(f"a parameter name is given twice in {spec!r}")
    return params


def _ctype(dtype: np.dtype) -> str:
    try:
        return _CTYPES[dtype.name]
    except KeyError:
        raise TypeError(f"gpux kernels take {', '.join(_CTYPES)}, not {dtype}") from None


def _is_array(a: Any) -> bool:
    return isinstance(a, (np.ndarray, DeviceArray))


def _scalar_dtype(a: Any) -> np.dtype:
    if isinstance(a, np.generic):
        return a.dtype
    return np.asarray(a).dtype  # int -> int64, float -> float64, bool -> bool


def _resolve(params: Sequence[_Param], args: Sequence[Any], types: dict[str, np.dtype]) -> None:
    """Placeholders from the arrays (and, failing those, the scalars) passed for them."""
    for want_array in (True, False):
        for p, a in zip(params, args):
            if p.dtype is not None or a is None or _is_array(a) != want_array:
                continue
            d = a.dtype if want_array else _scalar_dtype(a)
            old = types.setdefault(p.type, d)
            if want_array and old != d:
                raise TypeError(f"{p.name}: {p.type} is {old} already, not {d}")


def _dtype_of(p: _Param, types: dict[str, np.dtype]) -> np.dtype:
    if p.dtype is not None:
        return p.dtype
    try:
        return types[p.type]
    except KeyError:
        raise TypeError(f"{p.name}: no argument says what {p.type} is") from None


class _Generated:
    """What one kernel object has loaded: per argument signature."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kernels: dict[tuple, tuple[_gpux.Kernel, ...]] = {}
        self.backends: dict[tuple[int, int], Backend] = {}

    def backend(self, context: _gpux.Context, device: int) -> Backend:
        key = (id(context), device)
        b = self.backends.get(key)
        if b is None:
            b = self.backends[key] = Backend(context.device_info(device)["backend"])
        return b

    def kernel(self, key: tuple, make: Any, context: _gpux.Context
               ) -> tuple[_gpux.Kernel, ...]:
        found = self.kernels.get(key)
        if found is None:
            code, lang, options, names = make()
            m = Module(code, lang, options, context=context)
            found = tuple(m.get_function(n) for n in names)
            with self.lock:
                self.kernels[key] = found
        return found


def _where(args: Sequence[Any], device: Optional[int], queue: Optional[_gpux.Queue]
           ) -> tuple[_gpux.Context, int, bool]:
    """The context, the device whose back end the code is generated for (the one the launch
    goes to, or device 0 when gpux chooses: a gpuxd's devices are of one kind), and whether
    the launch works on DeviceArrays."""
    dev_arrays = [a for a in args if isinstance(a, DeviceArray)]
    if dev_arrays:
        d = dev_arrays[0]
        return d.context, d.device, True
    if queue is not None:
        return queue.context, queue.device, False
    for a in args:
        b = buffer_of(a) if isinstance(a, np.ndarray) else None
        if b is not None:
            return b.context, 0 if device is None else device, False
    return get_context(), 0 if device is None else device, False


def _host_input(a: Any, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
    """A non-raw input array of the broadcast shape, contiguous, of dtype: itself when it
    already is (gpux memory: no copy), else a copy made here. Read-only for the kernel."""
    if (isinstance(a, np.ndarray) and a.dtype == dtype and a.shape == shape
            and a.flags.c_contiguous):
        return In(a)
    return In(np.ascontiguousarray(np.broadcast_to(np.asarray(a, dtype=dtype), shape)))


def _device_input(p: _Param, a: DeviceArray, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
    if a.dtype != dtype or a.shape != shape:
        raise ValueError(f"{p.name}: a DeviceArray of shape {shape} and dtype {dtype} (gpux "
                         f"does not broadcast or cast on the device), not {a.shape} {a.dtype}")
    return a


def _new_output(shape: tuple[int, ...], dtype: np.dtype, on_device: bool,
                context: _gpux.Context, device: int) -> Any:
    if on_device:
        return DeviceArray(shape, dtype, device=device, context=context)
    return empty(shape, dtype, context=context)


def _binds(params: Sequence[_Param], args: Sequence[Any], index: str,
           outputs: bool) -> list[str]:
    """Lines that make each parameter's name mean what CuPy's does inside the loop: the
    element at `index` (a reference for outputs), the pointer for raw ones, the value of
    scalars (already parameters)."""
    lines = []
    for p, a in zip(params, args):
        if p.raw or not _is_array(a):
            continue
        if outputs:
            lines.append(f"{p.type} &{p.name} = _a_{p.name}[{index}];")
        else:
            lines.append(f"const {p.type} {p.name} = _a_{p.name}[{index}];")
    return lines


def _signature(params: Sequence[_Param], args: Sequence[Any], outputs: bool) -> list[str]:
    """The C++ declaration of each parameter."""
    out = []
    for p, a in zip(params, args):
        const = "" if outputs else "const "
        if p.raw:
            out.append(f"{const}{p.type} *{p.name}")
        elif _is_array(a):
            out.append(f"{const}{p.type} *_a_{p.name}")
        else:
            out.append(f"const {p.type} {p.name}")
    return out


def _typedefs(params: Sequence[_Param], types: dict[str, np.dtype]) -> str:
    """The placeholders, and the numpy type names the parameters use, as C++ types."""
    lines = [f"typedef {_ctype(d)} {name};" for name, d in sorted(types.items())
             if name not in _CTYPES]
    named = sorted({p.type for p in params if p.type in _CTYPES and p.type != "bool"})
    lines += [f"typedef {_ctype(np.dtype(n))} {n};" for n in named]
    return "".join(line + "\n" for line in lines)


def _kernel(name: str, decls: list[str], body: str) -> str:
    return f'extern "C" __global__ void {name}({", ".join(decls)})\n{{\n{body}}}\n'


class ElementwiseKernel:
    """As CuPy's ElementwiseKernel: ``operation`` (C statements using each parameter's name
    for its element, and ``i`` for the index) run for every element of the broadcast shape
    of the non-raw array arguments.

    ``in_params``, ``out_params``: ``"float32 x, T y, raw T z"``: a numpy type name or a
    placeholder (a name the arguments' dtypes decide), ``raw`` for an array indexed freely
    (``z[i]``). A call takes the inputs, then optionally the outputs; missing outputs are
    made (gpux arrays, or DeviceArrays when an input is one) and returned. Scalars are passed
    by value. ``size=`` gives the size when only raw arrays are passed. Arrays may be numpy
    arrays (copied in and out as any kernel argument), gpux arrays (no copy) or
    DeviceArrays (which stay on their device; not broadcast or cast there).

    The kernel is CUDA C++ (``operation``, ``preamble``, ``loop_prep`` and ``after_loop``
    are too), the same code on a GPU and on the host back end, which runs CUDA C++ on the CPU.
    """

    def __init__(self, in_params: str, out_params: str, operation: str,
                 name: str = "kernel", reduce_dims: bool = True, preamble: str = "",
                 no_return: bool = False, return_tuple: bool = False, loop_prep: str = "",
                 after_loop: str = "", options: Union[str, Sequence[str]] = ()) -> None:
        if not _IDENT.match(name):
            raise ValueError(f"name: a C identifier, not {name!r}")
        self.in_params = _params(in_params)
        self.out_params = _params(out_params)
        if not self.out_params:
            raise ValueError("out_params: at least one output")
        names = [p.name for p in self.in_params + self.out_params]
        if len(set(names)) != len(names):
            raise ValueError("a name is both an input and an output")
        self.operation = operation
        self.name = name
        self.preamble = preamble
        self.no_return = no_return
        self.return_tuple = return_tuple
        self.loop_prep = loop_prep
        self.after_loop = after_loop
        self.options = options if isinstance(options, str) else " ".join(options)
        self._gen = _Generated()

    def __repr__(self) -> str:
        return f"<gpux.ElementwiseKernel {self.name!r}>"

    def _code(self, types: dict[str, np.dtype], ins: Sequence[Any],
              outs: Sequence[Any]) -> tuple:
        decls = (_signature(self.in_params, ins, False) + _signature(self.out_params, outs, True)
                 + ["const unsigned long long _n"])
        binds = _binds(self.in_params, ins, "i", False) + _binds(self.out_params, outs, "i", True)
        inner = "\n".join("\t\t" + b for b in binds) + f"\n\t\t{self.operation};\n"
        loop = ("\tconst long long _stride = (long long)gridDim.x * blockDim.x;\n"
                "\tfor (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
                "i < (long long)_n; i += _stride) {\n" + inner + "\t}\n")
        body = f"\t{self.loop_prep}\n{loop}\t{self.after_loop}\n"
        head = _PRELUDE + _typedefs(self.in_params + self.out_params, types) + \
            self.preamble + "\n"
        return (head + _kernel(self.name, decls, body), "cuda", self.options or None,
                (self.name,))

    def __call__(self, *args: Any, size: Optional[int] = None, block_size: Optional[int] = None,
                 queue: Optional[_gpux.Queue] = None, device: Optional[int] = None,
                 stream: Optional[_gpux.Queue] = None) -> Any:
        nin, nout = len(self.in_params), len(self.out_params)
        if len(args) not in (nin, nin + nout):
            raise TypeError(f"{self.name}: {nin} inputs, then optionally {nout} outputs; "
                            f"{len(args)} given")
        queue = queue if queue is not None else stream
        ins = list(args[:nin])
        outs: list[Any] = list(args[nin:]) or [None] * nout
        for p, a in zip(self.in_params, ins):
            if p.raw and not _is_array(a):
                raise TypeError(f"{p.name}: a raw parameter takes an array")
        where = device
        context, device, on_device = _where(list(args), device, queue)
        types: dict[str, np.dtype] = {}
        _resolve(self.out_params, outs, types)
        _resolve(self.in_params, ins, types)
        # The shape: the non-raw arrays', broadcast (outputs given must have it).
        shapes = [a.shape for p, a in zip(self.in_params + self.out_params, ins + outs)
                  if not p.raw and _is_array(a)]
        if shapes:
            shape = tuple(np.broadcast_shapes(*shapes))
            if size is not None and math.prod(shape) != size:
                raise ValueError(f"size={size} but the arrays have {math.prod(shape)} elements")
        elif size is not None:
            shape = (int(size),)
        else:
            raise ValueError(f"{self.name}: no non-raw array says the size: pass size=")
        n = math.prod(shape)
        for i, p in enumerate(self.out_params):
            d = _dtype_of(p, types)
            if outs[i] is None:
                if p.raw:
                    raise TypeError(f"{p.name}: a raw output must be passed")
                outs[i] = _new_output(shape, d, on_device, context, device)
            elif not _is_array(outs[i]):
                raise TypeError(f"{p.name}: an output is an array")
            elif not p.raw and (outs[i].shape != shape or outs[i].dtype != d):
                raise ValueError(f"{p.name}: an output of shape {shape} and dtype {d}, not "
                                 f"{outs[i].shape} {outs[i].dtype}")
        key = (tuple(sorted((k, v.str) for k, v in types.items())),
               tuple(_is_array(a) for a in ins))
        (kernel,) = self._gen.kernel(key, lambda: self._code(types, ins, outs), context)
        launch: list[Any] = []
        for p, a in zip(self.in_params, ins):
            d = _dtype_of(p, types)
            if not _is_array(a):
                launch.append(d.type(a))
            elif isinstance(a, DeviceArray):
                launch.append(a if p.raw else _device_input(p, a, d, shape))
            else:
                launch.append(In(a) if p.raw else _host_input(a, d, shape))
        for p, a in zip(self.out_params, outs):
            launch.append(a if isinstance(a, DeviceArray) else InOut(a))
        launch.append(np.uint64(n))
        if n:
            block = block_size or _BLOCK
            grid = min(-(-n // block), _GRID_MAX)
            kernel(grid, block, tuple(launch), queue=queue, device=where)
        if self.no_return:
            return None
        if nout == 1 and not self.return_tuple:
            return outs[0]
        return tuple(outs)


class ReductionKernel:
    """As CuPy's ReductionKernel: ``map_expr`` (of the inputs' elements, ``i`` their index)
    gives each element's value, ``reduce_expr`` (of ``a`` and ``b``) combines two, from
    ``identity``, in ``reduce_type`` (default: the first output's type), and
    ``post_map_expr`` (of ``a``) writes the outputs, such as ``"y = a"``.

    A call takes the inputs (and optionally the outputs, or ``out=``), ``axis`` (None: all
    of them; an int or a tuple) and ``keepdims``. Arrays as for ElementwiseKernel: numpy,
    gpux or DeviceArrays (on the device, only leading or trailing axes are reduced). The
    kernels are CUDA C++ (the expressions and ``preamble`` too), the same on a GPU and on the
    host back end. The reduction runs a block per output with a tree in shared memory, and
    splits long reductions over several blocks (then a second kernel combines the parts): on a
    GPU blocks of 256 threads, on the host back end blocks of one thread (a CPU thread each).
    """

    def __init__(self, in_params: str, out_params: str, map_expr: str, reduce_expr: str,
                 post_map_expr: str, identity: Optional[str], name: str = "reduce_kernel",
                 reduce_type: Optional[str] = None, reduce_dims: bool = True,
                 preamble: str = "", options: Union[str, Sequence[str]] = ()) -> None:
        if not _IDENT.match(name):
            raise ValueError(f"name: a C identifier, not {name!r}")
        self.in_params = _params(in_params)
        self.out_params = _params(out_params)
        if not self.out_params:
            raise ValueError("out_params: at least one output")
        if any(p.raw for p in self.out_params):
            raise ValueError("out_params: a reduction's outputs are not raw")
        self.map_expr = map_expr
        self.reduce_expr = reduce_expr
        self.post_map_expr = post_map_expr
        self.identity = identity if identity is not None else "0"
        self.name = name
        self.reduce_type = reduce_type
        if reduce_type is not None and not _IDENT.match(reduce_type):
            raise ValueError(f"reduce_type: a type name, not {reduce_type!r}")
        self.preamble = preamble
        self.options = options if isinstance(options, str) else " ".join(options)
        self._gen = _Generated()

    def __repr__(self) -> str:
        return f"<gpux.ReductionKernel {self.name!r}>"

    def _code(self, types: dict[str, np.dtype], rtype: np.dtype, ins: Sequence[Any],
              outs: Sequence[Any]) -> tuple:
        rt = "_type_reduce"
        head = _PRELUDE + _typedefs(self.in_params + self.out_params, types) + \
            f"typedef {_ctype(rtype)} {rt};\n" + self.preamble + "\n"
        head += (f"__device__ __forceinline__ {rt} _gpux_reduce(const {rt} a, const {rt} b) "
                 f"{{ return ({self.reduce_expr}); }}\n")
        sizes = ["unsigned long long _n_out", "unsigned long long _n_red",
                 "unsigned long long _so", "unsigned long long _sr", "unsigned int _nparts"]
        decls = (_signature(self.in_params, ins, False) + _signature(self.out_params, outs, True)
                 + [f"{rt} *_parts"] + sizes)
        bind_in = "\n".join("\t\t\t" + b for b in _binds(self.in_params, ins, "i", False))
        bind_out = "\n".join("\t\t" + b for b in _binds(self.out_params, outs, "_o", True))
        post = f"{{\n{bind_out}\n\t\tconst {rt} a = _acc;\n\t\t{self.post_map_expr};\n\t}}"
        step = (f"\t\t\tconst long long i = (long long)(_o * _so + _r * _sr);\n{bind_in}\n"
                f"\t\t\t_acc = _gpux_reduce(_acc, ({rt})({self.map_expr}));\n")
        # A block per output (and part): its threads each reduce a stride of the part, then a
        # tree in shared memory combines theirs.
        body = (f"\textern __shared__ __align__(16) unsigned char _gpux_smem[];\n"
                f"\t{rt} *_sh = ({rt} *)_gpux_smem;\n"
                f"\tfor (unsigned long long _o = blockIdx.x; _o < _n_out; _o += gridDim.x) {{\n"
                f"\t\t{rt} _acc = ({rt})({self.identity});\n"
                f"\t\tfor (unsigned long long _r = (unsigned long long)blockIdx.y * blockDim.x"
                f" + threadIdx.x; _r < _n_red; _r += (unsigned long long)gridDim.y * "
                f"blockDim.x) {{\n{step}\t\t}}\n"
                f"\t\t_sh[threadIdx.x] = _acc;\n\t\t__syncthreads();\n"
                f"\t\tfor (unsigned _s = blockDim.x / 2; _s > 0; _s >>= 1) {{\n"
                f"\t\t\tif (threadIdx.x < _s)\n"
                f"\t\t\t\t_sh[threadIdx.x] = _gpux_reduce(_sh[threadIdx.x], "
                f"_sh[threadIdx.x + _s]);\n\t\t\t__syncthreads();\n\t\t}}\n"
                f"\t\tif (threadIdx.x == 0) {{\n\t\t\t_acc = _sh[0];\n"
                f"\t\t\tif (_nparts > 1)\n\t\t\t\t_parts[_o * _nparts + blockIdx.y] = _acc;\n"
                f"\t\t\telse {post}\n\t\t}}\n\t\t__syncthreads();\n\t}}\n")
        main = _kernel(self.name, decls, body)
        # The parts of each output combined, and post-mapped.
        scalars = [d for d, a in zip(_signature(self.in_params, ins, False), ins)
                   if not _is_array(a)]
        pdecls = (scalars + _signature(self.out_params, outs, True) +
                  [f"const {rt} *_parts", sizes[0], sizes[4]])
        pbody = ("\tfor (unsigned long long _o = blockIdx.x * (unsigned long long)blockDim.x + "
                 "threadIdx.x; _o < _n_out; _o += (unsigned long long)gridDim.x * blockDim.x) "
                 f"{{\n\t\t{rt} _acc = _parts[_o * _nparts];\n"
                 f"\t\tfor (unsigned _p = 1; _p < _nparts; _p++)\n"
                 f"\t\t\t_acc = _gpux_reduce(_acc, _parts[_o * _nparts + _p]);\n"
                 f"\t\t{post}\n\t}}\n")
        parts = _kernel(self.name + "_parts", pdecls, pbody)
        return (head + main + parts, "cuda", self.options or None,
                (self.name, self.name + "_parts"))

    def __call__(self, *args: Any, out: Any = None, axis: Any = None, keepdims: bool = False,
                 queue: Optional[_gpux.Queue] = None, device: Optional[int] = None,
                 stream: Optional[_gpux.Queue] = None) -> Any:
        nin, nout = len(self.in_params), len(self.out_params)
        if len(args) not in (nin, nin + nout):
            raise TypeError(f"{self.name}: {nin} inputs, then optionally {nout} outputs; "
                            f"{len(args)} given")
        if out is not None:
            if len(args) != nin or nout != 1:
                raise TypeError("out=: for a kernel of one output, not given positionally")
            args = args + (out,)
        queue = queue if queue is not None else stream
        ins = list(args[:nin])
        outs: list[Any] = list(args[nin:]) or [None] * nout
        where = device
        context, device, on_device = _where(list(args), device, queue)
        types: dict[str, np.dtype] = {}
        _resolve(self.out_params, outs, types)
        _resolve(self.in_params, ins, types)
        shapes = [a.shape for p, a in zip(self.in_params, ins) if not p.raw and _is_array(a)]
        if not shapes:
            raise ValueError(f"{self.name}: no non-raw input array to reduce")
        shape = tuple(np.broadcast_shapes(*shapes))
        nd = len(shape)
        if axis is None:
            axes = tuple(range(nd))
        else:
            axes = tuple(sorted({int(x) % nd if nd else 0 for x in
                                 ((axis,) if isinstance(axis, (int, np.integer)) else axis)}))
            if nd == 0 or any(not -nd <= int(x) < nd for x in
                              ((axis,) if isinstance(axis, (int, np.integer)) else axis)):
                raise ValueError(f"axis {axis} is out of range for {nd} dimensions")
        kept = tuple(d for d in range(nd) if d not in axes)
        out_shape = tuple(1 if d in axes else shape[d] for d in range(nd)) if keepdims else \
            tuple(shape[d] for d in kept)
        n_out = math.prod(shape[d] for d in kept)
        n_red = math.prod(shape[d] for d in axes)
        # Where the reduced axes are: trailing (each output's elements together), leading
        # (strided), or between (moved, on the host).
        trailing = axes == tuple(range(nd - len(axes), nd))
        leading = axes == tuple(range(len(axes)))
        if trailing:
            so, sr, order = n_red, 1, None
        elif leading:
            so, sr, order = 1, n_out, None
        elif on_device:
            raise ValueError("on the device, only leading or trailing axes are reduced")
        else:
            so, sr, order = n_red, 1, kept + axes
        rname = self.reduce_type or self.out_params[0].type
        rtype = np.dtype(rname) if rname in _CTYPES else None
        for i, p in enumerate(self.out_params):
            d = _dtype_of(p, types)
            if outs[i] is None:
                outs[i] = _new_output(out_shape, d, on_device, context, device)
            elif not _is_array(outs[i]) or math.prod(outs[i].shape) != n_out or \
                    outs[i].dtype != d:
                raise ValueError(f"{p.name}: an output of shape {out_shape} and dtype {d}")
        if rtype is None:
            if rname not in types:
                raise TypeError(f"reduce_type: no argument says what {rname} is")
            rtype = types[rname]
        host = self._gen.backend(context, device) == Backend.HOST
        if host:
            block = 1
            nparts = min(64, max(1, n_red // 65536)) if n_out < 16 else 1
        else:
            block = _BLOCK
            nparts = min(1024, max(1, n_red // (block * 16))) if n_out < 64 else 1
        key = (tuple(sorted((k, v.str) for k, v in types.items())), rtype.str,
               tuple(_is_array(a) for a in ins))
        main, combine = self._gen.kernel(
            key, lambda: self._code(types, rtype, ins, outs), context)
        launch: list[Any] = []
        for p, a in zip(self.in_params, ins):
            d = _dtype_of(p, types)
            if not _is_array(a):
                launch.append(d.type(a))
            elif isinstance(a, DeviceArray):
                launch.append(a if p.raw else _device_input(p, a, d, shape))
            elif p.raw:
                launch.append(In(a))
            else:
                src = np.broadcast_to(np.asarray(a, dtype=d), shape)
                if order is not None:
                    src = np.transpose(src, order)
                launch.append(_host_input(np.ascontiguousarray(src), d, src.shape))
        scalars = [x for x, a in zip(launch, ins) if not _is_array(a)]
        outs_arg = [a if isinstance(a, DeviceArray) else InOut(a) for a in outs]
        parts: Any = np.uint64(0)
        if nparts > 1:
            parts = _new_output((n_out * nparts,), rtype, on_device, context, device)
        launch += outs_arg + [parts if nparts > 1 else np.uint64(0), np.uint64(n_out),
                              np.uint64(n_red), np.uint64(so), np.uint64(sr),
                              np.uint32(nparts)]
        if n_out:
            # Each call waits: the parts are whole before they are combined.
            grid = (min(n_out, _GRID_MAX), nparts)
            shared = block * rtype.itemsize
            main(grid, block, tuple(launch), shared_mem=shared, queue=queue, device=where)
            if nparts > 1:
                cblock = 1 if host else _BLOCK
                cgrid = min(-(-n_out // cblock), _GRID_MAX)
                combine(cgrid, cblock, tuple(scalars + outs_arg + [
                    parts, np.uint64(n_out), np.uint32(nparts)]), queue=queue, device=where)
        if nout == 1:
            return outs[0]
        return tuple(outs)
