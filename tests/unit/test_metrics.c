/*
 * test_metrics.c - what a training process reports (worker/metrics.h): the
 * step and eval records written as the JSON lines docs/worker.md describes,
 * byte for byte and read back with the JSON reader; raw lines; errors; and
 * the progress line, plain and redrawn.
 */
#include <errno.h>
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
#include "metrics.h"

typedef struct fixture {
    char dir[64];
    char path[128];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/zps-test-metrics-XXXXXX");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    snprintf(f->path, sizeof(f->path), "%s/m.jsonl", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* The whole file; caller frees. */
static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    char *buf = calloc(1, 65536);
    assert_non_null(buf);
    size_t n = fread(buf, 1, 65535, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

static zps_step_record_t a_step(void)
{
    zps_step_record_t r = {
        .rank = 1,
        .clock = 12,
        .epoch = 3,
        .step = 0,
        .wall = 1700000000.5,
        .elapsed = 12.25,
        .loss = 0.5,
        .batch = 32,
        .version = 11,
        .clock_lag = 1,
        .data_ms = 1.5,
        .forward_ms = 2.25,
        .backward_ms = 3.125,
        .copy_ms = 0,
        .pull_ms = 4,
        .push_ms = 0.5,
        .update_ms = 0,
        .pad_ms = 1,
        .delay_ms = 2,
        .slowdown_ms = 0.25,
        .intermittent_ms = 0,
        .fixed_delay_ms = 1.75,
        .random_delay_ms = 0,
        .pause_ms = 0,
        .dropped = true,
        .step_ms = 20,
    };
    return r;
}

static zps_eval_record_t an_eval(void)
{
    zps_eval_record_t r = {
        .rank = -1,
        .clock = 100,
        .epoch = 1.5,
        .wall = 1700000001.25,
        .elapsed = 30,
        .loss = 0.4208,
        .accuracy = NAN,
        .n = 10000,
        .eval_ms = 55.5,
        .final = true,
        .have_versions = true,
        .version_min = 99,
        .version_max = 100,
    };
    return r;
}

static const char STEP_LINE[] =
    "{\"type\":\"step\",\"rank\":1,\"clock\":12,\"epoch\":3,\"step\":0,"
    "\"wall\":1700000000.500000,\"elapsed\":12.250000,\"loss\":0.5,\"batch\":32,\"version\":11,"
    "\"clock_lag\":1,\"data_ms\":1.500,\"forward_ms\":2.250,\"backward_ms\":3.125,"
    "\"copy_ms\":0.000,\"pull_ms\":4.000,\"push_ms\":0.500,\"update_ms\":0.000,\"pad_ms\":1.000,"
    "\"delay_ms\":2.000,\"slowdown_ms\":0.250,\"intermittent_ms\":0.000,"
    "\"fixed_delay_ms\":1.750,\"random_delay_ms\":0.000,\"pause_ms\":0.000,\"dropped\":true,"
    "\"step_ms\":20.000}";

static const char EVAL_LINE[] =
    "{\"type\":\"eval\",\"rank\":-1,\"clock\":100,\"epoch\":1.500000,\"wall\":1700000001.250000,"
    "\"elapsed\":30.000000,\"test_loss\":0.4208,\"test_accuracy\":null,\"version_min\":99,"
    "\"version_max\":100,\"examples\":10000,\"eval_ms\":55.500,\"final\":true}";

/* Each kind of line, exactly, one per line, in the order written. */
static void test_lines(void **state)
{
    fixture_t *f = *state;
    zps_metrics_t *m = NULL;
    char err[256] = "";
    assert_int_equal(zps_metrics_open(f->path, &m, err, sizeof(err)), 0);
    assert_int_equal(zps_metrics_raw(m, "{\"type\":\"run\",\"rank\":1}"), 0);
    zps_step_record_t s = a_step();
    assert_int_equal(zps_metrics_step(m, &s), 0);
    /* Flushed at once: the line is on disk before close. */
    char *early = slurp(f->path);
    assert_non_null(strstr(early, "\"type\":\"step\""));
    free(early);
    zps_eval_record_t e = an_eval();
    assert_int_equal(zps_metrics_eval(m, &e), 0);
    /* A training process's eval: a number for accuracy, no versions. */
    e.rank = 0;
    e.accuracy = 0.85;
    e.final = false;
    e.have_versions = false;
    assert_int_equal(zps_metrics_eval(m, &e), 0);
    /* A loss that is not a number is null. */
    s.loss = NAN;
    s.dropped = false;
    assert_int_equal(zps_metrics_step(m, &s), 0);
    assert_int_equal(zps_metrics_close(m), 0);

    char *text = slurp(f->path);
    char want[4096];
    snprintf(want, sizeof(want),
             "{\"type\":\"run\",\"rank\":1}\n%s\n%s\n"
             "{\"type\":\"eval\",\"rank\":0,\"clock\":100,\"epoch\":1.500000,"
             "\"wall\":1700000001.250000,\"elapsed\":30.000000,\"test_loss\":0.4208,"
             "\"test_accuracy\":0.85,\"examples\":10000,\"eval_ms\":55.500,\"final\":false}\n",
             STEP_LINE, EVAL_LINE);
    assert_int_equal(strncmp(text, want, strlen(want)), 0);
    const char *last = text + strlen(want);
    assert_non_null(strstr(last, "\"loss\":null,\"batch\":32"));
    assert_non_null(strstr(last, "\"dropped\":false,\"step_ms\":20.000}\n"));
    assert_int_equal(last[strlen(last) - 1], '\n');
    free(text);
}

/* Read back with the JSON reader: every field docs/worker.md names, with its value. */
static void test_read_back(void **state)
{
    (void)state;
    zps_json_t *v = NULL;
    assert_int_equal(zps_json_parse(STEP_LINE, &v, NULL, 0), 0);
    static const struct {
        const char *key;
        double value;
    } step_fields[] = {
        {"rank", 1},
        {"clock", 12},
        {"epoch", 3},
        {"step", 0},
        {"wall", 1700000000.5},
        {"elapsed", 12.25},
        {"loss", 0.5},
        {"batch", 32},
        {"version", 11},
        {"clock_lag", 1},
        {"data_ms", 1.5},
        {"forward_ms", 2.25},
        {"backward_ms", 3.125},
        {"copy_ms", 0},
        {"pull_ms", 4},
        {"push_ms", 0.5},
        {"update_ms", 0},
        {"pad_ms", 1},
        {"delay_ms", 2},
        {"slowdown_ms", 0.25},
        {"intermittent_ms", 0},
        {"fixed_delay_ms", 1.75},
        {"random_delay_ms", 0},
        {"pause_ms", 0},
        {"step_ms", 20},
    };
    assert_string_equal(zps_json_string(zps_json_get(v, "type")), "step");
    for (size_t i = 0; i < sizeof(step_fields) / sizeof(step_fields[0]); i++) {
        const zps_json_t *x = zps_json_get(v, step_fields[i].key);
        if (!x || x->type != ZPS_JSON_NUMBER)
            fail_msg("step line: no number '%s'", step_fields[i].key);
        assert_true(x->number == step_fields[i].value);
    }
    assert_true(zps_json_true(zps_json_get(v, "dropped")));
    zps_json_free(v);

    assert_int_equal(zps_json_parse(EVAL_LINE, &v, NULL, 0), 0);
    assert_string_equal(zps_json_string(zps_json_get(v, "type")), "eval");
    assert_true(zps_json_number(zps_json_get(v, "rank"), 0) == -1);
    assert_true(zps_json_number(zps_json_get(v, "clock"), 0) == 100);
    assert_true(zps_json_number(zps_json_get(v, "epoch"), 0) == 1.5);
    assert_true(zps_json_number(zps_json_get(v, "wall"), 0) == 1700000001.25);
    assert_true(zps_json_number(zps_json_get(v, "elapsed"), 0) == 30);
    assert_true(zps_json_number(zps_json_get(v, "test_loss"), 0) == 0.4208);
    assert_int_equal(zps_json_get(v, "test_accuracy")->type, ZPS_JSON_NULL);
    assert_true(zps_json_number(zps_json_get(v, "examples"), 0) == 10000);
    assert_true(zps_json_number(zps_json_get(v, "eval_ms"), 0) == 55.5);
    assert_true(zps_json_number(zps_json_get(v, "version_min"), 0) == 99);
    assert_true(zps_json_number(zps_json_get(v, "version_max"), 0) == 100);
    assert_true(zps_json_true(zps_json_get(v, "final")));
    zps_json_free(v);
}

/* Seconds keep microseconds and a loss keeps 9 significant digits. */
static void test_precision(void **state)
{
    fixture_t *f = *state;
    zps_metrics_t *m = NULL;
    assert_int_equal(zps_metrics_open(f->path, &m, NULL, 0), 0);
    zps_step_record_t s = a_step();
    s.wall = 1700000000.123456;
    s.loss = 2.302585093;
    s.pull_ms = 0.0004; /* below a microsecond: 0.000 */
    assert_int_equal(zps_metrics_step(m, &s), 0);
    assert_int_equal(zps_metrics_close(m), 0);
    char *text = slurp(f->path);
    assert_non_null(strstr(text, "\"wall\":1700000000.123456,"));
    assert_non_null(strstr(text, "\"loss\":2.30258509,"));
    assert_non_null(strstr(text, "\"pull_ms\":0.000,"));
    free(text);
}

static void test_errors_and_null(void **state)
{
    (void)state;
    zps_metrics_t *m = (zps_metrics_t *)(uintptr_t)1;
    char err[256] = "";
    const char *path = "/nonexistent-zps-dir/m.jsonl";
    assert_int_equal(zps_metrics_open(path, &m, err, sizeof(err)), ZPS_EIO);
    char want[256];
    snprintf(want, sizeof(want), "%s: cannot open for writing: %s", path, strerror(ENOENT));
    assert_string_equal(err, want);
    assert_true(m == (zps_metrics_t *)(uintptr_t)1);

    /* A NULL stream takes every record and writes nothing. */
    zps_step_record_t s = a_step();
    zps_eval_record_t e = an_eval();
    assert_int_equal(zps_metrics_step(NULL, &s), 0);
    assert_int_equal(zps_metrics_eval(NULL, &e), 0);
    assert_int_equal(zps_metrics_raw(NULL, "{}"), 0);
    assert_int_equal(zps_metrics_close(NULL), 0);

    /* A full device: the failed write is reported, and again at close. */
    if (access("/dev/full", W_OK) == 0) {
        assert_int_equal(zps_metrics_open("/dev/full", &m, NULL, 0), 0);
        assert_int_equal(zps_metrics_raw(m, "{}"), ZPS_EIO);
        assert_int_equal(zps_metrics_close(m), ZPS_EIO);
    }
}

/* The progress line on a file that is no terminal: plain lines, paced. */
static void test_progress_plain(void **state)
{
    (void)state;
    FILE *fp = tmpfile();
    assert_non_null(fp);
    zps_progress_t p;
    zps_progress_init(&p, fp, true, 3600.0);
    assert_false(p.tty);
    assert_true(zps_progress_show(&p, "line 1", false));  /* the first is always shown */
    assert_false(zps_progress_show(&p, "line 2", false)); /* an hour has not passed */
    assert_true(zps_progress_show(&p, "line 3", true));   /* forced */
    zps_progress_break(&p);                               /* nothing to end */
    fflush(fp);
    rewind(fp);
    char buf[256] = "";
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    buf[n] = '\0';
    assert_string_equal(buf, "line 1\nline 3\n");
    fclose(fp);

    /* Disabled: nothing, ever. */
    fp = tmpfile();
    assert_non_null(fp);
    zps_progress_init(&p, fp, false, 0.0);
    assert_false(zps_progress_show(&p, "x", true));
    zps_progress_break(&p);
    assert_int_equal(ftell(fp), 0);
    fclose(fp);
}

/* On a terminal the line is redrawn in place and ended by a break. */
static void test_progress_redrawn(void **state)
{
    (void)state;
    FILE *fp = tmpfile();
    assert_non_null(fp);
    zps_progress_t p;
    zps_progress_init(&p, fp, true, 10.0);
    p.tty = true; /* as zps_progress_init finds it on a terminal */
    assert_true(zps_progress_show(&p, "epoch 1", false));
    assert_false(zps_progress_show(&p, "epoch 2", false)); /* within 100 ms */
    assert_true(zps_progress_show(&p, "epoch 3", true));
    assert_true(p.drawn);
    zps_progress_break(&p);
    assert_false(p.drawn);
    zps_progress_break(&p); /* a second break adds nothing */
    fflush(fp);
    rewind(fp);
    char buf[256] = "";
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    buf[n] = '\0';
    assert_string_equal(buf, "\repoch 1\033[K\repoch 3\033[K\n");
    fclose(fp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lines, setup, teardown),
        cmocka_unit_test(test_read_back),
        cmocka_unit_test_setup_teardown(test_precision, setup, teardown),
        cmocka_unit_test(test_errors_and_null),
        cmocka_unit_test(test_progress_plain),
        cmocka_unit_test(test_progress_redrawn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
