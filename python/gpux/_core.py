# SPDX-License-Identifier: MIT
"""The package's front: contexts, arrays in shared memory, modules, kernels, arguments."""
from __future__ import annotations

import copy
import enum
import os
import threading
import weakref
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

from . import _gpux
from ._errors import BY_STATUS, GpuxError, InvalidError

__all__ = [
    "Context", "get_context", "Buffer", "DeviceBuffer", "Queue", "Kernel", "Launch",
    "ndarray", "empty", "zeros", "ones", "full", "empty_like", "zeros_like", "asarray",
    "array", "freeze", "buffer_of", "is_shared", "Module", "RawKernel", "RawModule",
    "SourceModule", "In", "Out", "InOut", "Mapped", "Cached", "LANG_CUDA", "LANG_PTX",
    "LANG_CUBIN", "LANG_HOST", "MODULE_HEADERS_MAX", "MODULE_NAMES_MAX", "ANY",
    "PRIORITY_MIN", "PRIORITY_MAX", "SHARE_MAX",
    "device_count", "devices", "Lang", "Backend", "DeviceState", "content_key",
    "function_attribute",
]

Context = _gpux.Context
Buffer = _gpux.Buffer
DeviceBuffer = _gpux.DeviceBuffer
Queue = _gpux.Queue
Kernel = _gpux.Kernel
Launch = _gpux.Launch



class Lang(enum.IntEnum):
    """A module's language (gpux.h's enum gpux_lang)."""
    CUDA = 1   #: CUDA C++, compiled by NVRTC in the worker
    PTX = 2    #: PTX text
    CUBIN = 3  #: a cubin or fatbin
    HOST = 4   #: C for the host back end (gpux/host-kernel.h)


class Backend(enum.IntEnum):
    """What runs a device's kernels (enum gpux_backend)."""
    HOST = 1  #: the CPU: kernels in C
    CUDA = 2  #: a GPU


class DeviceState(enum.IntEnum):
    """A device's state in gpuxd (enum gpux_device_state)."""
    STARTING = 1
    READY = 2
    RESTARTING = 3
    FAILED = 4  #: its worker died too often: left out of ``device=None``


class function_attribute(enum.IntEnum):
    """A kernel's attribute, as PyCUDA's ``drv.function_attribute`` (CUDA's
    CUfunction_attribute): ``k.get_attribute(gpux.function_attribute.NUM_REGS)``."""
    MAX_THREADS_PER_BLOCK = 0
    SHARED_SIZE_BYTES = 1
    CONST_SIZE_BYTES = 2
    LOCAL_SIZE_BYTES = 3
    NUM_REGS = 4
    PTX_VERSION = 5
    BINARY_VERSION = 6
    CACHE_MODE_CA = 7
    MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
    PREFERRED_SHARED_MEMORY_CARVEOUT = 9


#: The fields of Kernel._attributes()' tuple, in gpux.h's order (struct gpux_kernel_attrs).
_ATTR_FIELDS = ("max_threads_per_block", "num_regs", "shared_size_bytes", "const_size_bytes",
                "local_size_bytes", "max_dynamic_shared_size_bytes", "ptx_version",
                "binary_version", "cache_mode_ca", "preferred_shared_memory_carveout",
                "nparams")


LANG_CUDA = Lang.CUDA
LANG_PTX = Lang.PTX
LANG_CUBIN = Lang.CUBIN
LANG_HOST = Lang.HOST
_LANGS = {"cuda": LANG_CUDA, "ptx": LANG_PTX, "cubin": LANG_CUBIN, "fatbin": LANG_CUBIN,
          "host": LANG_HOST, "c": LANG_HOST}

ARG_IN, ARG_OUT, ARG_INOUT, ARG_MAPPED, ARG_DBUF = 2, 3, 4, 5, 6
ARG_CACHED = 1

#: At most this many headers, and name expressions, a module takes (gpux.h's
#: GPUX_MODULE_HEADERS_MAX, GPUX_MODULE_NAMES_MAX); a header's name, a name expression, has
#: 1 to 255 bytes of UTF-8; code, headers and name expressions come to 64 MiB at most.
MODULE_HEADERS_MAX = 256
MODULE_NAMES_MAX = 1024

#: A device index meaning "let gpux choose" (gpux.h's GPUX_ANY): pass device=None.
ANY = None

#: Queues' priorities (Queue(priority=...), Context(priority=...)): from PRIORITY_MIN
#: (background) to PRIORITY_MAX (latency-critical), 0 by default; gpux.h's GPUX_PRIORITY_*.
#: A compute share (share=...) is a percent of the device's SMs, at most SHARE_MAX.
PRIORITY_MIN = -1
PRIORITY_MAX = 2
SHARE_MAX = 100

_default_lock = threading.Lock()
_default: Optional[_gpux.Context] = None


def get_context() -> _gpux.Context:
    """The process's default Context, made on first use from ``$GPUX_SOCKET`` or the default
    socket (where a private gpuxd is started when none listens). Forked children keep using
    it: gpux reconnects in the child on its first call."""
    global _default
    ctx = _default
    if ctx is None:
        with _default_lock:
            if _default is None:
                _default = _gpux.Context()
            ctx = _default
    return ctx


