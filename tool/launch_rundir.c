/*
 * launch_rundir.c - the runs directory's check and the run folder's making;
 * see launch_rundir.h.
 *
 * The walk opens each directory of the runs directory's real path with
 * O_PATH|O_NOFOLLOW relative to the one above, so what is judged is what
 * the next step opens: a directory swapped for a link while we walk makes
 * the walk fail instead of judging one directory and using another.
 */
#include "launch_rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "launch_remote.h"

zps_rundir_verdict_t zps_launch_rundir_judge(uid_t owner, mode_t mode, uid_t me)
{
    if (owner != me && owner != 0)
        return ZPS_RUNDIR_OWNER;
    if ((mode & (S_IWGRP | S_IWOTH)) && !(mode & S_ISVTX))
        return ZPS_RUNDIR_WRITABLE;
    return ZPS_RUNDIR_OK;
}

/* "alice" for a uid the password database knows, else "1001". */
static void user_name(uid_t uid, char *buf, size_t size)
{
    struct passwd *pw = getpwuid(uid);
    if (pw && pw->pw_name && *pw->pw_name)
        snprintf(buf, size, "%s", pw->pw_name);
    else
        snprintf(buf, size, "%u", (unsigned)uid);
}

/* Says why directory `path` (the runs directory, or one above `runs`) is refused. */
static void say_refused(zps_rundir_verdict_t v, const struct stat *st, const char *path,
                        const char *runs, char *why, size_t why_size)
{
    char what[PATH_MAX + 80];
    if (strcmp(path, runs) == 0)
        snprintf(what, sizeof(what), "the runs directory %s", path);
    else
        snprintf(what, sizeof(what), "%s, on the way to the runs directory %s,", path, runs);
    static const char risk[] =
        "could replace the run folder with a link, and this launch would write through it";
    if (v == ZPS_RUNDIR_OWNER) {
        char owner[64], me[64];
        user_name(st->st_uid, owner, sizeof(owner));
        user_name(geteuid(), me, sizeof(me));
        zps_set_reason(why, why_size,
                       "%s is owned by user %s (uid %u), not by you or root: that user %s; "
                       "`chown %s %s`, or choose another --runs-dir",
                       what, owner, (unsigned)st->st_uid, risk, me, path);
        return;
    }
    bool grp = (st->st_mode & S_IWGRP) != 0, oth = (st->st_mode & S_IWOTH) != 0;
    zps_set_reason(why, why_size,
                   "%s is writable by %s (mode %04o) and not sticky: %s %s; `chmod %s %s` (or "
                   "`chmod +t %s`), or choose another --runs-dir",
                   what,
                   grp && oth ? "its group and by others"
                   : grp      ? "its group"
                              : "others",
                   (unsigned)(st->st_mode & 07777),
                   grp && oth ? "its group's members and every other user"
                   : grp      ? "its group's members"
                              : "any other user",
                   risk, grp && oth ? "go-w" : grp ? "g-w" : "o-w", path, path);
}

int zps_launch_runs_open(const char *runs_dir, int *fd, char *abs, size_t abs_size, char *why,
                         size_t why_size)
{
    if (zps_launch_mkdir_p(runs_dir, 0755) != 0) {
        zps_set_reason(why, why_size, "cannot create %s: %s", runs_dir, strerror(errno));
        return ZPS_EIO;
    }
    char real[PATH_MAX];
    if (!realpath(runs_dir, real)) {
        zps_set_reason(why, why_size, "%s: %s", runs_dir, strerror(errno));
        return ZPS_EIO;
    }
    if (strlen(real) >= abs_size) {
        zps_set_reason(why, why_size, "%s: %s", real, strerror(ENAMETOOLONG));
        return ZPS_EIO;
    }
    uid_t me = geteuid();
    int cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0) {
        zps_set_reason(why, why_size, "cannot open /: %s", strerror(errno));
        return ZPS_EIO;
    }
    char prefix[PATH_MAX] = "/";
    size_t at = 1; /* real[at..] is what is left to walk */
    for (;;) {
        struct stat st;
        if (fstat(cur, &st) != 0) {
            zps_set_reason(why, why_size, "cannot inspect %s: %s", prefix, strerror(errno));
            close(cur);
            return ZPS_EIO;
        }
        zps_rundir_verdict_t v = zps_launch_rundir_judge(st.st_uid, st.st_mode, me);
        if (v != ZPS_RUNDIR_OK) {
            say_refused(v, &st, prefix, real, why, why_size);
            close(cur);
            return ZPS_EDENIED;
        }
        if (real[at] == '\0')
            break;
        size_t n = strcspn(real + at, "/");
        char name[NAME_MAX + 1];
        snprintf(name, sizeof(name), "%.*s", (int)n, real + at);
        int next = openat(cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        snprintf(prefix, sizeof(prefix), "%.*s", (int)(at + n), real);
        if (next < 0) {
            /* A link here now was a directory when realpath passed: swapped. */
            int e = errno;
            struct stat ls;
            bool link = fstatat(cur, name, &ls, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(ls.st_mode);
            zps_set_reason(why, why_size, "cannot open %s: %s", prefix,
                           link ? "it has become a symbolic link" : strerror(e));
            close(cur);
            return link ? ZPS_EDENIED : ZPS_EIO;
        }
        close(cur);
        cur = next;
        at += n;
        while (real[at] == '/')
            at++;
    }
    snprintf(abs, abs_size, "%s", real);
    *fd = cur;
    return 0;
}

int zps_launch_rundir_make(int runs_fd, const char *name, const char *shown, int *fd, char *why,
                           size_t why_size)
{
    if (mkdirat(runs_fd, name, 0755) != 0) {
        int e = errno;
        zps_set_reason(why, why_size, "cannot create the run folder %s: %s", shown,
                       e == EEXIST ? "it exists already" : strerror(e));
        errno = e;
        return e == EEXIST ? ZPS_EINVAL : ZPS_EIO;
    }
    int d = openat(runs_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d < 0) {
        int e = errno;
        zps_set_reason(why, why_size, "cannot open the run folder %s just made: %s", shown,
                       strerror(e));
        errno = e;
        return e == ELOOP || e == ENOTDIR ? ZPS_EDENIED : ZPS_EIO;
    }
    struct stat st;
    if (fstat(d, &st) != 0) {
        int e = errno;
        zps_set_reason(why, why_size, "cannot inspect the run folder %s: %s", shown, strerror(e));
        close(d);
        errno = e;
        return ZPS_EIO;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
        zps_set_reason(why, why_size,
                       "the run folder %s is not the folder just made (it belongs to uid %u)",
                       shown, (unsigned)st.st_uid);
        close(d);
        errno = EPERM;
        return ZPS_EDENIED;
    }
    /* A umask such as 002 would let the group plant names in it. */
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) &&
        fchmod(d, st.st_mode & 07777 & ~(mode_t)(S_IWGRP | S_IWOTH)) != 0) {
        int e = errno;
        zps_set_reason(why, why_size, "cannot chmod the run folder %s: %s", shown, strerror(e));
        close(d);
        errno = e;
        return ZPS_EIO;
    }
    *fd = d;
    return 0;
}
