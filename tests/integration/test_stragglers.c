/*
 * test_stragglers.c - injected stragglers in a real cluster (`zps launch`,
 * 2 servers, 3 workers, a small MLP, base step 10 ms):
 *   worker 0: a random exponential delay, mean 5 ms
 *   worker 1: slowdown 3 (each step's work takes 3 x 10 ms)
 *   worker 2: a fixed 30 ms per step and a 300 ms pause at clock 20
 * run once under ASP and once under BSP with the same seed.
 *
 * Checks: every delay the schedule asked for is in the metrics and was slept
 * (measured delay_ms against the asked parts); the slowed workers' steps,
 * measured from their step times alone, are as long as asked; under BSP the
 * other workers' pulls wait for the straggler, under ASP they do not.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "launch_util.h"

#define CLOCKS 60

typedef struct run {
    char tmp[256];
    char dir[400];
} run_t;

static void launch_mode(run_t *r, const char *mode)
{
    lu_tmpdir(r->tmp, sizeof(r->tmp));
    char runs[320];
    snprintf(runs, sizeof(runs), "%s/runs", r->tmp);
    snprintf(r->dir, sizeof(r->dir), "%s/%s", runs, mode);
    /* A small model keeps the messages (and the CPU they cost) small, so
     * that the measured times are the injected ones even in a sanitizer
     * build on a busy machine. */
    bool fashion = lu_have_fashion();
    const char *data = fashion ? "--data=fashion-mnist" : "--data=synthetic:n=4000,test=500,dim=8";
    const char *model = fashion ? "mlp:784-16-10" : "linear:8";
    const char *args[] = {"--runs-dir",
                          runs,
                          "--name",
                          mode,
                          "--mode",
                          mode,
                          "--servers",
                          "2",
                          "--workers",
                          "3",
                          "--clocks",
                          "60",
                          "--batch",
                          "16",
                          "--backend",
                          "cpu",
                          "--model",
                          model,
                          "--eval-every",
                          "0",
                          "--base-step-ms",
                          "10",
                          "--seed",
                          "5",
                          "--straggler",
                          "0:random-delay=exp:5",
                          "--straggler",
                          "1:slowdown=3",
                          "--straggler",
                          "2:delay=30,pause-at=20:300",
                          data,
                          "--quiet",
                          "--no-progress",
                          NULL};
    int rc = lu_run(r->tmp, args, 120);
    if (rc != 0) {
        char path[512];
        snprintf(path, sizeof(path), "%s/stderr", r->tmp);
        char *err = lu_read(path);
        fail_msg("%s run exited %d:\n%s", mode, rc, err ? err : "");
    }
    assert_true(lu_all_gone(r->dir));
}

static double num(const zps_json_t *o, const char *key)
{
    return zps_json_number(zps_json_get(o, key), NAN);
}

/* Measured sleep against the schedule's parts, over one worker's steps. */
typedef struct delay_check {
    size_t n;
    double diffs[CLOCKS];
    double max_abs;
    size_t off; /* steps whose measured delay is more than 5 ms from the asked one */
    double pause_at_20, pause_elsewhere, fixed_min, fixed_max;
    double work[CLOCKS]; /* step - pull - push: compute, padding and delay, measured */
    size_t work_n;
} delay_check_t;

static void check_step(const zps_json_t *s, void *arg)
{
    delay_check_t *c = arg;
    double asked = num(s, "slowdown_ms") + num(s, "intermittent_ms") + num(s, "fixed_delay_ms") +
                   num(s, "random_delay_ms") + num(s, "pause_ms");
    double diff = fabs(num(s, "delay_ms") - asked);
    if (c->n < CLOCKS)
        c->diffs[c->n] = diff;
    if (diff > c->max_abs)
        c->max_abs = diff;
    c->off += diff > 5.0;
    c->n++;
    double clock = num(s, "clock");
    if (clock == 20)
        c->pause_at_20 = num(s, "pause_ms");
    else
        c->pause_elsewhere += num(s, "pause_ms");
    double fixed = num(s, "fixed_delay_ms");
    if (c->n == 1 || fixed < c->fixed_min)
        c->fixed_min = fixed;
    if (c->n == 1 || fixed > c->fixed_max)
        c->fixed_max = fixed;
    if (clock != 20 && c->work_n < CLOCKS)
        c->work[c->work_n++] = num(s, "step_ms") - num(s, "pull_ms") - num(s, "push_ms");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of a worker's measured step work (the same reasoning as for delays below). */
static double median_work(delay_check_t *c)
{
    qsort(c->work, c->work_n, sizeof(double), cmp_double);
    size_t n = c->work_n;
    return n == 0 ? 0 : n % 2 ? c->work[n / 2] : (c->work[n / 2 - 1] + c->work[n / 2]) / 2.0;
}

static delay_check_t check_worker(const run_t *r, int rank)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/worker-%d.jsonl", r->dir, rank);
    delay_check_t c;
    memset(&c, 0, sizeof(c));
    assert_int_equal(lu_each_step(path, check_step, &c), CLOCKS);
    /* Sleeps overshoot by scheduler latency: tenths of a millisecond on an
     * idle machine, a few on a busy one, and now and then tens when the
     * cores are taken (more so in the sanitizer build). A schedule that is
     * wrong shows in the typical step; scheduling noise only in a minority of
     * steps, and one late wake-up of a few hundred ms must not move the
     * verdict, so the median is judged, not the mean. */
    double sorted[CLOCKS];
    memcpy(sorted, c.diffs, sizeof(sorted));
    qsort(sorted, CLOCKS, sizeof(double), cmp_double);
    double median = (sorted[CLOCKS / 2 - 1] + sorted[CLOCKS / 2]) / 2.0;
    if (!(median < 1.5 && c.off * 5 <= c.n))
        fail_msg("worker %d: measured delays differ from the asked ones by %.3f ms (median), "
                 "%.3f at most, by more than 5 ms in %zu of %zu steps",
                 rank, median, c.max_abs, c.off, c.n);
    return c;
}

