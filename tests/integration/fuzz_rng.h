/*
 * fuzz_rng.h - the seeded generator the fuzz tests draw their cases from
 * (xorshift64*), so that a printed seed reproduces a failing run.
 *
 * Header-only: each fuzz test is its own program with its own state. Seed it
 * by setting rng_state (never 0). Not here: the project's RNG (common/rng.h),
 * which the code under test uses; the tests keep their own.
 */
#ifndef ZPS_FUZZ_RNG_H
#define ZPS_FUZZ_RNG_H

#include <stdbool.h>
#include <stdint.h>

static uint64_t rng_state;

static inline uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* Uniform-ish in [0, n), n > 0. */
static inline uint32_t below(uint32_t n)
{
    return (uint32_t)(rnd() % n);
}

/* True with probability p. */
static inline bool chance(double p)
{
    return (double)(rnd() >> 11) * 0x1.0p-53 < p;
}

#endif
