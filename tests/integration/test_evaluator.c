/*
 * test_evaluator.c - `zps-worker --evaluator` against real servers and
 * workers:
 *
 *   - BSP: the evaluator's records are the models of exactly the clocks it
 *     asked for (every shard at version t), worker 0 (--no-eval) evaluates
 *     nothing, and the model it saves is bit for bit `zps-worker --local`'s;
 *   - no worker waits for it: with the evaluator stopped (SIGSTOP) right
 *     after it parked its first pull, the workers still finish every clock;
 *     resumed, it reads that first model as it was at its clock, and records
 *     the versions it got for the clocks that passed meanwhile;
 *   - ASP: its final model includes every push of every worker.
 *
 * Data: the trainer's synthetic classification set, so the MLP trains in
 * milliseconds.
 */
#include <errno.h>
#include <math.h>
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
#include "harness.h"
#include "json.h"
#include "timeutil.h"

#ifndef ZPS_WORKER_BIN
#error "ZPS_WORKER_BIN must name the zps-worker binary"
#endif

#define WORKERS 3
#define CLOCKS "20"
#define DATA "synthetic:n=600,test=100,dim=12,classes=3,seed=5"
#define MODEL "mlp:12-7-3"

typedef struct cluster {
    harness_server_t srv[2];
    char servers[600];
    char dir[64];
} cluster_t;

static void start(cluster_t *c, const char *mode)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->dir, sizeof(c->dir), "/tmp/zps-ev-XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    for (int s = 0; s < 2; s++) {
        char shard[16];
        snprintf(shard, sizeof(shard), "%d/2", s);
        const char *args[] = {"--workers",   "3",           "--shard",  shard,  "--mode",
                              mode,          "--optimizer", "momentum", "--lr", "0.05",
                              "--log-level", "warn",        NULL};
        assert_int_equal(harness_start(&c->srv[s], args), 0);
        size_t len = strlen(c->servers);
        snprintf(c->servers + len, sizeof(c->servers) - len, "%s%s", s ? "," : "",
                 c->srv[s].endpoint);
    }
}

static void stop(cluster_t *c)
{
    for (int s = 0; s < 2; s++)
        assert_int_equal(harness_stop(&c->srv[s]), 0);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->dir);
    assert_int_equal(system(cmd), 0);
}

/* zps-worker with the common training flags, then `extra` (NULL-terminated). */
static pid_t worker(const char *const *extra, const char *err_path)
{
    const char *argv[40] = {
        ZPS_WORKER_BIN, "--backend", "cpu", "--no-progress", "--data", DATA,        "--model",
        MODEL,          "--batch",   "4",   "--clocks",      CLOCKS,   "--workers", "3"};
    int n = 14;
    for (int k = 0; extra[k]; k++)
        argv[n++] = extra[k];
    argv[n] = NULL;
    pid_t pid = harness_spawn(argv, "/dev/null", err_path);
    assert_true(pid > 0);
    return pid;
}

/* Waits for pid up to timeout_s; fails the test if it did not exit 0. */
static void wait_ok(pid_t pid, const char *who, double timeout_s)
{
    uint64_t t0 = zps_now_ns();
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        assert_int_equal(r, 0);
        if ((double)(zps_now_ns() - t0) / 1e9 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fail_msg("%s did not finish within %.0f s", who, timeout_s);
        }
        zps_sleep_ms(10);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s failed (status %d)", who, status);
}

static pid_t start_workers(cluster_t *c, pid_t *pids)
{
    for (int r = 0; r < WORKERS; r++) {
        char rank[8];
        snprintf(rank, sizeof(rank), "%d", r);
        const char *extra[] = {"--servers", c->servers, "--rank", rank, "--no-eval", NULL};
        pids[r] = worker(extra, NULL);
    }
    return pids[0];
}

typedef struct evals {
    size_t n;
    uint64_t clock[16], vmin[16], vmax[16];
    bool final[16];
} evals_t;

/* The eval records of a metrics file, in order. */
static void read_evals(const char *path, evals_t *e)
{
    memset(e, 0, sizeof(*e));
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        zps_json_t *o = NULL;
        assert_int_equal(zps_json_parse(line, &o, NULL, 0), 0);
        const char *type = zps_json_string(zps_json_get(o, "type"));
        if (type && strcmp(type, "eval") == 0 && e->n < 16) {
            e->clock[e->n] = (uint64_t)zps_json_number(zps_json_get(o, "clock"), -1);
            e->vmin[e->n] = (uint64_t)zps_json_number(zps_json_get(o, "version_min"), -1);
            e->vmax[e->n] = (uint64_t)zps_json_number(zps_json_get(o, "version_max"), -1);
            e->final[e->n] = zps_json_true(zps_json_get(o, "final"));
            assert_int_equal((int)zps_json_number(zps_json_get(o, "rank"), 0), -1);
            e->n++;
        }
        zps_json_free(o);
    }
    fclose(f);
}

static size_t count_evals(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    char line[4096];
    size_t n = 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "\"type\":\"eval\""))
            n++;
    fclose(f);
    return n;
}

