# SPDX-License-Identifier: MIT
"""Pickling gpux arrays as their shared memory, for other processes of the same host.

A pickled gpux array carries no bytes: it names its buffer's memfd, which the receiver
fetches from the sending process over a Unix socket (SCM_RIGHTS) and imports
(gpux_buf_import), so both see one memory. Each process that pickles arrays answers such
requests on an abstract socket, from a daemon thread started on first use; it hands out a
duplicate of the memfd taken when the array was pickled, once, to a process of the same user
(SO_PEERCRED), so that the memory outlives the sender's array until the receiver has it. Any
local process can connect to that socket: one of another user is dropped on arrival, one
that asks for nothing within seconds after, and the thread serves all peers at once. A
pickle that is never unpickled keeps that duplicate (and so the memory) until the sender
exits. Unpickling needs the sender alive, on the same host and network namespace (abstract
sockets live there); anything else raises gpux.ShareError: send np.asarray(a) (a copy)
across hosts.

A receiver that already has the memory (the sender itself, a forked child that inherited an
array pickled before the fork, or a second array of the same buffer) uses the buffer it has.
"""
from __future__ import annotations

import os
import secrets
import selectors
import socket
import struct
import threading
import time
import weakref
from typing import Any, Optional

import numpy as np

from . import _gpux
from ._errors import ShareError

_VERSION = 1
_CREDS = struct.Struct("3i")
# A peer asks for its memfd as soon as it connects: one that has not within this time is
# dropped. At most this many wait at once (each an fd of this process).
_PEER_TIMEOUT_S = 5.0
_PEERS_MAX = 64


def host_key() -> tuple[str, int]:
    """Where a pickled array's memory can be reached: this boot, this network namespace.
    ``$GPUX_HOST_ID`` makes processes of one machine stand for different hosts (tests of a
    cluster on one machine): those with different values share no memory."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    stand_in = os.environ.get("GPUX_HOST_ID")
    if stand_in:
        boot = f"{boot}/{stand_in}"
    return boot, os.stat("/proc/self/ns/net").st_ino


# ---- the buffers this process knows by memfd ----

_lock = threading.Lock()
# (st_dev, st_ino) of a memfd -> [(Buffer weakref, offset of the buffer in the memfd, size)]
_known: dict[tuple[int, int], list[tuple[weakref.ref, int, int]]] = {}


def _remember(b: _gpux.Buffer, key: tuple[int, int], offset: int) -> None:
    with _lock:
        entries = [e for e in _known.get(key, []) if e[0]() is not None]
        if not any(e[0]() is b for e in entries):
            entries.append((weakref.ref(b), offset, b.size))
        _known[key] = entries


def _lookup(key: tuple[int, int], lo: int, hi: int) -> Optional[tuple[_gpux.Buffer, int]]:
    with _lock:
        for ref, offset, size in _known.get(key, []):
            b = ref()
            if b is not None and offset <= lo and hi <= offset + size:
                return b, offset
    return None


def forget(b: _gpux.Buffer) -> None:
    """A buffer about to change its memfd (freeze): no longer known by the old one."""
    with _lock:
        for key in list(_known):
            _known[key] = [e for e in _known[key] if e[0]() not in (b, None)]
            if not _known[key]:
                del _known[key]


# ---- handing out memfds ----

class _Sharer:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.name = b"\0gpux-share-%d-%s" % (self.pid, secrets.token_hex(8).encode())
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(self.name)
        self.sock.listen(128)
        self.sock.setblocking(False)
        self.exports: dict[bytes, int] = {}
        self.lock = threading.Lock()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ)
        # Connected peers of this user that have not asked yet -> when they must have.
        self.peers: dict[socket.socket, float] = {}
        threading.Thread(target=self._serve, name="gpux-share", daemon=True).start()

    def export(self, fd: int) -> bytes:
        token = secrets.token_bytes(16)
        dup = os.dup(fd)
        with self.lock:
            self.exports[token] = dup
        return token

    def _drop(self, conn: socket.socket) -> None:
        self.selector.unregister(conn)
        del self.peers[conn]
        conn.close()
        if len(self.peers) == _PEERS_MAX - 1:
            self.selector.register(self.sock, selectors.EVENT_READ)

    def _accept(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        try:
            _, uid, _ = _CREDS.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      _CREDS.size))
            conn.setblocking(False)
        except OSError:
            uid = -1
        # Another user's peer is sent away before it can say anything.
        if uid != os.getuid():
            conn.close()
            return
        self.peers[conn] = time.monotonic() + _PEER_TIMEOUT_S
        self.selector.register(conn, selectors.EVENT_READ)
        # Full: the next peers wait in the listen backlog until one of these leaves.
        if len(self.peers) == _PEERS_MAX:
            self.selector.unregister(self.sock)

    def _answer(self, conn: socket.socket) -> None:
        try:
            token = conn.recv(64)
        except OSError:
            return
        with self.lock:
            fd = self.exports.pop(token, None)
        if fd is None:
            try:
                conn.send(b"N")
            except OSError:
                pass
            return
        try:
            socket.send_fds(conn, [b"Y"], [fd])
        except OSError:
            # Not handed out: kept for the receiver's next try.
            with self.lock:
                self.exports[token] = fd
            return
        os.close(fd)

    def _serve(self) -> None:
        """Every peer at once, none blocking: a peer that says nothing in its time (or is
        another user) holds up no other process's unpickling."""
        while True:
            now = time.monotonic()
            for conn in [c for c, t in self.peers.items() if t <= now]:
                self._drop(conn)
            wait = max(min(self.peers.values()) - now, 0) if self.peers else None
            try:
                events = self.selector.select(wait)
            except OSError:
                return
            for key, _ in events:
                if key.fileobj is self.sock:
                    self._accept()
                elif key.fileobj in self.peers:
                    self._answer(key.fileobj)
                    self._drop(key.fileobj)


