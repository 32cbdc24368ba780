#!/usr/bin/env bash
# zps under Slurm (issue 14): scripts/slurm/zps.sbatch on a real Slurm cluster
# whose nodes are network namespaces on one bridge (netns.sh). The test runs
# its own munged, one slurmctld and one slurmd per host (slurmd -N zn0..zn2;
# the node names resolve nowhere, slurm.conf gives each its NodeAddr), all of
# their files in the test's private directory, then submits five jobs at once
# from the hosts, with synthetic data, BSP and keys on:
#   1. sbatch -N 3 --ntasks-per-node=2 zps.sbatch, ZPS_JOB_SERVERS=2 ZPS_JOB_WORKERS=4:
#      COMPLETED, exit 0:0, no step reported cancelled; the run folder in the
#      submit directory holds a log per task, the keys (keys/ 0700, secret
#      keys 0600, worker 0 admin, worker R its own rank, each worker handed
#      its own key) and summary.txt; the servers listened on zn0's and zn1's
#      addresses with authentication on and stopped with exit 0, worker R ran
#      on zn(R mod 3); the script's own ZPS_* variables did not reach the
#      processes, another one (ZPS_WAIT_LOG_MS) did; worker 0's final line
#      (accuracy, loss, clocks) equals `zps-worker --local --workers 4` with
#      the same flags bit for bit (BSP equals one process).
#   2. A one-node allocation (zn2, port 7200; 1 server, 2 workers): the same
#      against `--local --workers 2`.
#   3. A one-node allocation (zn1, port 7300) through a zps-worker wrapper
#      that makes worker 1 exit 3 a second after its start: FAILED, exit 1:0;
#      the output and summary.txt name "worker 1 on zn1: exit 3" with its
#      log's last line; the server stopped cleanly; no step is left.
#   4. 4 servers on 3 nodes: refused before anything starts (exit 2:0, "too
#      few nodes"), no run folder.
#   5. With nft: zn1's firewall drops its server's port; the job fails after
#      --start-timeout naming the server zn0 cannot connect to, and no worker
#      starts.
#   6. A one-node allocation (zn0, port 7500; 1 server, 2 workers) running a
#      command of its own (`zps.sbatch ... -- cmd.sh`) instead of zps-worker:
#      each rank finds ZPS_SERVERS, ZPS_RANK, ZPS_WORKERS, ZPS_METRICS and
#      its key files in its environment, rank 0 initialises the model with
#      the zps tool, both push and pull the servers' SGD step, checked by
#      hand; COMPLETED 0:0, summary.txt's final line is rank 0's final eval
#      metrics line, commands.txt names the command with its variables.
# Then Slurm and MUNGE are stopped in order, each must exit 0.
# Every process (munged, slurmctld, slurmd, the clients, zps) runs on a host,
# every wait is bounded, and teardown stops them by PID. Exits 77 (skipped)
# without root, namespaces, or the Slurm and MUNGE programs (scripts/setup
# installs slurm-wlm and munge).
#
# usage: slurm.sh ZPS_SERVER ZPS ZPS_WORKER
set -euo pipefail
server_bin=$1
zps=$2
worker_bin=$3
here=$(cd "$(dirname "$0")" && pwd)
job_script=$(cd "$here/../../scripts/slurm" && pwd)/zps.sbatch
. "$here/../../scripts/netns.sh"
# slurmd needs /sys/fs/cgroup, which ip netns exec hides.
export MH_ENTER=nsenter

t_start=$(mh_now)
[ "$(id -u)" -eq 0 ] || mh_skip "multi-host tests need root (network namespaces)"
for c in munged slurmctld slurmd sbatch squeue scontrol srun scancel sinfo; do
    command -v "$c" >/dev/null || mh_skip "no '$c' (scripts/setup installs slurm-wlm and munge)"
done
mh_up 3 80
d=$mh_dir
nodes=3

