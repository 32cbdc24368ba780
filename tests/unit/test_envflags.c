/*
 * test_envflags.c - flags from ZPS_* variables (common/envflags.h): the
 * variables become flags before the command line, in the table's order;
 * flags without a value take yes/no words; empty values, --help and
 * variables that name no flag are ignored; a bad yes/no word is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "envflags.h"
#include "error.h"

static const struct option table[] = {
    {"servers", required_argument, NULL, 1}, {"rank", required_argument, NULL, 2},
    {"insecure", no_argument, NULL, 3},      {"data-dir", required_argument, NULL, 4},
    {"help", no_argument, NULL, 5},          {NULL, 0, NULL, 0},
};

static void clear_env(void)
{
    static const char *const vars[] = {"ZPS_SERVERS",  "ZPS_RANK", "ZPS_INSECURE",
                                       "ZPS_DATA_DIR", "ZPS_HELP", "ZPS_NOT_A_FLAG"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
}

static void test_var_names(void **state)
{
    (void)state;
    char buf[64];
    zps_envflags_var("data-dir", buf, sizeof(buf));
    assert_string_equal(buf, "ZPS_DATA_DIR");
    zps_envflags_var("rank", buf, 7);
    assert_string_equal(buf, "ZPS_RA"); /* cut to the buffer */
}

static void test_none(void **state)
{
    (void)state;
    clear_env();
    char *argv[] = {"prog", "--rank", "3", NULL};
    zps_envflags_t e;
    char why[128];
    assert_int_equal(zps_envflags_build(3, argv, table, &e, why, sizeof(why)), 0);
    assert_int_equal(e.argc, 3);
    assert_string_equal(e.argv[0], "prog");
    assert_string_equal(e.argv[1], "--rank");
    assert_string_equal(e.argv[2], "3");
    assert_null(e.argv[3]);
    assert_string_equal(e.used, "");
    zps_envflags_free(&e);
}

static void test_before_command_line(void **state)
{
    (void)state;
    clear_env();
    setenv("ZPS_RANK", "2", 1);
    setenv("ZPS_SERVERS", "tcp://a:1,tcp://b:2", 1);
    setenv("ZPS_INSECURE", "yes", 1);
    setenv("ZPS_DATA_DIR", "", 1);    /* empty: ignored */
    setenv("ZPS_HELP", "1", 1);       /* never from the environment */
    setenv("ZPS_NOT_A_FLAG", "1", 1); /* not this program's */
    char *argv[] = {"prog", "--rank", "5", NULL};
    zps_envflags_t e;
    char why[128];
    assert_int_equal(zps_envflags_build(3, argv, table, &e, why, sizeof(why)), 0);
    assert_int_equal(e.argc, 6);
    assert_string_equal(e.argv[1], "--servers=tcp://a:1,tcp://b:2");
    assert_string_equal(e.argv[2], "--rank=2");
    assert_string_equal(e.argv[3], "--insecure");
    assert_string_equal(e.argv[4], "--rank"); /* the command line last: it wins */
    assert_string_equal(e.argv[5], "5");
    assert_null(e.argv[6]);
    assert_string_equal(e.used, "ZPS_SERVERS ZPS_RANK ZPS_INSECURE");
    zps_envflags_free(&e);

    setenv("ZPS_INSECURE", "0", 1); /* a no: not given */
    assert_int_equal(zps_envflags_build(1, argv, table, &e, why, sizeof(why)), 0);
    assert_int_equal(e.argc, 3);
    assert_string_equal(e.used, "ZPS_SERVERS ZPS_RANK");
    zps_envflags_free(&e);
    clear_env();
}

static void test_bad_word(void **state)
{
    (void)state;
    clear_env();
    setenv("ZPS_INSECURE", "maybe", 1);
    char *argv[] = {"prog", NULL};
    zps_envflags_t e;
    char why[160];
    assert_int_equal(zps_envflags_build(1, argv, table, &e, why, sizeof(why)), ZPS_EINVAL);
    assert_non_null(strstr(why, "ZPS_INSECURE='maybe'"));
    assert_null(e.argv);
    clear_env();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_var_names),
        cmocka_unit_test(test_none),
        cmocka_unit_test(test_before_command_line),
        cmocka_unit_test(test_bad_word),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
