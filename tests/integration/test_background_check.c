/*
 * test_background_check.c - the checks of received payloads (CRC32C and
 * finite scan) taken off the server loop's thread (--background-step-bytes
 * 0: every payload), made slow on purpose (--check-delay-ms), through a real
 * zps-server on 127.0.0.1 and raw DEALER sockets:
 *   - while a push is being checked, another connection's STATS is answered
 *     (and says "check_running": true); the push is answered once checked,
 *     and the step it makes is w0 - lr * g, computed here, bit for bit;
 *   - a STATS sent on the push's own connection right behind it is answered
 *     after it: replies stay in the order of the requests;
 *   - a push whose checksum is wrong, and one with a NaN, are refused after
 *     their check (ZPS_ECHECKSUM, ZPS_ENONFINITE), the parameters unchanged;
 *   - SIGTERM during a check waits for it: the push is answered first;
 *   - the control, with checks on the loop's thread: none counted in
 *     checks_background, none seen running.
 *
 * Messages are built here with protobuf-c and raw ZeroMQ frames, not with
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
#include "error.h"
#include "harness.h"
#include "timeutil.h"
#include "wire.h"
#include "zps.pb-c.h"

#define N 4
#define DELAY_MS 800

static const float w0[N] = {1, -2, 3, -4};
static const float g[N] = {0.5f, 0.25f, -1, 2}; /* lr 0.5: every update exact */

typedef struct fixture {
    harness_server_t srv;
    void *ctx;
    void *sock; /* the worker's connection */
    void *obs;  /* another connection, for STATS */
    uint64_t next_id;
} fixture_t;

static void *dealer(fixture_t *f)
{
    void *s = zmq_socket(f->ctx, ZMQ_DEALER);
    int linger = 0, timeout = 10000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    assert_int_equal(harness_secure_socket(s), 0);
    assert_int_equal(zmq_connect(s, f->srv.endpoint), 0);
    return s;
}

static fixture_t *start(const char *background)
{
    fixture_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    /* One worker, BSP: a push makes its step at once. */
    const char *args[] = {"--workers",
                          "1",
                          "--lr",
                          "0.5",
                          "--background-step-bytes",
                          background,
                          "--check-delay-ms",
                          "800",
                          "--log-level",
                          "warn",
                          NULL};
    assert_int_equal(harness_start(&f->srv, args), 0);
    f->ctx = zmq_ctx_new();
    f->sock = dealer(f);
    f->obs = dealer(f);
    f->next_id = 100;
    return f;
}

static void stop(fixture_t *f)
{
    zmq_close(f->sock);
    zmq_close(f->obs);
    zmq_ctx_term(f->ctx);
    free(f);
}

static Zps__Header header(fixture_t *f, Zps__MsgType type, uint64_t clock)
{
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    h.type = type;
    h.worker = 0;
    h.request_id = ++f->next_id;
    h.clock = clock;
    h.total = N;
    h.offset = 0;
    h.length = N;
    h.batch = 1;
    h.shard_index = 0;
    h.shard_count = 1;
    return h;
}

/* Sends h, with v (n floats) as its payload when v is non-NULL. */
static void send_msg(void *sock, Zps__Header *h, const float *v, size_t n)
{
    uint8_t buf[512];
    size_t len = zps__header__pack(h, buf);
    assert_true(zmq_send(sock, buf, len, v ? ZMQ_SNDMORE : 0) >= 0);
    if (v)
        assert_true(zmq_send(sock, v, n * sizeof(float), 0) >= 0);
}

static void send_payload(void *sock, Zps__Header *h, const float *v)
{
    h->checksum = zps_crc32c(0, v, N * sizeof(float));
    send_msg(sock, h, v, N);
}

/* One reply: its header (the caller frees it), its payload into out (up to N floats). */
static Zps__Header *recv_reply(void *sock, float *out, size_t *floats)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    assert_true(zmq_msg_recv(&m, sock, 0) >= 0);
    Zps__Header *h = zps__header__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    assert_non_null(h);
    int more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    size_t n = 0;
    while (more) {
        zmq_msg_init(&m);
        assert_true(zmq_msg_recv(&m, sock, 0) >= 0);
        if (out && n == 0 && zmq_msg_size(&m) <= N * sizeof(float)) {
            memcpy(out, zmq_msg_data(&m), zmq_msg_size(&m));
            n = zmq_msg_size(&m) / sizeof(float);
        }
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    if (floats)
        *floats = n;
    return h;
}

/* Expects a reply to request `id` with status `code`. */
static void expect(void *sock, uint64_t id, int code)
{
    Zps__Header *h = recv_reply(sock, NULL, NULL);
    if (h->status != code)
        fail_msg("request %llu: expected %s, got %s (%s)", (unsigned long long)id,
                 zps_errname(code), zps_errname(h->status), h->error ? h->error : "");
    assert_int_equal(h->request_id, id);
    zps__header__free_unpacked(h, NULL);
}

/* STATS over `sock`; the reply's JSON (the caller frees it). */
static char *stats(fixture_t *f, void *sock)
{
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_STATS, 0);
    h.length = 0;
    send_msg(sock, &h, NULL, 0);
    Zps__Header *r = recv_reply(sock, NULL, NULL);
    assert_int_equal(r->status, 0);
    assert_int_equal(r->request_id, h.request_id);
    char *json = strdup(r->json);
    zps__header__free_unpacked(r, NULL);
    return json;
}

static uint64_t json_num(const char *json, const char *key)
{
    const char *p = strstr(json, key);
    return p ? strtoull(p + strlen(key), NULL, 10) : UINT64_MAX;
}

