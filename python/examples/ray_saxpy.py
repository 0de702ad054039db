#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Ray with gpux: tasks and an actor run a kernel through the node's gpuxd. They ask Ray for
# the node resource GPUX, not for a GPU: Ray pins none, and no task or actor makes a CUDA
# context (each would cost hundreds of MiB of device memory); gpuxd's one worker per GPU
# serves them all.
#
#     python3 python/examples/ray_saxpy.py [TASKS]
#
# The kernel is CUDA C++, on a GPU or, without one, on the host back end's CPU threads. A
# cluster: start gpuxd on each node (a service of the node), then
# `ray start --resources '{"GPUX": 32}'` there.
import sys

import numpy as np
import ray

import gpux
import gpux.ray as gr

CUDA = r"""
extern "C" __global__ void saxpy(unsigned long n, float a, const float *x, float *y)
{
	unsigned long i = blockIdx.x * (unsigned long)blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}
"""
N = 1 << 16


@gr.remote
def saxpy_task(kernel: gpux.Kernel, a: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y = a * x + y, in place in the task's own gpux array (y arrived as one)."""
    kernel(((x.size + 255) // 256,), (256,), (np.uint64(x.size), np.float32(a), x, y))
    return y


def run(tasks: int = 8) -> bool:
    """In a running Ray: tasks, a launch and an actor; whether every result is right."""
    kernel = gpux.RawKernel(CUDA, "saxpy")
    x = ray.put(gpux.asarray(np.arange(N, dtype=np.float32)))   # one object, many readers
    ys = ray.get([saxpy_task.remote(kernel, float(i), x, gpux.ones(N, np.float32))
                  for i in range(tasks)])
    ok = all(np.array_equal(y, i * np.arange(N, dtype=np.float32) + 1) for i, y in enumerate(ys))
    # The same through gr.launch (a task per kernel run) and an actor that keeps its module.
    out = gpux.zeros(N, np.float32)
    _, got = ray.get(gr.launch(kernel, (N + 255) // 256, 256,
                               (np.uint64(N), np.float32(3), ray.get(x), gpux.Out(out))))
    ok = ok and np.array_equal(got, 3 * np.arange(N, dtype=np.float32))
    actor = gr.KernelActor.remote(CUDA, "cuda")
    ray.get(actor.put.remote("y", np.ones(N, np.float32)))
    ray.get(actor.run.remote("saxpy", (N + 255) // 256, 256,
                             gr.args(np.uint64(N), np.float32(2), ray.get(x), "@y")))
    return ok and np.array_equal(ray.get(actor.get.remote("y")), 2 * np.arange(N) + 1)


def main() -> None:
    tasks = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    ray.init(resources=gr.node_resources(), include_dashboard=False)
    ok = run(tasks)
    print(f"{tasks} tasks, a launch and an actor on {ray.cluster_resources()['GPUX']:.0f} GPUX:",
          "ok" if ok else "WRONG")
    ray.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
