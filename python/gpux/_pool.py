# SPDX-License-Identifier: MIT
"""A memory pool for shared buffers: the memory of arrays that are gone, kept for new ones."""
from __future__ import annotations

import bisect
import os
import threading
import weakref
from typing import Any, Callable, Optional

import numpy as np

from . import _core, _gpux
from ._errors import OutOfMemoryError, QuotaError

__all__ = ["MemoryPool", "get_default_memory_pool", "set_allocator", "get_allocator"]

# Blocks are sizes rounded up to this (CuPy's unit): a freed block serves an array of its
# size class, or of up to twice less.
_UNIT = 512

# Bumped at every fork, in the parent and the child: a block made before a fork may be in use
# in the other process, so neither hands it out again.
_fork_gen = 0


def _after_fork() -> None:
    global _fork_gen
    _fork_gen += 1


os.register_at_fork(after_in_parent=_after_fork, after_in_child=_after_fork)


class _Block(np.ndarray):
    """The bytes of one block, as handed out: what the arrays made of it hold (their base).
    When the last of them goes, the block goes back to its pool."""


class MemoryPool:
    """Shared buffers kept for reuse, as CuPy's MemoryPool keeps device memory.

    An array made by gpux.empty (zeros, ones, asarray, ...) while the pool is the allocator
    (the default pool is, see gpux.set_allocator) takes a block from it: a freed block of its
    size (rounded up to 512 bytes, or up to twice as large) when there is one, else a new
    gpux buffer. When the array and every view of it are gone, its block comes back to the
    pool rather than being freed: the next array of that size reuses its memory (memfd, mapping,
    and the workers' registration of it on a GPU) with no new buffer. A request that uses an
    array holds it, so a block still in use by a request in flight is never handed out again.

    A block is freed rather than kept when its memory may be seen elsewhere: frozen
    (gpux.freeze), its memfd handed out (pickled to another process, Buffer.fd()), or made
    before a fork (the other process may still use it, so neither side reuses it). When a new
    buffer cannot be had (gpux.QuotaError, gpux.OutOfMemoryError), the free blocks are freed
    and it is tried again. Memory from the pool is not zero-filled when reused: gpux.empty()
    gives whatever was there (as numpy.empty), gpux.zeros() zeroes it.
    """

    def __init__(self, context: Optional[_gpux.Context] = None) -> None:
        self._context = context
        self._lock = threading.RLock()
        self._free: dict[int, list[_gpux.Buffer]] = {}
        self._sizes: list[int] = []  # the keys of _free, sorted
        self._used = 0
        self._free_bytes = 0
        self._nfree = 0
        self._pid = os.getpid()

    @property
    def context(self) -> _gpux.Context:
        """The Context whose buffers it holds (the default one unless given)."""
        return self._context or _core.get_context()

    def malloc(self, nbytes: int) -> _core.ndarray:
        """A gpux array of ``nbytes`` bytes (uint8) from the pool: its block comes back when
        it, and every array made of it, is gone. Not zero-filled when reused."""
        return self._malloc(int(nbytes))[0][:int(nbytes)].view(_core.ndarray)

    def _malloc(self, nbytes: int) -> tuple[_Block, bool]:
        """(the block's bytes, whether they are new, hence zero)."""
        if nbytes < 0:
            raise ValueError("negative size")
        size = max(-(-nbytes // _UNIT) * _UNIT, _UNIT)
        self._check_pid()
        buf = None
        with self._lock:
            i = bisect.bisect_left(self._sizes, size)
            if i < len(self._sizes) and self._sizes[i] <= 2 * size:
                have = self._sizes[i]
                blocks = self._free[have]
                buf = blocks.pop()
                if not blocks:
                    del self._free[have]
                    del self._sizes[i]
                size = have
                self._free_bytes -= size
                self._nfree -= 1
        fresh = buf is None
        if buf is None:
            buf = self._new(size)
        block = np.ndarray.__new__(_Block, (size,), np.uint8, buffer=buf)
        with self._lock:
            self._used += size
        weakref.finalize(block, self._release, buf, size, _fork_gen, self._pid).atexit = False
        return block, fresh

    def _new(self, size: int) -> _gpux.Buffer:
        try:
            return _gpux.Buffer(size, self._context)
        except (QuotaError, OutOfMemoryError):
            # What the pool keeps counts against the same limits: let it go, try again.
            self.free_all_blocks()
            return _gpux.Buffer(size, self._context)

    def _release(self, buf: _gpux.Buffer, size: int, gen: int, pid: int) -> None:
        """A block's last array is gone (any thread, the GIL held)."""
        if pid != os.getpid():
            return  # a forked child's copy of the parent's block: not this pool's to count
        with self._lock:
            self._used -= size
            if gen != _fork_gen or buf.frozen or buf.exported:
                return
            blocks = self._free.get(size)
            if blocks is None:
                blocks = self._free[size] = []
                bisect.insort(self._sizes, size)
            blocks.append(buf)
            self._free_bytes += size
            self._nfree += 1

    def _check_pid(self) -> None:
        """In a forked child: the parent's free blocks are the parent's, and its use too."""
        if self._pid != os.getpid():
            with self._lock:
                self._pid = os.getpid()
                self._free.clear()
                self._sizes.clear()
                self._used = self._free_bytes = self._nfree = 0

    def free_all_blocks(self) -> None:
        """Free the blocks the pool keeps (those in use come back later), and the memory
        libgpuxclient keeps of freed buffers."""
        self._check_pid()
        with self._lock:
            self._free.clear()
            self._sizes.clear()
            self._free_bytes = 0
            self._nfree = 0
        ctx = self._context or _core._default
        if ctx is not None:
            ctx.trim()

    def used_bytes(self) -> int:
        """Bytes of the blocks arrays use now."""
        self._check_pid()
        return self._used

    def free_bytes(self) -> int:
        """Bytes of the blocks kept for reuse."""
        self._check_pid()
        return self._free_bytes

    def total_bytes(self) -> int:
        """used_bytes() + free_bytes()."""
        self._check_pid()
        with self._lock:
            return self._used + self._free_bytes

    def n_free_blocks(self) -> int:
        """How many blocks are kept for reuse."""
        self._check_pid()
        return self._nfree

    def __repr__(self) -> str:
        return (f"<gpux.MemoryPool: {self.used_bytes()} bytes used, {self.free_bytes()} "
                f"free in {self.n_free_blocks()} blocks>")


_default_pool: Optional[MemoryPool] = None
_default_lock = threading.Lock()


def get_default_memory_pool() -> MemoryPool:
    """The pool of the default context (gpux.get_context()), which gpux.empty and the
    functions that make arrays use unless gpux.set_allocator() said otherwise."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = MemoryPool()
        return _default_pool


_Allocator = Callable[[int], Any]


def set_allocator(allocator: Optional[_Allocator] = None) -> None:
    """What gpux.empty (and zeros, ones, full, asarray, array, ...) make arrays of in the
    default context, as CuPy's cupy.cuda.set_allocator: a pool's ``malloc`` (the default
    pool's is the default), any callable that takes a size in bytes and returns a 1-D uint8
    array in gpux memory at least that large, or None for a new gpux buffer per array (freed
    with it)."""
    if allocator is None:
        _core._set_allocator(None, None)
        return
    if not callable(allocator):
        raise TypeError("allocator: a callable (MemoryPool.malloc), or None")
    owner = getattr(allocator, "__self__", None)
    if isinstance(owner, MemoryPool) and getattr(allocator, "__func__", None) is MemoryPool.malloc:
        _core._set_allocator(allocator, owner._malloc)
    else:
        _core._set_allocator(allocator, lambda nbytes: (allocator(nbytes), False))


def get_allocator() -> Optional[_Allocator]:
    """What set_allocator() set (the default pool's malloc unless told otherwise)."""
    return _core._allocator


set_allocator(get_default_memory_pool().malloc)