def _set_default_context(ctx: Optional[_gpux.Context]) -> None:
    """Make ``ctx`` the process's default Context (None: made afresh on next use)."""
    global _default
    with _default_lock:
        _default = ctx


def _after_fork_in_child() -> None:
    global _default_lock, _raw_lock
    # A thread of the parent making the default context (or loading a RawKernel's or a
    # RawModule's module) is not here to let go of the lock.
    _default_lock = threading.Lock()
    _raw_lock = threading.Lock()
    _raw_loading.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def device_count(context: Optional[_gpux.Context] = None) -> int:
    """How many devices gpuxd serves (GPUs, or CPU 'devices' on the host back end)."""
    return (context or get_context()).device_count()


def devices(context: Optional[_gpux.Context] = None) -> list[dict]:
    """What gpuxd knows of each device (Context.device_info): index, backend (a Backend),
    state (a DeviceState), name, compute_capability, multiprocessors, memory, uuid."""
    ctx = context or get_context()
    return [ctx.device_info(i) for i in range(ctx.device_count())]


_c_device_info = _gpux.Context.device_info


def _device_info(self: _gpux.Context, index: int) -> dict:
    """device_info(index) -> dict: what gpuxd knows of a device now; ``backend`` is a
    gpux.Backend, ``state`` a gpux.DeviceState."""
    info = _c_device_info(self, index)
    info["backend"] = Backend(info["backend"])
    info["state"] = DeviceState(info["state"])
    return info


# ---- arrays ----

def buffer_of(a: Any) -> Optional[_gpux.Buffer]:
    """The gpux Buffer whose memory holds array ``a`` (any view of it), or None."""
    while a is not None:
        if isinstance(a, _gpux.Buffer):
            return a
        a = getattr(a, "base", None) if not isinstance(a, memoryview) else a.obj
    return None


def is_shared(a: Any) -> bool:
    """Whether ``a``'s memory is a gpux shared buffer (kernels then use it with no copy)."""
    return buffer_of(a) is not None


def _plain(x: Any) -> Any:
    return x.view(np.ndarray) if isinstance(x, ndarray) else x


