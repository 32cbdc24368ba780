#!/usr/bin/env bash
# CURVE authentication and authorization by role (issue 13, docs/security.md),
# with real zps-server processes, the `zps` tool and keys from `zps keygen`,
# all on 127.0.0.1:
#   - refused, told why, nothing changed: no key, an unlisted key, a wrong
#     server key ("authentication failed for ENDPOINT", exit 1, well within
#     --timeout-ms); a worker key initialising, checkpointing, pushing or
#     pulling as another rank, a reader key pushing (ZPS_EDENIED);
#   - allowed: admin INIT and CHECKPOINT, a worker's push and pull for its
#     own rank, a reader's stats, observer pull and zps top;
#   - SIGHUP: a removed key is refused from then on, on a new connection
#     (handshake) and on one opened before (a training zps-worker stops at
#     its next request with ZPS_EDENIED); a bad file keeps the old list;
#   - `zps reload-keys` does the same for an admin key, is refused to a
#     reader or worker key, reports a bad file (the list in force stays),
#     and to a server without --authorized-keys says there is nothing to
#     reload;
#   - start-up: a secret key others may read, --key without
#     --authorized-keys, and a non-loopback address without keys (and
#     without --insecure) are usage errors (2), before anything listens.
# The model is checked after every refusal with an admin's observer pull.
#
# usage: auth.sh ZPS_SERVER ZPS ZPS_WORKER
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

cd "$dir"
for k in srv adm w0 w2 rd stranger other; do
    "$zps" keygen "$dir/$k" >/dev/null
done
authorized() {
    {
        echo "# the test's keys"
        echo "$(cat adm.pub) admin"
        echo "$(cat w0.pub) worker 0"
        [ "${1:-}" = no-w2 ] || echo "$(cat w2.pub) worker 2  # rank 2 only"
        echo "$(cat rd.pub) reader"
    } >"$dir/ak.tmp"
    mv "$dir/ak.tmp" "$dir/ak"
}
authorized
mkdir "$dir/ckpt"
# ASP with lr 1: every push is applied at once and shows in the model.
start_server main --workers 3 --mode asp --lr 1 --checkpoint-dir "$dir/ckpt" \
    --key "$dir/srv.key" --authorized-keys "$dir/ak"
main=$ep
server_pid=${pids[-1]}

