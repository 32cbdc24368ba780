#!/usr/bin/env bash
# A worker pointed at a server that is not there says so at once (within
# 2 s guaranteed: ZeroMQ's first attempt is refused, the worker looks why)
# and keeps waiting, as it must at a cluster's start; then periodically: it
# logs which server it waits for, for which request and how long, and that
# nothing is connected there and why; against a live server holding a pull back it
# logs the pull and its clock, without that hint. A worker's first request
# is STATS, which its --workers must match.
#
# usage: worker_wait_log.sh ZPS_SERVER_BIN ZPS_BIN ZPS_WORKER_BIN
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
. "$(dirname "$0")/lib.sh"

dead_endpoint

data=(--data synthetic:n=200,test=20,dim=4 --no-progress)

# wait_for_line FILE PATTERN : until grep finds PATTERN in FILE (10 s at most)
wait_for_line() {
    for _ in $(seq 1 100); do
        grep -q "$2" "$1" && return 0
        sleep 0.1
    done
    fail "no line matching '$2' in $1: $(cat "$1")"
}

# Rank 0 initialises the model: it waits for an answer to init, forever (the
# default --timeout), says at once that the connection is refused, and then
# says so every 3 * 10 s after the first 10 s (the default --wait-log-ms).
t0=$(date +%s%N)
"$worker_bin" --servers "$dead" --rank 0 --workers 1 "${data[@]}" \
    "${client_keys[@]}" 2>"$dir/w0.log" &
w0=$!
pids+=($w0)
wait_for_line "$dir/w0.log" \
    "WARN  \[worker 0\] waiting for server 0 at $dead: connection refused, retrying$"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "first wait line after $ms ms"
[ "$ms" -le 5000 ] || fail "the first wait line came after $ms ms, not within 2 s (bound 5 s)"
kill -0 "$w0" 2>/dev/null || fail "worker 0 exited on a refusal: $(cat "$dir/w0.log")"
kill "$w0"
wait "$w0" 2>/dev/null || true

# The same with --wait-log-ms 300: the periodic records, every 3 * 300 ms
# after the first 300 ms, name the reason too.
"$worker_bin" --servers "$dead" --rank 0 --workers 1 --wait-log-ms 300 "${data[@]}" \
    "${client_keys[@]}" 2>"$dir/w0.log" &
w0=$!
pids+=($w0)
wait_for_line "$dir/w0.log" \
    "WARN  \[worker 0\] waiting for server 0 at $dead: no answer to stats for [0-9]* ms (not connected: connection refused)"
wait_for_line "$dir/w0.log" "no answer to stats for [1-9] s"
kill -0 "$w0" 2>/dev/null || fail "worker 0 exited: $(cat "$dir/w0.log")"
kill "$w0"
wait "$w0" 2>/dev/null || true

# Worker 1 of 2 against a live server whose model worker 0 never sets: its
# pull of clock 0 waits, and the record names it, without the hint.
start_server live --workers 2
"$worker_bin" --servers "$ep" --rank 1 --workers 2 --wait-log-ms 300 "${data[@]}" \
    "${client_keys[@]}" 2>"$dir/w1.log" &
w1=$!
pids+=($w1)
wait_for_line "$dir/w1.log" \
    "INFO  \[worker 1\] waiting for server 0 at $ep: no answer to pull (clock 0) for [0-9]* ms$"
kill "$w1"
wait "$w1" 2>/dev/null || true
expect_keyed "$ep"

# A worker told of another number of workers than the server serves would
# wait at a barrier that never opens: it asks first (STATS, the request the
# records above name) and exits 1 at once, naming both counts.
t0=$(date +%s%N)
rc=0
"$worker_bin" --servers "$ep" --rank 0 --workers 3 "${data[@]}" "${client_keys[@]}" \
    2>"$dir/w3.log" || rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$rc" = 1 ] || fail "--workers 3 against a server of 2: exit $rc, expected 1: $(cat "$dir/w3.log")"
grep -q "server 0 at $ep serves --workers 2; this worker was started with --workers 3: .*(ZPS_ECONFIG)" \
    "$dir/w3.log" || fail "--workers 3: not said: $(cat "$dir/w3.log")"
grep -q "initialised" "$dir/w3.log" && fail "--workers 3: the worker initialised the model first"
echo "--workers 3 against a server of 2: refused after $ms ms"

echo "worker wait log: all checks passed"
