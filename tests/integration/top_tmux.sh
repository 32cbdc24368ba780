#!/usr/bin/env bash
# zps top against a real cluster: 2 BSP shards, 2 zps-worker processes. With
# both running, `zps top --once` prints both shards and both workers and no
# escape codes; with worker 1 stopped by SIGSTOP, `zps top` drawn in a
# detached tmux session names worker 1 in its "waiting for" line within 15 s,
# and so does --once. Also: exit 1 when no server answers, 2 on bad usage.
# Skipped (77) without tmux.
#
# usage: top_tmux.sh ZPS_SERVER_BIN ZPS_BIN ZPS_WORKER_BIN
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
if ! command -v tmux >/dev/null; then
    echo "SKIP: tmux is not installed (scripts/setup installs it)"
    exit 77
fi
. "$(dirname "$0")/lib.sh"

# A private tmux server (its own socket), so nothing of the user's is touched.
tmux_sock="zps-top-$$"
session="zps-top-$$"
stopped=""
cleanup_top() {
    tmux -L "$tmux_sock" kill-server 2>/dev/null || true
    # A stopped process ignores SIGTERM until it is continued.
    [ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null || true
    cleanup
}
trap cleanup_top EXIT

cluster=(--mode bsp --workers 2 --optimizer sgd --lr 0.05)
start_server s0 --shard 0/2 "${cluster[@]}"
ep0=$ep
start_server s1 --shard 1/2 "${cluster[@]}"
ep1=$ep
servers="$ep0,$ep1"

# Each step padded to 20 ms: the workers sleep rather than fight over cores.
train=(--servers "$servers" --workers 2 --data synthetic:n=400,test=100,dim=4 --batch 8
       --backend cpu --no-progress --clocks 100000 --base-step-ms 20)
"$worker_bin" --rank 0 "${train[@]}" "${client_keys[@]}" 2>"$dir/w0.log" &
w0=$!
pids+=($w0)
"$worker_bin" --rank 1 "${train[@]}" "${client_keys[@]}" 2>"$dir/w1.log" &
w1=$!
pids+=($w1)

# version_of_shard0 : shard 0's model version from zps stats (empty if none)
# (matched in bash: a `| head -1` pipeline under pipefail may fail on SIGPIPE)
version_of_shard0() {
    local json
    json=$(with_keys "$zps" stats --servers "$ep0" --timeout-ms 2000 2>/dev/null) || return 0
    [[ $json =~ \"version\":([0-9]+) ]] && echo "${BASH_REMATCH[1]}"
    return 0
}
# Training is under way once the version passes 5 (30 s at most).
for _ in $(seq 1 300); do
    v=$(version_of_shard0)
    [ -n "$v" ] && [ "$v" -gt 5 ] && break
    kill -0 "$w0" 2>/dev/null || fail "worker 0 exited: $(cat "$dir/w0.log")"
    kill -0 "$w1" 2>/dev/null || fail "worker 1 exited: $(cat "$dir/w1.log")"
    sleep 0.1
done
[ -n "$v" ] && [ "$v" -gt 5 ] || fail "training did not start: version '$v'"

# --once while both train: one frame, both shards and workers, no escape codes.
expect_status 0 with_keys "$zps" top --servers "$servers" --once
out=$dir/out
grep -q "^zps top | 2 shards | bsp, 2 workers" "$out" || fail "--once header: $(cat "$out")"
grep -Eq "^0 +[0-9]+ " "$out" || fail "--once: no row for shard 0: $(cat "$out")"
grep -Eq "^1 +[0-9]+ " "$out" || fail "--once: no row for shard 1: $(cat "$out")"
grep -Eq "^1 +[0-9]+ +[0-9]+ +live " "$out" || fail "--once: worker 1 not live: $(cat "$out")"
if grep -q $'\033' "$out"; then fail "--once wrote escape codes"; fi

# Worker 1 stops: worker 0 pushes its clock and waits in the barrier.
kill -STOP "$w1"
stopped=$w1

export TERM=${TERM:-xterm}
[ "$TERM" = dumb ] && export TERM=xterm
tmux -L "$tmux_sock" new-session -d -s "$session" -x 200 -y 50 \
    "'$zps' top --servers '$servers' --interval 0.5 ${client_keys[*]@Q}; sleep 60"
found=""
for _ in $(seq 1 75); do
    sleep 0.2
    screen=$(tmux -L "$tmux_sock" capture-pane -p -t "$session" 2>/dev/null || true)
    # Heard from at least 1 s ago: the stop, not a step's usual wait for its last push.
    if grep -Eq "^shard [01]: clock [0-9]+: waiting for worker 1, last heard [1-9][0-9]*(\.[0-9])? s ago" \
        <<<"$screen"; then
        found=1
        break
    fi
done
[ -n "$found" ] || fail "zps top did not name worker 1 within 15 s; the screen:
$screen"
grep -Eq "^shard 0: clock [0-9]+: waiting for worker 1" <<<"$screen" ||
    fail "shard 0's line is missing: $screen"
grep -Eq "^shard 1: clock [0-9]+: waiting for worker 1" <<<"$screen" ||
    fail "shard 1's line is missing: $screen"
if grep -q "waiting for worker 0" <<<"$screen"; then fail "worker 0 named: $screen"; fi
echo "$screen" | grep "waiting for"

# --once says the same.
expect_status 0 with_keys "$zps" top --servers "$servers" --once
grep -Eq "^shard 0: clock [0-9]+: waiting for worker 1, last heard" "$out" ||
    fail "--once has no waiting line: $(cat "$out")"
cat "$out"

# No server: exit 1 with the reason; bad usage: exit 2.
dead_endpoint
expect_status 1 with_keys "$zps" top --servers "$dead" --once --timeout-ms 300
grep -q "zps top: " "$dir/err" || fail "no reason on stderr for a dead server"
expect_status 1 with_keys "$zps" top --servers "$dead" --timeout-ms 300
expect_status 2 "$zps" top --servers "$servers" --interval 0
expect_status 2 "$zps" top --once
expect_status 2 "$zps" top --servers "$servers" --bogus

expect_keyed "$ep0"
echo "zps top under tmux: all checks passed"
