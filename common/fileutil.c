/*
 * fileutil.c - file-system steps shared by several kinds of file; see
 * fileutil.h.
 */
#include "fileutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

int zps_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    /* Some file systems cannot sync a directory; there is nothing more to do there. */
    if (rc != 0 && saved == EINVAL)
        rc = 0;
    errno = saved;
    return rc;
}

int zps_file_create_at(int dirfd, const char *name, int flags, mode_t mode)
{
    return openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags, mode);
}

FILE *zps_file_fcreate_at(int dirfd, const char *name)
{
    int fd = zps_file_create_at(dirfd, name, 0, 0644);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int saved = errno;
        close(fd);
        unlinkat(dirfd, name, 0);
        errno = saved;
    }
    return f;
}

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0) {
            errno = EIO;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int zps_file_replace_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode)
{
    /* A name of our own for the temporary: the pid and a counter, so two
     * threads or two processes never share one; O_EXCL refuses a planted one. */
    static atomic_uint_fast32_t counter;
    char tmp[300];
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        unsigned n = (unsigned)atomic_fetch_add(&counter, 1);
        if (snprintf(tmp, sizeof(tmp), ".%s.tmp-%ld-%u", name, (long)getpid(), n) >=
            (int)sizeof(tmp)) {
            errno = ENAMETOOLONG;
            return -1;
        }
        fd = zps_file_create_at(dirfd, tmp, 0, mode);
        if (fd < 0 && errno != EEXIST)
            return -1;
    }
    if (fd < 0)
        return -1;
    int rc = write_all(fd, data, len);
    if (rc == 0)
        rc = fsync(fd);
    int saved = errno;
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    if (rc == 0 && renameat(dirfd, tmp, dirfd, name) != 0) {
        rc = -1;
        saved = errno;
    }
    if (rc != 0)
        unlinkat(dirfd, tmp, 0);
    errno = saved;
    return rc;
}

int zps_file_copy_to_at(const char *from, int dirfd, const char *name, mode_t mode)
{
    int in = open(from, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0)
        return -1;
    struct stat st;
    int bad = fstat(in, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : 0;
    if (bad) {
        close(in);
        errno = bad;
        return -1;
    }
    int out = zps_file_create_at(dirfd, name, 0, mode);
    if (out < 0) {
        int saved = errno;
        close(in);
        errno = saved;
        return -1;
    }
    int rc = 0;
    char buf[65536];
    for (;;) {
        ssize_t n = read(in, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -1;
            break;
        }
        if (n == 0)
            break;
        if (write_all(out, buf, (size_t)n) != 0) {
            rc = -1;
            break;
        }
    }
    int saved = errno;
    if (close(out) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    close(in);
    if (rc != 0)
        unlinkat(dirfd, name, 0);
    errno = saved;
    return rc;
}
