/*
 * test_background_step.c - BSP steps taken off the server loop's thread
 * (--background-step-bytes), through real zps-server processes on
 * 127.0.0.1, with a step made slow on purpose (--step-delay-ms):
 *   - while the step runs, the server answers STATS (which says
 *     "step_running": true, at version 0) and heartbeats; with the step on
 *     the loop's thread, the control, STATS waits for the step and never
 *     sees one running;
 *   - the exchange that made the step due, its client's resends while it
 *     ran, and an observer's pull sent meanwhile are answered once it is
 *     taken, with the parameters w0 - lr * mean(g) computed here, bit for
 *     bit, at version 1, and the push reported buffered;
 *   - the next clocks' steps are exact too, and STATS counts them as
 *     steps_background;
 *   - SIGTERM during the step waits for it: the shutdown checkpoint holds
 *     version 1, and a server resumed from it serves those parameters;
 *   - ASP: a push applied on arrival runs off the loop's thread too, STATS
 *     is answered meanwhile (at the version the push makes), the exchange
 *     gets w0 - lr * g exactly, and a
 *     push whose step would overflow is refused whole (ZPS_ENONFINITE),
 *     the parameters unchanged; the memory bound counts that push in hand.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "zps/zps.h"
#include "error.h"
#include "harness.h"
#include "timeutil.h"

#define N 6
#define WORKERS 2
#define DELAY_MS 1500

static const float w0[N] = {1, -2, 3, -4, 5, -6};

static void grad_of(int worker, uint64_t clock, float *g)
{
    for (int i = 0; i < N; i++) /* multiples of 1/8: every sum and mean is exact */
        g[i] = (float)(worker + 1) * 0.125f * (float)(i + 1) + (float)clock;
}

/* w - 0.5 * mean of the workers' gradients of `clock`, as the server must compute it. */
static void step_by_hand(float *w, uint64_t clock)
{
    float g0[N], g1[N];
    grad_of(0, clock, g0);
    grad_of(1, clock, g1);
    for (int i = 0; i < N; i++)
        w[i] -= 0.5f * ((g0[i] + g1[i]) / 2.0f);
}

