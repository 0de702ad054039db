#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/test-bench-plot.py: gpux bench --from a saved run: its table (targets judged on CUDA
# only) and --plot's SVG, read back by an XML parser.
# Usage: test-bench-plot.py GPUX SAMPLE_JSON (a CUDA run's JSON: test data, not a measurement)
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

GPUX, SAMPLE = sys.argv[1], sys.argv[2]
SVG = "{http://www.w3.org/2000/svg}"


def bench(*args):
    return subprocess.run([GPUX, "bench", *args], capture_output=True, text=True)


def plot(src, out):
    r = bench("--from", src, "--plot", out)
    assert r.returncode == 0, r.stderr
    return r.stdout, ET.parse(out).getroot()


def texts(svg):
    return [t.text for t in svg.iter(SVG + "text")]


def points(line):
    return [tuple(map(float, p.split(","))) for p in line.get("points").split()]


def main():
    tmp = tempfile.mkdtemp(prefix="gpux-plot-")
    out = os.path.join(tmp, "chart.svg")
    with open(SAMPLE) as f:
        run = json.load(f)

    # A CUDA run: targets judged, the chart's series and lines.
    table, svg = plot(SAMPLE, out)
    assert re.search(r"forked child's first result .* MISSED", table), table
    assert re.search(r"16 client processes, async empty kernels .* met", table), table
    words = texts(svg)
    for label in ("gpux", "CuPy, a process and context each",
                  "in-process CUDA, threads of one context", "target: >= 1000 k/s",
                  "in-process: graphs of 64 nodes, 1 thread", "empty kernel round trip",
                  "round trip beside a busy client", "p50", "p99"):
        assert label in words, (label, words)
    lines = svg.findall(SVG + "polyline")
    gpux = [points(l) for l in lines if l.get("stroke") == "#1f60c4"]
    assert len(gpux) == 1 and len(gpux[0]) == 5, gpux
    # 1, 4, 16, 32, 64 processes: left to right, and higher (smaller y) as the rate grows.
    xs, ys = zip(*gpux[0])
    assert list(xs) == sorted(xs) and list(ys) == sorted(ys, reverse=True), gpux[0]
    # Two groups of round trips, p50 and p99, gpux and baseline: eight bars.
    bars = [r for r in svg.iter(SVG + "rect") if r.get("fill") in ("#1f60c4", "#8e9aa0")
            and r.get("width") != "14"]
    assert len(bars) == 8, len(bars)

    # The same run as a log: progress and table before the JSON document.
    log = os.path.join(tmp, "bench.log")
    with open(log, "w") as f:
        f.write("gpux bench: [1/8] rtt\nscenario gpux baseline\n")
        json.dump(run, f)
    plot(log, out)

    # On the host back end the targets are GPU targets: not judged, no target line.
    run["backend"] = "host"
    host = os.path.join(tmp, "host.json")
    with open(host, "w") as f:
        json.dump(run, f)
    table, svg = plot(host, out)
    assert "MISSED" not in table and " met" not in table, table
    assert "n/a: GPU target" in table, table
    assert not any(t and t.startswith("target:") for t in texts(svg))
    r = bench("--from", host, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["targets_judged"] is False
    assert all(x["met"] is None for x in json.loads(r.stdout)["results"])

    # Refusals: a run with nothing to chart, a file that is no run, --from with --only.
    empty = os.path.join(tmp, "empty.json")
    with open(empty, "w") as f:
        json.dump({"device": "d", "backend": "cuda", "results": []}, f)
    r = bench("--from", empty, "--plot", out)
    assert r.returncode == 1 and "neither launch rates nor round trips" in r.stderr, r.stderr
    r = bench("--from", "/dev/null", "--plot", out)
    assert r.returncode == 1 and "no JSON document" in r.stderr, r.stderr
    r = bench("--from", SAMPLE, "--only", "rtt")
    assert r.returncode == 2 and "--from reads a saved run" in r.stderr, r.stderr
    subprocess.run(["rm", "-rf", tmp])
    print("bench plots")


main()
