# SPDX-License-Identifier: MIT
"""gpux's exceptions: one class per status of include/gpux/gpux.h, all GpuxError."""
from __future__ import annotations

__all__ = [
    "GpuxError", "InvalidError", "OutOfMemoryError", "ProtocolError", "ConnectError",
    "PermissionError_", "NoDeviceError", "WorkerLostError", "KernelFaultError",
    "DeadlineError", "CompileError", "KernelNotFoundError", "QuotaError", "NoDriverError",
    "DeviceError", "IOError_", "VersionError", "StoppingError", "NotFinishedError",
    "ShareError", "DeviceBufferLostError",
]

# The C library's statuses (gpux_status).
OK = 0
E_INVAL = -1
E_NOMEM = -2
E_PROTO = -3
E_CONNECT = -4
E_PERM = -5
E_NODEV = -6
E_WORKER_LOST = -7
E_KERNEL_FAULT = -8
E_TIMEOUT = -9
E_COMPILE = -10
E_NOTFOUND = -11
E_QUOTA = -12
E_AGAIN = -13
E_NODRIVER = -14
E_DEVICE = -15
E_IO = -16
E_VERSION = -17
E_STOPPING = -18
E_DBUF_LOST = -19


class GpuxError(Exception):
    """A gpux call or request failed.

    ``status`` is the C library's gpux_status (a negative int), ``reason`` its short English
    text (gpux_strerror) and ``detail`` the worker's message for the request: the compiler's
    log, the CUDA error, the bad argument; or ''.
    """

    status: int
    reason: str
    detail: str

    def __init__(self, status: int, detail: str = "") -> None:
        from . import _gpux

        self.status = status
        self.reason = _gpux.strerror(status)
        self.detail = detail
        super().__init__(status, detail)

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason

    def __reduce__(self):
        return (type(self), (self.status, self.detail))


class InvalidError(GpuxError, ValueError):
    """GPUX_E_INVAL: an argument or request field is not valid."""


class OutOfMemoryError(GpuxError, MemoryError):
    """GPUX_E_NOMEM: out of host or device memory."""


class ProtocolError(GpuxError):
    """GPUX_E_PROTO: the peer broke the protocol; the connection was dropped."""


class ConnectError(GpuxError, ConnectionError):
    """GPUX_E_CONNECT: gpuxd could not be reached or started."""


class PermissionError_(GpuxError, PermissionError):
    """GPUX_E_PERM: gpuxd refused this user."""


class NoDeviceError(GpuxError):
    """GPUX_E_NODEV: no such device, or the device has failed."""


class WorkerLostError(GpuxError):
    """GPUX_E_WORKER_LOST: the worker died while the request was in flight."""


class KernelFaultError(GpuxError):
    """GPUX_E_KERNEL_FAULT: the kernel faulted (illegal address, ...); see detail."""


class DeadlineError(GpuxError, TimeoutError):
    """GPUX_E_TIMEOUT: the request ran past its deadline."""


class CompileError(GpuxError):
    """GPUX_E_COMPILE: the module did not compile; ``log`` is the compiler's log."""

    @property
    def log(self) -> str:
        return self.detail


class KernelNotFoundError(GpuxError, LookupError):
    """GPUX_E_NOTFOUND: no kernel of that name in the module."""


class QuotaError(GpuxError):
    """GPUX_E_QUOTA: a per-client limit was reached."""


class NoDriverError(GpuxError):
    """GPUX_E_NODRIVER: the device's driver is missing or too old."""


class DeviceError(GpuxError):
    """GPUX_E_DEVICE: the device refused the work; see detail."""


class IOError_(GpuxError, OSError):
    """GPUX_E_IO: a system call failed."""


class VersionError(GpuxError):
    """GPUX_E_VERSION: gpuxd speaks no protocol version this library knows."""


class StoppingError(GpuxError):
    """GPUX_E_STOPPING: gpuxd is stopping: it finishes what it has and takes nothing new."""


class DeviceBufferLostError(GpuxError):
    """GPUX_E_DBUF_LOST: the device buffer was lost with its worker, which restarted
    (allocate it again; one kept in host memory survives)."""


class NotFinishedError(GpuxError):
    """GPUX_E_AGAIN: the request has not finished (Future.result(timeout) raises
    concurrent.futures.TimeoutError instead; gpux itself raises this for nothing else)."""


class ShareError(GpuxError):
    """A pickled gpux array cannot be attached here: another host, or its memory is gone."""

    def __init__(self, status: int = E_INVAL, detail: str = "") -> None:
        super().__init__(status, detail)


BY_STATUS: dict[int, type[GpuxError]] = {
    E_INVAL: InvalidError,
    E_NOMEM: OutOfMemoryError,
    E_PROTO: ProtocolError,
    E_CONNECT: ConnectError,
    E_PERM: PermissionError_,
    E_NODEV: NoDeviceError,
    E_WORKER_LOST: WorkerLostError,
    E_KERNEL_FAULT: KernelFaultError,
    E_TIMEOUT: DeadlineError,
    E_COMPILE: CompileError,
    E_NOTFOUND: KernelNotFoundError,
    E_QUOTA: QuotaError,
    E_NODRIVER: NoDriverError,
    E_DEVICE: DeviceError,
    E_IO: IOError_,
    E_VERSION: VersionError,
    E_STOPPING: StoppingError,
    E_DBUF_LOST: DeviceBufferLostError,
    E_AGAIN: NotFinishedError,
}
