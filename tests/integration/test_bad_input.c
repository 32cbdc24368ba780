/*
 * test_bad_input.c - malformed and wrong requests sent raw to a running
 * zps-server. Each must get an ERROR reply with its own status and a reason,
 * the server must keep serving, and the model must be exactly as before.
 *
 * Messages are built here with protobuf-c and raw ZeroMQ frames, not with
 * common/wire.c, so the test does not share the encoder it is checking.
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
#include "wire.h"
#include "zps.pb-c.h"

#define N 6 /* elements; shard 0/2 owns [0, 3), shard 1/2 owns [3, 6) */

typedef struct fixture {
    harness_server_t srv;
    void *ctx;
    void *sock;
    uint64_t next_id;
} fixture_t;

/* A server started with args, and a raw DEALER connected to it; NULL if it did not start. */
static fixture_t *fixture_new(const char *const *args)
{
    fixture_t *f = calloc(1, sizeof(*f));
    if (!f || harness_start(&f->srv, args) != 0) {
        free(f);
        return NULL;
    }
    f->ctx = zmq_ctx_new();
    f->sock = zmq_socket(f->ctx, ZMQ_DEALER);
    int linger = 0, timeout = 5000;
    zmq_setsockopt(f->sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(f->sock, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    assert_int_equal(harness_secure_socket(f->sock), 0);
    zmq_connect(f->sock, f->srv.endpoint);
    f->next_id = 1000;
    return f;
}

/* Stops the server and closes the socket; the server's exit status (0: clean). */
static int fixture_free(fixture_t *f)
{
    zmq_close(f->sock);
    zmq_ctx_term(f->ctx);
    int rc = harness_stop(&f->srv);
    free(f);
    return rc;
}

static int setup(void **state)
{
    /* Shard 1 of 2, one worker: a valid push is applied at once. */
    const char *args[] = {"--workers", "1", "--shard", "1/2", "--lr", "0.5", NULL};
    fixture_t *f = fixture_new(args);
    *state = f;
    return f ? 0 : -1;
}

static int teardown(void **state)
{
    return fixture_free(*state) == 0 ? 0 : -1;
}

/* A well-formed header for this shard; callers then spoil one thing. */
static Zps__Header header(fixture_t *f, Zps__MsgType type)
{
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    h.type = type;
    h.worker = 0;
    h.request_id = ++f->next_id;
    h.total = N;
    h.offset = 3;
    h.length = 3;
    h.batch = 1;
    h.shard_index = 1;
    h.shard_count = 2;
    return h;
}

static void send_frames(fixture_t *f, const void *hdr, size_t hlen, const void *payload,
                        size_t plen, bool with_payload)
{
    assert_true(zmq_send(f->sock, hdr, hlen, with_payload ? ZMQ_SNDMORE : 0) >= 0);
    if (with_payload)
        assert_true(zmq_send(f->sock, payload, plen, 0) >= 0);
}

static void send_header(fixture_t *f, Zps__Header *h, const void *payload, size_t plen,
                        bool with_payload)
{
    uint8_t buf[512];
    size_t n = zps__header__pack(h, buf);
    send_frames(f, buf, n, payload, plen, with_payload);
}

/* Receives one reply; returns its header (caller frees) and payload size in *plen. */
static Zps__Header *recv_reply(fixture_t *f, float *payload, size_t cap, size_t *plen)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    assert_true(zmq_msg_recv(&m, f->sock, 0) >= 0);
    Zps__Header *h = zps__header__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    assert_non_null(h);
    int more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    *plen = 0;
    if (more) {
        zmq_msg_init(&m);
        assert_true(zmq_msg_recv(&m, f->sock, 0) >= 0);
        *plen = zmq_msg_size(&m);
        assert_true(*plen <= cap * sizeof(float));
        memcpy(payload, zmq_msg_data(&m), *plen);
        zmq_msg_close(&m);
    }
    return h;
}

/* Expects an ERROR reply to the last request with status `code` and a reason. */
static void expect_error(fixture_t *f, int code, uint64_t request_id)
{
    float buf[8];
    size_t plen;
    Zps__Header *h = recv_reply(f, buf, 8, &plen);
    if (h->status != code)
        fail_msg("expected %s, got %s (%s)", zps_errname(code), zps_errname(h->status), h->error);
    assert_true(h->reply);
    assert_int_equal(plen, 0);
    assert_true(strlen(h->error) > 0);
    if (request_id)
        assert_int_equal(h->request_id, request_id);
    zps__header__free_unpacked(h, NULL);
}

static void push_payload(fixture_t *f, Zps__Header *h, const float *v, size_t n)
{
    h->checksum = zps_crc32c(0, v, n * sizeof(float));
    send_header(f, h, v, n * sizeof(float), true);
}

/* The parameters and version an observer's pull h (worker -1) gets from a 3-element shard. */
static uint64_t observe_with(fixture_t *f, Zps__Header *h, float out[3])
{
    h->worker = -1;
    send_header(f, h, NULL, 0, false);
    size_t plen;
    Zps__Header *r = recv_reply(f, out, 3, &plen);
    assert_int_equal(r->status, 0);
    assert_int_equal(plen, 3 * sizeof(float));
    uint64_t v = r->model_version;
    zps__header__free_unpacked(r, NULL);
    return v;
}

/* The shard's parameters and version, as an observer sees them. */
static uint64_t observe(fixture_t *f, float out[3])
{
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_PULL);
    return observe_with(f, &h, out);
}

