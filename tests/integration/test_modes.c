/*
 * test_modes.c - every consistency mode through real zps-server processes:
 * four workers (threads with clients of their own), random per-step delays,
 * 200 clocks. Each pull reply carries the shard's version and min_clock, so
 * each worker checks that its pull was not answered against the rule; at the
 * end the parameters and the servers' counters show that every push was
 * applied exactly once or counted as dropped.
 *
 * Gradients are small binary fractions, so sums are nearly exact and the
 * expected parameters can be computed here in float64 whatever order the
 * pushes were applied in.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "zps/zps.h"
#include "error.h"
#include "harness.h"
#include "timeutil.h"

enum { W = 4, CLOCKS = 200, N = 37 };
#define LR 0.01

typedef struct run {
    const char *mode;
    int shards;
    const char *extra[6]; /* more server flags */
    uint32_t ssp_bound;   /* SSP bound, for the checks */
    uint32_t backup;
    bool same_gradients; /* every worker pushes the same gradient at a clock */
    bool inverse_lr;
    harness_server_t srv[2];
    const char *eps[2];
} run_t;

typedef struct worker_arg {
    run_t *run;
    int w;
    int rc;
    char why[256];
    uint64_t dropped;
    double lr_sum[N]; /* ASP/SSP: sum over this worker's pushes of lr_eff * g */
} worker_arg_t;

/* Gradient of worker w at clock t, element i: a multiple of 1/8 in [-0.375, 0.5]. */
static float grad(const run_t *r, int w, uint64_t t, int i)
{
    int wk = r->same_gradients ? 0 : w;
    return (float)((int)(((uint64_t)(wk + 1) * 31 + t * 7 + (uint64_t)i * 3) % 8) - 3) / 8.0f;
}

static uint32_t batch_of(const run_t *r, int w, uint64_t t)
{
    return r->same_gradients ? 10 : 1 + (uint32_t)(((uint64_t)w * 13 + t * 5) % 9);
}

static void *worker(void *p)
{
    worker_arg_t *a = p;
    run_t *r = a->run;
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = a->w;
    o.timeout_ms = 30000;
    o.retry_ms = 0; /* a resend would show up as a retry in the counters */
    zps_client_t *c;
    if (zps_client_new(r->eps, (size_t)r->shards, &o, &c) != 0) {
        a->rc = -1;
        return NULL;
    }
    unsigned seed = (unsigned)(a->w * 7919 + 17);
    float params[N], g[N];
    for (uint64_t t = 0; t < CLOCKS; t++) {
        zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
        if ((a->rc = zps_client_pull(c, t, params, N, &info)) != 0) {
            snprintf(a->why, sizeof(a->why), "pull %llu: %s", (unsigned long long)t,
                     zps_client_last_error(c));
            break;
        }
        /* The rule each pull was answered under. */
        bool ok = true;
        if (strcmp(r->mode, "bsp") == 0 && r->backup == 0)
            ok = info.min_version == t && info.max_version == t;
        else if (strcmp(r->mode, "bsp") == 0)
            ok = info.min_version >= t;
        else if (strcmp(r->mode, "ssp") == 0)
            ok = info.min_clock + r->ssp_bound >= t;
        if (!ok) {
            snprintf(a->why, sizeof(a->why),
                     "pull for clock %llu answered at version %llu..%llu, min_clock %llu",
                     (unsigned long long)t, (unsigned long long)info.min_version,
                     (unsigned long long)info.max_version, (unsigned long long)info.min_clock);
            a->rc = -100;
            break;
        }
        zps_sleep_ms((double)(rand_r(&seed) % 2500) / 1000.0);
        for (int i = 0; i < N; i++)
            g[i] = grad(r, a->w, t, i);
        if ((a->rc = zps_client_push(c, t, g, N, batch_of(r, a->w, t), &info)) != 0) {
            snprintf(a->why, sizeof(a->why), "push %llu: %s", (unsigned long long)t,
                     zps_client_last_error(c));
            break;
        }
        if (info.dropped)
            a->dropped++;
        if (info.retried) {
            snprintf(a->why, sizeof(a->why), "push %llu treated as a retry", (unsigned long long)t);
            a->rc = -101;
            break;
        }
        /* The learning rate this push got, as the server computes it. */
        double scale = r->inverse_lr ? 1.0 / (1.0 + (double)info.update_staleness) : 1.0;
        float lr_eff = (float)(LR * scale);
        for (int i = 0; i < N; i++)
            a->lr_sum[i] += (double)lr_eff * g[i];
    }
    zps_client_free(c);
    return NULL;
}

/* A number from a server's STATS JSON: the value after "key": (first match). */
static double json_number(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p)
        fail_msg("no %s in %s", key, json);
    return strtod(p + strlen(pat), NULL);
}

