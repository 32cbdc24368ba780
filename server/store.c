/*
 * store.c - see store.h.
 */
#include "store.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

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
    float *scratch = alloc_floats(len);
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

void zps_weighted_mean(const float *const *grads, const uint32_t *n, size_t k, size_t len,
                       float *restrict out)
{
    ZPS_ASSERT(k >= 1);
    uint64_t total = 0;
    for (size_t j = 0; j < k; j++)
        total += n[j];
    const float denom = (float)total;
    const float w0 = (float)n[0];
    const float *restrict g0 = grads[0];
    /* The same operations in the same order as the header states; the
     * division rides on the last term's pass, so k gradients cost k passes. */
    if (k == 1) {
        for (size_t i = 0; i < len; i++)
            out[i] = (w0 * g0[i]) / denom;
        return;
    }
    for (size_t i = 0; i < len; i++)
        out[i] = w0 * g0[i];
    for (size_t j = 1; j + 1 < k; j++) {
        const float wj = (float)n[j];
        const float *restrict gj = grads[j];
        for (size_t i = 0; i < len; i++)
            out[i] = out[i] + wj * gj[i];
    }
    const float wl = (float)n[k - 1];
    const float *restrict gl = grads[k - 1];
    for (size_t i = 0; i < len; i++)
        out[i] = (out[i] + wl * gl[i]) / denom;
}

void zps_store_apply(zps_store_t *s, const float *grad, double lr_scale)
{
    zps_optimizer_step(s->opt, s->params, grad, lr_scale);
}
