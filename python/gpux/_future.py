# SPDX-License-Identifier: MIT
"""Futures of submitted requests, for concurrent.futures and asyncio.

A Future is a concurrent.futures.Future. ``result()`` waits in the calling thread (the GIL
released), with no thread of gpux's in between. Something must also complete futures that
nobody waits on that way: ``concurrent.futures.wait``/``as_completed``, done callbacks, and
``await``. For those, a watcher per context and process takes in completions from the
context's pollable fd (``Context.fd()``): for awaits, as a reader of the running asyncio
loop (``loop.add_reader``), otherwise in one daemon thread that polls it. Any other gpux
call that waits (or ``done()``, ``Context.process()``) takes in completions too, and then
the fd says nothing: the context tells the watcher when such a call starts and ends (an
eventfd), and meanwhile a watcher with futures to complete looks every millisecond. A
watcher with none looks at nothing.
"""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import select
import threading
import weakref
from typing import Any, Callable, NamedTuple, Optional

from . import _gpux

__all__ = ["Future", "Times"]


class Times(NamedTuple):
    """A finished request's timings, in nanoseconds (gpux.h's struct gpux_times)."""
    queue_ns: int   #: from its arrival at the worker to the start of its work
    run_ns: int     #: the worker's wall time for copies, launch and copies back
    device_ns: int  #: the device's own time for that work (on a GPU: launched timed=True)

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
        # make) and its list of callbacks only once something waits through it or adds one:
        # result() here waits on the request. Every container made here is one more object
        # for Python's cycle collector to look at, each time it runs, while the future lives:
        # with 50,000 futures in flight it took a third of the time of their submits.
        self._state = _RUNNING
        self._result = None
        self._exception: Optional[BaseException] = None
        self._request = request
        self._context = context
        self._watched = False
        self._completing = False

    def __getattr__(self, name: str) -> Any:
        if name in ("_condition", "_waiters", "_done_callbacks"):
            with _lazy_lock:
                d = self.__dict__
                if "_condition" not in d:
                    d["_waiters"] = _Waiters(self)
                    d["_condition"] = threading.Condition()
                    d["_done_callbacks"] = []
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
        """Take in what arrived (the watchers are told) and complete this future if done."""
        if self._state == _FINISHED:
            return True
        self._request.wait(0)
        return self._complete()

    def _peek(self) -> bool:
        """Complete this future if what was taken in finished it; takes nothing in."""
        if self._state == _FINISHED:
            return True
        self._request.peek()
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
        return self._poll()

    def running(self) -> bool:
        return not self.done()

    def _wait(self, timeout: Optional[float]) -> None:
        if self._state != _FINISHED:
            if self._request.wait(timeout):
                self._complete()
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
    def times(self) -> Optional[Times]:
        """Times(queue_ns, run_ns, device_ns) once finished, else None (device_ns on a GPU:
        launched with timed=True)."""
        t = self._request.times
        return None if t is None else Times(*t)

    def __repr__(self) -> str:
        if self._state != _FINISHED:
            return f"<gpux.Future on device {self.device}: running>"
        if self._exception is not None:
            return f"<gpux.Future on device {self.device}: failed: {self._exception!r}>"
        return f"<gpux.Future on device {self.device}: done>"


# ---- watchers ----

