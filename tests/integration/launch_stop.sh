#!/usr/bin/env bash
# zps launch stopped early keeps what it learned (issue 29, docs/launch.md):
#   - after SIGINT, summary.json says status interrupted and carries the last
#     evaluation (last_test_accuracy, last_eval_clock) beside a null
#     final_test_accuracy, as eval.tsv has it; SIGHUP stops the run the same way;
#   - `zps launch | head -1` (stdout's reader gone) still ends with
#     summary.json written and no process of the run left alive;
#   - --time-limit N begins the stop within a second of N;
#   - --stop-at ACC ends the run as a finished one (exit 0, status ok,
#     stop_reason target) once the evaluator has seen ACC, with no process left.
# Stops only what it starts, by PID; the run folder is in lib.sh's $dir.
#
# usage: launch_stop.sh ZPS
set -euo pipefail
zps=$1
server_bin=/nonexistent # lib.sh's start_server is not used here
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

fail() { echo "FAIL: $*" >&2; exit 1; }
runs=$dir/runs
py=/usr/bin/python3

# none_alive RUN: no pid of RUN/processes.tsv is still running.
none_alive() {
    local pid
    for pid in $(awk -F'\t' '$3 ~ /^[0-9]+$/ {print $3}' "$1/processes.tsv"); do
        if kill -0 "$pid" 2>/dev/null; then fail "pid $pid of $1 still running"; fi
    done
}

# SIGINT after the evaluator has evaluated a few times.
"$zps" launch --servers 1 --workers 2 --mode asp --model mlp:8-4 \
    --data synthetic:n=4000,test=100,dim=8,classes=4 --clocks 100000 --base-step-ms 10 \
    --eval-every 5 \
    --runs-dir "$runs" --name int --no-progress --time-limit 120 \
    >"$dir/int.out" 2>"$dir/int.err" &
lpid=$!
for _ in $(seq 1200); do
    n=$(grep -c test_accuracy "$runs/int/evaluator.jsonl" 2>/dev/null || true)
    [ "${n:-0}" -ge 3 ] && break
    sleep 0.1
done
kill -INT $lpid
rc=0
wait $lpid || rc=$?
[ "$rc" = 130 ] || { cat "$dir/int.err" >&2; fail "SIGINT: exit $rc, expected 130"; }
$py - "$runs/int/summary.json" <<'PY' || fail "summary after SIGINT"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "interrupted", s["status"]
assert "final_test_accuracy" in s and s["final_test_accuracy"] is None, s["final_test_accuracy"]
assert isinstance(s["last_test_accuracy"], float), s["last_test_accuracy"]
assert 0 <= s["last_test_accuracy"] <= 1
assert isinstance(s["last_eval_clock"], int) and s["last_eval_clock"] >= 5, s["last_eval_clock"]
PY
none_alive "$runs/int"

# SIGHUP (the terminal closed): the same orderly stop, exit 128+1.
"$zps" launch --servers 1 --workers 2 --mode asp --model mlp:8-4 \
    --data synthetic:n=4000,test=100,dim=8,classes=4 --clocks 100000 --base-step-ms 10 \
    --runs-dir "$runs" --name hup --no-progress --time-limit 120 \
    >"$dir/hup.out" 2>"$dir/hup.err" &
lpid=$!
for _ in $(seq 1200); do
    [ -s "$runs/hup/worker-1.jsonl" ] && break
    sleep 0.1
done
kill -HUP $lpid
rc=0
wait $lpid || rc=$?
[ "$rc" = 129 ] || { cat "$dir/hup.err" >&2; fail "SIGHUP: exit $rc, expected 129"; }
grep -q 'SIGHUP received' "$dir/hup.err" || { cat "$dir/hup.err" >&2; fail "no 'SIGHUP received'"; }
$py -c 'import json,sys; s = json.load(open(sys.argv[1])); assert s["status"] == "interrupted", s' \
    "$runs/hup/summary.json" || fail "summary after SIGHUP"
none_alive "$runs/hup"

# stdout's reader gone: head exits after the first line, launch goes on.
set +o pipefail
"$zps" launch --servers 1 --workers 2 --mode asp --model mlp:8-4 \
    --data synthetic:n=400,test=100,dim=8,classes=4 --clocks 30 --targets 0.1,0.2,0.3 \
    --runs-dir "$runs" --name pipe --no-progress --time-limit 120 2>"$dir/pipe.err" | head -1 >"$dir/pipe.out"
set -o pipefail
grep -q '^final test' "$dir/pipe.out" || { cat "$dir/pipe.err" >&2; fail "head saw no final line"; }
for _ in $(seq 100); do
    [ -s "$runs/pipe/summary.json" ] && break
    sleep 0.1
done
$py -c 'import json,sys; json.load(open(sys.argv[1]))' "$runs/pipe/summary.json" ||
    fail "no summary.json after | head -1"
