#!/usr/bin/env bash
# zps launch's runs directory against another local user (issue 35, docs/
# security.md "What is not protected"), with a second local user the test
# makes and deletes (useradd, userdel; acted as with setpriv, as root;
# skipped otherwise):
#   - a runs directory others may write, and that is not sticky, is refused
#     before anything is made in it (usage, 2), naming `chmod go-w` (or g-w);
#     so is one owned by another user (naming `chown`), and one below a
#     directory others may write;
#   - in a sticky runs directory others may write (as /tmp is), the other
#     user plants the run's name as a link to a file of ours: the launch is
#     refused ("exists already"), the file keeps its bytes and nothing is
#     made through the link;
#   - a run in that sticky directory, under umask 002, trains to the end and
#     its folder and files are writable by no one but us.
#
# usage: launch_rundir.sh ZPS
set -euo pipefail
zps=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
    echo "skipped: needs root and setpriv to act as a second user"
    exit 77
fi
# The second user: made for this test and deleted at its end (useradd), or
# a bare uid no user has where useradd is missing.
user=""
if command -v useradd >/dev/null && command -v userdel >/dev/null &&
    useradd --system --no-create-home --user-group --shell /usr/sbin/nologin "zpsrd$$" 2>/dev/null; then
    user=zpsrd$$
    trap 'userdel "$user" 2>/dev/null || true; cleanup' EXIT
    other=$(id -u "$user")
    group=$(id -g "$user")
    echo "second user: $user (uid $other), made for this test"
else
    other=12345
    group=12345
    echo "second user: uid $other (no useradd: a uid no user has)"
fi
as_other() { setpriv --reuid "$other" --regid "$group" --clear-groups "$@"; }
chmod 755 "$dir"
run=(--servers 1 --workers 1 --mode asp --model linear:8 --data synthetic:n=400,test=100,dim=8
    --clocks 10 --no-progress --time-limit 120)

# refused RUNS WHAT... : a launch into RUNS exits 2 with every WHAT in its
# message, and RUNS stays empty.
refused() {
    local runs=$1
    shift
    local rc=0
    "$zps" launch "${run[@]}" --runs-dir "$runs" --name r >"$dir/out" 2>"$dir/err" || rc=$?
    [ "$rc" = 2 ] || { cat "$dir/err" >&2; fail "$runs: exit $rc, expected 2"; }
    for w in "$@"; do
        grep -qF -- "$w" "$dir/err" || { cat "$dir/err" >&2; fail "$runs: no '$w'"; }
    done
    [ -z "$(ls -A "$runs")" ] || fail "$runs: a refused launch made $(ls -A "$runs")"
}

# 1. Writable by others, not sticky.
mkdir -m 777 "$dir/open"
chmod 777 "$dir/open" # whatever the umask
refused "$dir/open" "the runs directory $dir/open is writable by its group and by others (mode 0777) and not sticky" \
    "chmod go-w $dir/open" "choose another --runs-dir"
echo "world-writable runs directory: refused ($(grep -o 'chmod go-w [^`]*' "$dir/err"))"
mkdir -m 775 "$dir/group"
chmod 775 "$dir/group"
refused "$dir/group" "is writable by its group (mode 0775)" "chmod g-w $dir/group"

# 2. Owned by another user.
mkdir -m 755 "$dir/theirs"
chown "$other:$group" "$dir/theirs"
refused "$dir/theirs" "the runs directory $dir/theirs is owned by user ${user:-$other} (uid $other)" \
    "chown root $dir/theirs"
echo "another user's runs directory: refused"

# 3. Safe itself, below a directory others may write.
mkdir -m 777 "$dir/up"
chmod 777 "$dir/up"
mkdir -m 755 "$dir/up/runs"
refused "$dir/up/runs" "$dir/up, on the way to the runs directory $dir/up/runs," "chmod go-w $dir/up"

# 4. Sticky and open to all, as /tmp is: the other user plants the run's
#    name as a link to a file of ours.
mkdir -m 1777 "$dir/shared"
chmod 1777 "$dir/shared"
echo "keep me" >"$dir/victim"
mkdir -m 700 "$dir/mine"
as_other ln -s "$dir/victim" "$dir/shared/planted"
as_other ln -s "$dir/mine" "$dir/shared/planted-dir"
for name in planted planted-dir; do
    rc=0
    "$zps" launch "${run[@]}" --runs-dir "$dir/shared" --name $name >"$dir/out" 2>"$dir/err" || rc=$?
    [ "$rc" = 2 ] || { cat "$dir/err" >&2; fail "planted $name: exit $rc, expected 2"; }
    grep -qF "cannot create the run folder $dir/shared/$name: it exists already" "$dir/err" ||
        { cat "$dir/err" >&2; fail "planted $name: no 'exists already'"; }
done
[ "$(cat "$dir/victim")" = "keep me" ] || fail "the planted link was written through"
[ -z "$(ls -A "$dir/mine")" ] || fail "files were made through the planted link: $(ls -A "$dir/mine")"
echo "a name planted as a link by uid $other: refused, nothing written through it"

# 5. A run there, under umask 002, to the end: its folder and files are ours alone.
(
    umask 002
    exec "$zps" launch "${run[@]}" --runs-dir "$dir/shared" --name ok
) >"$dir/ok.out" 2>"$dir/ok.err" || { cat "$dir/ok.err" >&2; fail "the run in a sticky runs directory failed"; }
r=$dir/shared/ok
[ "$(stat -c %u "$r")" = 0 ] || fail "the run folder is not ours"
mode=$(stat -c %a "$r")
[ $((0$mode & 022)) = 0 ] || fail "the run folder has mode $mode under umask 002"
for f in commands.txt processes.tsv stats.jsonl summary.json server-0.log worker-0.log; do
    [ -f "$r/$f" ] && [ ! -L "$r/$f" ] || fail "$f is missing from the run folder"
done
if as_other touch "$r/intruder" 2>/dev/null; then
    fail "uid $other can make files in the run folder"
fi
echo "a run in a sticky runs directory under umask 002: folder mode $mode, trained to the end"