# --- MUNGE: its own key, socket, pid and log; the socket's folders must be
# searchable by all (munged checks), the key's private ---
chmod 711 "$d"
mkdir -m 755 "$d/munge"
mkdir -m 700 "$d/munge-key"
head -c 1024 /dev/urandom >"$d/munge-key/munge.key"
chmod 600 "$d/munge-key/munge.key"
sock=$d/munge/munge.socket
mh_start 0 munged munged --foreground --socket="$sock" --key-file="$d/munge-key/munge.key" \
    --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" \
    --seed-file="$d/munge-key/munged.seed" --num-threads=10
munged_pid=$mh_pid
for _ in $(seq 1 50); do
    [ -S "$sock" ] && break
    kill -0 "$munged_pid" 2>/dev/null || break
    sleep 0.1
done
[ -S "$sock" ] || mh_fail "munged did not start: $(cat "$d/munged.log")"

# --- Slurm: one controller on host 0, a slurmd per host, everything in $d ---
s=$d/slurm
mkdir -p "$s/state" "$d/submit"
for ((i = 0; i < nodes; i++)); do mkdir -p "$s/spool-zn$i"; done
export SLURM_CONF=$s/slurm.conf
{
    echo "ClusterName=zpsmh$$"
    # slurmctld only runs where its name is this machine's (no UTS namespace
    # here); the address is host 0's.
    echo "SlurmctldHost=$(hostname -s)(${mh_addr[0]})"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$sock"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$s/state"
    echo "SlurmdSpoolDir=$s/spool-%n"
    echo "SlurmctldPidFile=$s/slurmctld.pid"
    echo "SlurmdPidFile=$s/slurmd-%n.pid"
    echo "SlurmctldLogFile=$s/slurmctld.log"
    echo "SlurmdLogFile=$s/slurmd-%n.log"
    # No cgroups: processes tracked by their parents, no CPU binding.
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "MpiDefault=none"
    echo "MailProg=/bin/true"
    # Nodes may declare more CPUs than the machine has.
    echo "SlurmdParameters=config_overrides"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "SchedulerType=sched/backfill"
    echo "SchedulerParameters=bf_interval=1"
    echo "ReturnToService=2"
    echo "KillWait=3"
    echo "MinJobAge=600"
    for ((i = 0; i < nodes; i++)); do
        echo "NodeName=zn$i NodeAddr=${mh_addr[$i]} CPUs=8 State=UNKNOWN"
    done
    echo "PartitionName=zps Nodes=zn[0-$((nodes - 1))] Default=YES MaxTime=5 State=UP"
} >"$SLURM_CONF"
mh_start 0 slurmctld slurmctld -D -c -f "$SLURM_CONF"
slurmctld_pid=$mh_pid
slurmd_pids=()
for ((i = 0; i < nodes; i++)); do
    mh_start "$i" "slurmd-$i" slurmd -D -N "zn$i" -f "$SLURM_CONF"
    slurmd_pids+=("$mh_pid")
done
idle=
for _ in $(seq 1 150); do
    idle=$(on_host 0 sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l) || idle=0
    [ "$idle" -eq "$nodes" ] && break
    sleep 0.1
done
[ "$idle" -eq "$nodes" ] ||
    mh_fail "$idle of $nodes nodes idle after 15 s: $(on_host 0 sinfo -N 2>&1 | tr '\n' ' '); $(tail -3 "$s/slurmctld.log")"
t_slurm=$(mh_now)

# submit HOST NAME SBATCH_ARGS... -- SCRIPT_ARGS... : sbatch on HOST from the
# submit folder with the test's binaries and the variables in job_env; sets
# job.
job_env=()
submit() {
    local host=$1 name=$2 sb=()
    shift 2
    while [ "$1" != -- ]; do
        sb+=("$1")
        shift
    done
    shift
    job=$(cd "$d/submit" && on_host "$host" env ZPS_SERVER_BIN="$server_bin" \
        ZPS_WORKER_BIN="${wrapper:-$worker_bin}" ZPS_BIN="$zps" "${job_env[@]}" \
        sbatch --parsable --job-name="$name" --output="$d/submit/$name-%j.out" --time=2 "${sb[@]}" \
        "$job_script" "$@") || mh_fail "sbatch $name failed"
    job=${job%%;*}
}
# job_field JOB KEY : a field of scontrol show job.
job_field() {
    on_host 0 scontrol show job "$1" -o 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"
}
# wait_job JOB SECONDS : until the job has ended; sets state and exit_code.
wait_job() {
    local i
    for ((i = 0; i < $2 * 5; i++)); do
        state=$(job_field "$1" JobState)
        case $state in PENDING | RUNNING | CONFIGURING | COMPLETING | "") ;; *) break ;; esac
        sleep 0.2
    done
    exit_code=$(job_field "$1" ExitCode)
}

