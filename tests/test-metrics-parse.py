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


def check(fams, per_user):
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
    dbuf = fam("gpux_device_buffer_bytes", "gauge")
    uid = str(os.getuid())
    if per_user:
        # A user's memory once its clients are gone is none, and not shown.
        for f in (shared, dbuf):
            assert all(s.labels.get("uid") == uid for s in f.samples), f.samples
    else:
        # By default the metrics name no user: memory per device only.
        for f in (shared, dbuf):
            assert [s.labels for s in f.samples] == [{"device": "0"}], f.samples
    info = fam("gpux_device_info", "gauge")
    assert info.samples[0].labels["backend"] == "host"
    fam("gpux_build_info", "gauge")


def settled_fds(pid):
    """gpuxd's open fds once their count holds still (the connections of clients gone are
    closed): what the next scrape must say, its own connection not counted."""
    last, same = -1, 0
    for _ in range(500):
        n = len(os.listdir(f"/proc/{pid}/fd"))
        same = same + 1 if n == last else 0
        if same == 5:
            return n
        last = n
        time.sleep(0.01)
    raise AssertionError("gpuxd's open fds did not settle")


def check_process(fams, pid, fds):
    """gpuxd's process_* metrics, as Prometheus' client libraries name them."""
    start = fams["process_start_time_seconds"]
    assert start.type == "gauge"
    with open(f"/proc/{pid}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        btime = [int(line.split()[1]) for line in f if line.startswith("btime ")][0]
    assert abs(start.samples[0].value - (btime + ticks / os.sysconf("SC_CLK_TCK"))) < 0.02
    assert time.time() - 600 < start.samples[0].value <= time.time()
    assert fams["process_cpu_seconds"].type == "counter"
    assert fams["process_cpu_seconds"].samples[0].value >= 0
    assert fams["process_resident_memory_bytes"].samples[0].value > 1 << 20
    assert fams["process_virtual_memory_bytes"].samples[0].value > 1 << 20
    assert fams["process_open_fds"].samples[0].value == fds, (fams["process_open_fds"], fds)
    assert fams["process_max_fds"].samples[0].value >= 1024


def start_daemon(tmp, sock, *extra):
    """gpuxd on a free port, once its socket answers: (process, port). A port found free can
    be taken by another program's connection before gpuxd binds it; then another is tried."""
    log_path = os.path.join(tmp, "gpuxd.log")
    for _ in range(10):
        port = free_port()
        with open(log_path, "w") as log:
            d = subprocess.Popen([DAEMON, "--socket", sock, "--backend", "host", "--cache-dir",
                                  os.path.join(tmp, "cache"), "--metrics", f"127.0.0.1:{port}",
                                  *extra], stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 60
        while d.poll() is None and time.monotonic() < deadline:
            if subprocess.run([CLI, "status", "--socket", sock],
                              capture_output=True).returncode == 0:
                return d, port
            time.sleep(0.01)
        if d.poll() is None:
            d.kill()
        d.wait()
        with open(log_path) as log:
            text = log.read()
        if "Address already in use" not in text:
            raise AssertionError(f"gpuxd did not start (exit {d.returncode}):\n{text}")
    raise AssertionError("no free port for gpuxd's metrics")


def main():
    tmp = tempfile.mkdtemp(prefix="gpux-prom-")
    sock = os.path.join(tmp, "gpuxd.sock")
    d, port = start_daemon(tmp, sock)
    try:
        # Some requests, and their memory, from a client.
        subprocess.run([CLI, "demo", "--socket", sock, "--children", "2", "--elements", "4096"],
                       check=True, capture_output=True)
        fds = settled_fds(d.pid)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        fams = families(text.decode())
        check(fams, False)
        check_process(fams, d.pid, fds)
        out = subprocess.run([CLI, "status", "--prometheus", "--socket", sock], check=True,
                             capture_output=True, text=True).stdout
        check(families(out), False)
        out = subprocess.run([CLI, "status", "--prometheus", "--per-user", "--socket", sock],
                             check=True, capture_output=True, text=True).stdout
        check(families(out), True)
        # The landing page links to the metrics.
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert page.headers["Content-Type"].startswith("text/html")
        assert b'href="/metrics"' in page.read()
    finally:
        d.terminate()
        d.wait(timeout=30)
    # --metrics-per-user: the endpoint labels memory by user.
    d, port = start_daemon(tmp, sock, "--metrics-per-user")
    try:
        subprocess.run([CLI, "demo", "--socket", sock, "--children", "2", "--elements", "4096"],
                       check=True, capture_output=True)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        check(families(text.decode()), True)
    finally:
        d.terminate()
        d.wait(timeout=30)
        subprocess.run(["rm", "-rf", tmp])
    print("metrics parsed")


main()
