#!/usr/bin/env bash
# Every verb of `zps` has its own --help listing its own flags (push and
# pull --file among them, no other verb's), and `--version` of zps,
# zps-server and zps-worker prints the project's version from CMakeLists.txt,
# with `git describe` when built from a git checkout.
#
# usage: cli_help.sh SOURCE_DIR ZPS_BIN ZPS_SERVER_BIN ZPS_WORKER_BIN
set -euo pipefail
src=$1
zps=$2
server_bin=$3
worker_bin=$4
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# help VERB WANT... : zps VERB --help exits 0 and names each flag in WANT
help() {
    local verb=$1; shift
    "$zps" "$verb" --help >"$out" || fail "zps $verb --help: exit $?"
    grep -q "^usage: zps $verb" "$out" || fail "zps $verb --help is not its own: $(head -2 "$out")"
    for flag in "$@"; do
        grep -q -- "$flag" "$out" || fail "zps $verb --help does not list $flag"
    done
}
help init --servers --values --file --timeout-ms --key --server-key
help push --servers --worker --clock --batch --values --file --verbose
help pull --servers --worker --clock --file --verbose
help stats --servers --timeout-ms
help checkpoint --servers inspect
help reload-keys --servers --key --server-key
# Not another verb's flags.
"$zps" stats --help >"$out"
! grep -q -- "--worker\|--values\|--batch\|--file" "$out" || fail "zps stats --help lists others' flags"
"$zps" pull --help >"$out"
! grep -q -- "--values\|--batch" "$out" || fail "zps pull --help lists push's flags"
# keygen says what keys are for now.
"$zps" keygen --help >"$out"
! grep -q "not use these keys yet" "$out" || fail "zps keygen --help: stale text"
grep -q "authorized-keys" "$out" || fail "zps keygen --help: $(cat "$out")"

version=$(sed -n 's/^project(zps VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ -n "$version" ] || fail "no project(VERSION) in CMakeLists.txt"
for prog in "zps:$zps" "zps-server:$server_bin" "zps-worker:$worker_bin"; do
    name=${prog%%:*}
    line=$("${prog#*:}" --version) || fail "$name --version: exit $?"
    echo "$line"
    if [ -d "$src/.git" ] && command -v git >/dev/null; then
        [[ "$line" =~ ^$name\ ${version//./\\.}\ \(git\ [0-9a-zA-Z.+_-]+\)$ ]] \
            || fail "$name --version: '$line'"
    else
        [[ "$line" =~ ^$name\ ${version//./\\.}( \(git .+\))?$ ]] || fail "$name --version: '$line'"
    fi
done
echo "cli help: all checks passed"
