#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/test-tools-scripts.py: the scripts in tools/ take --help, refuse what they do not
# know, bench-cupy.py's --json leaves stdout to the JSON alone, and check-format tells a file
# formatted as .clang-format says from one that is not, and fixes it.
# Usage: test-tools-scripts.py TOOLS_DIR
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

TOOLS = sys.argv[1]
failures = []


def check(what, ok):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(argv, cwd=None):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd)


scripts = {
    "gpu-check": ["sh", os.path.join(TOOLS, "gpu-check")],
    "install-deps": ["sh", os.path.join(TOOLS, "install-deps")],
    "bench-cupy.py": [sys.executable, os.path.join(TOOLS, "bench-cupy.py")],
    "check-format": ["sh", os.path.join(TOOLS, "check-format")],
}
for name, argv in scripts.items():
    for flag in ("--help", "-h"):
        r = run(argv + [flag])
        check("%s %s: exit 0, usage on stdout, nothing on stderr" % (name, flag),
              r.returncode == 0 and r.stdout.startswith("usage: ") and name in r.stdout
              and r.stderr == "")
    # Refused before anything is done (install-deps installs nothing, gpu-check runs nothing).
    r = run(argv + ["--frobnicate"])
    check("%s --frobnicate: exit 2, named on stderr" % name,
          r.returncode == 2 and "--frobnicate" in r.stderr and r.stdout == "")

# bench-cupy.py needs a GPU and CuPy to measure; what it prints of its results does not.
spec = importlib.util.spec_from_file_location("bench_cupy", os.path.join(TOOLS, "bench-cupy.py"))
bench_cupy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_cupy)
results = [{"scenario": "empty kernel round trip, p50", "cupy": 8.25, "unit": "us"},
           {"scenario": "in-process async launch rate", "cupy": 190.5, "unit": "k/s"}]
out, err = io.StringIO(), io.StringIO()
bench_cupy.report("NVIDIA H100", "13.6.0", results, True, out, err)
try:
    doc = json.loads(out.getvalue())
except ValueError as e:
    doc = None
    print("stdout is not one JSON document (%s): %r" % (e, out.getvalue()))
check("--json: stdout is one JSON document, the results in it",
      doc == {"device": "NVIDIA H100", "cupy": "13.6.0", "results": results})
check("--json: the table on stderr",
      "CuPy 13.6.0 on NVIDIA H100" in err.getvalue() and "190.50 k/s" in err.getvalue())
out, err = io.StringIO(), io.StringIO()
bench_cupy.report("NVIDIA H100", "13.6.0", results, False, out, err)
check("without --json: the table on stdout, nothing on stderr",
      "8.25 us" in out.getvalue() and err.getvalue() == "")

# check-format, from the repository root, on files outside it (the tree's .clang-format used).
if shutil.which("clang-format"):
    cf = ["sh", os.path.join(TOOLS, "check-format")]
    root = os.path.dirname(os.path.abspath(TOOLS))
    with tempfile.TemporaryDirectory() as d:
        good, bad = os.path.join(d, "good.c"), os.path.join(d, "bad.c")
        with open(good, "w") as f:
            f.write("int f(void)\n{\n\treturn 0;\n}\n")
        with open(bad, "w") as f:
            f.write("int f(void) {\n  return 0;\n}\n")
        r = run(cf + [good], cwd=root)
        check("check-format: a file as .clang-format says passes", r.returncode == 0)
        r = run(cf + [good, bad], cwd=root)
        check("check-format: a file that is not fails, and is named alone",
              r.returncode == 1 and r.stdout.split() == [bad])
        r = run(cf + ["--fix", bad], cwd=root)
        check("check-format --fix: the file as .clang-format says",
              r.returncode == 0 and open(bad).read() == open(good).read())
else:
    print("skip check-format's checks: no clang-format here")

sys.exit(1 if failures else 0)
