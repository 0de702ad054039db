# SPDX-License-Identifier: MIT
"""gpux: GPU kernels from Python processes that fork, through gpuxd.

The process never loads CUDA: kernels run in gpux's worker processes (one per GPU, or on the
CPU with the host back end), on numpy arrays in shared memory that they read and write in
place. Forked children (multiprocessing, gunicorn, Dask workers) use the arrays, modules and
kernels they inherited; spawned ones get arrays by pickling, which hands over the memory.

    import numpy as np, gpux

    k = gpux.RawKernel(r'''
    extern "C" __global__ void scale(float a, float *x, unsigned long n)
    { unsigned long i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
    ''', "scale")
    x = gpux.asarray(np.arange(1000, dtype=np.float32))   # shared memory
    k((4,), (256,), (np.float32(2), x, np.uint64(x.size)))  # runs and waits
    fut = k.submit((4,), (256,), (np.float32(2), x, np.uint64(x.size)))  # a Future

See docs/PYTHON.md in the repository.
"""
from ._errors import *  # noqa: F401,F403
from ._errors import GpuxError, ShareError
from ._core import (  # noqa: F401
    ANY, LANG_CUBIN, LANG_CUDA, LANG_HOST, LANG_PTX, Backend, Buffer, Cached, Context,
    DeviceBuffer, DeviceState, Lang, MODULE_HEADERS_MAX, MODULE_NAMES_MAX, In, InOut, Kernel,
    Launch, Mapped, Module, Out, PRIORITY_MAX, PRIORITY_MIN, Queue, RawKernel, RawModule,
    SHARE_MAX, SourceModule, array, asarray, buffer_of, content_key, device_count, devices,
    empty, empty_like, freeze, full, function_attribute, get_context, is_shared, ndarray, ones,
    zeros, zeros_like,
)
from ._future import Future, Times  # noqa: F401
from ._array import (  # noqa: F401
    DeviceArray, device_empty, device_full, device_zeros, to_device,
)
from ._kernels import ElementwiseKernel, ReductionKernel  # noqa: F401
from ._pool import (  # noqa: F401
    MemoryPool, get_allocator, get_default_memory_pool, set_allocator,
)
from . import _gpux

__version__: str = _gpux.version()


def version() -> str:
    """libgpuxclient's version, as built."""
    return _gpux.version()


def _register_dask() -> None:
    import sys

    if "distributed" in sys.modules:
        from . import dask  # noqa: F401  (registers gpux arrays' Dask serialization)


_register_dask()
