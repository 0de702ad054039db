#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/install/test-install.sh: meson install into a staging directory; check what is there;
# build a program outside the tree against it with pkg-config, and run it: it starts the
# installed gpuxd (as a private daemon) and runs a kernel. The stage is used as an install
# into a custom prefix (STAGE/PREFIX): its programs, and the program built with its
# pkg-config file, run without LD_LIBRARY_PATH.
# Usage: test-install.sh BUILDDIR CONSUMER_C PREFIX BINDIR SBINDIR LIBEXECDIR LIBDIR MANDIR
#        UNITDIR SYSUSERSDIR HAVE_MAN SANITIZED COMPLETIONSDIR
set -eu
build=$1 consumer=$2 prefix=$3 bindir=$4 sbindir=$5 libexecdir=$6 libdir=$7 mandir=$8
unitdir=$9 sysusersdir=${10} have_man=${11} sanitized=${12} completionsdir=${13}
tmp=$(mktemp -d /tmp/gpux-install-XXXXXX)
stage=$tmp/stage
daemon=
bench_daemon=
cleanup() {
	# The private gpuxd is not our child (it daemonized): it writes in $tmp (its log, its
	# socket) until it is gone, which a loaded machine may take seconds to see.
	if [ -n "$daemon" ] && kill "$daemon" 2>/dev/null; then
		n=0
		while kill -0 "$daemon" 2>/dev/null && [ "$n" -lt 200 ]; do
			sleep 0.05
			n=$((n + 1))
		done
	fi
	[ -n "$bench_daemon" ] && kill "$bench_daemon" 2>/dev/null && wait "$bench_daemon"
	rm -rf "$tmp"
}
trap cleanup EXIT

meson install -C "$build" --destdir "$stage" --no-rebuild --quiet

fail() { echo "test-install: $*" >&2; exit 1; }
for f in "$bindir/gpux" "$sbindir/gpuxd" "$libexecdir/gpux-worker" "$libexecdir/gpux-metrics" \
	 "$libdir/libgpuxclient.so.0" \
	 "$libdir/pkgconfig/gpux.pc" "$prefix/include/gpux/gpux.h" "$prefix/include/gpux/version.h" \
	 "$unitdir/gpuxd.service" "$unitdir/gpuxd.socket" "$sysusersdir/gpux.conf" \
	 "$prefix/share/doc/gpux/LICENSE" "$completionsdir/gpux" "$completionsdir/gpuxd"; do
	[ -e "$stage$f" ] || fail "$f was not installed"
done
if [ "$have_man" = true ]; then
	for f in man1/gpux.1 man8/gpuxd.8 man3/gpux.3; do
		[ -s "$stage$mandir/$f" ] || fail "$mandir/$f was not installed"
	done
fi
# The ABI is still that of 0.x: programs built against an older 0.x load this library.
if command -v objdump >/dev/null; then
	objdump -p "$stage$libdir/libgpuxclient.so.0" | grep -q 'SONAME *libgpuxclient\.so\.0$' ||
		fail "the library's soname is not libgpuxclient.so.0"
fi
grep -q "^ExecStart=$sbindir/gpuxd " "$stage$unitdir/gpuxd.service" || fail "ExecStart is not $sbindir/gpuxd"

# A sanitized library needs its run time loaded first, which an outside program does not do.
if [ "$sanitized" = true ]; then
	echo "installed files checked; the outside program is not run against a sanitized build"
	exit 0
fi