train=(--data "synthetic:n=2000,test=500,dim=16,classes=4" --model mlp:16-32-4 --batch 16
    --epochs 5 --seed 3)
opt=(--optimizer momentum --momentum 0.9 --lr 0.05)
script_train=()
for a in "${train[@]}"; do script_train+=(--worker-arg="$a"); done
for a in "${opt[@]}"; do script_train+=(--server-arg="$a"); done

# --- job 2's worker wrapper: worker 1 fails 1 s after it starts ---
wrapper=$d/failing-worker.sh
cat >"$wrapper" <<EOF
#!/usr/bin/env bash
for a in "\$@"; do
    if [ "\${prev:-}" = --rank ] && [ "\$a" = 1 ]; then
        sleep 1
        echo "failing on purpose" >&2
        exit 3
    fi
    prev=\$a
done
exec "$worker_bin" "\$@"
EOF
chmod 755 "$wrapper"

# --- four jobs at once: 1 on 3 nodes; 2 on one node (zn2, port 7200); 3 on
# one node (zn1, port 7300) whose worker 1 fails; 4 asks too much ---
# Job 1 takes its counts from the script's variables, which must not reach
# zps-server and zps-worker (they read ZPS_FLAG=VALUE as --flag VALUE), while
# other ZPS_* variables do.
wrapper=
job_env=(ZPS_JOB_SERVERS=2 ZPS_JOB_WORKERS=4 ZPS_WAIT_LOG_MS=20000)
submit 1 ok -N 3 --ntasks-per-node=2 -- "${script_train[@]}"
job1=$job
job_env=()
submit 2 one -N 1 -w zn2 -n 3 -- --port 7200 "${script_train[@]}"
job2=$job
wrapper=$d/failing-worker.sh
submit 2 fail -N 1 -w zn1 -n 3 -- --port 7300 "${script_train[@]}"
job3=$job
wrapper=
submit 0 few -N 3 -n 3 -- --servers 4 "${script_train[@]}"
job4=$job
# 5: zn1's firewall drops its server's port (7401), when nft is here.
job5=
if command -v nft >/dev/null; then
    on_host 1 nft -f - <<EOF || mh_fail "nft in host 1"
table inet zps_slurm_test {
    chain in { type filter hook input priority 0; policy accept; tcp dport 7401 drop; }
}
EOF
    submit 0 fw -N 2 -w zn0,zn1 -n 4 -- --port 7400 --start-timeout 3 "${script_train[@]}"
    job5=$job
fi

# 6: a command of its own instead of zps-worker (the zps tool does its work).
cat >"$d/cmd.sh" <<EOF
#!/bin/sh
set -eu
zps='$zps'
EOF
cat >>"$d/cmd.sh" <<'EOF'
for v in ZPS_SERVERS ZPS_RANK ZPS_WORKERS ZPS_METRICS ZPS_KEY ZPS_SERVER_KEY; do
    eval "x=\${$v:-}"
    [ -n "$x" ] || { echo "cmd: $v is not set"; exit 10; }
done
set -- --key "$ZPS_KEY" --server-key "$ZPS_SERVER_KEY"
[ "$ZPS_RANK" != 0 ] || "$zps" init --servers "$ZPS_SERVERS" --values 10,10 "$@"
i=0
until "$zps" pull --servers "$ZPS_SERVERS" --worker "$ZPS_RANK" --clock 0 "$@" >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 300 ] || { echo "cmd: no model after 30 s"; exit 11; }
    sleep 0.1
done
g=$(( (ZPS_RANK + 1) * 2 ))
"$zps" push --servers "$ZPS_SERVERS" --worker "$ZPS_RANK" --clock 0 --batch 1 --values "$g,$g" "$@"
got=$("$zps" pull --servers "$ZPS_SERVERS" --worker "$ZPS_RANK" --clock 1 --timeout-ms 30000 "$@" |
    tr '\n' ' ')