# A context's notify slots (Context._set_notify_fd): one for each way of watching.
_SLOT_THREAD = 0
_SLOT_LOOP = 1


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _Watcher:
    """Completes the watched futures of one context in one process (see the module's doc).

    Two ways, each with its set of futures and its eventfd, which the context writes when a
    blocking call starts or ends while that set is not empty:

    - the futures awaited in the asyncio loop bound now, through two readers of that loop
      (the context's fd and the eventfd). An await in another loop binds that one instead
      once the bound one has stopped (asyncio.run() after asyncio.run());
    - one daemon thread, for the rest: concurrent.futures.wait, as_completed, done
      callbacks, and awaits in a loop that runs while the bound one runs too.

    Either, once woken, completes the futures of both. Neither looks at anything while it
    has no futures. The context is held weakly: once it is gone, the thread ends and the
    loop's readers go.
    """

    def __init__(self, context: _gpux.Context) -> None:
        self.ref = weakref.ref(context, self._gone)
        self.pid = os.getpid()
        self.fd = context.fd()
        self.lock = threading.Lock()
        self.futures: set[Future] = set()
        self.thread: Optional[threading.Thread] = None
        self.thread_notify = -1
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.loop_futures: set[Future] = set()
        self.loop_notify = -1
        self.timer: Optional[asyncio.TimerHandle] = None

    # The thread.

    def add(self, f: Future) -> None:
        """Complete f from the thread."""
        start = False
        with self.lock:
            if self.thread is None:
                self.thread_notify = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
                self.thread = threading.Thread(target=self._run, name="gpux-watcher",
                                               daemon=True)
                start = True
            if not self.futures:
                f._context._set_notify_fd(_SLOT_THREAD, self.thread_notify)
            self.futures.add(f)
            os.eventfd_write(self.thread_notify, 1)
        if start:
            self.thread.start()

    def _run(self) -> None:
        idle = select.poll()
        idle.register(self.thread_notify, select.POLLIN)
        busy = select.poll()
        busy.register(self.thread_notify, select.POLLIN)
        busy.register(self.fd, select.POLLIN)
        while True:
            ctx = self.ref()
            if ctx is None:
                break
            with self.lock:
                watching = bool(self.futures)
            # Another thread's blocking call takes in completions that the fd then does not
            # tell of: look every millisecond while one runs, and only then.
            timeout = _BUSY_POLL_S * 1000 if watching and ctx._blocking > 0 else None
            del ctx
            # Futures hold the context: while some are watched, the fd stays open.
            (busy if watching else idle).poll(timeout)
            try:
                os.eventfd_read(self.thread_notify)
            except BlockingIOError:
                pass
            self._check(_SLOT_THREAD)
        with self.lock:
            os.close(self.thread_notify)
            self.thread_notify = -1

    def _check(self, slot: int) -> Optional[_gpux.Context]:
        """Take in what arrived, then complete what finished: of both ways' futures, since
        what one takes in the fd no longer tells the other. Only peeks after taking in, so
        that whatever arrives meanwhile leaves the fd readable. Returns the context while
        futures of this way are left."""
        ctx = self.ref()
        if ctx is None:
            return None
        ctx._take_in()
        with self.lock:
            pending = list(self.futures | self.loop_futures)
        done = [f for f in pending if f._peek()]
        with self.lock:
            for futures, way in ((self.futures, _SLOT_THREAD), (self.loop_futures, _SLOT_LOOP)):
                futures.difference_update(done)
                if not futures:
                    ctx._set_notify_fd(way, -1)
            if not (self.futures if slot == _SLOT_THREAD else self.loop_futures):
                return None
        return ctx

    # The loop.

    def add_async(self, f: Future, loop: asyncio.AbstractEventLoop,
                  waiter: "asyncio.Future[None]") -> None:
        """Wake waiter, in the running loop, once f is done."""
        def wake(_: Future) -> None:
            if loop.is_closed():
                return
            if _running_loop() is loop:
                _set_waiter(waiter)
            else:
                loop.call_soon_threadsafe(_set_waiter, waiter)

        cf.Future.add_done_callback(f, wake)
        left: set[Future] = set()
        with self.lock:
            old = self.loop
            if old is not loop and (old is None or not old.is_running()):
                # Let go of outside the lock: a future collected waits for its request.
                left, self.loop_futures = self.loop_futures, set()
                self._bind(loop, old)
            mine = self.loop is loop
            if mine:
                if not self.loop_futures:
                    f._context._set_notify_fd(_SLOT_LOOP, self.loop_notify)
                self.loop_futures.add(f)
        if old is not None and not old.is_closed():
            # Stopped, not closed: it may run again, and the awaits in it with it.
            for g in left:
                g._watch()
        del left
        if mine:
            loop.call_soon(self._check_loop, loop)
        else:
            f._watch()

    def _bind(self, loop: asyncio.AbstractEventLoop,
              old: Optional[asyncio.AbstractEventLoop]) -> None:
        # Lock held; old is not running.
        if old is not None and not old.is_closed():
            old.remove_reader(self.fd)
            old.remove_reader(self.loop_notify)
        if self.loop_notify < 0:
            self.loop_notify = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        loop.add_reader(self.fd, self._check_loop, loop)
        loop.add_reader(self.loop_notify, self._on_loop_notify, loop)
        self.loop = loop
        self.timer = None

    def _check_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self.loop:
            return
        ctx = self._check(_SLOT_LOOP)
        # Look again soon while another thread's blocking call may take our completions.
        if ctx is not None and ctx._blocking > 0 and self.timer is None:
            self.timer = loop.call_later(_BUSY_POLL_S, self._again, loop)

    def _again(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is self.loop:
            self.timer = None
            self._check_loop(loop)

    def _on_loop_notify(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            os.eventfd_read(self.loop_notify)
        except BlockingIOError:
            pass
        self._check_loop(loop)

    def _gone(self, _: weakref.ref) -> None:
        # The context is being freed, its fd still open: the thread ends (and closes its
        # eventfd), the loop's readers go.
        if self.pid != os.getpid():
            return
        with self.lock:
            if self.thread_notify >= 0:
                os.eventfd_write(self.thread_notify, 1)
            loop, self.loop = self.loop, None
            notify, self.loop_notify = self.loop_notify, -1
        if loop is None or loop.is_closed():
            if notify >= 0:
                os.close(notify)
            return

        def unbind() -> None:
            if not loop.is_closed():
                loop.remove_reader(self.fd)
                loop.remove_reader(notify)
            os.close(notify)

        if _running_loop() is loop or not loop.is_running():
            unbind()
        else:
            loop.call_soon_threadsafe(unbind)

    def _forget(self) -> None:
        # In a forked child: the parent's thread and loop are not here; its eventfds are.
        for fd in (self.thread_notify, self.loop_notify):
            if fd >= 0:
                os.close(fd)
        self.thread_notify = self.loop_notify = -1


def _set_waiter(waiter: "asyncio.Future[None]") -> None:
    if not waiter.done():
        waiter.set_result(None)


_watchers_lock = threading.Lock()
_watchers: "weakref.WeakKeyDictionary[_gpux.Context, _Watcher]" = weakref.WeakKeyDictionary()


def _watcher(context: _gpux.Context) -> _Watcher:
    with _watchers_lock:
        w = _watchers.get(context)
        if w is None or w.pid != os.getpid():
            w = _watchers[context] = _Watcher(context)
        return w


def _after_fork_in_child() -> None:
    global _watchers_lock, _lazy_lock
    # The parent's threads are not here: a lock one of them held at fork() stays held.
    _watchers_lock = threading.Lock()
    _lazy_lock = threading.Lock()
    # Nor are its watchers' threads and loops (the context forgot their eventfds).
    for w in list(_watchers.values()):
        w._forget()
    _watchers.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)

