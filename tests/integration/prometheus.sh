#!/usr/bin/env bash
# Debian's real Prometheus scrapes a running cluster (2 BSP shards with
# --metrics-listen, 2 zps-worker processes): once training has ended, the
# versions and pushes its HTTP API reports for each shard equal what
# `zps stats` reports. Then the endpoints are flooded (many connections that
# never finish a request, refused methods, oversize headers, scrapes) while
# the cluster trains again: the model's version never stands still for 3 s
# (an endpoint that held the server's loop for a slow client would stop it
# for 5 s at a time), the step rates with and without the flood are printed,
# and the endpoint still answers. Then a worker's own endpoint
# (zps-worker --local --metrics-listen) is read and checked by promtool.
# Skipped (77) without prometheus.
#
# usage: prometheus.sh ZPS_SERVER_BIN ZPS_BIN ZPS_WORKER_BIN
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
if ! command -v prometheus >/dev/null || ! command -v curl >/dev/null; then
    echo "SKIP: prometheus or curl is not installed (scripts/setup installs them)"
    exit 77
fi
. "$(dirname "$0")/lib.sh"

cluster=(--mode bsp --workers 2 --optimizer sgd --lr 0.05 --metrics-listen 127.0.0.1:0)
start_server s0 --shard 0/2 "${cluster[@]}"
ep0=$ep
start_server s1 --shard 1/2 "${cluster[@]}"
ep1=$ep
servers="$ep0,$ep1"

