#!/usr/bin/env bash
# The `zps` tool's default deadline and what its exit status then says:
# an address where something takes the connection but no zps server
# answers is 1 ("no answer ... is a server running there?") within the
# 10 s default, for every verb that talks to servers; a pull that a live
# server holds back is 3 ("timed out"). (A refused connection fails at
# once: cli_fail_fast.sh.)
#
# usage: cli_deadline.sh ZPS_SERVER_BIN ZPS_BIN
set -euo pipefail
server_bin=$1
zps=$2
. "$(dirname "$0")/lib.sh"

# A listener that never speaks: the kernel completes the connection, no
# ZeroMQ handshake follows.
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
time.sleep(600)' >"$dir/silent.port" &
pids+=($!)
for _ in $(seq 1 100); do
    [ -s "$dir/silent.port" ] && break
    sleep 0.1
done
[ -s "$dir/silent.port" ] || fail "the silent listener did not start"
dead=tcp://127.0.0.1:$(cat "$dir/silent.port")

# expect_quick WANT MAX_S CMD... : exit status WANT within MAX_S seconds
expect_quick() {
    local want=$1 max=$2; shift 2
    local t0 t1
    t0=$(date +%s%N)
    expect_status "$want" "$@"
    t1=$(date +%s%N)
    local ms=$(( (t1 - t0) / 1000000 ))
    [ "$ms" -le $(( max * 1000 )) ] || fail "'$*' took $ms ms, more than $max s"
    [ "$(wc -l <"$dir/err")" -eq 1 ] || fail "'$*' said more than one line: $(cat "$dir/err")"
}

# The default deadline (10 s) plus a margin, for each verb.
expect_quick 1 14 with_keys "$zps" stats --servers "$dead"
grep -q "^zps stats: no answer from $dead within 10 s (is a server running there?)$" "$dir/err" \
    || fail "stats: $(cat "$dir/err")"
# The remaining verbs with a shorter --timeout-ms, so the test stays short.
expect_quick 1 4 with_keys "$zps" init --servers "$dead" --values 1 --timeout-ms 1000
grep -q "^zps init: no answer from $dead within 1 s" "$dir/err" || fail "init: $(cat "$dir/err")"
expect_quick 1 4 with_keys "$zps" push --servers "$dead" --worker 0 --clock 0 --batch 1 --values 1 \
    --timeout-ms 1000
expect_quick 1 4 with_keys "$zps" pull --servers "$dead" --worker 0 --clock 0 --timeout-ms 1000
expect_quick 1 4 with_keys "$zps" checkpoint --servers "$dead" --timeout-ms 1000

# A live server and a dead one: the live one's statistics, the dead one named.
start_server live --workers 2
live=$ep
with_keys "$zps" init --servers "$live" --values 5
expect_quick 1 4 with_keys "$zps" stats --servers "$live,$dead" --timeout-ms 1000
grep -q "^zps stats: no answer from $dead within 1 s" "$dir/err" || fail "mixed: $(cat "$dir/err")"
[ "$(grep -c '"version"' "$dir/out")" = 1 ] || fail "mixed: $(cat "$dir/out")"

# A live server holding a pull back (clock 1 needs both workers' pushes,
# worker 1 has not pushed): 3.
with_keys "$zps" push --servers "$live" --worker 0 --clock 0 --batch 1 --values 1
expect_quick 3 4 with_keys "$zps" pull --servers "$live" --worker 0 --clock 1 --timeout-ms 1000
grep -q "^zps pull: timed out: $live: connected, but no reply within 1 s$" "$dir/err" \
    || fail "held-back pull: $(cat "$dir/err")"
# ... and the same pull with the default deadline.
expect_quick 3 14 with_keys "$zps" pull --servers "$live" --worker 0 --clock 1

expect_keyed "$live"
echo "cli deadline: all checks passed"
