/*
 * rng.c - splitmix64 and xoshiro256** as published by Vigna and Blackman,
 * written from their definitions; see rng.h.
 */
#include "rng.h"

#include <math.h>

uint64_t zps_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void zps_rng_seed(zps_rng_t *r, uint64_t seed, uint64_t stream)
{
    /* Mix the stream number through splitmix64 first so that neighbouring
     * (seed, stream) pairs do not produce overlapping splitmix sequences. */
    uint64_t mix = stream;
    uint64_t state = seed ^ zps_splitmix64(&mix);
    for (int i = 0; i < 4; i++)
        r->s[i] = zps_splitmix64(&state);
    /* xoshiro's only forbidden state is all zeros; splitmix64 cannot emit four
     * zeros in a row, but keep the invariant explicit. */
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
        r->s[0] = 1;
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t zps_rng_next(zps_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t zps_rng_below(zps_rng_t *r, uint64_t bound)
{
    /* Rejection sampling: draw from the largest multiple of `bound` that fits
     * in 2^64 so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do {
        x = zps_rng_next(r);
    } while (x >= limit);
    return x % bound;
}

double zps_rng_uniform(zps_rng_t *r)
{
    return (double)(zps_rng_next(r) >> 11) * 0x1.0p-53;
}

double zps_rng_normal(zps_rng_t *r)
{
    /* Box-Muller with u1 in (0, 1] so log() stays finite. */
    double u1 = 1.0 - zps_rng_uniform(r);
    double u2 = zps_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
