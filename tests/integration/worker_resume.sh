#!/usr/bin/env bash
# A zps-worker started from scratch against a server resumed from a
# checkpoint: it learns from the replies' next_clock where the shard is and
# continues there, instead of replaying clocks the shard would only treat as
# retries.
#
# usage: worker_resume.sh ZPS_SERVER_BIN ZPS_BIN ZPS_WORKER_BIN
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
. "$(dirname "$0")/lib.sh"

common=(--workers 1 --optimizer momentum --lr 0.05 --checkpoint-dir "$dir/ck" --checkpoint-every 10)
train=(--rank 0 --workers 1 --data synthetic:n=400,test=100,dim=4 --batch 8 --backend cpu
       --no-progress)

start_server s "${common[@]}"
with_keys "$worker_bin" --servers "$ep" "${train[@]}" --clocks 20 --metrics "$dir/first.jsonl" \
    2>"$dir/first.log" || fail "first run: $(cat "$dir/first.log")"
with_keys "$zps" pull --servers "$ep" --verbose >/dev/null 2>"$dir/v1"
grep -q "version 20..20" "$dir/v1" || fail "after the first run: $(cat "$dir/v1")"
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true

start_server r "${common[@]}" --resume
grep -q "resumed from" "$dir/r.log" || fail "no resume: $(cat "$dir/r.log")"
with_keys "$worker_bin" --servers "$ep" "${train[@]}" --clocks 30 --metrics "$dir/second.jsonl" \
    2>"$dir/second.log" || fail "second run: $(cat "$dir/second.log")"
grep -q "expect clock 20 from this worker, not 0" "$dir/second.log" ||
    fail "the worker did not resume at clock 20: $(cat "$dir/second.log")"
steps=$(grep -c '"type":"step"' "$dir/second.jsonl")
[ "$steps" -eq 10 ] || fail "the resumed worker computed $steps clocks, expected 10"
with_keys "$zps" pull --servers "$ep" --verbose >/dev/null 2>"$dir/v2"
grep -q "version 30..30" "$dir/v2" || fail "after the second run: $(cat "$dir/v2")"
expect_keyed "$ep"
echo "worker resume: all checks passed"
