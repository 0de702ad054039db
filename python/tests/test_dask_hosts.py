# SPDX-License-Identifier: MIT
# Dask over two "hosts" on this machine: two gpuxd on two sockets (host back end, two devices
# each), a scheduler, and two workers bound to each gpuxd (GPUX_SOCKET), which stand for
# different hosts to each other (GPUX_HOST_ID), spawned by their nannies. Cache affinity
# across the cluster; arrays by memory within a host and by value between hosts; thousands of
# small kernel tasks through the kill -9 of one host's gpuxd, which Dask's retries absorb.
import os
import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")

import gpux  # noqa: E402
import gpux.dask as gd  # noqa: E402

from conftest import ADD1_KERNEL, start_gpuxd, stop_gpuxd  # noqa: E402

HOSTS = ("a", "b")
N = 64  # elements per task
T = 120  # seconds that any wait may take before it is a failure, not a hang


def _wait(what, cond, timeout=60):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """Each host's gpuxd: {host: [process, socket, folder]}."""
    out = {}
    for h in HOSTS:
        d = tmp_path_factory.mktemp(f"host-{h}")
        proc, sock = start_gpuxd(d, "--backend", "host", "--host-devices", "2")
        out[h] = [proc, sock, d]
    yield out
    for proc, _, d in out.values():
        if proc.poll() is None:
            stop_gpuxd(proc, d)


@pytest.fixture(scope="module")
def cluster(hosts):
    workers = {
        f"{h}{i}": {"cls": distributed.Nanny,
                    "options": {"nthreads": 1, "name": f"{h}{i}",
                                "env": {"GPUX_SOCKET": hosts[h][1], "GPUX_HOST_ID": h}}}
        for h in HOSTS for i in range(2)
    }
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": ":0"}}
    # Spawned: a worker forked from this process, which runs the scheduler and the nannies in
    # threads, hung now and then before the first test ended (1 run in 10 on 2 loaded CPUs).
    # Workers forked by their nannies are test_dask.py's, on a cluster of its own.
    with dask.config.set({"distributed.worker.multiprocessing-method": "spawn"}), \
            distributed.SpecCluster(workers=workers, scheduler=scheduler) as c, \
            distributed.Client(c) as client:
        client.register_plugin(gd.GpuxSchedulerPlugin(interval=0.2))
        client.register_plugin(gd.GpuxWorkerPlugin(resources=2, interval=0.1))
        by_name = {w["name"]: a for a, w in client.scheduler_info()["workers"].items()}
        _wait("every worker to offer GPUX", lambda: all(
            s == (2, True) for s in _gpux_state(client).values()))
        yield client, by_name


def _gather(client, futs):
    distributed.wait(futs, timeout=T)
    return client.gather(futs)


def _gpux_state(client):
    """{worker name: (GPUX offered, gpuxd up as last reported)}."""
    return {w["name"]: (w["resources"].get(gd.RESOURCE, 0),
                        w["metrics"].get("gpux", {}).get("up"))
            for w in client.scheduler_info()["workers"].values()}


def _kernel():
    """add1, loaded once per worker process into its host's gpuxd."""
    k = _kernel.cache.get(os.getpid())
    if k is None:
        k = _kernel.cache[os.getpid()] = gpux.Module(ADD1_KERNEL, "host").get_function("add1")
    return k


_kernel.cache = {}


def _host():
    return os.environ["GPUX_HOST_ID"]


