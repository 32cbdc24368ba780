/*
 * delay_comp.h - delay compensation for gradients applied on arrival: the
 * update rule of DC-ASGD (Zheng et al., "Asynchronous Stochastic Gradient
 * Descent with Delay Compensation", ICML 2017), with a constant lambda.
 *
 * A worker computes g = grad f(w_pulled) on the parameters it pulled; by the
 * time the push arrives the shard holds w_now. The first-order Taylor
 * expansion of the gradient at w_now, with the Hessian approximated by
 * lambda times the outer product g g^T cut to its diagonal, gives
 *
 *     g_dc[i] = g[i] + lambda * g[i] * g[i] * (w_now[i] - w_pulled[i])
 *
 * which the optimizer then applies in place of g. lambda = 0 is plain ASGD.
 * Every operation is float32 in this order, without fused multiply-add:
 * d = w_now - w_pulled; q = g * g; q = q * d; q = lambda * q; out = g + q.
 * Elements are independent, so any split into blocks gives the same bits.
 *
 * Pure arithmetic; not here: keeping w_pulled per worker (the server's reply
 * path copies what it sends each worker, server/handlers.c).
 */
#ifndef ZPS_DELAY_COMP_H
#define ZPS_DELAY_COMP_H

#include <stddef.h>

/* Largest lambda a configuration may name (zps-server --delay-compensation). */
#define ZPS_DELAY_COMP_MAX 1e6

/* out[i] = g[i] + lambda * g[i]^2 * (w_now[i] - w_pulled[i]) for i < n; out may be g. */
void zps_delay_compensate(float *out, const float *g, const float *w_now, const float *w_pulled,
                          float lambda, size_t n);

#endif
