#!/usr/bin/env bash
# A network partition under BSP (issue 14; hosts are network namespaces on one
# bridge, netns.sh; CURVE keys on): host 0 runs server 0 and worker 0, host 1
# server 1 and worker 1, host 2 worker 2; servers with --worker-timeout 2.
# While training, every packet between host 2 and host 0 is dropped (nft or
# iptables in host 2's namespace) for 5 s, then the link is healed:
#   - server 0 evicts worker 2 (STATS `evictions[2]` >= 1, `live[2]` false),
#     within a few seconds of the cut;
#   - after the heal worker 2 is live again on server 0 and its clock there
#     advances past where it stood; server 0 logged the eviction and the
#     rejoin, and worker 2 what it waited for ("waiting for server 0 at ...");
#   - training finishes: every worker exits 0, both shards at the last clock.
# STATS are read with `zps stats` and a reader key, on host 0 and host 1.
# Every wait is bounded. Exits 77 (skipped) without root, namespaces, or nft
# and iptables.
#
# usage: partition.sh ZPS_SERVER ZPS ZPS_WORKER
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/netns.sh"

t_start=$(mh_now)
mh_require_firewall
mh_up 3 80
d=$mh_dir
workers=3
clocks=300
cut_s=5

mh_keys "$zps" "$workers"

servers=
for s in 0 1; do
    ep=tcp://${mh_addr[$s]}:7100
    mh_start "$s" "server-$s" "$server_bin" --listen "$ep" --endpoint-file "$d/server-$s.ep" \
        --shard "$s/2" --workers $workers --mode bsp --worker-timeout 2 --lr 0.05 \
        --key "$d/srv.key" --authorized-keys "$d/authorized_keys"
    spid=$mh_pid
    for _ in $(seq 1 100); do
        [ -s "$d/server-$s.ep" ] && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    [ -s "$d/server-$s.ep" ] || mh_fail "server $s did not start: $(cat "$d/server-$s.log")"
    servers=${servers:+$servers,}$ep
done

# 300 clocks of at least 20 ms: about 6 s of training around the 5 s cut.
wpids=()
for r in 0 1 2; do
    mh_start "$r" "worker-$r" "$worker_bin" --servers "$servers" --rank "$r" --workers $workers \
        --data synthetic:n=4000,test=500,dim=8 --model linear:8 --batch 8 --clocks $clocks \
        --base-step-ms 20 --no-progress --wait-log-ms 2000 \
        --key "$d/w$r.key" --server-key "$d/srv.pub"
    wpids+=("$mh_pid")
done