as() { # as KEY CMD ARGS... : the tool with KEY's key pair and the server's key
    local key=$1 cmd=$2; shift 2
    "$zps" "$cmd" --servers "$main" --key "$dir/$key.key" --server-key "$dir/srv.pub" "$@"
}
model() { as adm pull --timeout-ms 5000 | tr '\n' ' '; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# refused_auth CMD... : exit 1 with "authentication failed for $main" (or $at), well within
# the deadline
refused_auth() {
    local t0; t0=$(now_ms)
    expect_status 1 "$@"
    local took=$(( $(now_ms) - t0 ))
    grep -q "authentication failed for ${at:-$main}" "$dir/err" || fail "'$*': $(cat "$dir/err")"
    [ "$took" -lt 4000 ] || fail "'$*' took $took ms to fail (deadline 5000)"
}
# denied CMD... : exit 1, the server's ZPS_EDENIED and its reason on stderr
denied() {
    expect_status 1 "$@"
    grep -q "ZPS_EDENIED" "$dir/err" || fail "'$*' not denied: $(cat "$dir/err")"
}

# --- before INIT: nobody but an admin may initialise ---
refused_auth "$zps" init --servers "$main" --values 1,1 --timeout-ms 5000
refused_auth "$zps" init --servers "$main" --values 1,1 --timeout-ms 5000 \
    --key "$dir/stranger.key" --server-key "$dir/srv.pub"
refused_auth "$zps" init --servers "$main" --values 1,1 --timeout-ms 5000 \
    --key "$dir/adm.key" --server-key "$dir/other.pub"
denied as w0 init --values 1,1 --timeout-ms 5000
grep -q "may not initialise" "$dir/err" || fail "INIT refusal reason: $(cat "$dir/err")"
denied as rd init --values 1,1 --timeout-ms 5000
# Had any of them been taken, this INIT of other values would be refused.
as adm init --values 10,20
[ "$(model)" = "10 20 " ] || fail "model after INIT: $(model)"

# --- pushes that must change nothing ---
refused_auth "$zps" push --servers "$main" --worker 0 --clock 0 --batch 1 --values 1,1 \
    --timeout-ms 5000
refused_auth "$zps" push --servers "$main" --worker 0 --clock 0 --batch 1 --values 1,1 \
    --timeout-ms 5000 --key "$dir/stranger.key" --server-key "$dir/srv.pub"
refused_auth "$zps" push --servers "$main" --worker 0 --clock 0 --batch 1 --values 1,1 \
    --timeout-ms 5000 --key "$dir/w0.key" --server-key "$dir/other.pub"
denied as w2 push --worker 1 --clock 0 --batch 1 --values 1,1
grep -q "may not push as worker 1" "$dir/err" || fail "rank refusal reason: $(cat "$dir/err")"
denied as rd push --worker 0 --clock 0 --batch 1 --values 1,1
denied as w2 pull --worker 1 --clock 0 --timeout-ms 5000
denied as w0 checkpoint
denied as rd checkpoint
[ -z "$(ls "$dir/ckpt")" ] || fail "a refused CHECKPOINT wrote $(ls "$dir/ckpt")"
[ "$(model)" = "10 20 " ] || fail "model changed by refused requests: $(model)"

# --- what each role may do ---
as w2 push --worker 2 --clock 0 --batch 1 --values 1,2
as w0 push --worker 0 --clock 0 --batch 1 --values 1,1
[ "$(model)" = "8 17 " ] || fail "model after two allowed pushes: $(model)"
[ "$(as w2 pull --worker 2 --clock 1 --timeout-ms 5000 | tr '\n' ' ')" = "8 17 " ] ||
    fail "worker pull for its own rank"
[ "$(as rd pull --timeout-ms 5000 | tr '\n' ' ')" = "8 17 " ] || fail "reader's observer pull"
# (into a variable first: `| grep -q` under pipefail may fail on SIGPIPE)
rd_stats=$(as rd stats --timeout-ms 5000) || fail "reader's stats"
[[ $rd_stats == *'"version":2'* ]] || fail "reader's stats: $rd_stats"
as w0 stats --timeout-ms 5000 >/dev/null || fail "worker's stats"
# STATS counts what was refused: handshakes (unlisted keys) and requests (roles).
auth=$(as rd stats --timeout-ms 5000 | grep -o '"auth":{[^}]*}')
echo "$auth" | grep -q '"on":true,"keys":4,' || fail "STATS auth: $auth"
refused=$(echo "$auth" | sed 's/.*"handshakes_refused":\([0-9]*\).*/\1/')
denied=$(echo "$auth" | sed 's/.*"requests_denied":\([0-9]*\).*/\1/')
[ "$refused" -ge 2 ] && [ "$denied" -ge 5 ] || fail "STATS auth counts: $auth"
# zps top reads STATS too: with a listed key it draws the shard, without one
# it is refused like any client.
"$zps" top --servers "$main" --once --key "$dir/rd.key" --server-key "$dir/srv.pub" \
    --timeout-ms 5000 >"$dir/top.out" || fail "zps top with a reader key: $(cat "$dir/top.out")"
grep -q "^zps top | 1 shard | asp, 3 workers" "$dir/top.out" || fail "zps top: $(cat "$dir/top.out")"
expect_status 1 "$zps" top --servers "$main" --once --timeout-ms 3000
as adm checkpoint --timeout-ms 5000 >/dev/null
[ -n "$(ls "$dir/ckpt")" ] || fail "admin CHECKPOINT wrote nothing"

# --- SIGHUP: a bad file keeps the list in force; a good one revokes w2 ---
echo "not a key" >"$dir/ak"
kill -HUP "$server_pid"
for _ in $(seq 1 300); do grep -q "keeping the authorized keys" main.log && break; sleep 0.01; done
grep -q "keeping the authorized keys" main.log || fail "bad reload not logged: $(cat main.log)"
as w2 push --worker 2 --clock 1 --batch 1 --values 0,0
authorized no-w2
kill -HUP "$server_pid"
for _ in $(seq 1 300); do grep -q "reloaded" main.log && break; sleep 0.01; done
grep -q "reloaded .*: 3 authorized keys" main.log || fail "reload not logged: $(cat main.log)"
refused_auth "$zps" push --servers "$main" --worker 2 --clock 2 --batch 1 --values 1,1 \
    --timeout-ms 5000 --key "$dir/w2.key" --server-key "$dir/srv.pub"
as w0 push --worker 0 --clock 1 --batch 1 --values 0,0
[ "$(model)" = "8 17 " ] || fail "model after revocation: $(model)"
kill -0 "$server_pid" || fail "the server died on SIGHUP"

# --- zps reload-keys: an admin's request does what SIGHUP does; no other key may ---
authorized # w2 listed again
for k in rd w0; do
    expect_status 1 as "$k" reload-keys --timeout-ms 5000
    grep -q "may not reload the authorized keys" "$dir/err" || fail "$k reload-keys: $(cat "$dir/err")"
done
expect_status 1 as w2 reload-keys --timeout-ms 5000 # still unlisted: no handshake
grep -q "authentication failed for $main" "$dir/err" || fail "w2 reload-keys: $(cat "$dir/err")"
expect_status 0 as adm reload-keys --timeout-ms 5000
[ "$(cat "$dir/out")" = '{"keys":4}' ] || fail "reload-keys printed: $(cat "$dir/out")"
grep -q "RELOAD_KEYS from .*: reloaded .*: 4 authorized keys" main.log ||
    fail "reload-keys not logged: $(cat main.log)"
as w2 push --worker 2 --clock 2 --batch 1 --values 0,0 --timeout-ms 5000 # admitted again
echo "not a key" >"$dir/ak"
expect_status 1 as adm reload-keys --timeout-ms 5000
grep -q "kept the authorized keys in force (4)" "$dir/err" || fail "bad file: $(cat "$dir/err")"
as w2 push --worker 2 --clock 3 --batch 1 --values 0,0 --timeout-ms 5000 # the list in force stays
authorized
[ "$(model)" = "8 17 " ] || fail "model after reload-keys: $(model)"
start_server nokeys --workers 1
expect_status 1 "$zps" reload-keys --servers "$ep" --timeout-ms 5000
grep -q "no --authorized-keys: there is nothing to reload" "$dir/err" ||
    fail "reload-keys without keys: $(cat "$dir/err")"

# --- zps-worker: an unlisted key fails at once; a key others may read is usage ---
t0=$(now_ms)
expect_status 1 "$worker_bin" --servers "$main" --rank 0 --workers 3 --data synthetic --clocks 1 \
    --no-progress --timeout 5000 --key "$dir/stranger.key" --server-key "$dir/srv.pub"
grep -q "authentication failed for $main" "$dir/err" || fail "zps-worker: $(cat "$dir/err")"
[ $(( $(now_ms) - t0 )) -lt 4000 ] || fail "zps-worker took too long to fail"
cp w0.key loose-w0.key
chmod 644 loose-w0.key
expect_status 2 "$worker_bin" --servers "$main" --rank 0 --workers 3 --data synthetic \
    --key "$dir/loose-w0.key" --server-key "$dir/srv.pub"
grep -q "chmod 600" "$dir/err" || fail "zps-worker loose key: $(cat "$dir/err")"

# --- SIGHUP on an open connection: a training worker is refused at its next request ---
authorized
start_server rev --workers 3 --mode asp --key "$dir/srv.key" --authorized-keys "$dir/ak"
rev=$ep
rev_pid=${pids[-1]}
"$worker_bin" --servers "$rev" --rank 0 --workers 3 --data synthetic --init-only --no-progress \
    --key "$dir/adm.key" --server-key "$dir/srv.pub" 2>"$dir/init.err" ||
    fail "admin worker 0 --init-only: $(cat "$dir/init.err")"
set +e
"$worker_bin" --servers "$rev" --rank 2 --workers 3 --data synthetic --clocks 1000 \
    --base-step-ms 10 --no-progress --timeout 5000 --key "$dir/w2.key" \
    --server-key "$dir/srv.pub" >/dev/null 2>"$dir/w2.err" &
w2_pid=$!
set -e
pids+=("$w2_pid")
for _ in $(seq 1 500); do grep -q '"rank2"\|worker 2' "$dir/w2.err" 2>/dev/null && break; sleep 0.01; done
sleep 0.5
kill -0 "$w2_pid" 2>/dev/null || fail "worker 2 ended before the revocation: $(cat "$dir/w2.err")"
authorized no-w2
kill -HUP "$rev_pid"
t0=$(now_ms)
set +e
wait "$w2_pid"
w2_status=$?
set -e
[ "$w2_status" -eq 1 ] || fail "revoked worker 2 exited $w2_status: $(cat "$dir/w2.err")"
grep -q "ZPS_EDENIED" "$dir/w2.err" || fail "revoked worker 2: $(tail -3 "$dir/w2.err")"
[ $(( $(now_ms) - t0 )) -lt 4000 ] || fail "revoked worker 2 took too long to stop"

# --- start-up refusals (usage, 2), before anything listens ---
cp srv.key loose.key
chmod 644 loose.key
expect_status 2 "$server_bin" --workers 1 --listen 'tcp://127.0.0.1:*' --key "$dir/loose.key" \
    --authorized-keys "$dir/ak"
grep -q "chmod 600" "$dir/err" || fail "loose secret key: $(cat "$dir/err")"
expect_status 2 "$server_bin" --workers 1 --listen 'tcp://127.0.0.1:*' --key "$dir/srv.key"
grep -q "go together" "$dir/err" || fail "--key alone: $(cat "$dir/err")"
echo "$(cat w0.pub) worker 5" >bad-ak
expect_status 2 "$server_bin" --workers 2 --listen 'tcp://127.0.0.1:*' --key "$dir/srv.key" \
    --authorized-keys "$dir/bad-ak"
grep -q "bad-ak:1" "$dir/err" || fail "bad list at start: $(cat "$dir/err")"
expect_status 2 "$server_bin" --workers 1 --listen 'tcp://0.0.0.0:0'
grep -q -- "--authorized-keys" "$dir/err" || fail "non-loopback refusal: $(cat "$dir/err")"
grep -q -- "--insecure" "$dir/err" || fail "non-loopback refusal: $(cat "$dir/err")"

# --- with keys, a non-loopback address is served (reached here over 127.0.0.1) ---
listen='tcp://0.0.0.0:*' start_server any --workers 1 --key "$dir/srv.key" \
    --authorized-keys "$dir/ak"
port=${ep##*:}
"$zps" stats --servers "tcp://127.0.0.1:$port" --key "$dir/rd.key" --server-key "$dir/srv.pub" \
    --timeout-ms 5000 >/dev/null || fail "keyed server on 0.0.0.0"
at=tcp://127.0.0.1:$port refused_auth "$zps" stats --servers "tcp://127.0.0.1:$port" \
    --timeout-ms 5000
echo "auth: ok"