none_alive "$runs/pipe"
# --time-limit 3: the stop begins within a second of the limit (launch's own
# line says when, measured on its clock), and the run ends well within the
# grace period of 5 s for SIGTERM then SIGKILL, with room for a busy machine.
limit=3
t0=$(date +%s.%N)
rc=0
"$zps" launch --servers 1 --workers 2 --mode asp --model mlp:8-4 \
    --data synthetic:n=4000,test=100,dim=8,classes=4 --clocks 100000 --base-step-ms 10 \
    --runs-dir "$runs" --name limit --no-progress --time-limit $limit \
    >"$dir/limit.out" 2>"$dir/limit.err" || rc=$?
t1=$(date +%s.%N)
[ "$rc" = 1 ] || { cat "$dir/limit.err" >&2; fail "--time-limit: exit $rc, expected 1"; }
at=$(sed -n 's/.*the time limit of 3 s has passed (stopping at \([0-9.]*\) s); stopping.*/\1/p' \
    "$dir/limit.err" | head -1)
[ -n "$at" ] || { cat "$dir/limit.err" >&2; fail "no 'stopping at' line"; }
$py - "$at" "$t0" "$t1" "$limit" "$runs/limit/summary.json" <<'PY' || fail "time limit"
import json, sys
at, t0, t1, limit = map(float, sys.argv[1:5])
s = json.load(open(sys.argv[5]))
assert s["status"] == "timeout", s["status"]
assert limit <= at <= limit + 1.0, f"stop began at {at} s, limit {limit} s"
assert s["stop_reason"] == "time_limit", s["stop_reason"]
assert t1 - t0 <= limit + 5.0 + 15.0, f"ended after {t1 - t0:.1f} s"
print(f"stop began at {at:.2f} s, launch ended after {t1 - t0:.2f} s")
PY
none_alive "$runs/limit"

# --stop-at 0.6: this model passes 0.6 within some tens of clocks (0.7 at
# clock 20 here); 100000 clocks would take minutes. The target joins the
# timed ones.
rc=0
"$zps" launch --servers 1 --workers 2 --mode asp --model mlp:8-4 \
    --data synthetic:n=4000,test=200,dim=8,classes=4 --clocks 100000 --base-step-ms 2 \
    --eval-every 10 --runs-dir "$runs" --name target --no-progress --stop-at 0.6 \
    --time-limit 120 >"$dir/target.out" 2>"$dir/target.err" || rc=$?
[ "$rc" = 0 ] || { cat "$dir/target.err" >&2; fail "--stop-at: exit $rc, expected 0"; }
grep -q "test accuracy 0.6 reached after .* stopped there (--stop-at)" "$dir/target.out" ||
    { cat "$dir/target.out" >&2; fail "--stop-at: no final line"; }
$py - "$runs/target/summary.json" <<'PY' || fail "--stop-at summary"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "ok", s["status"]
assert s["stop_reason"] == "target", s["stop_reason"]
assert s["stop_at"] == 0.6, s["stop_at"]
assert s["last_test_accuracy"] >= 0.6, s["last_test_accuracy"]
assert s["seconds_to_target"]["0.6"] is not None, s["seconds_to_target"]
assert s["last_eval_clock"] < 100000, s["last_eval_clock"]
print(f"stopped at accuracy {s['last_test_accuracy']} after clock {s['last_eval_clock']}")
PY
none_alive "$runs/target"

# A shared assignment ends when its epochs' batches are consumed; the summary
# says so and counts the examples from shard 0's audit. BSP keeps the fixed
# assignment, counted from the workers' records.
for m in asp bsp; do
    rc=0
    "$zps" launch --servers 2 --workers 3 --mode $m --model mlp:8-4 \
        --data synthetic:n=1500,test=100,dim=8,classes=4 --batch 16 --epochs 2 \
        --base-step-ms 2 --straggler 2:slowdown=3 --data-assignment shared --runs-dir "$runs" \
        --name shared-$m --no-progress --time-limit 120 \
        >"$dir/shared-$m.out" 2>"$dir/shared-$m.err" || rc=$?
    [ "$rc" = 0 ] || { cat "$dir/shared-$m.err" >&2; fail "shared $m: exit $rc"; }
    $py - "$runs/shared-$m/summary.json" $m <<'PY' || fail "shared $m summary"
import json, sys
s = json.load(open(sys.argv[1]))
shared = sys.argv[2] != "bsp"
assert s["status"] == "ok" and s["stop_reason"] == "finished", (s["status"], s["stop_reason"])
assert s["data_assignment"] == ("shared" if shared else "static"), s["data_assignment"]
# The fixed assignment's last steps take the rest of each worker's piece: all 1500.
assert s["examples_seen_per_epoch"] == [1500, 1500], s["examples_seen_per_epoch"]
assert s["examples_seen"] == 3000, s["examples_seen"]
assert s["final_test_accuracy"] is not None, s
print(f"{sys.argv[2]}: {s['data_assignment']}, {s['examples_seen']} examples seen")
PY
    none_alive "$runs/shared-$m"
done
echo ok
