#!/usr/bin/env bash
# scripts/prometheus/zps-rules.yml under Debian's real promtool: the file is
# valid (`promtool check rules`), and zps-rules.test.yml's synthetic series
# make each alert fire and not fire and check the recording rules
# (`promtool test rules`). Skipped (77) without promtool (package
# prometheus; scripts/setup installs it).
#
# usage: prom_rules.sh PROJECT_SOURCE_DIR
set -euo pipefail
src=$1
if ! command -v promtool >/dev/null; then
    echo "SKIP: promtool is not installed (apt-get install --no-install-recommends prometheus;" \
        "scripts/setup installs it)"
    exit 77
fi
rules=$src/scripts/prometheus/zps-rules.yml
tests=$src/scripts/prometheus/zps-rules.test.yml
promtool check rules "$rules"
# promtool resolves rule_files relative to the test file.
promtool test rules "$tests"
echo "prometheus rules: all checks passed"
