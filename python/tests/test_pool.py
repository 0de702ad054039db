# SPDX-License-Identifier: MIT
# The memory pool of shared buffers: what a gone array leaves serves the next one of its
# size, and never memory that a request, another process or a freeze may still see.
import gc
import os
import pickle
import weakref

import numpy as np
import pytest

import gpux

# Holds x until the test sets *go (or 30 s pass), then writes it.
HOLD = r"""
#include <time.h>
GPUX_HOST_PARAMS(hold, sizeof(uint32_t *), sizeof(float *));
GPUX_HOST_KERNEL(hold)
{
	volatile uint32_t *go = GPUX_ARG(uint32_t *, 0);
	float *x = GPUX_ARG(float *, 1);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do clock_gettime(CLOCK_MONOTONIC, &b);
	while (!*go && b.tv_sec - a.tv_sec < 30);
	x[0] = 42;
}
"""


def address(a):
    return a.__array_interface__["data"][0]


@pytest.fixture
def pool():
    """A pool of its own as the allocator, the default one put back after."""
    p = gpux.MemoryPool()
    gpux.set_allocator(p.malloc)
    yield p
    gpux.set_allocator(gpux.get_default_memory_pool().malloc)
    p.free_all_blocks()


def test_default_pool_is_the_allocator():
    assert gpux.get_allocator() == gpux.get_default_memory_pool().malloc
    assert isinstance(gpux.get_default_memory_pool(), gpux.MemoryPool)


def test_freed_memory_serves_the_next_array(pool):
    a = gpux.empty(1000, np.float32)
    where, buf = address(a), gpux.buffer_of(a)
    assert pool.used_bytes() == 4096 and pool.free_bytes() == 0
    a[:] = 7
    del a
    gc.collect()
    assert pool.used_bytes() == 0 and pool.free_bytes() == 4096 and pool.n_free_blocks() == 1
    # A view of the block, as a new array of a size that fits: same memory, same buffer.
    b = gpux.empty((30, 30), np.float32)
    assert address(b) == where and gpux.buffer_of(b) is buf
    assert pool.total_bytes() == 4096 and pool.n_free_blocks() == 0
    # zeros() zeroes what it reuses; empty() leaves it.
    assert b[0, 0] == 7
    del b
    z = gpux.zeros(1000, np.float32)
    assert address(z) == where and not z.any()
    del z
    # Too small a need for the block: a new one.
    small = gpux.empty(10, np.uint8)
    assert address(small) != where
    del small
    pool.free_all_blocks()
    assert pool.free_bytes() == 0 and pool.n_free_blocks() == 0


def test_views_keep_the_block(pool):
    a = gpux.ones((64, 64), np.float64)
    where = address(a)
    row = a[3]
    del a
    gc.collect()
    assert gpux.empty((64, 64), np.float64).__array_interface__["data"][0] != where
    assert row.sum() == 64
    del row
    gc.collect()
    assert address(gpux.empty((64, 64), np.float64)) == where


def test_memory_a_request_uses_is_not_handed_out(pool):
    m = gpux.Module(HOLD, "host")
    go = gpux.Buffer(4)
    x = gpux.zeros(2048, np.float32)
    where = address(x)
    fut = m.get_function("hold").submit(1, 1, (gpux.Mapped(go), x))
    del x
    gc.collect()
    # The request holds the array: its block is not the pool's while it runs.
    y = gpux.zeros(2048, np.float32)
    assert address(y) != where and not fut.done()
    memoryview(go).cast("I")[0] = 1
    fut.result()
    del fut
    gc.collect()
    again = gpux.empty(2048, np.float32)
    assert address(again) == where and again[0] == 42


def test_prepared_launch_holds_its_arrays(pool):
    m = gpux.Module(HOLD, "host")
    go = gpux.ones(1, np.uint32)
    x = gpux.zeros(2048, np.float32)
    where = address(x)
    launch = m.get_function("hold").prepare(1, 1, (go, x))
    del x
    gc.collect()
    assert address(gpux.empty(2048, np.float32)) != where
    launch()
    del launch
    gc.collect()
    assert address(gpux.empty(2048, np.float32)) == where


def test_frozen_or_pickled_memory_is_not_reused(pool):
    a = gpux.ones(4096, np.uint8)
    frozen = weakref.ref(gpux.buffer_of(a))
    gpux.freeze(a)
    del a
    gc.collect()
    # Read-only for ever: freed, not kept.
    assert pool.n_free_blocks() == 0 and frozen() is None
    b = gpux.ones(8192, np.uint8)
    shared = weakref.ref(gpux.buffer_of(b))
    data = pickle.dumps(b)
    del b
    gc.collect()
    # Another process may map it: freed, not kept.
    assert pool.n_free_blocks() == 0 and pool.used_bytes() == 0 and shared() is None
    assert pickle.loads(data).sum() == 8192


def test_memory_from_before_a_fork_is_reused_by_neither(pool):
    a = gpux.full(3000, 5, np.int16)
    inherited = weakref.ref(gpux.buffer_of(a))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            # The child's copy of the parent's block: let go of, kept by nobody.
            del a
            gc.collect()
            b = gpux.empty(3000, np.int16)
            ok = (inherited() is None and pool.n_free_blocks() == 0 and
                  pool.used_bytes() == 6144 and b.size == 3000)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.close(r)
    assert os.waitpid(pid, 0)[1] == 0
    del a
    gc.collect()
    assert pool.n_free_blocks() == 0 and inherited() is None


def test_another_context_or_no_pool(pool):
    a = gpux.empty(100, np.int64, context=gpux.Context())
    assert pool.used_bytes() == 0
    gpux.set_allocator(None)
    b = gpux.empty(100, np.int64)
    assert pool.used_bytes() == 0 and not b.any()
    with pytest.raises(TypeError):
        gpux.set_allocator(42)
    del a, b