static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb)
            same = false;
        if (ca == EOF || cb == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

static void test_bsp_exact_clocks(void **state)
{
    (void)state;
    cluster_t c;
    start(&c, "bsp");
    char metrics[128], params[128], w0[128], local[128];
    snprintf(metrics, sizeof(metrics), "%s/evaluator.jsonl", c.dir);
    snprintf(params, sizeof(params), "%s/cluster.f32", c.dir);
    snprintf(w0, sizeof(w0), "%s/worker-0.jsonl", c.dir);
    snprintf(local, sizeof(local), "%s/local.f32", c.dir);
    const char *ev_args[] = {"--servers", c.servers, "--evaluator",   "--eval-every", "6",
                             "--metrics", metrics,   "--save-params", params,         NULL};
    pid_t ev = worker(ev_args, NULL);
    pid_t pids[WORKERS];
    for (int r = 0; r < WORKERS; r++) {
        char rank[8];
        snprintf(rank, sizeof(rank), "%d", r);
        /* A clock of the synthetic MLP takes microseconds: 5 ms each leaves
         * the evaluator 30 ms between its clocks, not a scheduler's time slice. */
        const char *extra[] = {"--servers",
                               c.servers,
                               "--rank",
                               rank,
                               "--no-eval",
                               "--metrics",
                               r == 0 ? w0 : "/dev/null",
                               "--delay",
                               "5",
                               NULL};
        pids[r] = worker(extra, NULL);
    }
    for (int r = 0; r < WORKERS; r++)
        wait_ok(pids[r], "a worker", 60);
    wait_ok(ev, "the evaluator", 60);

    evals_t e;
    read_evals(metrics, &e);
    const uint64_t want[] = {6, 12, 18, 20};
    assert_int_equal(e.n, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(e.clock[i], want[i]);
        assert_int_equal(e.vmin[i], want[i]);
        assert_int_equal(e.vmax[i], want[i]);
        assert_int_equal(e.final[i], i == 3);
    }
    assert_int_equal(count_evals(w0), 0);

    const char *lo[] = {"--local", "--optimizer",   "momentum", "--lr",
                        "0.05",    "--save-params", local,      NULL};
    wait_ok(worker(lo, NULL), "zps-worker --local", 60);
    if (!same_file(params, local))
        fail_msg("the evaluator's final model differs from --local's");
    stop(&c);
}

static void test_never_waited_for(void **state)
{
    (void)state;
    cluster_t c;
    start(&c, "bsp");
    char metrics[128], err[128];
    snprintf(metrics, sizeof(metrics), "%s/evaluator.jsonl", c.dir);
    snprintf(err, sizeof(err), "%s/evaluator.err", c.dir);
    const char *ev_args[] = {"--servers", c.servers, "--evaluator", "--eval-every", "5",
                             "--metrics", metrics,   "--log-level", "debug",        NULL};
    pid_t ev = worker(ev_args, err);
    /* Stop it only once its first pull is parked on both shards. */
    zps_client_opts_t co;
    zps_client_opts_default(&co);
    co.timeout_ms = 5000;
    const char *eps[] = {c.srv[0].endpoint, c.srv[1].endpoint};
    zps_client_t *cl = NULL;
    assert_int_equal(zps_client_new(eps, 2, &co, &cl), 0);
    uint64_t t0 = zps_now_ns();
    for (int parked = 0; parked < 2;) {
        if ((double)(zps_now_ns() - t0) / 1e9 > 20)
            fail_msg("the evaluator's first pull never reached both shards");
        parked = 0;
        for (size_t i = 0; i < 2; i++) {
            char *json = NULL;
            assert_int_equal(zps_client_stats(cl, i, &json), 0);
            if (strstr(json, "\"pending_pulls\":1,"))
                parked++;
            free(json);
        }
        zps_sleep_ms(10);
    }
    zps_client_free(cl);
    kill(ev, SIGSTOP);

    pid_t pids[WORKERS];
    start_workers(&c, pids);
    for (int r = 0; r < WORKERS; r++)
        wait_ok(pids[r], "a worker while the evaluator is stopped", 60);
    kill(ev, SIGCONT);
    wait_ok(ev, "the evaluator", 60);

    evals_t e;
    read_evals(metrics, &e);
    assert_int_equal(e.n, 4);
    /* The pull parked before the stop was answered at its clock... */
    assert_int_equal(e.clock[0], 5);
    assert_int_equal(e.vmin[0], 5);
    assert_int_equal(e.vmax[0], 5);
    /* ...the ones sent after it see the model that exists by then. */
    for (size_t i = 1; i < 4; i++) {
        assert_int_equal(e.vmin[i], 20);
        assert_int_equal(e.vmax[i], 20);
    }
    assert_true(e.final[3] && e.clock[3] == 20);
    stop(&c);
}

static void test_asp_final_model_complete(void **state)
{
    (void)state;
    cluster_t c;
    start(&c, "asp");
    char metrics[128];
    snprintf(metrics, sizeof(metrics), "%s/evaluator.jsonl", c.dir);
    const char *ev_args[] = {"--servers", c.servers, "--evaluator", "--metrics", metrics, NULL};
    pid_t ev = worker(ev_args, NULL);
    pid_t pids[WORKERS];
    start_workers(&c, pids);
    for (int r = 0; r < WORKERS; r++)
        wait_ok(pids[r], "a worker", 60);
    wait_ok(ev, "the evaluator", 60);
    evals_t e;
    read_evals(metrics, &e);
    assert_int_equal(e.n, 1);
    assert_true(e.final[0]);
    /* Every push is one update under ASP: 3 workers x 20 clocks. */
    assert_int_equal(e.vmin[0], 60);
    assert_int_equal(e.vmax[0], 60);
    stop(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bsp_exact_clocks),
        cmocka_unit_test(test_never_waited_for),
        cmocka_unit_test(test_asp_final_model_complete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