static double mean_of(const run_t *r, int rank, const char *key, unsigned first)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/worker-%d.jsonl", r->dir, rank);
    size_t n = 0;
    double m = lu_step_mean(path, key, first, &n);
    assert_true(n > 0);
    return m;
}

static run_t asp_run, bsp_run;

static int setup(void **state)
{
    (void)state;
    launch_mode(&asp_run, "asp");
    launch_mode(&bsp_run, "bsp");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    lu_rmtree(asp_run.tmp);
    lu_rmtree(bsp_run.tmp);
    return 0;
}

static void test_delays_as_asked(void **state)
{
    (void)state;
    const run_t *runs[2] = {&asp_run, &bsp_run};
    for (int k = 0; k < 2; k++) {
        const run_t *r = runs[k];
        delay_check_t w0 = check_worker(r, 0);
        delay_check_t w1 = check_worker(r, 1);
        delay_check_t w2 = check_worker(r, 2);

        /* Worker 2: 30 ms fixed on every step, the pause exactly once. */
        assert_true(w2.fixed_min == 30 && w2.fixed_max == 30);
        assert_true(w2.pause_at_20 == 300);
        assert_true(w2.pause_elsewhere == 0);
        /* Measured from its step times (the median step): compute padded to
         * 10 ms, plus 30. */
        double work2 = median_work(&w2);
        if (fabs(work2 - 40) > 3)
            fail_msg("worker 2's steps take %.2f ms without pull and push, expected 40", work2);
        assert_true(w0.fixed_max == 0 && w1.fixed_max == 0);

        /* Worker 1: slowdown 3 of a 10 ms padded step is 20 ms more: 30 in all. */
        double slow1 = mean_of(r, 1, "slowdown_ms", 0);
        assert_true(slow1 >= 20 && slow1 < 23);
        double work1 = median_work(&w1);
        if (fabs(work1 - 30) > 3)
            fail_msg("worker 1's steps take %.2f ms without pull and push, expected 30", work1);

        /* Worker 0: exponential delays with mean 5 ms (sd of a 60-step mean: 0.65). */
        double rnd0 = mean_of(r, 0, "random_delay_ms", 0);
        assert_true(fabs(rnd0 - 5) < 2.6);
        assert_true(mean_of(r, 0, "slowdown_ms", 0) == 0);
        (void)w0;
    }
}

/* The same seed gives both runs the same straggler events. */
static void test_same_events_in_both_modes(void **state)
{
    (void)state;
    assert_true(mean_of(&asp_run, 0, "random_delay_ms", 0) ==
                mean_of(&bsp_run, 0, "random_delay_ms", 0));
}

static void test_pull_waits(void **state)
{
    (void)state;
    /* Worker 0's step is ~15 ms of its own; worker 2's is ~40. Under BSP
     * every pull waits for worker 2, so worker 0 waits ~25 ms a step; under
     * ASP it never waits. Clock 20 (the pause) is in both means. */
    double asp0 = mean_of(&asp_run, 0, "pull_ms", 1);
    double bsp0 = mean_of(&bsp_run, 0, "pull_ms", 1);
    double asp1 = mean_of(&asp_run, 1, "pull_ms", 1);
    double bsp1 = mean_of(&bsp_run, 1, "pull_ms", 1);
    fprintf(stderr, "mean pull_ms: worker 0 asp %.2f bsp %.2f; worker 1 asp %.2f bsp %.2f\n", asp0,
            bsp0, asp1, bsp1);
    assert_true(asp0 < 10);
    assert_true(bsp0 > 18);
    assert_true(bsp0 > asp0 + 12);
    assert_true(bsp1 > asp1 + 5);
    /* The run folders' summaries say the same. */
    char path[512];
    snprintf(path, sizeof(path), "%s/summary.json", bsp_run.dir);
    zps_json_t *b = lu_read_json(path);
    snprintf(path, sizeof(path), "%s/summary.json", asp_run.dir);
    zps_json_t *a = lu_read_json(path);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(num(b, "pull_wait_share") > num(a, "pull_wait_share") + 0.15);
    zps_json_free(a);
    zps_json_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delays_as_asked),
        cmocka_unit_test(test_same_events_in_both_modes),
        cmocka_unit_test(test_pull_waits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
