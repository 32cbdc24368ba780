# netns.sh - "hosts" for the multi-host tests (tests/multihost) and for
# scripts/netns-launch (the study's throttled-link setting): network
# namespaces joined by a bridge, each with its own address. Sourced, never run.
#
# Every host is a namespace of its own with lo up, one veth (eth0) and the
# address 10.213.X.(I+1)/24, X derived from the PID. The bridge joining the
# veths lives in a namespace of its own too, so the root namespace's
# interfaces, routes and firewall are never touched: the pairs are created
# inside the bridge's namespace with their host end placed straight into the
# host's. No namespace has a default route, and mh_up refuses to go on if one
# has: this machine's root namespace has one, so a 10.x address contacted from
# outside these namespaces would leave the machine. Every process of a test,
# clients and tools included, runs on a host (on_host, mh_start).
#
# Interface:
#   mh_up N [DEADLINE]   N hosts and the bridge; sets mh_ns[I], mh_addr[I],
#                        mh_subnet ("10.213.X"), mh_dir (a private directory)
#                        and an EXIT trap that tears everything down. Exits 77
#                        with "SKIP: ..." when not root or the kernel refuses
#                        namespaces, veths or bridges. After DEADLINE seconds
#                        (default 50) the test is sent SIGTERM, so it tears
#                        down before ctest's TIMEOUT would SIGKILL it (which
#                        no trap survives). First removes the namespaces of
#                        earlier runs whose test process is gone (killed).
#   on_host I CMD...     runs CMD on host I (ip netns exec); MH_ENTER=nsenter
#                        uses `nsenter --net=/run/netns/NAME` instead (slurmd
#                        needs it: ip netns exec remounts /sys and hides
#                        /sys/fs/cgroup). Every command on a host sees that
#                        host's own /dev/shm (shared by the host's processes,
#                        not by two hosts': zps's shared memory as on
#                        separate machines)
#   on_host_nsenter I CMD...  the nsenter form, whatever MH_ENTER says
#   mh_start I NAME CMD...    CMD on host I in the background, stdout and
#                        stderr in $mh_dir/NAME.log; sets mh_pid and records it
#                        (mh_pids) for teardown
#   mh_wait_pid PID SECONDS   waits up to SECONDS for PID (one of mh_start's)
#                        to exit; sets mh_rc (124 when it did not)
#   mh_reachable I J     whether host I reaches host J's address over TCP (1 s)
#   mh_require_firewall  exits 77 unless nft or iptables is there
#   partition I J        drops every packet between host I and host J's address,
#                        in host I's namespace (nft, else iptables)
#   heal I J             undoes partition I J
#   mh_teardown          stops what mh_start started (SIGTERM, SIGKILL after
#                        3 s), then anything else left in the hosts' namespaces,
#                        and deletes the namespaces (and with them the veths and
#                        the bridge). Idempotent; the EXIT trap calls it.
#   mh_fail MSG          "FAIL: MSG" on stderr, exit 1 (teardown by the trap)
#   mh_keys ZPS W        on host 0, `zps keygen` key pairs in $mh_dir: srv (the
#                        servers'), w0 ... w(W-1), rd; and $mh_dir/authorized_keys
#                        with w0 admin (worker 0 initialises the model), wR a
#                        worker key for rank R only, rd a reader
#   mh_sshd I...         an sshd on each host I (openssh-server), with a host key
#                        and a user key of its own in $mh_dir/ssh; sets mh_ssh (the
#                        ssh command that logs in to any of them without a
#                        password: `$mh_ssh ADDR CMD`) and mh_sshd_pid[I]. Exits
#                        77 without sshd or ssh; fails when host 0 cannot log in
#                        to a host within 5 s
#   mh_throttle I RATE   tc's token bucket filter on host I's eth0: what host I
#                        sends leaves at RATE (tc's units: 10mbit, 1gbit). Exits
#                        77 without tc or when the kernel has no tbf
#   mh_now, mh_secs A B  wall time in seconds; B - A to one decimal
#
# A test sources this file, calls mh_up, and runs everything through on_host
# or mh_start. Names carry the PID ("zmh<PID>-h<I>", "zmh<PID>-br") so runs in
# parallel do not collide.

mh_skip() { echo "SKIP: $*"; exit 77; }
mh_fail() { echo "FAIL: $*" >&2; exit 1; }
mh_now() { date +%s.%N; }
mh_secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

mh_tag=zmh$$
mh_sshd_pid=()
mh_ssh=
mh_hosts=0
mh_ns=()
mh_addr=()
mh_pids=()
mh_br_ns=
mh_dir=
mh_watchdog=
mh_deadline=
mh_torn=no

# X in 10.213.X.0/24 from the PID, so two runs never share a subnet (their
# namespaces would keep them apart anyway).
mh_subnet=10.213.$(($$ % 254 + 1))

