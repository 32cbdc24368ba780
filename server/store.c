/*
 * store.c - see store.h.
 */
#include "store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checksum.h"
#include "error.h"
#include "mean.h"
#include "pool.h"

void zps_store_init(zps_store_t *s)
{
    memset(s, 0, sizeof(*s));
}

void zps_store_fini(zps_store_t *s)
{
    free(s->params);
    free(s->scratch);
    free(s->lane_scratch);
    free(s->lane_blk);
    zps_optimizer_free(s->opt);
    zps_store_init(s);
}

/* 64-byte aligned, never NULL for a zero length: a store with a model has params. */
static float *alloc_floats(size_t n)
{
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

int zps_store_set(zps_store_t *s, uint64_t total, zps_range_t range, const float *values,
                  const zps_opt_config_t *cfg)
{
    size_t len = (size_t)zps_range_len(range);
    if (range.hi > total || range.lo > range.hi || len > SIZE_MAX / sizeof(float) / 2)
        return ZPS_EINVAL;
    float *params = alloc_floats(len);
    float *scratch = alloc_floats(ZPS_STORE_BLOCK);
    zps_optimizer_t *opt = NULL;
    int rc = params && scratch ? zps_optimizer_new(cfg, len, &opt) : ZPS_ENOMEM;
    if (rc) {
        free(params);
        free(scratch);
        return rc;
    }
    if (len && values)
        memcpy(params, values, len * sizeof(float));
    zps_store_fini(s);
    s->total = total;
    s->range = range;
    s->len = len;
    s->params = params;
    s->scratch = scratch;
    s->opt = opt;
    /* Measured at the first step: a resumed shard writes its optimizer's
     * state between here and then. */
    s->bounds_known = false;
    return 0;
}

/* The store's bounds, measured (one read pass) when not known. */
static const zps_opt_bounds_t *known_bounds(zps_store_t *s)
{
    if (!s->bounds_known) {
        zps_optimizer_measure(s->opt, s->params, &s->bounds);
        s->bounds_known = true;
    }
    return &s->bounds;
}

/* Whether the bounds prove the step st with gradient bound g_max finite;
 * *next gets the bounds after it. */
static bool step_proven(zps_store_t *s, const zps_opt_step_t *st, double g_max,
                        zps_opt_bounds_t *next)
{
    /* Without a gradient bound nothing can be proven: no measuring then. */
    if (!(g_max <= ZPS_OPT_SAFE))
        return false;
    return zps_optimizer_bound(s->opt, st, known_bounds(s), g_max, next);
}

/* After a step taken: the bounds carried forward, or measured again at the
 * next step when the step was taken on the exact check. */
static void step_taken(zps_store_t *s, bool proven, const zps_opt_bounds_t *next)
{
    if (proven)
        s->bounds = *next;
    s->bounds_known = proven;
}

/* g_max: the mean's bound, or INFINITY when that cannot be proven finite. */
static double mean_max(const uint32_t *n, size_t k, double g_max)
{
    double m;
    return zps_mean_bound(n, k, g_max, &m) ? m : INFINITY;
}

/*
 * A step's pass cut into chunks for the process's helper threads (pool.h),
 * of whole blocks. Every element's arithmetic is the same whichever thread
 * does it, so the result is the same bit for bit.
 */
static size_t chunk_len(size_t len)
{
    return zps_pool_chunk(len * sizeof(float), ZPS_STORE_BLOCK * sizeof(float)) / sizeof(float);
}

typedef struct apply_job {
    zps_store_t *s;
    const zps_opt_step_t *st;
    const float *grad;
    size_t chunk;
} apply_job_t;

static void apply_chunk(void *arg, size_t i, unsigned lane)
{
    (void)lane;
    apply_job_t *j = arg;
    size_t lo = i * j->chunk;
    size_t len = zps_pool_piece(i, j->chunk, j->s->len);
    zps_optimizer_apply(j->s->opt, j->st, lo, len, j->s->params + lo, j->grad + lo);
}

int zps_store_apply(zps_store_t *s, const float *grad, double lr_scale, size_t *where)
{
    return zps_store_apply_bounded(s, grad, INFINITY, lr_scale, where);
}

int zps_store_apply_bounded(zps_store_t *s, const float *grad, double g_max, double lr_scale,
                            size_t *where)
{
    zps_opt_step_t st;
    zps_optimizer_begin(s->opt, lr_scale, &st);
    zps_opt_bounds_t next = {0};
    bool proven = step_proven(s, &st, g_max, &next);
    /* Unless the bounds prove it finite, every block is checked before the
     * first is changed: a refused step leaves the parameters, the
     * optimizer's state and its step count alone. */
    for (size_t lo = 0; !proven && lo < s->len; lo += ZPS_STORE_BLOCK) {
        size_t len = s->len - lo < ZPS_STORE_BLOCK ? s->len - lo : ZPS_STORE_BLOCK;
        if (!zps_optimizer_check(s->opt, &st, lo, len, s->params + lo, grad + lo)) {
            if (where)
                *where = lo;
            return ZPS_ENONFINITE;
        }
    }
    apply_job_t j = {.s = s, .st = &st, .grad = grad, .chunk = chunk_len(s->len)};
    zps_pool_run(zps_pool_chunks(s->len, j.chunk), apply_chunk, &j);
    zps_optimizer_end(s->opt);
    step_taken(s, proven, &next);
    return 0;
}

/*
 * The gradients a BSP step reads: k contiguous ones (flat, read at lo), or
 * k in segments (segs, their block's pointers gathered into blk).
 */
typedef struct grads_in {
    const float *const *flat;
    const zps_grad_segs_t *segs;
    const float **blk;
} grads_in_t;

/* The example-weighted mean of block [lo, lo + len) into out. */
static void mean_block(const grads_in_t *g, const uint32_t *n, size_t k, float denom, size_t lo,
                       size_t len, float *restrict out)
{
    if (!g->segs) {
        zps_weighted_mean_block(g->flat, n, k, denom, lo, len, out);
        return;
    }
    for (size_t j = 0; j < k; j++) {
        size_t sl = g->segs[j].seg_len;
        g->blk[j] = g->segs[j].seg[lo / sl] + lo % sl;
    }
    zps_weighted_mean_block(g->blk, n, k, denom, 0, len, out);
}

static int check_mean(const zps_store_t *s, const grads_in_t *g, const uint32_t *n, size_t k,
                      size_t *where)
{
    ZPS_ASSERT(k >= 1);
    const float denom = zps_mean_denominator(n, k);
    zps_opt_step_t st;
    zps_optimizer_begin(s->opt, 1.0, &st);
    for (size_t lo = 0; lo < s->len; lo += ZPS_STORE_BLOCK) {
        size_t len = s->len - lo < ZPS_STORE_BLOCK ? s->len - lo : ZPS_STORE_BLOCK;
        /* The mean itself may overflow (a huge gradient times a huge batch);
         * then so does the step, which is what is checked. */
        mean_block(g, n, k, denom, lo, len, s->scratch);
        if (!zps_optimizer_check(s->opt, &st, lo, len, s->params + lo, s->scratch)) {
            if (where)
                *where = lo;
            return ZPS_ENONFINITE;
        }
    }
    return 0;
}

static int check_mean_bounded(zps_store_t *s, const grads_in_t *g, const uint32_t *n, size_t k,
                              double g_max, size_t *where)
{
    ZPS_ASSERT(k >= 1);
    zps_opt_step_t st;
    zps_optimizer_begin(s->opt, 1.0, &st);
    zps_opt_bounds_t next = {0};
    if (step_proven(s, &st, mean_max(n, k, g_max), &next))
        return 0;
    return check_mean(s, g, n, k, where);
}

/* One BSP step over its chunks: each lane has its own scratch. */
typedef struct step_job {
    zps_store_t *s;
    const grads_in_t *g;
    const uint32_t *n;
    size_t k;
    float denom;
    const zps_opt_step_t *st;
    float *copy;
    size_t chunk;
    uint32_t crc[ZPS_POOL_CHUNKS_MAX]; /* of each chunk's copy, from 0 */
} step_job_t;

static void step_chunk(void *arg, size_t i, unsigned lane)
{
    step_job_t *j = arg;
    zps_store_t *s = j->s;
    /* Lane 0 (the caller) has the store's scratch and the caller's
     * pointers; a helper has its own of both. */
    grads_in_t g = *j->g;
    float *scratch = s->scratch;
    if (lane > 0) {
        scratch = s->lane_scratch + (size_t)(lane - 1) * ZPS_STORE_BLOCK;
        if (g.segs)
            g.blk = s->lane_blk + (size_t)(lane - 1) * j->k;
    }
    size_t end = i * j->chunk + zps_pool_piece(i, j->chunk, s->len);
    uint32_t crc = 0;
    for (size_t lo = i * j->chunk; lo < end; lo += ZPS_STORE_BLOCK) {
        size_t len = end - lo < ZPS_STORE_BLOCK ? end - lo : ZPS_STORE_BLOCK;
        mean_block(&g, j->n, j->k, j->denom, lo, len, scratch);
        zps_optimizer_apply(s->opt, j->st, lo, len, s->params + lo, scratch);
        if (j->copy)
            crc = zps_crc32c_copy(crc, j->copy + lo, s->params + lo, len * sizeof(float));
    }
    j->crc[i] = crc;
}

/*
 * The helpers' scratch for a step of k gradients: one block each, and k
 * pointers each for gradients in segments, for as many helpers as the pool
 * can have. False when it cannot be had; the step then runs on the calling
 * thread alone.
 */
static bool lanes_ready(zps_store_t *s, size_t k)
{
    const size_t helpers = ZPS_POOL_LANES_MAX - 1;
    if (zps_pool_lanes() < 2)
        return false;
    if (!s->lane_scratch) {
        s->lane_scratch = alloc_floats(helpers * ZPS_STORE_BLOCK);
        if (!s->lane_scratch)
            return false;
    }
    if (s->lane_blk_k < k) {
        const float **blk = realloc(s->lane_blk, helpers * k * sizeof(*blk));
        if (!blk)
            return false;
        s->lane_blk = blk;
        s->lane_blk_k = k;
    }
    return true;
}

static uint32_t step_mean(zps_store_t *s, const grads_in_t *g, const uint32_t *n, size_t k,
                          double g_max, float *restrict copy)
{
    ZPS_ASSERT(k >= 1);
    zps_opt_step_t st;
    zps_optimizer_begin(s->opt, 1.0, &st);
    /* With no gradient bounds the store's are simply dropped (measured again
     * at the next step), not measured here for nothing. */
    zps_opt_bounds_t next = {0};
    bool proven = step_proven(s, &st, mean_max(n, k, g_max), &next);
    step_job_t j = {.s = s,
                    .g = g,
                    .n = n,
                    .k = k,
                    .denom = zps_mean_denominator(n, k),
                    .st = &st,
                    .copy = copy,
                    .chunk = chunk_len(s->len)};
    size_t chunks = zps_pool_chunks(s->len, j.chunk);
    if (chunks > 1 && !lanes_ready(s, k))
        j.chunk = s->len, chunks = 1;
    zps_pool_run(chunks, step_chunk, &j);
    /* Each block of the mean is computed, applied and copied while it is in
     * cache; the copy's checksum is joined from its chunks'. */
    uint32_t crc = 0;
    for (size_t i = 0; i < chunks; i++)
        crc = zps_crc32c_combine(crc, j.crc[i], zps_pool_piece(i, j.chunk, s->len) * sizeof(float));
    zps_optimizer_end(s->opt);
    step_taken(s, proven, &next);
    return crc;
}

int zps_store_check_mean(const zps_store_t *s, const float *const *grads, const uint32_t *n,
                         size_t k, size_t *where)
{
    grads_in_t g = {.flat = grads};
    return check_mean(s, &g, n, k, where);
}

int zps_store_check_mean_bounded(zps_store_t *s, const float *const *grads, const uint32_t *n,
                                 size_t k, double g_max, size_t *where)
{
    grads_in_t g = {.flat = grads};
    return check_mean_bounded(s, &g, n, k, g_max, where);
}

uint32_t zps_store_step_mean(zps_store_t *s, const float *const *grads, const uint32_t *n, size_t k,
                             float *restrict copy)
{
    return zps_store_step_mean_bounded(s, grads, n, k, INFINITY, copy);
}

uint32_t zps_store_step_mean_bounded(zps_store_t *s, const float *const *grads, const uint32_t *n,
                                     size_t k, double g_max, float *restrict copy)
{
    grads_in_t g = {.flat = grads};
    return step_mean(s, &g, n, k, g_max, copy);
}

int zps_store_check_mean_segs(zps_store_t *s, const zps_grad_segs_t *grads, const uint32_t *n,
                              size_t k, double g_max, const float **blk, size_t *where)
{
    grads_in_t g = {.segs = grads, .blk = blk};
    return check_mean_bounded(s, &g, n, k, g_max, where);
}

uint32_t zps_store_step_mean_segs(zps_store_t *s, const zps_grad_segs_t *grads, const uint32_t *n,
                                  size_t k, double g_max, const float **blk, float *restrict copy)
{
    grads_in_t g = {.segs = grads, .blk = blk};
    return step_mean(s, &g, n, k, g_max, copy);
}
