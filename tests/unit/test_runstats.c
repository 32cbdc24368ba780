/*
 * test_runstats.c - `zps launch`'s figures (tool/runstats.c) from metrics
 * lines and STATS replies written by hand, against values worked out by hand
 * in the comments; and the JSON reader they rest on (common/json.c).
 */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "error.h"
#include "json.h"
#include "runstats.h"

/* ---- json ---- */

static void test_json_values(void **state)
{
    (void)state;
    zps_json_t *v = NULL;
    const char *text = " {\"a\": 1.5, \"b\": [true, false, null, \"x\\\"y\\n\"], "
                       "\"c\": {\"d\": -2e3}, \"e\": []} ";
    assert_int_equal(zps_json_parse(text, &v, NULL, 0), 0);
    assert_int_equal(v->type, ZPS_JSON_OBJECT);
    assert_true(zps_json_number(zps_json_get(v, "a"), 0) == 1.5);
    const zps_json_t *b = zps_json_get(v, "b");
    assert_int_equal(b->count, 4);
    assert_true(zps_json_at(b, 0)->boolean);
    assert_false(zps_json_at(b, 1)->boolean);
    assert_int_equal(zps_json_at(b, 2)->type, ZPS_JSON_NULL);
    assert_string_equal(zps_json_string(zps_json_at(b, 3)), "x\"y\n");
    assert_null(zps_json_at(b, 4));
    assert_true(zps_json_number(zps_json_get(zps_json_get(v, "c"), "d"), 0) == -2000);
    assert_int_equal(zps_json_get(v, "e")->count, 0);
    assert_null(zps_json_get(v, "missing"));
    assert_true(zps_json_number(zps_json_get(v, "b"), 7) == 7); /* not a number */
    zps_json_free(v);
}

static void test_json_errors(void **state)
{
    (void)state;
    const char *bad[] = {"",      "{",        "[1,]",  "{\"a\" 1}", "tru",   "{} x",
                         "\"abc", "{\"a\":}", "[1 2]", "-",         "{1:2}", "\"\\q\""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        zps_json_t *v = (zps_json_t *)0x1;
        char err[128] = "";
        assert_int_equal(zps_json_parse(bad[i], &v, err, sizeof(err)), ZPS_EINVAL);
        assert_true(v == (zps_json_t *)0x1); /* untouched */
        assert_true(err[0] != '\0');
    }
    /* 65 levels of nesting are refused, 64 are fine. */
    char deep[200];
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    deep[130] = '\0';
    zps_json_t *v = NULL;
    assert_int_equal(zps_json_parse(deep, &v, NULL, 0), ZPS_EINVAL);
    assert_int_equal(zps_json_parse(deep + 1, &v, NULL, 0), ZPS_EINVAL); /* unbalanced */
    deep[129] = '\0';
    assert_int_equal(zps_json_parse(deep + 1, &v, NULL, 0), 0);
    zps_json_free(v);
}

/* ---- runstats ---- */

/* A step line: loss, batch, times in ms, clock lag in clocks. */
static void step(zps_runstats_t *rs, unsigned rank, unsigned clock, double wall, double elapsed,
                 double loss, double pull, double step_ms, int dropped, unsigned lag)
{
    char line[1024];
    snprintf(line, sizeof(line),
             "{\"type\":\"step\",\"rank\":%u,\"clock\":%u,\"epoch\":0,\"step\":%u,\"wall\":%.6f,"
             "\"elapsed\":%.6f,\"loss\":%g,\"batch\":10,\"version\":0,\"clock_lag\":%u,"
             "\"data_ms\":0.25,\"forward_ms\":0.25,\"backward_ms\":0.25,\"copy_ms\":0.25,"
             "\"pull_ms\":%g,\"push_ms\":2,\"update_ms\":0,\"pad_ms\":4,\"delay_ms\":1,"
             "\"slowdown_ms\":1,\"intermittent_ms\":0,\"fixed_delay_ms\":0,\"random_delay_ms\":0,"
             "\"pause_ms\":0,\"dropped\":%s,\"step_ms\":%g}",
             rank, clock, clock, wall, elapsed, loss, lag, pull, dropped ? "true" : "false",
             step_ms);
    assert_int_equal(zps_runstats_add_line(rs, rank, line), 0);
}

