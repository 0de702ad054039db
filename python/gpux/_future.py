# SPDX-License-Identifier: MIT
"""Futures of submitted requests, for concurrent.futures and asyncio.

A Future is a concurrent.futures.Future. ``result()`` waits in the calling thread (the GIL
released), with no thread of gpux's in between. Something must also complete futures that
nobody waits on that way: ``concurrent.futures.wait``/``as_completed``, done callbacks, and
``await``. For those, a watcher per context and process takes in completions from the
context's pollable fd (``Context.fd()``): in an asyncio loop as a reader of that fd
(``loop.add_reader``), otherwise in one daemon thread that polls it. A thread blocked in a
gpux call takes in completions too, and then the fd says nothing: the context tells the
watcher when such a call starts and ends (an eventfd), and meanwhile the watcher looks every
millisecond.
"""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import select
import threading
import weakref
from typing import Any, Callable, Optional

from . import _gpux

__all__ = ["Future"]

_RUNNING = "RUNNING"
_FINISHED = "FINISHED"
# While another thread is in a blocking gpux call: how often the watcher looks.
_BUSY_POLL_S = 0.001


class _Waiters(list):
    """Future._waiters: concurrent.futures.wait() and as_completed() append to it; a future
    with a waiter must be completed by the watcher."""

    def __init__(self, future: "Future") -> None:
        super().__init__()
        self._future = weakref.ref(future)

    def append(self, waiter: Any) -> None:
        super().append(waiter)
        f = self._future()
        if f is not None:
            f._watch()


# Guards the lazy making of a future's Condition (see Future.__getattr__).
_lazy_lock = threading.Lock()


class Future(cf.Future):
    """A request submitted without waiting (``Kernel.submit``): a concurrent.futures.Future
    whose result is None once the request succeeded, or raises its gpux.GpuxError.

    ``result(timeout)`` waits for it; it also works with ``concurrent.futures.wait``,
    ``as_completed``, ``add_done_callback`` and ``await`` (in an asyncio loop, through the
    context's pollable fd). It cannot be cancelled: gpux has no way to call a request back.
    A future dropped before its request finished waits for it when it is collected, so that
    the memory the request uses stays valid meanwhile.
    """

    def __init__(self, request: _gpux.Request, context: _gpux.Context) -> None:
        # concurrent.futures.Future's state, but its Condition (a microsecond and more to
        # make) only once something waits through it: result() here waits on the request.
        self._state = _RUNNING
        self._result = None
        self._exception: Optional[BaseException] = None
        self._done_callbacks: list = []
        self._request = request
        self._context = context
        self._watched = False
        self._completing = False

    def __getattr__(self, name: str) -> Any:
        if name in ("_condition", "_waiters"):
            with _lazy_lock:
                d = self.__dict__
                if "_condition" not in d:
                    d["_waiters"] = _Waiters(self)
                    d["_condition"] = threading.Condition()
                return d[name]
        raise AttributeError(name)

    # The request's side.

    def _complete(self) -> bool:
        """If the request has finished, finish this future (once). Returns done."""
        if self._state == _FINISHED:
            return True
        req = self._request
        if not req.done:
            return False
        exc: Optional[BaseException] = None
        try:
            req.check()
        except BaseException as e:
            exc = e
        with _lazy_lock:
            if self._state == _FINISHED:
                return True
            if "_condition" not in self.__dict__:
                # Nothing can wait on a Condition not made yet, nor has callbacks.
                self._exception = exc
                self._state = _FINISHED
                return True
        with self._condition:
            if self._completing:
                self._condition.wait_for(lambda: self._state == _FINISHED)
                return True
            self._completing = True
        if exc is None:
            self.set_result(None)
        else:
            self.set_exception(exc)
        return True

    def _poll(self) -> bool:
        if self._state == _FINISHED:
            return True
        self._request.wait(0)
        return self._complete()

    def _watch(self) -> None:
        if not self._watched and self._state != _FINISHED:
            self._watched = True
            _watcher(self._context).add(self)

    # concurrent.futures.Future.

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        if self._state == _FINISHED:
            return True
        done = self._poll()
        _recheck(self._context)
        return done

    def running(self) -> bool:
        return not self.done()

    def _wait(self, timeout: Optional[float]) -> None:
        if self._state != _FINISHED:
            if self._request.wait(timeout):
                self._complete()
            _recheck(self._context)
            if self._state != _FINISHED:
                raise cf.TimeoutError()

    def result(self, timeout: Optional[float] = None) -> Any:
        self._wait(timeout)
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        self._wait(timeout)
        return self._exception

    def add_done_callback(self, fn: Callable[["Future"], Any]) -> None:
        self._condition  # made now: a callback is called by set_result
        self._poll()
        super().add_done_callback(fn)
        self._watch()

    def __await__(self):
        if self._state != _FINISHED and not self._poll():
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            _watcher(self._context).add_async(self, loop, waiter)
            yield from waiter
        return self.result()

    # The request's facts.

    @property
    def request(self) -> _gpux.Request:
        return self._request

    @property
    def device(self) -> int:
        """The device the request was sent to."""
        return self._request.device

    @property
    def times(self) -> Optional[tuple[int, int, int]]:
        """(queue_ns, run_ns, device_ns) once finished (device_ns on a GPU: timed=True)."""
        return self._request.times


