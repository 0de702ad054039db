# SPDX-License-Identifier: MIT
# The package's names as a user meets them: enums, reprs, named timings, garbage collection.
import gc
import weakref

import numpy as np
import pytest

import gpux


def test_states_backends_and_languages_are_enums(kernels):
    for d in gpux.devices():
        assert d["backend"] is gpux.Backend.HOST and d["state"] is gpux.DeviceState.READY
        assert d["state"] == 2 and repr(d["backend"]) == "<Backend.HOST: 1>"
    assert kernels.lang is gpux.Lang.HOST and gpux.LANG_CUDA is gpux.Lang.CUDA
    assert gpux.Module(kernels.code, 4).lang is gpux.Lang.HOST


def test_objects_say_what_they_are(kernels):
    k = kernels.get_function("add1")
    assert repr(k) == "<gpux Kernel 'add1'>"
    assert repr(kernels).startswith("<gpux.Module host, ") and "add1" in repr(kernels)
    assert repr(gpux.Queue(1)) == "<gpux Queue on device 1>"
    assert repr(gpux.DeviceBuffer(64, 1)) == "<gpux DeviceBuffer of 64 bytes on device 1>"
    a = gpux.zeros(8, np.float32)
    assert repr(a.buffer).startswith("<gpux Buffer of ")
    assert repr(gpux.Out(a)) == "<gpux Out of a ndarray>"
    assert repr(gpux.Cached(gpux.array(a, freeze=True))) == "<gpux Cached of a ndarray>"
    f = k.submit(1, 8, (np.uint64(8), a, a))
    f.result()
    assert repr(f) == f"<gpux.Future on device {f.device}: done>"
    assert repr(f.request) == f"<gpux Request on device {f.device}: done>"
    assert "grid (1, 1, 1), block (8, 1, 1)" in repr(k.prepare(1, 8, (np.uint64(8), a, a)))


def test_queues_and_contexts_take_priorities_and_shares(kernels):
    add1 = kernels.get_function("add1")
    x = gpux.zeros(256, np.float32)
    out = gpux.zeros(256, np.float32)
    for q in (gpux.Queue(0, priority=gpux.PRIORITY_MAX), gpux.Queue(0, share=25),
              gpux.Queue(0, priority=gpux.PRIORITY_MIN, share=50)):
        add1(1, 256, (np.uint64(x.size), x, out), queue=q)
        assert (out == 1).all()
        out[:] = 0
    for bad in ({"priority": gpux.PRIORITY_MAX + 1}, {"priority": gpux.PRIORITY_MIN - 1},
                {"share": gpux.SHARE_MAX + 1}):
        with pytest.raises(ValueError):
            gpux.Queue(0, **bad)
        with pytest.raises(ValueError):
            gpux.Context(**bad)
    # gpuxd's own user: every priority, 0 by default; a context's default queues.
    ctx = gpux.Context(priority=1, share=10)
    assert ctx.priority_limits() == (gpux.PRIORITY_MAX, 0)
    ctx.set_default_queue(priority=gpux.PRIORITY_MIN)
    ctx.set_default_queue()
    with pytest.raises(TypeError):
        gpux.Queue(0, None, 2)


def test_times_are_named(kernels):
    f = kernels.get_function("spin").submit(1, 1, (np.uint32(2),))
    assert f.times is None or f.done()
    f.result()
    t = f.times
    assert isinstance(t, gpux.Times) and t.run_ns >= 2_000_000 and t.queue_ns >= 0
    assert t.device_ns > 0 and tuple(t) == (t.queue_ns, t.run_ns, t.device_ns)


class Holder(bytearray):
    """Memory that a request uses, with a __dict__ to close a cycle through."""


def test_cycles_through_requests_arguments_and_kernels_are_collected(kernels):
    gc.collect()
    # Through an argument wrapper.
    h = Holder(64)
    h.arg = gpux.InOut(h)
    refs = [weakref.ref(h)]
    # Through a running request: holder -> future -> request -> its arguments -> holder.
    h = Holder(16)
    h.fut = kernels.get_function("spin").submit(1, 1, (np.uint32(50),))
    h.fut2 = gpux.Module(r"""
        GPUX_HOST_KERNEL(mark) { char *p = GPUX_ARG(char *, 0); p[0] = 7; }
    """, "host").get_function("mark").submit(1, 1, (h,))
    refs.append(weakref.ref(h))
    # Through a kernel and what made it.
    m = gpux.Module(kernels.code, "host")
    m.k = m.get_function("add1")
    refs.append(weakref.ref(m))
    del h, m
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
