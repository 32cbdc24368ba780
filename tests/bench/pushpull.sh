#!/usr/bin/env bash
# Push+pull throughput and round-trip time through a real zps-server, against
# raw ZeroMQ carrying the same bytes, measured in the same run; with --curve
# also through a zps-server with CURVE keys and over a raw ZeroMQ echo with
# and without CURVE; with --bf16 also the exchange with bfloat16 on the wire
# (docs/benchmarks.md). Prints tables, then one line per
# measurement: RESULT kind=KIND size=BYTES rtt_us=MEDIAN gbps=GBPS.
#   tests/bench/pushpull.sh [BUILD_DIR] [--sizes 4K,1M,16M,64M] [--seconds S] [--curve] [--bf16]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build/release}
[ $# -gt 0 ] && shift
bin=$build/tests/bench/bench_pushpull
[ -x "$bin" ] || { echo "no $bin: build first (scripts/test or cmake --build $build)" >&2; exit 2; }
exec "$bin" "$@"
