#!/usr/bin/env bash
# zps launch --keys (issue 13, docs/launch.md, docs/security.md): a short
# BSP run on synthetic data with CURVE on every connection, on 127.0.0.1:
#   - it trains to the end and exits 0, and launch's own STATS (a reader key)
#     reached every server;
#   - RUN/keys is 0700, every secret key 0600, each public key 0644; one pair
#     for the servers, one per worker, the evaluator's and launch's;
#   - authorized_keys: worker 0 admin, worker R `worker R`, the evaluator and
#     launch readers, the servers' own key not listed;
#   - each command line has only its own secret key's path (no key itself),
#     the servers --key and --authorized-keys, every client --server-key;
#   - while it runs, `zps stats` without a key and with a key of its own are
#     refused by a server of the run ("authentication failed", exit 1), and
#     launch's reader key is let in; the servers' logs say authentication is on;
#   - with --keys, a --worker-arg --key or --server-arg --insecure is refused (2).
# Stops only what it starts, by PID (lib.sh); the run folder is in lib.sh's $dir.
#
# usage: launch_keys.sh ZPS
set -euo pipefail
zps=$1
server_bin=/nonexistent # lib.sh's start_server is not used here
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

workers=3
run=$dir/runs/keyed
# 150 clocks of at least 20 ms: a few seconds of training to probe the servers in.
"$zps" launch --keys --servers 2 --workers $workers --mode bsp --model linear:8 \
    --data synthetic:n=4000,test=500,dim=8 --clocks 150 --base-step-ms 20 \
    --runs-dir "$dir/runs" --name keyed --quiet --no-progress --time-limit 120 \
    >"$dir/launch.out" 2>"$dir/launch.err" &
launch_pid=$!
pids+=("$launch_pid")

# --- while it runs: a client without a listed key is refused ---
for _ in $(seq 1 1000); do
    [ -s "$run/server-0.endpoint" ] && [ -s "$run/server-1.endpoint" ] && break
    kill -0 "$launch_pid" 2>/dev/null || break
    sleep 0.01
done
[ -s "$run/server-1.endpoint" ] || fail "no server endpoint: $(cat "$dir/launch.err")"
ep=$(cat "$run/server-1.endpoint")
expect_status 1 "$zps" stats --servers "$ep" --timeout-ms 3000
grep -q "authentication failed for $ep" "$dir/err" || fail "no key: $(cat "$dir/err")"
"$zps" keygen "$dir/stranger" >/dev/null
expect_status 1 "$zps" stats --servers "$ep" --timeout-ms 3000 \
    --key "$dir/stranger.key" --server-key "$run/keys/server.pub"
grep -q "authentication failed for $ep" "$dir/err" || fail "unlisted key: $(cat "$dir/err")"
expect_status 0 "$zps" stats --servers "$ep" --timeout-ms 3000 \
    --key "$run/keys/launch.key" --server-key "$run/keys/server.pub"
grep -q '"version"' "$dir/out" || fail "launch's key: $(cat "$dir/out")"
kill -0 "$launch_pid" 2>/dev/null || fail "the run ended before the probes; make it longer"
refused_while_running=yes

# --- the run ends well ---
set +e
wait "$launch_pid"
rc=$?
set -e
[ "$rc" -eq 0 ] || fail "zps launch --keys exited $rc: $(tail -5 "$dir/launch.err")"
grep -q "^final test loss .* after 150 clocks: bsp, 2 servers x $workers workers" \
    "$dir/launch.out" || fail "final line: $(cat "$dir/launch.out")"
grep -q "CURVE on every connection; keys in $dir/runs/keyed/keys" "$dir/launch.err" ||
    fail "no keys line: $(cat "$dir/launch.err")"
[ "$(grep -c '"final":true' "$run/stats.jsonl")" -eq 2 ] || fail "launch's final STATS"
for s in 0 1; do
    grep -q "authentication on: $((workers + 2)) authorized keys from $run/keys/authorized_keys" \
        "$run/server-$s.log" || fail "server $s: $(head -5 "$run/server-$s.log")"
done

# --- the keys folder ---
mode() { stat -c %a "$1"; }
[ "$(mode "$run/keys")" = 700 ] || fail "keys/ mode $(mode "$run/keys")"
names="server evaluator launch"
for r in $(seq 0 $((workers - 1))); do names="$names worker-$r"; done
for n in $names; do
    [ "$(mode "$run/keys/$n.key")" = 600 ] || fail "$n.key mode $(mode "$run/keys/$n.key")"
    [ "$(mode "$run/keys/$n.pub")" = 644 ] || fail "$n.pub mode $(mode "$run/keys/$n.pub")"
done
[ "$(ls "$run/keys" | grep -c '\.key$')" -eq $((workers + 3)) ] || fail "keys: $(ls "$run/keys")"

# --- authorized_keys: each key with its role ---
ak=$run/keys/authorized_keys
role() { # role NAME : the role words of NAME.pub's line, comment cut
    # A key may hold '#' and regex characters: compare the first field as a string.
    awk -v k="$(cat "$run/keys/$1.pub")" '$1 == k { s = $2; if ($3 != "" && $3 != "#") s = s " " $3; print s }' "$ak"
}
[ "$(role worker-0)" = admin ] || fail "worker 0: '$(role worker-0)'"
for r in $(seq 1 $((workers - 1))); do
    [ "$(role worker-$r)" = "worker $r" ] || fail "worker $r: '$(role worker-$r)'"
done
[ "$(role evaluator)" = reader ] || fail "evaluator: '$(role evaluator)'"
[ "$(role launch)" = reader ] || fail "launch: '$(role launch)'"
[ -z "$(role server)" ] || fail "the servers' key is listed"
[ "$(grep -cv '^#' "$ak")" -eq $((workers + 2)) ] || fail "authorized_keys: $(cat "$ak")"

# --- command lines: paths of their own keys only, never a secret ---
cmds=$run/commands.txt
for n in $names; do
    secret=$(tail -1 "$run/keys/$n.key")
    ! grep -qF -- "$secret" "$cmds" "$dir/launch.err" "$run"/*.log ||
        fail "$n's secret key appears in a command line or log"
done
cmdline() { sed -n "/^# $1\$/{n;p}" "$cmds"; }
for s in 0 1; do
    cmdline "server $s" | grep -qF -- "--key $run/keys/server.key --authorized-keys $ak" ||
        fail "server $s: $(cmdline "server $s")"
done
cmdline evaluator | grep -qF -- "--key $run/keys/evaluator.key --server-key $run/keys/server.pub" ||
    fail "evaluator: $(cmdline evaluator)"
for r in $(seq 0 $((workers - 1))); do
    line=$(cmdline "worker $r")
    echo "$line" | grep -qF -- "--key $run/keys/worker-$r.key --server-key $run/keys/server.pub" ||
        fail "worker $r: $line"
    [ "$(echo "$line" | grep -o -- '--key ' | wc -l)" -eq 1 ] || fail "worker $r: two keys: $line"
done

# --- launch's own key flags are not the user's with --keys ---
expect_status 2 "$zps" launch --keys --worker-arg=--key --worker-arg="$dir/stranger.key" \
    --data synthetic --runs-dir "$dir/runs"
grep -q "set by zps launch for every worker with --keys" "$dir/err" || fail "$(cat "$dir/err")"
expect_status 2 "$zps" launch --keys --server-arg=--insecure --data synthetic --runs-dir "$dir/runs"
grep -q "set by zps launch for every server with --keys" "$dir/err" || fail "$(cat "$dir/err")"

echo "launch_keys: ok (refused without a key while running: $refused_while_running)"
