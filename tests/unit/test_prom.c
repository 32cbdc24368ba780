/*
 * test_prom.c - a worker's Prometheus text (worker/prom.c): the counters
 * add up what the step records say, by part, and the gauges are the last
 * step's and the last evaluation's.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prom.h"

/* The value of the series line that starts with `series` ("name{labels}"), or NAN. */
static double value_of(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return NAN;
}

static void test_steps_and_parts(void **state)
{
    (void)state;
    zps_prom_t p;
    zps_prom_init(&p, 2);
    zps_step_record_t r;
    memset(&r, 0, sizeof(r));
    r.clock = 7;
    r.batch = 16;
    r.loss = 0.5;
    r.clock_lag = 1;
    r.data_ms = 1.0;
    r.forward_ms = 2.0;
    r.backward_ms = 3.0;
    r.pull_ms = 4.0;
    r.push_ms = 5.0;
    r.pad_ms = 6.0;
    r.step_ms = 21.0;
    zps_prom_step(&p, &r);
    r.clock = 8;
    r.batch = 10;
    r.loss = 0.25;
    r.clock_lag = 0;
    r.dropped = true;
    zps_prom_step(&p, &r);

    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_prom_text(&p, &b);
    char *text = zps_strbuf_take(&b);
    assert_non_null(text);
    assert_true(value_of(text, "zps_worker_steps_total{rank=\"2\"}") == 2.0);
    assert_true(value_of(text, "zps_worker_examples_total{rank=\"2\"}") == 26.0);
    assert_true(value_of(text, "zps_worker_pushes_dropped_total{rank=\"2\"}") == 1.0);
    assert_true(fabs(value_of(text, "zps_worker_step_duration_seconds_total{rank=\"2\"}") - 0.042) <
                1e-12);
    assert_true(fabs(value_of(text, "zps_worker_step_seconds_total{rank=\"2\",part=\"pull\"}") -
                     0.008) < 1e-9);
    assert_true(fabs(value_of(text, "zps_worker_step_seconds_total{rank=\"2\",part=\"pad\"}") -
                     0.012) < 1e-9);
    assert_true(value_of(text, "zps_worker_step_seconds_total{rank=\"2\",part=\"copy\"}") == 0.0);
    assert_true(value_of(text, "zps_worker_next_clock{rank=\"2\"}") == 9.0);
    assert_true(value_of(text, "zps_worker_loss{rank=\"2\"}") == 0.25);
    assert_true(value_of(text, "zps_worker_pull_clock_lag_clocks{rank=\"2\"}") == 0.0);
    /* No evaluation yet: no accuracy series. */
    assert_true(isnan(value_of(text, "zps_worker_test_accuracy{rank=\"2\"}")));
    /* Each metric is declared once, before its series. */
    assert_non_null(strstr(text, "# TYPE zps_worker_step_seconds_total counter\n"));
    assert_null(strstr(strstr(text, "# TYPE zps_worker_step_seconds_total") + 1,
                       "# TYPE zps_worker_step_seconds_total"));
    free(text);

    zps_eval_record_t e;
    memset(&e, 0, sizeof(e));
    e.loss = 0.4;
    e.accuracy = 0.875;
    zps_prom_eval(&p, &e);
    zps_strbuf_init(&b);
    zps_prom_text(&p, &b);
    text = zps_strbuf_take(&b);
    assert_true(value_of(text, "zps_worker_test_accuracy{rank=\"2\"}") == 0.875);
    assert_true(value_of(text, "zps_worker_evaluations_total{rank=\"2\"}") == 1.0);
    free(text);
}

static void test_nothing_yet(void **state)
{
    (void)state;
    zps_prom_t p;
    zps_prom_init(&p, -1);
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_prom_text(&p, &b);
    char *text = zps_strbuf_take(&b);
    assert_true(value_of(text, "zps_worker_steps_total{rank=\"-1\"}") == 0.0);
    assert_true(isnan(value_of(text, "zps_worker_loss{rank=\"-1\"}")));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps_and_parts),
        cmocka_unit_test(test_nothing_yet),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
