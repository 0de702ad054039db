#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-systemd-units.sh: systemd-analyze verify on gpuxd.socket and gpuxd.service as
# meson configured them, ExecStart pointed at the gpuxd just built (verify wants it to
# exist). Exits 77 (skipped) without systemd-analyze.
# Usage: test-systemd-units.sh UNITDIR GPUXD [MANDIR]
set -eu
command -v systemd-analyze >/dev/null || { echo "no systemd-analyze: skipped"; exit 77; }
units=$1 gpuxd=$2 mandir=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

sed "s|^ExecStart=[^ ]*/gpuxd |ExecStart=$gpuxd |" "$units/gpuxd.service" > "$tmp/gpuxd.service"
cp "$units/gpuxd.socket" "$tmp/gpuxd.socket"
grep -q "^ExecStart=$gpuxd " "$tmp/gpuxd.service"
grep -q '^Type=notify$' "$tmp/gpuxd.service"

# Documentation=man:gpuxd(8) is looked up: the page just built, if there is one.
man=--man=no
if [ -n "$mandir" ] && [ -f "$mandir/gpuxd.8" ]; then
	mkdir "$tmp/man8"
	cp "$mandir/gpuxd.8" "$tmp/man8/"
	man=--man=yes
fi
# verify prints its findings and fails on them; warnings about this machine (no NVIDIA
# device classes in /proc/devices) are not findings.
out=$(cd "$tmp" && MANPATH="$tmp" systemd-analyze verify $man gpuxd.socket gpuxd.service 2>&1) || {
	echo "$out"
	exit 1
}
echo "$out"
if echo "$out" | grep -v -e 'char-nvidia' -e '^$' | grep -q .; then
	echo "systemd-analyze verify has findings"
	exit 1
fi
echo "units verified"
