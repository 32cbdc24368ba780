/*
 * store.h - the parameters one shard holds, and the arithmetic of a
 * synchronous step.
 *
 * The store owns the shard's slice of the model (64-byte aligned), the
 * optimizer beside it, and one block of scratch for BSP's aggregated gradient.
 * It knows nothing of sockets or clocks: the server decides when a step
 * happens, the store computes it, on the calling thread (the loop's) with
 * the process's helper threads (pool.h) when the shard is large enough to
 * cut into chunks; the call returns when the step is done.
 *
 * Not here: whether the model is initialised (the consistency module keeps
 * that one record; an empty store has params == NULL), the optimizer's
 * formulas (optimizer/optimizer.h), the mean's arithmetic (optimizer/mean.h).
 * Not thread-safe; no call blocks, and only zps_store_set allocates, but
 * for the helpers' scratch, taken at the first step that uses them (a step
 * runs on the calling thread alone if it cannot be had).
 */
#ifndef ZPS_STORE_H
#define ZPS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mean.h"
#include "optimizer.h"
#include "pool.h"
#include "shard.h"

/*
 * Elements per block of a BSP step: the mean of a block is computed, applied
 * and copied while it is in the first-level cache (8 KiB of floats), so a
 * step reads each gradient and the parameters once and writes them once.
 */
#define ZPS_STORE_BLOCK 2048

/*
 * A step over at least 2 MiB of parameters is cut into chunks of whole
 * blocks that the helper threads take in turn (pool.h's rule).
 */
#define ZPS_STORE_CHUNK_MIN (ZPS_POOL_CHUNK_MIN / sizeof(float))

typedef struct zps_store {
    uint64_t total;    /* N, elements in the whole model */
    zps_range_t range; /* the slice this shard owns */
    size_t len;        /* range length */
    float *params;     /* [len] */
    float *scratch;    /* [ZPS_STORE_BLOCK] one block of a BSP step's mean */
    /* The helpers' own: a block each, and lane_blk_k pointers each. */
    float *lane_scratch;
    const float **lane_blk;
    size_t lane_blk_k;
    zps_optimizer_t *opt;
    /* Upper bounds on max|x| of the parameters and each optimizer state
     * array (optimizer.h, zps_optimizer_bound), measured before the first
     * step after zps_store_set (a checkpoint's state is written in between)
     * and carried forward by every step taken. */
    zps_opt_bounds_t bounds;
    bool bounds_known;
} zps_store_t;

/* An empty store (no model, params NULL). */
void zps_store_init(zps_store_t *s);
/* Frees what the store holds and leaves it empty. */
void zps_store_fini(zps_store_t *s);

/*
 * Sets the model: N = total, this shard's range, its initial values[len]
 * (copied), and an optimizer built from cfg. values may be NULL: the caller
 * then writes the len parameters (s->params) before anything reads them,
 * as INIT does straight from a payload's frames. Returns 0, ZPS_EINVAL or
 * ZPS_ENOMEM; on failure the store is unchanged.
 */
int zps_store_set(zps_store_t *s, uint64_t total, zps_range_t range, const float *values,
                  const zps_opt_config_t *cfg);

/*
 * One optimizer step with gradient grad[len] (any gradient: a worker's or a
 * mean), at lr_scale times the scheduled learning rate. Needs a model.
 * Returns 0, or ZPS_ENONFINITE when the step would make a parameter or an
 * optimizer state value non-finite: then nothing changed, and *where (when
 * not NULL) gets the first element of the block, relative to range.lo,
 * where it would have. The check reads the arrays once before the step.
 */
int zps_store_apply(zps_store_t *s, const float *grad, double lr_scale, size_t *where);

/*
 * As zps_store_apply, given g_max >= max|grad[i]| (INFINITY when unknown;
 * the server has it from the payload's receive scan, zps_message_t's
 * abs_max). When the store's bounds prove the step finite
 * (zps_optimizer_bound) the check's read pass is skipped; otherwise the step
 * is checked exactly, and if taken the arrays are measured afresh. Same
 * result and errors as zps_store_apply. zps_store_apply is this with g_max
 * INFINITY.
 */
int zps_store_apply_bounded(zps_store_t *s, const float *grad, double g_max, double lr_scale,
                            size_t *where);

/*
 * BSP: whether zps_store_step_mean with these gradients would leave every
 * parameter and optimizer state value finite, the mean included. Returns 0,
 * or ZPS_ENONFINITE with *where as zps_store_apply's. Changes nothing but
 * the scratch block; reads every array once.
 */
int zps_store_check_mean(const zps_store_t *s, const float *const *grads, const uint32_t *n,
                         size_t k, size_t *where);

/*
 * BSP's step: one optimizer step with the example-weighted mean of the k
 * gradients (mean.h's arithmetic), computed and applied block by
 * block in one pass over memory. When `copy` is not NULL the new parameters
 * are also copied to copy[len] in that pass and their CRC32C is returned
 * (the payload of the pulls that follow); otherwise 0 is returned. Bit for
 * bit the result of zps_weighted_mean then zps_store_apply. The caller has
 * had the same step accepted by zps_store_check_mean.
 */
uint32_t zps_store_step_mean(zps_store_t *s, const float *const *grads, const uint32_t *n, size_t k,
                             float *restrict copy);

/*
 * The same pair with g_max >= max|grads[j][i]| over every gradient j and
 * element i (INFINITY when unknown). zps_store_check_mean_bounded returns 0 at once when the
 * store's bounds prove the step finite, the mean's float32 sum and division included; otherwise it
 * is zps_store_check_mean (and it may measure the store's arrays once, after zps_store_set).
 * zps_store_step_mean_bounded carries the bounds forward, or measures the arrays after the step
 * when they cannot be. The caller has had the same step accepted by zps_store_check_mean_bounded or
 * zps_store_check_mean.
 */
int zps_store_check_mean_bounded(zps_store_t *s, const float *const *grads, const uint32_t *n,
                                 size_t k, double g_max, size_t *where);
uint32_t zps_store_step_mean_bounded(zps_store_t *s, const float *const *grads, const uint32_t *n,
                                     size_t k, double g_max, float *restrict copy);

/*
 * A gradient in segments of seg_len floats, as a payload of several frames
 * arrives (wire.h): element i is seg[i / seg_len][i % seg_len]. seg_len is
 * a multiple of ZPS_STORE_BLOCK, so that no block spans two segments, or
 * at least the store's length (one segment: a contiguous gradient).
 */
typedef struct zps_grad_segs {
    const float *const *seg;
    size_t seg_len;
} zps_grad_segs_t;

/*
 * zps_store_check_mean_bounded and zps_store_step_mean_bounded for k
 * gradients in segments, read where they are (no copy); blk is the
 * caller's scratch of k pointers. The same arithmetic, bit for bit.
 */
int zps_store_check_mean_segs(zps_store_t *s, const zps_grad_segs_t *grads, const uint32_t *n,
                              size_t k, double g_max, const float **blk, size_t *where);
uint32_t zps_store_step_mean_segs(zps_store_t *s, const zps_grad_segs_t *grads, const uint32_t *n,
                                  size_t k, double g_max, const float **blk, float *restrict copy);

#endif
