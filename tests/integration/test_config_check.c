/*
 * test_config_check.c - the shards of one model must agree on their
 * configuration. Real zps-server processes: shards started with different
 * settings refuse an INIT everywhere before any is initialised, with a
 * message that names the shards and the setting; matching shards work as
 * before; a request stating another shard's configuration fingerprint is
 * refused with ZPS_ECONFIG and changes nothing, one stating none (0) is
 * served; a push some shard took is reported as partial, never as a plain
 * failure; a non-finite value is refused by the client before any shard
 * sees it.
 *
 * Raw requests are built with protobuf-c and ZeroMQ frames here, not with
 * common/wire.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include <cmocka.h>

#include "checksum.h"
#include "zps/zps.h"
#include "error.h"
#include "harness.h"
#include "json.h"
#include "wire.h"
#include "zps.pb-c.h"

/* ---- servers and clients ---- */

typedef struct cluster {
    harness_server_t srv[2];
    const char *eps[2];
    size_t n;
} cluster_t;

/* Starts one server per NULL-terminated argument list (at most two). */
static void cluster_start(cluster_t *c, const char *const *a0, const char *const *a1)
{
    memset(c, 0, sizeof(*c));
    const char *const *args[2] = {a0, a1};
    for (size_t i = 0; i < 2 && args[i]; i++) {
        assert_int_equal(harness_start(&c->srv[i], args[i]), 0);
        c->eps[i] = c->srv[i].endpoint;
        c->n++;
    }
}

static void cluster_stop(cluster_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        assert_int_equal(harness_stop(&c->srv[i]), 0);
}

static zps_client_t *client(const cluster_t *c, int worker)
{
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = worker;
    o.timeout_ms = 10000;
    o.heartbeat_ms = 0;
    zps_client_t *cl;
    assert_int_equal(zps_client_new(c->eps, c->n, &o, &cl), 0);
    return cl;
}

/* Shard i's STATS, parsed (caller frees). */
static zps_json_t *stats(const cluster_t *c, size_t i)
{
    zps_client_t *cl = client(c, -1);
    char *text = NULL;
    assert_int_equal(zps_client_stats(cl, i, &text), 0);
    zps_json_t *v = NULL;
    assert_int_equal(zps_json_parse(text, &v, NULL, 0), 0);
    free(text);
    zps_client_free(cl);
    return v;
}

static bool initialized(const cluster_t *c, size_t i)
{
    zps_json_t *v = stats(c, i);
    bool yes = zps_json_true(zps_json_get(v, "initialized"));
    zps_json_free(v);
    return yes;
}

/* A counter of shard i's STATS ("inits", "pushes", "applied", ...). */
static double count(const cluster_t *c, size_t i, const char *name)
{
    zps_json_t *v = stats(c, i);
    double x = zps_json_number(zps_json_get(zps_json_get(v, "counts"), name), -1);
    zps_json_free(v);
    return x;
}

static char *stats_fingerprint(const cluster_t *c, size_t i)
{
    zps_json_t *v = stats(c, i);
    const char *s = zps_json_string(zps_json_get(zps_json_get(v, "config"), "fingerprint"));
    assert_non_null(s);
    char *copy = strdup(s);
    zps_json_free(v);
    return copy;
}

static void assert_contains(const char *text, const char *part)
{
    if (!strstr(text, part))
        fail_msg("\"%s\" does not contain \"%s\"", text, part);
}

/* ---- raw requests ---- */

typedef struct raw {
    void *ctx, *sock;
    uint64_t next_id;
} raw_t;

