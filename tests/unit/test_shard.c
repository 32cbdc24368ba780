/*
 * test_shard.c - the range rule: exact coverage, the formula, edge cases.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "error.h"
#include "shard.h"

static void test_formula(void **state)
{
    (void)state;
    zps_range_t r;
    /* 10 elements over 3 shards: floor(i*10/3) = 0, 3, 6, 10. */
    assert_int_equal(zps_shard_range(10, 0, 3, &r), 0);
    assert_int_equal(r.lo, 0);
    assert_int_equal(r.hi, 3);
    assert_int_equal(zps_shard_range(10, 1, 3, &r), 0);
    assert_int_equal(r.lo, 3);
    assert_int_equal(r.hi, 6);
    assert_int_equal(zps_shard_range(10, 2, 3, &r), 0);
    assert_int_equal(r.lo, 6);
    assert_int_equal(r.hi, 10);
}

static void test_one_element(void **state)
{
    (void)state;
    zps_range_t r;
    assert_int_equal(zps_shard_range(1, 0, 1, &r), 0);
    assert_int_equal(r.lo, 0);
    assert_int_equal(r.hi, 1);
    /* One element over two shards: the first is empty, the second holds it. */
    assert_int_equal(zps_shard_range(1, 0, 2, &r), 0);
    assert_int_equal(zps_range_len(r), 0);
    assert_int_equal(zps_shard_range(1, 1, 2, &r), 0);
    assert_int_equal(r.lo, 0);
    assert_int_equal(r.hi, 1);
}

/* Every N and S up to a bound: disjoint, contiguous, complete, balanced within one. */
static void test_coverage(void **state)
{
    (void)state;
    for (uint64_t n = 0; n <= 200; n++) {
        for (uint32_t s = 1; s <= 17; s++) {
            uint64_t next = 0, min = UINT64_MAX, max = 0;
            for (uint32_t i = 0; i < s; i++) {
                zps_range_t r;
                assert_int_equal(zps_shard_range(n, i, s, &r), 0);
                assert_int_equal(r.lo, next);
                assert_true(r.hi >= r.lo);
                next = r.hi;
                uint64_t len = zps_range_len(r);
                min = len < min ? len : min;
                max = len > max ? len : max;
            }
            assert_int_equal(next, n);
            assert_true(max - min <= 1);
        }
    }
}

static void test_huge_model(void **state)
{
    (void)state;
    /* i*N overflows 64 bits here; the rule must still be exact. */
    uint64_t n = (1ull << 62) + 12345;
    zps_range_t r;
    assert_int_equal(zps_shard_range(n, 6, 7, &r), 0);
    assert_int_equal(r.hi, n);
    unsigned __int128 want = ((unsigned __int128)n * 6) / 7;
    assert_true(r.lo == (uint64_t)want);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    zps_range_t r = {77, 88};
    assert_int_equal(zps_shard_range(10, 0, 0, &r), ZPS_EINVAL);
    assert_int_equal(zps_shard_range(10, 3, 3, &r), ZPS_EINVAL);
    assert_int_equal(r.lo, 77); /* untouched on failure */

    uint32_t i = 9, s = 9;
    assert_int_equal(zps_shard_parse("1/4", &i, &s), 0);
    assert_int_equal(i, 1);
    assert_int_equal(s, 4);
    const char *bad[] = {"",     "4/4", "1/0", "-1/4", "1/",  "/4",
                         "1/4x", "a/b", "1:4", " 1/4", "1/+4"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        i = 9;
        assert_int_equal(zps_shard_parse(bad[k], &i, &s), ZPS_EINVAL);
        assert_int_equal(i, 9);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formula),       cmocka_unit_test(test_one_element),
        cmocka_unit_test(test_coverage),      cmocka_unit_test(test_huge_model),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
