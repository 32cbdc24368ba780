/*
 * mean.c - see mean.h.
 */
#include "mean.h"

#include "error.h"
#include "simd.h"

float zps_mean_denominator(const uint32_t *n, size_t k)
{
    uint64_t total = 0;
    for (size_t j = 0; j < k; j++)
        total += n[j];
    return (float)total;
}

ZPS_CLONES_AVX2 void zps_weighted_mean_term(float *restrict acc, const float *restrict g, float w,
                                            float denom, size_t j, size_t k, size_t len)
{
    ZPS_ASSERT(j < k);
    /* The operations of mean.h in its order; the division rides on the last
     * term's pass, so k gradients cost k passes. */
    if (k == 1) {
        for (size_t i = 0; i < len; i++)
            acc[i] = (w * g[i]) / denom;
    } else if (j == 0) {
        for (size_t i = 0; i < len; i++)
            acc[i] = w * g[i];
    } else if (j + 1 < k) {
        for (size_t i = 0; i < len; i++)
            acc[i] = acc[i] + w * g[i];
    } else {
        for (size_t i = 0; i < len; i++)
            acc[i] = (acc[i] + w * g[i]) / denom;
    }
}

void zps_weighted_mean_block(const float *const *grads, const uint32_t *n, size_t k, float denom,
                             size_t lo, size_t len, float *restrict out)
{
    ZPS_ASSERT(k >= 1);
    for (size_t j = 0; j < k; j++)
        zps_weighted_mean_term(out, grads[j] + lo, (float)n[j], denom, j, k, len);
}

void zps_weighted_mean(const float *const *grads, const uint32_t *n, size_t k, size_t len,
                       float *restrict out)
{
    ZPS_ASSERT(k >= 1);
    zps_weighted_mean_block(grads, n, k, zps_mean_denominator(n, k), 0, len, out);
}
