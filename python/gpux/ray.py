# SPDX-License-Identifier: MIT
"""Ray: gpux kernels in Ray tasks and actors, with no GPU pinned by Ray and no CUDA context.

    import ray, gpux, gpux.ray as gr

    ray.init(resources=gr.node_resources())        # {"GPUX": devices x per_device}
    @gr.remote                                     # ray.remote(num_gpus=0, resources={"GPUX": 1})
    def step(kernel, x): ...
    y = ray.get(gr.launch(kernel, grid, block, (n, x, gpux.Out(y))))   # outputs, by value
    a = gr.KernelActor.remote(code, "cuda")        # keeps its modules and device buffers

Ray's ``num_gpus`` pins a GPU to a task (``CUDA_VISIBLE_DEVICES``) and each task or actor that
uses CUDA makes a context of its own (hundreds of MiB of device memory each). gpux's tasks ask
for the node resource ``GPUX`` instead: no GPU is pinned, nothing in the task loads CUDA, and
the kernels run in the node's gpuxd, whose one worker per GPU serves every task on the node.
``node_resources()`` offers ``per_device`` of it for each device gpuxd has
(``ray start --resources '{"GPUX": 32}'`` on the command line).

gpux arrays travel through Ray's object store by value (Ray shares that memory among a node's
workers itself, read-only, and any number of tasks on any node may read one object: the
once-only memfd handoff of pickling does not fit). A task gets a gpux array again, frozen where
it was frozen (same content key, same place in device caches); kernels then use it in place.
``DeviceArray``s travel as their contents.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

import numpy as np
import ray

from . import _core
from ._array import DeviceArray, to_device
from ._core import Module, asarray, buffer_of, device_count, freeze, ndarray

__all__ = ["RESOURCE", "node_resources", "remote", "launch", "KernelActor", "args"]

#: The node resource that gpux tasks and actors ask for.
RESOURCE = "GPUX"


def node_resources(per_device: int = 8, *, context: Optional[Any] = None) -> dict[str, float]:
    """``{"GPUX": n}`` for ``ray.init(resources=...)``: ``per_device`` tasks at once for each
    device of this host's gpuxd (at least one device: the host back end has one or more)."""
    return {RESOURCE: float(per_device * max(device_count(context), 1))}


# ---- arrays through the object store ----

def _to_value(a: np.ndarray) -> tuple:
    b = buffer_of(a)
    return (np.ascontiguousarray(a.view(np.ndarray)), bool(b is not None and b.frozen),
            not a.flags.writeable)


def _from_value(v: tuple) -> np.ndarray:
    data, frozen, readonly = v
    a = asarray(data)  # a gpux copy of what the object store holds (read-only)
    if frozen:
        freeze(a)
    elif readonly:
        a.flags.writeable = False
    return a


def _device_to_value(d: DeviceArray) -> tuple:
    return _to_value(d.get()), d.device


def _device_from_value(v: tuple) -> DeviceArray:
    host, device = v
    return to_device(_from_value(host), device=device if device < device_count() else 0)


def _register() -> None:
    """In each process that sends gpux arrays through Ray (the driver, and the workers that
    run gpux tasks, which import this module to run them)."""
    ray.util.register_serializer(ndarray, serializer=_to_value, deserializer=_from_value)
    ray.util.register_serializer(DeviceArray, serializer=_device_to_value,
                                 deserializer=_device_from_value)


_register()


# ---- tasks and actors ----

def _options(gpux: float, options: dict) -> dict:
    if options.get("num_gpus"):
        raise ValueError("a gpux task asks for GPUX, not num_gpus (which would pin a GPU)")
    resources = dict(options.pop("resources", None) or {})
    if gpux:
        resources[RESOURCE] = gpux
    return {"num_gpus": 0, "resources": resources, **options}


