# SPDX-License-Identifier: MIT
# Futures: result(), concurrent.futures.wait/as_completed, callbacks, asyncio through the
# context's fd, and kernels from many threads.
import asyncio
import concurrent.futures as cf
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

import gpux
from conftest import HOST_KERNELS, settle


def test_future_is_a_concurrent_future(kernels):
    spin = kernels.get_function("spin")
    f = spin.submit(1, 1, (np.uint32(100),))
    assert isinstance(f, cf.Future) and not f.cancel()
    assert not f.done()
    with pytest.raises(cf.TimeoutError):
        f.result(0.001)
    assert f.result() is None and f.done() and f.exception() is None
    queue_ns, run_ns, _ = f.times
    assert run_ns > 50_000_000  # the worker timed the 100 ms kernel


def test_result_timeouts_out_of_range(kernels):
    f = kernels.get_function("spin").submit(1, 1, (np.uint32(100),))
    with pytest.raises(ValueError):
        f.result(float("nan"))
    assert f.result(float("inf")) is None and f.done()
    assert kernels.get_function("empty").submit(1, 1).result(1e300) is None


def test_wait_as_completed_and_callbacks(kernels):
    spin = kernels.get_function("spin")
    futs = [spin.submit(1, 1, (np.uint32(ms),), device=i % 2)
            for i, ms in enumerate((200, 20, 20, 200))]
    done, not_done = cf.wait(futs, return_when=cf.FIRST_COMPLETED, timeout=30)
    assert done and futs[1] in done | not_done
    seen = []
    called = threading.Event()
    futs[3].add_done_callback(lambda f: (seen.append(f), called.set()))
    assert set(cf.as_completed(futs, timeout=30)) == set(futs)
    assert called.wait(10) and seen == [futs[3]]
    # A callback on a finished future runs at once.
    futs[0].add_done_callback(seen.append)
    assert seen[-1] is futs[0]


def test_failed_request_raises_from_future(kernels):
    f = kernels.get_function("spin").submit(1, 1, (np.uint32(3000),), timeout=0.05, device=1)
    done, _ = cf.wait([f], timeout=30)
    assert f in done
    assert isinstance(f.exception(), gpux.DeadlineError)
    with pytest.raises(gpux.DeadlineError):
        f.result()
    settle(kernels, 1)


def test_wait_while_another_thread_blocks(kernels):
    """A thread blocked in a gpux call takes in the watched future's completion too."""
    spin = kernels.get_function("spin")
    watched = spin.submit(1, 1, (np.uint32(50),), device=0)
    # Far apart (50 ms against 2 s), so that a loaded machine cannot blur them.
    blocker = threading.Thread(target=spin, args=(1, 1, (np.uint32(2000),)),
                               kwargs={"device": 1})
    blocker.start()
    done, _ = cf.wait([watched], timeout=1.5)
    blocker.join()
    assert watched in done


def test_a_watched_future_completes_while_other_calls_take_in(kernels):
    """Another thread's calls that take in completions (here device_info, in a loop) leave
    the fd with nothing to say: the watcher must hear of them, every time."""
    spin = kernels.get_function("spin")
    ctx = kernels.context
    missed = 0
    for _ in range(5):
        f = spin.submit(1, 1, (np.uint32(50),), device=0)
        stop = threading.Event()

        def take_in():
            while not stop.is_set():
                ctx.device_info(1)

        t = threading.Thread(target=take_in)
        t.start()
        done, _ = cf.wait([f], timeout=3)
        stop.set()
        t.join()
        missed += f not in done
        f.result()
    assert missed == 0


def test_a_request_finished_by_two_threads_copies_back_once(kernels):
    """result() in this thread and the watcher (a done callback) both see the request end:
    the temporary standing in for a plain numpy output is copied back and let go once, and
    the output is whole when result() returns."""
    add1 = kernels.get_function("add1")
    x = np.arange(256, dtype=np.float32)
    out = np.zeros(256, np.float32)
    base = sys.getrefcount(out)
    for i in range(200):
        out[:] = 0
        f = add1.submit(1, 256, (np.uint64(256), x + i, gpux.Out(out)), device=i % 2)
        f.add_done_callback(lambda _: None)
        f.result()
        assert (out == x + i + 1).all()
        del f
        assert sys.getrefcount(out) == base


def test_asyncio_await_and_gather(kernels):
    spin = kernels.get_function("spin")
    add1 = kernels.get_function("add1")
    x = gpux.zeros(1000, np.float32)

    async def main():
        await spin.submit(1, 1, (np.uint32(20),))
        await asyncio.gather(*(spin.submit(1, 1, (np.uint32(30),), device=i % 2)
                               for i in range(6)))
        for _ in range(10):
            await add1.submit(8, 128, (np.uint64(1000), x, x))
        with pytest.raises(gpux.DeadlineError):
            await spin.submit(1, 1, (np.uint32(3000),), timeout=0.05, device=1)
        return True

    assert asyncio.run(main())
    assert (x == 10).all()
    settle(kernels, 1)


def test_threads_share_a_context(kernels):
    add1 = kernels.get_function("add1")
    arrays = [gpux.zeros(4096, np.float32) for _ in range(4)]

    def work(a):
        for _ in range(25):
            add1(32, 128, (np.uint64(a.size), a, a))
        return float(a.sum())

    with cf.ThreadPoolExecutor(4) as ex:
        sums = list(ex.map(work, arrays))
    assert sums == [25.0 * 4096] * 4


