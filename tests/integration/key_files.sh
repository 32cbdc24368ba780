#!/usr/bin/env bash
# Key files' owners and modes, and ZPS_INSECURE (issue 35), with real
# zps-server processes on 127.0.0.1 (and 0.0.0.0, reached over 127.0.0.1):
#   - an authorized keys file group or others may write is refused at start
#     (usage, 2) naming `chmod go-w FILE`, and at a reload (SIGHUP, `zps
#     reload-keys`), which keeps the list in force;
#   - as root: a 0600 secret key, or an authorized keys file, owned by
#     another uid (chown to a uid no user has) is refused naming `chown UID
#     FILE`, at start and at a reload;
#   - a client's --server-key file group or others may write is refused;
#   - ZPS_INSECURE=1 in the environment alone does not open 0.0.0.0 (usage,
#     2, naming --insecure); --insecure on the command line does, with the
#     INSECURE warning; on loopback the variable changes nothing.
#
# usage: key_files.sh ZPS_SERVER ZPS
set -euo pipefail
server_bin=$1
zps=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
unset ZPS_INSECURE ZPS_KEY ZPS_SERVER_KEY ZPS_AUTHORIZED_KEYS ZPS_LISTEN

cd "$dir"
for k in srv adm; do "$zps" keygen "$dir/$k" >/dev/null; done
echo "$(cat adm.pub) admin" >ak
chmod 644 ak
me=$(id -u)
other=12345
[ "$me" != "$other" ] || other=12346
loop='tcp://127.0.0.1:*'

# --- start-up: an authorized keys file group or others may write ---
for m in 666 664 646 620; do
    chmod "$m" ak
    expect_status 2 "$server_bin" --workers 1 --listen "$loop" --key "$dir/srv.key" \
        --authorized-keys "$dir/ak"
    grep -q "authorized keys file $dir/ak has mode 0$m, which lets group or others write it" \
        "$dir/err" || fail "ak $m: $(cat "$dir/err")"
    grep -q "chmod go-w $dir/ak" "$dir/err" || fail "ak $m fix: $(cat "$dir/err")"
done
chmod 644 ak

# --- start-up: files of another user (root only: only root gives files away) ---
if [ "$me" = 0 ]; then
    cp srv.key theirs.key
    chown "$other" theirs.key
    [ "$(stat -c %a theirs.key)" = 600 ] || fail "theirs.key is not 0600"
    expect_status 2 "$server_bin" --workers 1 --listen "$loop" --key "$dir/theirs.key" \
        --authorized-keys "$dir/ak"
    grep -q "secret key file $dir/theirs.key is owned by uid $other, not by this process's user" \
        "$dir/err" || fail "secret key of uid $other: $(cat "$dir/err")"
    grep -q "chown $me $dir/theirs.key" "$dir/err" || fail "chown fix: $(cat "$dir/err")"
    cp ak theirs-ak
    chown "$other" theirs-ak
    expect_status 2 "$server_bin" --workers 1 --listen "$loop" --key "$dir/srv.key" \
        --authorized-keys "$dir/theirs-ak"
    grep -q "authorized keys file $dir/theirs-ak is owned by uid $other" "$dir/err" ||
        fail "authorized keys of uid $other: $(cat "$dir/err")"
    grep -q "chown $me $dir/theirs-ak" "$dir/err" || fail "chown fix: $(cat "$dir/err")"
    # The fix, as named, makes it start.
    chown "$me" theirs.key
    start_server fixed --workers 1 --key "$dir/theirs.key" --authorized-keys "$dir/ak"
    kill "${pids[-1]}"
    wait "${pids[-1]}" 2>/dev/null || true
else
    echo "not root: the cases of files owned by another uid are not run"
fi

