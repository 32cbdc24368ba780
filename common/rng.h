/*
 * rng.h - the worker's seeded pseudo-random numbers: splitmix64 for seeding,
 * xoshiro256** for streams, unbiased bounded integers and normal deviates.
 *
 * Everything the trainer randomises (the epoch permutations, He
 * initialisation, synthetic data) draws from these functions, so a run is a
 * pure function of its --seed on every machine. Not for cryptography.
 *
 * A zps_rng_t is plain state owned by the caller; it is not thread-safe, use
 * one per thread. Nothing here allocates, blocks or fails.
 *
 * Not here: what is drawn from it -- the data order (worker/data.h),
 * initialisation (worker/model.h), straggler delays (worker/straggler.h).
 */
#ifndef ZPS_RNG_H
#define ZPS_RNG_H

#include <stdint.h>

typedef struct zps_rng {
    uint64_t s[4];
} zps_rng_t;

/* One step of splitmix64: advances *state and returns the next output. */
uint64_t zps_splitmix64(uint64_t *state);

/*
 * Seeds a stream from (seed, stream): different stream numbers give
 * independent-looking sequences for the same seed (for example one per epoch).
 */
void zps_rng_seed(zps_rng_t *r, uint64_t seed, uint64_t stream);

/* Next 64 random bits (xoshiro256**). */
uint64_t zps_rng_next(zps_rng_t *r);

/* Uniform integer in [0, bound), without modulo bias; bound >= 1. */
uint64_t zps_rng_below(zps_rng_t *r, uint64_t bound);

/* Uniform double in [0, 1) with 53 random bits. */
double zps_rng_uniform(zps_rng_t *r);

/* Standard normal deviate N(0, 1) (Box-Muller, one value per call). */
double zps_rng_normal(zps_rng_t *r);

#endif
