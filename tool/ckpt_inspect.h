/*
 * ckpt_inspect.h - `zps checkpoint inspect FILE`: a shard checkpoint, verified
 * part by part and printed for people.
 *
 * Not here: the file format and its verification (checkpoint/checkpoint.h,
 * zps_ckpt_verify); asking running servers for a checkpoint (`zps
 * checkpoint`, tool/zps.c and zps/zps.h).
 */
#ifndef ZPS_CKPT_INSPECT_H
#define ZPS_CKPT_INSPECT_H

/*
 * Prints the file's header, every section of its table with its stored and
 * computed CRC32C and verdict, and the shard state it holds (on stdout; a
 * path that cannot be used is reported on stderr). Blocks while it reads the
 * whole file once or twice. Returns the process exit status: 0 the file is a
 * valid checkpoint that --resume would accept, 1 it is invalid or corrupt
 * (the first problem is named on the last line), 2 the path cannot be used
 * (missing, unreadable, not a regular file). `path` "--help" or "-h" prints
 * the command's usage on stdout and returns 0; any other path that starts
 * with '-' is taken for an unknown option: said on stderr, returns 2.
 */
int zps_cmd_checkpoint_inspect(const char *path);

#endif
