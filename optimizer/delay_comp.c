/*
 * delay_comp.c - delay-compensated gradients; see delay_comp.h.
 */
#include "delay_comp.h"

void zps_delay_compensate(float *out, const float *g, const float *w_now, const float *w_pulled,
                          float lambda, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float d = w_now[i] - w_pulled[i];
        float q = g[i] * g[i];
        q = q * d;
        q = lambda * q;
        out[i] = g[i] + q;
    }
}