def _watcher_wakeups() -> int:
    """How often the watcher threads woke up so far (they sleep in poll())."""
    n = 0
    for t in threading.enumerate():
        if t.name == "gpux-watcher":
            with open(f"/proc/self/task/{t.native_id}/status") as f:
                n += sum(int(line.split()[1]) for line in f
                         if line.startswith("voluntary_ctxt_switches"))
    return n


def test_an_idle_watcher_sleeps(kernels):
    """With nothing to watch, the watcher does not look while another thread blocks."""
    spin = kernels.get_function("spin")
    done, _ = cf.wait([spin.submit(1, 1, (np.uint32(1),))], timeout=30)
    assert done
    before = _watcher_wakeups()
    spin(1, 1, (np.uint32(300),))
    # A watcher that looked every millisecond meanwhile would have woken about 300 times.
    assert _watcher_wakeups() - before < 20


def test_a_watched_context_is_let_go(daemon):
    ctx = gpux.Context(daemon)
    spin = gpux.Module(HOST_KERNELS, "host", context=ctx).get_function("spin")
    before = set(threading.enumerate())
    f = spin.submit(1, 1, (np.uint32(1),))
    done, _ = cf.wait([f], timeout=30)
    assert f in done
    watchers = [t for t in set(threading.enumerate()) - before if t.name == "gpux-watcher"]
    assert len(watchers) == 1
    r = weakref.ref(ctx)
    del ctx, spin, f, done
    gc.collect()
    assert r() is None
    watchers[0].join(30)
    assert not watchers[0].is_alive()


def test_await_in_one_event_loop_after_another(daemon):
    """In a process of its own, where no earlier test has started a watcher thread."""
    script = textwrap.dedent('''
        import asyncio, concurrent.futures as cf, gc, threading, weakref, gpux
        src = """
        #include <time.h>
        GPUX_HOST_KERNEL(nap) { struct timespec t = { 0, 20000000 }; nanosleep(&t, NULL); }
        """
        k = gpux.Module(src, "host").get_function("nap")

        async def main(barrier=None):
            f = k.submit(1, 1)
            if barrier is not None:
                barrier.wait(60)  # both loops run now, each awaiting
            await f
            await asyncio.gather(*(k.submit(1, 1) for _ in range(3)))
            return True

        for _ in range(3):
            assert asyncio.run(main())
        # A loop left open (not running), then another, then the first again.
        loop = asyncio.new_event_loop()
        assert loop.run_until_complete(main())
        assert asyncio.run(asyncio.wait_for(main(), 60))
        assert loop.run_until_complete(main())
        loop.close()
        # Two loops at once, in two threads.
        barrier = threading.Barrier(2)
        with cf.ThreadPoolExecutor(2) as ex:
            assert all(ex.map(lambda _: asyncio.run(main(barrier)), range(2)))
        # Futures watched after the loops are gone.
        fs = [k.submit(1, 1) for _ in range(3)]
        assert len(cf.wait(fs, timeout=60).done) == 3

        # A context awaited in a loop is let go with its last reference.
        async def own_context():
            ctx = gpux.Context()
            await gpux.Module(src, "host", context=ctx).get_function("nap").submit(1, 1)
            return weakref.ref(ctx)
        r = asyncio.run(own_context())
        gc.collect()
        assert r() is None
        print("ok")
    ''')
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, GPUX_SOCKET=daemon))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"



def test_calls_waiting_for_the_context_let_python_run(kernels):
    """A thread freezing a large array holds the context's lock while it copies the bytes:
    the other threads' calls that wait for that lock release the GIL meanwhile."""
    big = gpux.zeros(256 << 20, np.uint8)
    small = gpux.zeros(16, np.float32)
    plain = np.zeros(16, np.float32)
    spin = kernels.get_function("spin")
    add1 = kernels.get_function("add1")
    fut = spin.submit(1, 1, (np.uint32(1),))
    msg = spin.submit(1, 1, (np.uint32(1),))
    calls = {
        "Buffer.fd": gpux.buffer_of(small).fd,
        "Future.done": fut.done,
        "Request.message": lambda: msg.request.message,
        "a temporary argument": lambda: add1(1, 16, (np.uint64(16), plain, plain)),
    }
    spans = {}

    def call(name, fn):
        t0 = time.monotonic()
        fn()
        spans[name] = (t0, time.monotonic())

    freezer = threading.Thread(target=call, args=("freeze", lambda: gpux.freeze(big)))
    freezer.start()
    time.sleep(0.03)
    threads = [threading.Thread(target=call, args=item) for item in calls.items()]
    for t in threads:
        t.start()
    ticks = []
    while any(t.is_alive() for t in threads):
        ticks.append(time.monotonic())
        time.sleep(0.005)
    freezer.join()
    fut.result()
    msg.result()
    f0, f1 = spans.pop("freeze")
    # Judged where a call waited for the freeze 50 ms or more: Python ran meanwhile.
    waited = {name: (max(t0, f0), min(t1, f1)) for name, (t0, t1) in spans.items()
              if min(t1, f1) - max(t0, f0) >= 0.05}
    if not waited:
        pytest.skip(f"the freeze took {f1 - f0:.3f} s: too short to wait for")
    stalled = {name: round(w1 - w0, 3) for name, (w0, w1) in waited.items()
               if sum(w0 < t < w1 for t in ticks) < 3}
    assert not stalled, f"held the GIL while waiting (seconds): {stalled}"
