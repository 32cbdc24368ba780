/*
 * test_bf16.c - bfloat16 rounding against values worked out by hand and
 * against a reference that picks the nearer of the two neighbouring
 * bfloat16 values in double precision; the checksums of the fused passes;
 * and error feedback, whose sum of sent values must follow the sum of the
 * gradients where plain rounding drifts.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bf16.h"
#include "checksum.h"

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

static uint32_t to_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static void test_by_hand(void **state)
{
    (void)state;
    assert_int_equal(zps_bf16_from_float(1.0f), 0x3f80);
    assert_int_equal(zps_bf16_from_float(-2.5f), 0xc020);
    assert_int_equal(zps_bf16_from_float(0.0f), 0x0000);
    assert_int_equal(zps_bf16_from_float(-0.0f), 0x8000);
    /* The bfloat16 ulp at 1 is 2^-7. 1 + 2^-8 is a tie: to the even 1.0. */
    assert_int_equal(zps_bf16_from_float(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3 * 2^-8 is a tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even). */
    assert_int_equal(zps_bf16_from_float(1.0f + 3 * 0x1p-8f), 0x3f82);
    /* Just above the tie rounds up, just below rounds down. */
    assert_int_equal(zps_bf16_from_float(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(zps_bf16_from_float(1.0f + 0x1p-8f - 0x1p-20f), 0x3f80);
    /* 0x3fffffff (just under 2) rounds up across the exponent to 2.0. */
    assert_int_equal(zps_bf16_from_float(from_bits(0x3fffffffu)), 0x4000);
    /* FLT_MAX would round to Inf: it is the largest finite bfloat16. */
    assert_int_equal(zps_bf16_from_float(FLT_MAX), 0x7f7f);
    assert_int_equal(zps_bf16_from_float(-FLT_MAX), 0xff7f);
    assert_true(isfinite(zps_bf16_to_float(0x7f7f)));
    assert_int_equal(zps_bf16_from_float(INFINITY), 0x7f80);
    assert_int_equal(zps_bf16_from_float(-INFINITY), 0xff80);
    uint16_t nan = zps_bf16_from_float(NAN);
    assert_int_equal(nan & 0x7f80, 0x7f80);
    assert_true((nan & 0x7f) != 0);
    /* A NaN whose payload is only in the low half stays a NaN. */
    assert_true(isnan(zps_bf16_to_float(zps_bf16_from_float(from_bits(0x7f800001u)))));
    /* Subnormals: the smallest rounds to zero, the ties go to even. */
    assert_int_equal(zps_bf16_from_float(from_bits(0x00000001u)), 0x0000);
    assert_int_equal(zps_bf16_from_float(from_bits(0x00008000u)), 0x0000);
    assert_int_equal(zps_bf16_from_float(from_bits(0x00018000u)), 0x0002);
    /* Widening is exact. */
    assert_true(zps_bf16_to_float(0x3f80) == 1.0f);
    assert_true(zps_bf16_to_float(0xc020) == -2.5f);
    assert_int_equal(to_bits(zps_bf16_to_float(0x1234)), 0x12340000u);
}

/* Independent reference: the nearer of the bfloat16 values below and above |x|, ties to even. */
static uint16_t reference(float x)
{
    uint32_t u = to_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint16_t lo = (uint16_t)((u & 0x7fffffffu) >> 16); /* truncated magnitude */
    double ax = fabs((double)x);
    double below = (double)from_bits((uint32_t)lo << 16);
    if (ax == below)
        return sign | lo;
    uint16_t hi = lo + 1;
    if (hi >= 0x7f80u) /* the next one up is Inf: finite values stay finite */
        return sign | lo;
    double above = (double)from_bits((uint32_t)hi << 16);
    double dl = ax - below, dh = above - ax;
    if (dl < dh)
        return sign | lo;
    if (dh < dl)
        return sign | hi;
    return sign | ((lo & 1u) ? hi : lo);
}

static void test_against_reference(void **state)
{
    (void)state;
    uint32_t seed = 12345;
    for (int i = 0; i < 200000; i++) {
        seed = seed * 1664525u + 1013904223u;
        uint32_t u = seed ^ (seed >> 7) * 2654435761u;
        float x = from_bits(u);
        if (!isfinite(x))
            continue;
        uint16_t got = zps_bf16_from_float(x), want = reference(x);
        if (got != want)
            fail_msg("0x%08x: got 0x%04x, want 0x%04x", u, got, want);
    }
}

static void test_fused_passes(void **state)
{
    (void)state;
    enum { N = 20000 }; /* more than one block */
    float *src = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
    uint16_t *b = malloc(N * sizeof(uint16_t));
    assert_non_null(src);
    assert_non_null(back);
    assert_non_null(b);
    for (int i = 0; i < N; i++)
        src[i] = sinf((float)i) * (float)(i % 97);
    uint32_t crc = zps_bf16_narrow(b, src, N);
    assert_int_equal(crc, zps_crc32c(0, b, N * sizeof(uint16_t)));
    for (int i = 0; i < N; i++)
        assert_int_equal(b[i], reference(src[i]));
    assert_int_equal(zps_bf16_widen(back, b, N, 0), crc);
    float mx = 0;
    for (int i = 0; i < N; i++) {
        assert_true(back[i] == zps_bf16_to_float(b[i]));
        mx = fabsf(back[i]) > mx ? fabsf(back[i]) : mx;
    }
    size_t bad;
    float amax;
    memset(back, 0, N * sizeof(float));
    assert_int_equal(zps_bf16_widen_scan(back, b, N, &bad, &amax, 0), crc);
    assert_int_equal(bad, N);
    assert_true(amax == mx);
    assert_true(back[N - 1] == zps_bf16_to_float(b[N - 1]));
    /* Non-finite values in the second block: the first is found. */
    b[15000] = 0xff80; /* -Inf */
    b[17000] = 0x7fc0; /* NaN */
    zps_bf16_widen_scan(back, b, N, &bad, &amax, 0);
    assert_int_equal(bad, 15000);
    assert_true(isinf(amax));
    assert_int_equal(zps_bf16_widen_scan(back, b, 0, &bad, &amax, 0), 0);
    assert_int_equal(bad, 0);
    assert_true(amax == 0.0f);
    free(src);
    free(back);
    free(b);
}

/*
 * Error feedback: after T pushes, what was sent plus the residual is what
 * was pushed (to within float rounding of the sums), and the residual stays
 * below one bfloat16 ulp of the values; plain rounding of the same
 * gradients drifts by about T times the rounding error.
 */
static void test_error_feedback(void **state)
{
    (void)state;
    enum { N = 64, T = 1000 };
    float g[N], resid[N];
    uint16_t b[N];
    double sent[N], pushed[N], plain[N];
    memset(resid, 0, sizeof(resid));
    for (int i = 0; i < N; i++) {
        /* Values that bfloat16 cannot hold: each rounds the same way every time. */
        g[i] = (1.0f + (float)i * 0.00390625f + 0.001f) * (i % 2 ? 1e-3f : -3e-2f);
        sent[i] = pushed[i] = plain[i] = 0;
    }
    for (int t = 0; t < T; t++) {
        uint32_t crc = zps_bf16_narrow_feedback(b, g, resid, N);
        assert_int_equal(crc, zps_crc32c(0, b, sizeof(b)));
        for (int i = 0; i < N; i++) {
            sent[i] += zps_bf16_to_float(b[i]);
            pushed[i] += g[i];
            plain[i] += zps_bf16_to_float(zps_bf16_from_float(g[i]));
        }
    }
    double worst_fb = 0, worst_plain = 0;
    for (int i = 0; i < N; i++) {
        /* |resid| within half a bfloat16 ulp of |g| + |resid| (2^-8 relative). */
        assert_true(fabs((double)resid[i]) <= fabs((double)g[i]) * 0x1p-7);
        double fb = fabs(sent[i] + resid[i] - pushed[i]);
        assert_true(fb <= fabs(pushed[i]) * 1e-5);
        double e_fb = fabs(sent[i] - pushed[i]) / fabs(pushed[i]);
        double e_plain = fabs(plain[i] - pushed[i]) / fabs(pushed[i]);
        worst_fb = e_fb > worst_fb ? e_fb : worst_fb;
        worst_plain = e_plain > worst_plain ? e_plain : worst_plain;
    }
    /* Sent total within 1e-5 relative with feedback; plain rounding is off by
     * up to 2^-9 relative (its rounding error, repeated T times). */
    assert_true(worst_fb < 1e-5);
    print_message("sent vs pushed, relative: %.3g with feedback, %.3g without\n", worst_fb,
                  worst_plain);
    assert_true(worst_plain > 100 * worst_fb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_by_hand),
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_fused_passes),
        cmocka_unit_test(test_error_feedback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