mh_ns_exists() { [ -e "/run/netns/$1" ]; }

mh_teardown() {
    [ "$mh_torn" = yes ] && return 0
    mh_torn=yes
    # Nothing interrupts the teardown, the watchdog included.
    trap '' TERM INT
    if [ -n "$mh_watchdog" ]; then
        kill -TERM "$mh_watchdog" 2>/dev/null
        wait "$mh_watchdog" 2>/dev/null
    fi
    local p i pid
    for p in "${mh_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for _ in $(seq 1 30); do
        local alive=no
        for p in "${mh_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=yes; done
        [ "$alive" = no ] && break
        sleep 0.1
    done
    for p in "${mh_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    # Anything else still in a host's namespace was started by this test
    # (a child of a process above): stop it by its PID before the namespace goes.
    for i in "${!mh_ns[@]}"; do
        mh_ns_exists "${mh_ns[$i]}" || continue
        for pid in $(ip netns pids "${mh_ns[$i]}" 2>/dev/null); do
            kill -KILL "$pid" 2>/dev/null || true
        done
    done
    # Reaped whatever their status: a process that needed SIGKILL must not end
    # the teardown (set -e) before the namespaces are gone.
    for p in "${mh_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for i in "${!mh_ns[@]}"; do
        mh_ns_exists "${mh_ns[$i]}" && ip netns del "${mh_ns[$i]}" 2>/dev/null
    done
    [ -n "$mh_br_ns" ] && mh_ns_exists "$mh_br_ns" && ip netns del "$mh_br_ns" 2>/dev/null
    [ -n "$mh_dir" ] && [ "${MH_KEEP:-}" != 1 ] && rm -rf "$mh_dir"
    return 0
}

