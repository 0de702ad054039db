#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Dask on one GPU host, three ways, for small kernels: tasks per second and device memory.
#
#     python3 python/examples/dask_gpu_bench.py [--workers 16] [--tasks 20000] [--json]
#
#   gpux       WORKERS worker processes sharing the host's GPUs through gpux (gpux.dask's
#              plugins; no process but gpux's workers touches CUDA)
#   cupy       WORKERS worker processes, each using CuPy: a CUDA context each
#   per-gpu    one worker per GPU, CuPy (as dask-cuda's LocalCUDACluster runs it; dask-cuda
#              does not run several workers on one GPU)
#
# Each task runs one kernel (y = a * x + y on ELEMENTS floats, made in the task) and returns
# a checksum, which is checked. Device memory is the most nvidia-smi saw used during the run
# less what was used before the cluster started (gpux's workers start a gpuxd of their own:
# its contexts count). Without a GPU or CuPy, the rows that need them say so, and the gpux
# row runs on the host back end.
import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Optional

import numpy as np
from distributed import Client, LocalCluster, Nanny, Scheduler, SpecCluster

import gpux
import gpux.dask

ELEMENTS = 4096
CUDA = r"""
extern "C" __global__ void saxpy(unsigned long n, float a, const float *x, float *y)
{
	unsigned long i = blockIdx.x * (unsigned long)blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}
"""


def _expected(i: int) -> float:
    x = np.arange(ELEMENTS, dtype=np.float64) + i
    return float((2 * x + 1).sum())


