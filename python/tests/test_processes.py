# SPDX-License-Identifier: MIT
# multiprocessing with fork, forkserver and spawn: arrays handed to children are the same
# memory, kernels and modules travel by pickling, and results come back shared; asyncio in a
# process of its own goes through the context's fd, with no thread of gpux's.
import concurrent.futures as cf
import multiprocessing as mp
import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import gpux

N = 4096
EMPTY_HOST = "GPUX_HOST_PARAMS(k, 4);\nGPUX_HOST_KERNEL(k) { (void)gpux_args; }\n"
# Inherited by forked children; what spawned ones get is passed to them.
_inherited = {}


def _child_saxpy(args):
    """In a child: run saxpy from x and y (gpux arrays) into one row of out, return a new
    gpux array made here, and the pid."""
    kernel, a, x, y, out, row = args
    kernel(((N + 127) // 128,), 128, (np.uint64(N), np.float32(a), x, y, gpux.Out(out[row])))
    mine = gpux.asarray(np.full(8, row, np.int32))
    return os.getpid(), mine


def _child_inherited(row):
    """In a forked child: only what it inherited."""
    k, x, y, out = (_inherited[n] for n in ("kernel", "x", "y", "out"))
    k(((N + 127) // 128,), 128, (np.uint64(N), np.float32(row), x, y, gpux.Out(out[row])))
    return os.getpid()


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_pool_children_share_arrays(kernels, method):
    rng = np.random.default_rng(3)
    x = gpux.asarray(rng.random(N, dtype=np.float32))
    y = gpux.asarray(rng.random(N, dtype=np.float32))
    out = gpux.full((4, N), np.nan, np.float32)
    saxpy = kernels.get_function("saxpy")
    ctx = mp.get_context(method)
    with ctx.Pool(2) as pool:
        res = pool.map(_child_saxpy, [(saxpy, a + 1, x, y, out, a) for a in range(4)])
    for a in range(4):
        np.testing.assert_allclose(out[a], (a + 1) * x + y, rtol=1e-6)
    assert all(pid != os.getpid() for pid, _ in res)
    # What the children made came back as shared memory, not copies.
    for row, (_, mine) in enumerate(res):
        assert isinstance(mine, gpux.ndarray) and mine.tolist() == [row] * 8


def test_forked_children_use_inherited_objects(kernels):
    rng = np.random.default_rng(4)
    _inherited.update(kernel=kernels.get_function("saxpy"),
                      x=gpux.asarray(rng.random(N, dtype=np.float32)),
                      y=gpux.asarray(rng.random(N, dtype=np.float32)),
                      out=gpux.zeros((3, N), np.float32))
    # The parent has used the context before forking.
    kernels.get_function("empty")(1, 1)
    with mp.get_context("fork").Pool(3) as pool:
        pids = pool.map(_child_inherited, range(3))
    x, y, out = _inherited["x"], _inherited["y"], _inherited["out"]
    for row in range(3):
        np.testing.assert_allclose(out[row], row * x + y, rtol=1e-6)
    assert os.getpid() not in pids
    _inherited.clear()


def test_forked_child_counts_no_blocking_calls(kernels):
    """The parent's thread blocked in a gpux call at fork() is not in the child: the child's
    watcher must not look every millisecond for it."""
    spin = kernels.get_function("spin")
    ctx = gpux.get_context()
    t = threading.Thread(target=spin, args=(1, 1, (np.uint32(1000),)), kwargs={"device": 1})
    t.start()
    deadline = time.monotonic() + 30
    while ctx._blocking == 0:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if ctx._blocking == 0 else 1)
    t.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_forked_child_waits_for_no_lock_of_the_parents_threads():
    """A thread of the parent inside gpux's Python code at fork() (making the default
    context, pickling) is not in the child, nor will it let go of the locks it holds: the
    child must make its own context and pickle without waiting for them."""
    from gpux import _core, _share

    a = gpux.asarray(np.arange(10))
    locks = [_core._default_lock, _core._raw_lock, _share._lock, _share._sharer_lock]
    for lock in locks:
        lock.acquire()
    try:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.alarm(20)
                _core._default = None
                assert gpux.get_context() is not None
                assert pickle.loads(pickle.dumps(a)).tolist() == list(range(10))
                gpux.RawKernel(EMPTY_HOST, "k", lang="host")(1, 1, (np.uint32(0),))
                code = 0
            finally:
                os._exit(code)
    finally:
        for lock in locks:
            lock.release()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_forked_child_uses_the_parents_raw_kernels_and_loads_what_it_was_loading(
        monkeypatch):
    """RawKernels the parent holds are the child's too, and work there; one that a thread of
    the parent was loading at fork() is not the child's to wait for: it loads its own."""
    from gpux import _gpux

    kept = gpux.RawKernel(EMPTY_HOST + "/* kept */", "k", lang="host")
    kept(1, 1, (np.uint32(0),))
    real = _gpux.Module
    loading, release = threading.Event(), threading.Event()

    def held(*args, **kw):
        loading.set()
        release.wait(30)
        return real(*args, **kw)

    monkeypatch.setattr(_gpux, "Module", held)
    code = EMPTY_HOST + "/* loading at fork */"
    t = threading.Thread(target=gpux.RawKernel, args=(code, "k"), kwargs={"lang": "host"})
    t.start()
    try:
        assert loading.wait(30)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                signal.alarm(20)
                _gpux.Module = real
                assert gpux.RawKernel(EMPTY_HOST + "/* kept */", "k", lang="host") is kept
                kept(1, 1, (np.uint32(0),))
                gpux.RawKernel(code, "k", lang="host")(1, 1, (np.uint32(0),))
                status = 0
            finally:
                os._exit(status)
    finally:
        release.set()
        t.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _process_main(a, k):
    k(((a.size + 127) // 128,), 128, (np.uint64(a.size), a, a))


def test_spawned_process_gets_array_at_start(kernels):
    a = gpux.zeros(1000, np.float32)
    p = mp.get_context("spawn").Process(target=_process_main,
                                        args=(a, kernels.get_function("add1")))
    p.start()
    p.join(120)
    assert p.exitcode == 0 and (a == 1).all()


def test_asyncio_uses_the_fd_without_a_thread(daemon):
    script = textwrap.dedent("""
        import asyncio, threading, numpy as np, gpux
        from gpux import _future
        src = '''
        #include <time.h>
        GPUX_HOST_KERNEL(nap) { struct timespec t = { 0, 20000000 }; nanosleep(&t, NULL); }
        '''
        k = gpux.Module(src, "host").get_function("nap")
        async def main():
            for _ in range(3):
                await k.submit(1, 1)
            await asyncio.gather(*(k.submit(1, 1) for _ in range(4)))
            w = _future._watchers.get(gpux.get_context())
            return w is not None and w.loop is asyncio.get_running_loop() and w.thread is None
        ok = asyncio.run(main())
        names = [t.name for t in threading.enumerate()]
        print(ok and "gpux-watcher" not in names)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, GPUX_SOCKET=daemon))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


def test_bench_prints_one_json_document(daemon):
    import json

    r = subprocess.run([sys.executable, "-m", "gpux.bench", "--quick", "--json"],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, GPUX_SOCKET=daemon))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["backend"] == "host" and doc["cupy"] is None
    scenarios = {row["scenario"]: row for row in doc["results"]}
    assert scenarios["empty launch, run and wait, p50"]["gpux"] > 0
    assert scenarios["async launches"]["unit"] == "k/s"


def _stalled_peers(n):
    """Connections to this process's sharer (gpux/_share.py) that never ask for anything."""
    from gpux import _share

    peers = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(_share._get_sharer().name)
        peers.append(s)
    return peers


def test_stalled_peers_hold_up_no_unpickling():
    from gpux import _share

    a = gpux.asarray(np.arange(10))
    data = pickle.dumps(a)
    peers = _stalled_peers(3)
    try:
        with cf.ThreadPoolExecutor(1) as ex:
            # Answered while they wait, not after each has had its time.
            b = ex.submit(pickle.loads, data).result(timeout=2 * _share._PEER_TIMEOUT_S)
        assert b.tolist() == list(range(10))
    finally:
        for s in peers:
            s.close()


def test_silent_peers_are_dropped_and_more_wait_their_turn(monkeypatch):
    from gpux import _share

    monkeypatch.setattr(_share, "_PEER_TIMEOUT_S", 0.2)
    a = gpux.asarray(np.arange(10))
    data = pickle.dumps(a)
    # More than the sharer serves at once: the last ones, then the unpickling, wait in the
    # listen backlog until the first ones are dropped.
    peers = _stalled_peers(_share._PEERS_MAX + 5)
    try:
        assert pickle.loads(data).tolist() == list(range(10))
        for s in peers:
            s.settimeout(30)
            assert s.recv(16) == b""
    finally:
        for s in peers:
            s.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to be another user")
def test_another_users_peer_is_dropped_at_once():
    from gpux import _share

    name = _share._get_sharer().name
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                s.connect(name)
                s.settimeout(8)
                # Closed without a word, before it sent anything.
                code = 0 if s.recv(16) == b"" else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
