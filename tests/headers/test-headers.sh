#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/headers/test-headers.sh: the public headers under one compiler and language standard,
# with -Werror -pedantic -Wall -Wextra (and more): each header alone, then a program's use of
# them all (use.c). Compiled only (-fsyntax-only), never linked.
# Usage: test-headers.sh COMPILER c|c++ STD SRC_INCLUDE BUILD_INCLUDE USE_C
set -eu
compiler=$1 lang=$2 std=$3 src_inc=$4 build_inc=$5 use=$6

flags="-std=$std -Werror -pedantic -Wall -Wextra -Wconversion -Wsign-conversion -Wundef -Wcast-qual"
# C++ leaves out -Wshadow: gpux_device_info() and gpux_module_info() share their structs'
# names, which C++ calls hiding a constructor.
case $lang in
c) flags="$flags -Wshadow -Wstrict-prototypes -Wmissing-prototypes" ;;
c++) ;;
*) echo "test-headers.sh: language c or c++, not $lang" >&2; exit 2 ;;
esac

check() {
	# shellcheck disable=SC2086
	"$compiler" -x "$lang" $flags -fsyntax-only -I"$src_inc" -I"$build_inc" "$@"
}

# The source tree's headers, and version.h from the build tree, never an installed copy. A
# declaration after each: ISO C forbids an empty translation unit (version.h is macros only).
for h in gpux.h host-kernel.h version.h; do
	printf '#include <gpux/%s>\ntypedef int gpux_headers_alone;\n' "$h" | check - || {
		echo "gpux/$h alone: $compiler -x $lang -std=$std failed" >&2
		exit 1
	}
done
check "$use" || { echo "$use: $compiler -x $lang -std=$std failed" >&2; exit 1; }
echo "$compiler -x $lang -std=$std: gpux.h, host-kernel.h, version.h and use.c compile cleanly"
