#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# The peer of gpux bench: the same scenarios with CuPy RawKernel, in-process and in freshly
# started processes, so that gpux's table can say where it stands against what a Python
# user would pick instead. Needs a GPU and CuPy. Usage: tools/bench-cupy.py --help
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

QUICK = False

SOURCE = r'''
extern "C" __global__ void empty() {}
extern "C" __global__ void touch(float *p)
{
	if (threadIdx.x == 0 && blockIdx.x == 0 && p[0] == 12345.0f)
		p[0] = 0.0f;
}
'''

# Run in a fresh interpreter: from its start to the first result of an empty kernel.
STARTUP = r'''
import time
t0 = time.perf_counter()
import cupy as cp
k = cp.RawKernel(r"""extern "C" __global__ void empty() {}""", "empty")
k((1,), (1,), ())
cp.cuda.Stream.null.synchronize()
print(time.perf_counter() - t0)
'''

# Run in a fresh interpreter: async empty launches for `secs` seconds after `start`.
RATE = r'''
import sys, time
import cupy as cp
k = cp.RawKernel(r"""extern "C" __global__ void empty() {}""", "empty")
start, secs = float(sys.argv[1]), float(sys.argv[2])
k((1,), (1,), ()); cp.cuda.Stream.null.synchronize()
while time.time() < start:
	pass
n, t_end = 0, start + secs
while time.time() < t_end:
	for _ in range(64):
		k((1,), (1,), ())
	n += 64
cp.cuda.Stream.null.synchronize()
print(n)
'''


def python():
	return sys.executable


def processes_rate(nproc, secs):
	"""Async empty launches per second of nproc fresh processes together, a context each."""
	start = time.time() + 8.0 + nproc * 0.3
	procs = [subprocess.Popen([python(), "-c", RATE, str(start), str(secs)],
				  stdout=subprocess.PIPE, text=True) for _ in range(nproc)]
	return sum(int(p.communicate()[0].strip() or 0) for p in procs) / secs


def rates():
	import cupy  # noqa: F401  (fails here, not in the children, when CuPy is missing)

	secs = 1.0 if QUICK else 3.0
	for nproc in (4, 16, 32):
		print("procs_%d %.0f" % (nproc, processes_rate(nproc, secs)), flush=True)


