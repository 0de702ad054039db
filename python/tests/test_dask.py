# SPDX-License-Identifier: MIT
# Dask: a LocalCluster of worker processes runs kernels through gpux on shared arrays.
import contextlib
import logging
import os
import sys

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import gpux  # noqa: E402
import gpux.dask  # noqa: E402,F401
from conftest import ADD1_KERNEL, ASAN_PRELOADED  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import dask_gpu_bench  # noqa: E402
import dask_saxpy  # noqa: E402


def _double(kernel, a):
    kernel(((a.size + 127) // 128,), 128, (np.uint64(a.size), np.float64(2), a))
    return a


def _make(n):
    return gpux.asarray(np.arange(n, dtype=np.float64))


@contextlib.contextmanager
def _no_records_while_forking():
    # A thread writing a log record while another forks leaves the stream's lock held in the
    # child (CPython does not reset a buffered stream's lock at fork), which then hangs at its
    # own first record: Dask's Nannies fork their workers from threads while its event loop's
    # thread logs. Dask says only its warnings and errors meanwhile.
    log = logging.getLogger("distributed")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        log.setLevel(level)


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


def test_example_runs_on_worker_processes(client):
    y = dask_saxpy.run(client, n=1 << 16, chunks=8)
    np.testing.assert_array_equal(y, 2 * np.arange(y.size, dtype=np.float32) + 1)
    pids = set(client.run(os.getpid).values())
    assert len(pids) == 2 and os.getpid() not in pids


def test_results_move_between_workers_as_shared_memory(client, kernels):
    scale = kernels.get_function("scale")
    workers = list(client.scheduler_info()["workers"])
    # Made on one worker, doubled in place by the other (an array with a memfd of its own,
    # 512 KiB: smaller ones travel by value), read by the client (by value).
    n = 1 << 16
    made = client.submit(_make, n, workers=[workers[0]], pure=False)
    doubled = client.submit(_double, scale, made, workers=[workers[1]], pure=False)
    a = doubled.result()
    assert isinstance(a, gpux.ndarray)
    np.testing.assert_array_equal(a, 2 * np.arange(n))
    again = made.result()
    np.testing.assert_array_equal(again, a)


def _roundtrip(a, context):
    from distributed.protocol import deserialize, serialize

    header, frames = serialize(a, serializers=["dask"], context=context)
    return sum(memoryview(f).nbytes for f in frames), deserialize(header, frames)


def _modules_held(kernel):
    """Keep the task's kernel's module on its worker; how many different ones it holds."""
    held = distributed.get_worker().__dict__.setdefault("_test_gpux_modules", [])
    held.append(kernel.module)
    return len({id(m) for m in held})


def _forget_modules(dask_worker):
    dask_worker.__dict__.pop("_test_gpux_modules", None)


def test_a_raw_kernel_sent_to_tasks_is_one_module_per_worker(client):
    # Each task unpickles a kernel of its own; of one RawKernel, they are one module there.
    k = gpux.RawKernel(ADD1_KERNEL, "add1", lang="host")
    try:
        got = client.gather(client.map(_modules_held, [k] * 40, pure=False))
        assert set(got) == {1}
    finally:
        client.run(_forget_modules)


def test_serialization_by_memory_only_to_a_worker_of_this_host():
    same = {"recipient": {"gpux-host": gpux.dask.host_id()}}
    other = {"recipient": {"gpux-host": gpux.dask.host_id() + "-elsewhere"}}
    big = gpux.asarray(np.arange(1 << 16, dtype=np.float64))  # 512 KiB: its own memfd
    nbytes, back = _roundtrip(big, same)
    assert nbytes < 1024 and isinstance(back, gpux.ndarray)
    back[0] = -1
    assert big[0] == -1  # one memory
    # Another host, no host said (a scheduler, a client, spilling), or a small array (whose
    # arena pages its sender reuses): the bytes, in a gpux array of the receiver's.
    for a, context in ((big, other), (big, None), (big, {}), (gpux.ones(16), same)):
        nbytes, back = _roundtrip(a, context)
        assert nbytes == a.nbytes and isinstance(back, gpux.ndarray)
        np.testing.assert_array_equal(back, a)
        back[1] = -2
        assert a[1] != -2


def test_serialization_by_value_keeps_frozen_arrays_frozen():
    w = gpux.asarray(np.random.default_rng(1).random(1000), freeze=True)
    _, back = _roundtrip(w, None)
    assert back.frozen and gpux.content_key(back) == gpux.content_key(w)
    f = np.asfortranarray(gpux.asarray(np.arange(12.0).reshape(3, 4))).view(gpux.ndarray)
    _, back = _roundtrip(f, None)
    np.testing.assert_array_equal(back, f)
    rec = gpux.asarray(np.array([(1, 2.5), (3, 4.5)], dtype=[("i", "<i4"), ("x", "<f8")]))
    _, back = _roundtrip(rec, None)
    assert back.dtype == rec.dtype and back.tolist() == rec.tolist()
    ro = gpux.asarray(np.arange(5.0))
    ro.flags.writeable = False
    _, back = _roundtrip(ro, None)
    assert not back.flags.writeable and not back.frozen


def test_device_arrays_travel_as_their_contents():
    d = gpux.to_device(np.arange(100, dtype=np.float32), device=1)
    _, back = _roundtrip(d, None)
    assert isinstance(back, gpux.DeviceArray) and back.device == 1
    np.testing.assert_array_equal(back.get(), np.arange(100, dtype=np.float32))


def _gpux_resource(dask_worker):
    return dask_worker.state.total_resources.get("GPUX"), os.getpid()


# gcc 12's AddressSanitizer does nothing at fork(): a worker forked while another thread held
# its allocator's lock inherits the lock held and hangs at its next allocation. The test runs
# in the builds without it.
@pytest.mark.skipif(ASAN_PRELOADED,
                    reason="AddressSanitizer's allocator is not fork-safe in a threaded process")
def test_plugin_on_forked_workers_offers_gpux_and_runs_annotated_tasks(kernels):
    scale = kernels.get_function("scale")
    dask = pytest.importorskip("dask")
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}), \
            _no_records_while_forking(), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                     dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        c.register_plugin(gpux.dask.GpuxWorkerPlugin())
        c.register_plugin(gpux.dask.GpuxSchedulerPlugin())
        # Each worker offers its threads' worth of GPUX.
        assert [g for g, _ in c.run(_gpux_resource).values()] == [2, 2]
        with gpux.dask.annotate():
            futs = c.map(_double, [scale] * 8,
                         [gpux.asarray(np.arange(10.0)) for _ in range(8)], pure=False)
        for a in c.gather(futs):
            np.testing.assert_array_equal(a[:3], [0, 2, 4])


def test_gpu_bench_example_runs_its_gpux_row():
    # Its numbers are for a GPU (docs/CLUSTER.md); here: it runs, and checks its results.
    info = dask_gpu_bench.run(2, 40, only=["gpux"])
    assert list(info["rows"]) == ["gpux"] and info["rows"]["gpux"]["tasks_per_s"] > 0


def test_preload_sets_up_scheduler_and_workers():
    dask = pytest.importorskip("dask")
    with dask.config.set({"distributed.scheduler.preload": ["gpux.dask"],
                          "distributed.worker.preload": ["gpux.dask"]}), \
            distributed.LocalCluster(n_workers=1, threads_per_worker=3, processes=True,
                                     dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        assert "gpux" in c.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.plugins))
        assert [g for g, _ in c.run(_gpux_resource).values()] == [3]
