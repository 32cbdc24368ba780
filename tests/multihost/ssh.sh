#!/usr/bin/env bash
# `zps launch --hosts` over real ssh across three hosts (issue 14; hosts are
# network namespaces on one bridge, netns.sh), each running its own sshd:
#   - a hosts file places server 0 and worker 0 on host 0, server 1 and
#     workers 1-2 on host 1, worker 3 on host 2; `zps launch --hosts`, run on
#     host 0, sets each host up over ssh, starts every process there, and ends
#     with exit 0 and a final accuracy equal to `zps-worker --local` with the
#     same flags (BSP equals one process), with keys on (implied);
#   - the run folder holds every process's log and metrics, brought back over
#     ssh, and each host's folder holds only the secret keys of its own
#     processes (0600);
#   - a second run is interrupted (SIGINT, as Ctrl-C): exit 130, and no zps
#     process is left on any host;
#   - a third run: host 2's processes (its sshd and worker 3) are killed
#     mid-run; the launcher names the worker and the host, stops the rest and
#     exits 1, and no zps process is left on any host;
#   - a host that does not answer ssh is named at set-up, before anything
#     starts.
# Every process (sshd, ssh, zps launch, the --local run) runs on a host.
# Exits 77 (skipped) without root, namespaces or sshd.
#
# usage: ssh.sh ZPS_SERVER ZPS ZPS_WORKER
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/netns.sh"

t_start=$(mh_now)
mh_up 3 100
d=$mh_dir

# --- an sshd per host, with a host key known to the client and a user key ---
mh_sshd 0 1 2
t_up=$(mh_now)

# --- the hosts file, and the training both runs share ---
cat >"$d/hosts" <<EOF
# host           what runs there
${mh_addr[0]}    servers=1 workers=1
${mh_addr[1]}    servers=1 workers=2   # two workers on one host
${mh_addr[2]}    workers=1
EOF
train=(--data synthetic:n=2000,test=500,dim=16,classes=4 --model mlp:16-32-4 --batch 16
    --seed 3)
opt=(--optimizer momentum --momentum 0.9 --lr 0.05)
launch=("$zps" launch --hosts "$d/hosts" --ssh "$mh_ssh" --runs-dir "$d/runs"
    --mode bsp "${train[@]}" "${opt[@]}" --eval-every 1000 --no-progress --time-limit 60)

# --- run 1: trains to the end ---
set +e
# A ZPS_* variable reaches the far processes too (ssh carries no environment).
on_host 0 env ZPS_WORKER_TIMEOUT=30 "${launch[@]}" --epochs 5 --name ok >"$d/ok.out" 2>"$d/ok.err"
rc=$?
set -e
[ "$rc" -eq 0 ] || mh_fail "zps launch --hosts exited $rc: $(tail -15 "$d/ok.err")"
t_ok=$(mh_now)
run=$d/runs/ok
on_host 1 "$worker_bin" --local --workers 4 "${train[@]}" --epochs 5 "${opt[@]}" --no-progress \
    >"$d/local.out" 2>"$d/local.err" || mh_fail "zps-worker --local: $(tail -3 "$d/local.err")"
# "final test accuracy 0.9160 (loss 0.2417) after 625 clocks..." from both
acc() { grep -o 'final test accuracy [0-9.]* (loss [0-9.]*) after [0-9]* clocks' "$1" || true; }
cluster=$(acc "$d/ok.out")
local=$(acc "$d/local.out")
[ -n "$cluster" ] || mh_fail "no final accuracy from zps launch: $(cat "$d/ok.out")"
[ "$cluster" = "$local" ] || mh_fail "launch --hosts '$cluster' differs from --local '$local'"
for f in server-0.log server-1.log worker-0.log worker-1.log worker-2.log worker-3.log \
    evaluator.log worker-0.jsonl worker-3.jsonl evaluator.jsonl summary.json; do
    [ -s "$run/$f" ] || mh_fail "the run folder has no $f"
done
grep -q "flags from the environment: ZPS_WORKER_TIMEOUT" "$run/server-1.log" ||
    mh_fail "ZPS_WORKER_TIMEOUT did not reach server 1 over ssh: $(head -3 "$run/server-1.log")"
grep -q "authentication on" "$run/server-1.log" ||
    mh_fail "server 1 did not log that authentication is on: $(head -3 "$run/server-1.log")"
