#!/usr/bin/env bash
# Checkpoints through the real binaries: `zps checkpoint` on request,
# `zps checkpoint inspect`, and a server refusing, each with its own message,
# to resume from a truncated file, a flipped byte, a wrong magic or another
# shard's file; --resume falling back to the previous file when the newest is
# corrupt or a FIFO.
#
# usage: checkpoint_cli.sh ZPS_SERVER_BIN ZPS_BIN
set -euo pipefail
server_bin=$1
zps=$2
. "$(dirname "$0")/lib.sh"

# A server refusing to start: exit status non-zero and `pattern` in its log.
expect_refusal() { # PATTERN ARGS...
    local pattern=$1; shift
    set +e
    "$server_bin" --listen 'tcp://127.0.0.1:*' "$@" 2>"$dir/refused.log" &
    local pid=$!
    wait $pid
    local rc=$?
    set -e
    [ $rc -ne 0 ] || fail "server started with $*"
    grep -q -- "$pattern" "$dir/refused.log" || fail "no '$pattern' in: $(cat "$dir/refused.log")"
}

ck=$dir/ck
start_server a --workers 1 --lr 0.5 --optimizer momentum --checkpoint-dir "$ck"
a=$ep
with_keys "$zps" init --servers "$a" --values 1,2,3,4
# Not initialised elsewhere: a server without --checkpoint-dir says so.
start_server nodir --workers 1
set +e; with_keys "$zps" checkpoint --servers "$ep" 2>"$dir/err"; rc=$?; set -e
[ $rc -eq 1 ] && grep -q "no --checkpoint-dir" "$dir/err" || fail "checkpoint without a dir"

with_keys "$zps" push --servers "$a" --worker 0 --clock 0 --batch 1 --values 1,1,1,1
out=$(with_keys "$zps" checkpoint --servers "$a")
echo "$out" | grep -q '"version":1' || fail "checkpoint reply: $out"
v1=$ck/shard-0-of-1-v00000000000000000001.zpsckpt
[ -f "$v1" ] || fail "no $v1"
with_keys "$zps" push --servers "$a" --worker 0 --clock 1 --batch 1 --values 1,1,1,1
with_keys "$zps" checkpoint --servers "$a" >/dev/null
v2=$ck/shard-0-of-1-v00000000000000000002.zpsckpt
"$zps" checkpoint inspect "$v2" >"$dir/inspect" || fail "inspect of a good file: $(cat "$dir/inspect")"
grep -q "momentum" "$dir/inspect" || fail "inspect shows no optimizer: $(cat "$dir/inspect")"
# --help is the command's usage, not a file; another option is bad usage.
expect_status 0 "$zps" checkpoint inspect --help
grep -q "^usage: zps checkpoint inspect FILE" "$dir/out" || fail "inspect --help: $(cat "$dir/out")"
expect_status 2 "$zps" checkpoint inspect --frobnicate
grep -q "unknown option" "$dir/err" || fail "inspect --frobnicate: $(cat "$dir/err")"

# Damaged copies, each refused by inspect and by the server with its own reason.
cp "$v2" "$dir/trunc.zpsckpt"; truncate -s -7 "$dir/trunc.zpsckpt"
cp "$v2" "$dir/flip.zpsckpt"
size=$(stat -c %s "$v2")
off=$((size - 5))   # inside the last section (an optimizer state array)
b=$(dd if="$v2" bs=1 skip=$off count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
printf "$(printf '\\%03o' $(( b ^ 1 )))" | dd of="$dir/flip.zpsckpt" bs=1 seek=$off conv=notrunc 2>/dev/null
cp "$v2" "$dir/magic.zpsckpt"; printf 'NOTZPS!!' | dd of="$dir/magic.zpsckpt" bs=1 conv=notrunc 2>/dev/null
for f in trunc flip magic; do
    set +e; "$zps" checkpoint inspect "$dir/$f.zpsckpt" >"$dir/$f.out" 2>&1; rc=$?; set -e
    [ $rc -eq 1 ] || fail "inspect $f exited $rc"
done
grep -qi "truncated" "$dir/trunc.out" || fail "trunc: $(cat "$dir/trunc.out")"
grep -qi "checksum mismatch" "$dir/flip.out" || fail "flip: $(cat "$dir/flip.out")"
grep -qi "bad magic" "$dir/magic.out" || fail "magic: $(cat "$dir/magic.out")"
common=(--workers 1 --lr 0.5 --optimizer momentum)
expect_refusal "truncated" "${common[@]}" --resume-from "$dir/trunc.zpsckpt"
expect_refusal "checksum mismatch" "${common[@]}" --resume-from "$dir/flip.zpsckpt"
expect_refusal "bad magic" "${common[@]}" --resume-from "$dir/magic.zpsckpt"
expect_refusal "shard" "${common[@]}" --shard 1/2 --resume-from "$v2"
expect_refusal "optimizer" --workers 1 --optimizer adam --resume-from "$v2"
expect_refusal "workers" --workers 2 --lr 0.5 --optimizer momentum --resume-from "$v2"

# --resume: the newest file is corrupt, so the one before it is used.
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
newest=$(ls "$ck"/shard-0-of-1-v*.zpsckpt | tail -1)
truncate -s -3 "$newest"
# A FIFO named like a newer checkpoint: refused at once, never waited on.
fifo=$ck/shard-0-of-1-v00000000000000000009.zpsckpt
mkfifo "$fifo"
expect_status 2 timeout 10 "$zps" checkpoint inspect "$fifo"
grep -q "$fifo is not a regular file (a FIFO)" "$dir/err" || fail "inspect of a FIFO: $(cat "$dir/err")"
start_server b "${common[@]}" --checkpoint-dir "$ck" --resume
grep -q "skipped checkpoints" "$dir/b.log" || fail "no report of the skipped file: $(cat "$dir/b.log")"
grep -q "skipped shard-0-of-1-v00000000000000000009.zpsckpt: $fifo is not a regular file (a FIFO)" \
    "$dir/b.log" || fail "no report of the FIFO: $(cat "$dir/b.log")"
got=$(with_keys "$zps" pull --servers "$ep" --verbose 2>"$dir/verbose" | tr '\n' ' ')
grep -q "version 1..1" "$dir/verbose" || fail "did not fall back to version 1: $(cat "$dir/verbose")"
[ -n "$got" ] || fail "no parameters after resume"
expect_keyed "$ep"
echo "checkpoint cli: all checks passed"