# BSP, lr 0.1: 10 - 0.1 * mean(2, 4) = 9.7 for both parameters.
[ "$got" = "9.7 9.7 " ] || { echo "cmd: rank $ZPS_RANK pulled '$got' for clock 1, not 9.7 9.7"; exit 12; }
echo "cmd: rank $ZPS_RANK of $ZPS_WORKERS pulled $got"
now=$(date +%s.%N)
printf '{"type":"step","rank":%s,"clock":0,"wall":%s,"elapsed":0.01,"loss":1.5,"batch":1}\n' \
    "$ZPS_RANK" "$now" >>"$ZPS_METRICS"
[ "$ZPS_RANK" != 0 ] ||
    printf '{"type":"eval","rank":0,"clock":1,"wall":%s,"elapsed":0.02,"test_loss":0.75,"test_accuracy":0.625,"examples":8,"final":true}\n' \
        "$now" >>"$ZPS_METRICS"
EOF
chmod 755 "$d/cmd.sh"
submit 0 cmd -N 1 -w zn0 -n 3 -- --port 7500 --server-arg=--lr=0.1 -- "$d/cmd.sh"
job6=$job

wait_job "$job1" 45
if [ "$state" != COMPLETED ] || [ "$exit_code" != 0:0 ]; then
    mh_fail "job 1 ($job1): $state, exit $exit_code: $(tail -5 "$d/submit/ok-$job1.out")"
fi
t_job1=$(mh_now)
wait_job "$job2" 20
if [ "$state" != COMPLETED ] || [ "$exit_code" != 0:0 ]; then
    mh_fail "job 2 ($job2): $state, exit $exit_code: $(tail -5 "$d/submit/one-$job2.out")"
fi
wait_job "$job3" 20
if [ "$state" != FAILED ] || [ "$exit_code" != 1:0 ]; then
    mh_fail "job 3 ($job3): $state, exit $exit_code (expected FAILED 1:0): $(tail -5 "$d/submit/fail-$job3.out")"
fi
wait_job "$job4" 10
if [ "$state" != FAILED ] || [ "$exit_code" != 2:0 ]; then
    mh_fail "job 4 ($job4): $state, exit $exit_code (expected FAILED 2:0)"
fi
if [ -n "$job5" ]; then
    wait_job "$job5" 15
    if [ "$state" != FAILED ] || [ "$exit_code" != 1:0 ]; then
        mh_fail "job 5 ($job5): $state, exit $exit_code (expected FAILED 1:0)"
    fi
fi

# --- job 1: the run folder ---
run=$d/submit/runs/slurm-$job1
out=$d/submit/ok-$job1.out
for f in server-0.log server-1.log worker-0.log worker-1.log worker-2.log worker-3.log \
    summary.txt commands.txt keys/authorized_keys; do
    [ -s "$run/$f" ] || mh_fail "job 1: no $f in $run: $(cd "$run" && echo *)"
done
[ "$(find "$run" -maxdepth 1 -name '*.log' | wc -l)" -eq 6 ] ||
    mh_fail "job 1: expected 6 logs: $(cd "$run" && echo *)"
