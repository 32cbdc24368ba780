/*
 * store.h - the parameters one shard holds, and the arithmetic of a
 * synchronous step.
 *
 * The store owns the shard's slice of the model (64-byte aligned), the
 * optimizer beside it, and a scratch vector for BSP's aggregated gradient.
 * It knows nothing of sockets or clocks: the server decides when a step
 * happens, the store computes it.
 */
#ifndef ZPS_STORE_H
#define ZPS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optimizer.h"
#include "shard.h"

typedef struct zps_store {
    bool initialized;
    uint64_t total;    /* N, elements in the whole model */
    zps_range_t range; /* the slice this shard owns */
    size_t len;        /* range length */
    float *params;     /* [len] */
    float *scratch;    /* [len] aggregated gradient of a BSP step */
    zps_optimizer_t *opt;
} zps_store_t;

/* An empty, uninitialised store. */
void zps_store_init(zps_store_t *s);
void zps_store_fini(zps_store_t *s);

/*
 * Sets the model: N = total, this shard's range, its initial values[len]
 * (copied), and an optimizer built from cfg. Returns 0, ZPS_EINVAL or
 * ZPS_ENOMEM; on failure the store is unchanged.
 */
int zps_store_set(zps_store_t *s, uint64_t total, zps_range_t range, const float *values,
                  const zps_opt_config_t *cfg);

/*
 * The example-weighted mean of k gradients, summed in the order given:
 *   acc = n[0]*g[0];  acc = acc + n[j]*g[j] for j = 1..k-1;  out = acc / (n[0]+...+n[k-1])
 * every operation in float32, the weights and their sum converted to float32.
 * grads: k pointers to [len] floats; n: [k] batch sizes (>= 1); out: [len].
 */
void zps_weighted_mean(const float *const *grads, const uint32_t *n, size_t k, size_t len,
                       float *restrict out);

/* One optimizer step with gradient grad[len] (any gradient: a worker's or a mean). */
void zps_store_apply(zps_store_t *s, const float *grad, double lr_scale);

#endif
