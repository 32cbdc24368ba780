/*
 * launch_rundir.h - the run folder of `zps launch`, made so that no other
 * user of this host can swap it, or a file in it, for a link to a file of
 * ours (docs/security.md, "What is not protected").
 *
 * A run folder RUNS/NAME is safe when nobody but us (and root) can rename
 * or replace an entry on the way to it: every directory from / down to
 * RUNS must be owned by us or by root, and writable by no one else unless
 * it is sticky (a sticky directory, like /tmp, lets others add entries but
 * not rename or remove ours). The rule, for each of those directories:
 *
 *     owner     not us and not root              -> refused (ZPS_RUNDIR_OWNER)
 *     mode      group- or other-writable, no +t  -> refused (ZPS_RUNDIR_WRITABLE)
 *     else                                       -> accepted
 *
 * The run folder itself is made by mkdirat in the checked RUNS (a name that
 * exists already is never reused), opened O_DIRECTORY|O_NOFOLLOW, checked
 * to be ours, and made writable by us alone; every file launch writes in it
 * is then created relative to that descriptor with O_EXCL|O_NOFOLLOW
 * (common/fileutil.h). The children write their files (endpoint, metrics,
 * checkpoints) by path, which the rule above keeps pointing into it.
 *
 * Not here: which files a run holds (launch.c, docs/launch.md). Blocks on
 * the file system; main thread of zps launch.
 */
#ifndef ZPS_LAUNCH_RUNDIR_H
#define ZPS_LAUNCH_RUNDIR_H

#include <stddef.h>
#include <sys/types.h>

typedef enum zps_rundir_verdict {
    ZPS_RUNDIR_OK = 0,
    ZPS_RUNDIR_OWNER,    /* owned by a user other than `me` and root */
    ZPS_RUNDIR_WRITABLE, /* writable by its group or by others, and not sticky */
} zps_rundir_verdict_t;

/* The rule above for one directory of owner `owner` and mode `mode` (st_mode), for user `me`. Pure. */
zps_rundir_verdict_t zps_launch_rundir_judge(uid_t owner, mode_t mode, uid_t me);

/*
 * Creates runs_dir when it is missing (mkdir -p, mode 0755), then opens
 * every directory of its real path from / down, O_NOFOLLOW, judging each
 * (zps_launch_rundir_judge, for the effective user). On success *fd is the
 * runs directory's descriptor (the caller closes it), abs[abs_size] its real
 * path, and 0 is returned. ZPS_EDENIED: a directory fails the rule, why
 * names it and the chmod or chown that fixes it; ZPS_EIO: it cannot be
 * created or opened (why says so).
 */
int zps_launch_runs_open(const char *runs_dir, int *fd, char *abs, size_t abs_size, char *why,
                         size_t why_size);

/*
 * Makes the run folder `name` in runs_fd: mkdirat (mode 0755 less the
 * umask), opened O_DIRECTORY|O_NOFOLLOW, checked to be a directory owned by
 * the effective user, and its group and other write bits taken away.
 * Returns 0 with *fd its descriptor (the caller closes it); ZPS_EINVAL with
 * errno EEXIST when the name is taken (anything there, a link too, is left
 * alone); ZPS_EDENIED when what was opened is not the folder just made;
 * ZPS_EIO otherwise (errno set). why says what, naming `shown` (the folder
 * as the user knows it).
 */
int zps_launch_rundir_make(int runs_fd, const char *name, const char *shown, int *fd, char *why,
                           size_t why_size);

#endif