static void eval(zps_runstats_t *rs, unsigned clock, double wall, double elapsed, double acc,
                 int final)
{
    char line[512];
    snprintf(line, sizeof(line),
             "{\"type\":\"eval\",\"rank\":0,\"clock\":%u,\"epoch\":%g,\"wall\":%.6f,"
             "\"elapsed\":%.6f,\"test_loss\":0.5,\"test_accuracy\":%g,\"examples\":100,"
             "\"eval_ms\":1,\"final\":%s}",
             clock, clock / 10.0, wall, elapsed, acc, final ? "true" : "false");
    assert_int_equal(zps_runstats_add_line(rs, 0, line), 0);
}

/*
 * Two workers, training start 1000.0 (worker 0's wall - elapsed), four clocks
 * each ending at 1000.1 ... 1000.4; worker 1 pushes one more step at 1000.9,
 * after the final evaluation at 1000.5 (a dropped straggler step), which the
 * span excludes. Evaluations: 0.80 at 0.2 s, 0.86 at 0.3 s, final 0.87 at 0.5 s.
 * Clock lags: worker 0 has t % 2, worker 1 has t, its late step 7.
 */
static zps_runstats_t *fixture(void)
{
    zps_runstats_t *rs = NULL;
    assert_int_equal(zps_runstats_new(2, 2, &rs), 0);
    assert_int_equal(
        zps_runstats_add_line(rs, 0,
                              "{\"type\":\"run\",\"clocks\":4,\"steps_per_epoch\":10,"
                              "\"batch\":10,\"base_step_ms\":5,\"straggler\":"
                              "\"base step 5 ms\",\"model\":\"mlp:4-2\",\"data\":\"d\"}"),
        0);
    for (unsigned t = 0; t < 4; t++) {
        step(rs, 0, t, 1000.1 + 0.1 * t, 0.1 + 0.1 * t, 2.0, 3.0, 10.0, 0, t % 2);
        step(rs, 1, t, 1000.1 + 0.1 * t, 0.2 + 0.1 * t, 1.0, 1.0, 10.0, t == 3, t);
    }
    step(rs, 1, 4, 1000.9, 1.0, 1.0, 1.0, 10.0, 1, 7);
    eval(rs, 2, 1000.2, 0.2, 0.80, 0);
    eval(rs, 3, 1000.3, 0.3, 0.86, 0);
    eval(rs, 4, 1000.5, 0.5, 0.87, 1);
    /* Update staleness: shard 0 has 0 x6, 1 x2, 5 x2 (max 5); shard 1 has 0 x8, 70 x2 (overflow,
     * max 70).
     */
    assert_int_equal(zps_runstats_add_server(rs, 0,
                                             "{\"version\":4,\"counts\":{\"dropped\":1},"
                                             "\"update_staleness\":{\"count\":10,\"max\":5,"
                                             "\"mean\":1.2,"
                                             "\"p50\":0,\"p99\":5,\"histogram\":{\"0\":6,\"1\":2,"
                                             "\"5\":2}},\"pull_wait\":{\"p50_ms\":1,\"p99_ms\":2,"
                                             "\"max_ms\":3,\"mean_ms\":1.5}}"),
                     0);
    assert_int_equal(zps_runstats_add_server(rs, 1,
                                             "{\"version\":4,\"counts\":{\"dropped\":2},"
                                             "\"update_staleness\":{\"count\":10,\"max\":70,"
                                             "\"mean\":14,"
                                             "\"p50\":0,\"p99\":70,\"histogram\":{\"0\":8,"
                                             "\">=64\":2}}}"),
                     0);
    return rs;
}

static const double targets[] = {0.85, 0.9};

static zps_run_info_t info(void)
{
    zps_run_info_t in;
    memset(&in, 0, sizeof(in));
    in.name = "t";
    in.mode = "asp";
    in.targets = targets;
    in.target_count = 2;
    in.wall_seconds = 3.25;
    in.status = "ok";
    return in;
}

