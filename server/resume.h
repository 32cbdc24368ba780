/*
 * resume.h - starting a shard from a checkpoint (--resume, --resume-from).
 *
 * Reads the checkpoint, checks that it was written by a shard configured
 * like this one (same place in the cluster, same consistency configuration,
 * same kind of optimizer), and loads it into the store, the optimizer and
 * the consistency state machine.
 *
 * Not here: the file format and the search for the newest valid file
 * (checkpoint/checkpoint.h), writing checkpoints (ckpt_queue.h).
 */
#ifndef ZPS_RESUME_H
#define ZPS_RESUME_H

struct zps_daemon;

/*
 * Loads the checkpoint the configuration names into d, before the loop
 * starts. Returns 0 (also when --resume finds no checkpoint at all: the
 * shard starts empty), or a ZPS_E* code after logging why the shard must not
 * start; on error d's store and rules are as they were. Blocks on file I/O:
 * start-up only.
 */
int zps_resume(struct zps_daemon *d);

#endif