# ---- watchers ----

class _Watcher:
    """Completes watched futures of one context in one process (see the module's doc)."""

    def __init__(self, context: _gpux.Context) -> None:
        self.context = context
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.futures: set[Future] = set()
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.thread: Optional[threading.Thread] = None
        self.notify = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self.timer: Optional[asyncio.TimerHandle] = None
        context._set_notify_fd(self.notify)

    def add(self, f: Future) -> None:
        with self.lock:
            self.futures.add(f)
            loop = self.loop
            if loop is None and self.thread is None:
                self.thread = threading.Thread(target=self._run, name="gpux-watcher",
                                               daemon=True)
                self.thread.start()
        if loop is not None:
            loop.call_soon_threadsafe(self.check)
        else:
            os.eventfd_write(self.notify, 1)

    def add_async(self, f: Future, loop: asyncio.AbstractEventLoop,
                  waiter: "asyncio.Future[None]") -> None:
        def wake(_: Future) -> None:
            if loop.is_closed():
                return
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                _set_waiter(waiter)
            else:
                loop.call_soon_threadsafe(_set_waiter, waiter)

        cf.Future.add_done_callback(f, wake)
        with self.lock:
            if self.loop is None and self.thread is None:
                self.loop = loop
                loop.add_reader(self.context.fd(), self.check)
                loop.add_reader(self.notify, self._on_notify)
        f._watched = True
        self.add(f)

    def check(self) -> None:
        """Take in what arrived and complete what finished."""
        try:
            self.context.process()
        except Exception:
            # A lost connection fails the requests themselves; they say so below.
            pass
        with self.lock:
            pending = list(self.futures)
        done = [f for f in pending if f._poll()]
        if done:
            with self.lock:
                self.futures.difference_update(done)
        if self.loop is not None:
            self._rearm()

    def _on_notify(self) -> None:
        try:
            os.eventfd_read(self.notify)
        except BlockingIOError:
            pass
        self.check()

    def _rearm(self) -> None:
        # Look again soon while another thread's blocking call may take our completions.
        if self.futures and self.context._blocking and self.timer is None:
            def again() -> None:
                self.timer = None
                self.check()

            self.timer = self.loop.call_later(_BUSY_POLL_S, again)

    def _run(self) -> None:
        fd = self.context.fd()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(self.notify, select.POLLIN)
        while True:
            with self.lock:
                idle = not self.futures
            busy = self.context._blocking > 0
            events = poller.poll(None if idle and not busy else
                                 (_BUSY_POLL_S * 1000 if busy else None))
            for efd, _ in events:
                if efd == self.notify:
                    try:
                        os.eventfd_read(self.notify)
                    except BlockingIOError:
                        pass
            self.check()


def _set_waiter(waiter: "asyncio.Future[None]") -> None:
    if not waiter.done():
        waiter.set_result(None)


_watchers_lock = threading.Lock()
_watchers: dict[int, _Watcher] = {}


def _watcher(context: _gpux.Context) -> _Watcher:
    pid = os.getpid()
    with _watchers_lock:
        w = _watchers.get(id(context))
        if w is None or w.pid != pid or w.context is not context:
            if w is not None and w.pid != pid:
                # Inherited over fork(): its thread and loop are the parent's.
                os.close(w.notify)
            w = _watchers[id(context)] = _Watcher(context)
        return w


def _after_fork_in_child() -> None:
    # The parent's watchers (threads, loops, eventfds) are not this process's.
    for w in _watchers.values():
        w.context._set_notify_fd(-1)
        os.close(w.notify)
    _watchers.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _recheck(context: _gpux.Context) -> None:
    """After this thread took in completions: the watcher may have futures among them."""
    w = _watchers.get(id(context))
    if w is not None and w.futures and w.pid == os.getpid():
        if w.loop is not None:
            w.loop.call_soon_threadsafe(w.check)
        else:
            os.eventfd_write(w.notify, 1)
