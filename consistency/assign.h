/*
 * assign.h - shared data assignment: one epoch's batches handed out, in the
 * epoch's order, to whichever worker asks next, each exactly once.
 *
 * With a fixed assignment (worker/data.h's partition rule) worker w owns
 * 1/W of every epoch, so a run under ASP lasts as long as its slowest worker
 * and the fast ones idle at its end. A shared assignment hands the batches
 * out on request instead: a worker four times faster takes about four times
 * as many. This module is that assignment as a pure state machine, for the
 * shard that holds it (shard 0) to drive; it does no I/O and knows nothing
 * of sockets, parameters or time.
 *
 * Terms:
 *   N, b, E       the plan: training examples, examples per batch, epochs
 *   B             batches per epoch, ceil(N / b); batch j of an epoch holds
 *                 its order's positions [j*b, min((j+1)*b, N))
 *   g             a batch's number in the run, e*B + j, in [0, E*B)
 *   lease         a batch handed to one worker and not yet completed
 *   complete      the worker's push of that batch was applied: never handed
 *                 out again
 *
 * The rules:
 *   - Batches are handed out in the order of g, except that a lease given
 *     back (its worker was evicted, restarted, or no longer has it) goes to
 *     the front of the queue, before any batch not yet handed out.
 *   - A worker holds at most ZPS_ASSIGN_MAX_HELD leases: it asks for a few
 *     ahead, so that a lease never costs it a round trip of its own.
 *   - Every request of a worker says which leases it still has. A lease the
 *     shard has for it that the worker does not name is given back (a lost
 *     reply, a restarted worker); one the worker names that the shard does
 *     not have for it is not its (a shard resumed from an earlier
 *     checkpoint), and the answer, the worker's leases as the shard has
 *     them, leaves it out. So a restarted worker loses nothing and a
 *     resumed shard hands nothing out twice.
 *   - Each batch is completed at most once: a completion the shard has
 *     already counted (a retried push) changes nothing; one of a batch the
 *     worker does not hold is refused.
 *
 * Memory: the leases (W * ZPS_ASSIGN_MAX_HELD entries, and as many queued
 * again), and one bit per batch of the run, E * B / 8 bytes (the audit:
 * which batches were completed; 1.4 KB for six epochs of Fashion-MNIST at
 * b = 32).
 *
 * The audit: per epoch, the examples and batches completed. An epoch whose
 * batches are all completed counts N examples, each once.
 *
 * Not thread-safe: one shard's loop drives it. Every `why` may be NULL.
 */
#ifndef ZPS_ASSIGN_H
#define ZPS_ASSIGN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Leases one worker may hold at once. */
#define ZPS_ASSIGN_MAX_HELD 8
/*
 * The largest run a plan may describe: E * B batches. Any worker may state
 * the plan, so this bounds what it can make shard 0 allocate: 2^27 batches,
 * 16 MiB of completion bits (a hundred epochs of 1.3 million examples at
 * b = 1).
 */
#define ZPS_ASSIGN_MAX_BATCHES (UINT64_C(1) << 27)

typedef struct zps_assign zps_assign_t;

/* The plan every worker of the run states. */
typedef struct zps_assign_plan {
    uint64_t examples; /* N >= 1 */
    uint32_t batch;    /* b >= 1 */
    uint32_t epochs;   /* E >= 1 */
} zps_assign_plan_t;

/* A new assignment for W >= 1 workers, with no plan yet. 0, or ZPS_EINVAL / ZPS_ENOMEM. */
int zps_assign_new(uint32_t workers, zps_assign_t **out);
void zps_assign_free(zps_assign_t *a); /* NULL is a no-op */

/*
 * The first call sets the plan (ZPS_EINVAL for a zero or too large one;
 * ZPS_ENOMEM); a later one must state the same plan, else ZPS_ECONFIG with
 * both in why: workers of one run share their data, their batch and their
 * length.
 */
int zps_assign_set_plan(zps_assign_t *a, const zps_assign_plan_t *plan, char *why, size_t why_size);
bool zps_assign_has_plan(const zps_assign_t *a);
/* B, and E * B (0 without a plan). */
uint64_t zps_assign_batches_per_epoch(const zps_assign_t *a);
uint64_t zps_assign_batches(const zps_assign_t *a);
/* The examples of batch g (0 when g is not a batch of the plan). */
uint32_t zps_assign_batch_size(const zps_assign_t *a, uint64_t g);

