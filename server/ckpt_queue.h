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
 * A checkpoint counts as saved only once its file is on disk: a failed write
 * (a full disk, a file size limit, a directory gone) leaves the newest saved
 * version where it was. SIGTERM asks for the current version to be saved
 * before the shard exits; when that write fails it is tried again, at most
 * ZPS_CKPT_EXIT_ATTEMPTS times in all, and if none succeeds the shard
 * reports its state as not saved (zps_ckpt_queue_unsaved) and zps-server
 * exits with status 3.
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

/* Writes SIGTERM's checkpoint may take in all: the first and two retries. */
#define ZPS_CKPT_EXIT_ATTEMPTS 3

typedef struct zps_ckpt_queue {
    struct zps_ckpt_job *running; /* on the threadpool */
    struct zps_ckpt_job *waiting; /* behind it, oldest first */
    size_t nwaiting;
    bool taken;             /* a checkpoint of `version` was taken: on its way, written or failed */
    uint64_t version;       /* the newest one taken */
    bool saved;             /* a checkpoint of `saved_version` is on disk */
    uint64_t saved_version; /* the newest written (or resumed from) */
    int last_rc;            /* the outcome of the newest finished write */
    bool at_exit;           /* SIGTERM: the current version must be saved before exit */
    unsigned exit_attempts; /* checkpoints taken for that so far */
    bool exit_given_up;     /* ... and none of them could be written */
    char last_path[4096];   /* the newest written (or resumed from); "" if none */
    uint64_t written_ns;    /* when this process last wrote one (zps_now_ns); 0: never */
    uint64_t write_ns;      /* how long that write took, from the threadpool's start */
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
 * SIGTERM's checkpoint: the current version must be on disk before the
 * shard exits, unless there is no --checkpoint-dir or no model. Writes one
 * unless that version is saved already; when checkpoints are still being
 * written, decides once they are done. A failed write is retried, up to
 * ZPS_CKPT_EXIT_ATTEMPTS writes in all (not retried when the state itself
 * cannot be written: ZPS_EINVAL). The loop keeps running until the last
 * write is done.
 */
void zps_ckpt_queue_at_exit(struct zps_daemon *d);

/*
 * After the loop ended: true when SIGTERM asked for the state to be saved
 * and its version is not on disk (every attempt failed; each was logged).
 */
bool zps_ckpt_queue_unsaved(const struct zps_daemon *d);

/*
 * Frees the jobs still waiting (never started). The running one, if any, is
 * finished by the loop before it ends.
 */
void zps_ckpt_queue_fini(zps_ckpt_queue_t *q);

#endif
