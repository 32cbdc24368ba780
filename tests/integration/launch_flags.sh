#!/usr/bin/env bash
# zps launch's flags and messages (issue 29, docs/launch.md):
#   - --mode ssp without --staleness, or with --staleness 0, is refused (2)
#     before anything starts, and so is zps-server --mode ssp without one;
#   - a bad option is named with the "zps launch:" prefix, an ambiguous one
#     with its possibilities;
#   - --help says launch evaluates every half epoch, not 250 clocks;
#   - one server and one worker are said in the singular, and SIGTERM is
#     named "SIGTERM received";
#   - a ZPS_* variable of the environment is named on stderr and recorded in
#     commands.txt and summary.json's "environment"; one that names a worker
#     or server flag is planned with (batch, the default recipe) and checked,
#     one naming a flag launch sets itself is refused;
#   - a relative --save-params goes into the run folder, and launch says so.
#   - with --keys, the key variables (ZPS_KEY, ...) are named, recorded as
#     held back and not passed on: the run's own keys replace them.
# Stops only what it starts, by PID; the run folder is in lib.sh's $dir.
#
# usage: launch_flags.sh ZPS ZPS_SERVER
set -euo pipefail
zps=$1
server_bin=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_usage WHAT PATTERN CMD...: CMD exits 2 and its stderr has PATTERN.
expect_usage() {
    local what=$1 pat=$2
    shift 2
    local rc=0
    "$@" >"$dir/out" 2>"$dir/err" || rc=$?
    [ "$rc" = 2 ] || { cat "$dir/err" >&2; fail "$what: exit $rc, expected 2"; }
    grep -qF -- "$pat" "$dir/err" || { cat "$dir/err" >&2; fail "$what: no '$pat'"; }
}

runs=$dir/runs
expect_usage "ssp without staleness" "--mode ssp needs --staleness S (S >= 1" \
    "$zps" launch --mode ssp --runs-dir "$runs"
expect_usage "ssp with staleness 0" "--mode ssp needs --staleness S (S >= 1" \
    "$zps" launch --mode ssp --staleness 0 --runs-dir "$runs"
expect_usage "delay compensation with bsp" "--delay-compensation applies to pushes applied on arrival" \
    "$zps" launch --mode bsp --delay-compensation 0.5
expect_usage "bad delay compensation" "invalid --delay-compensation '-1'" \
    "$zps" launch --mode asp --delay-compensation -1
expect_usage "bad stop-at" "invalid --stop-at '1.5'" "$zps" launch --stop-at 1.5
expect_usage "bad data assignment" "--data-assignment 'mixed': expected static or shared" \
    "$zps" launch --mode asp --data-assignment mixed --runs-dir "$runs"
expect_usage "shared with clocks" "--data-assignment shared runs whole epochs (--epochs)" \
    "$zps" launch --mode asp --data-assignment shared --clocks 100 --runs-dir "$runs"
expect_usage "staleness with asp" "--staleness applies to --mode ssp only" \
    "$zps" launch --mode asp --staleness 2 --runs-dir "$runs"
[ ! -e "$runs" ] || fail "a refused launch created $runs"
expect_usage "zps-server ssp without staleness" "--mode ssp needs --staleness S (S >= 1)" \
    "$server_bin" --listen tcp://127.0.0.1:0 --shard 0/1 --workers 1 --mode ssp

expect_usage "ambiguous option" \
    "zps launch: option '--worker' is ambiguous; possibilities: '--workers'" \
    "$zps" launch --worker 2
expect_usage "unknown option" "zps launch: unrecognized option '--frob'" "$zps" launch --frob
expect_usage "missing value" "zps launch: option '--servers' needs a value" \
    "$zps" launch --servers
if grep -q '^launch:' "$dir/err"; then fail "getopt's own message is printed"; fi

"$zps" launch --help >"$dir/help"
grep -q 'default 250' "$dir/help" && fail "--help still says --eval-every 250"
grep -q 'half epoch' "$dir/help" || fail "--help does not say half an epoch"

# One server, one worker: singular. A short run on synthetic data.
"$zps" launch --servers 1 --workers 1 --mode asp --model linear:8 \
    --data synthetic:n=400,test=100,dim=8 --clocks 20 --runs-dir "$runs" --name one \
    --no-progress --time-limit 120 >"$dir/one.out" 2>"$dir/one.err" ||
    { cat "$dir/one.err" >&2; fail "the one-worker run failed"; }
grep -q 'asp, 1 server, 1 worker; run folder' "$dir/one.err" || fail "plan line not singular"
grep -q ' 1 server x 1 worker, ' "$dir/one.out" || { cat "$dir/one.out" >&2; fail "final line not singular"; }

# A ZPS_* variable naming a flag launch sets itself would be overridden
# without a word: refused, and so is a bad value of a worker flag.
expect_usage "ZPS_MODE" "ZPS_MODE in the environment sets --mode, which zps launch gives" \
    env ZPS_MODE=asp "$zps" launch --runs-dir "$runs"
expect_usage "ZPS_RANK" "ZPS_RANK in the environment sets --rank" \
    env ZPS_RANK=1 "$zps" launch --runs-dir "$runs"
expect_usage "ZPS_DELAY=abc" "from the environment: ZPS_DELAY=abc" \
    env ZPS_DELAY=abc "$zps" launch --runs-dir "$runs"