static void run_mode(run_t *r)
{
    for (int s = 0; s < r->shards; s++) {
        char shard[32];
        snprintf(shard, sizeof(shard), "%d/%d", s, r->shards);
        const char *args[16] = {"--workers", "4",    "--shard", shard,
                                "--lr",      "0.01", "--mode",  r->mode};
        int n = 8;
        for (int k = 0; r->extra[k]; k++)
            args[n++] = r->extra[k];
        args[n] = NULL;
        assert_int_equal(harness_start(&r->srv[s], args), 0);
        r->eps[s] = r->srv[s].endpoint;
    }
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.timeout_ms = 10000;
    zps_client_t *c;
    assert_int_equal(zps_client_new(r->eps, (size_t)r->shards, &o, &c), 0);
    float p0[N];
    for (int i = 0; i < N; i++)
        p0[i] = (float)i / 4.0f;
    assert_int_equal(zps_client_init(c, p0, N), 0);

    worker_arg_t args[W];
    pthread_t th[W];
    for (int w = 0; w < W; w++) {
        memset(&args[w], 0, sizeof(args[w]));
        args[w].run = r;
        args[w].w = w;
        pthread_create(&th[w], NULL, worker, &args[w]);
    }
    for (int w = 0; w < W; w++)
        pthread_join(th[w], NULL);
    for (int w = 0; w < W; w++)
        if (args[w].rc != 0)
            fail_msg("%s worker %d: %s", r->mode, w, args[w].why);

    /* Every push applied exactly once or counted as dropped. */
    bool bsp = strcmp(r->mode, "bsp") == 0;
    uint64_t dropped_seen = 0;
    for (int w = 0; w < W; w++)
        dropped_seen += args[w].dropped;
    for (int s = 0; s < r->shards; s++) {
        char *json;
        assert_int_equal(zps_client_stats(c, (size_t)s, &json), 0);
        double version = json_number(json, "version");
        double pushes = json_number(json, "pushes");
        double applied = json_number(json, "applied");
        double buffered = json_number(json, "buffered");
        double dropped = json_number(json, "dropped");
        double steps = json_number(json, "steps");
        assert_true(pushes == W * CLOCKS);
        assert_true(json_number(json, "retries") == 0);
        assert_true(json_number(json, "errors") == 0);
        if (bsp) {
            assert_true(version == CLOCKS && steps == CLOCKS);
            assert_true(buffered + dropped == W * CLOCKS);
            assert_true(dropped <= (double)r->backup * CLOCKS);
            if (r->backup == 0)
                assert_true(dropped == 0);
        } else {
            assert_true(version == W * CLOCKS && applied == W * CLOCKS);
            assert_true(dropped == 0);
        }
        if (r->shards == 1)
            assert_true(dropped == (double)dropped_seen);
        assert_non_null(strstr(json, "\"update_staleness\":{\"count\":"));
        free(json);
    }

    /* The parameters: the same updates, in whatever order they came. */
    float got[N];
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_pull(c, 0, got, N, &info), 0);
    for (int i = 0; i < N; i++) {
        double want = p0[i];
        if (bsp) {
            /* One step per clock with the weighted mean; with backups every
             * worker pushes the same gradient, so the mean does not depend on
             * who made the step. */
            for (uint64_t t = 0; t < CLOCKS; t++) {
                double num = 0, den = 0;
                for (int w = 0; w < W; w++) {
                    num += (double)batch_of(r, w, t) * grad(r, w, t, i);
                    den += batch_of(r, w, t);
                }
                want -= LR * num / den;
            }
        } else {
            for (int w = 0; w < W; w++)
                want -= args[w].lr_sum[i];
        }
        if (fabs(got[i] - want) > 1e-4)
            fail_msg("%s: element %d is %.7f, expected %.7f", r->mode, i, (double)got[i], want);
    }
    zps_client_free(c);
    for (int s = 0; s < r->shards; s++)
        assert_int_equal(harness_stop(&r->srv[s]), 0);
}

static void test_bsp(void **state)
{
    (void)state;
    run_t r = {.mode = "bsp", .shards = 2};
    run_mode(&r);
}

static void test_bsp_backup(void **state)
{
    (void)state;
    run_t r = {.mode = "bsp",
               .shards = 2,
               .extra = {"--backup-workers", "1"},
               .backup = 1,
               .same_gradients = true};
    run_mode(&r);
}

static void test_ssp(void **state)
{
    (void)state;
    run_t r = {.mode = "ssp", .shards = 2, .extra = {"--staleness", "2"}, .ssp_bound = 2};
    run_mode(&r);
}

static void test_asp(void **state)
{
    (void)state;
    run_t r = {.mode = "asp", .shards = 2};
    run_mode(&r);
}

/* One shard, so the update staleness in each push reply is the one its step used. */
static void test_asp_inverse_lr(void **state)
{
    (void)state;
    run_t r = {
        .mode = "asp", .shards = 1, .extra = {"--lr-staleness", "inverse"}, .inverse_lr = true};
    run_mode(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bsp),
        cmocka_unit_test(test_bsp_backup),
        cmocka_unit_test(test_ssp),
        cmocka_unit_test(test_asp),
        cmocka_unit_test(test_asp_inverse_lr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