static void raw_open(raw_t *r, const char *endpoint)
{
    r->ctx = zmq_ctx_new();
    r->sock = zmq_socket(r->ctx, ZMQ_DEALER);
    int linger = 0, timeout = 5000;
    zmq_setsockopt(r->sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(r->sock, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    assert_int_equal(harness_secure_socket(r->sock), 0);
    assert_int_equal(zmq_connect(r->sock, endpoint), 0);
    r->next_id = 5000;
}

static void raw_close(raw_t *r)
{
    zmq_close(r->sock);
    zmq_ctx_term(r->ctx);
}

static Zps__Header raw_header(raw_t *r, Zps__MsgType type, uint32_t shard, uint32_t shards,
                              uint64_t total, uint64_t offset, uint64_t length)
{
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    h.type = type;
    h.worker = 0;
    h.request_id = ++r->next_id;
    h.total = total;
    h.offset = offset;
    h.length = length;
    h.batch = 1;
    h.shard_index = shard;
    h.shard_count = shards;
    return h;
}

/* Sends h (with v[n] as its payload when v is non-NULL) and returns the reply's header. */
static Zps__Header *raw_call(raw_t *r, Zps__Header *h, const float *v, size_t n)
{
    uint8_t buf[512];
    if (v)
        h->checksum = zps_crc32c(0, v, n * sizeof(float));
    size_t len = zps__header__pack(h, buf);
    assert_true(zmq_send(r->sock, buf, len, v ? ZMQ_SNDMORE : 0) >= 0);
    if (v)
        assert_true(zmq_send(r->sock, v, n * sizeof(float), 0) >= 0);
    zmq_msg_t m;
    zmq_msg_init(&m);
    assert_true(zmq_msg_recv(&m, r->sock, 0) >= 0);
    Zps__Header *reply = zps__header__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    assert_non_null(reply);
    int more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    while (more) {
        zmq_msg_init(&m);
        assert_true(zmq_msg_recv(&m, r->sock, 0) >= 0);
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    assert_true(reply->reply);
    assert_int_equal(reply->request_id, h->request_id);
    return reply;
}

static void expect_status(Zps__Header *reply, int code)
{
    if (reply->status != code)
        fail_msg("expected %s, got %s (%s)", zps_errname(code), zps_errname(reply->status),
                 reply->error);
    zps__header__free_unpacked(reply, NULL);
}

/* ---- tests ---- */

/* Shards with different --workers: INIT refused before either is initialised. */
static void test_workers_differ(void **state)
{
    (void)state;
    cluster_t c;
    const char *a0[] = {"--shard", "0/2", "--workers", "2", NULL};
    const char *a1[] = {"--shard", "1/2", "--workers", "3", NULL};
    cluster_start(&c, a0, a1);
    zps_client_t *cl = client(&c, 0);
    float v[6] = {1, 2, 3, 4, 5, 6};
    assert_int_equal(zps_client_init(cl, v, 6), ZPS_ECONFIG);
    const char *err = zps_client_last_error(cl);
    assert_contains(err, "configurations differ");
    assert_contains(err, "nothing was initialised");
    assert_contains(err, "workers (3, not 2)");
    assert_contains(err, c.eps[0]);
    assert_contains(err, c.eps[1]);
    for (size_t i = 0; i < 2; i++) {
        assert_false(initialized(&c, i));
        assert_int_equal(count(&c, i, "inits"), 0); /* no INIT was even sent */
    }
    /* Again: still refused, still nothing initialised. */
    assert_int_equal(zps_client_init(cl, v, 6), ZPS_ECONFIG);
    assert_false(initialized(&c, 0));
    assert_false(initialized(&c, 1));
    zps_client_free(cl);
    cluster_stop(&c);
}

/* Shards with different optimizers: refused, naming each setting that differs. */
static void test_optimizer_differs(void **state)
{
    (void)state;
    cluster_t c;
    const char *a0[] = {"--shard",     "0/2",      "--workers", "1",   "--mode", "asp",
                        "--optimizer", "momentum", "--lr",      "0.1", NULL};
    const char *a1[] = {"--shard",     "1/2",  "--workers", "1",    "--mode", "asp",
                        "--optimizer", "adam", "--lr",      "0.05", NULL};
    cluster_start(&c, a0, a1);
    zps_client_t *cl = client(&c, 0);
    float v[4] = {1, 2, 3, 4};
    assert_int_equal(zps_client_init(cl, v, 4), ZPS_ECONFIG);
    const char *err = zps_client_last_error(cl);
    assert_contains(err, "optimizer (adam, not momentum)");
    assert_contains(err, "lr (0.05, not 0.1)");
    assert_false(initialized(&c, 0));
    assert_false(initialized(&c, 1));
    zps_client_free(cl);
    cluster_stop(&c);
}

/* Matching shards: INIT, push and pull as before; one fingerprint in both STATS. */
static void test_matching_shards(void **state)
{
    (void)state;
    cluster_t c;
    const char *a0[] = {"--shard", "0/2", "--workers", "1", "--mode", "asp", "--lr", "0.5", NULL};
    const char *a1[] = {"--shard", "1/2", "--workers", "1", "--mode", "asp", "--lr", "0.5", NULL};
    cluster_start(&c, a0, a1);
    zps_client_t *cl = client(&c, 0);
    float v[4] = {1, 2, 3, 4}, g[4] = {2, 2, 2, 2}, got[4];
    assert_int_equal(zps_client_init(cl, v, 4), 0);
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_pull(cl, 0, got, 4, &info), 0);
    assert_int_equal(zps_client_push(cl, 0, g, 4, 1, &info), 0);
    assert_true(zps_client_push_taken(cl, 0) && zps_client_push_taken(cl, 1));
    assert_int_equal(zps_client_pull(cl, 1, got, 4, &info), 0);
    for (int i = 0; i < 4; i++)
        assert_true(got[i] == v[i] - 1.0f); /* one step of lr 0.5 on gradient 2 */
    char *f0 = stats_fingerprint(&c, 0), *f1 = stats_fingerprint(&c, 1);
    assert_string_equal(f0, f1);
    free(f0);
    free(f1);
    zps_client_free(cl);
    cluster_stop(&c);
}

/* Raw requests: a wrong fingerprint is refused and changes nothing; 0 is not checked. */
static void test_raw_fingerprint(void **state)
{
    (void)state;
    cluster_t c;
    const char *a0[] = {"--shard", "0/1", "--workers", "1", "--mode", "asp", "--lr", "0.5", NULL};
    cluster_start(&c, a0, NULL);
    raw_t r;
    raw_open(&r, c.eps[0]);

    /* Every reply states the shard's fingerprint, the one STATS shows. */
    Zps__Header h = raw_header(&r, ZPS__MSG_TYPE__MSG_HEARTBEAT, 0, 1, 0, 0, 0);
    h.worker = -1;
    Zps__Header *reply = raw_call(&r, &h, NULL, 0);
    uint64_t fp = reply->config_fingerprint;
    expect_status(reply, 0);
    assert_true(fp != 0);
    char hex[32], *shown = stats_fingerprint(&c, 0);
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)fp);
    assert_string_equal(shown, hex);
    free(shown);

    /* INIT with another fingerprint: refused, not initialised. */
    const float init[2] = {1.0f, 2.0f}, g[2] = {2.0f, 4.0f};
    h = raw_header(&r, ZPS__MSG_TYPE__MSG_INIT, 0, 1, 2, 0, 2);
    h.config_fingerprint = fp ^ 0x10;
    reply = raw_call(&r, &h, init, 2);
    assert_true(reply->config_fingerprint == fp);
    assert_non_null(strstr(reply->error, "fingerprint"));
    expect_status(reply, ZPS_ECONFIG);
    assert_false(initialized(&c, 0));

    /* INIT with none (0): served. */
    h = raw_header(&r, ZPS__MSG_TYPE__MSG_INIT, 0, 1, 2, 0, 2);
    expect_status(raw_call(&r, &h, init, 2), 0);
    assert_true(initialized(&c, 0));

    /* PUSH with another fingerprint: refused, nothing applied. */
    h = raw_header(&r, ZPS__MSG_TYPE__MSG_PUSH, 0, 1, 2, 0, 2);
    h.config_fingerprint = fp + 1;
    expect_status(raw_call(&r, &h, g, 2), ZPS_ECONFIG);
    assert_int_equal(count(&c, 0, "applied"), 0);
    zps_json_t *st = stats(&c, 0);
    assert_int_equal(zps_json_number(zps_json_get(st, "version"), -1), 0);
    assert_int_equal(zps_json_number(zps_json_at(zps_json_get(st, "clocks"), 0), -1), 0);
    zps_json_free(st);

    /* PUSH with none, then with the right one: both applied. */
    h = raw_header(&r, ZPS__MSG_TYPE__MSG_PUSH, 0, 1, 2, 0, 2);
    expect_status(raw_call(&r, &h, g, 2), 0);
    h = raw_header(&r, ZPS__MSG_TYPE__MSG_PUSH, 0, 1, 2, 0, 2);
    h.clock = 1;
    h.config_fingerprint = fp;
    expect_status(raw_call(&r, &h, g, 2), 0);
    assert_int_equal(count(&c, 0, "applied"), 2);

    zps_client_t *cl = client(&c, -1);
    float got[2];
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_pull(cl, 0, got, 2, &info), 0);
    assert_int_equal(info.min_version, 2);
    assert_true(got[0] == init[0] - 0.5f * g[0] - 0.5f * g[0]);
    assert_true(got[1] == init[1] - 0.5f * g[1] - 0.5f * g[1]);
    zps_client_free(cl);
    raw_close(&r);
    cluster_stop(&c);
}

