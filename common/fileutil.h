/*
 * fileutil.h - file-system steps that more than one kind of file needs:
 * checkpoints (checkpoint/dir.c) and key files (keys.c) both put a file in
 * place with a rename and then make the rename durable; the files of a `zps
 * launch` run folder are created inside a directory descriptor, never
 * through a name that could lead elsewhere.
 *
 * The *_at functions work relative to a directory descriptor `dirfd` and a
 * plain `name` in it (no '/'): they never follow a symbolic link at the
 * name, and never open a file that was there before them, so a name planted
 * in the directory by someone else (a link to /etc/passwd, a hard link, a
 * FIFO) makes them fail instead of writing there. They block on the file
 * system; any thread.
 */
#ifndef ZPS_FILEUTIL_H
#define ZPS_FILEUTIL_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/*
 * fsyncs directory `dir`, so that a rename in it survives a crash. A file
 * system that cannot sync a directory (EINVAL) counts as done. Returns 0,
 * or -1 with errno set.
 */
int zps_sync_dir(const char *dir);

/*
 * Creates `name` in dirfd for writing: O_CREAT|O_EXCL|O_NOFOLLOW, so a name
 * that exists already, a symbolic link included, fails with EEXIST. `flags`
 * adds to O_WRONLY|O_CLOEXEC (e.g. O_APPEND); `mode` as for open(2), less
 * the umask. Returns the descriptor (the caller closes it), or -1 with
 * errno set.
 */
int zps_file_create_at(int dirfd, const char *name, int flags, mode_t mode);

/*
 * zps_file_create_at(dirfd, name, 0, 0644) as a stdio stream for writing.
 * Returns the stream (the caller fcloses it), or NULL with errno set.
 */
FILE *zps_file_fcreate_at(int dirfd, const char *name);

/*
 * Puts len bytes of data in dirfd under `name`: they are written to a fresh
 * temporary name there (created as zps_file_create_at does, mode `mode`),
 * synced and renamed over `name`, so a reader sees the old file or the new
 * one, and whatever `name` was (a symbolic link too) is replaced, never
 * written through.
 * Returns 0, or -1 with errno set and no temporary left behind.
 */
int zps_file_replace_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode);

/*
 * Copies the regular file `from` (a path, opened with O_NOFOLLOW) to a new
 * file `name` in dirfd, created as zps_file_create_at does with `mode`.
 * Returns 0, or -1 with errno set; a partly written `name` is removed.
 */
int zps_file_copy_to_at(const char *from, int dirfd, const char *name, mode_t mode);

#endif
