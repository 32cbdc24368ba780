# lib.sh - shared by the shell integration tests: a private directory,
# servers on free ports, and cleanup that leaves no process behind.
# Source it after setting `server_bin` (and `zps`, which the keyed run needs
# for `zps keygen`); it sets `dir` and an EXIT trap.
#
# The keyed run (ctest's `_secure` twins, label `secure`): with
# ZPS_TEST_SECURE=1 the run makes its keys in $dir/keys with `zps keygen`, a
# server pair and an admin client pair; every server start_server starts
# gets `--key` and `--authorized-keys` (the admin key its one line), and a
# client gets the admin key and the servers' public key from `with_keys CMD
# ARGS...` (or "${client_keys[@]}" appended to its command line, for a
# process started in the background, whose PID the test signals). Without
# the variable both arrays are empty and nothing changes.

dir=$(mktemp -d /tmp/zps-sh-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

secure=0
server_keys=()
client_keys=()
if [ "${ZPS_TEST_SECURE:-0}" = 1 ]; then
    secure=1
    [ -n "${zps:-}" ] || fail "ZPS_TEST_SECURE=1: the test sets no \$zps to make its keys with"
    mkdir -m 700 "$dir/keys"
    for k in server admin; do
        "$zps" keygen "$dir/keys/$k" >/dev/null || fail "zps keygen $dir/keys/$k"
    done
    echo "$(cat "$dir/keys/admin.pub") admin" >"$dir/keys/authorized_keys"
    chmod 644 "$dir/keys/authorized_keys" # whatever the umask: servers refuse a group-writable list
    server_keys=(--key "$dir/keys/server.key" --authorized-keys "$dir/keys/authorized_keys")
    client_keys=(--key "$dir/keys/admin.key" --server-key "$dir/keys/server.pub")
    echo "keyed run: servers with $dir/keys/server.key, clients with the admin key"
fi

# with_keys CMD ARGS... : CMD ARGS, with the run's client key flags in the keyed run
with_keys() { "$@" "${client_keys[@]}"; }

# expect_keyed EP : in the keyed run, the server at EP has authentication on
# with the run's one key, and has granted sealed sessions: the test's clients
# came with keys (a session is granted only over CURVE; this STATS, --no-seal,
# asks for none)
expect_keyed() {
    [ "$secure" = 1 ] || return 0
    local json
    json=$(with_keys "$zps" stats --servers "$1" --no-seal --timeout-ms 5000) ||
        fail "keyed stats of $1"
    [[ $json == *'"auth":{"on":true,"keys":1,'* ]] || fail "$1 runs without the run's keys: $json"
    [[ $json =~ \"sealed\":\{\"on\":true,[^}]*\"granted\":([0-9]+) ]] ||
        fail "$1 has no sealed sessions: $json"
    [ "${BASH_REMATCH[1]}" -gt 0 ] || fail "$1 granted no client a sealed session: $json"
    echo "keyed: $1 has authentication on, ${BASH_REMATCH[1]} sealed sessions granted"
}

# start_server NAME ARGS... : starts zps-server on a free port (on $listen if set,
# else tcp://127.0.0.1:*), sets $ep
start_server() {
    local name=$1; shift
    rm -f "$dir/$name.ep"
    "$server_bin" --listen "${listen:-tcp://127.0.0.1:*}" --endpoint-file "$dir/$name.ep" \
        "${server_keys[@]}" "$@" 2>"$dir/$name.log" &
    pids+=($!)
    for _ in $(seq 1 500); do
        [ -s "$dir/$name.ep" ] && break
        kill -0 "${pids[-1]}" 2>/dev/null || break
        sleep 0.01
    done
    [ -s "$dir/$name.ep" ] || fail "server $name did not start: $(cat "$dir/$name.log")"
    ep=$(cat "$dir/$name.ep")
    if [ "$secure" = 1 ]; then
        grep -q "authentication on: 1 authorized keys from $dir/keys/authorized_keys" \
            "$dir/$name.log" || fail "server $name is not keyed: $(cat "$dir/$name.log")"
    fi
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