static void test_summary(void **state)
{
    (void)state;
    zps_runstats_t *rs = fixture();
    zps_run_info_t in = info();
    char *text = zps_runstats_summary(rs, &in);
    assert_non_null(text);
    zps_json_t *s = NULL;
    char err[128];
    assert_int_equal(zps_json_parse(text, &s, err, sizeof(err)), 0);
    free(text);

    assert_string_equal(zps_json_string(zps_json_get(s, "mode")), "asp");
    assert_true(zps_json_number(zps_json_get(s, "final_test_accuracy"), 0) == 0.87);
    assert_true(zps_json_number(zps_json_get(s, "wall_seconds"), 0) == 3.25);
    /* Training span: 1000.0 to 1000.5. */
    assert_true(fabs(zps_json_number(zps_json_get(s, "train_seconds"), 0) - 0.5) < 1e-9);
    /* Examples: 8 steps of 10 within the span (the step at 1000.9 is out): 80 / 0.5 s. */
    assert_true(fabs(zps_json_number(zps_json_get(s, "examples_per_second"), 0) - 160) < 1e-6);
    const zps_json_t *to = zps_json_get(s, "seconds_to_target");
    assert_true(zps_json_number(zps_json_get(to, "0.85"), 0) == 0.3);
    assert_int_equal(zps_json_get(to, "0.9")->type, ZPS_JSON_NULL);
    assert_true(zps_json_number(zps_json_get(zps_json_get(s, "epochs_to_target"), "0.85"), 0) ==
                0.3);
    /* Pull share: (4 * 3 + 4 * 1) / (8 * 10) = 0.2. */
    assert_true(fabs(zps_json_number(zps_json_get(s, "pull_wait_share"), 0) - 0.2) < 1e-9);
    /* Dropped within the span: worker 1's clock 3. */
    assert_true(zps_json_number(zps_json_get(s, "pushes_dropped"), -1) == 1);
    /* Update staleness, merged histogram of 20: 0 x14, 1 x2, 5 x2, >=64 x2. p50: 10th sample is 0;
     * p99: need 19 -> overflow -> max 70. Mean (1.2 * 10 + 14 * 10) / 20 = 7.6. */
    const zps_json_t *st = zps_json_get(s, "update_staleness");
    assert_true(zps_json_number(zps_json_get(st, "count"), 0) == 20);
    assert_true(zps_json_number(zps_json_get(st, "p50"), -1) == 0);
    assert_true(zps_json_number(zps_json_get(st, "p99"), -1) == 70);
    assert_true(zps_json_number(zps_json_get(st, "max"), -1) == 70);
    assert_true(fabs(zps_json_number(zps_json_get(st, "mean"), 0) - 7.6) < 1e-9);
    assert_true(zps_json_number(zps_json_get(zps_json_get(st, "histogram"), ">=64"), 0) == 2);
    /* Clock lag of the 8 steps in the span: 0 0 0 1 1 1 2 3 (the late 7 is out).
     * p50: need 4 -> 1; p99: need floor(7.92) = 7 -> 2; mean 8 / 8. */
    const zps_json_t *lag = zps_json_get(s, "clock_lag");
    assert_true(zps_json_number(zps_json_get(lag, "count"), 0) == 8);
    assert_true(zps_json_number(zps_json_get(lag, "p50"), -1) == 1);
    assert_true(zps_json_number(zps_json_get(lag, "p99"), -1) == 2);
    assert_true(zps_json_number(zps_json_get(lag, "max"), -1) == 3);
    assert_true(fabs(zps_json_number(zps_json_get(lag, "mean"), 0) - 1.0) < 1e-9);
    assert_true(zps_json_number(zps_json_get(s, "server_pushes_dropped"), 0) == 2);
    /* Per worker 1: 4 steps; compute 1 ms a step (data, forward, backward and a cuda backend's
     * copies, 0.25 each), pad 4, delay 1, pull 1, push 2 -> other 1. */
    const zps_json_t *w1 = zps_json_at(zps_json_get(s, "per_worker"), 1);
    assert_true(zps_json_number(zps_json_get(w1, "steps"), 0) == 4);
    assert_true(fabs(zps_json_number(zps_json_get(w1, "compute_s"), 0) - 0.004) < 1e-9);
    assert_true(fabs(zps_json_number(zps_json_get(w1, "other_s"), 0) - 0.004) < 1e-9);
    assert_string_equal(zps_json_string(zps_json_at(zps_json_get(s, "stragglers"), 0)),
                        "base step 5 ms");
    assert_int_equal(zps_json_at(zps_json_get(s, "stragglers"), 1)->type, ZPS_JSON_NULL);
    /* A fixed assignment's examples seen: the 9 steps of 10 but the 2 dropped ones. */
    assert_string_equal(zps_json_string(zps_json_get(s, "data_assignment")), "static");
    assert_true(zps_json_number(zps_json_get(s, "examples_seen"), 0) == 70);
    const zps_json_t *per = zps_json_get(s, "examples_seen_per_epoch");
    assert_int_equal(per->count, 1);
    assert_true(zps_json_number(zps_json_at(per, 0), 0) == 70);
    zps_json_free(s);

    /* A shared one's are shard 0's audit, whatever the workers recorded. */
    const char *audit = "{\"version\":4,\"assignment\":{\"examples_per_epoch\":[100,40]}}";
    assert_int_equal(zps_runstats_add_server(rs, 0, audit), 0);
    in.shared = true;
    text = zps_runstats_summary(rs, &in);
    assert_int_equal(zps_json_parse(text, &s, err, sizeof(err)), 0);
    free(text);
    assert_string_equal(zps_json_string(zps_json_get(s, "data_assignment")), "shared");
    assert_true(zps_json_number(zps_json_get(s, "examples_seen"), 0) == 140);
    per = zps_json_get(s, "examples_seen_per_epoch");
    assert_int_equal(per->count, 2);
    assert_true(zps_json_number(zps_json_at(per, 1), 0) == 40);
    zps_json_free(s);
    zps_runstats_free(rs);
}

