#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-completions.sh: the bash completions of gpuxd (made from its table of options)
# and gpux (read from its help) complete options, commands and values. Skipped without bash.
# Usage: test-completions.sh GPUXD_COMPLETION GPUX_COMPLETION GPUXD GPUX
set -eu
command -v bash >/dev/null || { echo "no bash: skipped"; exit 77; }
gpuxd_bash=$1 gpux_bash=$2 gpuxd=$3 gpux=$4

exec bash -s "$gpuxd_bash" "$gpux_bash" "$gpuxd" "$gpux" <<'TEST'
set -u
. "$1"
. "$2"
gpuxd=$3 gpux=$4
# Outside a completion, compopt has nothing to set.
compopt() { :; }
fails=0

# complete WORDS... EXPECTED: the completion of the last word has EXPECTED among its answers.
complete_has() {
	local expected=${!#} fn
	COMP_WORDS=("${@:1:$#-1}")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	case ${COMP_WORDS[0]} in
	*gpuxd) fn=_gpuxd ;;
	*) fn=_gpux ;;
	esac
	$fn
	for r in "${COMPREPLY[@]}"; do
		[ "$r" = "$expected" ] && return 0
	done
	echo "FAIL: ${COMP_WORDS[*]} -> ${COMPREPLY[*]:-nothing}, not $expected" >&2
	fails=$((fails + 1))
}

complete_has "$gpuxd" --back --backend
complete_has "$gpuxd" --backend c cuda
complete_has "$gpuxd" --host-sandbox o off
complete_has "$gpuxd" --log-level w warning
complete_has "$gpuxd" --allow-group "$(id -gn | cut -c1-2)" "$(id -gn)"
complete_has "$gpuxd" --metrics-p --metrics-per-user
complete_has "$gpuxd" --vers --version
# Every option gpuxd's help shows.
for opt in $("$gpuxd" --help | grep -o -- '--[a-z][a-z-]*' | sort -u); do
	complete_has "$gpuxd" "$opt" "$opt"
done

complete_has "$gpux" st status
complete_has "$gpux" help b bench
complete_has "$gpux" status --pro --prometheus
complete_has "$gpux" compile --lang p ptx
complete_has "$gpux" demo --sock --socket
tmp=$(mktemp -d)
touch "$tmp/kernel.cu"
complete_has "$gpux" compile "$tmp/ker" "$tmp/kernel.cu"
complete_has "$gpux" status --socket "$tmp/ker" "$tmp/kernel.cu"
rm -rf "$tmp"
[ "$fails" -eq 0 ] || exit 1
echo "completions complete"
TEST
