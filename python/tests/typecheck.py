#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# meson test's type check: mypy on the examples, against the package as built (its inline
# annotations and _gpux.pyi), as a user's mypy sees an installed package: errors are looked
# for in the examples only. Exits 77, a skip, without mypy (tools/install-deps installs it).
import os
import subprocess
import sys


def main() -> int:
    try:
        import mypy  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e} (tools/install-deps installs it)")
        return 77
    examples = sys.argv[1]
    files = sorted(os.path.join(examples, f) for f in os.listdir(examples) if f.endswith(".py"))
    return subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent",
                           "--no-incremental", "--cache-dir=" + os.devnull,
                           "--ignore-missing-imports", *files]).returncode


if __name__ == "__main__":
    sys.exit(main())
