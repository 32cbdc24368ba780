/*
 * consistency.h - the consistency rules of one shard, as a pure state machine.
 *
 * It decides when a pull may be answered and what happens to a push: apply
 * it now, buffer it for its clock's synchronous step, acknowledge it as a
 * retry, drop it as too late, or refuse it; and with each decision, the
 * push's update staleness and the factor that scales its learning rate. It
 * also says which clocks a checkpoint records. It does no I/O, allocates
 * only in zps_consistency_new, and knows nothing of parameters, sockets or
 * time: the server feeds it events and carries out its decisions, so the
 * rules can be tested as a table of events and expected answers.
 *
 * Not here: the arithmetic of a step (optimizer/mean.h, server/store.h),
 * when a worker counts as silent (the server's liveness timer, which calls
 * zps_consistency_evict), the checkpoint file format (checkpoint/).
 *
 * Terms (docs/consistency.md):
 *   pushed[w]         the next clock the shard expects from worker w
 *   v                 the shard's model version: optimizer steps applied
 *   min_clock         min over live workers of pushed[w] (those that have
 *                     finished, zps_consistency_finish, left out)
 *   s                 the SSP bound, in clocks (the config's `ssp_bound`)
 *   update staleness  updates applied between the version a gradient was
 *                     computed on and the version it is applied to
 *
 *   mode  a push at clock t                  a pull for clock t is ready when
 *   BSP   buffered; one step when every      v >= t
 *         live worker (or W-B of them with
 *         B backups) has pushed t; the push
 *         of a worker evicted after it was
 *         buffered joins that step, but only
 *         live workers' pushes count for it
 *   SSP   applied on arrival                 min_clock >= t - s
 *   ASP   applied on arrival                 always
 *
 * Observers (worker -1) are answered at once, or, when they ask for the
 * model OF clock t (zps_consistency_observe), once v >= t (BSP) or
 * min_clock >= t (SSP, ASP).
 *
 * Nothing may be pushed or answered before the model is initialised
 * (zps_consistency_set_initialized, or zps_consistency_restore): this module
 * is the one record of whether it is.
 *
 * Pulls that are not ready wait in a bounded queue inside the state machine,
 * each identified by an opaque token of the caller's;
 * zps_consistency_take_ready hands back the tokens that became ready after
 * any event.
 *
 * No call blocks. Not thread-safe: one shard's loop drives it. Every `why`
 * argument may be NULL; when given, a reason is written there on error.
 */
#ifndef ZPS_CONSISTENCY_H
#define ZPS_CONSISTENCY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum zps_mode {
    ZPS_MODE_BSP = 0,
    ZPS_MODE_SSP = 1,
    ZPS_MODE_ASP = 2,
} zps_mode_t;

/* "bsp", "ssp", "asp". */
int zps_mode_parse(const char *name, zps_mode_t *out);
const char *zps_mode_name(zps_mode_t mode);

/*
 * How a push applied on arrival (SSP, ASP) scales its learning rate by its
 * update staleness u (zps-server --lr-staleness). BSP steps are never scaled.
 */
typedef enum zps_lr_scaling {
    ZPS_LR_SCALING_NONE = 0,    /* every push at the configured rate */
    ZPS_LR_SCALING_INVERSE = 1, /* lr / (1 + u), after Zhang et al. 2016 */
} zps_lr_scaling_t;

typedef struct zps_consistency_config {
    zps_mode_t mode;
    uint32_t workers;     /* W >= 1 */
    uint32_t ssp_bound;   /* SSP: the bound s, in clocks (zps-server --staleness) */
    uint32_t backup;      /* BSP: B backup workers, B < W */
    uint32_t max_pending; /* waiting pulls allowed per worker (and per observer pool), >= 1 */
    zps_lr_scaling_t lr_scaling; /* SSP, ASP: the rate of a push applied on arrival */
} zps_consistency_config_t;

typedef struct zps_consistency zps_consistency_t;

/*
 * Checks a configuration without building anything: returns 0 or ZPS_EINVAL
 * with the reason in why (worded for the command line's flags).
 */
int zps_consistency_check_config(const zps_consistency_config_t *cfg, char *why, size_t why_size);

/*
 * A new state machine for cfg (copied), not yet initialised, every worker
 * live at clock 0. Returns 0 with *out owned by the caller (free it with
 * zps_consistency_free), ZPS_EINVAL (as zps_consistency_check_config) or
 * ZPS_ENOMEM; *out is written only on success.
 */
int zps_consistency_new(const zps_consistency_config_t *cfg, zps_consistency_t **out, char *why,
                        size_t why_size);
void zps_consistency_free(zps_consistency_t *st); /* NULL is a no-op */

/* The model now exists: pushes may be taken and pulls answered. */
void zps_consistency_set_initialized(zps_consistency_t *st);
/* Whether the model exists: the shard's one record of it. */
bool zps_consistency_initialized(const zps_consistency_t *st);