/* The same for a whole-model shard 0/1 of N = 3. */
static uint64_t observe_shard0(fixture_t *f, float out[3])
{
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_PULL);
    h.total = 3;
    h.offset = 0;
    h.shard_index = 0;
    h.shard_count = 1;
    return observe_with(f, &h, out);
}

static void test_bad_requests(void **state)
{
    fixture_t *f = *state;
    const float init[3] = {1.0f, 2.0f, 3.0f};
    const float good[3] = {0.5f, 0.5f, 0.5f};

    /* Before INIT: a push has no model to go to. */
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    push_payload(f, &h, good, 3);
    expect_error(f, ZPS_ENOTINIT, h.request_id);

    /* INIT this shard. */
    h = header(f, ZPS__MSG_TYPE__MSG_INIT);
    push_payload(f, &h, init, 3);
    float tmp[8];
    size_t plen;
    Zps__Header *r = recv_reply(f, tmp, 8, &plen);
    assert_int_equal(r->status, 0);
    zps__header__free_unpacked(r, NULL);

    /* 1. An undecodable header. */
    const unsigned char junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    send_frames(f, junk, sizeof(junk), NULL, 0, false);
    expect_error(f, ZPS_EPROTO, 0);

    /* 2. A wrong protocol version. */
    h = header(f, ZPS__MSG_TYPE__MSG_PULL);
    h.version = 99;
    send_header(f, &h, NULL, 0, false);
    expect_error(f, ZPS_EVERSION, h.request_id);

    /* 3. A payload of the wrong length: header says 3 floats, frame holds 2. */
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    h.checksum = zps_crc32c(0, good, 2 * sizeof(float));
    send_header(f, &h, good, 2 * sizeof(float), true);
    expect_error(f, ZPS_ELENGTH, h.request_id);
    /* ... and one that is not a whole number of floats. */
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    h.checksum = zps_crc32c(0, good, 11);
    send_header(f, &h, good, 11, true);
    expect_error(f, ZPS_ELENGTH, h.request_id);

    /* 4. A bad checksum. */
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    h.checksum = zps_crc32c(0, good, sizeof(good)) ^ 1u;
    send_header(f, &h, good, sizeof(good), true);
    expect_error(f, ZPS_ECHECKSUM, h.request_id);

    /* 5. A range that does not match the shard: shard 0's slice sent to shard 1. */
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    h.offset = 0;
    push_payload(f, &h, good, 3);
    expect_error(f, ZPS_ERANGE, h.request_id);
    /* ... a request addressed to another shard number. */
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    h.shard_index = 0;
    push_payload(f, &h, good, 3);
    expect_error(f, ZPS_ERANGE, h.request_id);
    /* ... another model size. */
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    h.total = 8;
    h.offset = 4;
    h.length = 4;
    const float four[4] = {0};
    push_payload(f, &h, four, 4);
    expect_error(f, ZPS_ESIZE, h.request_id);

    /* 6. Non-finite gradient values. */
    float nan_grad[3] = {0.5f, NAN, 0.5f};
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    push_payload(f, &h, nan_grad, 3);
    expect_error(f, ZPS_ENONFINITE, h.request_id);
    float inf_grad[3] = {0.5f, 0.5f, -INFINITY};
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    push_payload(f, &h, inf_grad, 3);
    expect_error(f, ZPS_ENONFINITE, h.request_id);

    /* 7. An unknown message type. */
    h = header(f, (Zps__MsgType)42);
    send_header(f, &h, NULL, 0, false);
    expect_error(f, ZPS_ETYPE, h.request_id);

    /* 8. Frames that do not fit the type: a PULL with a payload, a PUSH without. */
    h = header(f, ZPS__MSG_TYPE__MSG_PULL);
    push_payload(f, &h, good, 3);
    expect_error(f, ZPS_EFRAMES, h.request_id);
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    send_header(f, &h, NULL, 0, false);
    expect_error(f, ZPS_EFRAMES, h.request_id);

    /* 9. An unknown worker, a zero batch, a clock that skips ahead. */
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    h.worker = 7;
    push_payload(f, &h, good, 3);
    expect_error(f, ZPS_EWORKER, h.request_id);
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    h.batch = 0;
    push_payload(f, &h, good, 3);
    expect_error(f, ZPS_EBATCH, h.request_id);
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    h.clock = 3;
    push_payload(f, &h, good, 3);
    expect_error(f, ZPS_ECLOCK, h.request_id);

    /* 10. INIT again with other values. */
    h = header(f, ZPS__MSG_TYPE__MSG_INIT);
    push_payload(f, &h, good, 3);
    expect_error(f, ZPS_EINITED, h.request_id);

    /* 11. A message that claims to be a reply. */
    h = header(f, ZPS__MSG_TYPE__MSG_STATS);
    h.reply = true;
    send_header(f, &h, NULL, 0, false);
    expect_error(f, ZPS_ETYPE, h.request_id);

    /* Nothing changed. */
    float now[3];
    assert_int_equal(observe(f, now), 0);
    assert_memory_equal(now, init, sizeof(init));

    /* And the server still works: one valid push is one step (W = 1). */
    h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    push_payload(f, &h, good, 3);
    r = recv_reply(f, tmp, 8, &plen);
    assert_int_equal(r->status, 0);
    zps__header__free_unpacked(r, NULL);
    assert_int_equal(observe(f, now), 1);
    for (int i = 0; i < 3; i++)
        assert_true(now[i] == init[i] - 0.5f * 0.5f);
    assert_true(harness_alive(&f->srv));
}

