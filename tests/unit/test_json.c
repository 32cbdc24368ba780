/*
 * test_json.c - the small JSON reader (common/json.h): the tree of valid
 * documents, numbers, strings with escapes, the accessors, and invalid
 * documents refused with ZPS_EINVAL and the exact reason and offset,
 * including the nesting limit of 64 levels.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "error.h"
#include "json.h"

static zps_json_t *parse_ok(const char *text)
{
    zps_json_t *v = NULL;
    char err[128] = "";
    int rc = zps_json_parse(text, &v, err, sizeof(err));
    if (rc != 0)
        fail_msg("'%s': %s", text, err);
    assert_non_null(v);
    return v;
}

static void check_refused(const char *text, const char *reason)
{
    zps_json_t *v = (zps_json_t *)(uintptr_t)1; /* must stay untouched */
    char err[128] = "";
    assert_int_equal(zps_json_parse(text, &v, err, sizeof(err)), ZPS_EINVAL);
    assert_string_equal(err, reason);
    assert_true(v == (zps_json_t *)(uintptr_t)1);
}

static void test_scalars(void **state)
{
    (void)state;
    zps_json_t *v = parse_ok("null");
    assert_int_equal(v->type, ZPS_JSON_NULL);
    zps_json_free(v);
    v = parse_ok(" true ");
    assert_int_equal(v->type, ZPS_JSON_BOOL);
    assert_true(zps_json_true(v));
    zps_json_free(v);
    v = parse_ok("\tfalse\r\n");
    assert_int_equal(v->type, ZPS_JSON_BOOL);
    assert_false(v->boolean);
    assert_false(zps_json_true(v));
    zps_json_free(v);
    v = parse_ok("\"\"");
    assert_int_equal(v->type, ZPS_JSON_STRING);
    assert_string_equal(zps_json_string(v), "");
    zps_json_free(v);
}

static void test_numbers(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        double value;
    } cases[] = {
        {"0", 0.0},
        {"-0.25", -0.25},
        {"42", 42.0},
        {"1e3", 1000.0},
        {"1.5E-3", 0.0015},
        {"-12.5e+2", -1250.0},
        {"9007199254740992", 9007199254740992.0}, /* 2^53, exact */
        {"0.1", 0.1},
        {"123456.789", 123456.789},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        zps_json_t *v = parse_ok(cases[i].text);
        assert_int_equal(v->type, ZPS_JSON_NUMBER);
        assert_true(v->number == cases[i].value);
        assert_true(zps_json_number(v, 7.0) == cases[i].value);
        zps_json_free(v);
    }
}

static void test_strings(void **state)
{
    (void)state;
    /* Every decoded escape; \u is kept as written. */
    zps_json_t *v = parse_ok("\"a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti\\u0041j\"");
    assert_string_equal(zps_json_string(v), "a\"b\\c/d\be\ff\ng\rh\ti\\u0041j");
    zps_json_free(v);
    /* Bytes above 0x7f pass through. */
    v = parse_ok("\"gr\xc3\xbc\xc3\x9f\"");
    assert_string_equal(zps_json_string(v), "gr\xc3\xbc\xc3\x9f");
    zps_json_free(v);
    /* Longer than the first buffer, to make it grow. */
    char text[258], want[256];
    memset(want, 'x', 255);
    want[255] = '\0';
    text[0] = '"';
    memcpy(text + 1, want, 255);
    text[256] = '"';
    text[257] = '\0';
    v = parse_ok(text);
    assert_string_equal(zps_json_string(v), want);
    zps_json_free(v);
}

static void test_nested_document(void **state)
{
    (void)state;
    const char *text = "{\"type\":\"step\", \"clock\": 12, \"loss\": null,\n"
                       " \"dropped\": false, \"ok\": true,\n"
                       " \"list\": [1, [2, 3], {\"k\": \"v\"}, []],\n"
                       " \"empty\": {}, \"clock\": 99}";
    zps_json_t *v = parse_ok(text);
    assert_int_equal(v->type, ZPS_JSON_OBJECT);
    assert_int_equal(v->count, 8);
    /* Keys in order as written, duplicates kept; lookup finds the first. */
    const char *keys[] = {"type", "clock", "loss", "dropped", "ok", "list", "empty", "clock"};
    for (size_t i = 0; i < 8; i++)
        assert_string_equal(v->keys[i], keys[i]);
    assert_string_equal(zps_json_string(zps_json_get(v, "type")), "step");
    assert_true(zps_json_number(zps_json_get(v, "clock"), -1) == 12.0);
    assert_int_equal(zps_json_get(v, "loss")->type, ZPS_JSON_NULL);
    assert_true(zps_json_number(zps_json_get(v, "loss"), -1) == -1.0);
    assert_false(zps_json_true(zps_json_get(v, "dropped")));
    assert_true(zps_json_true(zps_json_get(v, "ok")));
    assert_null(zps_json_get(v, "missing"));
    assert_null(zps_json_string(zps_json_get(v, "clock")));

    const zps_json_t *list = zps_json_get(v, "list");
    assert_int_equal(list->type, ZPS_JSON_ARRAY);
    assert_int_equal(list->count, 4);
    assert_true(zps_json_number(zps_json_at(list, 0), -1) == 1.0);
    const zps_json_t *inner = zps_json_at(list, 1);
    assert_int_equal(inner->count, 2);
    assert_true(zps_json_number(zps_json_at(inner, 1), -1) == 3.0);
    assert_string_equal(zps_json_string(zps_json_get(zps_json_at(list, 2), "k")), "v");
    assert_int_equal(zps_json_at(list, 3)->type, ZPS_JSON_ARRAY);
    assert_int_equal(zps_json_at(list, 3)->count, 0);
    assert_null(zps_json_at(list, 4));
    const zps_json_t *empty = zps_json_get(v, "empty");
    assert_int_equal(empty->type, ZPS_JSON_OBJECT);
    assert_int_equal(empty->count, 0);

    /* Accessors on the wrong type, or on NULL. */
    assert_null(zps_json_get(list, "k"));
    assert_null(zps_json_at(v, 0));
    assert_null(zps_json_get(NULL, "k"));
    assert_null(zps_json_at(NULL, 0));
    assert_null(zps_json_string(NULL));
    assert_false(zps_json_true(NULL));
    assert_true(zps_json_number(NULL, 2.5) == 2.5);
    zps_json_free(v);
    zps_json_free(NULL);
}

