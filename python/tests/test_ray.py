# SPDX-License-Identifier: MIT
# Ray: gpux kernels in tasks and actors that ask for the node resource GPUX, never a GPU.
import os
import sys

import numpy as np
import pytest

from conftest import ASAN_PRELOADED

# With the sanitizer's runtime preloaded into the raylet and every process Ray starts, Ray's
# cluster started, or hung, as it pleased.
if ASAN_PRELOADED:
    pytest.skip("Ray's processes would get the sanitizer's runtime preloaded",
                allow_module_level=True)

ray = pytest.importorskip(
    "ray", reason="Ray is not installed here (pip install ray; tools/install-deps installs it "
    "where pip may install into this Python)")

import gpux  # noqa: E402
import gpux.ray as gr  # noqa: E402

from conftest import ADD1_KERNEL, HOST_KERNELS  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import ray_saxpy  # noqa: E402

N = 1000
T = 120  # seconds that any wait may take before it is a failure, not a hang


@pytest.fixture(scope="module")
def cluster(daemon):
    # The workers inherit this process's environment: GPUX_SOCKET, the build's package.
    ray.init(num_cpus=2, resources=gr.node_resources(per_device=2), include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_node_resources_count_gpuxd_devices(cluster):
    assert gr.node_resources(per_device=3) == {"GPUX": 3.0 * gpux.device_count()}
    assert ray.cluster_resources()["GPUX"] == 2.0 * gpux.device_count()


@gr.remote
def _add1_task(x):
    k = gpux.Module(ADD1_KERNEL, "host").get_function("add1")
    out = gpux.empty(x.size, np.float32)
    k((x.size + 63) // 64, 64, (np.uint64(x.size), x, out))
    return out, gpux.is_shared(x), os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_gpu_ids()


def test_a_task_runs_a_kernel_without_a_gpu_of_rays(cluster):
    x = gpux.asarray(np.arange(N, dtype=np.float32))
    out, shared, visible, gpus = ray.get(_add1_task.remote(x), timeout=T)
    np.testing.assert_array_equal(out, np.arange(N, dtype=np.float32) + 1)
    # Arrays arrive as gpux arrays (kernels use them in place) and leave as them; Ray pinned
    # no GPU to the task.
    assert shared and isinstance(out, gpux.ndarray)
    assert visible is None and gpus == []


def test_one_object_many_readers_and_frozen_arrays(cluster):
    w = gpux.asarray(np.random.default_rng(3).random(N, dtype=np.float32), freeze=True)
    ref = ray.put(w)
    # Any number of tasks read one object (the object store), each gets a frozen gpux array
    # with the same content key.
    keys = ray.get([_key.remote(ref) for _ in range(4)], timeout=T)
    assert keys == [gpux.content_key(w)] * 4
    back = ray.get(ref, timeout=T)
    assert back.frozen and gpux.content_key(back) == gpux.content_key(w)


@gr.remote(gpux=0.5)
def _key(w):
    return gpux.content_key(w)


def test_launch_runs_a_kernel_in_a_task(cluster):
    k = gpux.Module(HOST_KERNELS, "host").get_function("saxpy")
    x = gpux.asarray(np.arange(N, dtype=np.float32))
    y = gpux.ones(N, np.float32)
    out = gpux.zeros(N, np.float32)
    xs, ys, outs = ray.get(gr.launch(k, (N + 63) // 64, 64,
                                     (np.uint64(N), np.float32(2), x, y, gpux.Out(out))),
                           timeout=T)
    np.testing.assert_array_equal(outs, 2 * np.arange(N, dtype=np.float32) + 1)
    np.testing.assert_array_equal(xs, x)
    # By value: the caller's own output is untouched.
    assert not out.any()


def test_an_actor_keeps_modules_and_device_arrays(cluster):
    a = gr.KernelActor.remote(HOST_KERNELS, "host")
    shape = ray.get(a.put.remote("x", np.arange(N, dtype=np.float64)), timeout=T)
    assert shape == ((N,), "float64")
    for _ in range(3):
        ray.get(a.run.remote("scale", (N + 63) // 64, 64, (np.uint64(N), 2.0, "@x")), timeout=T)
    np.testing.assert_array_equal(ray.get(a.get.remote("x"), timeout=T), 8 * np.arange(N))


def test_gpu_options_are_refused():
    with pytest.raises(ValueError, match="num_gpus"):
        gr.remote(num_gpus=1)(lambda: None)


def test_example_runs(cluster):
    assert ray_saxpy.run(4)