/*
 * Worker w's push of batch g, with `examples` examples, was applied.
 * Returns 0 when it completes the lease (*first true) or g was completed
 * before (a retry: *first false, nothing changes); ZPS_EINVAL, with the
 * reason in why, when g is no batch of the plan, the count is not its size,
 * or w does not hold g (it is another worker's, or was handed out again).
 * An error changes nothing.
 */
int zps_assign_complete(zps_assign_t *a, uint32_t w, uint64_t g, uint32_t examples, bool *first,
                        char *why, size_t why_size);

/*
 * Worker w, which still has the leases have[0..nhave), asks to hold `want`
 * (at most ZPS_ASSIGN_MAX_HELD). Reconciles (the rules above), hands out
 * batches until it holds `want` or none is left, and writes its leases as
 * the shard now has them, oldest first, to out[ZPS_ASSIGN_MAX_HELD]:
 * returns how many. *exhausted: no batch is left to hand out to anyone
 * (every one is leased or complete). Without a plan it hands out nothing.
 */
size_t zps_assign_lease(zps_assign_t *a, uint32_t w, const uint64_t *have, size_t nhave,
                        uint32_t want, uint64_t *out, bool *exhausted);

/* Worker w's leases go back to the front of the queue (it was evicted). */
void zps_assign_release(zps_assign_t *a, uint32_t w);

/* Read-only views, for STATS and the audit. */
uint64_t zps_assign_next(const zps_assign_t *a); /* batches never handed out start here */
size_t zps_assign_queued(const zps_assign_t *a); /* leases given back, waiting */
size_t zps_assign_held(const zps_assign_t *a, uint32_t w);
/* Worker w's leases as the shard has them, oldest first, into out[ZPS_ASSIGN_MAX_HELD]. */
size_t zps_assign_leases_of(const zps_assign_t *a, uint32_t w, uint64_t *out);
uint64_t zps_assign_completed(const zps_assign_t *a); /* batches completed, all epochs */
/* Examples and batches completed of epoch e (0 for e >= E). */
uint64_t zps_assign_epoch_examples(const zps_assign_t *a, uint32_t e);
uint64_t zps_assign_epoch_batches(const zps_assign_t *a, uint32_t e);
/* Whether batch g was completed. */
bool zps_assign_is_complete(const zps_assign_t *a, uint64_t g);

/*
 * What a checkpoint records: the plan, the cursor, the leases given back
 * (in queue order), every worker's leases, and the completion bits. The
 * per-epoch counts follow from the bits and the plan. Arrays are owned by
 * the struct (zps_assign_state_fini frees them).
 */
typedef struct zps_assign_state {
    zps_assign_plan_t plan; /* examples 0: no plan (then nothing else is set) */
    uint64_t next;
    uint64_t *queue; /* [nqueue] */
    size_t nqueue;
    uint32_t workers;
    uint64_t *held;  /* [workers][ZPS_ASSIGN_MAX_HELD] */
    uint32_t *nheld; /* [workers] */
    uint8_t *done;   /* [zps_assign_done_bytes(batches)] bit g % 8 of byte g / 8 */
} zps_assign_state_t;

/* Bytes of the completion bits of a run of `batches` batches. */
uint64_t zps_assign_done_bytes(uint64_t batches);

/* A copy of a's state into *out (0, or ZPS_ENOMEM with *out empty). */
int zps_assign_snapshot(const zps_assign_t *a, zps_assign_state_t *out);
void zps_assign_state_fini(zps_assign_state_t *s);

/*
 * Replaces a's state, which must have no plan yet, by *s (copied), after
 * checking that it is one this module could have reached: a plan as
 * zps_assign_set_plan takes, the same worker count, the cursor within the
 * run, every lease below the cursor, not complete and held once (by one
 * worker, or queued), at most ZPS_ASSIGN_MAX_HELD per worker, no batch past
 * the cursor complete, and no bit set past the last batch. Returns 0, or
 * ZPS_ECORRUPT (ZPS_ENOMEM) with the reason in why; an error changes nothing.
 */
int zps_assign_restore(zps_assign_t *a, const zps_assign_state_t *s, char *why, size_t why_size);

#endif