def gpux_task(i: int) -> float:
    # Loaded once per process: identical RawKernels share their module, as CuPy's do.
    k = gpux.RawKernel(CUDA, "saxpy")
    x = gpux.asarray(np.arange(ELEMENTS, dtype=np.float32) + i)
    y = gpux.ones(ELEMENTS, np.float32)
    k(((ELEMENTS + 255) // 256,), (256,), (np.uint64(ELEMENTS), np.float32(2), x, y))
    return float(y.sum(dtype=np.float64))


def cupy_task(i: int) -> float:
    import cupy

    k = cupy.RawKernel(CUDA, "saxpy")
    x = cupy.arange(ELEMENTS, dtype=cupy.float32) + i
    y = cupy.ones(ELEMENTS, dtype=cupy.float32)
    k(((ELEMENTS + 255) // 256,), (256,), (np.uint64(ELEMENTS), np.float32(2), x, y))
    return float(y.sum(dtype=cupy.float64))


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return len(out.split())


def memory_used_mib() -> Optional[int]:
    """All GPUs' memory in use (nvidia-smi), MiB; None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(int(v) for v in out.split())


class MemoryPeak:
    """The most memory nvidia-smi sees in use while it runs, every 0.2 s."""

    def __init__(self) -> None:
        self.peak = memory_used_mib()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            m = memory_used_mib()
            if m is not None and self.peak is not None:
                self.peak = max(self.peak, m)

    def __enter__(self) -> "MemoryPeak":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()


def measure(client: Client, task: Callable[[int], float], tasks: int, annotate: bool,
            idle: Optional[int]) -> dict:
    """Warm every worker (its kernel loaded, its context made), then run `tasks` tasks and
    check every result. Device memory: the most in use during the run, less `idle` (what was
    in use before the cluster started)."""
    nworkers = len(client.scheduler_info()["workers"])
    gpu = gpux.dask.annotate if annotate else contextlib.nullcontext
    with gpu():
        client.gather(client.map(task, range(nworkers * 4), pure=False))
    with MemoryPeak() as mem:
        t0 = time.perf_counter()
        with gpu():
            futs = client.map(task, range(tasks), pure=False)
        results = client.gather(futs)
        secs = time.perf_counter() - t0
    wrong = sum(r != _expected(i) for i, r in enumerate(results))
    if wrong:
        raise SystemExit(f"{wrong} of {tasks} results wrong")
    return {"tasks_per_s": tasks / secs, "seconds": secs,
            "device_mib": mem.peak - idle if mem.peak is not None and idle is not None
            else None}


def _backend() -> str:
    return gpux.devices()[0]["backend"].name


def run_gpux(workers: int, tasks: int) -> dict:
    """The workers start a gpuxd of their own (a private one, in a runtime folder of the
    bench's), after the idle memory was read: its contexts count in the row."""
    idle = memory_used_mib()
    saved = {k: os.environ.get(k) for k in ("XDG_RUNTIME_DIR", "GPUX_SOCKET")}
    with tempfile.TemporaryDirectory(prefix="gpux-bench-") as rt:
        os.environ["XDG_RUNTIME_DIR"] = rt
        os.environ.pop("GPUX_SOCKET", None)
        try:
            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                              dashboard_address=":0") as cluster, Client(cluster) as client:
                client.register_plugin(gpux.dask.GpuxWorkerPlugin())
                client.register_plugin(gpux.dask.GpuxSchedulerPlugin())
                row = measure(client, gpux_task, tasks, True, idle)
                row["backend"] = client.submit(_backend, pure=False).result()
                return row
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def run_cupy(workers: int, tasks: int) -> dict:
    idle = memory_used_mib()
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        return measure(client, cupy_task, tasks, False, idle)


def run_per_gpu(gpus: int, tasks: int) -> dict:
    """One worker per GPU, each seeing its own (CUDA_VISIBLE_DEVICES), as dask-cuda does."""
    idle = memory_used_mib()
    spec = {f"gpu{i}": {"cls": Nanny, "options": {"nthreads": 1,
                                                   "env": {"CUDA_VISIBLE_DEVICES": str(i)}}}
            for i in range(gpus)}
    with SpecCluster(workers=spec, scheduler={"cls": Scheduler,
                                              "options": {"dashboard_address": ":0"}}) \
            as cluster, Client(cluster) as client:
        return measure(client, cupy_task, tasks, False, idle)


def run(workers: int, tasks: int, only: Optional[list[str]] = None) -> dict:
    """The rows asked for (all by default), as a dict; what the table prints."""
    gpus = gpu_count()
    try:
        import cupy  # noqa: F401
        have_cupy = gpus > 0
    except ImportError:
        have_cupy = False
    rows: dict[str, Any] = {}
    for name, fn in (("gpux", lambda: run_gpux(workers, tasks)),
                     ("cupy", lambda: run_cupy(workers, tasks)),
                     ("per-gpu", lambda: run_per_gpu(gpus, tasks))):
        if only and name not in only:
            continue
        rows[name] = fn() if name == "gpux" or have_cupy else {"skipped": "needs CuPy and a GPU"}
    return {"workers": workers, "tasks": tasks, "gpus": gpus, "elements": ELEMENTS,
            "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser(description="Dask on one GPU host: gpux, CuPy, per GPU.")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--tasks", type=int, default=20000)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--only", choices=["gpux", "cupy", "per-gpu"], action="append")
    args = p.parse_args()
    info = run(args.workers, args.tasks, args.only)
    if args.json:
        json.dump(info, sys.stdout, indent=1)
        print()
        return
    backend = info["rows"].get("gpux", {}).get("backend", "-")
    print(f"{args.tasks} tasks of one kernel ({ELEMENTS} floats) each, {info['gpus']} GPU(s), "
          f"gpux on {backend}")
    print("| setup | workers | tasks/s | device memory (MiB) |")
    print("| --- | ---: | ---: | ---: |")
    label = {"gpux": f"{args.workers} workers, gpux",
             "cupy": f"{args.workers} workers, CuPy each",
             "per-gpu": "one worker per GPU, CuPy (as dask-cuda)"}
    for name, r in info["rows"].items():
        n = info["gpus"] if name == "per-gpu" else args.workers
        if "skipped" in r:
            print(f"| {label[name]} | {n} | {r['skipped']} | |")
            continue
        mem = r["device_mib"]
        print(f"| {label[name]} | {n} | {r['tasks_per_s']:.0f} | "
              f"{mem if mem is not None else 'n/a (no nvidia-smi)'} |")


if __name__ == "__main__":
    main()
