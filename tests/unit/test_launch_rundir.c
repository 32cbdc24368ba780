/*
 * test_launch_rundir.c - the run folder of `zps launch` (tool/launch_rundir.c)
 * and the files made in it (common/fileutil.c): the runs directory rule as
 * a table, the walk that applies it to real directories in a temporary
 * folder, the run folder's making, and names planted in a folder (links to
 * a file that must keep its bytes) that every *_at writer refuses or
 * replaces without writing through. The second user of the real threat is
 * tests/integration/launch_rundir.sh's; here the other owner is made with
 * chown, as root only.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "error.h"
#include "fileutil.h"
#include "launch_rundir.h"

static char tmp[64];
static char why[8192];

static void path_of(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmp, name);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* The file's text (at most 255 bytes) in buf. */
static const char *read_text(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmp, sizeof(tmp), "/tmp/zps-rundir-XXXXXX");
    return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "chmod -R u+w %s 2>/dev/null; rm -rf %s", tmp, tmp);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- the rule ---- */

static void test_judge(void **state)
{
    (void)state;
    static const struct {
        uid_t owner;
        mode_t mode;
        uid_t me;
        zps_rundir_verdict_t want;
    } rows[] = {
        {1000, S_IFDIR | 0755, 1000, ZPS_RUNDIR_OK},
        {1000, S_IFDIR | 0700, 1000, ZPS_RUNDIR_OK},
        {0, S_IFDIR | 0755, 1000, ZPS_RUNDIR_OK},        /* root's: root is trusted anyway */
        {0, S_IFDIR | 01777, 1000, ZPS_RUNDIR_OK},       /* /tmp */
        {1000, S_IFDIR | 01777, 1000, ZPS_RUNDIR_OK},    /* sticky: ours cannot be renamed */
        {1000, S_IFDIR | 01770, 1000, ZPS_RUNDIR_OK},    /* sticky, group-writable */
        {1001, S_IFDIR | 0755, 1000, ZPS_RUNDIR_OWNER},  /* its owner can rename anything */
        {1001, S_IFDIR | 01777, 1000, ZPS_RUNDIR_OWNER}, /* sticky does not bind the owner */
        {1001, S_IFDIR | 0700, 0, ZPS_RUNDIR_OWNER},     /* root in a user's folder too */
        {1000, S_IFDIR | 0777, 1000, ZPS_RUNDIR_WRITABLE},
        {1000, S_IFDIR | 0775, 1000, ZPS_RUNDIR_WRITABLE}, /* the group */
        {1000, S_IFDIR | 0757, 1000, ZPS_RUNDIR_WRITABLE}, /* others */
        {0, S_IFDIR | 0777, 0, ZPS_RUNDIR_WRITABLE},
        {1001, S_IFDIR | 0777, 1000, ZPS_RUNDIR_OWNER}, /* owner first */
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        zps_rundir_verdict_t got = zps_launch_rundir_judge(rows[i].owner, rows[i].mode, rows[i].me);
        if (got != rows[i].want)
            fail_msg("row %zu: owner %u mode %o me %u: %d, want %d", i, (unsigned)rows[i].owner,
                     (unsigned)rows[i].mode, (unsigned)rows[i].me, got, rows[i].want);
    }
}

/* ---- the walk ---- */

