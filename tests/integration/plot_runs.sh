#!/usr/bin/env bash
# Figures of run folders (issue 29, docs/launch.md, docs/experiments.md):
#   - a finished `zps launch` run leaves accuracy.png and loss.png in its
#     folder;
#   - `zps plot RUN1 RUN2 -o out.png --target 0.5` writes one PNG, and its
#     gnuplot script (--keep-script) names both runs and the target;
#   - a folder that is not a run (no eval.tsv) is named, exit 1; no run
#     folder at all is bad usage, exit 2;
#   - without gnuplot on PATH a run succeeds and says "figures skipped" once;
#   - a run of one evaluation: no gnuplot warning on launch's stderr.
# Skipped (77) without gnuplot. Stops only what it starts; the run folders
# are in lib.sh's $dir.
#
# usage: plot_runs.sh ZPS ZPS_SERVER
set -euo pipefail
zps=$1
server_bin=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

fail() { echo "FAIL: $*" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot not on PATH"; exit 77; }

# is_png FILE: PNG magic bytes and more than a trivial size.
is_png() {
    [ -f "$1" ] || fail "$1 missing"
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
        fail "$1 is not a PNG"
    [ "$(stat -c %s "$1")" -gt 2000 ] || fail "$1 is too small to be a figure"
}

runs=$dir/runs
for m in bsp asp; do
    "$zps" launch --servers 1 --workers 2 --mode $m --model linear:8 \
        --data synthetic:n=800,test=100,dim=8 --clocks 40 --eval-every 10 \
        --runs-dir "$runs" --name $m --no-progress --time-limit 120 \
        >"$dir/$m.out" 2>"$dir/$m.err" ||
        { cat "$dir/$m.err" >&2; fail "the $m run failed"; }
    is_png "$runs/$m/accuracy.png"
    is_png "$runs/$m/loss.png"
done

"$zps" plot "$runs/bsp" "$runs/asp" -o "$dir/out.png" --target 0.5 \
    --keep-script "$dir/plot.gp" >"$dir/plot.out" 2>"$dir/plot.err" ||
    { cat "$dir/plot.err" >&2; fail "zps plot failed"; }
is_png "$dir/out.png"
grep -q '"bsp (bsp, 1x2)"' "$dir/plot.gp" || fail "the script does not name the bsp run"
grep -q '"asp (asp, 1x2)"' "$dir/plot.gp" || fail "the script does not name the asp run"
grep -q 'first 0.5 to' "$dir/plot.gp" || fail "the script has no target line at 0.5"

mkdir -p "$dir/notarun"
rc=0
"$zps" plot "$runs/bsp" "$dir/notarun" -o "$dir/bad.png" 2>"$dir/bad.err" || rc=$?
[ "$rc" = 1 ] || fail "a folder without eval.tsv: exit $rc, expected 1"
grep -qF "$dir/notarun: not a run folder (no eval.tsv)" "$dir/bad.err" ||
    { cat "$dir/bad.err" >&2; fail "the bad folder is not named"; }
[ ! -e "$dir/bad.png" ] || fail "a figure was written for a bad folder"
# Without gnuplot on PATH a run still succeeds and says once that figures
# were skipped.
env PATH=/nonexistent "$zps" launch --servers 1 --workers 1 --mode asp --model linear:8 \
    --data synthetic:n=400,test=100,dim=8 --clocks 20 --runs-dir "$runs" --name nognu \
    --no-progress --time-limit 120 >"$dir/nognu.out" 2>"$dir/nognu.err" ||
    { cat "$dir/nognu.err" >&2; fail "the run without gnuplot failed"; }
[ "$(grep -c 'figures skipped' "$dir/nognu.err")" = 1 ] ||
    { cat "$dir/nognu.err" >&2; fail "no single 'figures skipped' line without gnuplot"; }
[ ! -e "$runs/nognu/accuracy.png" ] || fail "a figure without gnuplot"
# A run of one evaluation draws its figures without gnuplot's warnings
# ("empty x range") reaching the user: gnuplot's messages are shown only
# when it fails.
"$zps" launch --servers 1 --workers 1 --mode asp --model mlp:8-4 \
    --data synthetic:n=400,test=100,dim=8,classes=4 --clocks 5 --runs-dir "$runs" --name one \
    --no-progress --time-limit 120 >"$dir/one.out" 2>"$dir/one.err" ||
    { cat "$dir/one.err" >&2; fail "the run of one evaluation failed"; }
is_png "$runs/one/accuracy.png"
if grep -i "warning" "$dir/one.err"; then fail "gnuplot's warnings reached the user"; fi
rc=0
"$zps" plot -o "$dir/none.png" 2>"$dir/none.err" || rc=$?
[ "$rc" = 2 ] || fail "no run folder: exit $rc, expected 2"
echo "plot_runs: ok"
