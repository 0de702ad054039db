#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Dask with gpux: a LocalCluster of worker processes runs a kernel on chunks of one array in
# shared memory. Each task gets a view of the array (pickled as its memory, not its bytes),
# writes its chunk in place, and the client sees every chunk without gathering any data.
#
#     python3 python/examples/dask_saxpy.py [N_WORKERS]
#
# The kernel is CUDA C++, on a GPU or, without one, on the host back end's CPU threads.
# Several hosts: one gpuxd per host (each worker's first gpux call starts a private one, or
# point GPUX_SOCKET at a shared one), and tasks make their gpux arrays on the host they run
# on (gpux.asarray(chunk)): shared memory does not cross hosts.
import sys

import numpy as np
from distributed import Client, LocalCluster

import gpux

CUDA = r"""
extern "C" __global__ void saxpy(unsigned long n, float a, const float *x, float *y)
{
	unsigned long i = blockIdx.x * (unsigned long)blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}
"""


def saxpy_chunk(kernel, a, x, y):
    """A task: y = a * x + y on one chunk, in place; returns the worker's pid."""
    import os

    n = x.size
    kernel(((n + 255) // 256,), (256,), (np.uint64(n), np.float32(a), x, y))
    return os.getpid()


def run(client: Client, n: int = 1 << 20, chunks: int = 8) -> np.ndarray:
    # Pickled into each task: as a RawKernel, the tasks on one worker share its module.
    kernel = gpux.RawKernel(CUDA, "saxpy")
    x = gpux.asarray(np.arange(n, dtype=np.float32))
    y = gpux.ones(n, np.float32)
    step = n // chunks
    futures = [client.submit(saxpy_chunk, kernel, 2.0, x[i:i + step], y[i:i + step],
                             pure=False)
               for i in range(0, n, step)]
    pids = client.gather(futures)
    print(f"{len(futures)} chunks on {len(set(pids))} worker processes")
    return y


def main() -> None:
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True) as cluster, \
            Client(cluster) as client:
        y = run(client)
    ok = np.array_equal(y, 2 * np.arange(y.size, dtype=np.float32) + 1)
    print("y = 2 * x + 1:", "ok" if ok else "WRONG")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