# --- reloads: refused the same way, the list in force kept ---
start_server main --workers 1 --key "$dir/srv.key" --authorized-keys "$dir/ak"
main=$ep
main_pid=${pids[-1]}
as_adm() { "$zps" "$@" --servers "$main" --key "$dir/adm.key" --server-key "$dir/srv.pub" \
    --timeout-ms 5000; }
chmod 666 ak
kill -HUP "$main_pid"
for _ in $(seq 1 300); do grep -q "keeping the authorized keys" main.log && break; sleep 0.01; done
grep -q "SIGHUP: keeping the authorized keys in force (1 keys): .*chmod go-w $dir/ak" main.log ||
    fail "SIGHUP with a writable list: $(cat main.log)"
expect_status 1 as_adm reload-keys
grep -q "kept the authorized keys in force (1)" "$dir/err" || fail "reload-keys: $(cat "$dir/err")"
grep -q "chmod go-w $dir/ak" "$dir/err" || fail "reload-keys fix: $(cat "$dir/err")"
if [ "$me" = 0 ]; then
    chmod 644 ak
    chown "$other" ak
    expect_status 1 as_adm reload-keys
    grep -q "is owned by uid $other.*chown $me $dir/ak" "$dir/err" ||
        fail "reload-keys, list of uid $other: $(cat "$dir/err")"
    chown "$me" ak
fi
as_adm stats >/dev/null || fail "the admin key no longer works after refused reloads"
chmod 644 ak
expect_status 0 as_adm reload-keys
[ "$(cat "$dir/out")" = '{"keys":1}' ] || fail "reload-keys after the fix: $(cat "$dir/out")"

# --- a client's --server-key others may write ---
cp srv.pub loose.pub
chmod 666 loose.pub
set +e
"$zps" stats --servers "$main" --key "$dir/adm.key" --server-key "$dir/loose.pub" \
    --timeout-ms 5000 >"$dir/out" 2>"$dir/err"
st=$?
set -e
[ "$st" -ne 0 ] || fail "zps stats took a world-writable --server-key"
grep -q "public key file $dir/loose.pub has mode 0666.*chmod go-w $dir/loose.pub" "$dir/err" ||
    fail "world-writable --server-key: $(cat "$dir/err")"

# --- ZPS_INSECURE: the environment alone does not open the network ---
ZPS_INSECURE=1 expect_status 2 "$server_bin" --workers 1 --listen 'tcp://0.0.0.0:*'
grep -q "ZPS_INSECURE in the" "$dir/err" || fail "ZPS_INSECURE alone: $(cat "$dir/err")"
grep -q -- "Pass --insecure on the command line" "$dir/err" ||
    fail "ZPS_INSECURE alone, the fix: $(cat "$dir/err")"
ZPS_INSECURE=yes ZPS_LISTEN='tcp://0.0.0.0:*' expect_status 2 "$server_bin" --workers 1
grep -q "ZPS_INSECURE in the" "$dir/err" || fail "ZPS_INSECURE and ZPS_LISTEN: $(cat "$dir/err")"
# On loopback it changes nothing (no warning either).
ZPS_INSECURE=1 start_server envloop --workers 1
"$zps" stats --servers "$ep" --timeout-ms 5000 >/dev/null || fail "stats of envloop"
if grep -q "INSECURE:" envloop.log; then fail "loopback warned: $(cat envloop.log)"; fi
# On the command line it opens 0.0.0.0, loudly (reached here over 127.0.0.1 only).
for env_too in 0 1; do
    ZPS_INSECURE=$env_too listen='tcp://0.0.0.0:*' start_server "open$env_too" --workers 1 \
        --insecure
    grep -q "WARN .*INSECURE: listening on tcp://0.0.0.0:\* without authentication" \
        "open$env_too.log" || fail "no INSECURE warning: $(cat "open$env_too.log")"
    "$zps" stats --servers "tcp://127.0.0.1:${ep##*:}" --timeout-ms 5000 >/dev/null ||
        fail "stats of the --insecure server"
done
echo "key_files: ok"
