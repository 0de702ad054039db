# SPDX-License-Identifier: MIT
"""Dask: gpux on every worker of a cluster, one gpuxd per host.

    from gpux.dask import GpuxWorkerPlugin, GpuxSchedulerPlugin, annotate

    client.register_plugin(GpuxWorkerPlugin())     # each worker: its host's gpuxd, GPUX=n
    client.register_plugin(GpuxSchedulerPlugin())  # tasks go where their inputs are cached
    with annotate(weights):                        # resources={"GPUX": 1}, cached inputs
        futs = client.map(infer, batches, weights=w)

Or, from the command line: ``dask scheduler --preload gpux.dask`` and
``dask worker --preload gpux.dask [--resources GPUX=4]`` (with ``GPUX_SOCKET`` naming the host's
gpuxd where it is not the default one).

- ``GpuxWorkerPlugin`` attaches each worker to its host's gpuxd (``socket``, else
  ``$GPUX_SOCKET``, else the default), gives it the resource ``GPUX`` (``resources``, else what
  the worker was started with, else its thread count) while that gpuxd serves it, and 0
  while not (gpuxd gone: tasks that need ``GPUX`` go to other hosts, and come back once it
  serves again). It reports each heartbeat whether gpuxd serves, and the affinity filter of
  its devices (which cached inputs they hold). It holds nothing that a fork would copy:
  everything is made in the worker process, at setup (the nanny may fork or spawn it).
- ``GpuxSchedulerPlugin`` gives a task annotated with cached inputs (``annotate``) the
  workers whose host's devices hold the most of them, as loose worker restrictions, each time
  the task becomes waiting (submitted, or retried): a placement, never a promise, so a task
  whose holders are gone runs elsewhere. It also schedules again the tasks that waited for
  ``GPUX`` once a worker has it back.
- gpux arrays travel between Dask processes of one host as their shared memory (no copy:
  the receiver attaches the sender's memfd, gpux._share), those of 256 KiB or less (whose
  memory is carved from an arena that the sender reuses once it frees them) and those
  going to other hosts by value (the
  bytes, made a gpux array again there, frozen again where it was frozen, so its content
  key, and its place in device caches, is the same). A worker tells its peers in Dask's
  handshake which host it is on (boot, network namespace, user; ``$GPUX_HOST_ID`` stands for
  another host on the same machine); a peer that says nothing gets bytes: the scheduler,
  which passes data on to anyone, and clients, which may get data through it. Spilling to
  disk takes the bytes too.
  ``DeviceArray``s travel as their contents (to the host and back to a device there).
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import threading
import time
import weakref
from typing import Any, Iterator, Optional, Union

import dask
import numpy as np
from distributed import Scheduler, SchedulerPlugin, Worker, WorkerPlugin
from distributed.comm import core as _comm_core
from distributed.core import Status
from distributed.protocol import dask_deserialize, dask_serialize

from . import _gpux, _share
from ._array import DeviceArray, to_device
from ._core import _set_default_context, content_key, empty, freeze, get_context, ndarray
from ._errors import GpuxError

__all__ = ["GpuxWorkerPlugin", "GpuxSchedulerPlugin", "annotate", "cached_keys", "RESOURCE",
           "ndarray", "DeviceArray", "dask_setup"]

#: The worker resource that gpux tasks ask for (``resources={"GPUX": 1}``).
RESOURCE = "GPUX"
_ANNOTATION = "gpux"
_METRIC = "gpux"
_HANDSHAKE = "gpux-host"
# How long a worker's setup waits for its gpuxd's devices to be ready (a worker has 60 s).
_START_S = 60.0


# ---- which peers share memory ----

def host_id() -> str:
    """Where this process's gpux memory can be attached: this boot, this network namespace,
    this user (``$GPUX_HOST_ID`` makes another host of processes on the same machine)."""
    boot, netns = _share.host_key()
    return f"{boot}:{netns}:{os.geteuid()}"


_orig_handshake_info = _comm_core.Comm.handshake_info


def _handshake_info(self: Any) -> dict:
    info = _orig_handshake_info(self)
    # Workers say where they are. A scheduler only passes data on, to anyone, and a client
    # may get it through one: what they are sent is bytes.
    if Worker._instances:
        info[_HANDSHAKE] = host_id()
    return info


if not getattr(_comm_core.Comm.handshake_info, "_gpux", False):
    _handshake_info._gpux = True  # type: ignore[attr-defined]
    _comm_core.Comm.handshake_info = _handshake_info  # type: ignore[method-assign]


def _same_host(context: Optional[dict]) -> bool:
    recipient = (context or {}).get("recipient") or {}
    return recipient.get(_HANDSHAKE) == host_id()


# ---- serialization ----

def _by_value(a: np.ndarray) -> tuple[dict, list]:
    frozen = isinstance(a, ndarray) and a.frozen
    c = a if a.flags.c_contiguous or a.flags.f_contiguous else np.ascontiguousarray(a)
    order = "C" if c.flags.c_contiguous else "F"
    header = {"gpux": "value", "dtype": np.lib.format.dtype_to_descr(c.dtype),
              "shape": list(c.shape), "order": order,
              "frozen": frozen, "readonly": not a.flags.writeable}
    data = c.view(np.ndarray).reshape(-1, order=order).view(np.uint8) if c.size else b""
    return header, [memoryview(data) if c.size else data]


def _from_value(header: dict, frame: Any) -> np.ndarray:
    dtype = np.lib.format.descr_to_dtype(header["dtype"])
    shape = tuple(header["shape"])
    src = np.frombuffer(frame, dtype=dtype).reshape(shape, order=header["order"])
    try:
        a: np.ndarray = empty(shape, dtype, order=header["order"])
    except GpuxError:
        # No gpuxd to be had here (a worker without one): plain memory, still the bytes.
        a = np.empty(shape, dtype, order=header["order"])
        np.copyto(a, src)
        a.flags.writeable = not header["readonly"]
        return a
    np.copyto(a.view(np.ndarray), src)
    if header["frozen"]:
        freeze(a)
    elif header["readonly"]:
        a.flags.writeable = False
    return a


def _own_memory(a: ndarray) -> bool:
    """Whether the array's memory may be handed to another process for as long as that one
    likes: a segment of its own, which the sender's free only unmaps. A small buffer is carved
    from a 4 MiB arena whose pages its process gives to new buffers once it is freed, which
    the receiver would then see change under it."""
    b = a.buffer
    if b is None:
        return False
    fd, _ = b.fd()
    return "gpux-arena" not in os.readlink(f"/proc/self/fd/{fd}")


@dask_serialize.register(ndarray)
def _serialize(a: ndarray, context: Optional[dict] = None) -> tuple[dict, list]:
    if _same_host(context) and _own_memory(a):
        return {"gpux": "shared"}, [pickle.dumps(a, protocol=pickle.HIGHEST_PROTOCOL)]
    return _by_value(a)


@dask_deserialize.register(ndarray)
def _deserialize(header: dict, frames: list) -> np.ndarray:
    if header.get("gpux") == "value":
        return _from_value(header, frames[0])
    return pickle.loads(frames[0])


@dask_serialize.register(DeviceArray)
def _serialize_device(d: DeviceArray, context: Optional[dict] = None) -> tuple[dict, list]:
    header, frames = _serialize(d.get(), context=context)
    return {"array": header, "device": d.device}, frames


@dask_deserialize.register(DeviceArray)
def _deserialize_device(header: dict, frames: list) -> DeviceArray:
    host = _deserialize(header["array"], frames)
    device = header["device"]
    return to_device(host, device=device if device < get_context().device_count() else 0)


# ---- tasks that need the GPU ----

def cached_keys(*inputs: Union[np.ndarray, bytes, str]) -> list[str]:
    """The content keys (hex) of frozen gpux arrays (gpux.content_key), or keys as given."""
    out = []
    for x in inputs:
        if isinstance(x, str):
            out.append(bytes.fromhex(x).hex())
        elif isinstance(x, (bytes, bytearray)):
            out.append(bytes(x).hex())
        else:
            out.append(content_key(x).hex())
    return out


@contextlib.contextmanager
def annotate(*cached: Union[np.ndarray, bytes, str], gpux: float = 1,
             **annotations: Any) -> Iterator[None]:
    """``dask.annotate`` for tasks that run gpux kernels: they need ``gpux`` of the worker
    resource ``GPUX`` (0: none), and, given frozen gpux arrays (or their content keys), run
    where a host's devices already hold those inputs in their cache, when one does
    (GpuxSchedulerPlugin). Other annotations (``retries=``, ``priority=``) pass through.
    Applies to ``client.submit``/``map`` and to collections made inside."""
    ann: dict[str, Any] = dict(annotations)
    if gpux:
        ann["resources"] = {**ann.get("resources", {}), RESOURCE: gpux}
    if cached:
        ann[_ANNOTATION] = {"cached": cached_keys(*cached)}
    with dask.annotate(**ann):
        yield


# ---- workers ----

class _Attachment:
    """A worker's watch over its host's gpuxd, in the worker process (a thread)."""

    def __init__(self, worker: Any, amount: float, interval: float) -> None:
        self.worker = weakref.proxy(worker)
        self.amount = amount
        self.interval = interval
        self.stop = threading.Event()
        self.snapshot: dict = {"up": False, "uid": os.geteuid(), "devices": 0,
                               "filter": None, "host": host_id()}
        self.published: Optional[bool] = None
        self.thread: Optional[threading.Thread] = None

    def look(self) -> dict:
        """Whether gpuxd serves (a device ready), and the union of its devices' filters."""
        try:
            ctx = get_context()
            n = ctx.device_count()
            merged, ready, size = 0, 0, 0
            for i in range(n):
                try:
                    f = ctx.affinity(i)
                except GpuxError:
                    continue
                ready, size = ready + 1, len(f)
                merged |= int.from_bytes(f, "little")
            snap = {"up": ready > 0, "devices": n,
                    "filter": merged.to_bytes(size, "little") if ready else None}
        except GpuxError:
            snap = {"up": False, "devices": 0, "filter": None}
        return {**self.snapshot, **snap}

    def first_look(self) -> dict:
        """A gpuxd whose devices are still starting (a private one just started) is waited
        for, as long as a worker may take to start; one that is not there is not."""
        deadline = time.monotonic() + _START_S
        while True:
            snap = self.look()
            if snap["up"] or not snap["devices"] or time.monotonic() > deadline:
                return snap
            time.sleep(0.05)

    async def publish(self, up: bool) -> None:
        """GPUX=amount while gpuxd serves, 0 while not."""
        if up == self.published:
            return
        self.published = up
        quantity = self.amount if up else 0
        worker = self.worker
        if worker.status in (Status.init, Status.created, Status.starting):
            # Not registered yet: it tells the scheduler its resources when it is.
            worker.state.available_resources[RESOURCE] = (
                worker.state.available_resources.get(RESOURCE, 0) + quantity -
                worker.state.total_resources.get(RESOURCE, 0))
            worker.state.total_resources[RESOURCE] = quantity
        else:
            await worker.set_resources(**{RESOURCE: quantity})

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            snap = self.look()
            self.snapshot = snap
            if snap["up"] != self.published:
                try:
                    self.worker.loop.add_callback(self.publish, snap["up"])
                except (ReferenceError, RuntimeError):
                    return


