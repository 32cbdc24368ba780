/*
 * test_hist.c - the histograms of common/hist.h: counts, quantiles and JSON
 * against values worked out by hand in the comments.
 *
 * The quantile rule of both: the sample of rank need = max(1, floor(q * n))
 * in sorted order (so q = 0.5 of 7 samples is the 3rd).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hist.h"
#include "strbuf.h"

static char *vhist_json(const zps_vhist_t *h)
{
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_vhist_json(h, &b);
    char *s = zps_strbuf_take(&b);
    assert_non_null(s);
    return s;
}

static char *thist_json(const zps_thist_t *h)
{
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_thist_json(h, &b);
    char *s = zps_strbuf_take(&b);
    assert_non_null(s);
    return s;
}

static void test_vhist_empty(void **state)
{
    (void)state;
    zps_vhist_t h;
    memset(&h, 0, sizeof(h));
    assert_true(zps_vhist_quantile(&h, 0.5) == 0);
    assert_true(zps_vhist_quantile(&h, 1.0) == 0);
    char *s = vhist_json(&h);
    assert_string_equal(s, "{\"count\":0,\"max\":0,\"mean\":0.0000,\"p50\":0,\"p99\":0,"
                           "\"histogram\":{}}");
    free(s);
}

/*
 * Samples 0, 1, 1, 2, 5, 70, 100: n = 7, sum 179, mean 25.571428..., max
 * 100; 70 and 100 fall in the overflow bucket (>= 64).
 *   q = 0.5:  need floor(3.5) = 3; cumulative 1 (0), 3 (1)      -> 1
 *   q = 0.1:  need max(1, floor(0.7)) = 1                        -> 0
 *   q = 0.6:  need floor(4.2) = 4; cumulative 4 at 2             -> 2
 *   q = 0.75: need floor(5.25) = 5; cumulative 5 at 5            -> 5
 *   q = 0.99: need floor(6.93) = 6; beyond the exact buckets     -> max, 100
 */
static void test_vhist_values(void **state)
{
    (void)state;
    zps_vhist_t h;
    memset(&h, 0, sizeof(h));
    const uint64_t v[] = {0, 1, 1, 2, 5, 70, 100};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        zps_vhist_add(&h, v[i]);
    assert_true(h.n == 7);
    assert_true(h.sum == 179);
    assert_true(h.max == 100);
    assert_true(h.counts[0] == 1 && h.counts[1] == 2 && h.counts[2] == 1 && h.counts[5] == 1);
    assert_true(h.overflow == 2);
    assert_true(zps_vhist_quantile(&h, 0.5) == 1);
    assert_true(zps_vhist_quantile(&h, 0.1) == 0);
    assert_true(zps_vhist_quantile(&h, 0.6) == 2);
    assert_true(zps_vhist_quantile(&h, 0.75) == 5);
    assert_true(zps_vhist_quantile(&h, 0.99) == 100);
    assert_true(zps_vhist_quantile(&h, 1.0) == 100);
    char *s = vhist_json(&h);
    assert_string_equal(s, "{\"count\":7,\"max\":100,\"mean\":25.5714,\"p50\":1,\"p99\":100,"
                           "\"histogram\":{\"0\":1,\"1\":2,\"2\":1,\"5\":1,\">=64\":2}}");
    free(s);
}

/* 63 is the last exact bucket, 64 the first overflow. */
static void test_vhist_edges(void **state)
{
    (void)state;
    zps_vhist_t h;
    memset(&h, 0, sizeof(h));
    zps_vhist_add(&h, 63);
    zps_vhist_add(&h, 64);
    assert_true(h.counts[63] == 1);
    assert_true(h.overflow == 1);
    /* q = 0.5: need 1 -> 63; q = 1: need 2, not in the exact buckets -> max 64. */
    assert_true(zps_vhist_quantile(&h, 0.5) == 63);
    assert_true(zps_vhist_quantile(&h, 1.0) == 64);
    char *s = vhist_json(&h);
    assert_string_equal(s, "{\"count\":2,\"max\":64,\"mean\":63.5000,\"p50\":63,\"p99\":63,"
                           "\"histogram\":{\"63\":1,\">=64\":1}}");
    free(s);
}

static void test_thist_empty(void **state)
{
    (void)state;
    zps_thist_t h;
    memset(&h, 0, sizeof(h));
    assert_true(zps_thist_quantile(&h, 0.5) == 0);
    assert_true(zps_thist_quantile(&h, 1.0) == 0);
    char *s = thist_json(&h);
    assert_string_equal(
        s, "{\"count\":0,\"mean_ms\":0.000,\"p50_ms\":0.000,\"p99_ms\":0.000,\"max_ms\":0.000}");
    free(s);
}