grep -q '^result: ok$' "$run/summary.txt" || mh_fail "job 1 summary: $(cat "$run/summary.txt")"
[ "$(stat -c %a "$run/keys")" = 700 ] || mh_fail "keys/ is $(stat -c %a "$run/keys")"
for k in "$run"/keys/*.key; do
    [ "$(stat -c %a "$k")" = 600 ] || mh_fail "$k is $(stat -c %a "$k")"
done
auth=$run/keys/authorized_keys
grep -qxF -e "$(cat "$run/keys/worker-0.pub") admin  # worker 0" "$auth" || mh_fail "worker 0 is not admin: $(cat "$auth")"
for r in 1 2 3; do
    grep -qxF -e "$(cat "$run/keys/worker-$r.pub") worker $r  # worker $r" "$auth" ||
        mh_fail "worker $r's key is not 'worker $r': $(cat "$auth")"
    grep -q -- "--key $run/keys/worker-$r.key " "$run/commands.txt" ||
        mh_fail "worker $r is not handed its own key: $(grep "^worker-$r " "$run/commands.txt")"
done
! grep -qF -e "$(cat "$run/keys/server.pub")" "$auth" || mh_fail "the servers' key is in authorized_keys"
for i in 0 1; do
    grep -q "listening on tcp://${mh_addr[$i]}:$((7100 + i))" "$run/server-$i.log" ||
        mh_fail "server $i did not listen on ${mh_addr[$i]}: $(head -3 "$run/server-$i.log")"
    grep -q "authentication on: 5 authorized keys" "$run/server-$i.log" ||
        mh_fail "server $i: $(grep -m1 authentication "$run/server-$i.log")"
    grep -q "^  server-$i  zn$i  tcp://${mh_addr[$i]}:$((7100 + i))  exit 0$" "$run/summary.txt" ||
        mh_fail "server $i did not stop cleanly on zn$i: $(cat "$run/summary.txt")"
done
for r in 0 1 2 3; do
    # The job's variable reached every task (beside any ZPS_* the caller of
    # the test exported, such as ZPS_NO_SHM, which srun hands on too).
    grep -Eq "flags from the environment: (.* )?ZPS_WAIT_LOG_MS( |$)" "$run/worker-$r.log" ||
        mh_fail "worker $r: $(grep -m1 'flags from the environment' "$run/worker-$r.log" || echo 'no ZPS_WAIT_LOG_MS')"
    grep -q "^  worker-$r  zn$((r % 3))  exit 0$" "$run/summary.txt" ||
        mh_fail "worker $r not on zn$((r % 3)) or not exit 0: $(cat "$run/summary.txt")"
    read -r _ node _ <"$run/status/worker-$r"
    [ "$node" = "zn$((r % 3))" ] || mh_fail "worker $r ran on $node"
done

# BSP equals one process, bit for bit.
on_host 1 "$worker_bin" --local --workers 4 "${train[@]}" "${opt[@]}" --no-progress \
    >"$d/local.out" 2>"$d/local.err" || mh_fail "zps-worker --local: $(tail -3 "$d/local.err")"
final() { grep '^final test accuracy' "$1" | sed 's/, [0-9.]* s$//'; }
job_line=$(final "$run/summary.txt")
local_line=$(final "$d/local.out")
[ -n "$job_line" ] || mh_fail "no final line in summary.txt: $(cat "$run/summary.txt")"
[ "$job_line" = "$local_line" ] || mh_fail "the job's '$job_line' differs from --local's '$local_line'"
[ "$(final "$run/worker-0.log")" = "$job_line" ] || mh_fail "summary.txt's final line is not worker 0's"
grep -q "^$job_line" "$out" || mh_fail "no final line in the job's output: $(tail -5 "$out")"
! grep -q CANCELLED "$out" || mh_fail "job 1's output says a step was cancelled: $(grep CANCELLED "$out")"

# --- job 2: a one-node allocation equals --local too ---
run2=$d/submit/runs/slurm-$job2
grep -q '^result: ok$' "$run2/summary.txt" || mh_fail "job 2 summary: $(cat "$run2/summary.txt")"
grep -q "listening on tcp://${mh_addr[2]}:7200" "$run2/server-0.log" ||
    mh_fail "job 2's server did not listen on ${mh_addr[2]}:7200: $(head -3 "$run2/server-0.log")"
on_host 2 "$worker_bin" --local --workers 2 "${train[@]}" "${opt[@]}" --no-progress \
    >"$d/local2.out" 2>"$d/local2.err" || mh_fail "zps-worker --local: $(tail -3 "$d/local2.err")"
[ "$(final "$run2/summary.txt")" = "$(final "$d/local2.out")" ] ||
    mh_fail "job 2's '$(final "$run2/summary.txt")' differs from --local's '$(final "$d/local2.out")'"

# --- job 3: the failure named, the rest stopped ---
run3=$d/submit/runs/slurm-$job3
out3=$d/submit/fail-$job3.out
grep -q "zps job: failed: worker 1 on zn1: exit 3; its log: $run3/worker-1.log" "$out3" ||
    mh_fail "job 3's output: $(tail -5 "$out3")"
grep -A1 "zps job: the last lines of its log:" "$out3" | grep -q "failing on purpose" ||
    mh_fail "job 3's output lacks worker 1's last lines: $(tail -3 "$out3")"
grep -q "^result: failed: worker 1 on zn1: exit 3" "$run3/summary.txt" ||
    mh_fail "job 3's summary: $(cat "$run3/summary.txt")"
grep -q "^  server-0  zn1  tcp://${mh_addr[1]}:7300  exit 0$" "$run3/summary.txt" ||
    mh_fail "job 3's server was not stopped cleanly: $(cat "$run3/summary.txt")"
steps=$(on_host 0 squeue -h --steps --jobs "$job3" 2>/dev/null | wc -l)
[ "$steps" -eq 0 ] || mh_fail "job 3 still has $steps step(s)"

# --- job 4: refused in one line, before anything starts ---
grep -q "zps job: too few nodes: 4 servers at 1 per node need 4 nodes, and the job has 3" \
    "$d/submit/few-$job4.out" || mh_fail "job 4's output: $(cat "$d/submit/few-$job4.out")"
[ ! -e "$d/submit/runs/slurm-$job4" ] || mh_fail "job 4 made a run folder"
# --- job 5: the closed port named, the workers never started ---
if [ -n "$job5" ]; then
    run5=$d/submit/runs/slurm-$job5
    grep -q "zps job: failed: server 1 on zn1 listens on tcp://${mh_addr[1]}:7401, but zn0 cannot connect to it within 3 s (a firewall between the nodes?)" \
        "$d/submit/fw-$job5.out" || mh_fail "job 5's output: $(tail -5 "$d/submit/fw-$job5.out")"
    grep -q "^  worker-0  zn0  not started$" "$run5/summary.txt" ||
        mh_fail "job 5's summary: $(cat "$run5/summary.txt")"
fi

# --- job 6: the command's run ---
wait_job "$job6" 30
run6=$d/submit/runs/slurm-$job6
if [ "$state" != COMPLETED ] || [ "$exit_code" != 0:0 ]; then
    mh_fail "job 6 ($job6): $state, exit $exit_code: $(tail -5 "$d/submit/cmd-$job6.out"); $(tail -3 "$run6/worker-1.log" 2>/dev/null)"
fi
grep -q '^result: ok$' "$run6/summary.txt" || mh_fail "job 6 summary: $(cat "$run6/summary.txt")"
grep -q "^final test accuracy 0.625 (loss 0.75) after 1 clocks (rank 0's metrics)$" \
    "$run6/summary.txt" || mh_fail "job 6's final line: $(cat "$run6/summary.txt")"
for r in 0 1; do
    grep -q "cmd: rank $r of 2 pulled 9.7 9.7" "$run6/worker-$r.log" ||
        mh_fail "job 6's rank $r: $(tail -3 "$run6/worker-$r.log")"
done
grep -q "ZPS_RANK=1 .*cmd.sh" "$run6/commands.txt" ||
    mh_fail "job 6's commands.txt: $(cat "$run6/commands.txt")"

# --- Slurm down in order, once no job is left (teardown would do it anyway) ---
left=1
for _ in $(seq 1 100); do
    left=$(on_host 0 squeue -h 2>/dev/null | wc -l) || left=1
    [ "$left" -eq 0 ] && break
    sleep 0.1
done
[ "$left" -eq 0 ] || mh_fail "jobs still in the queue: $(on_host 0 squeue 2>&1 | tr '\n' ' ')"
for p in "${slurmd_pids[@]}" "$slurmctld_pid" "$munged_pid"; do
    kill -TERM "$p"
    mh_wait_pid "$p" 10
    [ "$mh_rc" -eq 0 ] || mh_fail "a Slurm or MUNGE daemon (pid $p) exited $mh_rc on SIGTERM"
done

t_end=$(mh_now)
printf 'multihost_slurm: ok: %s (slurm up %s s, job 1 %s s, total %s s)\n' "$job_line" \
    "$(mh_secs "$t_start" "$t_slurm")" "$(mh_secs "$t_slurm" "$t_job1")" "$(mh_secs "$t_start" "$t_end")"