static void test_runs_open(void **state)
{
    (void)state;
    char runs[128], real[4096], parent[128];
    int fd = -1;
    /* Missing: made 0755 (less the umask), with its parent. */
    path_of(runs, sizeof(runs), "a/runs");
    assert_int_equal(zps_launch_runs_open(runs, &fd, real, sizeof(real), why, sizeof(why)), 0);
    assert_true(fd >= 0);
    assert_string_equal(real, runs); /* mkdtemp's folder holds no link */
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    close(fd);

    /* World-writable, not sticky: refused, naming it and the fix. */
    assert_int_equal(chmod(runs, 0777), 0);
    fd = -1;
    assert_int_equal(zps_launch_runs_open(runs, &fd, real, sizeof(real), why, sizeof(why)),
                     ZPS_EDENIED);
    assert_int_equal(fd, -1);
    assert_non_null(strstr(why, "the runs directory "));
    assert_non_null(strstr(why, runs));
    assert_non_null(strstr(why, "writable by its group and by others (mode 0777) and not sticky"));
    assert_non_null(strstr(why, "`chmod go-w "));
    assert_non_null(strstr(why, "`chmod +t "));
    assert_int_equal(chmod(runs, 0775), 0);
    assert_int_equal(zps_launch_runs_open(runs, &fd, real, sizeof(real), why, sizeof(why)),
                     ZPS_EDENIED);
    assert_non_null(strstr(why, "writable by its group (mode 0775)"));
    assert_non_null(strstr(why, "`chmod g-w "));

    /* Sticky: accepted. */
    assert_int_equal(chmod(runs, 01777), 0);
    assert_int_equal(zps_launch_runs_open(runs, &fd, real, sizeof(real), why, sizeof(why)), 0);
    close(fd);
    assert_int_equal(chmod(runs, 0755), 0);

    /* A directory above it that others may change is refused the same way. */
    path_of(parent, sizeof(parent), "a");
    assert_int_equal(chmod(parent, 0757), 0);
    fd = -1;
    assert_int_equal(zps_launch_runs_open(runs, &fd, real, sizeof(real), why, sizeof(why)),
                     ZPS_EDENIED);
    assert_non_null(strstr(why, ", on the way to the runs directory "));
    assert_non_null(strstr(why, "writable by others (mode 0757)"));
    assert_non_null(strstr(why, "`chmod o-w "));
    assert_int_equal(chmod(parent, 0755), 0);

    /* Owned by another user (root can make one with chown). */
    if (geteuid() == 0) {
        assert_int_equal(chown(runs, 65534, 65534), 0);
        assert_int_equal(zps_launch_runs_open(runs, &fd, real, sizeof(real), why, sizeof(why)),
                         ZPS_EDENIED);
        assert_non_null(strstr(why, "(uid 65534), not by you or root"));
        assert_non_null(strstr(why, "`chown "));
        assert_int_equal(chown(runs, 0, 0), 0);
    } else {
        print_message("skipped: another owner (chown needs root)\n");
    }

    /* A link on the way is followed once, to its real path, which is then
     * walked without following anything. */
    char link[128];
    path_of(link, sizeof(link), "link");
    assert_int_equal(symlink(parent, link), 0);
    char via[160];
    snprintf(via, sizeof(via), "%s/runs", link);
    assert_int_equal(zps_launch_runs_open(via, &fd, real, sizeof(real), why, sizeof(why)), 0);
    assert_string_equal(real, runs);
    close(fd);

    /* Not a directory: an error, not a refusal. */
    char file[128];
    path_of(file, sizeof(file), "file");
    write_text(file, "x");
    assert_int_equal(zps_launch_runs_open(file, &fd, real, sizeof(real), why, sizeof(why)),
                     ZPS_EIO);
}

/* ---- the run folder ---- */

static void test_rundir_make(void **state)
{
    (void)state;
    char runs[128], real[4096], target[128], planted[128];
    int rfd = -1, fd = -1;
    path_of(runs, sizeof(runs), "runs");
    assert_int_equal(zps_launch_runs_open(runs, &rfd, real, sizeof(real), why, sizeof(why)), 0);

    assert_int_equal(zps_launch_rundir_make(rfd, "r", "runs/r", &fd, why, sizeof(why)), 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_true(S_ISDIR(st.st_mode) && st.st_uid == geteuid());
    close(fd);

    /* Taken: refused, whatever is there. */
    fd = -1;
    assert_int_equal(zps_launch_rundir_make(rfd, "r", "runs/r", &fd, why, sizeof(why)),
                     ZPS_EINVAL);
    assert_int_equal(errno, EEXIST);
    assert_int_equal(fd, -1);
    assert_non_null(strstr(why, "cannot create the run folder runs/r: it exists already"));

    /* A link planted under the name, to a folder of ours: never entered. */
    path_of(target, sizeof(target), "target");
    assert_int_equal(mkdir(target, 0755), 0);
    path_of(planted, sizeof(planted), "runs/planted");
    assert_int_equal(symlink(target, planted), 0);
    assert_int_equal(zps_launch_rundir_make(rfd, "planted", "runs/planted", &fd, why, sizeof(why)),
                     ZPS_EINVAL);
    assert_int_equal(errno, EEXIST);
    struct stat ts;
    assert_int_equal(lstat(planted, &ts), 0);
    assert_true(S_ISLNK(ts.st_mode));

    /* A umask that leaves the group write does not reach the folder. */
    mode_t old = umask(002);
    assert_int_equal(zps_launch_rundir_make(rfd, "u", "runs/u", &fd, why, sizeof(why)), 0);
    umask(old);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0755);
    close(fd);
    close(rfd);
}

