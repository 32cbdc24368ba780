/*
 * ckpt_io.h - file I/O shared by the checkpoint library's two halves
 * (format.c writes files, dir.c probes a directory with the same steps).
 * Internal: nothing outside checkpoint/ includes it.
 *
 * Not here: the file format (checkpoint.h).
 */
#ifndef ZPS_CKPT_IO_H
#define ZPS_CKPT_IO_H

#include <stddef.h>

/* Writes all n bytes of buf at fd's position, retrying on EINTR. Blocks;
 * any thread. Returns 0, or -1 with errno set. */
int zps_ckpt_write_all(int fd, const void *buf, size_t n);

#endif