def main(as_json):
	import cupy as cp
	import numpy as np

	results = []

	def add(name, value, unit):
		results.append({"scenario": name, "cupy": value, "unit": unit})

	mod = cp.RawModule(code=SOURCE)
	empty = mod.get_function("empty")
	touch = mod.get_function("touch")
	stream = cp.cuda.Stream.null

	# Round trip: launch and synchronise.
	n = 500 if QUICK else 5000
	for _ in range(n // 10):
		empty((1,), (1,), ())
		stream.synchronize()
	t = []
	for _ in range(n):
		t0 = time.perf_counter_ns()
		empty((1,), (1,), ())
		stream.synchronize()
		t.append(time.perf_counter_ns() - t0)
	t.sort()
	add("empty kernel round trip, p50", t[len(t) // 2] / 1e3, "us")
	add("empty kernel round trip, p99", t[len(t) * 99 // 100] / 1e3, "us")

	# 256 MiB in and out, from pinned host memory, and the kernel between.
	size = 256 << 20
	pinned = cp.cuda.alloc_pinned_memory(size)
	host = np.frombuffer(pinned, dtype=np.float32, count=size // 4)
	host[:] = 1.0
	dev = cp.empty(size // 4, dtype=cp.float32)
	for name, fn in (
		("IN  256 MiB (H2D + kernel)", lambda: (dev.set(host), touch((1,), (1,), (dev,)))),
		("OUT 256 MiB (kernel + D2H)", lambda: (touch((1,), (1,), (dev,)), dev.get(out=host))),
	):
		fn()
		stream.synchronize()
		t = []
		for _ in range(5):
			t0 = time.perf_counter()
			fn()
			stream.synchronize()
			t.append(time.perf_counter() - t0)
		add(name, size / statistics.median(t) / 1e9, "GB/s")

	# Compiling: cold (an empty kernel cache) and from CuPy's disk cache, each in a new process.
	with tempfile.TemporaryDirectory() as cache:
		env = dict(os.environ, CUPY_CACHE_DIR=cache)
		code = ("import time, cupy as cp\ncp.cuda.Device(0).use()\nt0 = time.perf_counter()\n"
			"m = cp.RawModule(code=%r)\nm.get_function('touch')\n"
			"print(time.perf_counter() - t0)" % SOURCE)
		for label in ("cold", "from disk cache"):
			out = subprocess.run([python(), "-c", code], env=env, capture_output=True,
					     text=True, check=True).stdout
			add("module: compile (%s)" % label, float(out.strip()) * 1e3, "ms")

	# A fresh process's first result: what a worker of a pre-fork server would pay.
	t = []
	for _ in range(3 if QUICK else 5):
		out = subprocess.run([python(), "-c", STARTUP], capture_output=True, text=True,
				     check=True).stdout
		t.append(float(out.strip()))
	add("fresh process's first result (import, CUDA start-up, compile cached)",
	    statistics.median(t) * 1e3, "ms")

	# A forked child of a process that uses CUDA cannot use it.
	pid = os.fork()
	if pid == 0:
		try:
			empty((1,), (1,), ())
			stream.synchronize()
			os._exit(0)
		except Exception:
			os._exit(1)
	_, st = os.waitpid(pid, 0)
	add("forked child can launch (1 = yes)", 1.0 if os.waitstatus_to_exitcode(st) == 0 else 0.0,
	    "bool")

	# Launch rate in this process, then N processes together (each its own CUDA context).
	m = 20000 if QUICK else 200000
	for _ in range(1000):
		empty((1,), (1,), ())
	stream.synchronize()
	t0 = time.perf_counter()
	for _ in range(m):
		empty((1,), (1,), ())
	stream.synchronize()
	add("in-process async launch rate", m / (time.perf_counter() - t0) / 1e3, "k/s")
	secs = 1.0 if QUICK else 3.0
	for nproc in (1, 4, 16, 32):
		add("%d processes, async empty kernels (a context each)" % nproc,
		    processes_rate(nproc, secs) / 1e3, "k/s")

	dev_name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
	report(dev_name, cp.__version__, results, as_json)


def report(dev_name, version, results, as_json, out=None, err=None):
	"""The table, and with as_json one JSON document: then alone on stdout, the table on
	stderr (as gpux bench --json)."""
	out = out or sys.stdout
	table = (err or sys.stderr) if as_json else out
	if as_json:
		json.dump({"device": dev_name, "cupy": version, "results": results}, out)
		out.write("\n")
	table.write("\nCuPy %s on %s\n" % (version, dev_name))
	for r in results:
		table.write("%-62s %10.2f %s\n" % (r["scenario"], r["cupy"], r["unit"]))


def parse_args(argv):
	p = argparse.ArgumentParser(
		prog="bench-cupy.py",
		description="gpux bench's scenarios with CuPy RawKernel, in this process and in "
		"fresh ones, for comparison (needs a GPU and CuPy).")
	p.add_argument("--json", action="store_true",
		       help="one JSON document on stdout (the table goes to stderr)")
	p.add_argument("--quick", action="store_true", help="fewer repetitions")
	p.add_argument("--rates", action="store_true",
		       help="only the launch rates of 4, 16 and 32 fresh processes together, as "
		       "'procs_N RATE' lines (what gpux bench reads)")
	return p.parse_args(argv)


if __name__ == "__main__":
	args = parse_args(sys.argv[1:])
	QUICK = args.quick
	try:
		if args.rates:
			rates()
		else:
			main(args.json)
	except ImportError as e:
		sys.exit("bench-cupy.py: %s (CuPy and numpy are needed)" % e)
