#!/usr/bin/env bash
# Shared data assignment (zps-worker --data-assignment shared, docs/worker.md)
# with real servers and workers: every epoch's batches are each trained
# exactly once, counted once by shard 0's audit and recorded once in the
# workers' metrics, when
#   1. a worker is SIGKILLed mid-epoch, evicted (its leases go to the
#      others) and started again (it resumes at the clock the shards expect);
#   2. every server is stopped mid-epoch and resumed from its checkpoint,
#      the workers started again from scratch: the batches completed after
#      the checkpoint are trained again (their gradients were lost with the
#      servers' state), the ones before it are not;
# and an evaluator observing in pushes gets the final model once every
# worker has finished.
#
# usage: shared_assign.sh ZPS_SERVER_BIN ZPS_BIN ZPS_WORKER_BIN
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
py=/usr/bin/python3
. "$(dirname "$0")/lib.sh"

n=2400
batch=16
epochs=2
batches=$((n / batch * epochs)) # 300: B = 150 batches per epoch
data=(--data synthetic:n=$n,test=200,dim=8,classes=4 --batch $batch --epochs $epochs
      --backend cpu --no-progress --data-assignment shared --timeout 60000)

# start_shards ARGS... : shards 0/2 and 1/2, ASP for 3 workers; sets $servers and $spids
start_shards() {
    spids=()
    start_server s0 --shard 0/2 --workers 3 --mode asp "$@"
    local e0=$ep
    spids+=("${pids[-1]}")
    start_server s1 --shard 1/2 --workers 3 --mode asp "$@"
    spids+=("${pids[-1]}")
    servers=$e0,$ep
}

# start_worker RANK NAME ARGS... : a worker in the background; sets $wpid
start_worker() {
    local rank=$1 name=$2
    shift 2
    "$worker_bin" --servers "$servers" --rank "$rank" --workers 3 "${data[@]}" --no-eval \
        --metrics "$dir/$name.jsonl" "$@" "${client_keys[@]}" 2>"$dir/$name.log" &
    wpid=$!
    pids+=("$wpid")
}

# wait_steps FILE N : until FILE holds N step records (bounded)
wait_steps() {
    local c
    for _ in $(seq 1 600); do
        c=$(grep -c '"type":"step"' "$1" 2>/dev/null || true)
        [ "${c:-0}" -ge "$2" ] && return 0
        sleep 0.05
    done
    fail "$1 never reached $2 steps"
}

stats0() { with_keys "$zps" stats --servers "${servers%%,*}" --timeout-ms 5000; }

