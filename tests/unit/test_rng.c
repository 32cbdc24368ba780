/*
 * test_rng.c - the seeded random numbers (common/rng.h): exact outputs of
 * splitmix64 and xoshiro256** against values computed from the published
 * definitions outside this code, determinism per (seed, stream), independence
 * of streams, and the distributions of the bounded, uniform and normal draws
 * within tolerances the test computes from the sample size.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rng.h"

#define N_SAMPLES 200000

/* splitmix64 from state 0: the reference sequence of its author's C code. */
static void test_splitmix64_reference(void **state)
{
    (void)state;
    uint64_t s = 0;
    assert_true(zps_splitmix64(&s) == 0xe220a8397b1dcdafull);
    assert_true(s == 0x9e3779b97f4a7c15ull);
    assert_true(zps_splitmix64(&s) == 0x6e789e6aa1b965f4ull);
    assert_true(zps_splitmix64(&s) == 0x06c45d188009454full);
}

/*
 * zps_rng_seed(seed, stream) is: state = seed ^ splitmix64(stream), four
 * splitmix64 outputs of state; then xoshiro256**. The expected words were
 * computed from those definitions in Python (arbitrary-precision integers).
 */
static void test_xoshiro_reference(void **state)
{
    (void)state;
    zps_rng_t r;
    zps_rng_seed(&r, 1, 0);
    assert_true(r.s[0] == 0x08b4fda8c892b50eull);
    assert_true(r.s[1] == 0xe89e8dc54072ebd9ull);
    assert_true(r.s[2] == 0x26a90e7c423166a6ull);
    assert_true(r.s[3] == 0x5ba208d6dc82d245ull);
    assert_true(zps_rng_next(&r) == 0xef75d62a19ba94edull);
    assert_true(zps_rng_next(&r) == 0x8e9490536375f270ull);
    assert_true(zps_rng_next(&r) == 0xc05630b1c614195dull);

    zps_rng_seed(&r, 1, 1);
    assert_true(zps_rng_next(&r) == 0x309714ec38d33b4cull);
    assert_true(zps_rng_next(&r) == 0x1bc11473d28024a0ull);
    assert_true(zps_rng_next(&r) == 0xaa4f7bbef2a5a194ull);

    zps_rng_seed(&r, 42, 7);
    assert_true(zps_rng_next(&r) == 0x24bfb39aeb008c15ull);
    assert_true(zps_rng_next(&r) == 0xd858489e7fc02496ull);
    assert_true(zps_rng_next(&r) == 0x3deebe24036964f3ull);

    /* uniform: the top 53 bits of the next output, times 2^-53. */
    zps_rng_seed(&r, 1, 0);
    assert_true(zps_rng_uniform(&r) == (double)(0xef75d62a19ba94edull >> 11) * 0x1.0p-53);
}

static void test_determinism(void **state)
{
    (void)state;
    zps_rng_t a, b;
    zps_rng_seed(&a, 12345, 3);
    zps_rng_seed(&b, 12345, 3);
    for (int i = 0; i < 10000; i++) {
        assert_true(zps_rng_next(&a) == zps_rng_next(&b));
        assert_true(zps_rng_below(&a, 1000) == zps_rng_below(&b, 1000));
        assert_true(zps_rng_uniform(&a) == zps_rng_uniform(&b));
        assert_true(zps_rng_normal(&a) == zps_rng_normal(&b));
    }
    /* A copy of the state continues the same sequence. */
    zps_rng_t c = a;
    for (int i = 0; i < 100; i++)
        assert_true(zps_rng_next(&a) == zps_rng_next(&c));
}

/*
 * Neighbouring seeds and streams give unrelated sequences: no shared output
 * in the first 1000 draws (for 64-bit outputs a chance collision has
 * probability ~1e-13), and uniforms whose correlation is within 5 standard
 * errors (1/sqrt(n)) of 0.
 */