/* The server's STATS count every refusal under its own name. */
static void test_stats_count_errors(void **state)
{
    fixture_t *f = *state;
    const char *eps[2] = {"tcp://127.0.0.1:1", f->srv.endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.timeout_ms = 5000;
    zps_client_t *c;
    assert_int_equal(zps_client_new(eps, 2, &o, &c), 0);
    char *json = NULL;
    assert_int_equal(zps_client_stats(c, 1, &json), 0);
    assert_non_null(strstr(json, "\"ZPS_ECHECKSUM\":1"));
    assert_non_null(strstr(json, "\"ZPS_ENONFINITE\":2"));
    assert_non_null(strstr(json, "\"ZPS_ERANGE\":2"));
    assert_non_null(strstr(json, "\"shard\":1,\"shards\":2"));
    free(json);
    zps_client_free(c);
}

/*
 * INIT of a model that travels in frames (12 MiB: 12 frames), read into the
 * store where the frames arrived: the values come back exactly; the same
 * INIT again is acknowledged; one that differs in its last value, or in a
 * middle frame, is ZPS_EINITED and changes nothing.
 */
static void test_init_in_frames(void **state)
{
    (void)state;
    enum { BIG = 3 << 20 };
    const char *args[] = {"--workers", "1", "--lr", "0.5", NULL};
    harness_server_t srv;
    assert_int_equal(harness_start(&srv, args), 0);
    const char *eps[1] = {srv.endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.timeout_ms = 30000;
    zps_client_t *c;
    assert_int_equal(zps_client_new(eps, 1, &o, &c), 0);
    float *v = malloc(BIG * sizeof(float)), *got = malloc(BIG * sizeof(float));
    assert_non_null(v);
    assert_non_null(got);
    for (size_t i = 0; i < BIG; i++)
        v[i] = (float)((i * 2654435761u) % 1000003) * 1e-6f - 0.5f;
    assert_int_equal(zps_client_init(c, v, BIG), 0);
    assert_int_equal(zps_client_init(c, v, BIG), 0); /* the same: acknowledged */
    float keep = v[BIG - 1];
    v[BIG - 1] = keep + 1.0f;
    assert_int_equal(zps_client_init(c, v, BIG), ZPS_EREMOTE);
    assert_int_equal(zps_client_last_remote_status(c), ZPS_EINITED);
    v[BIG - 1] = keep;
    size_t mid = 5 * (ZPS_WIRE_FRAME_BYTES / sizeof(float)) + 17; /* in the sixth frame */
    keep = v[mid];
    v[mid] = 42.0f;
    assert_int_equal(zps_client_init(c, v, BIG), ZPS_EREMOTE);
    assert_int_equal(zps_client_last_remote_status(c), ZPS_EINITED);
    v[mid] = keep;
    zps_client_opts_t ob;
    zps_client_opts_default(&ob);
    ob.worker = -1;
    ob.timeout_ms = 30000;
    zps_client_t *obs;
    assert_int_equal(zps_client_new(eps, 1, &ob, &obs), 0);
    assert_int_equal(zps_client_pull(obs, 0, got, BIG, NULL), 0);
    assert_memory_equal(got, v, BIG * sizeof(float));
    zps_client_free(obs);
    zps_client_free(c);
    free(v);
    free(got);
    assert_int_equal(harness_stop(&srv), 0);
}

/* A reply's header; caller frees. */
static Zps__Header *reply(fixture_t *f)
{
    float buf[8];
    size_t plen;
    return recv_reply(f, buf, 8, &plen);
}

/* The lease request of a pull of worker w for clock 0 to a whole-model shard (N = 3). */
static Zps__Header lease_pull(fixture_t *f, int w, uint64_t examples, uint32_t batch,
                              uint32_t epochs, uint32_t want)
{
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_PULL);
    h.worker = w;
    h.total = 3;
    h.offset = 0;
    h.shard_index = 0;
    h.shard_count = 1;
    h.flags = ZPS_FLAG_LEASE;
    h.plan_examples = examples;
    h.plan_batch = batch;
    h.plan_epochs = epochs;
    h.lease_want = want;
    return h;
}

/* A push of worker 0 at `clock` of batch g (lease_done g + 1) with `examples` examples. */
static Zps__Header lease_push(fixture_t *f, uint64_t clock, uint64_t g, uint32_t examples)
{
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_PUSH);
    h.total = 3;
    h.offset = 0;
    h.shard_index = 0;
    h.shard_count = 1;
    h.clock = clock;
    h.lease_done = g + 1;
    h.batch = examples;
    return h;
}