static zps_client_t *client(const harness_server_t *srv, int worker)
{
    const char *eps[1] = {srv->endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = worker;
    o.timeout_ms = 30000;
    o.retry_ms = 400; /* resends arrive while the step runs */
    zps_client_t *c = NULL;
    assert_int_equal(zps_client_new(eps, 1, &o, &c), 0);
    return c;
}

static void start_mode(harness_server_t *srv, const char *mode, const char *lr,
                       const char *background, const char *dir, bool resume)
{
    const char *args[24];
    int n = 0;
    const char *fixed[] = {"--workers",       "2",    "--lr",        lr,
                           "--mode",          mode,   "--log-level", "warn",
                           "--step-delay-ms", "1500", NULL};
    for (int i = 0; fixed[i]; i++)
        args[n++] = fixed[i];
    args[n++] = "--background-step-bytes";
    args[n++] = background;
    if (dir) {
        args[n++] = "--checkpoint-dir";
        args[n++] = dir;
    }
    if (resume)
        args[n++] = "--resume";
    args[n] = NULL;
    assert_int_equal(harness_start(srv, args), 0);
}

static void start(harness_server_t *srv, const char *background, const char *dir, bool resume)
{
    start_mode(srv, "bsp", "0.5", background, dir, resume);
}

typedef struct exchange_arg {
    const harness_server_t *srv;
    zps_client_t *c;
    int worker;
    uint64_t clock;
    float got[N];
    zps_reply_info_t info;
    int rc;
    uint64_t done_ns;
} exchange_arg_t;

static void *exchange_thread(void *p)
{
    exchange_arg_t *a = p;
    float g[N];
    grad_of(a->worker, a->clock, g);
    a->info = (zps_reply_info_t)ZPS_REPLY_INFO_INIT;
    a->rc = zps_client_exchange(a->c, a->clock, g, N, 1, a->got, &a->info);
    a->done_ns = zps_now_ns();
    return NULL;
}

static bool json_has(const char *json, const char *what)
{
    return strstr(json, what) != NULL;
}

/* The number after `key` in json (UINT64_MAX when absent). */
static uint64_t json_num(const char *json, const char *key)
{
    const char *p = strstr(json, key);
    return p ? strtoull(p + strlen(key), NULL, 10) : UINT64_MAX;
}

/*
 * STATS until one says a step is running, or `ms` have passed; how many did.
 * Each that does says `version` (BSP: the one before the step; ASP: the one
 * the push being applied makes).
 */
static int stats_at(zps_client_t *obs, int ms, uint64_t *first_ns, const char *version)
{
    int seen = 0;
    uint64_t until = zps_now_ns() + (uint64_t)ms * 1000000ull;
    while (zps_now_ns() < until) {
        char *json = NULL;
        assert_int_equal(zps_client_stats(obs, 0, &json), 0);
        if (json_has(json, "\"step_running\":true")) {
            assert_true(json_has(json, version));
            if (!seen++)
                *first_ns = zps_now_ns();
        }
        free(json);
        usleep(50 * 1000);
    }
    return seen;
}

static int stats_while_stepping(zps_client_t *obs, int ms, uint64_t *first_ns)
{
    return stats_at(obs, ms, first_ns, "\"version\":0,");
}

/* Starts both workers' exchanges of `clock`; the step is due once both are in. */
static void exchanges(const harness_server_t *srv, zps_client_t **w, uint64_t clock,
                      exchange_arg_t *a, pthread_t *t)
{
    for (int k = 0; k < WORKERS; k++) {
        a[k] = (exchange_arg_t){.srv = srv, .c = w[k], .worker = k, .clock = clock};
        assert_int_equal(pthread_create(&t[k], NULL, exchange_thread, &a[k]), 0);
    }
}

static void check_exchanges(exchange_arg_t *a, pthread_t *t, const float *want, uint64_t version)
{
    for (int k = 0; k < WORKERS; k++) {
        pthread_join(t[k], NULL);
        assert_int_equal(a[k].rc, 0);
        assert_true(a[k].info.buffered);
        assert_int_equal(a[k].info.min_version, version);
        assert_memory_equal(a[k].got, want, sizeof(float) * N);
    }
}

/* A BSP server (two workers), its clients, the model initialised, clock 0's exchanges under way. */
typedef struct run {
    harness_server_t srv;
    zps_client_t *w[WORKERS], *obs;
    float want[N]; /* the parameters clock 0's step makes */
    exchange_arg_t a[WORKERS];
    pthread_t t[WORKERS];
} run_t;

static void run_start(run_t *r, const char *background, const char *dir)
{
    start(&r->srv, background, dir, false);
    for (int k = 0; k < WORKERS; k++)
        r->w[k] = client(&r->srv, k);
    r->obs = client(&r->srv, -1);
    assert_int_equal(zps_client_init(r->w[0], w0, N), 0);
    memcpy(r->want, w0, sizeof(r->want));
    step_by_hand(r->want, 0);
    exchanges(&r->srv, r->w, 0, r->a, r->t);
}

static void run_clients_free(run_t *r)
{
    for (int k = 0; k < WORKERS; k++)
        zps_client_free(r->w[k]);
    zps_client_free(r->obs);
}

static void test_served_while_stepping(void **state)
{
    (void)state;
    run_t r;
    uint64_t t0 = zps_now_ns();
    run_start(&r, "0", NULL);
    uint64_t first = 0;
    /* The step runs for DELAY_MS from the second push on: STATS is answered meanwhile. */
    int seen = stats_while_stepping(r.obs, DELAY_MS / 2, &first);
    assert_true(seen >= 1);
    /* An observer's pull sent during the step is answered after it, with its result. */
    float pulled[N];
    zps_reply_info_t pi = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_pull(r.obs, 0, pulled, N, &pi), 0);
    uint64_t pulled_ns = zps_now_ns();
    assert_int_equal(pi.min_version, 1);
    assert_memory_equal(pulled, r.want, sizeof(r.want));
    check_exchanges(r.a, r.t, r.want, 1);
    assert_true(pulled_ns - t0 >= (uint64_t)DELAY_MS * 1000000ull);
    for (int k = 0; k < WORKERS; k++)
        assert_true(r.a[k].done_ns - t0 >= (uint64_t)DELAY_MS * 1000000ull);
    assert_true(first < r.a[0].done_ns && first < r.a[1].done_ns);

    /* Two more clocks, each step in the background, each exact. */
    for (uint64_t clock = 1; clock <= 2; clock++) {
        step_by_hand(r.want, clock);
        exchanges(&r.srv, r.w, clock, r.a, r.t);
        check_exchanges(r.a, r.t, r.want, clock + 1);
    }
    char *json = NULL;
    assert_int_equal(zps_client_stats(r.obs, 0, &json), 0);
    assert_true(json_has(json, "\"steps\":3,"));
    assert_int_equal(json_num(json, "\"steps_background\":"), 3);
    assert_true(json_has(json, "\"step_running\":false"));
    free(json);
    run_clients_free(&r);
    assert_int_equal(harness_stop(&r.srv), 0);
}

/* The control: the same slow step on the loop's thread keeps STATS waiting. */
static void test_blocking_control(void **state)
{
    (void)state;
    run_t r;
    run_start(&r, "1073741824", NULL);
    uint64_t first = 0;
    assert_int_equal(stats_while_stepping(r.obs, DELAY_MS / 2, &first), 0);
    check_exchanges(r.a, r.t, r.want, 1);
    char *json = NULL;
    assert_int_equal(zps_client_stats(r.obs, 0, &json), 0);
    assert_int_equal(json_num(json, "\"steps_background\":"), 0);
    free(json);
    run_clients_free(&r);
    assert_int_equal(harness_stop(&r.srv), 0);
}

