#!/usr/bin/env bash
# A zps cluster across three hosts (issue 14; hosts are network namespaces on
# one bridge, netns.sh), with CURVE keys on as they must be across hosts
# (docs/security.md):
#   - host 0 and host 1 each run one zps-server shard bound to the host's own
#     address (tcp://10.213.X.1:7100, tcp://10.213.X.2:7100), --key and
#     --authorized-keys; four zps-workers spread over the three hosts, worker 0
#     with an admin key, worker R with a key for rank R only; BSP;
#   - every worker exits 0, and worker 0's final line (accuracy, loss, clocks)
#     and its --save-params file equal a `zps-worker --local --workers 4` run
#     with the same flags, bit for bit (BSP equals one process);
#   - each server logged that authentication is on; from host 2, `zps stats`
#     with a reader key sees every worker at the last clock on both shards,
#     and without a key is refused ("authentication failed", exit 1).
# Every process, keygen and the local run included, runs on a host. Exits 77
# (skipped) without root or namespaces.
#
# usage: cluster.sh ZPS_SERVER ZPS ZPS_WORKER
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/netns.sh"

t_start=$(mh_now)
mh_up 3 50
d=$mh_dir
workers=4
train=(--data synthetic:n=2000,test=500,dim=16,classes=4 --model mlp:16-32-4 --batch 16
    --epochs 5 --seed 3)
opt=(--optimizer momentum --momentum 0.9 --lr 0.05)

# --- keys: one pair for both servers, worker 0 admin, worker R its rank ---
mh_keys "$zps" "$workers"

# --- two servers, each on its own host's address ---
servers=
spids=()
for s in 0 1; do
    ep=tcp://${mh_addr[$s]}:7100
    mh_start "$s" "server-$s" "$server_bin" --listen "$ep" --endpoint-file "$d/server-$s.ep" \
        --shard "$s/2" --workers $workers --mode bsp "${opt[@]}" \
        --key "$d/srv.key" --authorized-keys "$d/authorized_keys"
    spids+=("$mh_pid")
    servers=${servers:+$servers,}$ep
done
for s in 0 1; do
    for _ in $(seq 1 100); do
        [ -s "$d/server-$s.ep" ] && break
        kill -0 "${spids[$s]}" 2>/dev/null || break
        sleep 0.1
    done
    [ -s "$d/server-$s.ep" ] || mh_fail "server $s did not start: $(cat "$d/server-$s.log")"
    grep -q "authentication on" "$d/server-$s.log" ||
        mh_fail "server $s: no 'authentication on': $(head -5 "$d/server-$s.log")"
done
t_up=$(mh_now)

# --- four workers over three hosts: w0 and w3 on host 2, w1 on host 0, w2 on host 1 ---
host_of=(2 0 1 2)
wpids=()
for r in 0 1 2 3; do
    extra=()
    [ "$r" -eq 0 ] && extra=(--save-params "$d/cluster.params")
    mh_start "${host_of[$r]}" "worker-$r" "$worker_bin" --servers "$servers" --rank "$r" \
        --workers $workers "${train[@]}" --no-progress --timeout 30000 \
        --key "$d/w$r.key" --server-key "$d/srv.pub" "${extra[@]}"
    wpids+=("$mh_pid")
done
for r in 0 1 2 3; do
    mh_wait_pid "${wpids[$r]}" 45
    [ "$mh_rc" -eq 0 ] || mh_fail "worker $r on host ${host_of[$r]} exited $mh_rc: $(tail -5 "$d/worker-$r.log")"
done
t_trained=$(mh_now)

# --- the same training in one process, on a host too ---
on_host 1 "$worker_bin" --local --workers $workers "${train[@]}" "${opt[@]}" --no-progress \
    --save-params "$d/local.params" >"$d/local.out" 2>"$d/local.err" ||
    mh_fail "zps-worker --local: $(tail -3 "$d/local.err")"
final() { grep '^final test accuracy' "$1" | sed 's/, [0-9.]* s$//'; }
cluster_line=$(final "$d/worker-0.log")
local_line=$(final "$d/local.out")
[ -n "$cluster_line" ] || mh_fail "no final line from worker 0: $(tail -5 "$d/worker-0.log")"
[ "$cluster_line" = "$local_line" ] ||
    mh_fail "cluster '$cluster_line' differs from local '$local_line'"
cmp "$d/cluster.params" "$d/local.params" ||
    mh_fail "the cluster's final parameters differ from --local's"
[ -s "$d/cluster.params" ] || mh_fail "empty parameters file"

# --- from host 2, a reader key sees both shards at the last clock; no key is refused ---
for s in 0 1; do
    grep -q "authentication on: $((workers + 1)) authorized keys" "$d/server-$s.log" ||
        mh_fail "server $s: $(grep -m1 authentication "$d/server-$s.log")"
    on_host 2 "$zps" stats --servers "tcp://${mh_addr[$s]}:7100" --timeout-ms 5000 \
        --key "$d/rd.key" --server-key "$d/srv.pub" >"$d/stats-$s.json" ||
        mh_fail "zps stats for server $s from host 2"
    grep -q '"clocks":\[160,160,160,160\]' "$d/stats-$s.json" ||
        mh_fail "server $s clocks: $(grep -o '"clocks":[^]]*]' "$d/stats-$s.json")"
    set +e
    on_host 2 "$zps" stats --servers "tcp://${mh_addr[$s]}:7100" --timeout-ms 3000 \
        >/dev/null 2>"$d/nokey.err"
    rc=$?
    set -e
    [ "$rc" -eq 1 ] && grep -q "authentication failed" "$d/nokey.err" ||
        mh_fail "zps stats without a key from host 2 exited $rc: $(cat "$d/nokey.err")"
done

t_end=$(mh_now)
printf 'multihost_cluster: ok: %s (servers %s; up %s s, trained %s s, total %s s)\n' \
    "$cluster_line" "$servers" "$(mh_secs "$t_start" "$t_up")" "$(mh_secs "$t_up" "$t_trained")" \
    "$(mh_secs "$t_start" "$t_end")"
