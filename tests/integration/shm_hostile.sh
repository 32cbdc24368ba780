#!/usr/bin/env bash
# The shared-memory segment against a hostile process of the same user
# (issue 35, items 1 and 2), in a private mount namespace with a small tmpfs
# on /dev/shm, with real servers and workers:
#
#   * /dev/shm full, with 0, 60, 200 and 330 KiB free: no segment, no
#     session, or replies over the socket, never a SIGBUS;
#   * the segment truncated to one page mid-run (SIGBUS at both ends): the
#     sessions end, both processes go on over the socket;
#   * the layout page scribbled (nbufs, stride, offsets, len, size): the
#     server reads none of it back;
#   * the worker's slot scribbled on mid-run: its pushes fail their checksum
#     at the server, and the worker goes on over the socket.
#
# Each run trains the same model as a --no-shm run and must end with the
# same parameters, bit for bit, the server still serving.
#
# usage: shm_hostile.sh ZPS_SERVER_BIN ZPS_BIN ZPS_WORKER_BIN
set -euo pipefail
if [ -z "${ZPS_SHM_NS:-}" ]; then
    if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
        echo "skipped: needs root and unshare(1) for a private /dev/shm"
        exit 77
    fi
    exec unshare -m --propagation private env ZPS_SHM_NS=1 bash "$0" "$@"
fi
server_bin=$1
zps=$2
worker_bin=$3
. "$(dirname "$0")/lib.sh"

# 32768 + 1 parameters: each region of the segment is 132 KiB.
dim=32768
train=(--data "synthetic:n=64,test=8,dim=$dim" --model "linear:$dim" --lr 0.0005 --seed 3
       --no-progress)

mount -t tmpfs -o size=1m,mode=1777 zps-test-shm /dev/shm || {
    echo "skipped: cannot mount a tmpfs on /dev/shm here"
    exit 77
}

# leave_free KB : fills the 1 MiB tmpfs on /dev/shm so that KB KiB stay free
leave_free() {
    rm -f /dev/shm/filler
    fallocate -l $(( (1024 - $1) * 1024 )) /dev/shm/filler
}

# train NAME CLOCKS [WORKER FLAGS...] : starts a server and one worker of it
# ($srv, $ep, $worker); the parameters go to $dir/NAME.params
train() {
    local name=$1 clocks=$2; shift 2
    start_server "$name-server" --workers 1 --lr 0.00001
    srv=${pids[-1]}
    "$worker_bin" --servers "$ep" --rank 0 --workers 1 --clocks "$clocks" "${train[@]}" \
        --save-params "$dir/$name.params" "${client_keys[@]}" "$@" 2>"$dir/$name-worker.log" &
    worker=$!
    pids+=($worker)
}

# finish NAME : the worker exited 0, the server is alive and answers STATS,
# and the parameters are the --no-shm run's; then the server is stopped
finish() {
    local name=$1 rc=0
    # 60 s at most; a server that dies meanwhile fails the test at once
    for _ in $(seq 1 600); do
        kill -0 "$worker" 2>/dev/null || break
        if ! kill -0 "$srv" 2>/dev/null; then
            wait "$srv" || rc=$?
            fail "$name: the server died (exit $rc): $(tail -3 "$dir/$name-server.log")"
        fi
        sleep 0.1
    done
    kill -0 "$worker" 2>/dev/null && fail "$name: the worker did not finish in 60 s"
    wait "$worker" || rc=$?
    [ "$rc" -eq 0 ] ||
        fail "$name: the worker exited $rc: $(tail -5 "$dir/$name-worker.log"; tail -5 "$dir/$name-server.log")"
    kill -0 "$srv" 2>/dev/null || fail "$name: the server died: $(tail -5 "$dir/$name-server.log")"
    with_keys "$zps" stats --servers "$ep" --timeout-ms 5000 >"$dir/$name.stats" ||
        fail "$name: no STATS from the server"
    if [ "$name" != ref ]; then
        cmp -s "$dir/ref.params" "$dir/$name.params" ||
            fail "$name: the parameters differ from the --no-shm run's"
    fi
    kill "$srv"
    wait "$srv" 2>/dev/null || true
}

# segment : $seg, the path of the server's segment, once it exists (10 s at most)
segment() {
    for _ in $(seq 1 1000); do
        seg=$(ls /dev/shm/zps-* 2>/dev/null | head -1 || true)
        [ -n "$seg" ] && return 0
        kill -0 "$worker" 2>/dev/null || break
        sleep 0.01
    done
    fail "no shared-memory segment appeared"
}

# The reference: the socket only.
train ref 150 --no-shm
finish ref

# --- /dev/shm full ---
# 330 KiB free: the first page, the slot and one buffer fit (one worker needs
# no more). 200 KiB: the first page and the slot, no buffer (replies over the
# socket). 60 KiB: the first page, not the slot (no session). 0: not even
# the first page (no segment).
for free in 330 200 60 0; do
    leave_free "$free"
    train "full$free" 150
    finish "full$free"
    if [ "$free" -lt 330 ]; then
        grep -q "no room" "$dir/full$free-server.log" ||
            fail "full$free: the server did not say there was no room: $(cat "$dir/full$free-server.log")"
    fi
    echo "/dev/shm with $free KiB free: the run went on, same parameters"
done
rm -f /dev/shm/filler
umount /dev/shm
mount -t tmpfs -o size=64m,mode=1777 zps-test-shm /dev/shm

# --- the segment cut short mid-run: SIGBUS at both ends ---
train truncated 150 --base-step-ms 20
segment
sleep 0.3
truncate -s 4096 "$seg"
finish truncated
grep -q "cut short by another process" "$dir/truncated-server.log" ||
    fail "truncated: the server did not notice: $(cat "$dir/truncated-server.log")"
echo "segment cut to one page mid-run: both went on over the socket"

# --- the layout page scribbled: len 1, nbufs 100000, stride 2^44, buffer
# offset 0x7f..., slot offset and size huge ---
train layout 150 --base-step-ms 20
segment
sleep 0.3
/usr/bin/python3 - "$seg" <<'EOF'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(24)  # len, workers, nbufs, stride, buf_offset, slot_offset, size
    f.write(struct.pack("<QIIQQQQ", 1, 1, 100000, 1 << 44, 0x7f0000000000, 1 << 60, 1 << 62))
EOF
finish layout
[[ $(cat "$dir/layout.stats") =~ \"shm\":\{\"on\":true,[^}]*\"granted\":1, ]] ||
    fail "layout: no shared-memory session: $(cat "$dir/layout.stats")"
echo "layout page scribbled: the server read none of it"

# --- the worker's slot scribbled on mid-run, without pause ---
train slot 150 --base-step-ms 20
segment
sleep 0.3
/usr/bin/python3 - "$seg" "$dim" "$worker" <<'EOF'
import os, struct, sys, time
path, dim, worker = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "r+b") as f:
    slot = struct.unpack_from("<Q", f.read(72), 56)[0]
    junk = os.urandom(4 * (dim + 1))
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            os.kill(worker, 0)
        except OSError:
            break
        f.seek(slot)
        f.write(junk)
        f.flush()
EOF
finish slot
grep -q "slot was changed under us" "$dir/slot-worker.log" ||
    fail "slot: the worker did not fall back: $(tail -5 "$dir/slot-worker.log")"
echo "slot scribbled: the worker went on over the socket"
umount /dev/shm
