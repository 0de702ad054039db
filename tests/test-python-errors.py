#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/test-python-errors.py: python/gpux/_errors.py has every status of ipc/proto-schema.h.

Usage: test-python-errors.py STATUS-TABLE ERRORS-PY. STATUS-TABLE is tests/status-table.c
built: it prints the C table's rows; ERRORS-PY is read as a file, so that no built
extension is needed.
"""
import importlib.util
import subprocess
import sys


def main() -> int:
    table, path = sys.argv[1], sys.argv[2]
    rows = []
    for line in subprocess.run([table], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        name, value, label = line.split()
        rows.append((name, int(value), label))

    spec = importlib.util.spec_from_file_location("gpux_errors", path)
    errors = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(errors)

    bad = []
    want = {}
    for name, value, label in rows:
        const = name.removeprefix("GPUX_")
        want[const] = value
        if getattr(errors, const, None) != value:
            bad.append(f"{const} is {getattr(errors, const, None)!r}, not {value}")
        if value == 0:
            continue
        cls = errors.BY_STATUS.get(value)
        if cls is None:
            bad.append(f"no exception class for {name} ({value})")
        elif not (cls.__doc__ or "").startswith(name + ":"):
            bad.append(f"{cls.__name__} says it is not {name}: {cls.__doc__!r}")
    have = {k: v for k, v in vars(errors).items()
            if (k == "OK" or k.startswith("E_")) and isinstance(v, int)}
    for const in sorted(set(have) - set(want)):
        bad.append(f"{const} = {have[const]} is no status of the C library")
    extra = set(errors.BY_STATUS) - {v for v in want.values() if v != 0}
    for value in sorted(extra):
        bad.append(f"BY_STATUS has {value}, no status of the C library")
    for line in bad:
        print(f"python/gpux/_errors.py: {line}", file=sys.stderr)
    print(f"{len(rows)} statuses checked")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
