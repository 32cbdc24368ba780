/*
 * test_resume.c - a BSP run of 40 clocks against the same run checkpointed
 * at clock 20, killed with SIGKILL, restarted with --resume and continued:
 * the parameters must be bit-identical, and so must the checkpoints both
 * runs write at version 40.
 *
 * The optimizer is Adam, so the checkpoint must carry its moments and step
 * count, not only the parameters. The restarted workers begin at clock 0 and
 * learn from the servers' next_clock where to continue.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "zps/zps.h"
#include "error.h"
#include "harness.h"
#include "timeutil.h"

enum { W = 4, N = 301, SHARDS = 2, CLOCKS = 40, CUT = 20 };

typedef struct cluster {
    harness_server_t srv[SHARDS];
    const char *eps[SHARDS];
    char dir[256];
} cluster_t;

static void start(cluster_t *c, bool resume)
{
    for (int i = 0; i < SHARDS; i++) {
        char shard[32];
        snprintf(shard, sizeof(shard), "%d/%d", i, SHARDS);
        const char *args[] = {"--workers",
                              "4",
                              "--shard",
                              shard,
                              "--optimizer",
                              "adam",
                              "--lr",
                              "0.01",
                              "--checkpoint-dir",
                              c->dir,
                              "--checkpoint-every",
                              "20",
                              resume ? "--resume" : NULL,
                              NULL};
        assert_int_equal(harness_start(&c->srv[i], args), 0);
        c->eps[i] = c->srv[i].endpoint;
    }
}

static float gradient(int w, uint64_t t, uint64_t i)
{
    uint64_t x = (uint64_t)w * 1000003u + t * 7919u + i * 104729u;
    x ^= x >> 13;
    x *= 0x9e3779b97f4a7c15ull;
    return (float)((double)(x >> 40) / (double)(1ull << 24)) - 0.5f;
}

typedef struct arg {
    cluster_t *c;
    int w;
    uint64_t until; /* push clocks below this */
    int rc;
    uint64_t first; /* the first clock this worker computed */
} arg_t;

static void *worker(void *p)
{
    arg_t *a = p;
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = a->w;
    o.timeout_ms = 20000;
    zps_client_t *cl;
    if ((a->rc = zps_client_new(a->c->eps, SHARDS, &o, &cl)) != 0)
        return NULL;
    float params[N], g[N];
    bool first = true;
    for (uint64_t t = 0; t < a->until;) {
        zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
        if ((a->rc = zps_client_pull(cl, t, params, N, &info)) != 0)
            break;
        if (info.next_clock > t) {
            /* The shards are further on (a restart): resume where they are. */
            t = info.next_clock;
            continue;
        }
        if (first)
            a->first = t;
        first = false;
        for (uint64_t i = 0; i < N; i++)
            g[i] = gradient(a->w, t, i);
        if ((a->rc = zps_client_push(cl, t, g, N, 8 + (uint32_t)a->w, &info)) != 0)
            break;
        t++;
    }
    if (a->rc)
        fprintf(stderr, "worker %d: %s\n", a->w, zps_client_last_error(cl));
    zps_client_free(cl);
    return NULL;
}

static void run_workers(cluster_t *c, uint64_t until, uint64_t expect_first)
{
    pthread_t th[W];
    arg_t args[W];
    for (int w = 0; w < W; w++) {
        args[w] = (arg_t){c, w, until, 0, 0};
        pthread_create(&th[w], NULL, worker, &args[w]);
    }
    for (int w = 0; w < W; w++) {
        pthread_join(th[w], NULL);
        assert_int_equal(args[w].rc, 0);
        assert_int_equal(args[w].first, expect_first);
    }
}

static zps_client_t *tool(cluster_t *c)
{
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.timeout_ms = 20000;
    zps_client_t *cl;
    assert_int_equal(zps_client_new(c->eps, SHARDS, &o, &cl), 0);
    return cl;
}

static void init_model(cluster_t *c)
{
    float v[N];
    for (int i = 0; i < N; i++)
        v[i] = (float)i / (float)N - 0.5f;
    zps_client_t *cl = tool(c);
    assert_int_equal(zps_client_init(cl, v, N), 0);
    zps_client_free(cl);
}

static void final_params(cluster_t *c, float *out)
{
    zps_client_t *cl = tool(c);
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_pull(cl, 0, out, N, &info), 0);
    assert_int_equal(info.min_version, CLOCKS);
    assert_int_equal(info.max_version, CLOCKS);
    zps_client_free(cl);
}

/* Waits until `path` exists (checkpoints are written on the threadpool). */
static bool wait_file(const char *path)
{
    for (int i = 0; i < 1000; i++) {
        if (access(path, F_OK) == 0)
            return true;
        zps_sleep_ms(10);
    }
    return false;
}

static void ckpt_path(const cluster_t *c, int shard, uint64_t v, char *buf, size_t n)
{
    snprintf(buf, n, "%s/shard-%d-of-%d-v%020llu.zpsckpt", c->dir, shard, SHARDS,
             (unsigned long long)v);
}

static bool same_file(const char *a, const char *b)
{
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

static void test_exact_resume(void **state)
{
    (void)state;
    cluster_t a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    snprintf(a.dir, sizeof(a.dir), "/tmp/zps-resume-a-XXXXXX");
    snprintf(b.dir, sizeof(b.dir), "/tmp/zps-resume-b-XXXXXX");
    assert_non_null(mkdtemp(a.dir));
    assert_non_null(mkdtemp(b.dir));

    /* Uninterrupted. */
    start(&a, false);
    init_model(&a);
    run_workers(&a, CLOCKS, 0);
    float pa[N];
    final_params(&a, pa);

    /* Interrupted at clock 20 by SIGKILL: no chance to save anything more. */
    start(&b, false);
    init_model(&b);
    run_workers(&b, CUT, 0);
    char path[512];
    for (int s = 0; s < SHARDS; s++) {
        ckpt_path(&b, s, CUT, path, sizeof(path));
        assert_true(wait_file(path));
    }
    for (int s = 0; s < SHARDS; s++) {
        harness_signal(&b.srv[s], SIGKILL);
        harness_stop(&b.srv[s]);
    }
    start(&b, true);
    run_workers(&b, CLOCKS, CUT);
    float pb[N];
    final_params(&b, pb);

    assert_memory_equal(pa, pb, sizeof(pa));
    for (int s = 0; s < SHARDS; s++) {
        char pa_path[512], pb_path[512];
        ckpt_path(&a, s, CLOCKS, pa_path, sizeof(pa_path));
        ckpt_path(&b, s, CLOCKS, pb_path, sizeof(pb_path));
        assert_true(wait_file(pa_path));
        assert_true(wait_file(pb_path));
        assert_true(same_file(pa_path, pb_path));
    }
    for (int s = 0; s < SHARDS; s++) {
        assert_int_equal(harness_stop(&a.srv[s]), 0);
        assert_int_equal(harness_stop(&b.srv[s]), 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", a.dir, b.dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
