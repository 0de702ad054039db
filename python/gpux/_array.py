# SPDX-License-Identifier: MIT
"""DeviceArray: a typed array (dtype, shape, C order) that stays in device memory."""
from __future__ import annotations

import operator
from typing import Any, Iterable, Optional, Union

import numpy as np

from . import _gpux
from ._core import ARG_DBUF, empty, get_context
from ._future import Future

__all__ = ["DeviceArray", "to_device", "device_empty", "device_zeros", "device_full"]

_Shape = Union[int, Iterable[int]]


def _shape_of(shape: _Shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = tuple(operator.index(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError("negative dimensions are not allowed")
    return shape


class DeviceArray:
    """An array in a device buffer (gpux.DeviceBuffer) that keeps its contents between
    requests: a kernel's output feeds the next kernel with no trip through the host.

    ``dtype``, ``shape``, C order. A kernel argument as itself (a pointer to its first
    element, on its device: the launch goes there). ``get()`` copies it to a host array,
    ``set(a)`` from one; ``a[i:j]`` (and ``a[i]``) are views of contiguous ranges along the
    first axis; ``reshape`` gives a view of another shape. Made by gpux.to_device(a),
    device_empty, device_zeros, device_full, or DeviceArray(shape, dtype, device=0).
    """

    __slots__ = ("buffer", "offset", "shape", "dtype", "_arg", "__weakref__")

    def __init__(self, shape: _Shape, dtype: Any = np.float64, *, device: int = 0,
                 context: Optional[_gpux.Context] = None,
                 buffer: Optional[_gpux.DeviceBuffer] = None, offset: int = 0) -> None:
        self.shape = _shape_of(shape)
        self.dtype = np.dtype(dtype)
        if self.dtype.hasobject:
            raise TypeError("a DeviceArray holds no Python objects")
        if buffer is None:
            buffer = _gpux.DeviceBuffer(max(self.nbytes, 1), device,
                                        context or get_context())
            offset = 0
        elif offset < 0 or offset + self.nbytes > buffer.size:
            raise ValueError("the array does not fit in the device buffer there")
        #: The device buffer it lives in, and where in it (bytes).
        self.buffer = buffer
        self.offset = offset
        self._arg = _gpux.Arg(ARG_DBUF, buffer, 0, offset, max(self.nbytes, 1))

    # Facts, as numpy's.

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        out, step = [], self.dtype.itemsize
        for s in reversed(self.shape):
            out.append(step)
            step *= s
        return tuple(reversed(out))

    @property
    def device(self) -> int:
        return self.buffer.device

    @property
    def context(self) -> _gpux.Context:
        return self.buffer.context

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        return (f"gpux.DeviceArray(shape={self.shape}, dtype={self.dtype}, "
                f"device={self.device})")

    def __array__(self, *args: Any, **kw: Any) -> np.ndarray:
        # As CuPy: no silent copy to the host.
        raise TypeError("a DeviceArray is in device memory: .get() copies it to the host")

    def __reduce__(self) -> Any:
        raise TypeError("a DeviceArray belongs to its process and cannot be pickled "
                        "(pickle a.get())")

    # Copies.

    def submit_get(self, out: Any = None, *, queue: Optional[_gpux.Queue] = None) -> tuple:
        """get() without waiting: (array, gpux.Future); the array is whole once the future
        is done."""
        if out is None:
            out = empty(self.shape, self.dtype, context=self.context)
        elif (not isinstance(out, np.ndarray) or out.shape != self.shape
              or out.dtype != self.dtype):
            raise ValueError(f"out: an array of shape {self.shape} and dtype {self.dtype}")
        if self.nbytes == 0:
            return out, None
        req = _gpux._dbuf_copy(self.buffer, False, out, self.offset, self.nbytes, queue)
        return out, Future(req, self.context)

    def get(self, out: Any = None, *, queue: Optional[_gpux.Queue] = None) -> np.ndarray:
        """A host copy (a gpux array: shared memory), or into ``out`` (a writable numpy array
        of the same shape and dtype); waits. ``queue``: after that queue's requests."""
        out, fut = self.submit_get(out, queue=queue)
        if fut is not None:
            fut.result()
        return out

    def submit_set(self, a: Any, *, queue: Optional[_gpux.Queue] = None) -> Optional[Future]:
        """set() without waiting: a gpux.Future (None for an empty array). ``a`` must stay
        unchanged until it is done."""
        src = np.ascontiguousarray(a, dtype=self.dtype)
        if src.shape != self.shape:
            src = np.ascontiguousarray(np.broadcast_to(src, self.shape))
        if self.nbytes == 0:
            return None
        req = _gpux._dbuf_copy(self.buffer, True, src, self.offset, self.nbytes, queue)
        return Future(req, self.context)

    def set(self, a: Any, *, queue: Optional[_gpux.Queue] = None) -> None:
        """Copy host data in (``a`` is cast to the dtype and broadcast to the shape); waits."""
        fut = self.submit_set(a, queue=queue)
        if fut is not None:
            fut.result()

    def fill(self, value: Any) -> None:
        """Every element set to ``value`` (through the host); waits."""
        self.set(np.full(self.shape, value, self.dtype))

    def copy(self) -> "DeviceArray":
        """A new DeviceArray on the same device with the same contents (through the host)."""
        out = DeviceArray(self.shape, self.dtype, device=self.device, context=self.context)
        out.set(self.get())
        return out

    # Views.

    def _view(self, shape: tuple[int, ...], offset: int) -> "DeviceArray":
        return DeviceArray(shape, self.dtype, buffer=self.buffer, offset=self.offset + offset)

    def __getitem__(self, key: Any) -> "DeviceArray":
        """a[i] or a[i:j] along the first axis (contiguous: a step of 1): a view."""
        if not self.shape:
            raise IndexError("a 0-d DeviceArray has no items")
        row = self.nbytes // self.shape[0] if self.shape[0] else 0
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step != 1:
                raise IndexError("a DeviceArray is sliced in contiguous ranges only (step 1)")
            n = max(stop - start, 0)
            return self._view((n,) + self.shape[1:], start * row)
        try:
            i = operator.index(key)
        except TypeError:
            raise IndexError("a DeviceArray is indexed by an int or a slice along its first "
                             "axis (contiguous ranges)") from None
        if i < 0:
            i += self.shape[0]
        if not 0 <= i < self.shape[0]:
            raise IndexError(f"index {key} is out of range for {self.shape[0]} items")
        return self._view(self.shape[1:], i * row)

    def __setitem__(self, key: Any, value: Any) -> None:
        self[key].set(value)

    def reshape(self, *shape: Any) -> "DeviceArray":
        """A view of another shape with as many elements (C order); one dimension may be -1."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        dims = [operator.index(s) for s in shape]
        if dims.count(-1) > 1:
            raise ValueError("only one dimension may be -1")
        if -1 in dims:
            known = 1
            for d in dims:
                if d != -1:
                    known *= d
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape {self.shape} into {tuple(shape)}")
            dims[dims.index(-1)] = self.size // known
        new = _shape_of(dims)
        if int(np.prod(new, dtype=np.int64)) != self.size:
            raise ValueError(f"cannot reshape {self.shape} into {new}")
        return self._view(new, 0)

    def ravel(self) -> "DeviceArray":
        return self._view((self.size,), 0)


def device_empty(shape: _Shape, dtype: Any = np.float64, *, device: int = 0,
                 context: Optional[_gpux.Context] = None) -> DeviceArray:
    """A new DeviceArray; its contents are whatever the device memory held."""
    return DeviceArray(shape, dtype, device=device, context=context)


def device_full(shape: _Shape, fill_value: Any, dtype: Any = None, *, device: int = 0,
                context: Optional[_gpux.Context] = None) -> DeviceArray:
    """A new DeviceArray filled with ``fill_value``."""
    if dtype is None:
        dtype = np.asarray(fill_value).dtype
    d = DeviceArray(shape, dtype, device=device, context=context)
    d.fill(fill_value)
    return d


def device_zeros(shape: _Shape, dtype: Any = np.float64, *, device: int = 0,
                 context: Optional[_gpux.Context] = None) -> DeviceArray:
    """A new DeviceArray of zeros."""
    return device_full(shape, 0, dtype, device=device, context=context)


def to_device(a: Any, dtype: Any = None, *, device: int = 0,
              context: Optional[_gpux.Context] = None,
              queue: Optional[_gpux.Queue] = None) -> DeviceArray:
    """A DeviceArray with a copy of ``a`` (anything numpy.asarray takes), as PyCUDA's
    gpuarray.to_gpu; ``device``: where (ignored when ``queue`` names one)."""
    src = np.ascontiguousarray(a, dtype=dtype)
    if queue is not None:
        device = queue.device
    d = DeviceArray(src.shape, src.dtype, device=device, context=context)
    d.set(src, queue=queue)
    return d


_gpux._set_device_array(DeviceArray)
