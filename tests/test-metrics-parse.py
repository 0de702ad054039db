#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/test-metrics-parse.py: gpuxd's /metrics and gpux status --prometheus, read by
# Prometheus' own parser (prometheus_client). Exits 77 (skipped) without it.
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    # Debian's python3-prometheus-client is for the system's python3; a pyenv one on the
    # PATH lacks it.
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
            os.path.exists("/usr/bin/python3") and not os.environ.get("GPUX_METRICS_REEXEC"):
        os.environ["GPUX_METRICS_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("prometheus_client is not installed: skipped")
    sys.exit(77)

DAEMON = os.environ["GPUX_DAEMON"]
CLI = os.environ["GPUX_CLI"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def families(text):
    """Every family, by name; the parser raises on anything malformed."""
    out = {}
    for f in text_string_to_metric_families(text):
        assert f.name not in out, f"family {f.name} twice"
        out[f.name] = f
    return out


def check(fams):
    def fam(name, kind):
        assert name in fams, f"no family {name}"
        assert fams[name].type == kind, f"{name} is {fams[name].type}, not {kind}"
        return fams[name]

    req = fam("gpux_requests", "counter")
    ok = [s for s in req.samples
          if s.name == "gpux_requests_total" and s.labels == {"device": "0", "status": "ok"}]
    assert ok and ok[0].value >= 3, ok
    lat = fam("gpux_request_latency_seconds", "histogram")
    buckets = [s for s in lat.samples if s.name.endswith("_bucket")]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts), "buckets are cumulative"
    assert buckets[-1].labels["le"] == "+Inf"
    count = [s.value for s in lat.samples if s.name.endswith("_count")][0]
    assert count == buckets[-1].value >= 3
    fam("gpux_request_queue_seconds", "histogram")
    fam("gpux_launches", "counter")
    fam("gpux_requests_inflight", "gauge")
    fam("gpux_clients_connected", "gauge")
    fam("gpux_clients", "counter")
    fam("gpux_worker_restarts", "counter")
    fam("gpux_cache_hits", "counter")
    for name in ("gpux_worker_loop_sleeps", "gpux_client_kicks", "gpux_socket_messages",
                 "gpux_blocking_waits", "gpux_slot_waits", "gpux_graph_launches",
                 "gpux_graph_requests", "gpux_loop_waits", "gpux_copyin_requests"):
        fam(name, "counter")
    fam("gpux_module_compiles", "counter")
    fam("gpux_module_build_seconds", "counter")
    shared = fam("gpux_shared_memory_bytes", "gauge")
    uid = str(os.getuid())
    assert any(s.labels.get("uid") == uid for s in shared.samples) or not shared.samples
    info = fam("gpux_device_info", "gauge")
    assert info.samples[0].labels["backend"] == "host"
    fam("gpux_build_info", "gauge")


def main():
    tmp = tempfile.mkdtemp(prefix="gpux-prom-")
    sock = os.path.join(tmp, "gpuxd.sock")
    port = free_port()
    d = subprocess.Popen([DAEMON, "--socket", sock, "--backend", "host", "--cache-dir",
                          os.path.join(tmp, "cache"), "--metrics", f"127.0.0.1:{port}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(2000):
            if subprocess.run([CLI, "status", "--socket", sock], capture_output=True).returncode == 0:
                break
            time.sleep(0.01)
        # Some requests, and their memory, from a client.
        subprocess.run([CLI, "demo", "--socket", sock, "--children", "2", "--elements", "4096"],
                       check=True, capture_output=True)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        check(families(text.decode()))
        out = subprocess.run([CLI, "status", "--prometheus", "--socket", sock], check=True,
                             capture_output=True, text=True).stdout
        check(families(out))
    finally:
        d.terminate()
        d.wait(timeout=30)
        subprocess.run(["rm", "-rf", tmp])
    print("metrics parsed")


main()