/* A push one shard takes and the other refuses: ZPS_EPARTIAL, naming both. */
static void test_partial_push(void **state)
{
    (void)state;
    cluster_t c;
    const char *a0[] = {"--shard", "0/2", "--workers", "1", "--mode", "asp", "--lr", "1", NULL};
    const char *a1[] = {"--shard", "1/2", "--workers", "1", "--mode", "asp", "--lr", "1", NULL};
    cluster_start(&c, a0, a1);
    zps_client_t *cl = client(&c, 0);
    float v[4] = {0, 0, 0, 0}, g[4] = {1, 1, 1, 1};
    assert_int_equal(zps_client_init(cl, v, 4), 0);
    /* Shard 0 alone gets a push at clock 0, so it expects clock 1 and shard 1 clock 0. */
    raw_t r;
    raw_open(&r, c.eps[0]);
    Zps__Header h = raw_header(&r, ZPS__MSG_TYPE__MSG_PUSH, 0, 2, 4, 0, 2);
    expect_status(raw_call(&r, &h, g, 2), 0);
    raw_close(&r);

    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_push(cl, 1, g, 4, 1, &info), ZPS_EPARTIAL);
    assert_true(zps_client_push_taken(cl, 0));
    assert_false(zps_client_push_taken(cl, 1));
    assert_false(zps_client_push_taken(cl, 2));
    assert_int_equal(zps_client_last_remote_status(cl), ZPS_ECLOCK);
    const char *err = zps_client_last_error(cl);
    assert_contains(err, "taken by shard 0 only");
    assert_contains(err, c.eps[1]);
    assert_contains(err, "ZPS_ECLOCK");
    assert_int_equal(info.max_version, 2); /* from shard 0, which applied it */
    assert_int_equal(count(&c, 0, "applied"), 2);
    assert_int_equal(count(&c, 1, "applied"), 0);
    /* Pushing clock 0 brings shard 1 level; shard 0 acknowledges it as a retry. */
    assert_int_equal(zps_client_push(cl, 0, g, 4, 1, &info), 0);
    assert_true(info.retried);
    assert_int_equal(count(&c, 1, "applied"), 1);
    zps_client_free(cl);
    cluster_stop(&c);
}

