# lib.sh - shared by the shell integration tests: a private directory,
# servers on free ports, and cleanup that leaves no process behind.
# Source it after setting `server_bin`; it sets `dir` and an EXIT trap.

dir=$(mktemp -d /tmp/zps-sh-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# start_server NAME ARGS... : starts zps-server on a free port (on $listen if set,
# else tcp://127.0.0.1:*), sets $ep
start_server() {
    local name=$1; shift
    rm -f "$dir/$name.ep"
    "$server_bin" --listen "${listen:-tcp://127.0.0.1:*}" --endpoint-file "$dir/$name.ep" "$@" \
        2>"$dir/$name.log" &
    pids+=($!)
    for _ in $(seq 1 500); do
        [ -s "$dir/$name.ep" ] && break
        kill -0 "${pids[-1]}" 2>/dev/null || break
        sleep 0.01
    done
    [ -s "$dir/$name.ep" ] || fail "server $name did not start: $(cat "$dir/$name.log")"
    ep=$(cat "$dir/$name.ep")
}

# dead_endpoint : sets $dead to an endpoint nobody listens on (a server's, after it stopped)
dead_endpoint() {
    start_server gone --workers 1
    dead=$ep
    kill "${pids[-1]}"
    wait "${pids[-1]}" 2>/dev/null || true
}

# expect_status WANT CMD... : runs CMD (output in $dir/out, $dir/err), checks its exit status
expect_status() {
    local want=$1; shift
    set +e
    "$@" >"$dir/out" 2>"$dir/err"
    local got=$?
    set -e
    [ "$got" -eq "$want" ] || fail "'$*' exited $got, expected $want: $(cat "$dir/err")"
}
