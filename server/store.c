/*
 * store.c - see store.h.
 */
#include "store.h"

#include <stdlib.h>
#include <string.h>

#include "checksum.h"
#include "error.h"
#include "simd.h"

void zps_store_init(zps_store_t *s)
{
    memset(s, 0, sizeof(*s));
}

void zps_store_fini(zps_store_t *s)
{
    free(s->params);
    free(s->scratch);
    zps_optimizer_free(s->opt);
    zps_store_init(s);
}

/* 64-byte aligned, never NULL for a zero length so "initialised" is unambiguous. */
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
    if (len)
        memcpy(params, values, len * sizeof(float));
    zps_store_fini(s);
    s->initialized = true;
    s->total = total;
    s->range = range;
    s->len = len;
    s->params = params;
    s->scratch = scratch;
    s->opt = opt;
    return 0;
}

/* The mean over elements [lo, lo + len) of the gradients, into out[len]. */
ZPS_CLONES_AVX2 static void mean_range(const float *const *grads, const uint32_t *n, size_t k,
                                       float denom, size_t lo, size_t len, float *restrict out)
{
    const float w0 = (float)n[0];
    const float *restrict g0 = grads[0] + lo;
    /* The same operations in the same order as store.h states; the division
     * rides on the last term's pass, so k gradients cost k passes. */
    if (k == 1) {
        for (size_t i = 0; i < len; i++)
            out[i] = (w0 * g0[i]) / denom;
        return;
    }
    for (size_t i = 0; i < len; i++)
        out[i] = w0 * g0[i];
    for (size_t j = 1; j + 1 < k; j++) {
        const float wj = (float)n[j];
        const float *restrict gj = grads[j] + lo;
        for (size_t i = 0; i < len; i++)
            out[i] = out[i] + wj * gj[i];
    }
    const float wl = (float)n[k - 1];
    const float *restrict gl = grads[k - 1] + lo;
    for (size_t i = 0; i < len; i++)
        out[i] = (out[i] + wl * gl[i]) / denom;
}

static float mean_denominator(const uint32_t *n, size_t k)
{
    uint64_t total = 0;
    for (size_t j = 0; j < k; j++)
        total += n[j];
    return (float)total;
}

void zps_weighted_mean(const float *const *grads, const uint32_t *n, size_t k, size_t len,
                       float *restrict out)
{
    ZPS_ASSERT(k >= 1);
    mean_range(grads, n, k, mean_denominator(n, k), 0, len, out);
}

void zps_store_apply(zps_store_t *s, const float *grad, double lr_scale)
{
    zps_optimizer_step(s->opt, s->params, grad, lr_scale);
}

uint32_t zps_store_step_mean(zps_store_t *s, const float *const *grads, const uint32_t *n, size_t k,
                             float *restrict copy)
{
    ZPS_ASSERT(k >= 1);
    const float denom = mean_denominator(n, k);
    zps_opt_step_t st;
    zps_optimizer_begin(s->opt, 1.0, &st);
    uint32_t crc = 0;
    for (size_t lo = 0; lo < s->len; lo += ZPS_STORE_BLOCK) {
        size_t len = s->len - lo < ZPS_STORE_BLOCK ? s->len - lo : ZPS_STORE_BLOCK;
        mean_range(grads, n, k, denom, lo, len, s->scratch);
        zps_optimizer_apply(s->opt, &st, lo, len, s->params + lo, s->scratch);
        if (copy)
            crc = zps_crc32c_copy(crc, copy + lo, s->params + lo, len * sizeof(float));
    }
    zps_optimizer_end(s->opt);
    return crc;
}
