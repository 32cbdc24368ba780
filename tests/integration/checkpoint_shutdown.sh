#!/usr/bin/env bash
# SIGTERM's checkpoint and the checkpoint directory, through the real server:
# a directory that cannot take a checkpoint is refused at start (status 2,
# before listening); a failed checkpoint does not count as saved, so
# SIGTERM still writes one; a shutdown checkpoint that cannot be written is
# retried a bounded number of times, and the server says its state is not
# saved and exits 3; a second SIGTERM while the shutdown checkpoint is
# written changes nothing.
#
# A write is made to fail by replacing the checkpoint directory with a
# regular file while the server runs, or by a file size limit of 0 (with
# SIGXFSZ ignored, writes fail with EFBIG).
#
# usage: checkpoint_shutdown.sh ZPS_SERVER_BIN ZPS_BIN
set -euo pipefail
server_bin=$1
zps=$2
. "$(dirname "$0")/lib.sh"

# wait_exit PID : waits, at most 20 s, for a server this test started; its exit status in $status
wait_exit() {
    local pid=$1
    for _ in $(seq 1 2000); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.01
    done
    kill -0 "$pid" 2>/dev/null && fail "server $pid did not exit within 20 s"
    set +e
    wait "$pid"
    status=$?
    set -e
}

# wait_file PATH : at most 10 s (checkpoints are written on the threadpool)
wait_file() {
    for _ in $(seq 1 1000); do
        [ -f "$1" ] && return 0
        sleep 0.01
    done
    fail "no $1"
}

# refuse_dir PATTERN ARGS... : the server must exit 2 with PATTERN on stderr, without listening
refuse_dir() {
    local pattern=$1; shift
    rm -f "$dir/refused.ep"
    set +e
    timeout 10 "$server_bin" --listen 'tcp://127.0.0.1:*' --endpoint-file "$dir/refused.ep" \
        --workers 1 "$@" 2>"$dir/refused.log"
    local rc=$?
    set -e
    [ $rc -eq 2 ] || fail "exit status $rc, not 2, with $*: $(cat "$dir/refused.log")"
    grep -q -- "$pattern" "$dir/refused.log" || fail "no '$pattern' in: $(cat "$dir/refused.log")"
    [ ! -e "$dir/refused.ep" ] || fail "the server listened with $*"
}

v() { printf '%s/shard-0-of-1-v%020d.zpsckpt' "$1" "$2"; }

# ---- 1. refused at start ----
touch "$dir/plain"
refuse_dir "checkpoint-dir $dir/plain cannot take checkpoints: $dir/plain is not a directory" \
    --checkpoint-dir "$dir/plain"
refuse_dir "cannot create $dir/plain/sub: Not a directory" --checkpoint-dir "$dir/plain/sub"
# No file can be written there. The log goes through a pipe, which the limit does not cover.
set +e
(ulimit -f 0; trap '' XFSZ; exec timeout 10 "$server_bin" --listen 'tcp://127.0.0.1:*' \
    --workers 1 --checkpoint-dir "$dir/limited") 2>&1 | cat >"$dir/limited.log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 2 ] || fail "exit status $rc, not 2, for a directory where no file can be written: \
$(cat "$dir/limited.log")"
grep -q "cannot take checkpoints: write $dir/limited/.zps-probe.*: File too large" \
    "$dir/limited.log" || fail "probe: $(cat "$dir/limited.log")"
[ -z "$(ls -A "$dir/limited")" ] || fail "probe left behind: $(ls -A "$dir/limited")"

# ---- 2. a failed checkpoint does not count: SIGTERM writes that version ----
ck=$dir/ck2
start_server a --workers 1 --checkpoint-dir "$ck"
pid=${pids[-1]}
with_keys "$zps" init --servers "$ep" --values 1,2,3,4
with_keys "$zps" push --servers "$ep" --worker 0 --clock 0 --batch 1 --values 1,1,1,1
expect_keyed "$ep"
mv "$ck" "$ck.away"
touch "$ck"
expect_status 1 with_keys "$zps" checkpoint --servers "$ep"
grep -q "Not a directory" "$dir/err" || fail "checkpoint into a file: $(cat "$dir/err")"
rm "$ck"
mv "$ck.away" "$ck"
kill -TERM "$pid"
wait_exit "$pid"
[ "$status" -eq 0 ] || fail "exit status $status after a saved shutdown: $(cat "$dir/a.log")"
[ -f "$(v "$ck" 1)" ] || fail "SIGTERM did not write version 1 after a failed checkpoint of it: \
$(cat "$dir/a.log")"
"$zps" checkpoint inspect "$(v "$ck" 1)" >/dev/null || fail "the shutdown checkpoint is not valid"