_sharer: Optional[_Sharer] = None
_sharer_lock = threading.Lock()


def _get_sharer() -> _Sharer:
    global _sharer
    with _sharer_lock:
        if _sharer is None or _sharer.pid != os.getpid():
            _sharer = _Sharer()
        return _sharer


def _after_fork_in_child() -> None:
    global _sharer, _lock, _sharer_lock
    # The parent's threads are not here: a lock one of them held at fork() stays held.
    _lock = threading.Lock()
    _sharer_lock = threading.Lock()
    # The parent's socket and duplicates are the parent's to serve.
    if _sharer is not None:
        _sharer.sock.close()
        for conn in _sharer.peers:
            conn.close()
        _sharer.selector.close()
        for fd in _sharer.exports.values():
            os.close(fd)
        _sharer = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _fetch(name: bytes, token: bytes) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(30)
        try:
            s.connect(name)
            _, uid, _ = _CREDS.unpack(s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                   _CREDS.size))
            if uid != os.getuid():
                raise ShareError(detail="the array's sender is another user")
            s.send(token)
            msg, fds, _, _ = socket.recv_fds(s, 16, 1)
        except OSError as e:
            raise ShareError(detail="the process that pickled this gpux array is gone or "
                             f"unreachable ({e}); it must live until the array is unpickled"
                             ) from None
    if msg != b"Y" or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise ShareError(detail="this pickled gpux array was unpickled before: its memory is "
                         "handed out once (pickle it again for another receiver)")
    return fds[0]


# ---- pickling ----

def _span(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """The bytes an array reaches, relative to its first element."""
    lo = hi = 0
    for n, st in zip(shape, strides):
        if n == 0:
            return 0, 0
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return lo, hi + itemsize


def reduce_array(a: np.ndarray) -> Optional[tuple]:
    """What pickle stores for a gpux array, or None when it is not in gpux memory."""
    from ._core import buffer_of

    b = buffer_of(a)
    if b is None:
        return None
    fd, boff = b.fd()
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    _remember(b, key, boff)
    offset = boff + a.__array_interface__["data"][0] - b.address
    sharer = _get_sharer()
    ref = (_VERSION, host_key(), sharer.name, sharer.export(fd), key, offset)
    return (_rebuild, (ref, a.dtype, a.shape, a.strides, not a.flags.writeable,
                       type(a).__name__ == "ndarray"))


def _rebuild(ref: tuple, dtype: np.dtype, shape: tuple[int, ...], strides: tuple[int, ...],
             readonly: bool, gpux_type: bool = True) -> Any:
    from ._core import ndarray

    version, host, name, token, key, offset = ref
    if version != _VERSION:
        raise ShareError(detail=f"a gpux array pickled by another version ({version})")
    if tuple(host) != host_key():
        raise ShareError(detail="a gpux array pickled on another host (or network namespace) "
                         "cannot be attached here: send np.asarray(a) across hosts")
    fd = _fetch(name, token)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != tuple(key):
            raise ShareError(detail="the fd received is not the array's memory")
        lo, hi = _span(shape, strides, dtype.itemsize)
        found = _lookup(tuple(key), offset + lo, offset + hi)
        if found is None:
            b = _gpux.Buffer._import(fd)
            _remember(b, tuple(key), 0)
            found = (b, 0)
    finally:
        os.close(fd)
    b, boff = found
    a = np.ndarray.__new__(ndarray, shape, dtype, buffer=b, offset=offset - boff,
                           strides=strides)
    if readonly:
        a.flags.writeable = False
    return a
