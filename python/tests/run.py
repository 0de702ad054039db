#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# meson test's entry to the Python tests: pytest over this folder, with the build tree's
# package, library and daemons (meson sets PYTHONPATH, GPUX_DAEMON, GPUX_WORKER). Exits 77,
# a skip, when pytest or numpy is missing (tools/install-deps installs them).
import sys


def main() -> int:
    try:
        import numpy  # noqa: F401
        import pytest
    except ImportError as e:
        print(f"skipped: {e} (tools/install-deps installs it)")
        return 77
    # pytest's 5 (no tests ran) is a failure here, as every other non-zero code.
    # A test that hangs says where every thread waits, before meson's timeout kills it.
    return int(pytest.main([sys.argv[1], "-q", "-p", "no:cacheprovider", "-rs", "-o",
                            "faulthandler_timeout=200"] + sys.argv[2:]))


# Spawned children (multiprocessing, Dask) import this file again as their main module.
if __name__ == "__main__":
    sys.exit(main())