# stat EP KEY : the first value of KEY in the server's STATS. Matched in bash:
# a `grep | head -1` pipeline under pipefail fails now and then, when head
# exits before grep has written its last match (SIGPIPE), and set -e then
# ends the test without a word.
stat() {
    local json
    json=$(with_keys "$zps" stats --servers "$1" --timeout-ms 2000) || return 1
    [[ $json =~ \"$2\":([^,}]*) ]] || return 1
    echo "${BASH_REMATCH[1]//\"/}"
}
m0=$(stat "$ep0" metrics)
m1=$(stat "$ep1" metrics)
[ -n "$m0" ] && [ -n "$m1" ] || fail "STATS names no metrics address: '$m0' '$m1'"

cat >"$dir/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: zps
    static_configs:
      - targets: ['$m0', '$m1']
EOF
# Prometheus' own web server, on a free port below the kernel's ephemeral
# range (so no client connection can take it between the check and the
# bind); started again on another port if it cannot bind, and waited for
# until it says it is ready (bounded).
prom="" prom_pid=""
for p in $(shuf -i 20000-32000 -n 10); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then continue; fi
    rm -rf "$dir/tsdb"
    prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
        --web.listen-address="127.0.0.1:$p" --log.level=warn >"$dir/prom.log" 2>&1 &
    prom_pid=$!
    pids+=($prom_pid)
    for _ in $(seq 1 100); do
        if curl -sf --max-time 2 "http://127.0.0.1:$p/-/ready" >/dev/null 2>&1; then
            prom=http://127.0.0.1:$p
            break 2
        fi
        kill -0 "$prom_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$prom_pid" 2>/dev/null || true
    wait "$prom_pid" 2>/dev/null || true
done
[ -n "$prom" ] || fail "prometheus did not start: $(tail -5 "$dir/prom.log")"

# query EXPR : "shard value" lines for an instant query; nothing (and status
# 0: the callers poll) while Prometheus is not answering yet
query() {
    local out
    out=$(curl -s --max-time 5 -G "$prom/api/v1/query" --data-urlencode "query=$1") || return 0
    { grep -o '"shard":"[0-9]*"[^]]*\]' <<<"$out" || true; } |
        sed 's/"shard":"\([0-9]*\)".*,"\([^"]*\)"\]/\1 \2/' | sort
}

# train N : both workers train up to clock N; prints the seconds it took. A
# step takes at least 2 ms (--base-step-ms), so that 1000 clocks outlast the
# flood's first second, however fast the machine and the protocol.
train() {
    local args=(--servers "$servers" --workers 2 --data synthetic:n=400,test=100,dim=4 --batch 8
                --backend cpu --no-progress --no-eval --clocks "$1" --base-step-ms 2)
    local t0 t1
    t0=$(date +%s.%N)
    "$worker_bin" --rank 0 "${args[@]}" "${client_keys[@]}" 2>"$dir/w0.log" &
    local a=$!
    pids+=($a)
    "$worker_bin" --rank 1 "${args[@]}" "${client_keys[@]}" 2>"$dir/w1.log" &
    local b=$!
    pids+=($b)
    wait "$a" || fail "worker 0 failed: $(tail -3 "$dir/w0.log")"
    wait "$b" || fail "worker 1 failed: $(tail -3 "$dir/w1.log")"
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

quiet=$(train 1000)

# Prometheus' latest samples equal STATS once they have caught up (30 s at most).
want_version="0 $(stat "$ep0" version)
1 $(stat "$ep1" version)"
want_buffered="0 $(stat "$ep0" buffered)
1 $(stat "$ep1" buffered)"
got_version="" got_buffered=""
for _ in $(seq 1 300); do
    got_version=$(query zps_model_version)
    got_buffered=$(query zps_pushes_buffered_total)
    [ "$got_version" = "$want_version" ] && [ "$got_buffered" = "$want_buffered" ] && break
    sleep 0.1
done
[ "$got_version" = "$want_version" ] ||
    fail "prometheus zps_model_version: '$got_version', zps stats: '$want_version'; prometheus $(kill -0 "$prom_pid" 2>/dev/null && echo running || echo exited), its log: $(tail -5 "$dir/prom.log"); targets: $(curl -s --max-time 5 "$prom/api/v1/targets" | head -c 600)"
[ "$got_buffered" = "$want_buffered" ] ||
    fail "prometheus zps_pushes_buffered_total: '$got_buffered', zps stats: '$want_buffered'"
echo "prometheus agrees with zps stats: versions $(echo $got_version), buffered pushes $(echo $got_buffered)"

# The flood, written with bash's /dev/tcp and paced so that it is about the
# endpoint, not about the two cores a BSP cluster needs at every step:
# refused methods, unknown paths, oversize headers and scrapes, one every
# 20 ms, and after the first 40, 100 connections per endpoint that never
# finish their request (they hold every slot until they time out: what
# arrives meanwhile is dropped).
flood() {
    local host=${1%:*} port=${1##*:} fd
    # The endpoint closes what it refuses: a write may meet a closed socket.
    trap '' PIPE
    set +e
    local big
    big=$(head -c 20000 /dev/zero | tr '\0' a)
    local requests=("POST /metrics HTTP/1.1" "GET /nothing HTTP/1.1" "GET /metrics HTTP/1.1")
    # The pause is read's timeout on a pipe nobody writes: no process.
    local idle
    exec {idle}<> <(:)
    for i in $(seq 1 20000); do
        [ -e "$dir/stop-flood" ] && break
        read -r -t 0.02 -u "$idle" _ || true
        if [ "$i" = 40 ]; then
            for _ in $(seq 1 100); do
                exec {fd}<>"/dev/tcp/$host/$port" || continue
                printf 'GET /met' >&$fd 2>/dev/null
            done
        fi
        exec {fd}<>"/dev/tcp/$host/$port" || continue
        if [ $((i % 4)) = 3 ]; then
            printf 'GET /metrics HTTP/1.1\r\nX-Big: %s\r\n\r\n' "$big" >&$fd 2>/dev/null
        else
            printf '%s\r\n\r\n' "${requests[$((i % 4))]}" >&$fd 2>/dev/null
        fi
        exec {fd}>&-
    done
}
# watch_version EP FILE : until $dir/stop-watch exists, samples EP's version
# every 0.2 s and writes to FILE the longest time (ms) between two samples
# that saw it change (or since the last change, at the end): how long it
# stood still, to within one sample
watch_version() {
    local prev="" since now gap longest=0 v
    since=$(date +%s%N)
    for _ in $(seq 1 3000); do
        [ -e "$dir/stop-watch" ] && break
        v=$(stat "$1" version 2>/dev/null || true)
        now=$(date +%s%N)
        gap=$(((now - since) / 1000000))
        [ "$gap" -gt "$longest" ] && longest=$gap
        if [ -n "$v" ] && [ "$v" != "$prev" ]; then
            prev=$v
            since=$now
        fi
        sleep 0.2
    done
    echo "$longest" >"$2"
}

# Two rounds of 1000 clocks with the endpoints flooded, each after one
# without. Timing on a shared 2-core machine is noisy (quiet rounds alone
# vary 2x here), so what is judged is that training never stands still
# while the endpoints are flooded: an endpoint that held the server's loop
# (waiting on a client that never finishes its request, 5 s each) would
# stop the version for seconds. The rates are printed beside it.
flooded=0
for round in 1 2; do
    if [ "$round" = 2 ]; then
        quiet=$(awk -v a="$quiet" -v b="$(train $((round * 2000 - 1000)))" 'BEGIN { print a + b }')
    fi
    rm -f "$dir/stop-flood" "$dir/stop-watch"
    flood "$m0" >/dev/null 2>&1 &
    f0=$!
    pids+=($f0)
    flood "$m1" >/dev/null 2>&1 &
    f1=$!
    pids+=($f1)
    sleep 0.5
    watch_version "$ep0" "$dir/still-$round" &
    wv=$!
    pids+=($wv)
    flooded=$(awk -v a="$flooded" -v b="$(train $((round * 2000)))" 'BEGIN { print a + b }')
    touch "$dir/stop-flood" "$dir/stop-watch"
    wait "$f0" "$f1" "$wv" 2>/dev/null || true
done
ratio=$(awk -v a="$quiet" -v b="$flooded" 'BEGIN { printf "%.2f", b / a }')
still=$(cat "$dir/still-1" "$dir/still-2" | sort -n | tail -1)
printf '2 x 1000 clocks: %.2f s quiet, %.2f s with the endpoints flooded (%.2fx); the version stood still for %s ms at most while flooded\n' \
    "$quiet" "$flooded" "$ratio" "$still"
[ "${still:-99999}" -lt 3000 ] || fail "training stood still for $still ms while the endpoints were flooded"
# The half-sent requests are dropped 5 s after they were sent (the endpoint's
# request timeout), and the text is published every second: up to 8 s.
for _ in $(seq 1 40); do
    page=$(curl -s --max-time 5 "http://$m0/metrics") || page=""
    refused=$(echo "$page" | sed -n 's/^zps_metrics_requests_total{.*result="refused"} //p')
    dropped=$(echo "$page" | sed -n 's/^zps_metrics_requests_total{.*result="dropped"} //p')
    [ "${dropped:-0}" -ge 100 ] && break
    sleep 0.2
done
echo "endpoint of shard 0 after the flood: $refused requests refused, $dropped connections dropped"
[ "${refused:-0}" -ge 40 ] || fail "the flood did not reach the endpoint: $refused refused"
[ "${dropped:-0}" -ge 100 ] || fail "the half-sent requests were not dropped: $dropped"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://$m0/metrics") || true
[ "$code" = 200 ] || fail "the endpoint answers $code after the flood"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X DELETE "http://$m0/metrics") || true
[ "$code" = 405 ] || fail "DELETE /metrics answered $code"

expect_keyed "$ep0"

# A worker's own endpoint: a --local run padded to 10 ms a step serves its
# steps and the time of each part of a step, in a form promtool accepts.
"$worker_bin" --local --workers 2 --data synthetic:n=400,test=100,dim=4 --batch 8 --backend cpu \
    --no-progress --no-eval --clocks 300 --base-step-ms 10 --metrics-listen 127.0.0.1:0 \
    2>"$dir/local.log" &
wl=$!
pids+=($wl)
wm=""
for _ in $(seq 1 100); do
    wm=$(sed -n '/metrics on http:/{s|.*metrics on http://\([^/]*\)/metrics.*|\1|p;q}' "$dir/local.log")
    [ -n "$wm" ] && break
    sleep 0.05
done
[ -n "$wm" ] || fail "the worker did not say where its metrics are: $(cat "$dir/local.log")"
sleep 1
curl -s --max-time 5 "http://$wm/metrics" >"$dir/worker.prom" || fail "no answer from the worker's endpoint"
wait "$wl" || fail "the --local run failed: $(tail -3 "$dir/local.log")"
promtool check metrics <"$dir/worker.prom" || fail "promtool refuses the worker's metrics"
steps=$(sed -n 's/^zps_worker_steps_total{rank="0"} //p' "$dir/worker.prom")
pad=$(sed -n 's/^zps_worker_step_seconds_total{rank="0",part="pad"} //p' "$dir/worker.prom")
[ "${steps:-0}" -gt 0 ] || fail "zps_worker_steps_total: '$steps'"
# At least the 10 ms asked of each step; sleeps overshoot on a loaded machine.
awk -v p="$pad" -v n="$steps" 'BEGIN { exit !(p >= n * 0.009 && p < n * 0.1) }' ||
    fail "padding seconds $pad for $steps steps of 10 ms"
echo "a worker's endpoint: $steps steps, $pad s of padding"
echo "OK"