/* ---- files in a folder ---- */

static void test_files_at(void **state)
{
    (void)state;
    char victim[128], link[128], buf[256];
    path_of(victim, sizeof(victim), "victim");
    write_text(victim, "keep me\n");
    int dfd = open(tmp, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);

    /* create: a planted link fails with EEXIST, the file it names untouched. */
    path_of(link, sizeof(link), "commands.txt");
    assert_int_equal(symlink(victim, link), 0);
    errno = 0;
    assert_int_equal(zps_file_create_at(dfd, "commands.txt", 0, 0644), -1);
    assert_int_equal(errno, EEXIST);
    assert_null(zps_file_fcreate_at(dfd, "commands.txt"));
    assert_int_equal(errno, EEXIST);
    assert_string_equal(read_text(victim, buf, sizeof(buf)), "keep me\n");
    /* A dangling link too: nothing is created where it points. */
    char dangling[128], nowhere[128];
    path_of(dangling, sizeof(dangling), "stats.jsonl");
    path_of(nowhere, sizeof(nowhere), "nowhere");
    assert_int_equal(symlink(nowhere, dangling), 0);
    assert_int_equal(zps_file_create_at(dfd, "stats.jsonl", O_APPEND, 0644), -1);
    assert_int_equal(errno, EEXIST);
    assert_int_equal(access(nowhere, F_OK), -1);
    /* A fresh name: created with the mode asked (umask permitting). */
    FILE *f = zps_file_fcreate_at(dfd, "fresh.txt");
    assert_non_null(f);
    fputs("new\n", f);
    assert_int_equal(fclose(f), 0);

    /* replace: the link itself is replaced by the new file. */
    path_of(link, sizeof(link), "summary.json");
    assert_int_equal(symlink(victim, link), 0);
    assert_int_equal(zps_file_replace_at(dfd, "summary.json", "{}\n", 3, 0644), 0);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_string_equal(read_text(link, buf, sizeof(buf)), "{}\n");
    assert_string_equal(read_text(victim, buf, sizeof(buf)), "keep me\n");
    /* and again over the regular file */
    assert_int_equal(zps_file_replace_at(dfd, "summary.json", "{\"a\":1}\n", 8, 0644), 0);
    assert_string_equal(read_text(link, buf, sizeof(buf)), "{\"a\":1}\n");
    /* No temporary is left behind. */
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "ls -A %s | grep -c '\\.tmp-' || true", tmp);
    FILE *ls = popen(cmd, "r");
    assert_non_null(ls);
    assert_non_null(fgets(buf, sizeof(buf), ls));
    pclose(ls);
    assert_string_equal(buf, "0\n");

    /* copy: to a planted name refused, to a fresh one the same bytes. */
    char from[128];
    path_of(from, sizeof(from), "fresh.txt");
    path_of(link, sizeof(link), "loss.png");
    assert_int_equal(symlink(victim, link), 0);
    assert_int_equal(zps_file_copy_to_at(from, dfd, "loss.png", 0644), -1);
    assert_int_equal(errno, EEXIST);
    assert_string_equal(read_text(victim, buf, sizeof(buf)), "keep me\n");
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(zps_file_copy_to_at(from, dfd, "accuracy.png", 0644), 0);
    path_of(link, sizeof(link), "accuracy.png");
    assert_string_equal(read_text(link, buf, sizeof(buf)), "new\n");
    /* from a link: refused (O_NOFOLLOW on the source too) */
    path_of(link, sizeof(link), "commands.txt");
    assert_int_equal(zps_file_copy_to_at(link, dfd, "copy.png", 0644), -1);
    assert_int_equal(errno, ELOOP);
    close(dfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_judge),
        cmocka_unit_test_setup_teardown(test_runs_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rundir_make, setup, teardown),
        cmocka_unit_test_setup_teardown(test_files_at, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
