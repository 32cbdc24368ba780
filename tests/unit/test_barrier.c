/*
 * test_barrier.c - who a shard's barrier waits for (tool/barrier.c), from
 * STATS replies written by hand; the expected ranks are worked out from
 * docs/consistency.md's rules in the comments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "barrier.h"
#include "error.h"
#include "json.h"

/* Parses a STATS reply of W = 4 workers into *s. */
static void shard(zps_barrier_shard_t *s, const char *mode, int bound, int backup, int version,
                  const char *clocks, const char *live)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"shard\":1,\"initialized\":true,\"version\":%d,\"min_clock\":0,\"mode\":\"%s\","
             "\"staleness_bound\":%d,\"backup_workers\":%d,\"workers\":4,\"clocks\":[%s],"
             "\"live\":[%s],\"silent_ms\":[10,14000,200,3500]}",
             version, mode, bound, backup, clocks, live);
    zps_json_t *o = NULL;
    assert_int_equal(zps_json_parse(text, &o, NULL, 0), 0);
    assert_int_equal(zps_barrier_shard_parse(o, s), 0);
    zps_json_free(o);
}

static void test_bsp(void **state)
{
    (void)state;
    zps_barrier_shard_t s;
    zps_barrier_wait_t w;
    char line[256];
    /* v = 812: workers 0 and 2 pushed 812 (next 813), 1 and 3 did not. */
    shard(&s, "bsp", 0, 0, 812, "813,812,813,812", "true,true,true,true");
    zps_barrier_wait(&s, &w);
    assert_true(w.holding);
    assert_int_equal(w.clock, 812);
    assert_int_equal(w.count, 2);
    assert_int_equal(w.needed, 2);
    assert_int_equal(w.rank[0], 1);
    assert_int_equal(w.rank[1], 3);
    zps_barrier_line(&s, &w, -1, line, sizeof(line));
    assert_string_equal(line, "clock 812: waiting for worker 1, last heard 14 s ago; worker 3, "
                              "last heard 3.5 s ago");
    zps_barrier_line(&s, &w, 9.0, line, sizeof(line));
    assert_non_null(strstr(line, "; held 9.0 s"));
    zps_barrier_shard_fini(&s);
    /* Worker 3 evicted: it holds nobody back. */
    shard(&s, "bsp", 0, 0, 812, "813,812,813,812", "true,true,true,false");
    zps_barrier_wait(&s, &w);
    assert_int_equal(w.count, 1);
    zps_barrier_line(&s, &w, -1, line, sizeof(line));
    assert_string_equal(line, "clock 812: waiting for worker 1, last heard 14 s ago");
    zps_barrier_shard_fini(&s);
    /* Nobody pushed 812 yet: everyone computes, nothing holds. */
    shard(&s, "bsp", 0, 0, 812, "812,812,812,812", "true,true,true,true");
    zps_barrier_wait(&s, &w);
    assert_false(w.holding);
    assert_int_equal(zps_barrier_line(&s, &w, 3, line, sizeof(line)), 0);
    assert_string_equal(line, "");
    zps_barrier_shard_fini(&s);
    /* One backup: the quorum is 3, two are in, one more push of 1 or 3 will do. */
    shard(&s, "bsp", 0, 1, 812, "813,812,813,812", "true,true,true,true");
    zps_barrier_wait(&s, &w);
    assert_true(w.holding);
    assert_int_equal(w.needed, 1);
    assert_int_equal(w.count, 2);
    zps_barrier_line(&s, &w, -1, line, sizeof(line));
    assert_non_null(strstr(line, "waiting for 1 push of worker 1"));
    zps_barrier_shard_fini(&s);
    /* Three of four in with one backup: the step is due, nothing holds. */
    shard(&s, "bsp", 0, 1, 812, "813,813,813,812", "true,true,true,true");
    zps_barrier_wait(&s, &w);
    assert_false(w.holding);
    zps_barrier_shard_fini(&s);
}

static void test_ssp_asp(void **state)
{
    (void)state;
    zps_barrier_shard_t s;
    zps_barrier_wait_t w;
    /* s = 3; fastest worker 2 pulls clock 20 next: needs pushed[u] >= 17.
     * Worker 0 (16) holds it; worker 1 (17) and 3 (18) do not. */
    shard(&s, "ssp", 3, 0, 70, "16,17,20,18", "true,true,true,true");
    zps_barrier_wait(&s, &w);
    assert_true(w.holding);
    assert_int_equal(w.clock, 20);
    assert_int_equal(w.count, 1);
    assert_int_equal(w.rank[0], 0);
    zps_barrier_shard_fini(&s);
    /* Within the bound: nothing holds. */
    shard(&s, "ssp", 3, 0, 70, "17,17,20,18", "true,true,true,true");
    zps_barrier_wait(&s, &w);
    assert_false(w.holding);
    zps_barrier_shard_fini(&s);
    /* ASP never waits. */
    shard(&s, "asp", 0, 0, 70, "1,17,20,18", "true,true,true,true");
    zps_barrier_wait(&s, &w);
    assert_false(w.holding);
    zps_barrier_shard_fini(&s);
}

static void test_bad_stats(void **state)
{
    (void)state;
    const char *bad[] = {
        "[]",
        "{\"shard\":0}",
        "{\"shard\":0,\"initialized\":true,\"version\":1,\"min_clock\":0,\"mode\":\"xsp\","
        "\"staleness_bound\":0,\"backup_workers\":0,\"workers\":1,\"clocks\":[1],"
        "\"live\":[true],\"silent_ms\":[1]}",
        "{\"shard\":0,\"initialized\":true,\"version\":1,\"min_clock\":0,\"mode\":\"bsp\","
        "\"staleness_bound\":0,\"backup_workers\":0,\"workers\":2,\"clocks\":[1],"
        "\"live\":[true],\"silent_ms\":[1]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        zps_json_t *o = NULL;
        assert_int_equal(zps_json_parse(bad[i], &o, NULL, 0), 0);
        zps_barrier_shard_t s;
        assert_int_equal(zps_barrier_shard_parse(o, &s), ZPS_EINVAL);
        zps_json_free(o);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bsp),
        cmocka_unit_test(test_ssp_asp),
        cmocka_unit_test(test_bad_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
