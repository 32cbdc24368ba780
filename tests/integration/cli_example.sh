#!/usr/bin/env bash
# The README's worked example driven entirely through the `zps` tool and
# real zps-server processes, plus the tool's exit-status contract:
# 0 success, 1 refused by a server, 2 bad usage, 3 a pull that timed out.
#
# usage: cli_example.sh ZPS_SERVER_BIN ZPS_BIN
set -euo pipefail
server_bin=$1
zps=$2
. "$(dirname "$0")/lib.sh"

# --- one shard, one parameter w = 10, gradients 2, 4, 6, 8, lr 0.1 ---
start_server one --workers 4 --lr 0.1
one=$ep
with_keys "$zps" init --servers "$one" --values 10
for w in 0 1 2 3; do
    [ "$(with_keys "$zps" pull --servers "$one" --worker $w --clock 0)" = 10 ] || fail "pull clock 0"
done
for w in 0 1 2 3; do
    with_keys "$zps" push --servers "$one" --worker $w --clock 0 --batch 1 --values $(( (w + 1) * 2 ))
done
for w in 0 1 2 3; do
    got=$(with_keys "$zps" pull --servers "$one" --worker $w --clock 1)
    [ "$got" = 9.5 ] || fail "worker $w pulled '$got' for clock 1, expected 9.5"
done

# --- two shards, a vector model: 5 elements split 2 + 3 ---
start_server s0 --workers 4 --lr 0.1 --shard 0/2
s0=$ep
start_server s1 --workers 4 --lr 0.1 --shard 1/2
s1=$ep
with_keys "$zps" init --servers "$s0,$s1" --values 10,10,10,10,10
for w in 0 1 2 3; do
    g=$(( (w + 1) * 2 ))
    with_keys "$zps" push --servers "$s0,$s1" --worker $w --clock 0 --batch 1 --values "$g,$g,$g,$g,$g"
done
for w in 0 1 2 3; do
    got=$(with_keys "$zps" pull --servers "$s0,$s1" --worker $w --clock 1 | tr '\n' ' ')
    [ "$got" = "9.5 9.5 9.5 9.5 9.5 " ] || fail "two shards: worker $w pulled '$got'"
done
# Each server's statistics, one JSON line each.
[ "$(with_keys "$zps" stats --servers "$s0,$s1" | grep -c '"version":1')" = 2 ] || fail "stats"

# --- exit statuses ---
expect_status 2 "$zps"
expect_status 2 "$zps" frobnicate --servers "$one"
expect_status 2 "$zps" pull
expect_status 2 "$zps" push --servers "$one" --clock 1 --batch 1 --values 1
expect_status 2 "$zps" push --servers "$one" --worker 0 --clock x --batch 1 --values 1
expect_status 2 "$zps" init --servers "$one" --values 1,,2
expect_status 2 "$zps" init --servers "$one" --values 1,nan
expect_status 2 "$server_bin" --workers 2 --mode lazy
expect_status 2 "$server_bin" --workers 2 --lr -1
expect_status 2 "$server_bin"
# A refusal: a clock that skips ahead, with the server's reason on stderr.
expect_status 1 with_keys "$zps" push --servers "$one" --worker 0 --clock 7 --batch 1 --values 1
grep -q "skips ahead" "$dir/err" || fail "no reason printed: $(cat "$dir/err")"
# A pull for a clock whose model does not exist yet times out: worker 0 has
# pushed clock 1, the others have not.
with_keys "$zps" push --servers "$one" --worker 0 --clock 1 --batch 1 --values 1
expect_status 3 with_keys "$zps" pull --servers "$one" --worker 0 --clock 2 --timeout-ms 300
# Raw little-endian float32 files work like --values. Fresh servers, so the
# INIT from the file is the one that sets the model, and the values read back
# must be the file's exactly: 10, -2.5, 0.1, 1234.5, 3e-7 split 2 + 3.
start_server f0 --workers 1 --shard 0/2
f0=$ep
start_server f1 --workers 1 --shard 1/2
f1=$ep
printf '\x00\x00\x20\x41\x00\x00\x20\xc0\xcd\xcc\xcc\x3d\x00\x50\x9a\x44\xb0\x0f\xa1\x34' \
    >"$dir/five.f32"
with_keys "$zps" init --servers "$f0,$f1" --file "$dir/five.f32"
got=$(with_keys "$zps" pull --servers "$f0,$f1" | tr '\n' ' ')
[ "$got" = "10 -2.5 0.1 1234.5 3e-07 " ] || fail "init --file: pulled '$got'"
printf '\x00\x00\x20' >"$dir/short.f32"
expect_status 2 "$zps" init --servers "$one" --file "$dir/short.f32"

expect_keyed "$one"
echo "cli example: all checks passed"
