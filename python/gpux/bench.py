# SPDX-License-Identifier: MIT
"""python -m gpux.bench [--json] [--quick]: what a launch costs through the Python package.

Times an empty kernel launched through gpux from Python: run and wait (the call a program
makes most), a prepared launch, submit and result, the rate of launches in flight, what the
binding itself spends per call, and a forked child's first result. When CuPy can be imported
and a CUDA device serves gpux, the same with CuPy's RawKernel in this process, and a fresh
process's first result with CuPy (a forked child of a CUDA process cannot use CUDA at all).
Medians of many repetitions after a warm-up. --json prints one JSON document on stdout and
nothing else. Runs unattended (tools/gpu-check).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Optional

import numpy as np

import gpux

HOST_SRC = r"""
GPUX_HOST_KERNEL(empty) {}
GPUX_HOST_PARAMS(saxpy, 8, 4, sizeof(float *), sizeof(float *), sizeof(float *));
GPUX_HOST_KERNEL(saxpy)
{
	uint64_t n = GPUX_ARG(uint64_t, 0);
	float a = GPUX_ARG(float, 1);
	const float *x = GPUX_ARG(const float *, 2), *y = GPUX_ARG(const float *, 3);
	float *out = GPUX_ARG(float *, 4);
	GPUX_FOR_EACH_THREAD(t) {
		uint64_t i = GPUX_GLOBAL_X(t);
		if (i < n) out[i] = a * x[i] + y[i];
	}
}
"""
CUDA_SRC = r"""
extern "C" __global__ void empty() {}
extern "C" __global__ void saxpy(unsigned long n, float a, const float *x, const float *y,
				 float *out)
{
	unsigned long i = blockIdx.x * (unsigned long)blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = a * x[i] + y[i];
}
"""

CUPY_STARTUP = r'''
import time
t0 = time.perf_counter()
import cupy as cp
k = cp.RawKernel(r"""extern "C" __global__ void empty() {}""", "empty")
k((1,), (1,), ())
cp.cuda.Stream.null.synchronize()
print(time.perf_counter() - t0)
'''


def _percentiles(samples_ns: list[int]) -> tuple[float, float]:
    s = sorted(samples_ns)
    return s[len(s) // 2] / 1e3, s[min(len(s) - 1, len(s) * 99 // 100)] / 1e3


def _time_each(fn: Callable[[], Any], n: int) -> list[int]:
    for _ in range(max(n // 10, 10)):
        fn()
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


def _rate(submit: Callable[[], Any], n: int) -> float:
    futs = [submit() for _ in range(min(n, 100))]
    futs[-1].result()
    t0 = time.perf_counter()
    futs = [submit() for _ in range(n)]
    for f in futs:
        f.result()
    return n / (time.perf_counter() - t0)


def _forked_first_result(kernel: Any, reps: int) -> float:
    """From fork() to the child's first result through gpux, median ms."""
    times = []
    for _ in range(reps):
        r, w = os.pipe()
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                kernel(1, 1)
                os.write(w, b"1")
            finally:
                os._exit(0)
        os.close(w)
        ok = os.read(r, 1) == b"1"
        times.append(time.perf_counter() - t0)
        os.close(r)
        os.waitpid(pid, 0)
        if not ok:
            raise RuntimeError("the forked child's launch failed")
    return statistics.median(times) * 1e3


