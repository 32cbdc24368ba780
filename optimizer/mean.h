/*
 * mean.h - the example-weighted mean of workers' gradients: the arithmetic
 * of a synchronous (BSP) step, shared by the shard and by `zps-worker
 * --local`, so that both sum the same float32 values in the same order.
 *
 * Pure computation over arrays; not here: when a step happens (the
 * consistency module) or where its gradients come from (the server's loop).
 *
 * Arithmetic contract (tests recompute it by hand):
 *   acc = n[0]*g[0];  acc = acc + n[j]*g[j] for j = 1..k-1;  out = acc / (n[0]+...+n[k-1])
 * every operation in float32, the weights and their sum converted to float32,
 * no fused multiply-add. Elements are independent, so computing the mean in
 * blocks gives bit for bit the result of one pass.
 */
#ifndef ZPS_MEAN_H
#define ZPS_MEAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The denominator of the mean: n[0] + ... + n[k-1], summed in 64 bits and
 * rounded once to float32.
 */
float zps_mean_denominator(const uint32_t *n, size_t k);

/*
 * Term j (0 <= j < k) of the mean, over len elements, for a caller that has
 * one gradient at a time (zps-worker --local): acc[len] is written by term
 * 0, updated by the terms between, and holds the mean after term k-1.
 * Calling it for j = 0..k-1 in order gives bit for bit zps_weighted_mean.
 * g: [len]; w: (float)n[j]; denom: zps_mean_denominator of all k sizes.
 */
void zps_weighted_mean_term(float *restrict acc, const float *restrict g, float w, float denom,
                            size_t j, size_t k, size_t len);

/*
 * Elements [lo, lo + len) of the mean of k >= 1 gradients, into out[len].
 * grads: k pointers to whole gradients (indexed from 0, read from lo);
 * n: [k] batch sizes; denom: zps_mean_denominator(n, k). out must not
 * overlap the gradients. Never fails, never allocates; any thread.
 */
void zps_weighted_mean_block(const float *const *grads, const uint32_t *n, size_t k, float denom,
                             size_t lo, size_t len, float *restrict out);

/* The whole mean: grads: k pointers to [len] floats; out: [len]. */
void zps_weighted_mean(const float *const *grads, const uint32_t *n, size_t k, size_t len,
                       float *restrict out);

/*
 * An upper bound on |mean| of k >= 1 gradients with g_max >= max|g_j[i]| over
 * every gradient j and element i,
 * float32 rounding included, in *out. Returns true when it and every
 * partial sum the mean computes (acc above) are at most ZPS_OPT_SAFE
 * (optimizer.h), so that the mean is finite; false otherwise (*out then
 * INFINITY). Pure; any thread.
 */
bool zps_mean_bound(const uint32_t *n, size_t k, double g_max, double *out);

#endif
