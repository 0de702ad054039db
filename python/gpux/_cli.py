# SPDX-License-Identifier: MIT
"""The `gpux` command of a pip-installed gpux: the C program inside the package, run as is."""
import os
import sys


def _program() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    # Inside the package (a wheel), or in the build tree: build/python/gpux -> build/gpux.
    for path in (os.path.join(here, "gpux"), os.path.join(here, "..", "..", "gpux")):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise SystemExit("gpux: the gpux program is not inside the package " + here)


def main() -> None:
    path = _program()
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
