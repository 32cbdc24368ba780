#!/bin/sh
# optimizer.sh - prints the optimizer benchmark's table: each optimizer's step
# throughput on a 64 MiB shard beside a memory-bandwidth loop with the same
# traffic, measured in the same run (see tests/bench/bench_optimizer.c).
#
# Builds nothing. Build first, e.g.
#   cmake -S . -B build && cmake --build build --target bench_optimizer
#
# usage: tests/bench/optimizer.sh [BINARY] [--n FLOATS] [--reps R]
#   BINARY defaults to build/tests/bench/bench_optimizer under the repository root.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/build/tests/bench/bench_optimizer"
if [ $# -gt 0 ]; then
    case "$1" in
    -*) ;;
    *)
        bin=$1
        shift
        ;;
    esac
fi
if [ ! -x "$bin" ]; then
    echo "optimizer.sh: no benchmark binary at $bin; build the bench_optimizer target first" >&2
    exit 1
fi
exec "$bin" "$@"