/* Shard 0's STATS JSON (caller frees). */
static char *stats_json(fixture_t *f)
{
    Zps__Header h = header(f, ZPS__MSG_TYPE__MSG_STATS);
    h.worker = -1;
    h.length = 0;
    h.shard_index = 0;
    h.shard_count = 1;
    send_header(f, &h, NULL, 0, false);
    Zps__Header *r = reply(f);
    if (r->status != 0)
        fail_msg("STATS: %s (%s)", zps_errname(r->status), r->error);
    char *json = strdup(r->json);
    zps__header__free_unpacked(r, NULL);
    return json;
}

/*
 * The shared data assignment's requests (docs/protocol.md): a lease request
 * to a shard other than 0, under BSP, from an observer, wanting too many, or
 * with another plan than the run's; a push naming a batch of another size or
 * none of the plan's; a push naming none once the run shares its batches; a
 * lease asked by a plain push: each refused with its code, nothing changed
 * (the parameters, the version, the leases held, the batches completed).
 */
static void test_bad_leases(void **state)
{
    fixture_t *f = *state; /* shard 1/2 */
    Zps__Header h = lease_pull(f, 0, 100, 10, 2, 3);
    h.total = N;
    h.offset = 3;
    h.shard_index = 1;
    h.shard_count = 2;
    send_header(f, &h, NULL, 0, false);
    expect_error(f, ZPS_EMODE, h.request_id);

    const char *bsp_args[] = {"--workers", "2", "--mode", "bsp", NULL};
    fixture_t *b = fixture_new(bsp_args);
    assert_non_null(b);
    h = lease_pull(b, 0, 100, 10, 2, 3);
    send_header(b, &h, NULL, 0, false);
    expect_error(b, ZPS_EMODE, h.request_id);
    assert_int_equal(fixture_free(b), 0);

    const char *asp_args[] = {"--workers", "2", "--mode", "asp", "--lr", "0.5", NULL};
    fixture_t *a = fixture_new(asp_args);
    assert_non_null(a);
    const float init[3] = {1.0f, 2.0f, 3.0f}, good[3] = {0.5f, 0.5f, 0.5f};
    h = header(a, ZPS__MSG_TYPE__MSG_INIT);
    h.total = 3;
    h.offset = 0;
    h.shard_index = 0;
    h.shard_count = 1;
    push_payload(a, &h, init, 3);
    Zps__Header *r = reply(a);
    assert_int_equal(r->status, 0);
    zps__header__free_unpacked(r, NULL);

    h = lease_pull(a, 0, 100, 10, 2, ZPS_WIRE_MAX_LEASES + 1);
    send_header(a, &h, NULL, 0, false);
    expect_error(a, ZPS_EINVAL, h.request_id);
    h = lease_pull(a, 0, 100, 0, 2, 3); /* batches of 0 examples */
    send_header(a, &h, NULL, 0, false);
    expect_error(a, ZPS_EINVAL, h.request_id);
    h = lease_pull(a, -1, 100, 10, 2, 3);
    send_header(a, &h, NULL, 0, false);
    expect_error(a, ZPS_EWORKER, h.request_id);

    /* The run's plan: 100 examples, batches of 10, 2 epochs (20 batches). */
    h = lease_pull(a, 0, 100, 10, 2, 3);
    send_header(a, &h, NULL, 0, false);
    float got[3];
    size_t plen;
    r = recv_reply(a, got, 3, &plen);
    assert_int_equal(r->status, 0);
    assert_true(r->flags & ZPS_FLAG_LEASE);
    assert_false(r->flags & ZPS_FLAG_EXHAUSTED);
    assert_int_equal(r->n_leases, 3);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(r->leases[i], i);
    zps__header__free_unpacked(r, NULL);
    h = lease_pull(a, 1, 100, 20, 2, 3); /* another worker, another plan */
    send_header(a, &h, NULL, 0, false);
    expect_error(a, ZPS_ECONFIG, h.request_id);

    h = lease_push(a, 0, 1, 9); /* batch 1 has 10 examples */
    push_payload(a, &h, good, 3);
    expect_error(a, ZPS_EBATCH, h.request_id);
    h = lease_push(a, 0, 20, 10); /* the plan has batches 0..19 */
    push_payload(a, &h, good, 3);
    expect_error(a, ZPS_EBATCH, h.request_id);
    h = lease_push(a, 0, 0, 10);
    h.lease_done = 0; /* a worker with the fixed assignment */
    push_payload(a, &h, good, 3);
    expect_error(a, ZPS_ECONFIG, h.request_id);
    h = lease_push(a, 0, 0, 10);
    h.flags = ZPS_FLAG_LEASE; /* leases come with a pull or an exchange */
    push_payload(a, &h, good, 3);
    expect_error(a, ZPS_EINVAL, h.request_id);

    /* Nothing changed: the model, and worker 0 holds its three leases, none complete. */
    assert_int_equal(observe_shard0(a, got), 0);
    assert_memory_equal(got, init, sizeof(init));
    char *json = stats_json(a);
    if (!strstr(json, "\"completed\":0,") || !strstr(json, "\"held\":[3,0]"))
        fail_msg("after the refusals: %s", json);
    free(json);

    /* The push of batch 0 completes it, once: its retry changes nothing. */
    for (int k = 0; k < 2; k++) {
        h = lease_push(a, 0, 0, 10);
        push_payload(a, &h, good, 3);
        r = reply(a);
        assert_int_equal(r->status, 0);
        assert_int_equal((r->flags & ZPS_FLAG_RETRY) != 0, k == 1);
        zps__header__free_unpacked(r, NULL);
    }
    json = stats_json(a);
    if (!strstr(json, "\"completed\":1,") || !strstr(json, "\"held\":[2,0]") ||
        !strstr(json, "\"examples_per_epoch\":[10,0]"))
        fail_msg("after batch 0: %s", json);
    free(json);
    assert_int_equal(observe_shard0(a, got), 1);
    assert_true(harness_alive(&a->srv));
    assert_int_equal(fixture_free(a), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_stats_count_errors),
        cmocka_unit_test(test_init_in_frames),
        cmocka_unit_test(test_bad_leases),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