# mh_sweep : namespaces "zmh<PID>-*" whose PID is no longer alive are what a
# killed run (SIGKILL: no trap) left: their processes (that run's zps
# processes) are stopped by PID and the namespaces deleted; so is such a
# run's directory (/tmp/zps-mh-<PID>-*), unless MH_KEEP=1 kept it.
mh_sweep() {
    local ns owner pid
    for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep '^zmh[0-9][0-9]*-' || true); do
        owner=${ns#zmh}
        owner=${owner%%-*}
        [ "$owner" = $$ ] && continue
        kill -0 "$owner" 2>/dev/null && continue
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null && echo "netns.sh: removed $ns, left by a killed run" >&2
    done
    local dir
    for dir in /tmp/zps-mh-[0-9]*-*; do
        [ -d "$dir" ] || continue
        owner=${dir#/tmp/zps-mh-}
        owner=${owner%%-*}
        [ "$owner" = $$ ] && continue
        kill -0 "$owner" 2>/dev/null || [ "${MH_KEEP:-}" = 1 ] || rm -rf "$dir"
    done
    return 0
}

mh_on_exit() {
    local rc=$?
    mh_teardown
    exit "$rc"
}

# mh_check_no_default NS : refuses to go on if NS has a default route (v4 or v6).
mh_check_no_default() {
    local r
    r=$(ip -n "$1" route show default 2>&1; ip -n "$1" -6 route show default 2>/dev/null)
    [ -z "$r" ] || mh_fail "namespace $1 has a default route ($r): refusing to run"
}

mh_up() {
    local n=$1 i
    mh_deadline=${2:-50}
    [ "$(id -u)" -eq 0 ] || mh_skip "network-namespace hosts need root"
    command -v ip >/dev/null || mh_skip "no 'ip' command (iproute2)"
    command -v nsenter >/dev/null || mh_skip "no 'nsenter' command (util-linux)"
    mh_dir=$(mktemp -d "/tmp/zps-mh-$$-XXXXXX")
    trap mh_on_exit EXIT
    trap 'exit 130' INT
    trap 'echo "FAIL: stopped (SIGTERM; the deadline is $mh_deadline s)" >&2; exit 143' TERM
    # The watchdog: SIGTERM to this test after the deadline; its sleep goes with it.
    bash -c 'sleep "$1" & s=$!; trap "kill $s; exit 0" TERM; wait $s; kill -TERM "$2"' \
        _ "$mh_deadline" $$ </dev/null >/dev/null 2>&1 &
    mh_watchdog=$!
    mh_sweep
    mh_br_ns=$mh_tag-br
    # The first namespace tells whether this machine can do it at all.
    if ! ip netns add "$mh_br_ns" 2>"$mh_dir/netns.err"; then
        mh_br_ns=
        mh_skip "ip netns add failed: $(head -1 "$mh_dir/netns.err")"
    fi
    ip -n "$mh_br_ns" link set lo up
    if ! ip -n "$mh_br_ns" link add br0 type bridge 2>"$mh_dir/netns.err"; then
        mh_skip "the kernel refuses a bridge: $(head -1 "$mh_dir/netns.err")"
    fi
    ip -n "$mh_br_ns" link set br0 up
    for ((i = 0; i < n; i++)); do
        mh_ns[$i]=$mh_tag-h$i
        mh_addr[$i]=$mh_subnet.$((i + 1))
        ip netns add "${mh_ns[$i]}" || mh_fail "ip netns add ${mh_ns[$i]}"
        ip -n "${mh_ns[$i]}" link set lo up
        # The pair is born in the bridge's namespace, its other end in the host's.
        if ! ip -n "$mh_br_ns" link add "h$i" type veth peer name eth0 netns "${mh_ns[$i]}" \
            2>"$mh_dir/netns.err"; then
            mh_skip "the kernel refuses a veth pair: $(head -1 "$mh_dir/netns.err")"
        fi
        ip -n "$mh_br_ns" link set "h$i" master br0
        ip -n "$mh_br_ns" link set "h$i" up
        ip -n "${mh_ns[$i]}" addr add "${mh_addr[$i]}/24" dev eth0
        ip -n "${mh_ns[$i]}" link set eth0 up
        mkdir -m 1777 "$mh_dir/shm-$i"
    done
    mh_hosts=$n
    mh_check_no_default "$mh_br_ns"
    for ((i = 0; i < n; i++)); do mh_check_no_default "${mh_ns[$i]}"; done
    # Bounded wait for the links (the bridge forwards once its ports are up).
    for ((i = 1; i < n; i++)); do
        local ok=no
        for _ in $(seq 1 50); do
            if mh_reachable 0 "$i"; then
                ok=yes
                break
            fi
            sleep 0.1
        done
        [ "$ok" = yes ] || mh_fail "host $i (${mh_addr[$i]}) does not answer host 0"
    done
}

# mh_reachable I J : whether a TCP connection from host I reaches host J's
# address within 1 s (refused counts: the peer answered). No ping needed.
mh_reachable() {
    local out
    out=$(ip netns exec "${mh_ns[$1]}" timeout 1 bash -c "exec 3<>/dev/tcp/${mh_addr[$2]}/9" 2>&1) &&
        return 0
    [[ $out == *refused* ]]
}

mh_host_ns() {
    [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -lt "$mh_hosts" ] || mh_fail "no host '$1'"
    echo "${mh_ns[$1]}"
}

# Every command on a host runs with that host's own /dev/shm: a directory of
# mh_dir bound over it in a mount namespace of the command's own, so that
# processes on one host share their shared memory (zps-server's segment)
# and processes on two hosts do not, as on separate machines. unshare and
# sh exec: the PID stays the command's. Followed by the host's directory,
# then the command.
mh_own_shm=(unshare --mount --propagation private sh -c 'mount --bind "$0" /dev/shm && exec "$@"')

on_host_nsenter() {
    local ns host=$1
    ns=$(mh_host_ns "$1") || exit 1
    shift
    nsenter --net="/run/netns/$ns" -- "${mh_own_shm[@]}" "$mh_dir/shm-$host" "$@"
}

on_host() {
    local ns host=$1
    ns=$(mh_host_ns "$1") || exit 1
    if [ "${MH_ENTER:-netns}" = nsenter ]; then
        on_host_nsenter "$@"
        return
    fi
    shift
    ip netns exec "$ns" "${mh_own_shm[@]}" "$mh_dir/shm-$host" "$@"
}

mh_start() {
    local host=$1 name=$2
    shift 2
    mh_host_ns "$host" >/dev/null || exit 1
    mh_check_no_default "${mh_ns[$host]}"
    # A simple command in the background, and ip netns exec and nsenter exec
    # theirs: the PID is the process's own.
    local shm="$mh_dir/shm-$host"
    if [ "${MH_ENTER:-netns}" = nsenter ]; then
        nsenter --net="/run/netns/${mh_ns[$host]}" -- "${mh_own_shm[@]}" "$shm" "$@" \
            >"$mh_dir/$name.log" 2>&1 &
    else
        ip netns exec "${mh_ns[$host]}" "${mh_own_shm[@]}" "$shm" "$@" >"$mh_dir/$name.log" 2>&1 &
    fi
    mh_pid=$!
    mh_pids+=("$mh_pid")
}

mh_wait_pid() {
    local pid=$1 secs=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        mh_rc=124
        return 0
    fi
    set +e
    wait "$pid"
    mh_rc=$?
    set -e
}

mh_firewall() {
    if command -v nft >/dev/null; then
        echo nft
    elif command -v iptables >/dev/null; then
        echo iptables
    fi
}

mh_require_firewall() {
    [ -n "$(mh_firewall)" ] || mh_skip "neither nft nor iptables is installed (scripts/setup installs nftables)"
}

partition() {
    local i=$1 j=$2 peer ns
    ns=$(mh_host_ns "$i") || exit 1
    mh_host_ns "$j" >/dev/null || exit 1
    peer=${mh_addr[$j]}
    case $(mh_firewall) in
    nft)
        ip netns exec "$ns" nft -f - <<EOF || mh_fail "partition $i $j: nft"
table inet zps_part_$j {
    chain in { type filter hook input priority 0; policy accept; ip saddr $peer drop; }
    chain out { type filter hook output priority 0; policy accept; ip daddr $peer drop; }
}
EOF
        ;;
    iptables)
        ip netns exec "$ns" iptables -I INPUT -s "$peer" -j DROP &&
            ip netns exec "$ns" iptables -I OUTPUT -d "$peer" -j DROP ||
            mh_fail "partition $i $j: iptables"
        ;;
    *) mh_fail "partition: neither nft nor iptables" ;;
    esac
}

