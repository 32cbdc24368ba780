#!/usr/bin/env bash
# scripts/compare --quick on a reduced matrix (2 modes x 2 straggler settings,
# 20 clocks each): it must write the markdown and CSV tables with one row per
# run and four valid, non-empty PNG figures. Skipped (77) without gnuplot or
# the Fashion-MNIST files. With ZPS_TEST_SECURE=1 (ctest's compare_quick_secure)
# every run is a `zps launch --keys` run: the study is given a zps that adds
# --keys to launch, and each run's servers must have had authentication on.
#
# usage: test_compare.sh SOURCE_DIR ZPS_BIN
set -euo pipefail
src=$1
zps=$2
command -v gnuplot >/dev/null || { echo "skipped: gnuplot is not installed"; exit 77; }
[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    { echo "skipped: Fashion-MNIST is not installed"; exit 77; }
out=$(mktemp -d /tmp/zps-compare-test-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

tool=$zps
if [ "${ZPS_TEST_SECURE:-0}" = 1 ]; then
    # zps launch finds zps-server and zps-worker beside the binary it runs
    # as (/proc/self/exe), so the wrapper may live anywhere.
    tool=$out/zps-keys
    printf '#!/usr/bin/env bash\n[ "${1:-}" = launch ] && { shift; exec %q launch --keys "$@"; }\nexec %q "$@"\n' \
        "$zps" "$zps" >"$tool"
    chmod 700 "$tool"
fi

"$src/scripts/compare" --quick --zps "$tool" --modes bsp,asp --stragglers none,slow \
    --clocks 20 --eval-every 10 --out "$out/study" || fail "compare exited $?: $(tail -20 "$out/study/compare.log")"

md=$out/study/results.md
csv=$out/study/results.csv
[ -s "$md" ] || fail "no results.md"
[ -s "$csv" ] || fail "no results.csv"
grep -q '^| stragglers | mode | s to 0.65 | s to 0.70 | final acc |' "$md" || fail "results.md header: $(cat "$md")"
grep -q 'Base step time: \*\*10 ms\*\*' "$md" || fail "results.md does not state the base step time"
[ "$(grep -c '^| \(none\|slow\) | \(bsp\|asp\) |' "$md")" = 4 ] || fail "results.md rows: $(cat "$md")"
[ "$(wc -l <"$csv")" = 5 ] || fail "results.csv has $(wc -l <"$csv") lines"
head -1 "$csv" | grep -q '^stragglers,mode,seconds_to_0.65,seconds_to_0.70,final_test_accuracy,' ||
    fail "results.csv header: $(head -1 "$csv")"
# Every run finished and has an accuracy.
awk -F, 'NR > 1 && ($NF != "ok" || $5 == "NA") { bad = 1 } END { exit bad }' "$csv" ||
    fail "a run failed: $(cat "$csv")"

for f in accuracy loss update-staleness time-split; do
    png=$out/study/fig-$f.png
    [ -s "$png" ] || fail "no $png"
    [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$png is not a PNG"
    [ "$(stat -c %s "$png")" -gt 10000 ] || fail "$png is nearly empty ($(stat -c %s "$png") bytes)"
done
if [ "${ZPS_TEST_SECURE:-0}" = 1 ]; then
    n=0
    for run in "$out"/study/runs/*/*/; do
        [ -s "$run/keys/authorized_keys" ] || fail "$run has no keys/authorized_keys"
        grep -q "authentication on: .* authorized keys from ${run}keys/authorized_keys" \
            "$run/server-0.log" || fail "$run: server 0 without keys: $(head -5 "$run/server-0.log")"
        grep -q '"auth":{"on":true,' "$run/stats.jsonl" || fail "$run: STATS shows no authentication"
        n=$((n + 1))
    done
    [ "$n" = 4 ] || fail "$n keyed run folders, expected 4"
    echo "compare --quick: all $n runs keyed"
fi
echo "compare --quick: tables and figures OK"