/*
 * The evaluator's lines (rank -1, `elapsed` from its own start): placed on
 * the training's time line by their wall clock. Training start 1000.0 (worker
 * 0's first step line: wall 1000.1, elapsed 0.1); the evaluator started at
 * 999.5, so its own elapsed values are 0.7 s larger than the training's.
 */
static void test_evaluator_lines(void **state)
{
    (void)state;
    zps_runstats_t *rs = NULL;
    assert_int_equal(zps_runstats_new(1, 1, &rs), 0);
    for (unsigned t = 0; t < 4; t++)
        step(rs, 0, t, 1000.1 + 0.1 * t, 0.1 + 0.1 * t, 1.0, 1.0, 10.0, 0, 0);
    const char *ev[] = {
        "{\"type\":\"run\",\"mode\":\"evaluator\",\"clocks\":99}",
        "{\"type\":\"eval\",\"rank\":-1,\"clock\":2,\"epoch\":0.2,\"wall\":1000.25,"
        "\"elapsed\":0.75,\"test_loss\":0.5,\"test_accuracy\":0.84,\"version_min\":2,"
        "\"version_max\":2,\"examples\":100,\"eval_ms\":1,\"final\":false}",
        "{\"type\":\"eval\",\"rank\":-1,\"clock\":4,\"epoch\":0.4,\"wall\":1000.45,"
        "\"elapsed\":0.95,\"test_loss\":0.4,\"test_accuracy\":0.86,\"version_min\":4,"
        "\"version_max\":4,\"examples\":100,\"eval_ms\":1,\"final\":true}",
    };
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(zps_runstats_add_eval_line(rs, ev[i]), 0);
    assert_int_equal(zps_runstats_add_eval_line(rs, "[1]"), ZPS_EINVAL);

    double sec = -1;
    uint64_t clock = 0;
    assert_true(zps_runstats_target(rs, 0.85, &sec, &clock));
    assert_true(fabs(sec - 0.45) < 1e-9); /* 1000.45 - 1000.0, not its own 0.95 */
    assert_int_equal(clock, 4);
    assert_true(zps_runstats_target(rs, 0.84, &sec, &clock));
    assert_true(fabs(sec - 0.25) < 1e-9);
    assert_int_equal(clock, 2);
    assert_false(zps_runstats_target(rs, 0.9, &sec, &clock));

    zps_runstats_result_t res;
    zps_runstats_result(rs, &res);
    assert_true(res.final_accuracy == 0.86);
    assert_int_equal(res.final_clock, 4);
    /* From the training start to when the final model existed. */
    assert_true(fabs(res.train_seconds - 0.45) < 1e-9);
    zps_runstats_free(rs);
}

static void test_live(void **state)
{
    (void)state;
    zps_runstats_t *rs = fixture();
    zps_runstats_live_t lv;
    /* At 1000.5 the window [995.5, 1000.5] holds the 8 steps before it. */
    zps_runstats_live(rs, 1000.5, &lv);
    assert_int_equal(lv.clock_min, 4);
    assert_int_equal(lv.clock_max, 5);
    assert_int_equal(lv.clocks, 4);
    assert_true(fabs(lv.seconds - 0.5) < 1e-9);
    /* 9 steps of 10 examples (the one at 1000.9 is later than now but inside
     * the window's lower bound) over the 0.5 s since the start. */
    assert_true(fabs(lv.examples_per_second - 180) < 1e-6);
    assert_true(fabs(lv.loss - 13.0 / 9.0) < 1e-9);
    assert_true(lv.test_accuracy == 0.87);
    assert_true(lv.have_update_staleness && lv.update_staleness_p50 == 0 &&
                lv.update_staleness_max == 70);
    /* Every step so far, the late one too. */
    assert_true(lv.have_clock_lag && lv.clock_lag_max == 7);
    zps_runstats_free(rs);
}