# stats S : shard S's STATS, read on its own host, into $d/stats-S.json
stats() {
    on_host "$1" "$zps" stats --servers "tcp://${mh_addr[$1]}:7100" --timeout-ms 3000 \
        --key "$d/rd.key" --server-key "$d/srv.pub" >"$d/stats-$1.json" 2>"$d/stats.err"
}
# field NAME I : element I of the array NAME in the last stats() file read ($stats_of)
# (matched in bash: `grep | head -1` under pipefail may fail on SIGPIPE)
field() {
    local json
    json=$(<"$d/stats-$stats_of.json")
    [[ $json =~ \"$1\":\[([^]]*)\] ]] || return 0
    cut -d, -f$(($2 + 1)) <<<"${BASH_REMATCH[1]}"
}
show() { # show S : the arrays that matter, for messages
    grep -o '"\(clocks\|live\|evictions\)":\[[^]]*\]' "$d/stats-$1.json" | tr '\n' ' '
}

# --- training under way: worker 2 past clock 30 on server 0 ---
stats_of=0
ok=no
for _ in $(seq 1 150); do
    if stats 0 && [ "$(field clocks 2)" -ge 30 ]; then
        ok=yes
        break
    fi
    sleep 0.1
done
[ "$ok" = yes ] || mh_fail "worker 2 did not reach clock 30: $(show 0) $(cat "$d/stats.err")"

# --- the cut: host 2 and host 0 no longer hear each other ---
partition 2 0
t_cut=$(mh_now)
mh_reachable 2 0 && mh_fail "host 2 still reaches host 0 after partition"
mh_reachable 2 1 || mh_fail "host 2 lost host 1 too"
ok=no
for _ in $(seq 1 80); do
    if stats 0 && [ "$(field evictions 2)" -ge 1 ] && [ "$(field live 2)" = false ]; then
        ok=yes
        break
    fi
    sleep 0.1
done
[ "$ok" = yes ] || mh_fail "server 0 did not evict worker 2 within 8 s of the cut: $(show 0)"
t_evicted=$(mh_now)
evicted_stats=$(show 0)
# Hold the cut for $cut_s seconds in all (bounded: the loop counts tenths).
for _ in $(seq 1 $((cut_s * 10))); do
    [ "$(awk -v a="$t_cut" -v b="$(mh_now)" -v c="$cut_s" 'BEGIN { print (b - a >= c) }')" = 1 ] && break
    sleep 0.1
done
stats 0 || mh_fail "stats of server 0 during the cut"
clock_cut=$(field clocks 2)
heal 2 0
t_heal=$(mh_now)
mh_reachable 2 0 || mh_fail "host 2 does not reach host 0 after heal"

# --- back: live again on server 0, its clock there advancing ---
ok=no
for _ in $(seq 1 300); do
    if stats 0 && [ "$(field live 2)" = true ] && [ "$(field clocks 2)" -gt "$clock_cut" ]; then
        ok=yes
        break
    fi
    sleep 0.1
done
[ "$ok" = yes ] || mh_fail "worker 2 did not rejoin server 0 within 30 s of the heal: $(show 0)"
t_rejoined=$(mh_now)
rejoined_stats=$(show 0)

# --- training finishes everywhere ---
for r in 0 1 2; do
    mh_wait_pid "${wpids[$r]}" 45
    [ "$mh_rc" -eq 0 ] || mh_fail "worker $r exited $mh_rc: $(tail -5 "$d/worker-$r.log")"
done
grep -q "worker 2 evicted: silent for" "$d/server-0.log" ||
    mh_fail "server 0 did not log the eviction: $(cat "$d/server-0.log")"
grep -q "worker 2 is back: admitted again at clock [0-9]*" "$d/server-0.log" ||
    mh_fail "server 0 did not log the rejoin: $(cat "$d/server-0.log")"
grep -q "waiting for server 0 at tcp://${mh_addr[0]}:7100" "$d/worker-2.log" ||
    mh_fail "worker 2 did not say what it waited for: $(tail -5 "$d/worker-2.log")"
for s in 0 1; do
    stats_of=$s
    stats "$s" || mh_fail "final stats of server $s"
    for r in 0 1 2; do
        [ "$(field clocks "$r")" -eq $clocks ] || mh_fail "server $s at the end: $(show "$s")"
        [ "$(field live "$r")" = true ] || mh_fail "server $s at the end: $(show "$s")"
    done
done
stats_of=0
[ "$(field evictions 2)" -ge 1 ] || mh_fail "server 0 lost the eviction count: $(show 0)"
final1=$(show 1)
t_end=$(mh_now)

echo "evicted $(mh_secs "$t_cut" "$t_evicted") s after the cut: $evicted_stats"
echo "healed after $(mh_secs "$t_cut" "$t_heal") s (worker 2 at clock $clock_cut on server 0);" \
    "live again $(mh_secs "$t_heal" "$t_rejoined") s later: $rejoined_stats"
echo "server 1 at the end: $final1"
echo "server 0: $(grep -m1 'worker 2 evicted' "$d/server-0.log" | sed 's/.*\] //');" \
    "$(grep -m1 'worker 2 is back' "$d/server-0.log" | sed 's/.*\] //')"
echo "worker 2: $(grep -m1 'waiting for server 0' "$d/worker-2.log" | sed 's/.*\] //')"
echo "multihost_partition: ok (total $(mh_secs "$t_start" "$t_end") s)"
