#!/usr/bin/env bash
# The `zps` tool fails at once on what waiting cannot change: an endpoint
# not in the form tcp://HOST:PORT or ipc://PATH (2, naming the entry), a
# server whose connection is refused (1, "ENDPOINT: connection refused",
# guaranteed within about a second, well before the 10 s deadline), and a
# pull before the model is initialised (1, said as such). A healthy start
# counts no errors in STATS; its refusals before INIT are `not_initialised`.
# Also: zps pull --file writes the raw float32 that zps init --file reads.
#
# usage: cli_fail_fast.sh ZPS_SERVER_BIN ZPS_BIN
set -euo pipefail
server_bin=$1
zps=$2
. "$(dirname "$0")/lib.sh"

dead_endpoint

# expect_within WANT MAX_S CMD... : exit status WANT within MAX_S seconds
expect_within() {
    local want=$1 max=$2; shift 2
    local t0 t1
    t0=$(date +%s%N)
    expect_status "$want" "$@"
    t1=$(date +%s%N)
    local ms=$(( (t1 - t0) / 1000000 ))
    echo "'$*': $ms ms"
    [ "$ms" -le $(( max * 1000 )) ] || fail "'$*' took $ms ms, more than $max s"
}

# The form of an endpoint.
expect_status 2 "$zps" stats --servers 127.0.0.1:7100
grep -q "invalid server endpoint '127.0.0.1:7100'.*expected tcp://HOST:PORT" "$dir/err" \
    || fail "bare address: $(cat "$dir/err")"
expect_status 2 "$zps" stats --servers tcp://127.0.0.1
grep -q "'tcp://127.0.0.1'" "$dir/err" || fail "no port: $(cat "$dir/err")"

# Refused: every verb, with the default 10 s deadline; 5 s is the bound.
for verb in "stats" "init --values 1" "push --worker 0 --clock 0 --batch 1 --values 1" \
    "pull" "pull --worker 0 --clock 0" "checkpoint" "reload-keys"; do
    # shellcheck disable=SC2086
    expect_within 1 5 with_keys "$zps" $verb --servers "$dead"
    grep -q "$dead: connection refused$" "$dir/err" || fail "$verb: $(cat "$dir/err")"
done
expect_within 1 5 with_keys "$zps" top --once --servers "$dead"
grep -q "$dead: connection refused$" "$dir/err" || fail "top: $(cat "$dir/err")"

# A live server before INIT: a pull is refused at once, as an observer and
# as a worker.
start_server live --workers 1
live=$ep
expect_within 1 5 with_keys "$zps" pull --servers "$live"
grep -q "^zps pull: the model is not initialised yet (zps init, or a worker of rank 0, sets it)$" \
    "$dir/err" || fail "pull before init: $(cat "$dir/err")"
expect_within 1 5 with_keys "$zps" pull --servers "$live" --worker 0 --clock 0
grep -q "not initialised yet" "$dir/err" || fail "worker pull before init: $(cat "$dir/err")"
expect_status 1 with_keys "$zps" push --servers "$live" --worker 0 --clock 0 --batch 1 --values 1
grep -q "not initialised yet" "$dir/err" || fail "push before init: $(cat "$dir/err")"
# ... and none of that is an error.
with_keys "$zps" stats --servers "$live" >"$dir/stats"
grep -q '"errors":0,' "$dir/stats" || fail "errors counted: $(cat "$dir/stats")"
grep -q '"not_initialised":3}' "$dir/stats" || fail "not_initialised: $(cat "$dir/stats")"

# pull --file and init --file round-trip: bytes in, the same bytes out.
/usr/bin/python3 -c "
import struct, sys
sys.stdout.buffer.write(struct.pack('<5f', 1.5, -2.25, 3e-8, 1e30, 0.1))" >"$dir/in.bin"
with_keys "$zps" init --servers "$live" --file "$dir/in.bin"
with_keys "$zps" pull --servers "$live" --file "$dir/out.bin" >"$dir/pull.out"
[ ! -s "$dir/pull.out" ] || fail "pull --file printed: $(cat "$dir/pull.out")"
cmp "$dir/in.bin" "$dir/out.bin" || fail "pull --file wrote other bytes than init --file read"

expect_keyed "$live"
echo "cli fail fast: all checks passed"
