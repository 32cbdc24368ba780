/*
 * ckpt_queue.h - checkpoints on their way to disk: the only blocking file
 * I/O of the daemon, done on libuv's threadpool.
 *
 * A checkpoint is a copy of the shard's state taken on the loop (the store,
 * the optimizer's state, and the clocks zps_consistency_snapshot says to
 * record), written and synced by a threadpool thread (uv_queue_work), and
 * reported back on the loop: logged, counted, and answered when a
 * CHECKPOINT request asked for it. One write runs at a time; at most two
 * wait behind it, so writes slower than the checkpoints come do not pile up
 * copies of the model.
 *
 * Not here: the file format, pruning and finding the newest file
 * (checkpoint/checkpoint.h), reading one back at start-up (resume.h).
 * Every function runs on the loop's thread and returns without blocking.
 */
#ifndef ZPS_CKPT_QUEUE_H
#define ZPS_CKPT_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reply.h"

struct zps_daemon;
struct zps_ckpt_job;

typedef struct zps_ckpt_queue {
    struct zps_ckpt_job *running; /* on the threadpool */
    struct zps_ckpt_job *waiting; /* behind it, oldest first */
    size_t nwaiting;
    bool taken;           /* a checkpoint of `version` exists or is on its way */
    uint64_t version;     /* the newest one taken */
    char last_path[4096]; /* the newest written (or resumed from); "" if none */
} zps_ckpt_queue_t;

/*
 * Takes a checkpoint of the current version and queues it for writing. When
 * r is not NULL it is a CHECKPOINT request to answer once the file is on
 * disk (its route and header are copied). Returns 0, or ZPS_EMODE (no
 * --checkpoint-dir), ZPS_ENOTINIT (no model yet), ZPS_EBUSY (two already
 * waiting) or ZPS_ENOMEM; nothing is queued on error.
 */
int zps_ckpt_queue_take(struct zps_daemon *d, const zps_request_t *r);

/* After the version moved: a checkpoint when it is a multiple of --checkpoint-every. */
void zps_ckpt_queue_maybe(struct zps_daemon *d);

/*
 * SIGTERM's checkpoint: one of the current version unless there is no
 * --checkpoint-dir, no model, or one of that version is taken already.
 */
void zps_ckpt_queue_at_exit(struct zps_daemon *d);

/*
 * Frees the jobs still waiting (never started). The running one, if any, is
 * finished by the loop before it ends.
 */
void zps_ckpt_queue_fini(zps_ckpt_queue_t *q);

#endif
