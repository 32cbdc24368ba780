#!/usr/bin/env bash
# zps top --run DIR reads the servers from a run folder's server-I.endpoint
# files (as zps launch writes them), needs no --servers, and with --once
# samples STATS twice about a second apart: every shard's row has a step
# rate, a number, not "-". In the keyed run the folder has keys/ as zps
# launch --keys lays it out, and zps top takes its keys from there.
#
# usage: top_run.sh ZPS_SERVER_BIN ZPS_BIN ZPS_WORKER_BIN
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
. "$(dirname "$0")/lib.sh"

run=$dir/run
mkdir -p "$run"
start_server s0 --shard 0/2 --workers 1
echo "$ep" >"$run/server-0.endpoint"
e0=$ep
start_server s1 --shard 1/2 --workers 1
echo "$ep" >"$run/server-1.endpoint"
e1=$ep

# A worker that trains for longer than the test lasts.
"$worker_bin" --servers "$e0,$e1" --rank 0 --workers 1 --epochs 1000000 \
    --data synthetic:n=200,test=20,dim=4 --no-progress "${client_keys[@]}" 2>"$dir/w0.log" &
pids+=($!)
for _ in $(seq 1 100); do
    with_keys "$zps" stats --servers "$e0" 2>/dev/null | grep -q '"version":[1-9]' && break
    sleep 0.1
done

if [ "$secure" = 1 ]; then
    mkdir -m 700 "$run/keys"
    cp -p "$dir/keys/admin.key" "$run/keys/launch.key"
    cp -p "$dir/keys/server.pub" "$run/keys/server.pub"
fi
"$zps" top --run "$run" --once >"$dir/top" 2>"$dir/top.err" \
    || fail "zps top --run: exit $?: $(cat "$dir/top.err")"
cat "$dir/top"
for shard in 0 1; do
    grep -Eq "^$shard +[0-9]+ +[0-9]+\.[0-9] " "$dir/top" \
        || fail "no row with a rate for shard $shard: $(cat "$dir/top")"
done
grep -Eq "^0 +[0-9]+ +0*[1-9][0-9]*\.[0-9] " "$dir/top" || fail "shard 0 took no step: $(cat "$dir/top")"

# Not a run folder: said, exit 2.
expect_status 2 "$zps" top --run "$dir" --once
grep -q "server-0.endpoint" "$dir/err" || fail "not a run folder: $(cat "$dir/err")"
echo "top --run: all checks passed"