[ "$(ls "$runs")" = one ] || fail "a refused launch made a run folder: $(ls "$runs")"

# ZPS_* variables of the environment: named, passed on, recorded, and
# planned with: ZPS_BATCH is the batch of the plan, an optimizer flag
# replaces the default recipe as a --server-arg would. A relative output
# path goes into the run folder, not into the directory launch runs in.
mkdir -p "$dir/cwd"
(cd "$dir/cwd" && ZPS_LAUNCH_FLAGS_PROBE='x y' ZPS_BATCH=8 ZPS_WEIGHT_DECAY=0.5 \
    "$zps" launch --servers 1 --workers 1 --mode asp --model linear:8 \
    --data synthetic:n=400,test=100,dim=8 --clocks 10 --runs-dir "$runs" --name env \
    --worker-arg=--save-params=final.bin \
    --no-progress --time-limit 120 >"$dir/env.out" 2>"$dir/env.err") ||
    { cat "$dir/env.err" >&2; fail "the run with ZPS_LAUNCH_FLAGS_PROBE failed"; }
grep -q '^zps launch: batch 8 per worker, 10 clocks .*; no default recipe: the environment gives the servers --weight-decay=0.5$' \
    "$dir/env.err" || { cat "$dir/env.err" >&2; fail "the plan line ignores the environment"; }
grep -q 'optimizer sgd, lr 0.01' "$runs/env/server-0.log" ||
    { cat "$runs/env/server-0.log" >&2; fail "the recipe was applied over ZPS_WEIGHT_DECAY"; }
grep -q '^\[zps launch\] .*batch 8\|batch 8, ' "$runs/env/worker-0.log" ||
    { cat "$runs/env/worker-0.log" >&2; fail "the worker does not train with ZPS_BATCH"; }
grep -qF "zps launch: --save-params final.bin: written to $runs/env/final.bin" "$dir/env.err" ||
    { cat "$dir/env.err" >&2; fail "launch does not say where --save-params goes"; }
[ -s "$runs/env/final.bin" ] || fail "--save-params final.bin is not in the run folder"
[ ! -e "$dir/cwd/final.bin" ] || fail "--save-params final.bin was written into the current directory"
grep -q '^zps launch: the environment changes this run:.* ZPS_LAUNCH_FLAGS_PROBE=x y' \
    "$dir/env.err" || { cat "$dir/env.err" >&2; fail "the variable is not named"; }
grep -qx '# environment, passed on to every process: ZPS_LAUNCH_FLAGS_PROBE=x y' \
    "$runs/env/commands.txt" || fail "commands.txt does not record the variable"
/usr/bin/python3 -c 'import json, sys
e = json.load(open(sys.argv[1]))["environment"]
assert e["ZPS_LAUNCH_FLAGS_PROBE"] == "x y", e' "$runs/env/summary.json" ||
    fail "summary.json does not record the variable"

# With --keys the run makes its own keys: the key variables a shell keeps
# for the zps commands (ZPS_KEY, ZPS_SERVER_KEY, ...) are replaced, named
# and held back from the children, not refused.
ZPS_KEY=/nonexistent/worker.key ZPS_SERVER_KEY=/nonexistent/server.pub \
    "$zps" launch --keys --servers 1 --workers 1 --mode asp --model linear:8 \
    --data synthetic:n=400,test=100,dim=8 --clocks 10 --runs-dir "$runs" --name keys \
    --no-progress --time-limit 120 >"$dir/keys.out" 2>"$dir/keys.err" ||
    { cat "$dir/keys.err" >&2; fail "--keys with ZPS_KEY in the environment failed"; }
grep -q "^zps launch: the run's own keys replace .*ZPS_KEY=/nonexistent/worker.key" \
    "$dir/keys.err" || { cat "$dir/keys.err" >&2; fail "--keys does not name ZPS_KEY"; }
grep -qx "# environment, not passed on (--keys: the run's own keys): ZPS_SERVER_KEY=/nonexistent/server.pub" \
    "$runs/keys/commands.txt" || fail "commands.txt does not record ZPS_SERVER_KEY as held back"
grep -q '^# environment, passed on to every process: ZPS_\(SERVER_\)\?KEY=' \
    "$runs/keys/commands.txt" && fail "a key variable was passed on under --keys"

# SIGTERM while the cluster trains: "SIGTERM received", exit 143.
"$zps" launch --servers 1 --workers 2 --mode asp --model linear:8 \
    --data synthetic:n=4000,test=100,dim=8 --clocks 100000 --base-step-ms 20 \
    --runs-dir "$runs" --name term --no-progress --time-limit 120 \
    >"$dir/term.out" 2>"$dir/term.err" &
lpid=$!
for _ in $(seq 600); do
    [ -s "$runs/term/worker-1.jsonl" ] && break
    sleep 0.1
done
kill -TERM $lpid
rc=0
wait $lpid || rc=$?
[ "$rc" = 143 ] || { cat "$dir/term.err" >&2; fail "SIGTERM: exit $rc, expected 143"; }
grep -q 'SIGTERM received' "$dir/term.err" || { cat "$dir/term.err" >&2; fail "no 'SIGTERM received'"; }
grep -q 'Terminated received' "$dir/term.err" && fail "strsignal's name printed"
echo ok
