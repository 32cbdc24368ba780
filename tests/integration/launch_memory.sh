#!/usr/bin/env bash
# zps launch refuses a run that cannot fit before any process starts, and
# names the out-of-memory killer when it stopped one (issue 29, item 3;
# docs/launch.md, "Memory"):
#   - a model of 10 billion parameters is refused with the estimate and what
#     is available, exit 2, within a few seconds, with no run folder; under
#     `ulimit -v` (or, in a sanitizer build, ASan's allocation cap) so that a
#     regression fails instead of thrashing the machine;
#   - in a memory cgroup of 250 MiB made for the test (where this process may
#     make one; else that part prints "skipped"), a run of about 0.5 GiB is
#     refused naming the cgroup's limit, and with --no-memory-check it starts,
#     a process is killed by the kernel, and launch says it was the
#     out-of-memory killer, exit 1.
# Stops only what it starts; removes its cgroup.
#
# usage: launch_memory.sh ZPS
set -euo pipefail
zps=$1
server_bin=/nonexistent # lib.sh's start_server is not used here
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

runs=$dir/runs
data=synthetic:n=2000,test=500,dim=784,classes=10

ms_now() { date +%s%3N; }

# 1. Far beyond this host: refused from the plan alone.
t0=$(ms_now)
rc=0
(
    if ldd "$zps" 2>/dev/null | grep -q libasan; then
        # ASan reserves terabytes of address space: cap its allocations instead.
        export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1:max_allocation_size_mb=2048"
    else
        ulimit -v 4000000
    fi
    exec "$zps" launch --model mlp:784-100000-100000-10 --data "$data" --clocks 10 \
        --runs-dir "$runs" --name big --no-progress --time-limit 30
) >"$dir/big.out" 2>"$dir/big.err" || rc=$?
t1=$(ms_now)
[ "$rc" = 2 ] || { cat "$dir/big.err" >&2; fail "big model: exit $rc, expected 2"; }
grep -q "needs about [0-9.]* GiB on this host (2 servers of [0-9.]* GiB, 4 workers of" \
    "$dir/big.err" || { cat "$dir/big.err" >&2; fail "big model: no estimate"; }
grep -q "GiB available (.*): not started" "$dir/big.err" || fail "big model: no 'available'"
grep -q -- "--no-memory-check" "$dir/big.err" || fail "big model: no hint"
[ ! -e "$runs/big" ] || fail "big model: a run folder was made"
[ $((t1 - t0)) -lt 5000 ] || fail "big model: refused after $((t1 - t0)) ms"
echo "refused 1e10 parameters in $((t1 - t0)) ms: $(grep -o 'needs about.*started' "$dir/big.err")"

# 2. A cgroup of our own, smaller than the run.
own=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
v2=$(awk -F: '$1 == "0" && $2 == "" {print $3}' /proc/self/cgroup)
cg=""
limit=$((250 * 1024 * 1024))
if [ -n "$own" ] && [ -d "/sys/fs/cgroup/memory$own" ] &&
    mkdir "/sys/fs/cgroup/memory${own%/}/zps-test-$$" 2>/dev/null; then
    cg=/sys/fs/cgroup/memory${own%/}/zps-test-$$
    echo $limit >"$cg/memory.limit_in_bytes"
elif [ -n "$v2" ] && [ -f "/sys/fs/cgroup${v2%/}/cgroup.controllers" ] &&
    mkdir "/sys/fs/cgroup${v2%/}/zps-test-$$" 2>/dev/null; then
    cg=/sys/fs/cgroup${v2%/}/zps-test-$$
    if ! echo $limit >"$cg/memory.max" 2>/dev/null; then
        rmdir "$cg"
        cg=""
    fi
fi
if [ -z "$cg" ]; then
    echo "out-of-memory part skipped: no memory cgroup can be made here"
    exit 0
fi
remove_cg() {
    # the processes in it have all exited: the runs are waited for
    rmdir "$cg" 2>/dev/null || true
}
trap 'remove_cg; cleanup' EXIT

small=(--servers 1 --workers 2 --mode asp --model mlp:784-2000-2000-10 --data "$data"
    --clocks 200 --runs-dir "$runs" --no-progress --time-limit 60)
# in_cgroup CMD...: runs CMD inside the test's cgroup.
in_cgroup() { bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"; }

rc=0
in_cgroup "$zps" launch "${small[@]}" --name fits >"$dir/fits.out" 2>"$dir/fits.err" || rc=$?
[ "$rc" = 2 ] || { cat "$dir/fits.err" >&2; fail "cgroup: exit $rc, expected 2"; }
grep -q "GiB available (the memory cgroup's limit): not started" "$dir/fits.err" ||
    { cat "$dir/fits.err" >&2; fail "cgroup: the limit is not named"; }
[ ! -e "$runs/fits" ] || fail "cgroup: a run folder was made"

rc=0
in_cgroup "$zps" launch "${small[@]}" --name oom --no-memory-check --quiet \
    >"$dir/oom.out" 2>"$dir/oom.err" || rc=$?
[ "$rc" = 1 ] || { cat "$dir/oom.err" >&2; fail "--no-memory-check: exit $rc, expected 1"; }
grep -q "was killed by the kernel's out-of-memory killer" "$dir/oom.err" ||
    { cat "$dir/oom.err" >&2; fail "the out-of-memory kill is not named"; }
grep "out-of-memory killer" "$dir/oom.err" | head -1
/usr/bin/python3 - "$runs/oom/summary.json" <<'PY' || fail "summary after the kill"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "failed", s["status"]
PY
echo "launch_memory: ok"
