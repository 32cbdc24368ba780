/*
 * test_backend_module.c - the backend module loader (backend_module.c) on
 * fake modules built beside this test: found beside the executable, found
 * through ZPS_BACKEND_DIR and only there, a stale ABI refused, a file that
 * is no library refused, a missing file reported with where it was sought.
 * Needs no GPU and runs in every build.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend.h"
#include "backend_module.h"
#include "error.h"

/* FAKE_MODULE_DIR, set by the build: where libzps_fake_*.so are. */

static void test_found_beside_executable(void **state)
{
    (void)state;
    unsetenv("ZPS_BACKEND_DIR");
    const zps_backend_ops_t *ops = NULL;
    char err[1024] = "";
    int rc = zps_backend_module_load("libzps_fake_ok.so", &ops, err, sizeof(err));
    if (rc)
        fail_msg("%s", err);
    assert_non_null(ops);
    assert_string_equal(ops->name, "fake");
}

static void test_env_dir_is_the_only_place(void **state)
{
    (void)state;
    const zps_backend_ops_t *ops = NULL;
    char err[1024] = "";
    setenv("ZPS_BACKEND_DIR", FAKE_MODULE_DIR, 1);
    assert_int_equal(zps_backend_module_load("libzps_fake_ok.so", &ops, err, sizeof(err)), 0);
    assert_string_equal(ops->name, "fake");

    /* The executable's own directory has the file, but is not looked at. */
    ops = NULL;
    setenv("ZPS_BACKEND_DIR", "/nonexistent-zps-dir", 1);
    assert_int_equal(zps_backend_module_load("libzps_fake_ok.so", &ops, err, sizeof(err)),
                     ZPS_ENODEV);
    assert_null(ops);
    assert_non_null(strstr(err, "libzps_fake_ok.so not found"));
    assert_non_null(strstr(err, "/nonexistent-zps-dir"));
    assert_non_null(strstr(err, "ZPS_BACKEND_DIR"));
    unsetenv("ZPS_BACKEND_DIR");
}

static void test_stale_abi_refused(void **state)
{
    (void)state;
    const zps_backend_ops_t *ops = NULL;
    char err[1024] = "";
    unsetenv("ZPS_BACKEND_DIR");
    assert_int_equal(zps_backend_module_load("libzps_fake_stale.so", &ops, err, sizeof(err)),
                     ZPS_ENODEV);
    assert_null(ops);
    char want[64];
    snprintf(want, sizeof(want), "built for backend ABI 0, this program needs ABI %u",
             (unsigned)ZPS_BACKEND_ABI);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, "stale"));
}

static void test_not_a_library_refused(void **state)
{
    (void)state;
    char dir[] = "/tmp/zps-test-module-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[sizeof(dir) + 32];
    snprintf(path, sizeof(path), "%s/libzps_fake_ok.so", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a shared object\n", f);
    fclose(f);

    const zps_backend_ops_t *ops = NULL;
    char err[1024] = "";
    setenv("ZPS_BACKEND_DIR", dir, 1);
    int rc = zps_backend_module_load("libzps_fake_ok.so", &ops, err, sizeof(err));
    unsetenv("ZPS_BACKEND_DIR");
    unlink(path);
    rmdir(dir);
    assert_int_equal(rc, ZPS_ENODEV);
    assert_null(ops);
    assert_non_null(strstr(err, "cannot load"));
    assert_non_null(strstr(err, path));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_found_beside_executable),
        cmocka_unit_test(test_env_dir_is_the_only_place),
        cmocka_unit_test(test_stale_abi_refused),
        cmocka_unit_test(test_not_a_library_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
