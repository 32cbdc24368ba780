#!/usr/bin/env bash
# zps launch -- COMMAND (docs/launch.md, "Your own command"): the command runs
# once per worker rank instead of zps-worker, the cluster in its environment.
# The command here is a shell script the test writes; it uses the `zps` tool
# for everything it does on the servers, so nothing here needs Python:
#   - it checks ZPS_SERVERS (S endpoints), ZPS_RANK, ZPS_WORKERS, ZPS_METRICS
#     (an absolute path) and, with --keys, ZPS_KEY and ZPS_SERVER_KEY; rank 0
#     initialises a model of 3 parameters; every rank pushes the gradient
#     2 (rank + 1) for clock 0 and pulls clock 1, which must be the servers'
#     SGD step (lr from --server-arg), computed here by hand; it writes a run,
#     a step and (rank 0) a final eval line into $ZPS_METRICS;
#   - launch exits 0, summary.json has the eval line's accuracy, commands.txt
#     names the command with its variables, no evaluator ran;
#   - rank 1 exiting 3: launch exits 1 naming worker 1 and status 3, and no
#     process of the run is left;
#   - with --keys the command gets its own key files and trains the same;
#   - with --hosts (an ssh stand-in that runs the far command here) the same;
#   - a zps-worker flag with a command is refused with exit 2, naming it.
# Stops only what it starts, by PID (lib.sh); the run folders are in $dir.
#
# usage: launch_command.sh ZPS
set -euo pipefail
zps=$1
server_bin=/nonexistent # lib.sh's start_server is not used here
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

runs=$dir/runs
lr=0.1
init=10

# The command: cmd.sh S [fail=RANK]. Exit statuses 10-19 are its own checks.
cat >"$dir/cmd.sh" <<EOF
#!/bin/sh
set -eu
zps='$zps'
EOF
cat >>"$dir/cmd.sh" <<'EOF'
want_servers=$1
for v in ZPS_SERVERS ZPS_RANK ZPS_WORKERS ZPS_METRICS; do
    eval "x=\${$v:-}"
    [ -n "$x" ] || { echo "cmd: $v is not set"; exit 10; }
