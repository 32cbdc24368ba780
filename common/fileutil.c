/*
 * fileutil.c - file-system steps shared by several kinds of file; see
 * fileutil.h.
 */
#include "fileutil.h"

#include <errno.h>
#include <fcntl.h>
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