heal() {
    local i=$1 j=$2 peer ns
    ns=$(mh_host_ns "$i") || exit 1
    mh_host_ns "$j" >/dev/null || exit 1
    peer=${mh_addr[$j]}
    case $(mh_firewall) in
    nft) ip netns exec "$ns" nft delete table inet "zps_part_$j" || mh_fail "heal $i $j: nft" ;;
    iptables)
        ip netns exec "$ns" iptables -D INPUT -s "$peer" -j DROP &&
            ip netns exec "$ns" iptables -D OUTPUT -d "$peer" -j DROP ||
            mh_fail "heal $i $j: iptables"
        ;;
    *) mh_fail "heal: neither nft nor iptables" ;;
    esac
}

mh_keys() {
    local zps=$1 workers=$2 r
    for k in srv rd $(seq -f 'w%g' 0 $((workers - 1))); do
        on_host 0 "$zps" keygen "$mh_dir/$k" >/dev/null
    done
    {
        echo "$(cat "$mh_dir/w0.pub") admin"
        for ((r = 1; r < workers; r++)); do echo "$(cat "$mh_dir/w$r.pub") worker $r"; done
        echo "$(cat "$mh_dir/rd.pub") reader"
    } >"$mh_dir/authorized_keys"
    chmod 644 "$mh_dir/authorized_keys" # whatever the umask: servers refuse a group-writable list
}

mh_sshd() {
    local sshd=/usr/sbin/sshd i d=$mh_dir/ssh
    [ -x "$sshd" ] || mh_skip "no $sshd (scripts/setup installs openssh-server)"
    command -v ssh >/dev/null && command -v ssh-keygen >/dev/null || mh_skip "no ssh client"
    mkdir -p "$d" /run/sshd # /run/sshd: sshd's privilege separation directory
    chmod 700 "$d"
    [ -f "$d/host_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/host_key"
    [ -f "$d/id" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/id"
    cp "$d/id.pub" "$d/authorized_keys"
    touch "$d/known_hosts"
    for i in "$@"; do
        cat >"$d/sshd-$i.conf" <<EOF
ListenAddress ${mh_addr[$i]}:22
HostKey $d/host_key
PidFile none
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile $d/authorized_keys
StrictModes no
PrintMotd no
LogLevel ERROR
EOF
        mh_start "$i" "sshd-$i" "$sshd" -D -e -f "$d/sshd-$i.conf"
        mh_sshd_pid[$i]=$mh_pid
        echo "${mh_addr[$i]} $(cut -d' ' -f1-2 "$d/host_key.pub")" >>"$d/known_hosts"
    done
    cat >"$d/config" <<EOF
Host *
    User $(id -un)
    IdentityFile $d/id
    IdentitiesOnly yes
    UserKnownHostsFile $d/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    LogLevel ERROR
EOF
    mh_ssh="ssh -F $d/config"
    for i in "$@"; do
        for _ in $(seq 50); do
            on_host 0 timeout 1 bash -c "exec 3<>/dev/tcp/${mh_addr[$i]}/22" 2>/dev/null && break
            sleep 0.1
        done
        # shellcheck disable=SC2086 # mh_ssh is words
        on_host 0 $mh_ssh -o BatchMode=yes "${mh_addr[$i]}" true ||
            mh_fail "no ssh to host $i: $(tail -3 "$mh_dir/sshd-$i.log")"
    done
}

mh_throttle() {
    command -v tc >/dev/null || mh_skip "no tc (iproute2)"
    # burst: a few packets' worth at RATE; latency: how long a packet may queue
    on_host "$1" tc qdisc add dev eth0 root tbf rate "$2" burst 32kb latency 500ms ||
        mh_skip "tc cannot add a tbf qdisc here"
}
