/*
 * fileutil.h - file-system steps that more than one kind of file needs:
 * checkpoints (checkpoint/dir.c) and key files (keys.c) both put a file in
 * place with a rename and then make the rename durable.
 */
#ifndef ZPS_FILEUTIL_H
#define ZPS_FILEUTIL_H

/*
 * fsyncs directory `dir`, so that a rename in it survives a crash. A file
 * system that cannot sync a directory (EINVAL) counts as done. Returns 0,
 * or -1 with errno set.
 */
int zps_sync_dir(const char *dir);

#endif
