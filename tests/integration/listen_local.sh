#!/usr/bin/env bash
# Loopback addresses by name: tcp://localhost:P is accepted as loopback and
# must also bind (ZeroMQ binds TCP to numeric addresses only, so the server
# binds 127.0.0.1:P and writes that endpoint); tcp://[::1]:P binds and serves
# IPv6 clients when the machine has ::1. A non-loopback address still needs
# --insecure.
# usage: listen_local.sh ZPS_SERVER ZPS
set -euo pipefail
server_bin=$1
zps=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

listen='tcp://localhost:*' start_server byname --workers 1
case $ep in
tcp://127.0.0.1:[0-9]*) ;;
*) fail "tcp://localhost:* wrote endpoint '$ep', expected tcp://127.0.0.1:PORT" ;;
esac
port=${ep##*:}
expect_status 0 with_keys "$zps" stats --servers "tcp://localhost:$port" --timeout-ms 5000
grep -q "\"endpoint\":\"tcp://127.0.0.1:$port\"" "$dir/out" || fail "stats via localhost: $(cat "$dir/out")"

if ip -6 addr show dev lo 2>/dev/null | grep -q '::1/128'; then
    listen='tcp://[::1]:*' start_server v6 --workers 1
    case $ep in
    "tcp://[::1]:"[0-9]*) ;;
    *) fail "tcp://[::1]:* wrote endpoint '$ep'" ;;
    esac
    expect_status 0 with_keys "$zps" stats --servers "$ep" --timeout-ms 5000
    grep -q '"endpoint":"tcp://\[::1\]:' "$dir/out" || fail "stats over IPv6: $(cat "$dir/out")"
else
    echo "no ::1 on lo: the IPv6 case is not run"
fi

# A routable address without --insecure is refused before binding (usage, 2).
expect_status 2 "$server_bin" --listen tcp://10.255.255.1:7100 --workers 1
grep -q -- "--insecure" "$dir/err" || fail "non-loopback refusal: $(cat "$dir/err")"
expect_keyed "$ep"
echo "listen_local: ok"
