# SPDX-License-Identifier: MIT
# Dask: a LocalCluster of worker processes runs kernels through gpux on shared arrays.
import os
import sys

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import gpux  # noqa: E402
import gpux.dask  # noqa: E402,F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import dask_saxpy  # noqa: E402


def _double(kernel, a):
    kernel(((a.size + 127) // 128,), 128, (np.uint64(a.size), np.float64(2), a))
    return a


def _make(n):
    return gpux.asarray(np.arange(n, dtype=np.float64))


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
    # Made on one worker, doubled on the other, read by the client: one memory throughout.
    made = client.submit(_make, 1000, workers=[workers[0]], pure=False)
    doubled = client.submit(_double, scale, made, workers=[workers[1]], pure=False)
    a = doubled.result()
    assert isinstance(a, gpux.ndarray)
    np.testing.assert_array_equal(a, 2 * np.arange(1000))
    again = made.result()
    np.testing.assert_array_equal(again, a)
