#!/usr/bin/env bash
# bfloat16 on a slow link (zps-worker --wire-bf16). Two hosts (network
# namespaces on one bridge, netns.sh) whose links are throttled to 10 Mbit/s
# each way with tc's token bucket filter: host 0 runs a server, host 1 two
# workers training a 40,001-parameter linear model, BSP, for 12 clocks, twice
# with the same seed and data: float32 on the wire, then bfloat16.
#   - the server receives 2 bytes less per pushed value in the bfloat16 run
#     (STATS bytes_in: 24 pushes of 40,001 values; INIT is float32 in both);
#   - on this link the bfloat16 run takes at most 0.8 of the float32 run's
#     wall time (the link, not the arithmetic, bounds a clock here);
#   - both runs finish and print their final loss.
# Prints both times, their ratio, and both runs' losses. Every wait is
# bounded. Exits 77 (skipped) without root, namespaces or tc's tbf.
#
# usage: throttled.sh ZPS_SERVER ZPS ZPS_WORKER
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/netns.sh"

mh_up 2 90
d=$mh_dir
for i in 0 1; do mh_throttle "$i" 10mbit; done

# run NAME PORT [WORKER-ARG...] : a server on host 0 and two workers on host 1, to the end
run() {
    local name=$1 port=$2
    shift 2
    mh_start 0 "server-$name" "$server_bin" --listen "tcp://${mh_addr[0]}:$port" --insecure \
        --endpoint-file "$d/server-$name.ep" --workers 2 --mode bsp --lr 0.00002 --log-level warn
    local spid=$mh_pid
    for _ in $(seq 1 100); do
        [ -s "$d/server-$name.ep" ] && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    [ -s "$d/server-$name.ep" ] || mh_fail "server $name did not start: $(cat "$d/server-$name.log")"
    local t0 pids=() r
    local args=(--servers "tcp://${mh_addr[0]}:$port" --workers 2
        --data synthetic:n=256,test=64,dim=40000,seed=3 --model linear:40000 --batch 16 --clocks 12
        --seed 1 --no-progress --timeout 60000 "$@")
    # The model first, so that the timed run does not include rank 1 waiting
    # for it (a later INIT of the same values changes nothing).
    mh_start 1 "init-$name" "$worker_bin" --rank 0 --init-only "${args[@]}"
    mh_wait_pid "$mh_pid" 30
    [ "$mh_rc" -eq 0 ] || mh_fail "$name init exited $mh_rc: $(tail -5 "$d/init-$name.log")"
    t0=$(mh_now)
    for r in 0 1; do
        mh_start 1 "worker-$name-$r" "$worker_bin" --rank "$r" "${args[@]}"
        pids+=("$mh_pid")
    done
    for r in 0 1; do
        mh_wait_pid "${pids[$r]}" 60
        [ "$mh_rc" -eq 0 ] ||
            mh_fail "$name worker $r exited $mh_rc: $(tail -5 "$d/worker-$name-$r.log")"
    done
    secs=$(mh_secs "$t0" "$(mh_now)")
    local json
    json=$(on_host 0 "$zps" stats --servers "tcp://${mh_addr[0]}:$port" --timeout-ms 5000) ||
        mh_fail "stats of server $name"
    [[ $json =~ \"bytes_in\":([0-9]+) ]] || mh_fail "no bytes_in in: $json"
    bytes=${BASH_REMATCH[1]}
    loss=$(grep -o 'final test [a-z]* [0-9.e+-]*\|loss [0-9.e+-]*' "$d/worker-$name-0.log" | tail -1)
}

run f32 7300
f32_secs=$secs f32_bytes=$bytes f32_loss=$loss
run bf16 7301 --wire-bf16
bf16_secs=$secs bf16_bytes=$bytes bf16_loss=$loss

ratio=$(awk -v a="$bf16_secs" -v b="$f32_secs" 'BEGIN { printf "%.2f", a / b }')
bytes_ratio=$(awk -v a="$bf16_bytes" -v b="$f32_bytes" 'BEGIN { printf "%.3f", a / b }')
echo "10 Mbit/s link, 2 workers, 40,001 parameters, 12 clocks:"
echo "  float32:  ${f32_secs} s, server received ${f32_bytes} bytes, ${f32_loss:-no loss line}"
echo "  bfloat16: ${bf16_secs} s, server received ${bf16_bytes} bytes, ${bf16_loss:-no loss line}"
echo "  bfloat16 / float32: time ${ratio}, bytes ${bytes_ratio}"
saved=$((f32_bytes - bf16_bytes))
# (headers differ by a byte or so: bfloat16's flag bit makes the flags varint longer)
[ $((saved * 100)) -ge $((99 * 24 * 40001 * 2)) ] ||
    mh_fail "the bfloat16 run's pushes saved $saved bytes, not 2 per value ($((24 * 40001 * 2)))"
awk -v r="$ratio" 'BEGIN { exit !(r <= 0.8) }' ||
    mh_fail "the bfloat16 run took ${ratio} of the float32 run's time on a throttled link"
echo "PASS"