def remote(fn: Optional[Callable] = None, *, gpux: float = 1, **options: Any) -> Any:
    """``ray.remote`` for a function or class that runs gpux kernels: it asks for ``gpux`` of
    the node resource GPUX and no GPU (``num_gpus=0``: Ray pins none, sets no
    CUDA_VISIBLE_DEVICES). Other ``ray.remote`` options pass through. ``@gr.remote`` or
    ``@gr.remote(gpux=0.5, max_retries=3)``."""
    def wrap(f: Callable) -> Any:
        if isinstance(f, type):
            return ray.remote(**_options(gpux, dict(options)))(f)

        @functools.wraps(f)
        def task(*args: Any, **kw: Any) -> Any:
            # Imported in the worker before the results are sent: they go through Ray by
            # value, as every gpux array does.
            from . import ray as _registered  # noqa: F401
            return f(*args, **kw)

        return ray.remote(**_options(gpux, dict(options)))(task)

    return wrap(fn) if fn is not None else wrap


class _ArgSpec(NamedTuple):
    """A gpux.In/Out/InOut/Mapped/Cached wrapper, as it travels (the wrapper itself belongs
    to its process)."""
    kind: int
    flags: int
    obj: Any


def _pack(args: Sequence[Any]) -> tuple:
    return tuple(_ArgSpec(a.kind, a.flags, a.obj) if isinstance(a, _core._gpux.Arg) else a
                 for a in args)


def _unpack(args: Sequence[Any]) -> tuple[tuple, list]:
    """The kernel's arguments, and the arrays among them (what a run gives back)."""
    call = tuple(_core._gpux.Arg(a.kind, a.obj, a.flags) if isinstance(a, _ArgSpec) else a
                 for a in args)
    arrays = [a.obj if isinstance(a, _ArgSpec) else a for a in args]
    return call, [a for a in arrays if isinstance(a, (np.ndarray, DeviceArray))]


def args(*a: Any) -> tuple:
    """Kernel arguments that travel to a task or an actor: gpux.In/Out/InOut/Cached wrappers
    kept as what they wrap (``actor.run.remote("k", g, b, gr.args(n, x, gpux.Out(y)))``)."""
    return _pack(a)


def _run(kernel: Any, grid: Any, block: Any, args: Sequence[Any], kw: dict) -> tuple:
    call, arrays = _unpack(args)
    kernel(grid, block, call, **kw)
    return tuple(arrays)


_run_task = ray.remote(num_gpus=0, resources={RESOURCE: 1})(_run)


def launch(kernel: Any, grid: Any, block: Any = 1, args: Sequence[Any] = (), *,
           gpux: float = 1, **kw: Any) -> Any:
    """Run a gpux kernel in a Ray task (GPUX, no GPU): an ObjectRef of the tuple of its array
    arguments after the run (outputs included: ``gpux.Out(y)`` gives y's new contents).
    ``kw``: the kernel call's options (``shared_mem``, ``device``, ``timeout``)."""
    task = _run_task if gpux == 1 else _run_task.options(resources={RESOURCE: gpux})
    return task.remote(kernel, grid, block, _pack(args), kw)


class _KernelActor:
    """An actor that loads modules once and keeps device arrays between calls, on its node's
    gpuxd (one GPUX, no GPU, no CUDA context in the actor)."""

    def __init__(self, code: Union[str, bytes], lang: Optional[str] = None,
                 options: Optional[str] = None, **module_kw: Any) -> None:
        self.module = Module(code, lang, options, **module_kw)
        self.arrays: dict[str, DeviceArray] = {}

    def put(self, name: str, a: Any, device: int = 0) -> tuple:
        """Keep a copy of ``a`` on a device under ``name``; its shape and dtype."""
        d = to_device(a, device=device)
        self.arrays[name] = d
        return d.shape, str(d.dtype)

    def get(self, name: str) -> np.ndarray:
        """A kept array's contents."""
        return self.arrays[name].get()

    def run(self, kernel: str, grid: Any, block: Any, args: Sequence[Any], **kw: Any) -> tuple:
        """Run one of the module's kernels; a string argument ``"@name"`` is the kept array of
        that name. Returns the array arguments after the run (kept ones excepted). Pass
        wrapped arguments through ``gr.args(...)`` (the wrappers themselves do not pickle)."""
        call, arrays = _unpack([self.arrays[a[1:]] if isinstance(a, str) and a.startswith("@")
                                else a for a in args])
        self.module.get_function(kernel)(grid, block, call, **kw)
        return tuple(a for a in arrays if isinstance(a, np.ndarray))


# Typed Any: its handles' methods are called as .remote(), which no stub says.
KernelActor: Any = ray.remote(num_gpus=0, resources={RESOURCE: 1})(_KernelActor)