/*
 * Who may send a request: workers 0..W-1, and -1 (an observer) when
 * observer_ok. Returns 0, or ZPS_EWORKER with the reason in why. The same
 * check opens zps_consistency_push and zps_consistency_pull.
 */
int zps_consistency_check_worker(const zps_consistency_t *st, int64_t w, bool observer_ok,
                                 char *why, size_t why_size);

/*
 * The check a push at clock t meets before anything else about it matters:
 * returns 0, or ZPS_ENOTINIT (the model does not exist yet) with the reason
 * in why. zps_consistency_push makes it too; the server makes it early so
 * that this refusal comes before those of the payload.
 */
int zps_consistency_check_push(const zps_consistency_t *st, uint64_t t, char *why, size_t why_size);

typedef enum zps_push_action {
    ZPS_PUSH_APPLY,  /* apply this gradient now as one optimizer step; v has advanced */
    ZPS_PUSH_BUFFER, /* keep it in worker w's slot until its clock's step */
    ZPS_PUSH_RETRY,  /* already taken earlier: acknowledge, change nothing */
    ZPS_PUSH_DROP,   /* too late: its clock's step was taken without it */
} zps_push_action_t;

typedef struct zps_push_decision {
    zps_push_action_t action;
    /*
     * APPLY: updates applied between the version the gradient was computed on
     * and the one it is applied to (v before this push); BUFFER: the same
     * figure for the step that will apply it (that step makes version t + 1
     * from version t). 0 for RETRY and DROP.
     */
    uint64_t update_staleness;
    /* APPLY: the factor of the configured learning rate for this step
     * (cfg.lr_scaling of update_staleness); 1 otherwise. */
    double lr_scale;
} zps_push_decision_t;

/*
 * Worker w (0 <= w < W) pushes a gradient at clock t, computed on model
 * version `based_on`. Returns 0 with a decision, or ZPS_EWORKER,
 * ZPS_ENOTINIT, ZPS_ECLOCK (t skips ahead of pushed[w], or a BSP push for a
 * clock whose version does not exist yet), with the reason in why; an error
 * changes nothing and leaves *out unwritten.
 */
int zps_consistency_push(zps_consistency_t *st, uint32_t w, uint64_t t, uint64_t based_on,
                         zps_push_decision_t *out, char *why, size_t why_size);

/*
 * BSP: when the pushes buffered for the current clock are enough for a step,
 * returns true with the clock and the contributing ranks in rank order
 * (ranks[] has room for W entries; *count gets how many). Enough: the live
 * workers' pushes reach the quorum (all live workers, or W-B of them with B
 * backups; any push once no worker is live). Every push buffered for the
 * clock contributes, including one whose worker was evicted after it was
 * buffered: it was acknowledged, so it is kept, but it does not count
 * towards the quorum. The step is then "taken": later pushes for that clock
 * are dropped. The caller applies it and calls zps_consistency_step_done,
 * which advances v, or zps_consistency_step_refused. Returns false, writing
 * nothing, when no step is due or one is already taken and not done.
 */
bool zps_consistency_step_due(zps_consistency_t *st, uint64_t *clock, uint32_t *ranks,
                              uint32_t *count);
void zps_consistency_step_done(zps_consistency_t *st);

/*
 * BSP: the step handed out by zps_consistency_step_due could not be taken
 * (its result would not be finite; the caller changed no parameter). The
 * clock still moves on, as after zps_consistency_step_done, so that the
 * pulls for the next clock are answered (with unchanged parameters) and
 * training is not stalled by gradients that can never be combined; each
 * contributing push is counted as discarded for its worker
 * (zps_consistency_discarded).
 */
void zps_consistency_step_refused(zps_consistency_t *st);

/*
 * SSP/ASP: the push of worker w at clock t that zps_consistency_push has
 * just answered with APPLY could not be applied (its step would not be
 * finite). Undoes that decision: pushed[w] is t again and v goes back, as if
 * the push had never arrived, so the worker may push clock t again. Call it
 * before any other event.
 */
void zps_consistency_push_refused(zps_consistency_t *st, uint32_t w, uint64_t t);

typedef enum zps_pull_result {
    ZPS_PULL_READY,     /* answer now */
    ZPS_PULL_QUEUED,    /* waiting; its token will come out of zps_consistency_take_ready */
    ZPS_PULL_DUPLICATE, /* the same request is already waiting (its token in *existing) */
} zps_pull_result_t;

/*
 * Worker w (or -1 for an observer, which sees the model at once) pulls for
 * clock t with the caller's request id. Returns 0 with a result, or
 * ZPS_EWORKER, ZPS_ECLOCK (t is beyond the clocks w has pushed) or ZPS_EBUSY
 * (too many pulls of this worker already waiting); an error changes nothing.
 * QUEUED keeps `token` until it comes out of take_ready or take_all;
 * DUPLICATE writes the waiting pull's token to *existing.
 */