/* NaN or infinity: refused by the client, no shard sees any of it. */
static void test_nonfinite_refused_first(void **state)
{
    (void)state;
    cluster_t c;
    const char *a0[] = {"--shard", "0/2", "--workers", "1", "--mode", "asp", NULL};
    const char *a1[] = {"--shard", "1/2", "--workers", "1", "--mode", "asp", NULL};
    cluster_start(&c, a0, a1);
    zps_client_t *cl = client(&c, 0);
    float v[4] = {1, 2, 3, INFINITY}; /* the bad value is in shard 1's slice */
    assert_int_equal(zps_client_init(cl, v, 4), ZPS_ENONFINITE);
    assert_contains(zps_client_last_error(cl), "initial value 3");
    for (size_t i = 0; i < 2; i++) {
        assert_false(initialized(&c, i));
        assert_int_equal(count(&c, i, "inits"), 0);
    }
    v[3] = 4;
    assert_int_equal(zps_client_init(cl, v, 4), 0);
    float g[4] = {1, 1, 1, NAN};
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_push(cl, 0, g, 4, 1, &info), ZPS_ENONFINITE);
    assert_contains(zps_client_last_error(cl), "gradient element 3");
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(count(&c, i, "pushes"), 0);
    zps_client_free(cl);
    cluster_stop(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workers_differ),  cmocka_unit_test(test_optimizer_differs),
        cmocka_unit_test(test_matching_shards), cmocka_unit_test(test_raw_fingerprint),
        cmocka_unit_test(test_partial_push),    cmocka_unit_test(test_nonfinite_refused_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