def _add1(i, n=N):
    """A small kernel task: x + 1 for x = i .. i + n - 1, as a gpux array."""
    x = gpux.asarray(np.arange(i, i + n, dtype=np.float32))
    out = gpux.empty(n, np.float32)
    _kernel()((n + 63) // 64, 64, (np.uint64(n), x, out))
    return out


def _total(*parts):
    return float(sum(np.asarray(p, dtype=np.float64).sum() for p in parts)), _host()


def _expected_total(starts):
    return float(sum(N * i + N * (N - 1) / 2 + N for i in starts))


def _cached_add1(w):
    out = gpux.empty(w.size, np.float32)
    _kernel()((w.size + 63) // 64, 64, (np.uint64(w.size), gpux.Cached(w), out))
    return _host()


def _cache_state():
    ctx = gpux.get_context()
    return _host(), os.environ["GPUX_SOCKET"], [
        (ctx.device_info(i)["state"], ctx.affinity(i).count(0)) for i in range(ctx.device_count())]


def _holds(client, names, key):
    """Whether the scheduler last heard, from each of those workers, that its host's devices
    hold key."""
    ms = [w["metrics"]["gpux"] for w in client.scheduler_info()["workers"].values()
          if w["name"] in names]
    return all(m["filter"] and gpux._gpux.affinity_holds(m["filter"], m["uid"], key) for m in ms)


def test_workers_are_attached_to_their_hosts_gpuxd(cluster):
    client, by_name = cluster
    assert all(s == (2, True) for s in _gpux_state(client).values())
    sockets = client.run(lambda: gpux.get_context() and os.environ["GPUX_SOCKET"])
    assert {by_name[n]: sockets[by_name[n]] for n in by_name} == sockets
    assert sockets[by_name["a0"]] == sockets[by_name["a1"]] != sockets[by_name["b0"]]
    # Each worker a process of its own, started by its nanny.
    assert len(set(client.run(os.getpid).values())) == 4


def test_tasks_go_where_their_cached_inputs_are(cluster):
    client, by_name = cluster
    w = {h: gpux.asarray(np.random.default_rng(ord(h)).random(4096, dtype=np.float32),
                         freeze=True) for h in HOSTS}
    keys = {h: gpux.content_key(w[h]) for h in HOSTS}
    # Each host caches its own: a task on one of its workers uses it as a cached input.
    ws = {h: client.scatter(w[h], workers=[by_name[f"{h}0"]]) for h in HOSTS}
    for h in HOSTS:
        assert client.submit(_cached_add1, ws[h], workers=[by_name[f"{h}0"]],
                             pure=False).result(timeout=T) == h
        _wait(f"host {h}'s workers to report its cache",
              lambda h=h: _holds(client, {f"{h}0", f"{h}1"}, keys[h]))
        other = "b" if h == "a" else "a"
        assert not _holds(client, {f"{other}0", f"{other}1"}, keys[h]), \
            (h, client.run(_cache_state))
    # Replicated everywhere, so that data locality does not decide; then each task goes to
    # the host whose devices hold its input.
    for h in HOSTS:
        client.replicate([ws[h]])
    futs = {}
    for h in HOSTS:
        with gd.annotate(w[h]):
            futs[h] = [client.submit(_cached_add1, ws[h], pure=False) for _ in range(20)]
    for h in HOSTS:
        assert _gather(client, futs[h]) == [h] * 20


def _set_first(a):
    a[0] = -1
    return _host()


BIG = 1 << 17  # 512 KiB: a segment of its own, shared by memory within a host


def test_arrays_move_by_memory_within_a_host_and_by_value_between(cluster):
    client, by_name = cluster
    made = client.submit(_add1, 0, BIG, workers=[by_name["a0"]], pure=False)
    # a1, on a0's host, writes a0's array itself; b0 writes a copy of its own.
    on = {n: [by_name[n]] for n in by_name}
    assert client.submit(_set_first, made, workers=on["a1"], pure=False).result(timeout=T) == "a"
    assert client.submit(_is_changed, made, workers=on["a0"]).result(timeout=T)
    other = client.submit(_add1, 100, BIG, workers=[by_name["a0"]], pure=False)
    assert client.submit(_set_first, other, workers=on["b0"], pure=False).result(timeout=T) == "b"
    assert not client.submit(_is_changed, other, workers=on["a0"]).result(timeout=T)
    # What went by value is a gpux array all the same, for kernels there.
    assert client.submit(gpux.is_shared, other, workers=on["b1"]).result(timeout=T)


def _is_changed(a):
    return bool(a[0] == -1)


def test_thousands_of_tasks_through_a_hosts_gpuxd_killed(cluster, hosts):
    client, by_name = cluster
    _wait("every worker to offer GPUX", lambda: all(
        s == (2, True) for s in _gpux_state(client).values()))
    starts = list(range(0, 3000))
    with gd.annotate(retries=5):
        parts = client.map(_add1, starts, pure=False)
    # Sums of ten parts each, on any worker: parts move between hosts and within them.
    sums = [client.submit(_total, *parts[i:i + 10], pure=False) for i in range(0, len(parts), 10)]
    killed = False
    done = 0
    for _ in distributed.as_completed(parts, timeout=T):
        done += 1
        if done == 800 and not killed:
            hosts["a"][0].kill()
            hosts["a"][0].wait()
            killed = True
    assert killed
    results = _gather(client, sums)
    for j, (total, _) in enumerate(results):
        assert total == _expected_total(starts[10 * j:10 * j + 10])
    for i, p in zip(starts[::97], parts[::97]):
        np.testing.assert_array_equal(p.result(timeout=T),
                                      np.arange(i, i + N, dtype=np.float32) + 1)
    # Host a's workers offer no GPUX while their gpuxd is gone ...
    _wait("host a's workers to withdraw GPUX", lambda: all(
        _gpux_state(client)[n] == (0, False) for n in ("a0", "a1")))
    with gd.annotate():
        waiting = [client.submit(_add1, i, workers=[by_name["a0"], by_name["a1"]], pure=False)
                   for i in range(5)]
    time.sleep(0.5)
    assert not any(f.done() for f in waiting)
    # ... and take GPUX tasks again once it is back (as its service manager would start it).
    proc, sock = start_gpuxd(hosts["a"][2], "--backend", "host", "--host-devices", "2")
    hosts["a"][0] = proc
    assert sock == hosts["a"][1]
    for i, f in enumerate(waiting):
        np.testing.assert_array_equal(f.result(timeout=T),
                                      np.arange(i, i + N, dtype=np.float32) + 1)
    _wait("host a's workers to offer GPUX again", lambda: all(
        _gpux_state(client)[n] == (2, True) for n in ("a0", "a1")))