/* Many items: the containers grow past their first allocation. */
static void test_large_array(void **state)
{
    (void)state;
    enum { N = 1000 };
    char *text = malloc(N * 8 + 8);
    assert_non_null(text);
    size_t len = 0;
    text[len++] = '[';
    for (int i = 0; i < N; i++)
        len += (size_t)sprintf(text + len, "%s%d", i ? "," : "", i);
    text[len++] = ']';
    text[len] = '\0';
    zps_json_t *v = parse_ok(text);
    assert_int_equal(v->count, N);
    for (int i = 0; i < N; i++)
        assert_true(zps_json_number(zps_json_at(v, (size_t)i), -1) == (double)i);
    zps_json_free(v);
    free(text);
}

static void test_invalid(void **state)
{
    (void)state;
    check_refused("", "unexpected end of text at offset 0");
    check_refused("   ", "unexpected end of text at offset 3");
    check_refused("{", "expected a key at offset 1");
    check_refused("[", "unexpected end of text at offset 1");
    check_refused("[1,]", "unexpected character at offset 3");
    check_refused("[1 2]", "expected ',' or ']' at offset 3");
    check_refused("{\"a\" 1}", "expected ':' at offset 5");
    check_refused("{\"a\":1,}", "expected a key at offset 7");
    check_refused("{\"a\":1 \"b\":2}", "expected ',' or '}' at offset 7");
    check_refused("{1:2}", "expected a key at offset 1");
    check_refused("tru", "unexpected character at offset 0");
    check_refused("nul", "unexpected character at offset 0");
    check_refused("'a'", "unexpected character at offset 0");
    check_refused("\"abc", "unterminated string at offset 4");
    check_refused("\"a\nb\"", "unterminated string at offset 2");
    check_refused("\"a\\xb\"", "bad escape in string at offset 3");
    check_refused("-", "bad number at offset 0");
    check_refused("1 2", "trailing characters at offset 2");
    check_refused("{} x", "trailing characters at offset 3");
    check_refused("[1]]", "trailing characters at offset 3");

    /* err may be NULL. */
    zps_json_t *v = NULL;
    assert_int_equal(zps_json_parse("[", &v, NULL, 0), ZPS_EINVAL);
    assert_null(v);
}

/* Nesting: 64 levels are read, the 65th is refused where it opens. */
static void test_nesting_limit(void **state)
{
    (void)state;
    char text[2 * 65 + 1];
    for (int depth = 63; depth <= 65; depth++) {
        memset(text, '[', (size_t)depth);
        memset(text + depth, ']', (size_t)depth);
        text[2 * depth] = '\0';
        if (depth <= 64) {
            zps_json_t *v = parse_ok(text);
            const zps_json_t *p = v;
            for (int d = 1; d < depth; d++) {
                assert_int_equal(p->count, 1);
                p = zps_json_at(p, 0);
            }
            assert_int_equal(p->type, ZPS_JSON_ARRAY);
            assert_int_equal(p->count, 0);
            zps_json_free(v);
        } else {
            check_refused(text, "nested too deeply at offset 65");
        }
    }
    /* Objects count as levels too: 64 arrays around one object is 65. */
    char mixed[2 * 64 + 3];
    memset(mixed, '[', 64);
    memcpy(mixed + 64, "{}", 2);
    memset(mixed + 66, ']', 64);
    mixed[130] = '\0';
    check_refused(mixed, "nested too deeply at offset 65");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),       cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_strings),       cmocka_unit_test(test_nested_document),
        cmocka_unit_test(test_large_array),   cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_nesting_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
