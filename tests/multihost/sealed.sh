#!/usr/bin/env bash
# Sealed sessions between hosts (hosts are network namespaces on one bridge,
# netns.sh; CURVE keys on). Host 0 runs two servers, host 1 one worker per
# server; the same run (one worker, BSP, the same seed and data) twice:
#   - to server A, whose sealed port is open: the worker's requests go sealed
#     (STATS sealed.opened counts them, and so does /metrics'
#     zps_sealed_messages_total), nothing is refused, and the worker says
#     nothing of a fallback;
#   - to server B, whose sealed port host 0's firewall drops (nft or
#     iptables in host 0's namespace): the worker says its sealed socket did
#     not answer and goes on over CURVE alone (sealed.opened 0), within a few
#     seconds, and finishes;
#   - both runs end with bit-identical parameters: how the bytes travelled
#     changes nothing.
# Every wait is bounded. Exits 77 (skipped) without root, namespaces, or nft
# and iptables.
#
# usage: sealed.sh ZPS_SERVER ZPS ZPS_WORKER
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/netns.sh"

mh_require_firewall
mh_up 2 60
d=$mh_dir
mh_keys "$zps" 1

# start NAME PORT SEAL_PORT [ARG...] : a server on host 0
start() {
    local name=$1 port=$2 seal=$3
    shift 3
    mh_start 0 "server-$name" "$server_bin" --listen "tcp://${mh_addr[0]}:$port" \
        --seal-port "$seal" --endpoint-file "$d/server-$name.ep" --workers 1 --mode bsp \
        --lr 0.05 --key "$d/srv.key" --authorized-keys "$d/authorized_keys" "$@"
    local pid=$mh_pid
    for _ in $(seq 1 100); do
        [ -s "$d/server-$name.ep" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -s "$d/server-$name.ep" ] || mh_fail "server $name did not start: $(cat "$d/server-$name.log")"
}
start a 7100 7200 --metrics-listen "${mh_addr[0]}:9100"
start b 7101 7201

# Host 0 drops what comes to server B's sealed port.
ns0=$(mh_host_ns 0)
case $(mh_firewall) in
nft)
    ip netns exec "$ns0" nft -f - <<EOF || mh_fail "nft"
table inet zps_sealed {
    chain in { type filter hook input priority 0; policy accept; tcp dport 7201 drop; }
}
EOF
    ;;
iptables) ip netns exec "$ns0" iptables -I INPUT -p tcp --dport 7201 -j DROP || mh_fail "iptables" ;;
esac

# train NAME PORT : the run, on host 1, to its end
train() {
    mh_start 1 "worker-$1" "$worker_bin" --servers "tcp://${mh_addr[0]}:$2" --rank 0 --workers 1 \
        --data synthetic:n=2000,test=200,dim=8 --model linear:8 --batch 8 --clocks 120 \
        --no-progress --timeout 30000 --save-params "$d/params-$1.f32" \
        --key "$d/w0.key" --server-key "$d/srv.pub"
    mh_wait_pid "$mh_pid" 40
    [ "$mh_rc" -eq 0 ] || mh_fail "worker of server $1 exited $mh_rc: $(tail -5 "$d/worker-$1.log")"
}
# sealed NAME PORT FIELD : a number of server NAME's STATS `sealed` object
sealed() {
    local json
    json=$(on_host 0 "$zps" stats --servers "tcp://${mh_addr[0]}:$2" --timeout-ms 3000 \
        --key "$d/rd.key" --server-key "$d/srv.pub") || mh_fail "stats of server $1"
    [[ $json =~ \"sealed\":\{[^}]*\"$3\":([0-9]+) ]] || mh_fail "no sealed.$3 in: $json"
    echo "${BASH_REMATCH[1]}"
}

train a 7100
opened=$(sealed a 7100 opened)
[ "$opened" -ge 100 ] || mh_fail "server a opened $opened sealed messages (120 clocks)"
[ "$(sealed a 7100 refused)" -eq 0 ] || mh_fail "server a refused sealed messages"
if grep -q "did not answer" "$d/worker-a.log"; then mh_fail "worker a fell back: $(cat "$d/worker-a.log")"; fi
# The Prometheus endpoint says the same (published once a second).
ok=no
for _ in $(seq 1 30); do
    on_host 0 curl -sf "http://${mh_addr[0]}:9100/metrics" >"$d/metrics.txt" 2>/dev/null || true
    if grep -qx "zps_sealed_messages_total{shard=\"0\",result=\"opened\"} $opened" "$d/metrics.txt"; then
        ok=yes
        break
    fi
    sleep 0.2
done
[ "$ok" = yes ] || mh_fail "/metrics does not say $opened sealed messages opened: $(grep sealed "$d/metrics.txt")"
grep -qx 'zps_sealed_messages_total{shard="0",result="refused"} 0' "$d/metrics.txt" ||
    mh_fail "/metrics counts refused sealed messages"
if command -v promtool >/dev/null; then
    promtool check metrics <"$d/metrics.txt" >"$d/promtool.txt" 2>&1 ||
        mh_fail "promtool check metrics: $(cat "$d/promtool.txt")"
fi

t0=$(mh_now)
train b 7101
took=$(mh_secs "$t0" "$(mh_now)")
grep -q "sealed socket (port 7201) did not answer within 3000 ms: CURVE carries everything" \
    "$d/worker-b.log" || mh_fail "worker b did not report the filtered port: $(cat "$d/worker-b.log")"
[ "$(sealed b 7101 opened)" -eq 0 ] || mh_fail "server b opened sealed messages through a filter"
cmp -s "$d/params-a.f32" "$d/params-b.f32" || mh_fail "the sealed and the CURVE run ended differently"
echo "sealed run: $opened messages opened; filtered run fell back to CURVE and finished in ${took} s; parameters identical"
echo "PASS"
