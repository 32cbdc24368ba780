/*
 * dir.c - a directory of shard checkpoints: the file names, writing a file
 * so that a crash never leaves a partial one under its name, listing one
 * shard's files, loading the newest good one (at most some version), and
 * pruning old ones; see checkpoint.h.
 *
 * A file is written under a fresh temporary name beside its final one,
 * synced, renamed over the final name and the directory synced. Files are
 * ordered by the version in their names; only the exact names
 * zps_ckpt_file_name writes are ever considered, so other shards' files and
 * temporary files are left alone.
 *
 * Not here: the bytes of a file and what makes one valid (format.c); when
 * the server writes, prunes or resumes (server/).
 */
#include "checkpoint.h"
#include "ckpt_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "fileutil.h"

/* ---- messages ---- */

/* Appends one line to a report buffer, keeping it NUL-terminated. */
static void report_add(char *rep, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void report_add(char *rep, size_t size, const char *fmt, ...)
{
    if (rep == NULL || size == 0)
        return;
    size_t len = strnlen(rep, size);
    if (len + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep + len, size - len, fmt, ap);
    va_end(ap);
}

/* ---- names and paths ---- */

int zps_ckpt_file_name(uint32_t index, uint32_t count, uint64_t version, char *buf, size_t size)
{
    int n = snprintf(buf, size, "shard-%" PRIu32 "-of-%" PRIu32 "-v%020" PRIu64 "%s", index, count,
                     version, ZPS_CKPT_SUFFIX);
    return n >= 0 && (size_t)n < size ? 0 : ZPS_EINVAL;
}

/* "dir/name", without doubling a trailing slash. */
static int join(const char *dir, const char *name, char *buf, size_t size)
{
    size_t dl = strlen(dir);
    const char *sep = dl > 0 && dir[dl - 1] == '/' ? "" : "/";
    int n = snprintf(buf, size, "%s%s%s", dir, sep, name);
    return n >= 0 && (size_t)n < size ? 0 : ZPS_EINVAL;
}

/*
 * If `name` is a checkpoint file of shard index/count, returns true with its
 * version. Only the exact form zps_ckpt_file_name writes matches, so other
 * shards' files, other shard counts and temporary files never do.
 */
static bool match_name(const char *name, uint32_t index, uint32_t count, uint64_t *version)
{
    char prefix[64];
    int n = snprintf(prefix, sizeof(prefix), "shard-%" PRIu32 "-of-%" PRIu32 "-v", index, count);
    if (n < 0 || (size_t)n >= sizeof(prefix) || strncmp(name, prefix, (size_t)n) != 0)
        return false;
    const char *p = name + n;
    uint64_t v = 0;
    for (int i = 0; i < 20; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        unsigned d = (unsigned)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (strcmp(p + 20, ZPS_CKPT_SUFFIX) != 0)
        return false;
    *version = v;
    return true;
}

int zps_ckpt_dir_prepare(const char *dir, char *why, size_t why_size)
{
    if (dir == NULL || dir[0] == '\0') {
        zps_set_reason(why, why_size, "no directory");
        return ZPS_EINVAL;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        zps_set_reason(why, why_size, "cannot create %s: %s", dir, strerror(errno));
        return ZPS_EIO;
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        zps_set_reason(why, why_size, "cannot stat %s: %s", dir, strerror(errno));
        return ZPS_EIO;
    }
    if (!S_ISDIR(st.st_mode)) {
        zps_set_reason(why, why_size, "%s is not a directory", dir);
        return ZPS_EIO;
    }

    /* The steps a checkpoint takes, on a small file: permissions, a
     * read-only mount, a full disk or a file size limit show here. */
    static atomic_uint probe_seq;
    char name[64], path[PATH_MAX];
    snprintf(name, sizeof(name), ".zps-probe.%ld.%u", (long)getpid(),
             atomic_fetch_add(&probe_seq, 1));
    if (join(dir, name, path, sizeof(path)) != 0) {
        zps_set_reason(why, why_size, "path too long: %s/%s", dir, name);
        return ZPS_EINVAL;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        zps_set_reason(why, why_size, "create %s: %s", path, strerror(errno));
        return ZPS_EIO;
    }
    static const char probe[] = "zps-server checkpoint directory probe\n";
    const char *step = NULL;
    int err = 0;
    if (zps_ckpt_write_all(fd, probe, sizeof(probe) - 1) != 0) {
        step = "write";
        err = errno;
    }
    if (step == NULL && fsync(fd) != 0) {
        step = "fsync";
        err = errno;
    }
    if (close(fd) != 0 && step == NULL) {
        step = "close";
        err = errno;
    }
    if (unlink(path) != 0) {
        if (step == NULL) {
            step = "remove";
            err = errno;
        }
    } else if (step == NULL && zps_sync_dir(dir) != 0) {
        step = "fsync directory";
        err = errno;
        snprintf(path, sizeof(path), "%s", dir);
    }
    if (step != NULL) {
        zps_set_reason(why, why_size, "%s %s: %s", step, path, strerror(err));
        return ZPS_EIO;
    }
    return 0;
}

int zps_ckpt_write(const char *dir, const zps_ckpt_t *c, char *path_out, size_t path_size,
                   char *why, size_t why_size)
{
    if (dir == NULL || c == NULL) {
        zps_set_reason(why, why_size, "no directory or no checkpoint");
        return ZPS_EINVAL;
    }
    /* Refuse a bad checkpoint before any file exists. */
    int rc = zps_ckpt_validate(c, why, why_size);
    if (rc != 0)
        return rc;

    static atomic_uint tmp_seq;
    char name[96], final[PATH_MAX], tmp[PATH_MAX];
    if (zps_ckpt_file_name(c->shard_index, c->shard_count, c->version, name, sizeof(name)) != 0 ||
        join(dir, name, final, sizeof(final)) != 0) {
        zps_set_reason(why, why_size, "path too long: %s/%s", dir, name);
        return ZPS_EINVAL;
    }

    /* A fresh temporary name beside the final one: rename is atomic only
     * within one file system, and O_EXCL never reuses a crashed writer's file. */
    int fd = -1;
    for (int attempt = 0; attempt < 64 && fd < 0; attempt++) {
        char tmpname[160];
        snprintf(tmpname, sizeof(tmpname), ".%s.tmp.%ld.%u", name, (long)getpid(),
                 atomic_fetch_add(&tmp_seq, 1));
        if (join(dir, tmpname, tmp, sizeof(tmp)) != 0) {
            zps_set_reason(why, why_size, "path too long: %s/%s", dir, tmpname);
            return ZPS_EINVAL;
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) {
            zps_set_reason(why, why_size, "create %s: %s", tmp, strerror(errno));
            return ZPS_EIO;
        }
    }
    if (fd < 0) {
        zps_set_reason(why, why_size, "create %s: %s", tmp, strerror(EEXIST));
        return ZPS_EIO;
    }

    const char *step = "fsync";
    int err = 0;
    if ((rc = zps_ckpt_encode(fd, c, tmp, why, why_size)) != 0)
        goto fail;
    if (fsync(fd) != 0) {
        err = errno;
        goto io_fail;
    }
    step = "close";
    int closed = close(fd);
    fd = -1;
    if (closed != 0) {
        err = errno;
        goto io_fail;
    }
    if (rename(tmp, final) != 0) {
        zps_set_reason(why, why_size, "rename %s to %s: %s", tmp, final, strerror(errno));
        rc = ZPS_EIO;
        goto fail;
    }

    /* The file is complete under its name; the directory entry must be durable too. */
    if (zps_sync_dir(dir) != 0) {
        zps_set_reason(
            why, why_size,
            "fsync directory %s: %s (%s is complete but its name may not survive a crash)", dir,
            strerror(errno), final);
        return ZPS_EIO;
    }
    if (path_out && path_size > 0)
        snprintf(path_out, path_size, "%s", final);
    return 0;

io_fail:
    zps_set_reason(why, why_size, "%s %s: %s", step, tmp, strerror(err));
    rc = ZPS_EIO;
fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return rc;
}

/* ---- the files of one shard in a directory ---- */

typedef struct candidate {
    uint64_t version;
    char *name;
} candidate_t;

static int newest_first(const void *a, const void *b)
{
    uint64_t va = ((const candidate_t *)a)->version, vb = ((const candidate_t *)b)->version;
    return va < vb ? 1 : va > vb ? -1 : 0;
}

static void free_candidates(candidate_t *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(c[i].name);
    free(c);
}

/*
 * Lists shard index/count's checkpoint files in dir, newest first. Returns
 * 0; ZPS_EIO with why when the directory cannot be listed (errno in *err:
 * ENOENT for a missing directory); ZPS_ENOMEM.
 */
static int list_shard(const char *dir, uint32_t index, uint32_t count, candidate_t **out,
                      size_t *n_out, int *err, char *why, size_t why_size)
{
    *err = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        *err = errno;
        zps_set_reason(why, why_size, "cannot list %s: %s", dir, strerror(errno));
        return ZPS_EIO;
    }
    candidate_t *list = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (de == NULL) {
            if (errno != 0) {
                *err = errno;
                zps_set_reason(why, why_size, "cannot list %s: %s", dir, strerror(errno));
                rc = ZPS_EIO;
            }
            break;
        }
        uint64_t v;
        if (!match_name(de->d_name, index, count, &v))
            continue;
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            candidate_t *p = realloc(list, ncap * sizeof(*p));
            if (p == NULL) {
                rc = ZPS_ENOMEM;
                break;
            }
            list = p;
            cap = ncap;
        }
        list[n].version = v;
        list[n].name = strdup(de->d_name);
        if (list[n].name == NULL) {
            rc = ZPS_ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc != 0) {
        if (rc == ZPS_ENOMEM)
            zps_set_reason(why, why_size, "out of memory");
        free_candidates(list, n);
        return rc;
    }
    if (n > 1)
        qsort(list, n, sizeof(*list), newest_first);
    *out = list;
    *n_out = n;
    return 0;
}