static void test_sigterm_waits(void **state)
{
    (void)state;
    char dir[] = "/tmp/zps-bgstep-XXXXXX";
    assert_non_null(mkdtemp(dir));
    run_t r;
    run_start(&r, "0", dir);
    uint64_t first = 0;
    /* SIGTERM once the step is seen running: it stops after the step, saving it. */
    uint64_t until = zps_now_ns() + 5000000000ull;
    while (!first && zps_now_ns() < until)
        (void)stats_while_stepping(r.obs, 100, &first);
    assert_true(first != 0);
    assert_int_equal(harness_stop(&r.srv), 0);
    /* The exchanges were answered with the step's result before the server went. */
    check_exchanges(r.a, r.t, r.want, 1);
    char path[512];
    snprintf(path, sizeof(path), "%s/shard-0-of-1-v%020llu.zpsckpt", dir, 1ull);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    run_clients_free(&r);

    harness_server_t srv;
    start(&srv, "0", dir, true);
    zps_client_t *obs = client(&srv, -1);
    float pulled[N];
    zps_reply_info_t pi = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_pull(obs, 0, pulled, N, &pi), 0);
    assert_int_equal(pi.min_version, 1);
    assert_memory_equal(pulled, r.want, sizeof(r.want));
    zps_client_free(obs);
    assert_int_equal(harness_stop(&srv), 0);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_asp_apply_off_loop(void **state)
{
    (void)state;
    harness_server_t srv;
    start_mode(&srv, "asp", "10", "0", NULL, false); /* lr 10: a step can overflow */
    zps_client_t *w = client(&srv, 0);
    zps_client_t *obs = client(&srv, -1);
    assert_int_equal(zps_client_init(w, w0, N), 0);
    float want[N], g[N];
    grad_of(0, 0, g);
    for (int i = 0; i < N; i++)
        want[i] = w0[i] - 10.0f * g[i]; /* multiples of 1.25: exact */
    exchange_arg_t a = {.srv = &srv, .c = w, .worker = 0, .clock = 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, exchange_thread, &a), 0);
    uint64_t first = 0;
    assert_true(stats_at(obs, DELAY_MS / 2, &first, "\"version\":1,") >= 1);
    pthread_join(t, NULL);
    assert_int_equal(a.rc, 0);
    assert_false(a.info.buffered);
    assert_int_equal(a.info.min_version, 1);
    assert_memory_equal(a.got, want, sizeof(want));
    assert_true(first < a.done_ns);

    /* A push whose step would overflow: refused whole, off the loop as well. */
    float huge[N] = {3e38f, 0, 0, 0, 0, 0};
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_push(w, 1, huge, N, 1, &info), ZPS_EREMOTE);
    assert_int_equal(zps_client_last_remote_status(w), ZPS_ENONFINITE);
    float got[N];
    assert_int_equal(zps_client_pull(obs, 0, got, N, &info), 0);
    assert_memory_equal(got, want, sizeof(want));
    char *json = NULL;
    assert_int_equal(zps_client_stats(obs, 0, &json), 0);
    /* The client resent the refused push while it was being applied: each
     * resend is a push of its own (a refused one never arrived), refused
     * again. One push applied, the others refused, all off the loop. */
    uint64_t bg = json_num(json, "\"steps_background\":");
    uint64_t refused = json_num(json, "\"steps_refused\":");
    if (json_num(json, "\"applied\":") != 1 || refused < 1 || bg != 1 + refused)
        fail_msg("one push applied, the others refused, all off the loop: %s", json);
    free(json);
    zps_client_free(w);
    zps_client_free(obs);
    assert_int_equal(harness_stop(&srv), 0);
}

/*
 * Under ASP a push applied off the loop's thread is a second one in hand: the
 * bound counts it. The bound also counts 256 KiB per open connection
 * (docs/protocol.md, Limits), and how many the client has open when its STATS
 * is answered (its heartbeat socket, a sealed session's) depends on timing:
 * that term is taken out of each before they are compared.
 */
static void test_bound_counts_apply(void **state)
{
    (void)state;
    const uint64_t per_connection = 256u << 10;
    uint64_t bound[2];
    const char *background[2] = {"0", "1073741824"};
    for (int k = 0; k < 2; k++) {
        harness_server_t srv;
        start_mode(&srv, "asp", "10", background[k], NULL, false);
        zps_client_t *w = client(&srv, 0);
        assert_int_equal(zps_client_init(w, w0, N), 0);
        char *json = NULL;
        assert_int_equal(zps_client_stats(w, 0, &json), 0);
        uint64_t open = json_num(json, "\"connections\":{\"open\":");
        assert_true(open != UINT64_MAX);
        bound[k] = json_num(json, "\"memory_bound_bytes\":") - open * per_connection;
        free(json);
        zps_client_free(w);
        assert_int_equal(harness_stop(&srv), 0);
    }
    assert_int_equal(bound[0] - bound[1], N * sizeof(float));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_served_while_stepping), cmocka_unit_test(test_blocking_control),
        cmocka_unit_test(test_sigterm_waits),         cmocka_unit_test(test_asp_apply_off_loop),
        cmocka_unit_test(test_bound_counts_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
