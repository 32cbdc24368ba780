/*
 * mean.c - see mean.h.
 */
#include "mean.h"

#include <float.h>
#include <math.h>

#include "error.h"
#include "optimizer.h"
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

bool zps_mean_bound(const uint32_t *n, size_t k, double g_max, double *out)
{
    ZPS_ASSERT(k >= 1);
    *out = INFINITY;
    double denom = (double)zps_mean_denominator(n, k);
    if (!(denom >= 1.0))
        return false;
    /* As bound.c's bounds: each float32 operation's result is at most
     * |exact| * (1 + 2^-24), plus half a subnormal on underflow. */
    const double r = 1.0 + 1e-6, a = (double)FLT_MIN;
    double acc = 0.0;
    for (size_t j = 0; j < k; j++) {
        double t = (double)(float)n[j] * g_max * r + a;
        acc = j == 0 ? t : (acc + t) * r + a;
        if (!(t <= ZPS_OPT_SAFE && acc <= ZPS_OPT_SAFE))
            return false;
    }
    double mean = acc / denom * r + a;
    if (!(mean <= ZPS_OPT_SAFE))
        return false;
    *out = mean;
    return true;
}