class GpuxWorkerPlugin(WorkerPlugin):
    """Attaches each Dask worker to its host's gpuxd (see the module's doc).

    ``socket``: the gpuxd to use (default: ``$GPUX_SOCKET`` in the worker, else the default
    socket, where a private gpuxd is started when none listens). ``resources``: the amount
    of ``GPUX`` the worker offers (default: what it was started with, else its threads).
    ``interval``: seconds between looks at gpuxd (its health, its devices' filters)."""

    name = "gpux"
    idempotent = True

    def __init__(self, socket: Optional[str] = None, resources: Optional[float] = None,
                 interval: float = 0.2) -> None:
        self.socket = socket
        self.resources = resources
        self.interval = interval
        self._attachment: Optional[_Attachment] = None

    def __getstate__(self) -> dict:
        # What travels to the workers: the settings, never a worker's watch.
        return {"socket": self.socket, "resources": self.resources,
                "interval": self.interval, "_attachment": None}

    async def setup(self, worker: Any) -> None:
        if self.socket:
            os.environ["GPUX_SOCKET"] = self.socket
        # A worker forked from a process that used gpux inherited its default context,
        # connected to that process's gpuxd: this worker's is its host's, made here.
        _set_default_context(None)
        amount = self.resources
        if amount is None:
            amount = worker.state.total_resources.get(RESOURCE) or worker.state.nthreads
        att = _Attachment(worker, amount, self.interval)
        # The first look may wait for gpuxd: not on the worker's event loop.
        att.snapshot = await asyncio.get_running_loop().run_in_executor(None, att.first_look)
        await att.publish(att.snapshot["up"])
        worker.metrics[_METRIC] = lambda w: att.snapshot
        att.thread = threading.Thread(target=att.run, name="gpux-dask", daemon=True)
        att.thread.start()
        self._attachment = att

    def teardown(self, worker: Any) -> None:
        att, self._attachment = self._attachment, None
        if att is not None:
            att.stop.set()
        worker.metrics.pop(_METRIC, None)