/*
 * Durations below 16 ns have a bucket each. Above, [2^p, 2^(p+1)) is cut in
 * 16 buckets of 2^(p-4) ns, and a quantile is the top of its bucket, never
 * above the largest sample:
 *   1000 ns: p = 9, width 32, 1000 in [992, 1023]   -> top 1023
 *   5000000 ns: p = 22, width 262144, in [4980736, 5242879]
 * Samples 3, 1000, 1000, 5000000: n = 4, sum 5002003 ns.
 *   q = 0.25: need 1 -> bucket of 3, exact          -> 3
 *   q = 0.5:  need 2 -> bucket of 1000              -> 1023
 *   q = 0.75: need 3                                -> 1023
 *   q = 0.99: need floor(3.96) = 3                  -> 1023
 *   q = 0.999 of 4 is still 3; q = 1 is the maximum -> 5000000
 */
static void test_thist_values(void **state)
{
    (void)state;
    zps_thist_t h;
    memset(&h, 0, sizeof(h));
    zps_thist_add(&h, 3);
    zps_thist_add(&h, 1000);
    zps_thist_add(&h, 1000);
    zps_thist_add(&h, 5000000);
    assert_true(h.n == 4);
    assert_true(h.sum_ns == 5002003);
    assert_true(h.max_ns == 5000000);
    assert_true(zps_thist_quantile(&h, 0.25) == 3);
    assert_true(zps_thist_quantile(&h, 0.5) == 1023);
    assert_true(zps_thist_quantile(&h, 0.75) == 1023);
    assert_true(zps_thist_quantile(&h, 0.99) == 1023);
    assert_true(zps_thist_quantile(&h, 1.0) == 5000000);
    /* The largest sample's bucket top (5242879) is capped at the maximum. */
    zps_thist_t one;
    memset(&one, 0, sizeof(one));
    zps_thist_add(&one, 5000000);
    assert_true(zps_thist_quantile(&one, 0.5) == 5000000);

    /* mean 1250500.75 ns = 1.251 ms; p50 = p99 = 1023 ns = 0.001 ms; max 5 ms. */
    char *s = thist_json(&h);
    assert_string_equal(
        s, "{\"count\":4,\"mean_ms\":1.251,\"p50_ms\":0.001,\"p99_ms\":0.001,\"max_ms\":5.000}");
    free(s);
}

/*
 * The resolution promise for every magnitude: with a much larger sample
 * beside it, the median of {v, big} is the top of v's bucket, which lies in
 * [v, v + v/16] (width 2^(p-4) <= v/16 for v in [2^p, 2^(p+1))), and is v
 * itself below 16 ns.
 */
static void test_thist_resolution(void **state)
{
    (void)state;
    for (uint64_t v = 1; v < (1ull << 62); v = v * 3 + 1) {
        zps_thist_t h;
        memset(&h, 0, sizeof(h));
        zps_thist_add(&h, v);
        zps_thist_add(&h, UINT64_MAX / 2);
        uint64_t top = zps_thist_quantile(&h, 0.5);
        if (v < 16) {
            assert_true(top == v);
            continue;
        }
        int p = 63 - __builtin_clzll(v);
        uint64_t width = 1ull << (p - 4);
        uint64_t lo = v & ~(width - 1);
        assert_true(top == lo + width - 1);
        assert_true(top >= v && top - v <= v / 16);
    }
}

/* Cumulative counts, as a Prometheus histogram's buckets read them. */
static void test_count_le(void **state)
{
    (void)state;
    zps_vhist_t v;
    memset(&v, 0, sizeof(v));
    uint64_t samples[] = {0, 0, 1, 3, 3, 3, 63, 64, 1000};
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++)
        zps_vhist_add(&v, samples[i]);
    assert_int_equal(zps_vhist_count_le(&v, 0), 2);
    assert_int_equal(zps_vhist_count_le(&v, 1), 3);
    assert_int_equal(zps_vhist_count_le(&v, 2), 3);
    assert_int_equal(zps_vhist_count_le(&v, 3), 6);
    assert_int_equal(zps_vhist_count_le(&v, 63), 7);
    assert_int_equal(zps_vhist_count_le(&v, 1000), 9);
    assert_int_equal(zps_vhist_count_le(&v, 5000), 9);

    zps_thist_t t;
    memset(&t, 0, sizeof(t));
    zps_thist_add(&t, 5);          /* exact bucket */
    zps_thist_add(&t, 1000000);    /* 1 ms */
    zps_thist_add(&t, 9000000);    /* 9 ms */
    zps_thist_add(&t, 2000000000); /* 2 s */
    assert_int_equal(zps_thist_count_le(&t, 4), 0);
    assert_int_equal(zps_thist_count_le(&t, 5), 1);
    /* 1 ms lies in a bucket 1/16 of a power of two wide: counted once the
     * whole bucket is below the bound. */
    assert_int_equal(zps_thist_count_le(&t, 999999), 1);
    assert_int_equal(zps_thist_count_le(&t, 1100000), 2);
    assert_int_equal(zps_thist_count_le(&t, 10000000), 3);
    assert_int_equal(zps_thist_count_le(&t, 1000000000), 3);
    assert_int_equal(zps_thist_count_le(&t, 3000000000ull), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vhist_empty),  cmocka_unit_test(test_vhist_values),
        cmocka_unit_test(test_vhist_edges),  cmocka_unit_test(test_thist_empty),
        cmocka_unit_test(test_thist_values), cmocka_unit_test(test_thist_resolution),
        cmocka_unit_test(test_count_le),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