done
n=$(echo "$ZPS_SERVERS" | tr ',' '\n' | grep -c '^tcp://127\.0\.0\.[0-9]*:[0-9]*$' || true)
[ "$n" = "$want_servers" ] || { echo "cmd: ZPS_SERVERS='$ZPS_SERVERS': $n endpoints"; exit 11; }
case $ZPS_METRICS in /*) ;; *) echo "cmd: ZPS_METRICS '$ZPS_METRICS' is relative"; exit 12 ;; esac
[ "$ZPS_RANK" -lt "$ZPS_WORKERS" ] || { echo "cmd: rank $ZPS_RANK of $ZPS_WORKERS"; exit 13; }
set --
if [ -n "${ZPS_KEY:-}" ]; then
    [ -r "$ZPS_KEY" ] && [ -r "$ZPS_SERVER_KEY" ] || { echo "cmd: no key files"; exit 14; }
    set -- --key "$ZPS_KEY" --server-key "$ZPS_SERVER_KEY"
fi
echo "cmd: rank $ZPS_RANK of $ZPS_WORKERS, servers $ZPS_SERVERS"
now() { date +%s.%N; }
start=$(now)
printf '{"type":"run","rank":%s,"workers":%s,"model":"sh:3","batch":1,"clocks":1,"steps_per_epoch":1,"wall":%s}\n' \
    "$ZPS_RANK" "$ZPS_WORKERS" "$start" >>"$ZPS_METRICS"
[ "$ZPS_RANK" != 0 ] || "$zps" init --servers "$ZPS_SERVERS" --values 10,10,10 "$@"
# The other ranks wait for rank 0's model (a pull before it fails at once).
i=0
until "$zps" pull --servers "$ZPS_SERVERS" --worker "$ZPS_RANK" --clock 0 "$@" >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 600 ] || { echo "cmd: no model after 60 s"; exit 15; }
    sleep 0.1
done
g=$(( (ZPS_RANK + 1) * 2 ))
"$zps" push --servers "$ZPS_SERVERS" --worker "$ZPS_RANK" --clock 0 --batch 1 --values "$g,$g,$g" "$@"
[ "${FAIL_RANK:-x}" != "$ZPS_RANK" ] || { echo "cmd: rank $ZPS_RANK fails on purpose"; exit 3; }
got=$("$zps" pull --servers "$ZPS_SERVERS" --worker "$ZPS_RANK" --clock 1 --timeout-ms 30000 "$@" |
    tr '\n' ' ')
echo "cmd: rank $ZPS_RANK pulled $got for clock 1"
echo "$got" >"$ZPS_METRICS.pulled"
end=$(now)
printf '{"type":"step","rank":%s,"clock":0,"epoch":0,"step":0,"wall":%s,"elapsed":0.01,"loss":1.5,"batch":1,"step_ms":10}\n' \
    "$ZPS_RANK" "$end" >>"$ZPS_METRICS"
[ "$ZPS_RANK" != 0 ] ||
    printf '{"type":"eval","rank":0,"clock":1,"epoch":1,"wall":%s,"elapsed":0.02,"test_loss":0.75,"test_accuracy":0.625,"examples":8,"final":true}\n' \
        "$end" >>"$ZPS_METRICS"
EOF
chmod +x "$dir/cmd.sh"

# none_alive RUN: no pid of RUN/processes.tsv is still running.
none_alive() {
    local pid
    for pid in $(awk -F'\t' '$3 ~ /^[0-9]+$/ {print $3}' "$1/processes.tsv"); do
        if kill -0 "$pid" 2>/dev/null; then fail "pid $pid of $1 still running"; fi
    done
}

# check_pulled RUN W: every rank pulled init - lr * mean(2, 4, ..., 2W) for
# each parameter (BSP: one step on the mean of the W gradients of batch 1).
check_pulled() {
    local want r got
    want=$(awk -v w="$2" -v lr=$lr -v x=$init 'BEGIN { s = 0
        for (r = 0; r < w; r++) s += 2 * (r + 1)
        printf "%.9g", x - lr * s / w }')
    for ((r = 0; r < $2; r++)); do
        [ -s "$1/worker-$r.jsonl.pulled" ] || fail "rank $r of $1 pulled nothing"
        for got in $(cat "$1/worker-$r.jsonl.pulled"); do
            awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; exit !(d < 1e-5 && d > -1e-5) }' ||
                fail "rank $r of $1 pulled $got for clock 1, expected $want"
        done
    done
    echo "every rank of $(basename "$1") pulled $want for clock 1"
}

# check_ok RUN W: a run that ended well.
check_ok() {
    local run=$1 w=$2 acc
    check_pulled "$run" "$w"
    [ -s "$run/summary.json" ] || fail "no summary.json in $run"
    grep -q '"status": "ok"' "$run/summary.json" || fail "summary: $(head -5 "$run/summary.json")"
    acc=$(sed -n 's/^ *"final_test_accuracy": \([0-9.]*\),*$/\1/p' "$run/summary.json")
    awk -v a="${acc:-x}" 'BEGIN { exit !(a + 0 == 0.625) }' ||
        fail "final_test_accuracy '$acc' in $run/summary.json, expected 0.625"
    grep -q "\"workers\": $w," "$run/summary.json" || fail "summary's workers"
    for ((r = 0; r < w; r++)); do
        grep -q "^# worker $r\$" "$run/commands.txt" || fail "commands.txt has no worker $r"
        grep -q "^ZPS_SERVERS=tcp://[^ ]* ZPS_RANK=$r ZPS_WORKERS=$w ZPS_METRICS=[^ ]*/worker-$r.jsonl .*cmd.sh" \
            "$run/commands.txt" || fail "commands.txt: $(cat "$run/commands.txt")"
    done
    [ ! -e "$run/evaluator.log" ] || fail "an evaluator ran beside the command"
    ! grep -q zps-worker "$run/commands.txt" || fail "a zps-worker ran: $(cat "$run/commands.txt")"
    none_alive "$run"
}

# --- 2 servers, 3 ranks: trains its one clock and ends well ---
rc=0
"$zps" launch --servers 2 --workers 3 --server-arg=--lr=$lr --runs-dir "$runs" --name ok \
    --no-progress --time-limit 120 -- "$dir/cmd.sh" 2 >"$dir/ok.out" 2>"$dir/ok.err" || rc=$?
[ "$rc" = 0 ] || { cat "$dir/ok.err" >&2; fail "exit $rc, expected 0"; }
check_ok "$runs/ok" 3
grep -q "^final test accuracy 0.6250 (loss 0.7500) after 1 clocks: bsp, 2 servers x 3 workers" \
    "$dir/ok.out" || fail "final line: $(cat "$dir/ok.out")"
grep -q "zps launch: command: $dir/cmd.sh 2, once per worker rank (3 ranks); the servers get --lr=$lr" \
    "$dir/ok.err" || fail "plan line: $(head -3 "$dir/ok.err")"
! grep -q "batch .* per worker" "$dir/ok.err" || fail "the plan claims a C model: $(head -3 "$dir/ok.err")"
grep -q "^worker 2 | cmd: rank 2 of 3" "$dir/ok.err" || fail "rank 2's output not echoed"
grep -q "cmd: rank 1 of 3" "$runs/ok/worker-1.log" || fail "rank 1's log"

# --- rank 1 exits 3: the run fails naming it, and nothing is left ---
rc=0
FAIL_RANK=1 "$zps" launch --servers 2 --workers 3 --server-arg=--lr=$lr --runs-dir "$runs" \
    --name fail --no-progress --time-limit 120 -- "$dir/cmd.sh" 2 \
    >"$dir/fail.out" 2>"$dir/fail.err" || rc=$?