# ---- 3. the shutdown checkpoint cannot be written: retried, then exit 3 ----
ck=$dir/ck3
start_server b --workers 1 --checkpoint-dir "$ck" --checkpoint-every 1
pid=${pids[-1]}
with_keys "$zps" init --servers "$ep" --values 1,2,3,4
with_keys "$zps" push --servers "$ep" --worker 0 --clock 0 --batch 1 --values 1,1,1,1
wait_file "$(v "$ck" 1)"
mv "$ck" "$ck.away"
touch "$ck"
# Version 2's periodic checkpoint fails; SIGTERM must not take it as saved.
with_keys "$zps" push --servers "$ep" --worker 0 --clock 1 --batch 1 --values 1,1,1,1
kill -TERM "$pid"
wait_exit "$pid"
[ "$status" -eq 3 ] || fail "exit status $status, not 3, with the state not saved: $(cat "$dir/b.log")"
log=$dir/b.log
n=$(grep -c "checkpoint of version 2 failed: .*Not a directory" "$log" || true)
[ "$n" -eq 4 ] || fail "$n failed writes of version 2, expected 1 periodic and 3 at shutdown: \
$(cat "$log")"
[ "$(grep -c "retrying the shutdown checkpoint of version 2" "$log")" -eq 2 ] ||
    fail "retries: $(cat "$log")"
grep -q "state at version 2 is NOT saved: 3 shutdown checkpoint attempts failed; the newest \
checkpoint on disk is version 1 ($(v "$ck" 1))" "$log" || fail "no clear report: $(cat "$log")"
grep -q "stopped without saving the shard's state (exit status 3)" "$log" || fail "$(cat "$log")"

# ---- 4. nothing saved at all ----
ck=$dir/ck4
start_server c --workers 1 --checkpoint-dir "$ck"
pid=${pids[-1]}
with_keys "$zps" init --servers "$ep" --values 1,2,3,4
rmdir "$ck"
touch "$ck"
kill -TERM "$pid"
wait_exit "$pid"
[ "$status" -eq 3 ] || fail "exit status $status, not 3: $(cat "$dir/c.log")"
grep -q "state at version 0 is NOT saved: 3 shutdown checkpoint attempts failed, and no \
checkpoint of it is on disk" "$dir/c.log" || fail "no clear report: $(cat "$dir/c.log")"

# SIGINT asks for no checkpoint: a clean exit whatever the directory.
start_server d --workers 1 --checkpoint-dir "$dir/ck5"
pid=${pids[-1]}
with_keys "$zps" init --servers "$ep" --values 1,2
kill -INT "$pid"
wait_exit "$pid"
[ "$status" -eq 0 ] || fail "exit status $status after SIGINT"
# ---- 5. a second SIGTERM while the shutdown checkpoint is written changes nothing ----
# A 128 MiB shard takes a while to write (about 0.1 s here); the second
# SIGTERM comes 50 ms after the first, as a supervisor that signals a whole
# process group, and then the process, may send it.
ck=$dir/ck6
head -c $((128 << 20)) /dev/zero >"$dir/big.f32"
start_server e --workers 1 --checkpoint-dir "$ck"
pid=${pids[-1]}
with_keys "$zps" init --servers "$ep" --file "$dir/big.f32" --timeout-ms 60000
rm -f "$dir/big.f32"
kill -TERM "$pid"
sleep 0.05
second=sent
kill -TERM "$pid" 2>/dev/null || second="not sent: the server had already exited"
wait_exit "$pid"
[ "$status" -eq 0 ] || fail "exit status $status after a second SIGTERM ($second): $(cat "$dir/e.log")"
[ -f "$(v "$ck" 0)" ] || fail "no shutdown checkpoint after a second SIGTERM: $(cat "$dir/e.log")"
echo "a second SIGTERM during the shutdown checkpoint: $second; exit status 0, checkpoint written"
rm -rf "$ck"

echo "checkpoint shutdown: all checks passed"