def _check(module: gpux.Module) -> None:
    """Before timing anything: a kernel through the package computes the right thing."""
    n = 1 << 20
    rng = np.random.default_rng(0)
    x = gpux.asarray(rng.random(n, dtype=np.float32))
    y = gpux.asarray(rng.random(n, dtype=np.float32), freeze=True)
    out = gpux.full(n, np.nan, np.float32)
    module.get_function("saxpy")(((n + 255) // 256,), (256,),
                                 (np.uint64(n), np.float32(3), gpux.In(x), gpux.Cached(y),
                                  gpux.Out(out)))
    if not np.allclose(out, 3 * x + y, rtol=1e-6):
        raise RuntimeError("gpux.bench: saxpy through the package gave wrong results")


def _cupy_scenarios(n: int, quick: bool, add: Callable[..., None]) -> None:
    import cupy as cp

    k = cp.RawKernel(CUDA_SRC, "empty")
    stream = cp.cuda.Stream.null

    def run() -> None:
        k((1,), (1,), ())
        stream.synchronize()

    p50, p99 = _percentiles(_time_each(run, n))
    add("empty launch, run and wait, p50", "cupy", p50, "us")
    add("empty launch, run and wait, p99", "cupy", p99, "us")
    m = n * 10
    for _ in range(1000):
        k((1,), (1,), ())
    stream.synchronize()
    t0 = time.perf_counter()
    for _ in range(m):
        k((1,), (1,), ())
    stream.synchronize()
    add("async launches", "cupy", m / (time.perf_counter() - t0) / 1e3, "k/s")
    times = []
    for _ in range(2 if quick else 5):
        out = subprocess.run([sys.executable, "-c", CUPY_STARTUP], capture_output=True,
                             text=True, check=True).stdout
        times.append(float(out.strip()))
    add("a new worker's first result (gpux: forked child; CuPy: fresh process)", "cupy",
        statistics.median(times) * 1e3, "ms")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpux.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--no-cupy", action="store_true", help="leave CuPy out")
    args = ap.parse_args(argv)
    n = 2000 if args.quick else 20000

    def log(msg: str) -> None:
        print(msg, file=sys.stderr if args.json else sys.stdout, flush=True)

    ctx = gpux.get_context()
    info = ctx.device_info(0)
    on_gpu = info["backend"] == 2
    module = gpux.Module(CUDA_SRC if on_gpu else HOST_SRC, "cuda" if on_gpu else "host")
    k = module.get_function("empty")
    _check(module)
    rows: list[dict[str, Any]] = []

    def add(scenario: str, who: str, value: float, unit: str) -> None:
        for r in rows:
            if r["scenario"] == scenario:
                r[who] = value
                return
        rows.append({"scenario": scenario, "unit": unit, who: value})

    log(f"gpux.bench on {info['name']} ({'CUDA' if on_gpu else 'host back end'}), "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    log("  run and wait...")
    p50, p99 = _percentiles(_time_each(lambda: k(1, 1), n))
    add("empty launch, run and wait, p50", "gpux", p50, "us")
    add("empty launch, run and wait, p99", "gpux", p99, "us")
    prepared = k.prepare(1, 1)
    add("empty launch, prepared, run and wait, p50", "gpux",
        _percentiles(_time_each(prepared, n))[0], "us")
    add("empty launch, submit() then result(), p50", "gpux",
        _percentiles(_time_each(lambda: k.submit(1, 1).result(), n))[0], "us")
    log("  async...")
    add("async launches", "gpux", _rate(lambda: k.submit(1, 1), n) / 1e3, "k/s")

    # The binding's own share: parsing the call and resolving its arguments, no request.
    x, y, out = (gpux.zeros(1024, np.float32) for _ in range(3))
    many = (np.uint64(1024), np.float32(2), x, y, gpux.Out(out))
    add("binding: a call's parsing, no arguments", "gpux",
        _percentiles(_time_each(lambda: k.prepare(1, 1), n))[0], "us")
    add("binding: a call's parsing, 3 arrays + 2 scalars", "gpux",
        _percentiles(_time_each(lambda: k.prepare((4,), (256,), many), n))[0], "us")

    log("  forked children...")
    add("a new worker's first result (gpux: forked child; CuPy: fresh process)", "gpux",
        _forked_first_result(k, 5 if args.quick else 20), "ms")

    cupy = None
    if on_gpu and not args.no_cupy:
        try:
            import cupy  # noqa: F401
        except ImportError:
            log("  (no CuPy here: its side is left out)")
        else:
            log("  CuPy...")
            _cupy_scenarios(n, args.quick, add)
            cupy = cupy.__version__

    doc = {
        "device": info["name"],
        "backend": "cuda" if on_gpu else "host",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cupy": cupy,
        "gpux": gpux.version(),
        "checked": "saxpy through the package matched numpy",
        "results": rows,
    }
    if args.json:
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
        return 0
    print(f"\n{'scenario':<72} {'gpux':>10} {'cupy':>10} unit")
    for r in rows:
        g = f"{r['gpux']:.2f}" if "gpux" in r else "-"
        c = f"{r['cupy']:.2f}" if "cupy" in r else "-"
        print(f"{r['scenario']:<72} {g:>10} {c:>10} {r['unit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
