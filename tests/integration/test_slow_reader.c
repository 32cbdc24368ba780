/*
 * test_slow_reader.c - observers that send pulls and never read the replies
 * must not grow the server's memory.
 *
 * Under ASP every push makes a new version, so each pull can need a new
 * copy of the parameters, and a reply a peer does not read keeps its copy
 * alive. An ASP server holds a 1M-float (4 MB) shard; two raw DEALER sockets
 * send observer PULLs (worker -1) after every push of an honest worker and
 * never read. The server's VmRSS must stay within a stated bound, the honest
 * worker's pushes and pulls must all succeed, and STATS must count the pulls
 * refused (ZPS_EBUSY) because too many copies were still queued.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include <cmocka.h>

#include "zps/zps.h"
#include "error.h"
#include "harness.h"
#include "timeutil.h"
#include "wire.h"

#define N (1u << 20) /* floats: a 4 MB shard */
#ifdef ZPS_SANITIZED
#define PUSHES 80 /* each push and pull is checked byte by byte: slower */
#else
#define PUSHES 300
#endif
#define OBSERVERS 2
#define PULLS_PER_PUSH 2 /* per observer */

/*
 * The server may hold: the shard (4 MB), at most 2W + 1 = 3 copies for the
 * worker's replies and 4 for observers' (28 MB), a push being received
 * (4 MB), and the allocator's and ZeroMQ's own. Without a bound on the
 * copies it passes this within a few dozen pushes.
 */
#ifdef ZPS_SANITIZED
/* AddressSanitizer keeps up to 256 MB of freed memory in quarantine. */
#define RSS_BOUND_KB ((96 + 384) * 1024L)
#else
#define RSS_BOUND_KB (96 * 1024L)
#endif
#define DEADLINE_NS (30ull * 1000000000ull)

/* A raw observer that takes as little as it can: one message, a small kernel buffer. */
static void *observer_socket(void *ctx, const char *endpoint)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    assert_non_null(s);
    int linger = 0, rcvhwm = 1, rcvbuf = 64 * 1024;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm));
    zmq_setsockopt(s, ZMQ_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    assert_int_equal(harness_secure_socket(s), 0);
    assert_int_equal(zmq_connect(s, endpoint), 0);
    return s;
}

/* Sends an observer PULL for the current model; never waits. */
static void observer_pull(void *s, uint64_t id)
{
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_PULL);
    h.worker = -1;
    h.request_id = id;
    h.total = N;
    int rc = zps_wire_send(s, NULL, &h, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
    assert_true(rc == 0 || rc == ZPS_EAGAIN);
}

/* The value of "key":N in json, or -1. */
static long long json_count(const char *json, const char *key)
{
    const char *p = strstr(json, key);
    return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

static void test_observers_that_never_read(void **state)
{
    (void)state;
    harness_server_t srv;
    const char *args[] = {"--workers", "1",           "--mode", "asp", "--lr",
                          "0.001",     "--log-level", "error",  NULL};
    assert_int_equal(harness_start(&srv, args), 0);

    const char *eps[1] = {srv.endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = 0;
    o.timeout_ms = 10000;
    zps_client_t *c;
    assert_int_equal(zps_client_new(eps, 1, &o, &c), 0);
    float *w = calloc(N, sizeof(float)), *g = malloc(N * sizeof(float)),
          *got = malloc(N * sizeof(float));
    assert_true(w && g && got);
    for (uint32_t i = 0; i < N; i++)
        g[i] = 1.0f;
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_init(c, w, N), 0);
    assert_int_equal(zps_client_pull(c, 0, got, N, &info), 0);
    long rss0 = harness_rss_kb(srv.pid);
    assert_true(rss0 > 0);

    void *ctx = zmq_ctx_new();
    void *obs[OBSERVERS];
    for (int k = 0; k < OBSERVERS; k++)
        obs[k] = observer_socket(ctx, srv.endpoint);

    /* Each push makes a new version; the observers then pull it. The loop
     * stops at the first RSS beyond the bound, so a server without one
     * fails here instead of growing to gigabytes. */
    uint64_t start = zps_now_ns(), id = 1;
    long rss_max = rss0;
    int pushes = 0, pull_errors = 0, push_errors = 0;
    for (; pushes < PUSHES && zps_now_ns() - start < DEADLINE_NS; pushes++) {
        push_errors += zps_client_push(c, (uint64_t)pushes, g, N, 1, &info) != 0;
        pull_errors += zps_client_pull(c, (uint64_t)pushes + 1, got, N, &info) != 0;
        for (int k = 0; k < OBSERVERS; k++)
            for (int j = 0; j < PULLS_PER_PUSH; j++)
                observer_pull(obs[k], id++);
        long rss = harness_rss_kb(srv.pid);
        if (rss > rss_max)
            rss_max = rss;
        if (rss > RSS_BOUND_KB)
            break;
    }
    /* The last version the worker pulled: every element took one step per push. */
    float expect = -0.001f * (float)pushes;
    float worst = 0.0f;
    for (uint32_t i = 0; i < N; i += 4099) {
        float e = got[i] - expect;
        worst = e > worst ? e : -e > worst ? -e : worst;
    }

    char *json = NULL;
    int stats_rc = zps_client_stats(c, 0, &json);
    printf("%d pushes in %.1f s; server RSS %ld kB before, %ld kB at most (bound %ld kB)\n", pushes,
           (double)(zps_now_ns() - start) / 1e9, rss0, rss_max, RSS_BOUND_KB);
    long long busy = stats_rc == 0 ? json_count(json, "\"ZPS_EBUSY\":") : -1;
    long long dropped = stats_rc == 0 ? json_count(json, "\"replies_dropped\":") : -1;
    printf("STATS: ZPS_EBUSY %lld, replies_dropped %lld\n", busy, dropped);
    free(json);

    for (int k = 0; k < OBSERVERS; k++)
        zmq_close(obs[k]);
    zmq_ctx_term(ctx);
    zps_client_free(c);
    int stop_rc = harness_stop(&srv);
    free(w);
    free(g);
    free(got);

    assert_true(rss_max <= RSS_BOUND_KB);
    assert_int_equal(pushes, PUSHES);
    assert_int_equal(push_errors, 0);
    assert_int_equal(pull_errors, 0);
    assert_true(worst < 1e-3f);
    assert_int_equal(stats_rc, 0);
    assert_true(busy > 0); /* observers' pulls refused, counted */
    assert_int_equal(stop_rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_observers_that_never_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