class ndarray(np.ndarray):
    """A numpy array whose memory is a gpux shared buffer (see gpux.empty).

    Kernels read and write it in place, with no copy; forked children see the same memory;
    pickling it (multiprocessing, Dask) hands over the memory itself, not a copy, within one
    host. Operations that make new arrays (``a + 1``, ``a.sum()``) give plain numpy arrays;
    views (``a[10:]``, ``a.reshape(...)``) stay gpux arrays on the same memory.
    """

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        inputs = tuple(_plain(x) for x in inputs)
        if out is not None:
            kwargs["out"] = tuple(_plain(o) for o in out)
        result = getattr(ufunc, method)(*inputs, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return result

    @property
    def buffer(self) -> Optional[_gpux.Buffer]:
        """The gpux Buffer holding this array's memory (None for a result not made by gpux)."""
        return buffer_of(self)

    @property
    def frozen(self) -> bool:
        """Whether the memory was frozen (read-only for ever; see freeze)."""
        b = buffer_of(self)
        return bool(b is not None and b.frozen)

    def freeze(self) -> "ndarray":
        """Freeze the array's buffer in place (see gpux.freeze); returns self."""
        return freeze(self)

    def get(self, stream: Any = None) -> np.ndarray:
        """A plain numpy copy, as CuPy's ndarray.get() (a gpux array already is in host
        memory: CuPy code that calls get() runs unchanged)."""
        return np.array(self.view(np.ndarray))

    def __reduce_ex__(self, protocol):
        from . import _share

        reduced = _share.reduce_array(self)
        if reduced is None:
            return self.view(np.ndarray).__reduce_ex__(protocol)
        return reduced

    def __copy__(self) -> "ndarray":
        out = empty_like(self)
        np.copyto(out, self)
        return out

    def __deepcopy__(self, memo) -> "ndarray":
        return self.__copy__()

    def copy(self, order: str = "C") -> "ndarray":  # type: ignore[override]
        """A copy in a new gpux buffer."""
        out = empty(self.shape, self.dtype, order="F" if order == "F" else "C",
                    context=self.buffer.context if self.buffer is not None else None)
        np.copyto(out, self)
        return out


#: What empty() makes arrays of in the default context (gpux/_pool.py's set_allocator): the
#: allocator as given (None: a new Buffer per array), and nbytes -> (memory, zero-filled).
_allocator: Any = None
_alloc: Any = None


def _set_allocator(allocator: Any, alloc: Any) -> None:
    global _allocator, _alloc
    _allocator, _alloc = allocator, alloc


def _memory(nbytes: int, context: Optional[_gpux.Context]) -> tuple[Any, bool]:
    """Memory for an array of nbytes: (what exports it, whether it is zero-filled)."""
    alloc = _alloc
    if alloc is not None and (context is None or context is _default):
        return alloc(nbytes)
    return _gpux.Buffer(max(nbytes, 1), context), True


def _shape(shape: Union[int, Iterable[int]]) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _empty(shape: Union[int, Iterable[int]], dtype: Any, order: str,
           context: Optional[_gpux.Context]) -> tuple[ndarray, bool]:
    shape = _shape(shape)
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize
    for s in shape:
        if s < 0:
            raise ValueError("negative dimensions are not allowed")
        nbytes *= s
    mem, zero = _memory(nbytes, context)
    return np.ndarray.__new__(ndarray, shape, dtype, buffer=mem, order=order), zero


def empty(shape: Union[int, Iterable[int]], dtype: Any = np.float64, order: str = "C", *,
          context: Optional[_gpux.Context] = None) -> ndarray:
    """A new gpux array of ``shape`` and ``dtype``, in shared memory: from the memory pool
    (gpux.get_default_memory_pool(); its contents are then what an array before left there,
    as numpy.empty's), or a new buffer (zero-filled) when the pool has none of its size or
    another allocator, or another context, is asked for (gpux.set_allocator)."""
    return _empty(shape, dtype, order, context)[0]


def zeros(shape: Union[int, Iterable[int]], dtype: Any = np.float64, order: str = "C", *,
          context: Optional[_gpux.Context] = None) -> ndarray:
    """A new gpux array of zeros."""
    a, zero = _empty(shape, dtype, order, context)
    if not zero:
        a.view(np.ndarray).fill(0)
    return a


def ones(shape: Union[int, Iterable[int]], dtype: Any = np.float64, order: str = "C", *,
         context: Optional[_gpux.Context] = None) -> ndarray:
    """A new gpux array of ones."""
    return full(shape, 1, dtype, order, context=context)


def full(shape: Union[int, Iterable[int]], fill_value: Any, dtype: Any = None,
         order: str = "C", *, context: Optional[_gpux.Context] = None) -> ndarray:
    """A new gpux array filled with ``fill_value``."""
    if dtype is None:
        dtype = np.asarray(fill_value).dtype
    a = empty(shape, dtype, order, context=context)
    a.view(np.ndarray).fill(fill_value)
    return a


def empty_like(a: Any, dtype: Any = None, *, context: Optional[_gpux.Context] = None) -> ndarray:
    """A new gpux array of ``a``'s shape and dtype (C order)."""
    a = np.asarray(a)
    return empty(a.shape, dtype or a.dtype, context=context)


def zeros_like(a: Any, dtype: Any = None, *, context: Optional[_gpux.Context] = None) -> ndarray:
    """A new gpux array of zeros of ``a``'s shape and dtype."""
    a = np.asarray(a)
    return zeros(a.shape, dtype or a.dtype, context=context)


def asarray(obj: Any, dtype: Any = None, *, context: Optional[_gpux.Context] = None,
            freeze: bool = False) -> ndarray:
    """``obj`` as a gpux array: itself when it already is one (of that dtype, contiguous, in
    that context), else a copy in a new shared buffer (of a gpux.DeviceArray: its contents,
    copied from the device). ``freeze=True`` freezes the copy (or the array) for the device
    cache (see gpux.freeze)."""
    obj = _from_device(obj)
    b = buffer_of(obj)
    if (b is not None and isinstance(obj, np.ndarray) and (dtype is None or
            np.dtype(dtype) == obj.dtype) and (context is None or b.context is context) and
            (obj.flags.c_contiguous or obj.flags.f_contiguous)):
        a = obj if isinstance(obj, ndarray) else obj.view(ndarray)
    else:
        src = np.asarray(obj, dtype=dtype)
        a = empty(src.shape, src.dtype, "F" if src.flags.f_contiguous and not
                  src.flags.c_contiguous else "C",
                  context=context or (b.context if b is not None else None))
        np.copyto(a.view(np.ndarray), src)
    if freeze:
        _freeze(a)
    return a


def array(obj: Any, dtype: Any = None, *, context: Optional[_gpux.Context] = None,
          freeze: bool = False) -> ndarray:
    """A copy of ``obj`` in a new gpux array (always a copy, as numpy.array)."""
    src = np.asarray(_from_device(obj), dtype=dtype)
    a = empty(src.shape, src.dtype, context=context)
    np.copyto(a.view(np.ndarray), src)
    if freeze:
        _freeze(a)
    return a


def _from_device(obj: Any) -> Any:
    from ._array import DeviceArray

    return obj.get() if isinstance(obj, DeviceArray) else obj


def _freeze(a: np.ndarray) -> None:
    b = buffer_of(a)
    if b is None:
        raise InvalidError(-1, "only a gpux array can be frozen (gpux.asarray(x, freeze=True))")
    if not b.frozen:
        from . import _share

        _share.forget(b)
        b.freeze()
    a.flags.writeable = False


def freeze(a: np.ndarray) -> np.ndarray:
    """Freeze a gpux array's buffer: its bytes can never change again, in any process, and
    workers keep a copy on the device for ``Cached(a)`` arguments (no upload next time).

    ``a`` becomes read-only. Other writable views of the same buffer made before must not
    be written afterwards: the pages are read-only now, and a write through such a view
    kills the process (SIGSEGV). ``gpux.asarray(x, freeze=True)`` freezes a fresh copy that
    no one else sees. Children forked before keep seeing the bytes as they were."""
    _freeze(a)
    return a


def content_key(a: np.ndarray) -> bytes:
    """The content key of a frozen, contiguous gpux array's bytes: what a device cache keeps
    them under for ``Cached(a)``, the same for the same bytes in any process, on any host
    (16 bytes). A cluster scheduler places work where a host's devices hold it (gpux.dask)."""
    b = buffer_of(a)
    if b is None or not b.frozen:
        raise InvalidError(-1, "only a frozen gpux array has a content key (gpux.freeze)")
    if not (a.flags.c_contiguous or a.flags.f_contiguous) or a.nbytes == 0:
        raise InvalidError(-1, "only a contiguous, non-empty array has a content key")
    return b.key(a.__array_interface__["data"][0] - b.address, a.nbytes)


# ---- arguments ----

def In(a: Any) -> _gpux.Arg:
    """An input: copied to the device before the kernel (read-only arrays are In by default)."""
    return _gpux.Arg(ARG_IN, a)


def Out(a: Any) -> _gpux.Arg:
    """An output: copied back from the device after the kernel, not sent before."""
    return _gpux.Arg(ARG_OUT, a)


def InOut(a: Any) -> _gpux.Arg:
    """Both (writable arrays are InOut by default)."""
    return _gpux.Arg(ARG_INOUT, a)


def Mapped(a: Any) -> _gpux.Arg:
    """The kernel reads and writes the array's own pages over the bus, with no copy."""
    return _gpux.Arg(ARG_MAPPED, a)


def Cached(a: Any) -> _gpux.Arg:
    """An input of a frozen array whose bytes the device keeps for next time (gpux.freeze)."""
    return _gpux.Arg(ARG_IN, a, ARG_CACHED)


def _dbuf_range(self: _gpux.DeviceBuffer, offset: int = 0, size: int = 0) -> _gpux.Arg:
    """A kernel argument of ``size`` bytes (0: to the end) of the device buffer at ``offset``."""
    return _gpux.Arg(ARG_DBUF, self, 0, offset, size)


def _dbuf_write(self: _gpux.DeviceBuffer, src: Any, offset: int = 0, *,
                queue: Optional[_gpux.Queue] = None) -> None:
    """Copy an array (gpux memory, or a copy of it is made) into the device buffer at
    ``offset`` bytes, in ``queue``'s order; waits."""
    submit_write(self, src, offset, queue=queue).result()


def _dbuf_read(self: _gpux.DeviceBuffer, dst: Any, offset: int = 0, *,
               queue: Optional[_gpux.Queue] = None) -> None:
    """Copy from the device buffer at ``offset`` bytes into an array (writable); waits."""
    submit_read(self, dst, offset, queue=queue).result()


def submit_write(dbuf: _gpux.DeviceBuffer, src: Any, offset: int = 0, *,
                 queue: Optional[_gpux.Queue] = None):
    """DeviceBuffer.write without waiting: a gpux.Future."""
    from ._future import Future

    return Future(_gpux._dbuf_copy(dbuf, True, src, offset, 0, queue), dbuf.context)


def submit_read(dbuf: _gpux.DeviceBuffer, dst: Any, offset: int = 0, *,
                queue: Optional[_gpux.Queue] = None):
    """DeviceBuffer.read without waiting: a gpux.Future."""
    from ._future import Future

    return Future(_gpux._dbuf_copy(dbuf, False, dst, offset, 0, queue), dbuf.context)


# The extension's types are heap types: their Python-side methods are set here.
_gpux.DeviceBuffer.range = _dbuf_range
_gpux.DeviceBuffer.write = _dbuf_write
_gpux.DeviceBuffer.read = _dbuf_read
_gpux.DeviceBuffer.submit_write = submit_write
_gpux.DeviceBuffer.submit_read = submit_read
_gpux.Context.device_info = _device_info
_gpux.DeviceBuffer.__reduce__ = lambda self: _unpicklable("a DeviceBuffer")
_gpux.Queue.__reduce__ = lambda self: _unpicklable("a Queue")
_gpux.Context.__reduce__ = lambda self: _unpicklable("a Context")
_gpux.Buffer.__reduce__ = lambda self: _unpicklable("a Buffer (pickle a gpux array of it)")


def _unpicklable(what: str):
    raise TypeError(f"{what} belongs to its process and cannot be pickled")


# ---- modules and kernels ----

def _guess_lang(code: Union[str, bytes]) -> Lang:
    if isinstance(code, bytes):
        if code[:4] == b"\x7fELF" or code[:4] == b"\x50\xed\x55\xba":
            return LANG_CUBIN
        text = code.decode("utf-8", "replace")
    else:
        text = code
    if "GPUX_HOST_KERNEL" in text:
        return LANG_HOST
    if ".version" in text and ".target" in text:
        return LANG_PTX
    return LANG_CUDA


def _code_bytes(lang: Lang, code: Union[str, bytes]) -> bytes:
    """The code as a Module loads (and pickles) it: bytes, PTX ending in a NUL."""
    raw = code.encode() if isinstance(code, str) else bytes(code)
    if lang == LANG_PTX and not raw.endswith(b"\0"):
        raw += b"\0"
    return raw


def _lang(lang: Union[str, int, None], code: Union[str, bytes]) -> Lang:
    if lang is None:
        return _guess_lang(code)
    if isinstance(lang, str):
        try:
            return _LANGS[lang.lower()]
        except KeyError:
            raise ValueError(f"lang: one of {sorted(_LANGS)}") from None
    try:
        return Lang(int(lang))
    except ValueError:
        raise ValueError(f"lang: one of {sorted(_LANGS)}, or a gpux.Lang") from None


class Module:
    """Code loaded for kernels: CUDA C++ (compiled by NVRTC in the worker), PTX, a cubin or
    fatbin, or C for the host back end (see gpux/host-kernel.h). Compiled once per machine and
    cached by content: loading the same code again, in any process of the user, is fast.

    ``lang``: "cuda", "ptx", "cubin", "host" (or None: guessed from the code). ``options``:
    the compiler's options, a string or a sequence. Compile errors raise gpux.CompileError,
    whose ``log`` is the compiler's. Pickles as its code (loaded again where unpickled).

    CUDA C++ only: ``headers`` maps names to texts (``{"util.cuh": "..."}``, str or bytes):
    the source's ``#include "util.cuh"`` reads them (the worker compiles where no file of
    the client's can be read, so ``-I`` is refused: pass what the code includes here).
    ``name_expressions`` lists template instances to compile (``["fill<float>",
    "reduce<int, 256>"]``), as CuPy's RawModule and NVRTC take them; each is then a kernel
    name for ``get_function``. One that names no kernel fails the compile (CompileError).
    At most MODULE_HEADERS_MAX headers and MODULE_NAMES_MAX expressions, each name 1 to
    255 bytes: more, or wrong types, raise gpux.InvalidError (a ValueError) or TypeError.
    """

    def __init__(self, code: Union[str, bytes], lang: Union[str, int, None] = None,
                 options: Union[str, Sequence[str], None] = None, *,
                 headers: Optional[Mapping[str, Union[str, bytes]]] = None,
                 name_expressions: Optional[Sequence[str]] = None,
                 context: Optional[_gpux.Context] = None, pycuda: bool = False) -> None:
        # Each kernel holds its Module (what pickles it), so the Module holds them weakly:
        # the code is unloaded once neither is left.
        self._kernels: weakref.WeakValueDictionary[str, _gpux.Kernel] = \
            weakref.WeakValueDictionary()
        #: Whether its kernels also take PyCUDA's call (``f(*args, block=..., grid=...)``):
        #: SourceModule's do.
        self.pycuda = bool(pycuda)
        #: Whether RawKernel or RawModule loaded it (_raw_module): it pickles as one of
        #: theirs, shared where it is unpickled.
        self._raw = False
        self.lang = _lang(lang, code)
        raw = _code_bytes(self.lang, code)
        if options is not None and not isinstance(options, str):
            options = " ".join(options)
        self.code = raw
        self.options = options
        self._m = _gpux.Module(self.lang, raw, options, context, headers=headers,
                               name_expressions=name_expressions)
        # As loaded (the extension checked them): what pickling loads again.
        self.headers: Optional[dict[str, Union[str, bytes]]] = \
            dict(headers) if headers is not None else None
        self.name_expressions: Optional[tuple[str, ...]] = \
            tuple(name_expressions) if name_expressions is not None else None

    @classmethod
    def from_file(cls, path: Union[str, os.PathLike], lang: Union[str, int, None] = None,
                  options: Union[str, Sequence[str], None] = None, *,
                  headers: Optional[Mapping[str, Union[str, bytes]]] = None,
                  name_expressions: Optional[Sequence[str]] = None,
                  context: Optional[_gpux.Context] = None, pycuda: bool = False) -> "Module":
        """Load a file: .cu (CUDA), .ptx, .cubin or .fatbin, .c (host), else guessed.
        ``headers`` and ``name_expressions`` as for Module (the files the source includes
        are not read from beside it: pass them in ``headers``)."""
        path = os.fspath(path)
        ext = os.path.splitext(path)[1].lower()
        if lang is None:
            lang = {".cu": "cuda", ".ptx": "ptx", ".cubin": "cubin", ".fatbin": "cubin",
                    ".c": "host"}.get(ext)
        with open(path, "rb") as f:
            return cls(f.read(), lang, options, headers=headers,
                       name_expressions=name_expressions, context=context, pycuda=pycuda)

    @property
    def log(self) -> str:
        """The compiler's warnings, or ''."""
        return self._m.log

    @property
    def context(self) -> _gpux.Context:
        return self._m.context

    def get_function(self, name: str) -> _gpux.Kernel:
        """The kernel ``name`` (cached): call it as ``k(grid, block, args)``. ``name`` is the
        kernel's plain, qualified or mangled name, or a template instance's name expression
        (``"fill<float>"``: one listed in ``name_expressions`` or instantiated in the
        source). A name the module lacks shows at the first launch
        (gpux.KernelNotFoundError, whose ``detail`` lists the module's kernels)."""
        k = self._kernels.get(name)
        if k is None:
            k = self._kernels[name] = _gpux.Kernel(self._m, name, self, pycuda=self.pycuda)
        return k

    __getitem__ = get_function

    def get_global(self, name: str, dtype: Any = None, shape: Any = None, *,
                   device: Optional[int] = None) -> Any:
        """A variable of the module (``__device__`` or ``__constant__`` at namespace scope; in
        C for the host back end, one declared ``GPUX_HOST_GLOBAL``), by its name (``"coeffs"``,
        ``"ns::coeffs"``, or its symbol) on ``device`` (None: the device that loaded the
        module first): as CuPy's RawModule.get_global, a gpux.DeviceArray over the variable
        itself, of ``dtype`` (uint8 if None) and ``shape`` (None: as many elements as fit),
        which ``get()`` and ``set()`` copy, and kernels of any module on that device take as a
        pointer to it. A SourceModule's ``get_global(name)`` is PyCUDA's: ``(buffer, size)``,
        the gpux.DeviceBuffer of the variable and its size in bytes (``buffer.write(a)``
        where PyCUDA calls ``memcpy_htod(ptr, a)``). A shape larger than the variable raises
        ValueError, a name the module lacks gpux.KernelNotFoundError.

        The variable is the module's as the worker loaded it: the processes of one user that
        load the same code share it, and it keeps its value while the worker keeps the module
        (after the last Module is gone too, until evicted); the DeviceBuffer keeps the module
        loaded meanwhile. On the host back end a ``const`` variable is read-only."""
        from ._array import DeviceArray

        buf = _gpux.DeviceBuffer._global(self._m, name, device)
        if self.pycuda and dtype is None and shape is None:
            return buf, buf.size
        dt = np.dtype(np.uint8 if dtype is None else dtype)
        if shape is None:
            shape = (buf.size // dt.itemsize,)
        return DeviceArray(shape, dt, buffer=buf)

    def __reduce__(self):
        if self._raw:
            return (_load_raw_module, (self.code, int(self.lang), self.options,
                                       self.headers, self.name_expressions))
        return (_load_module, (self.code, int(self.lang), self.options, self.headers,
                               self.name_expressions, self.pycuda))

    def __repr__(self) -> str:
        names = sorted(self._kernels.keys())
        if not hasattr(self, "code"):
            return "<gpux.Module, not loaded>"
        return (f"<gpux.Module {self.lang.name.lower()}, {len(self.code)} bytes"
                + (f", kernels used: {', '.join(names)}" if names else "") + ">")


def _load_module(code: bytes, lang: int, options: Optional[str],
                 headers: Optional[dict[str, Union[str, bytes]]] = None,
                 name_expressions: Optional[tuple[str, ...]] = None,
                 pycuda: bool = False) -> Module:
    return Module(code, lang, options, headers=headers, name_expressions=name_expressions,
                  pycuda=pycuda)


def _reduce_kernel(k: _gpux.Kernel):
    m = k.owner
    if not isinstance(m, Module) or m._m is not k.module:
        raise TypeError("only a kernel of a gpux.Module (get_function, RawKernel) pickles")
    return (_kernel_of, (m, k.name))


def _kernel_of(m: Module, name: str) -> _gpux.Kernel:
    return m.get_function(name)


copy._deepcopy_dispatch[_gpux.Kernel] = lambda k, memo: k  # type: ignore[attr-defined]
import copyreg  # noqa: E402

copyreg.pickle(_gpux.Kernel, _reduce_kernel)


# RawKernel's and RawModule's modules, by what was loaded and where: each held as long as a
# kernel of it (or the Module) is.
_raw_lock = threading.Lock()
_raw_modules: "weakref.WeakValueDictionary[tuple, Module]" = weakref.WeakValueDictionary()
_raw_loading: dict[tuple, threading.Lock] = {}


def _raw_key(ctx: _gpux.Context, lang_id: int, code: Union[str, bytes],
             options: Union[str, Sequence[str], None],
             headers: Optional[Mapping[str, Union[str, bytes]]],
             exprs: Optional[Sequence[str]]) -> Optional[tuple]:
    """What makes two RawKernels' or RawModules' modules the same; None where the arguments
    are not plain (Module then says what is wrong with them)."""
    try:
        raw = _code_bytes(Lang(lang_id), code)
        opts = options if options is None or isinstance(options, str) else " ".join(options)
        hdrs = tuple(sorted(headers.items())) if headers is not None else None
        key = (id(ctx), lang_id, raw, opts, hdrs, tuple(exprs) if exprs else None)
        hash(key)
    except (TypeError, AttributeError, UnicodeError):
        return None
    return key


def _raw_module(code: Union[str, bytes], lang_id: Lang,
                options: Union[str, Sequence[str], None],
                headers: Optional[Mapping[str, Union[str, bytes]]],
                exprs: Optional[Sequence[str]], context: Optional[_gpux.Context]) -> Module:
    """The Module that identical RawKernel and RawModule calls in this process share while
    one of them holds it, loaded by the first (others racing for it wait for its result)."""
    ctx = context if context is not None else get_context()
    key = _raw_key(ctx, lang_id, code, options, headers, exprs)
    if key is None:
        return Module(code, lang_id, options, headers=headers, name_expressions=exprs,
                      context=ctx)
    with _raw_lock:
        m = _raw_modules.get(key)
        loading = _raw_loading.setdefault(key, threading.Lock()) if m is None else None
    if loading is not None:
        # One thread loads it; the others racing for the same module wait for its result.
        with loading:
            with _raw_lock:
                m = _raw_modules.get(key)
            if m is None:
                try:
                    m = Module(code, lang_id, options, headers=headers,
                               name_expressions=exprs, context=ctx)
                    m._raw = True
                    with _raw_lock:
                        _raw_modules[key] = m
                finally:
                    with _raw_lock:
                        if _raw_loading.get(key) is loading:
                            del _raw_loading[key]
    assert m is not None
    return m


def _load_raw_module(code: bytes, lang: int, options: Optional[str],
                     headers: Optional[dict[str, Union[str, bytes]]] = None,
                     name_expressions: Optional[tuple[str, ...]] = None) -> Module:
    # Unpickled (a task's argument, many times over): the one this process shares.
    return _raw_module(code, Lang(lang), options, headers, name_expressions, None)


def RawKernel(code: Union[str, bytes], name: str,
              options: Union[str, Sequence[str], None] = None,
              lang: Union[str, int, None] = None, *,
              headers: Optional[Mapping[str, Union[str, bytes]]] = None,
              context: Optional[_gpux.Context] = None) -> _gpux.Kernel:
    """As CuPy's RawKernel: the kernel ``name`` of ``code``; call it as
    ``k(grid, block, args, shared_mem=0)``. ``headers`` as for Module. A template
    instance's name (``"fill<float>"``) is listed as the module's name expression, so that
    the template needs no explicit instantiation in the source.

    As CuPy's, RawKernels of the same code, options, headers and context share one loaded
    module (and so its ``__device__`` variables), which is unloaded once none of them is
    left: a RawKernel made in a function called again and again (a Dask task, a request
    handler) costs one load. What a process unpickles of one is that module too. Module
    loads afresh each time."""
    lang_id = _lang(lang, code)
    exprs = [name] if lang_id == LANG_CUDA and "<" in name else None
    return _raw_module(code, lang_id, options, headers, exprs, context).get_function(name)


def RawModule(code: Union[str, bytes], options: Union[str, Sequence[str], None] = None, *,
              name_expressions: Optional[Sequence[str]] = None,
              headers: Optional[Mapping[str, Union[str, bytes]]] = None,
              context: Optional[_gpux.Context] = None) -> Module:
    """As CuPy's RawModule: CUDA C++ ``code``, with the template instances that
    ``name_expressions`` lists (``["fill<float>"]``) compiled; ``get_function(expr)`` gives
    one by the same expression. ``headers`` as for Module (CuPy reads ``-I`` directories;
    gpux takes the headers' texts by name instead). As RawKernel's, identical calls share
    one Module while any of them holds it, ``__device__`` variables included."""
    return _raw_module(code, LANG_CUDA, options, headers, name_expressions, context)


def SourceModule(source: str, options: Union[str, Sequence[str], None] = None, *,
                 headers: Optional[Mapping[str, Union[str, bytes]]] = None,
                 name_expressions: Optional[Sequence[str]] = None,
                 context: Optional[_gpux.Context] = None, no_extern_c: bool = True,
                 include_dirs: Sequence[str] = ()) -> Module:
    """As PyCUDA's SourceModule: CUDA C++ source; ``get_function(name)`` gives its kernels,
    which take PyCUDA's call, ``f(*args, block=(x, y, z), grid=(x, y), shared=0,
    stream=None, time_kernel=False)`` (``stream`` a gpux.Queue; ``time_kernel`` returns the
    kernel's own time in seconds), as well as CuPy's, ``f(grid, block, args)``; and
    ``prepare(arg_types)``, ``prepared_call(grid, block, *args)``,
    ``prepared_async_call(grid, block, stream, *args)``,
    ``prepared_timed_call(grid, block, *args)``.
    No ``extern "C"`` is needed (PyCUDA's ``no_extern_c=True`` is how gpux always
    compiles): a kernel with C++ linkage is found by its name, plain or qualified
    (``"saxpy"``, ``"ns::saxpy"``), or by its mangled symbol (an overloaded name raises
    gpux.InvalidError, naming the candidates). A template's instance is found by its name
    expression (``"fill<float>"``) where ``name_expressions`` lists it or the source
    instantiates it explicitly (``template __global__ void fill<float>(float *, int);``).
    Where PyCUDA takes ``include_dirs``, gpux takes ``headers``: the texts of the files the
    source includes, by the names it includes them by (``{"util.cuh": "..."}``);
    ``include_dirs`` is refused, and ``no_extern_c=False`` too (no ``extern "C"`` is wrapped
    around the source: kernels are found by their C++ names)."""
    if include_dirs:
        raise InvalidError(-1, "include_dirs: the worker reads no file of yours: pass the "
                               "headers' texts as headers={name: text}")
    if not no_extern_c:
        raise InvalidError(-1, "no_extern_c=False: gpux wraps no extern \"C\" around the "
                               "source; its kernels are found by their C++ names all the same")
    return Module(source, LANG_CUDA, options, headers=headers,
                  name_expressions=name_expressions, context=context, pycuda=True)


# ---- PyCUDA's prepared calls, on every kernel ----

_c_prepare = _gpux.Kernel.prepare


def _is_arg_types(x: Any) -> bool:
    if isinstance(x, str):
        return True
    return isinstance(x, (list, tuple)) and len(x) > 0 and not all(
        isinstance(d, (int, np.integer)) for d in x)


def _prepare(self: _gpux.Kernel, *args: Any, **kw: Any) -> Any:
    """prepare(grid, block, args=(), **options) -> Launch: the arguments resolved once
    (gpux's). PyCUDA's ``prepare(arg_types)`` (a string such as "PiP", or a list of types)
    returns the kernel itself, for ``prepared_call``: gpux needs no types."""
    if len(args) == 1 and not kw and _is_arg_types(args[0]):
        return self
    return _c_prepare(self, *args, **kw)


def _prepared_call(self: _gpux.Kernel, grid: Any, block: Any, *args: Any,
                   shared_size: int = 0) -> None:
    """PyCUDA's prepared_call(grid, block, *args, shared_size=0): run and wait."""
    return self(grid, block, args, shared_mem=shared_size)


def _prepared_async_call(self: _gpux.Kernel, grid: Any, block: Any, stream: Any, *args: Any,
                         shared_size: int = 0) -> Any:
    """PyCUDA's prepared_async_call(grid, block, stream, *args, shared_size=0): submit
    (``stream`` a gpux.Queue, or None); returns the gpux.Future."""
    return self.submit(grid, block, args, shared_mem=shared_size, queue=stream)


def _prepared_timed_call(self: _gpux.Kernel, grid: Any, block: Any, *args: Any,
                         shared_size: int = 0) -> Any:
    """PyCUDA's prepared_timed_call(grid, block, *args, shared_size=0): submit, and return a
    callable that waits and gives the kernel's own time in seconds."""
    fut = self.submit(grid, block, args, shared_mem=shared_size, timed=True)

    def seconds() -> float:
        fut.result()
        return fut.times.device_ns / 1e9

    return seconds


# ---- kernels' attributes, as CuPy's RawKernel and PyCUDA's Function have them ----

def _get_attributes(self: _gpux.Kernel, device: Optional[int] = None) -> dict:
    """The kernel's attributes on ``device`` (None: the device that loaded its module first),
    as CuPy's RawKernel.attributes: max_threads_per_block, num_regs, shared_size_bytes,
    const_size_bytes, local_size_bytes, max_dynamic_shared_size_bytes (what a launch may ask
    for: gpux raises the kernel's limit as launches need it), ptx_version, binary_version,
    cache_mode_ca, preferred_shared_memory_carveout, and nparams. What the device's back end
    cannot tell is None (on the host back end: all but max_threads_per_block,
    max_dynamic_shared_size_bytes, nparams, and shared_size_bytes of a kernel in C).
    Asks the worker each time (a round trip; it waits for the module's build on a device
    that had not loaded it)."""
    values = self._attributes(device)
    return {k: (None if v == -1 and k != "preferred_shared_memory_carveout" else v)
            for k, v in zip(_ATTR_FIELDS, values)}


def _get_attribute(self: _gpux.Kernel, attr: Union[int, str],
                   device: Optional[int] = None) -> Optional[int]:
    """PyCUDA's ``func.get_attribute(drv.function_attribute.NUM_REGS)``: one attribute, by a
    gpux.function_attribute (or its number, or its name), None where unknown."""
    if isinstance(attr, str):
        key = attr.lower()
    else:
        key = function_attribute(int(attr)).name.lower()
    attrs = _get_attributes(self, device)
    if key not in attrs:
        raise ValueError(f"no attribute {attr!r}: one of {sorted(attrs)}")
    return attrs[key]


def _attr_property(field: str) -> property:
    return property(lambda self: _get_attributes(self)[field],
                    doc=f"The kernel's {field} on its module's first device (get_attributes()).")


_gpux.Kernel.get_attributes = _get_attributes
_gpux.Kernel.get_attribute = _get_attribute
_gpux.Kernel.attributes = property(_get_attributes,
                                   doc="CuPy's RawKernel.attributes: get_attributes().")
for _field in _ATTR_FIELDS:
    setattr(_gpux.Kernel, _field, _attr_property(_field))

_gpux.Kernel.prepare = _prepare
_gpux.Kernel.prepared_call = _prepared_call
_gpux.Kernel.prepared_async_call = _prepared_async_call
_gpux.Kernel.prepared_timed_call = _prepared_timed_call


def _register() -> None:
    from ._future import Future

    _gpux._register(GpuxError, dict(BY_STATUS), np.generic, get_context, Future)


_register()