# check_run STATS_FILE MAX_MISSING METRICS... : shard 0's audit counts every
# batch once and every epoch's N examples; the metrics name no batch twice
# and miss at most MAX_MISSING (a worker killed after its push was taken,
# before it wrote the step)
check_run() {
    local st=$1 missing=$2
    shift 2
    "$py" - "$st" "$n" "$epochs" "$batches" "$missing" "$@" <<'PY' || fail "audit: see above"
import json, sys
st = json.load(open(sys.argv[1]))
n, epochs, batches, missing = (int(x) for x in sys.argv[2:6])
a = st["assignment"]
assert a["examples_per_epoch"] == [n] * epochs, a
assert a["batches_per_epoch_done"] == [batches // epochs] * epochs, a
assert a["completed"] == batches and a["next"] == batches and a["queued"] == 0, a
assert a["held"] == [0, 0, 0] and a["lease_lost"] == 0, a
assert st["finished"] == [True, True, True], st["finished"]
ids = []
for path in sys.argv[6:]:
    for line in open(path):
        r = json.loads(line)
        if r.get("type") == "step":
            assert 0 <= r["batch_id"] < batches, r
            assert r["epoch"] == r["batch_id"] // (batches // epochs), r
            ids.append(r["batch_id"])
dup = sorted({g for g in ids if ids.count(g) > 1})
assert not dup, "batches recorded twice: %s" % dup[:10]
gone = batches - len(set(ids))
assert 0 <= gone <= missing, "%d batches not in any metrics file" % gone
print("audit: %d batches, each epoch %d examples, %d recorded, %d unrecorded" %
      (batches, n, len(ids), gone))
PY
}

# ---- 1. a worker killed mid-epoch, evicted, started again ----
start_shards --worker-timeout 1
start_worker 0 w0 --base-step-ms 10
p0=$wpid
start_worker 1 w1a --base-step-ms 10
p1=$wpid
start_worker 2 w2 --base-step-ms 10 --slowdown 3
p2=$wpid
"$worker_bin" --servers "$servers" --evaluator --workers 3 "${data[@]}" --eval-every 20 \
    --metrics "$dir/ev.jsonl" "${client_keys[@]}" 2>"$dir/ev.log" &
pev=$!
pids+=("$pev")
wait_steps "$dir/w1a.jsonl" 25
kill -KILL "$p1"
wait "$p1" 2>/dev/null || true
# Evicted after a second of silence: its leases went back to the queue.
for _ in $(seq 1 100); do
    stats0 >"$dir/st" 2>/dev/null || true
    grep -q '"live":\[true,false,true\]' "$dir/st" && break
    sleep 0.1
done
grep -q '"live":\[true,false,true\]' "$dir/st" || fail "worker 1 was not evicted: $(cat "$dir/st")"
grep -q '"held":\[[0-9],0,[0-9]\]' "$dir/st" || fail "the evicted worker's leases were kept: $(cat "$dir/st")"
start_worker 1 w1b --base-step-ms 10
p1=$wpid
for p in "$p0" "$p1" "$p2" "$pev"; do
    wait "$p" || fail "a process of the first run failed: $(tail -n 3 "$dir"/w*.log "$dir/ev.log")"
done
grep -q "expect clock" "$dir/w1b.log" || fail "the restarted worker did not resume: $(cat "$dir/w1b.log")"
grep -q '"final":true' "$dir/ev.jsonl" || fail "no final evaluation: $(cat "$dir/ev.log")"
stats0 >"$dir/st1"
check_run "$dir/st1" 1 "$dir"/w0.jsonl "$dir"/w1a.jsonl "$dir"/w1b.jsonl "$dir"/w2.jsonl
grep -q '"evictions":\[0,1,0\]' "$dir/st1" || fail "evictions: $(cat "$dir/st1")"
slow=$(grep -c '"type":"step"' "$dir/w2.jsonl")
fast=$(grep -c '"type":"step"' "$dir/w0.jsonl")
# Three times slower takes fewer batches (about a third; bounded loosely,
# the machine may be busy): the point of sharing them.
[ "$slow" -lt "$fast" ] || fail "the slow worker took $slow batches, the fast one $fast"
echo "killed worker: all checks passed (fast worker $fast batches, slow $slow)"
for p in "${spids[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done

# ---- 2. the server stopped mid-epoch and resumed from its checkpoint ----
# One shard: shards resumed from checkpoints of different versions would
# disagree about which clocks are retries, whatever the assignment.
ck=(--checkpoint-dir "$dir/ck" --checkpoint-every 40)
start_one() {
    start_server c0 --workers 3 --mode asp "$@"
    spids=("${pids[-1]}")
    servers=$ep
}
start_one "${ck[@]}"
start_worker 0 r0 --base-step-ms 10
q0=$wpid
start_worker 1 r1 --base-step-ms 10
q1=$wpid
start_worker 2 r2 --base-step-ms 10
q2=$wpid
# Past the first checkpoints, before the end of the first epoch (150 batches).
for _ in $(seq 1 600); do
    ls "$dir"/ck/shard-0-of-1-v*0080.zpsckpt >/dev/null 2>&1 && break
    sleep 0.05
done
ls "$dir"/ck/shard-0-of-1-v*0080.zpsckpt >/dev/null 2>&1 || fail "no checkpoint of version 80"
kill -KILL "${spids[0]}"
wait "${spids[0]}" 2>/dev/null || true
for p in "$q0" "$q1" "$q2"; do kill -KILL "$p"; wait "$p" 2>/dev/null || true; done
start_one "${ck[@]}" --resume
grep -q "resumed the data assignment" "$dir/c0.log" || fail "no assignment resumed: $(cat "$dir/c0.log")"
stats0 >"$dir/st2a"
read -r done_at version < <("$py" -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(s["assignment"]["completed"], s["version"])' "$dir/st2a")
# Each push applied completed one batch: the checkpoint's version.
[ "$done_at" = "$version" ] || fail "resumed with $done_at batches completed at version $version"
[ "$done_at" -ge 80 ] && [ "$done_at" -lt 150 ] || fail "resumed with $done_at batches completed"
for r in 0 1 2; do
    start_worker $r "s$r" --base-step-ms 2
    eval "q$r=\$wpid"
done
for p in "$q0" "$q1" "$q2"; do
    wait "$p" || fail "a worker after the resume failed: $(tail -n 3 "$dir"/s[0-2].log)"
done
stats0 >"$dir/st2"
# The batches trained after the resume: exactly those not completed at the checkpoint.
"$py" - "$dir/st2" "$n" "$batches" "$done_at" "$dir"/s0.jsonl "$dir"/s1.jsonl "$dir"/s2.jsonl <<'PY' ||
import json, sys
st = json.load(open(sys.argv[1]))
n, batches, done_at = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
a = st["assignment"]
assert a["completed"] == batches and a["examples_per_epoch"] == [n, n], a
assert st["finished"] == [True, True, True], st["finished"]
ids = [json.loads(l)["batch_id"] for p in sys.argv[5:] for l in open(p) if '"step"' in l]
assert len(ids) == len(set(ids)) == batches - done_at, (len(ids), len(set(ids)), done_at)
print("resumed: %d batches completed before the checkpoint, %d after, none twice" %
      (done_at, len(ids)))
PY
    fail "after the resume: see above"
expect_keyed "$servers"
echo "shared assignment: all checks passed"
