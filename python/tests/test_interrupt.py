# SPDX-License-Identifier: MIT
# Ctrl-C (SIGINT) during the calls that wait: run, result, module load; and outputs whose
# memory moved while a request ran.
import os
import random
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import gpux

SPIN_MARK = r"""
#include <time.h>
GPUX_HOST_KERNEL(spin_mark)
{
	uint32_t ms = GPUX_ARG(uint32_t, 0);
	char *out = GPUX_ARG(char *, 1);
	struct timespec a, b, nap = { 0, 1000000 };
	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		nanosleep(&nap, NULL);
		clock_gettime(CLOCK_MONOTONIC, &b);
	} while ((b.tv_sec - a.tv_sec) * 1000000000 + (b.tv_nsec - a.tv_nsec) < ms * 1000000ll);
	out[0] = 1;
}
"""
# Long enough that a call interrupted 0.1 s in returns well before the kernel's end, on a
# machine whose CPUs other tests share; the kernel sleeps, so that it takes none of them.
SPIN_MS = 3000


@pytest.fixture(scope="module")
def spin_mark():
    return gpux.Module(SPIN_MARK, "host").get_function("spin_mark")


def _sigint_in(seconds):
    # Started inside the `pytest.raises` block it interrupts: on a loaded machine the main
    # thread may take longer than `seconds` to reach the call, and the SIGINT still lands in
    # the block, never before it.
    t = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    t.start()
    return t


def _until(pred, seconds=30):
    deadline = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_ctrl_c_interrupts_a_kernel_call_which_goes_on_as_an_orphan(spin_mark):
    ctx = gpux.get_context()
    plain = bytearray(16)            # not gpux memory: a temporary stands in for it
    shared = gpux.zeros(16, np.uint8)
    for out in (plain, shared):
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            timer = _sigint_in(0.1)
            spin_mark(1, 1, (np.uint32(SPIN_MS), out), device=0)
        timer.join()
        # Long before the kernel's end (SPIN_MS): the call did not wait for it.
        assert time.monotonic() - t0 < SPIN_MS / 1000 * 0.7
        # The request goes on, holding the memory it uses until it ends.
        assert ctx._orphans == 1
        if out is plain:
            with pytest.raises(BufferError):
                plain.extend(b"x")
        _until(lambda: ctx._orphans == 0)
        # Ended and let go: the export is released, and the context works.
        if out is plain:
            plain.extend(b"x")
            assert plain[0] == 0   # a temporary's output is not copied back after Ctrl-C
        else:
            assert shared[0] == 1  # gpux memory is the kernel's own: written in place
        spin_mark(1, 1, (np.uint32(0), out), device=0)
        assert out[0] == 1


def test_ctrl_c_interrupts_result_and_the_future_stays_usable(spin_mark):
    out = gpux.zeros(16, np.uint8)
    fut = spin_mark.submit(1, 1, (np.uint32(SPIN_MS), out), device=1)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        timer = _sigint_in(0.1)
        fut.result()
    timer.join()
    assert time.monotonic() - t0 < SPIN_MS / 1000 * 0.7
    assert not fut.done()
    assert fut.result(30) is None and out[0] == 1


def test_a_dropped_future_does_not_wait(spin_mark):
    ctx = gpux.get_context()
    plain = bytearray(16)
    fut = spin_mark.submit(1, 1, (np.uint32(SPIN_MS), plain), device=1)
    t0 = time.monotonic()
    del fut
    assert time.monotonic() - t0 < SPIN_MS / 1000 * 0.7
    assert ctx._orphans == 1
    _until(lambda: ctx._orphans == 0)
    plain.extend(b"x")


def test_ctrl_c_interrupts_a_module_load():
    # A module large enough that compiling it takes a while (about a second here).
    src = f"/* {random.random()} */\n" + "".join(
        f"GPUX_HOST_KERNEL(k{i}) {{ volatile int x = {i}; (void)x; }}\n" for i in range(2000))
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        timer = _sigint_in(0.02)
        gpux.Module(src, "host")
    timer.join()
    interrupted = time.monotonic() - t0
    # Loaded again: the same code, compiled once (cached), or still compiling meanwhile.
    t0 = time.monotonic()
    m = gpux.Module(src, "host")
    assert interrupted < time.monotonic() - t0 + 0.5
    m.get_function("k7")(1, 1)


RESIZED = r"""
import sys
import numpy as np
import gpux

m = gpux.Module(sys.argv[1], "host")
spin, add1 = m.get_function("spin"), m.get_function("add1")
q = gpux.Queue(0)
for i in range(5):
    x = np.arange(1 << 16, dtype=np.float32)
    out = np.zeros(1 << 16, np.float32)
    spin.submit(1, 1, (np.uint32(100),), queue=q)
    f = add1.submit(1, 256, (np.uint64(x.size), x, out), queue=q)
    # Forbidden, but not to be a crash: numpy frees the memory it exported to the request.
    out.resize(16, refcheck=False)
    junk = [np.ones(1 << 14, np.float32) for _ in range(50)]
    try:
        f.result()
        print("copied back into freed memory")
    except gpux.InvalidError as e:
        assert "argument 2" in e.detail and "not copied back" in e.detail, e.detail
    out = np.zeros(1 << 16, np.float32)
    add1(1, 256, (np.uint64(x.size), x, out), queue=q)
    assert out[5] == 6
print("ok")
"""


def test_an_output_resized_while_its_request_runs_is_not_written(kernels):
    from conftest import HOST_KERNELS

    r = subprocess.run([sys.executable, "-c", RESIZED, HOST_KERNELS], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "ok\n", (r.returncode, r.stdout, r.stderr)