# ---- the scheduler ----

class GpuxSchedulerPlugin(SchedulerPlugin):
    """Cache affinity across the cluster, and GPUX coming back (see the module's doc)."""

    name = "gpux"
    idempotent = True

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.scheduler: Optional[Any] = None
        self._placed: set = set()
        self._offered: dict[str, float] = {}
        self._callback: Optional[Any] = None

    async def start(self, scheduler: Any) -> None:
        from tornado.ioloop import PeriodicCallback

        self.scheduler = scheduler
        self._callback = PeriodicCallback(self._tick, self.interval * 1000)
        self._callback.start()

    async def close(self) -> None:
        if self._callback is not None:
            self._callback.stop()
            self._callback = None

    def _holders(self, keys: list[bytes], required: float) -> set[str]:
        """The workers whose host's devices hold the most of the keys (at least one)."""
        best, out = 0, set()
        for addr, ws in self.scheduler.workers.items():
            m = (ws.metrics or {}).get(_METRIC)
            if not m or not m.get("up") or not m.get("filter"):
                continue
            if ws.resources.get(RESOURCE, 0) < required:
                continue
            n = sum(_gpux.affinity_holds(m["filter"], m["uid"], k) for k in keys)
            if n > best:
                best, out = n, {addr}
            elif n == best and n:
                out.add(addr)
        return out

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        s = self.scheduler
        if s is None:
            return
        if finish in ("memory", "erred", "forgotten", "released"):
            self._placed.discard(key)
            return
        if finish != "waiting":
            return
        ts = s.tasks.get(key)
        ann = (ts.annotations or {}).get(_ANNOTATION) if ts is not None else None
        if not ann or not ann.get("cached"):
            return
        # Restrictions of the user's own are theirs.
        if ts.worker_restrictions and key not in self._placed:
            return
        keys = [bytes.fromhex(k) for k in ann["cached"]]
        holders = self._holders(keys, (ts.resource_restrictions or {}).get(RESOURCE, 0))
        if holders:
            ts.worker_restrictions = holders
            ts.loose_restrictions = True
            self._placed.add(key)
        elif key in self._placed:
            ts.worker_restrictions = None
            ts.loose_restrictions = False
            self._placed.discard(key)

    def _tick(self) -> None:
        """Tasks given to a worker that has no GPUX now (its gpuxd is gone) go elsewhere: a
        worker runs no task that waits for a resource it lacks, and gives none back by
        itself. Workers whose GPUX came back take the tasks that waited for it."""
        s = self.scheduler
        offered = {addr: ws.resources.get(RESOURCE, 0) for addr, ws in s.workers.items()}
        stuck = {ts.key: "released" for addr, ws in s.workers.items() if not offered[addr]
                 for ts in ws.processing if (ts.resource_restrictions or {}).get(RESOURCE)}
        if stuck:
            s.transitions(stuck, stimulus_id="gpux-withdrawn")
        back = [s.workers[a] for a, q in offered.items() if q > self._offered.get(a, 0)]
        self._offered = offered
        if back and s.unrunnable:
            recs: dict = {}
            for ws in back:
                recs.update(s.bulk_schedule_unrunnable_after_adding_worker(ws))
            if recs:
                s.transitions(recs, stimulus_id="gpux-resources-back")


# ---- dask scheduler/worker --preload gpux.dask ----

async def dask_setup(server: Any) -> None:
    """``--preload gpux.dask``: the scheduler plugin on a scheduler, the worker plugin on a
    worker."""
    if isinstance(server, Scheduler):
        await server.register_scheduler_plugin(GpuxSchedulerPlugin(), idempotent=True)
    else:
        await server.plugin_add(GpuxWorkerPlugin(), catch_errors=False)