grep -q '"status": *"ok"' "$run/summary.json" || mh_fail "summary: $(head -c 300 "$run/summary.json")"
# Each host got the secret keys of its own processes only, mode 0600.
keys_of() { (cd "$run/hosts/$1/keys" && ls *.key | sort | tr '\n' ' '); }
[ "$(keys_of "${mh_addr[0]}")" = "evaluator.key server.key worker-0.key " ] ||
    mh_fail "host 0 keys: $(keys_of "${mh_addr[0]}")"
[ "$(keys_of "${mh_addr[1]}")" = "server.key worker-1.key worker-2.key " ] ||
    mh_fail "host 1 keys: $(keys_of "${mh_addr[1]}")"
[ "$(keys_of "${mh_addr[2]}")" = "worker-3.key " ] || mh_fail "host 2 keys: $(keys_of "${mh_addr[2]}")"
[ "$(stat -c %a "$run/hosts/${mh_addr[2]}/keys/worker-3.key")" = 600 ] ||
    mh_fail "worker-3.key is not 0600"

# No zps process is left on any host (the far side stops each when its ssh ends).
no_zps_left() {
    local i left
    for i in 0 1 2; do
        for _ in $(seq 50); do
            left=$(ip netns pids "${mh_ns[$i]}" | xargs -r ps -o comm= -p | grep -c '^zps' || true)
            [ "$left" -eq 0 ] && break
            sleep 0.2
        done
        [ "$left" -eq 0 ] || mh_fail "$1: host $i still runs $left zps processes"
    done
}

# Waits until worker 3 (host 2) of run $1 has reported a step.
wait_for_step() {
    for _ in $(seq 200); do
        [ -s "$d/runs/$1/worker-3.jsonl" ] && return
        sleep 0.1
    done
    mh_fail "run $1: worker 3 never reported a step: $(tail -5 "$d/$1.log")"
}

# --- run 2: Ctrl-C stops every process on every host ---
mh_start 0 interrupted "${launch[@]}" --epochs 200 --name interrupted
wait_for_step interrupted
kill -INT "$mh_pid"
mh_wait_pid "$mh_pid" 30
[ "$mh_rc" -eq 130 ] || mh_fail "zps launch exited $mh_rc after SIGINT: $(tail -5 "$d/interrupted.log")"
no_zps_left "after SIGINT"

# --- run 3: host 2 dies mid-run ---
mh_start 0 crash "${launch[@]}" --epochs 200 --name crash
crash_pid=$mh_pid
wait_for_step crash
t_kill=$(mh_now)
# Every process on host 2 (netns.sh's namespace of it): its sshd and worker 3.
disown "${mh_sshd_pid[2]}" 2>/dev/null || true # (bash would report its death)
# (A process may end between the listing and the kill: not an error.)
for pid in $(ip netns pids "${mh_ns[2]}"); do kill -KILL "$pid" 2>/dev/null || true; done
mh_wait_pid "$crash_pid" 30
[ "$mh_rc" -eq 1 ] || mh_fail "zps launch exited $mh_rc after host 2 died: $(tail -8 "$d/crash.log")"
grep -q "worker 3 .*lost its ssh connection to ${mh_addr[2]}" "$d/crash.log" ||
    mh_fail "the launcher did not name worker 3 and host 2: $(grep 'zps launch' "$d/crash.log" | tail -5)"
t_stopped=$(mh_now)
no_zps_left "after host 2 died"

# --- a host that does not answer ssh (host 2's sshd is gone) is named at set-up ---
set +e
on_host 0 "${launch[@]}" --epochs 1 --name unreachable >"$d/unreach.out" 2>"$d/unreach.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "cannot set up host ${mh_addr[2]}" "$d/unreach.err" ||
    mh_fail "an unreachable host: exit $rc, $(tail -3 "$d/unreach.err")"
[ ! -e "$d/runs/unreachable/server-0.log" ] || mh_fail "a server started although a host was down"

t_end=$(mh_now)
printf 'multihost_ssh: ok: %s; sshd up %s s, trained %s s, host loss stopped in %s s, total %s s\n' \
    "$cluster" "$(mh_secs "$t_start" "$t_up")" "$(mh_secs "$t_up" "$t_ok")" \
    "$(mh_secs "$t_kill" "$t_stopped")" "$(mh_secs "$t_start" "$t_end")"
