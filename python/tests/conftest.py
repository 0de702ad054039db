# SPDX-License-Identifier: MIT
# The Python tests' gpuxd: a private one on the host back end (two CPU "devices"), on a socket
# in a temporary folder that every process of the tests (forked, spawned, Dask's) reaches
# through $GPUX_SOCKET.
import os
import subprocess
import time

import pytest

# The sanitizer builds' suite preloads AddressSanitizer's runtime into Python, and so into
# every process Python starts.
ASAN_PRELOADED = "libasan" in os.environ.get("LD_PRELOAD", "")

ADD1_KERNEL = r"""
GPUX_HOST_PARAMS(add1, 8, sizeof(float *), sizeof(float *));
GPUX_HOST_KERNEL(add1)
{
	uint64_t n = GPUX_ARG(uint64_t, 0);
	const float *in = GPUX_ARG(const float *, 1);
	float *out = GPUX_ARG(float *, 2);
	GPUX_FOR_EACH_THREAD(t) { uint64_t i = GPUX_GLOBAL_X(t); if (i < n) out[i] = in[i] + 1; }
}
"""

HOST_KERNELS = r"""
#include <time.h>
GPUX_HOST_PARAMS(saxpy, 8, 4, sizeof(float *), sizeof(float *), sizeof(float *));
GPUX_HOST_KERNEL(saxpy)
{
	uint64_t n = GPUX_ARG(uint64_t, 0);
	float a = GPUX_ARG(float, 1);
	const float *x = GPUX_ARG(const float *, 2), *y = GPUX_ARG(const float *, 3);
	float *out = GPUX_ARG(float *, 4);
	GPUX_FOR_EACH_THREAD(t) {
		uint64_t i = GPUX_GLOBAL_X(t);
		if (i < n) out[i] = a * x[i] + y[i];
	}
}
GPUX_HOST_PARAMS(scale, 8, 8, sizeof(double *));
GPUX_HOST_KERNEL(scale)
{
	uint64_t n = GPUX_ARG(uint64_t, 0);
	double a = GPUX_ARG(double, 1);
	double *x = GPUX_ARG(double *, 2);
	GPUX_FOR_EACH_THREAD(t) {
		uint64_t i = GPUX_GLOBAL_X(t);
		if (i < n) x[i] *= a;
	}
}
GPUX_HOST_PARAMS(block_sum, 8, sizeof(float *), sizeof(double *));
GPUX_HOST_KERNEL(block_sum)
{
	uint64_t n = GPUX_ARG(uint64_t, 0);
	const float *x = GPUX_ARG(const float *, 1);
	double *out = GPUX_ARG(double *, 2), *sh = gpux->shared;
	GPUX_FOR_EACH_THREAD(t) {
		uint64_t i = GPUX_GLOBAL_X(t);
		sh[t.x] = i < n ? x[i] : 0.0;
	}
	for (uint32_t s = gpux->block_dim.x / 2; s > 0; s /= 2)
		GPUX_FOR_EACH_THREAD(t)
			if (t.x < s) sh[t.x] += sh[t.x + s];
	out[gpux->block_idx.x] = sh[0];
}
""" + ADD1_KERNEL + r"""
GPUX_HOST_PARAMS(append, 4, sizeof(uint32_t *));
GPUX_HOST_KERNEL(append)
{
	uint32_t *log = GPUX_ARG(uint32_t *, 1);
	log[1 + log[0]++] = GPUX_ARG(uint32_t, 0);
}
GPUX_HOST_PARAMS(spin, 4);
GPUX_HOST_KERNEL(spin)
{
	uint32_t ms = GPUX_ARG(uint32_t, 0);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000000 + (b.tv_nsec - a.tv_nsec) < ms * 1000000ll);
}
GPUX_HOST_PARAMS(crash, sizeof(float *));
GPUX_HOST_KERNEL(crash)
{
	volatile float *p = GPUX_ARG(float *, 0);
	p[-(1L << 40)] = 1;
}
GPUX_HOST_KERNEL(empty)
{
}
"""


def gpuxd_path() -> str:
    """$GPUX_DAEMON (meson test sets it), else the package's own (a wheel holds it)."""
    import gpux

    path = os.environ.get("GPUX_DAEMON")
    if path:
        return path
    path = os.path.join(os.path.dirname(gpux.__file__), "gpuxd")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no gpuxd inside the package ({path}) and GPUX_DAEMON is not set")
    return path


def start_gpuxd(d, *args):
    """A gpuxd of its own on d/gpuxd.sock, given args, once every device is ready:
    (process, socket). The log is d/gpuxd.log."""
    import gpux

    sock = str(d / "gpuxd.sock")
    log = open(d / "gpuxd.log", "wb")
    proc = subprocess.Popen([gpuxd_path(), "--socket", sock, "--cache-dir", str(d / "cache"), *args],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            ctx = gpux.Context(sock)
            if ctx.device_count() and all(ctx.device_info(i)["state"] == 2
                                          for i in range(ctx.device_count())):
                break
        except gpux.GpuxError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("gpuxd did not start: " + (d / "gpuxd.log").read_text())
        time.sleep(0.02)
    del ctx
    return proc, sock


def stop_gpuxd(proc, d):
    proc.terminate()
    assert proc.wait(30) == 0, (d / "gpuxd.log").read_text()


@pytest.fixture(scope="session", autouse=True)
def daemon(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpuxd")
    proc, sock = start_gpuxd(d, "--backend", "host", "--host-devices", "2")
    os.environ["GPUX_SOCKET"] = sock
    yield sock
    stop_gpuxd(proc, d)


@pytest.fixture(scope="session")
def kernels():
    import gpux

    return gpux.Module(HOST_KERNELS, "host")


def settle(kernels, device):
    """After a test killed a device's worker (a fault, a deadline): wait until a kernel runs
    there again. Requests sent while it died are lost (gpux.WorkerLostError), as documented."""
    import gpux

    deadline = time.monotonic() + 30
    while True:
        try:
            kernels.get_function("empty")(1, 1, device=device)
            return
        except gpux.WorkerLostError:
            assert time.monotonic() < deadline