int zps_ckpt_find_at_most(const char *dir, uint32_t index, uint32_t count, uint64_t max_version,
                          zps_ckpt_t *out, char *path_out, size_t path_size, char *report,
                          size_t report_size)
{
    if (report && report_size > 0)
        report[0] = '\0';
    if (dir == NULL || out == NULL) {
        report_add(report, report_size, "no directory or no output\n");
        return ZPS_EINVAL;
    }
    char limit[64] = "";
    if (max_version != UINT64_MAX)
        snprintf(limit, sizeof(limit), " at version <= %" PRIu64, max_version);

    candidate_t *list = NULL;
    size_t n = 0;
    int err = 0;
    char why[PATH_MAX + 256];
    int rc = list_shard(dir, index, count, &list, &n, &err, why, sizeof(why));
    if (rc != 0) {
        if (err == ENOENT)
            report_add(report, report_size,
                       "no checkpoint for shard %" PRIu32 "/%" PRIu32
                       " in %s (no such directory)\n",
                       index, count, dir);
        else
            report_add(report, report_size, "%s\n", why);
        return rc;
    }

    size_t tried = 0;
    rc = ZPS_EIO;
    for (size_t i = 0; i < n; i++) {
        if (list[i].version > max_version)
            continue;
        tried++;
        char path[PATH_MAX];
        if (join(dir, list[i].name, path, sizeof(path)) != 0) {
            report_add(report, report_size, "skipped %s: path too long\n", list[i].name);
            rc = ZPS_ECORRUPT;
            continue;
        }
        zps_ckpt_t c;
        int r = zps_ckpt_read(path, &c, why, sizeof(why));
        if (r == ZPS_ENOMEM) {
            report_add(report, report_size, "%s: out of memory\n", list[i].name);
            rc = ZPS_ENOMEM;
            break;
        }
        if (r == 0) {
            /* Readable and intact; it must also be the shard its name says. */
            if (zps_ckpt_check_shard(&c, index, count, 0, why, sizeof(why)) != 0) {
                r = ZPS_ECORRUPT;
            } else if (c.version != list[i].version) {
                snprintf(why, sizeof(why),
                         "the file name says version %" PRIu64
                         ", the checkpoint holds version %" PRIu64,
                         list[i].version, c.version);
                r = ZPS_ECORRUPT;
            }
            if (r != 0)
                zps_ckpt_fini(&c);
        }
        if (r != 0) {
            rc = ZPS_ECORRUPT;
            report_add(report, report_size, "skipped %s: %s\n", list[i].name, why);
            continue;
        }
        *out = c;
        if (path_out && path_size > 0)
            snprintf(path_out, path_size, "%s", path);
        rc = 0;
        break;
    }
    free_candidates(list, n);
    if (tried == 0)
        report_add(report, report_size, "no checkpoint for shard %" PRIu32 "/%" PRIu32 "%s in %s\n",
                   index, count, limit, dir);
    else if (rc == ZPS_ECORRUPT)
        report_add(report, report_size,
                   "no usable checkpoint for shard %" PRIu32 "/%" PRIu32 "%s in %s\n", index, count,
                   limit, dir);
    return rc;
}

int zps_ckpt_find_latest(const char *dir, uint32_t index, uint32_t count, zps_ckpt_t *out,
                         char *path_out, size_t path_size, char *report, size_t report_size)
{
    return zps_ckpt_find_at_most(dir, index, count, UINT64_MAX, out, path_out, path_size, report,
                                 report_size);
}

int zps_ckpt_prune(const char *dir, uint32_t index, uint32_t count, unsigned keep)
{
    if (dir == NULL || keep == 0)
        return ZPS_EINVAL;
    candidate_t *list = NULL;
    size_t n = 0;
    int err = 0;
    int rc = list_shard(dir, index, count, &list, &n, &err, NULL, 0);
    if (rc != 0)
        return rc;
    for (size_t i = keep; i < n; i++) {
        char path[PATH_MAX];
        if (join(dir, list[i].name, path, sizeof(path)) != 0 ||
            (unlink(path) != 0 && errno != ENOENT))
            rc = ZPS_EIO;
    }
    free_candidates(list, n);
    return rc;
}