static void test_tables(void **state)
{
    (void)state;
    zps_runstats_t *rs = fixture();
    zps_run_info_t in = info();
    char dir[] = "/tmp/zps-runstats-XXXXXX";
    assert_non_null(mkdtemp(dir));
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(dfd >= 0);
    assert_int_equal(zps_runstats_write_tables(rs, &in, dfd), 0);
    char path[256], line[1024];
    snprintf(path, sizeof(path), "%s/summary.tsv", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof(line), f)); /* header */
    assert_int_equal(strncmp(line, "# name\tstatus\tmode", 18), 0);
    assert_non_null(strstr(line, "\tseconds_to_0.85\tseconds_to_0.9\n"));
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    assert_string_equal(line, "t\tok\tasp\t0\t0\tnone\t2\t2\t5.000\t0.8700\t0.500\t3.250\t160.0\t"
                              "0.2000\t0\t70\t70\t1\t0.300\tNA\n");
    const char *names[] = {"summary.tsv", "eval.tsv", "loss.tsv", "update_staleness.tsv",
                           "workers.tsv"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        assert_int_equal(access(path, R_OK), 0);
        unlink(path);
    }
    /* A name planted in the folder, a link to a file of ours, is not
     * written through: that table fails, the file keeps its bytes, and the
     * other tables are still written. */
    char victim[300];
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    f = fopen(victim, "w");
    assert_non_null(f);
    fputs("keep me\n", f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/loss.tsv", dir);
    assert_int_equal(symlink(victim, path), 0);
    assert_int_equal(zps_runstats_write_tables(rs, &in, dfd), ZPS_EIO);
    f = fopen(victim, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof(line), f));
    assert_null(fgets(line + 100, 100, f));
    fclose(f);
    assert_string_equal(line, "keep me\n");
    unlink(path);
    unlink(victim);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        assert_int_equal(access(path, R_OK), strcmp(names[i], "loss.tsv") == 0 ? -1 : 0);
        unlink(path);
    }
    close(dfd);
    rmdir(dir);
    zps_runstats_free(rs);
}

static void test_bad_input(void **state)
{
    (void)state;
    zps_runstats_t *rs = NULL;
    assert_int_equal(zps_runstats_new(0, 1, &rs), ZPS_EINVAL);
    assert_int_equal(zps_runstats_new(1, 1, &rs), 0);
    assert_int_equal(zps_runstats_add_line(rs, 1, "{}"), ZPS_EINVAL);        /* no such rank */
    assert_int_equal(zps_runstats_add_line(rs, 0, "{\"type\""), ZPS_EINVAL); /* torn line */
    assert_int_equal(zps_runstats_add_line(rs, 0, "[1]"), ZPS_EINVAL);
    assert_int_equal(zps_runstats_add_line(rs, 0, "{\"type\":\"other\"}"), 0);
    assert_int_equal(zps_runstats_add_server(rs, 1, "{}"), ZPS_EINVAL);
    /* Nothing known: every figure is null, nothing crashes. */
    zps_run_info_t in = info();
    char *text = zps_runstats_summary(rs, &in);
    zps_json_t *s = NULL;
    assert_int_equal(zps_json_parse(text, &s, NULL, 0), 0);
    assert_int_equal(zps_json_get(s, "final_test_accuracy")->type, ZPS_JSON_NULL);
    assert_int_equal(zps_json_get(s, "train_seconds")->type, ZPS_JSON_NULL);
    assert_int_equal(zps_json_get(zps_json_get(s, "update_staleness"), "p50")->type, ZPS_JSON_NULL);
    assert_int_equal(zps_json_get(zps_json_get(s, "clock_lag"), "max")->type, ZPS_JSON_NULL);
    zps_json_free(s);
    free(text);
    zps_runstats_free(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_values),     cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_summary),         cmocka_unit_test(test_live),
        cmocka_unit_test(test_tables),          cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_evaluator_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