# The stage as a prefix of its own: pkg-config's paths, and the RUNPATH it gives, lead there.
export PKG_CONFIG_PATH="$stage$libdir/pkgconfig"
flags=$(pkg-config --define-variable=prefix="$stage$prefix" --cflags --libs gpux)
# shellcheck disable=SC2086
${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$tmp/consumer" "$consumer" $flags

# Nothing of the machine's may stand in for what was installed.
unset LD_LIBRARY_PATH
if [ "$prefix" != /usr ] && command -v readelf >/dev/null; then
	readelf -d "$stage$bindir/gpux" | grep -q 'RUNPATH.*\$ORIGIN/' ||
		fail "$bindir/gpux has no RUNPATH relative to itself"
fi
"$stage$bindir/gpux" --version || fail "the installed gpux does not run by itself"

# The installed programs, as a user would have them, a private gpuxd kept in $tmp. They
# look for each other where they were installed, which the stage is not: the variables
# point there instead.
mkdir -m 0700 "$tmp/rt" "$tmp/home"
env -u GPUX_SOCKET \
	GPUX_DAEMON="$stage$sbindir/gpuxd" \
	GPUX_WORKER="$stage$libexecdir/gpux-worker" \
	XDG_RUNTIME_DIR="$tmp/rt" HOME="$tmp/home" GPUX_CACHE_DIR="$tmp/cache" \
	GPUX_LOG_FILE="$tmp/gpuxd.log" "$tmp/consumer" || { cat "$tmp/gpuxd.log" >&2; exit 1; }
grep -q "private" "$tmp/gpuxd.log" || fail "the private gpuxd did not log to GPUX_LOG_FILE"
status=$("$stage$bindir/gpux" status --socket "$tmp/rt/gpux/gpuxd.sock") ||
	fail "gpux status: $status"
echo "$status"
worker=$(echo "$status" | awk '$1 == "0" { print $3 }')
daemon=$(awk '{ print $4 }' "/proc/$worker/stat")
echo "installed gpux works"

# gpux soak and gpux bench start gpuxd themselves. Installed, gpux is in bindir and gpuxd in
# sbindir: they find it where it was installed, else on the PATH. The stage is not where it
# was installed, so only the PATH leads there (GPUX_DAEMON is not set).
if [ -e "$sbindir/gpuxd" ]; then
	echo "installed soak and bench not run: $sbindir/gpuxd is on this machine, and they would run it"
	exit 0
fi
tool() {
	env -u GPUX_DAEMON -u GPUX_SOCKET PATH="$stage$sbindir:$PATH" \
		GPUX_WORKER="$stage$libexecdir/gpux-worker" \
		XDG_RUNTIME_DIR="$tmp/rt" HOME="$tmp/home" GPUX_CACHE_DIR="$tmp/cache" \
		"$stage$bindir/gpux" "$@"
}
tool soak --minutes 0.02 --clients 2 >"$tmp/soak.out" 2>&1 || { cat "$tmp/soak.out" >&2; fail "installed gpux soak failed"; }
grep -q "gpux soak: passed" "$tmp/soak.out" || fail "installed gpux soak did not pass"
# bench's module scenarios start private daemons of their own, beside the one it measures.
GPUX_WORKER="$stage$libexecdir/gpux-worker" "$stage$sbindir/gpuxd" --socket "$tmp/bench.sock" \
	--backend host --cache-dir "$tmp/bcache" >"$tmp/bench-gpuxd.log" 2>&1 &
bench_daemon=$!
# gpux bench connects once, at once: the daemon's socket must be there first (up to 10 s).
n=0
while [ ! -S "$tmp/bench.sock" ] && [ "$n" -lt 200 ] && kill -0 "$bench_daemon" 2>/dev/null; do
	sleep 0.05
	n=$((n + 1))
done
# Its verdict on the targets depends on this machine's load: what counts here is that it ran.
tool bench --socket "$tmp/bench.sock" --quick --only modules --json >"$tmp/bench.json" \
	2>"$tmp/bench.err" || true
grep -A1 '"module: compile (first)"' "$tmp/bench.json" | grep -q '"gpux": [0-9]' ||
	{ cat "$tmp/bench.err" >&2; fail "installed gpux bench did not compile through its own gpuxd"; }
echo "installed gpux soak and gpux bench find gpuxd"