[ "$rc" = 1 ] || { cat "$dir/fail.err" >&2; fail "rank 1 failing: exit $rc, expected 1"; }
grep -q "zps launch: failed: worker 1 (pid [0-9]*) exited with status 3; its log: .*/worker-1.log" \
    "$dir/fail.err" || { cat "$dir/fail.err" >&2; fail "the failure does not name rank 1 and 3"; }
grep -q '"status": "failed"' "$runs/fail/summary.json" || fail "summary of the failed run"
grep -q '"failed_process": "worker 1"' "$runs/fail/summary.json" || fail "summary: failed_process"
none_alive "$runs/fail"

# --- --keys: each rank gets its own key files, rank 0 an admin key ---
rc=0
"$zps" launch --keys --servers 1 --workers 2 --server-arg=--lr=$lr --runs-dir "$runs" \
    --name keyed --no-progress --time-limit 120 -- "$dir/cmd.sh" 1 \
    >"$dir/keyed.out" 2>"$dir/keyed.err" || rc=$?
[ "$rc" = 0 ] || { cat "$dir/keyed.err" >&2; fail "--keys: exit $rc, expected 0"; }
check_ok "$runs/keyed" 2
grep -q "ZPS_RANK=1 .* ZPS_KEY=$runs/keyed/keys/worker-1.key ZPS_SERVER_KEY=$runs/keyed/keys/server.pub " \
    "$runs/keyed/commands.txt" || fail "--keys: $(cat "$runs/keyed/commands.txt")"

# --- --hosts: two "hosts" on loopback addresses, the ssh a stand-in that runs
# the far command here; the servers listen on a port found free on both ---
printf '#!/bin/sh\nwhile [ "$1" != -- ]; do shift; done\nexec sh -c "$2"\n' >"$dir/ssh"
chmod +x "$dir/ssh"
port=
for _ in $(seq 50); do
    p=$((20000 + RANDOM % 30000))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && ! (exec 3<>/dev/tcp/127.0.0.2/$p) 2>/dev/null
    then
        port=$p
        break
    fi
done
[ -n "$port" ] || fail "no free port"
printf '127.0.0.1 servers=1 workers=1\n127.0.0.2 servers=1 workers=1\n' >"$dir/hosts"
rc=0
"$zps" launch --hosts "$dir/hosts" --ssh "$dir/ssh" --port "$port" --server-arg=--lr=$lr \
    --runs-dir "$runs" --name hosts --no-progress --time-limit 120 -- "$dir/cmd.sh" 2 \
    >"$dir/hosts.out" 2>"$dir/hosts.err" || rc=$?
[ "$rc" = 0 ] || { cat "$dir/hosts.err" >&2; fail "--hosts: exit $rc, expected 0"; }
# Each rank's metrics and what it pulled are in its host's folder; the
# metrics are brought back into the run folder.
for r in 0 1; do
    h=127.0.0.$((r + 1))
    cp "$runs/hosts/hosts/$h/worker-$r.jsonl.pulled" "$runs/hosts/"
    grep -q '"type":"step"' "$runs/hosts/worker-$r.jsonl" || fail "--hosts: rank $r's metrics"
done
check_ok "$runs/hosts" 2
grep -q "ZPS_METRICS=$runs/hosts/hosts/127.0.0.2/worker-1.jsonl ZPS_KEY=" \
    "$runs/hosts/commands.txt" || fail "--hosts: $(cat "$runs/hosts/commands.txt")"

# --- zps-worker's flags are refused with a command, before anything starts ---
for flag in "--batch 8" "--model mlp:8-4" "--worker-arg=--seed=2" "--straggler 1:slowdown=2"; do
    # shellcheck disable=SC2086 # the flag and its value are two words
    expect_status 2 "$zps" launch --runs-dir "$runs" --name refused $flag -- "$dir/cmd.sh" 2
    name=${flag%% *}
    name=${name%%=*}
    grep -q "zps launch: $name is for zps-worker, and with a command" "$dir/err" ||
        fail "'$flag': $(cat "$dir/err")"
done
expect_status 2 "$zps" launch --runs-dir "$runs" --name refused --
grep -q "'--' needs a COMMAND" "$dir/err" || fail "'--' alone: $(cat "$dir/err")"
expect_status 2 "$zps" launch --runs-dir "$runs" --name refused -- "$dir/no-such-command"
grep -q "cannot find the command" "$dir/err" || fail "a missing command: $(cat "$dir/err")"
[ ! -e "$runs/refused" ] || fail "a refused launch made a run folder"
"$zps" launch --help >"$dir/help"
grep -q -- "-- COMMAND ARGS" "$dir/help" || fail "--help does not mention -- COMMAND"
echo "launch command: all checks passed"