/* The shard's parameters and version, as an observer sees them. */
static uint64_t observe(fixture_t *f, float out[N])
{
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_PULL, 0);
    h.worker = -1;
    h.length = 0;
    send_msg(f->obs, &h, NULL, 0);
    size_t n;
    Zps__Header *r = recv_reply(f->obs, out, &n);
    assert_int_equal(r->status, 0);
    assert_int_equal(n, N);
    uint64_t v = r->model_version;
    zps__header__free_unpacked(r, NULL);
    return v;
}

static void init(fixture_t *f)
{
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_INIT, 0);
    send_payload(f->sock, &h, w0);
    expect(f->sock, h.request_id, 0);
}

/* STATS on f->obs until one says a check is running, or `ms` pass: how many did. */
static int stats_while_checking(fixture_t *f, int ms)
{
    int seen = 0;
    uint64_t until = zps_now_ns() + (uint64_t)ms * 1000000ull;
    while (zps_now_ns() < until && !seen) {
        char *json = stats(f, f->obs);
        seen += strstr(json, "\"check_running\":true") != NULL;
        free(json);
        if (!seen)
            zps_sleep_ms(20);
    }
    return seen;
}

static void test_served_while_checking(void **state)
{
    (void)state;
    fixture_t *f = start("0");
    init(f);
    uint64_t t0 = zps_now_ns();
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_PUSH, 0);
    send_payload(f->sock, &h, g);
    /* The other connection's STATS is answered while the push is checked. */
    assert_int_equal(stats_while_checking(f, DELAY_MS / 2), 1);
    uint64_t seen_ns = zps_now_ns();
    expect(f->sock, h.request_id, 0);
    uint64_t done_ns = zps_now_ns();
    assert_true(done_ns - t0 >= (uint64_t)DELAY_MS * 1000000ull);
    assert_true(seen_ns < done_ns);

    float want[N], got[N];
    for (int i = 0; i < N; i++)
        want[i] = w0[i] - 0.5f * g[i];
    assert_int_equal(observe(f, got), 1);
    assert_memory_equal(got, want, sizeof(want));

    /* A STATS right behind a push on the push's own connection comes after its reply. */
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH, 1);
    send_payload(f->sock, &h, g);
    Zps__Header s = header(f, ZPS__MSG_TYPE__MSG_STATS, 0);
    s.length = 0;
    send_msg(f->sock, &s, NULL, 0);
    expect(f->sock, h.request_id, 0);
    expect(f->sock, s.request_id, 0);
    for (int i = 0; i < N; i++)
        want[i] -= 0.5f * g[i];
    assert_int_equal(observe(f, got), 2);
    assert_memory_equal(got, want, sizeof(want));

    char *json = stats(f, f->obs);
    /* The INIT and both pushes. */
    if (json_num(json, "\"checks_background\":") != 3 || !strstr(json, "\"check_running\":false"))
        fail_msg("three checks off the loop, none running now: %s", json);
    free(json);
    assert_int_equal(harness_stop(&f->srv), 0);
    stop(f);
}

static void test_bad_payloads_refused(void **state)
{
    (void)state;
    fixture_t *f = start("0");
    init(f);
    /* A checksum that does not match: found by the check off the loop. */
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_PUSH, 0);
    h.checksum = zps_crc32c(0, g, N * sizeof(float)) ^ 1u;
    send_msg(f->sock, &h, g, N);
    expect(f->sock, h.request_id, ZPS_ECHECKSUM);
    /* A value that is not finite: found by the same check's scan. */
    float bad[N] = {0.5f, NAN, 1, 1};
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH, 0);
    send_payload(f->sock, &h, bad);
    expect(f->sock, h.request_id, ZPS_ENONFINITE);
    float got[N];
    assert_int_equal(observe(f, got), 0);
    assert_memory_equal(got, w0, sizeof(w0));
    char *json = stats(f, f->obs);
    if (json_num(json, "\"checks_background\":") != 3 || json_num(json, "\"steps\":") != 0)
        fail_msg("three checks off the loop, no step: %s", json);
    free(json);
    assert_int_equal(harness_stop(&f->srv), 0);
    stop(f);
}

static void test_sigterm_waits(void **state)
{
    (void)state;
    fixture_t *f = start("0");
    init(f);
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_PUSH, 0);
    send_payload(f->sock, &h, g);
    assert_int_equal(stats_while_checking(f, DELAY_MS / 2), 1);
    /* harness_stop: SIGTERM, then the exit, which waits for the check and its answer. */
    assert_int_equal(harness_stop(&f->srv), 0);
    expect(f->sock, h.request_id, 0);
    stop(f);
}

/* The control: checks on the loop's thread are never seen running. */
static void test_on_the_loop(void **state)
{
    (void)state;
    fixture_t *f = start("1073741824");
    init(f);
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_PUSH, 0);
    send_payload(f->sock, &h, g);
    expect(f->sock, h.request_id, 0);
    char *json = stats(f, f->obs);
    if (json_num(json, "\"checks_background\":") != 0 || !strstr(json, "\"check_running\":false"))
        fail_msg("no check off the loop: %s", json);
    free(json);
    float got[N], want[N];
    for (int i = 0; i < N; i++)
        want[i] = w0[i] - 0.5f * g[i];
    assert_int_equal(observe(f, got), 1);
    assert_memory_equal(got, want, sizeof(want));
    assert_int_equal(harness_stop(&f->srv), 0);
    stop(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_served_while_checking),
        cmocka_unit_test(test_bad_payloads_refused),
        cmocka_unit_test(test_sigterm_waits),
        cmocka_unit_test(test_on_the_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
