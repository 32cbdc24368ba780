#!/usr/bin/env bash
# Optimizer step throughput on a 64 MiB shard, each beside a memory-bandwidth
# loop with the same traffic, measured in the same run (see
# tests/bench/bench_optimizer.c).
#   tests/bench/optimizer.sh [BUILD_DIR | BINARY] [--n FLOATS] [--reps R]
# BUILD_DIR defaults to build/release (where scripts/test and scripts/demo
# build); a file is taken as the bench_optimizer binary itself.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=$here/build/release
bin=
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    if [ -d "$1" ]; then build=$1; else bin=$1; fi
    shift
fi
bin=${bin:-$build/tests/bench/bench_optimizer}
[ -x "$bin" ] || { echo "no $bin: build first (scripts/test or cmake --build $build)" >&2; exit 2; }
exec "$bin" "$@"