int zps_consistency_pull(zps_consistency_t *st, int32_t w, uint64_t t, uint64_t request_id,
                         uint64_t token, zps_pull_result_t *out, uint64_t *existing, char *why,
                         size_t why_size);

/*
 * An observer (an evaluator, a tool with --wait) pulls the model OF clock t:
 * the pull is answered once every update of every clock before t is in --
 * BSP: v >= t (so a pull parked before the step gets exactly version t);
 * SSP/ASP: min_clock >= t. It never holds anyone back, and has no clock of
 * its own to skip ahead of. It shares the observers' pool of waiting pulls.
 * Returns 0 with a result, or ZPS_EBUSY (the pool is full).
 */
int zps_consistency_observe(zps_consistency_t *st, uint64_t t, uint64_t request_id, uint64_t token,
                            zps_pull_result_t *out, uint64_t *existing, char *why, size_t why_size);

/*
 * As zps_consistency_observe, for a run whose workers run different numbers
 * of clocks (shared data assignment, assign.h): the pull is answered once
 * t * W pushes have been applied (SSP/ASP: v >= t * W, the model after as
 * many batches as BSP's clock t), or once every worker has finished or been
 * evicted (the final model). Under BSP it is zps_consistency_observe.
 */
int zps_consistency_observe_pushes(zps_consistency_t *st, uint64_t t, uint64_t request_id,
                                   uint64_t token, zps_pull_result_t *out, uint64_t *existing,
                                   char *why, size_t why_size);

/*
 * Worker w says it has no batch left (shared data assignment) and stops: it
 * no longer holds back min_clock (so SSP peers further on than the bound are
 * not held for it) and an observe_pushes pull no longer waits for it. A push
 * of w afterwards (it was handed more batches) makes it an ordinary worker
 * again; a pull does not (a finished worker may read the final model).
 * Not checkpointed here: zps_consistency_restore clears it (shard 0's
 * checkpoint keeps it with the assignment, server/resume.c).
 */
void zps_consistency_finish(zps_consistency_t *st, uint32_t w);
bool zps_consistency_finished(const zps_consistency_t *st, uint32_t w);

/*
 * Removes up to `max` waiting pulls that the rules now allow, oldest first,
 * and writes their tokens. Returns how many. Call after every event.
 */
size_t zps_consistency_take_ready(zps_consistency_t *st, uint64_t *tokens, size_t max);

/* Removes every waiting pull (shutdown); returns how many were written, up to max. */
size_t zps_consistency_take_all(zps_consistency_t *st, uint64_t *tokens, size_t max);

/*
 * Removes the waiting pulls whose token `match` accepts (a closed
 * connection's, say), whether ready or not; returns how many were written,
 * up to max. `match` must not call back into st.
 */
size_t zps_consistency_take_if(zps_consistency_t *st, bool (*match)(uint64_t token, void *arg),
                               void *arg, uint64_t *tokens, size_t max);

/* Liveness: an evicted worker no longer holds back min_clock or BSP's count. */
void zps_consistency_evict(zps_consistency_t *st, uint32_t w);
/*
 * Re-admits an evicted worker at the current clock: pushed[w] becomes the
 * clock the others are at (BSP: v; SSP/ASP: min_clock of the live workers),
 * or stays where it was if that is later. Returns that clock.
 */
uint64_t zps_consistency_rejoin(zps_consistency_t *st, uint32_t w);

/* Read-only views for replies and statistics (0 or false for w >= W). */
uint64_t zps_consistency_version(const zps_consistency_t *st);
uint64_t zps_consistency_min_clock(const zps_consistency_t *st);
uint64_t zps_consistency_pushed(const zps_consistency_t *st, uint32_t w);
bool zps_consistency_live(const zps_consistency_t *st, uint32_t w);
uint64_t zps_consistency_dropped(const zps_consistency_t *st, uint32_t w);
uint64_t zps_consistency_discarded(const zps_consistency_t *st, uint32_t w);
size_t zps_consistency_pending(const zps_consistency_t *st);

/*
 * What a checkpoint records, into the caller's arrays of W entries: pushed[]
 * as the restored shard must expect it, live[] and dropped[]; returns v.
 * Under BSP a push buffered for the step in progress is not in the saved
 * parameters, so pushed[w] is clamped to v: its worker pushes it again.
 */
uint64_t zps_consistency_snapshot(const zps_consistency_t *st, uint64_t *pushed, bool *live,
                                  uint64_t *dropped);

/*
 * Restoring a checkpoint: sets v, pushed[], live[] and dropped[] (arrays of
 * W entries, copied) and marks the model initialised. Waiting pulls are kept;
 * buffered pushes are forgotten.
 */
void zps_consistency_restore(zps_consistency_t *st, uint64_t version, const uint64_t *pushed,
                             const bool *live, const uint64_t *dropped);

#endif
