/*
 * test_parse.c - strict flag parsing, lists, and exact float output.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "error.h"
#include "parse.h"
#include "strbuf.h"

static void test_numbers(void **state)
{
    (void)state;
    long l = 5;
    assert_int_equal(zps_parse_long("12", 0, 100, &l), 0);
    assert_int_equal(l, 12);
    const char *bad_long[] = {"", " 1", "1 ", "0x10", "101", "-1", "1e2", "12a"};
    for (size_t i = 0; i < sizeof(bad_long) / sizeof(bad_long[0]); i++) {
        l = 5;
        assert_int_equal(zps_parse_long(bad_long[i], 0, 100, &l), ZPS_EINVAL);
        assert_int_equal(l, 5);
    }
    uint64_t u;
    assert_int_equal(zps_parse_u64("18446744073709551615", &u), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(zps_parse_u64("18446744073709551616", &u), ZPS_EINVAL);
    assert_int_equal(zps_parse_u64("-1", &u), ZPS_EINVAL);
    double d;
    assert_int_equal(zps_parse_double("1e-3", &d), 0);
    assert_true(d == 1e-3);
    assert_int_equal(zps_parse_double("nan", &d), ZPS_EINVAL);
    assert_int_equal(zps_parse_double("inf", &d), ZPS_EINVAL);
    assert_int_equal(zps_parse_double("1e400", &d), ZPS_EINVAL);
    float f;
    assert_int_equal(zps_parse_float("1e39", &f), ZPS_EINVAL); /* overflows float32 */
    assert_int_equal(zps_parse_float("-2.5", &f), 0);
    assert_true(f == -2.5f);
}

static void test_lists(void **state)
{
    (void)state;
    char **v;
    size_t n;
    assert_int_equal(zps_parse_list("a,bb,c", &v, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(v[0], "a");
    assert_string_equal(v[1], "bb");
    assert_string_equal(v[2], "c");
    assert_null(v[3]);
    free(v);
    assert_int_equal(zps_parse_list("a,,c", &v, &n), ZPS_EINVAL);
    assert_int_equal(zps_parse_list("a,", &v, &n), ZPS_EINVAL);
    assert_int_equal(zps_parse_list("", &v, &n), ZPS_EINVAL);
    float *fv;
    assert_int_equal(zps_parse_float_list("1,-2.5,3e2", &fv, &n), 0);
    assert_int_equal(n, 3);
    assert_true(fv[0] == 1.0f && fv[1] == -2.5f && fv[2] == 300.0f);
    free(fv);
    assert_int_equal(zps_parse_float_list("1,x", &fv, &n), ZPS_EINVAL);
}

static void test_shortest_float(void **state)
{
    (void)state;
    char b[48];
    assert_string_equal(zps_format_float(9.5f, b, sizeof(b)), "9.5");
    assert_string_equal(zps_format_float(10.0f, b, sizeof(b)), "10");
    assert_string_equal(zps_format_float(0.1f, b, sizeof(b)), "0.1");
    assert_string_equal(zps_format_float(-0.0f, b, sizeof(b)), "-0");
    assert_string_equal(zps_format_float(1.0f / 3.0f, b, sizeof(b)), "0.33333334");
    assert_string_equal(zps_format_float(1e20f, b, sizeof(b)), "1e+20");
    /* Every float read back exactly, over a sweep of bit patterns. */
    for (uint64_t k = 0; k < 300000; k++) {
        uint32_t bits = (uint32_t)(k * 14316557u);
        float x;
        memcpy(&x, &bits, 4);
        if (!isfinite(x))
            continue;
        zps_format_float(x, b, sizeof(b));
        float y = strtof(b, NULL);
        assert_memory_equal(&x, &y, 4);
    }
}

static void test_strbuf_json(void **state)
{
    (void)state;
    zps_strbuf_t sb;
    zps_strbuf_init(&sb);
    zps_strbuf_printf(&sb, "{\"k\":");
    zps_strbuf_json_string(&sb, "a\"b\\c\n");
    zps_strbuf_printf(&sb, ",\"n\":%d}", 42);
    char *s = zps_strbuf_take(&sb);
    assert_string_equal(s, "{\"k\":\"a\\\"b\\\\c\\u000a\",\"n\":42}");
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_lists),
        cmocka_unit_test(test_shortest_float),
        cmocka_unit_test(test_strbuf_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