static void test_stream_independence(void **state)
{
    (void)state;
    const uint64_t pairs[][2][2] = {
        {{7, 0}, {7, 1}},
        {{7, 0}, {8, 0}},
        {{0, 0}, {0, 1}},
        {{1, 2}, {2, 1}},
    };
    for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
        zps_rng_t a, b;
        zps_rng_seed(&a, pairs[p][0][0], pairs[p][0][1]);
        zps_rng_seed(&b, pairs[p][1][0], pairs[p][1][1]);
        enum { K = 1000 };
        static uint64_t va[K], vb[K];
        for (int i = 0; i < K; i++) {
            va[i] = zps_rng_next(&a);
            vb[i] = zps_rng_next(&b);
        }
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                assert_false(va[i] == vb[j]);

        double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
        const int n = N_SAMPLES;
        for (int i = 0; i < n; i++) {
            double x = zps_rng_uniform(&a), y = zps_rng_uniform(&b);
            sx += x;
            sy += y;
            sxx += x * x;
            syy += y * y;
            sxy += x * y;
        }
        double cov = sxy / n - (sx / n) * (sy / n);
        double corr = cov / sqrt((sxx / n - (sx / n) * (sx / n)) * (syy / n - (sy / n) * (sy / n)));
        assert_true(fabs(corr) < 5.0 / sqrt((double)n));
    }
}

/* Uniform [0, 1): the range, mean 1/2 and variance 1/12 within 5 standard errors. */
static void test_uniform_distribution(void **state)
{
    (void)state;
    zps_rng_t r;
    zps_rng_seed(&r, 2026, 0);
    const int n = N_SAMPLES;
    double sum = 0, sumsq = 0;
    for (int i = 0; i < n; i++) {
        double u = zps_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
        sumsq += u * u;
    }
    double mean = sum / n, var = sumsq / n - mean * mean;
    /* sd of the mean: sqrt(1/12 / n); of the variance: sqrt((1/80 - 1/144) / n). */
    assert_true(fabs(mean - 0.5) < 5.0 * sqrt(1.0 / 12.0 / n));
    assert_true(fabs(var - 1.0 / 12.0) < 5.0 * sqrt((1.0 / 80.0 - 1.0 / 144.0) / n));
}

/*
 * Bounded integers: always below the bound, and every value about equally
 * often. Pearson's chi-square over k = 10 values has 9 degrees of freedom,
 * mean 9 and sd sqrt(18); 9 + 8 sd ~ 43 is out of reach of a fair generator.
 */
static void test_below_distribution(void **state)
{
    (void)state;
    zps_rng_t r;
    zps_rng_seed(&r, 99, 5);
    enum { K = 10 };
    uint64_t counts[K] = {0};
    const int n = N_SAMPLES;
    for (int i = 0; i < n; i++) {
        uint64_t v = zps_rng_below(&r, K);
        assert_true(v < K);
        counts[v]++;
    }
    double expect = (double)n / K, chi2 = 0;
    for (int k = 0; k < K; k++)
        chi2 += ((double)counts[k] - expect) * ((double)counts[k] - expect) / expect;
    assert_true(chi2 < 9.0 + 8.0 * sqrt(18.0));

    /* Bound 1 is always 0; a bound above 2^63 still stays below it. */
    for (int i = 0; i < 100; i++) {
        assert_true(zps_rng_below(&r, 1) == 0);
        uint64_t big = (1ull << 63) + 12345;
        assert_true(zps_rng_below(&r, big) < big);
    }
}

/* Normal: mean 0, variance 1, and the share within one sd near 0.6827. */
static void test_normal_distribution(void **state)
{
    (void)state;
    zps_rng_t r;
    zps_rng_seed(&r, 7, 11);
    const int n = N_SAMPLES;
    double sum = 0, sumsq = 0;
    int within = 0;
    for (int i = 0; i < n; i++) {
        double x = zps_rng_normal(&r);
        assert_true(isfinite(x));
        sum += x;
        sumsq += x * x;
        within += fabs(x) < 1.0;
    }
    double mean = sum / n, var = sumsq / n - mean * mean;
    /* sd of the mean 1/sqrt(n); of the variance sqrt(2/n) (kurtosis 3). */
    assert_true(fabs(mean) < 5.0 / sqrt((double)n));
    assert_true(fabs(var - 1.0) < 5.0 * sqrt(2.0 / n));
    double p = erf(1.0 / sqrt(2.0)); /* P(|x| < 1) */
    double share = (double)within / n;
    assert_true(fabs(share - p) < 5.0 * sqrt(p * (1.0 - p) / n));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_splitmix64_reference), cmocka_unit_test(test_xoshiro_reference),
        cmocka_unit_test(test_determinism),          cmocka_unit_test(test_stream_independence),
        cmocka_unit_test(test_uniform_distribution), cmocka_unit_test(test_below_distribution),
        cmocka_unit_test(test_normal_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
