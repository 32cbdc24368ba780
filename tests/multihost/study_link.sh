#!/usr/bin/env bash
# The study's throttled-link setting (scripts/compare --stragglers throttled,
# scripts/netns-launch), in a tiny run: BSP with float32 and with bfloat16 on
# the wire, 10 clocks each, Fashion-MNIST's MLP (235,146 parameters), the
# servers on one namespace host and each of the 4 workers on its own, every
# host's link at 100 Mbit/s:
#   - both rows of the main table and of the link table are there, and both
#     runs finished (status ok) with an accuracy;
#   - the servers' host sent at least every pull's reply (10 clocks x 4
#     workers x 235,146 float32 values), and the bfloat16 run between 0.45 and
#     0.6 of what the float32 run sent (half the values' bytes, plus headers,
#     the evaluator's pulls and ssh);
#   - the link was throttled: the servers' host sent no faster than 100 Mbit/s
#     over the run's training time (with 15% for what it sent outside it);
#   - the link figures are valid PNGs, and no namespace of the run is left.
# Exits 77 (skipped) without root, namespaces, tc, sshd, gnuplot or the
# Fashion-MNIST files.
#
# usage: study_link.sh SOURCE_DIR ZPS_BIN
set -euo pipefail
src=$1
zps=$2
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed"; exit 77; }
[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "SKIP: Fashion-MNIST is not installed"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
out=$(mktemp -d /tmp/zps-study-link-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# namespaces left by a run that has ended (netns.sh names them zmh<PID>-...)
namespaces() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep '^zmh[0-9]*-' || true); do
        pid=${ns#zmh}
        kill -0 "${pid%%-*}" 2>/dev/null || echo "$ns"
    done
}
ns_before=$(namespaces)

set +e
"$src/scripts/compare" --quick --zps "$zps" --stragglers throttled --link-modes bsp,bsp-bf16 \
    --link-clocks 10 --link-rate 100mbit --eval-every 5 --out "$out/study" 2>"$out/compare.err"
rc=$?
set -e
md=$out/study/results.md
csv=$out/study/link.csv
if grep -q '^The throttled setting was skipped here' "$md" 2>/dev/null; then
    echo "SKIP: $(grep '^The throttled setting was skipped here' "$md")"
    exit 77
fi
[ "$rc" -eq 0 ] || fail "compare exited $rc: $(tail -5 "$out/compare.err"; tail -20 "$out/study/compare.log")"
[ "$(grep -c '^| throttled | \(bsp\|bsp-bf16\) | .* static | 1280 |$' "$md")" = 2 ] ||
    fail "results.md rows: $(cat "$md")"
grep -q '^| bsp | [0-9]* | 1.00 |' "$md" && grep -q '^| bsp-bf16 | [0-9]* | [0-9.]* |' "$md" ||
    fail "results.md link table: $(cat "$md")"
[ "$(wc -l <"$csv")" = 3 ] || fail "link.csv: $(cat "$csv")"

# link.csv: mode,examples_per_second,vs_bsp,servers_host_sent_mb,...,train_seconds
f32_mb=$(awk -F, '$1 == "bsp" { print $4 }' "$csv")
bf16_mb=$(awk -F, '$1 == "bsp-bf16" { print $4 }' "$csv")
pulls_mb=$(awk 'BEGIN { printf "%.1f", 10 * 4 * 235146 * 4 / 1e6 }')
awk -v a="$f32_mb" -v p="$pulls_mb" 'BEGIN { exit !(a >= p) }' ||
    fail "the servers' host sent $f32_mb MB, less than the pulls' $pulls_mb MB"
awk -v a="$bf16_mb" -v b="$f32_mb" 'BEGIN { r = a / b; exit !(r >= 0.45 && r <= 0.6) }' ||
    fail "bfloat16 run: the servers' host sent $bf16_mb MB against float32's $f32_mb MB"
while IFS=, read -r mode _ _ sent _ _ _ _ _ train; do
    [ "$mode" = mode ] && continue
    # 100 Mbit/s = 12.5 MB/s
    awk -v s="$sent" -v t="$train" 'BEGIN { exit !(s <= 12.5 * t * 1.15) }' ||
        fail "$mode: the servers' host sent $sent MB in $train s of training: not throttled"
done <"$csv"

for f in accuracy time-split; do
    png=$out/study/fig-$f-link.png
    [ -s "$png" ] || fail "no $png"
    [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$png is not a PNG"
    [ "$(stat -c %s "$png")" -gt 10000 ] || fail "$png is nearly empty"
done
[ "$(namespaces)" = "$ns_before" ] || fail "namespaces left by the study's runs: $(namespaces)"
echo "study_link: float32 $f32_mb MB, bfloat16 $bf16_mb MB from the servers' host;" \
    "$(grep -o 'bsp-bf16 | [0-9]* | [0-9.]*' "$md" | awk -F' [|] ' '{ print $3 "x" }') BSP's examples/s"
