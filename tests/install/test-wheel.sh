#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/install/test-wheel.sh: the Python package as pip users get it. A wheel built from this
# tree (pip wheel, meson-python), tagged cp311-abi3, installed into fresh venvs of two Python
# versions, where the `gpux` command works and the package's own tests pass with no variable
# set (python -m pytest --pyargs gpux finds the package's own gpuxd).
# Usage: test-wheel.sh SRCDIR PYTHON SANITIZED
# Skips (77), saying why, only where it cannot run: a sanitized build (the wheel is built
# without sanitizers: the plain build tests it), PyPI out of reach (meson-python, numpy and
# pytest come from there), or no second Python version of 3.11 or later on this machine.
set -eu
src=$1 py=$2 sanitized=$3
skip() { echo "skipped: $*"; exit 77; }
fail() { echo "test-wheel: $*" >&2; exit 1; }
[ "$sanitized" = false ] || skip "a sanitized build: the plain build tests the wheel"

version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
mine=$(version "$py")
# Another version: on the PATH, else one of pyenv's.
other=
for p in $(command -v python3.13 python3.12 python3.11 2>/dev/null || true) \
	 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[1-9]*/bin/python3; do
	[ -x "$p" ] || continue
	v=$(version "$p") || continue
	case $v in 3.1[1-9]) ;; *) continue ;; esac
	[ "$v" != "$mine" ] && "$p" -c 'import venv, ensurepip' 2>/dev/null && { other=$p; break; }
done
[ -n "$other" ] || skip "no Python of 3.11 or later but $mine here (on the PATH or in pyenv)"

tmp=$(mktemp -d /tmp/gpux-wheel-XXXXXX)
daemon=
cleanup() {
	[ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon"
	rm -rf "$tmp"
}
trap cleanup EXIT
"$py" -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/probe" \
	meson-python >/dev/null 2>&1 || skip "PyPI cannot be reached (pip download failed)"

echo "== pip wheel, with $py ($mine)"
"$py" -m pip wheel --quiet --no-deps --disable-pip-version-check -w "$tmp/dist" "$src" ||
	fail "pip wheel failed"
whl=$(ls "$tmp"/dist/gpux-*-cp311-abi3-linux_*.whl 2>/dev/null) ||
	fail "no wheel tagged cp311-abi3: $(ls "$tmp/dist")"
echo "$whl"

# Nothing of the build tree's or of the caller's gpuxd: the package finds its own.
unset GPUX_DAEMON GPUX_WORKER GPUX_SOCKET GPUX_CUDA_LIB PYTHONPATH LD_PRELOAD ASAN_OPTIONS
export XDG_RUNTIME_DIR="$tmp/rt"
mkdir -m 0700 "$tmp/rt"
for p in "$py" "$other"; do
	v=$(version "$p")
	venv=$tmp/venv-$v
	echo "== Python $v: a fresh venv"
	"$p" -m venv "$venv"
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$whl" pytest ||
		fail "pip install on Python $v failed"
	"$venv/bin/gpux" --version || fail "the gpux command failed on Python $v"
	pkg=$("$venv/bin/python" -c 'import gpux, os; print(os.path.dirname(gpux.__file__))')
	"$pkg/gpuxd" --socket "$tmp/rt/gpuxd.sock" --cache-dir "$tmp/cache" \
		--backend host >"$tmp/gpuxd.log" 2>&1 &
	daemon=$!
	for _ in $(seq 100); do
		[ -S "$tmp/rt/gpuxd.sock" ] && break
		sleep 0.1
	done
	"$venv/bin/gpux" status --socket "$tmp/rt/gpuxd.sock" ||
		fail "gpux status failed on Python $v: $(cat "$tmp/gpuxd.log")"
	kill "$daemon"
	wait "$daemon" || true
	daemon=
	(cd "$tmp" && "$venv/bin/python" -m pytest --pyargs gpux -q -p no:cacheprovider -rs) ||
		fail "the package's tests failed on Python $v"
done
echo "the wheel works on Python $mine and $(version "$other")"
