/*
 * test_sealed_sessions.c - sealed sessions (common/seal.h, server/sessions.h) through a
 * real zps-server with keys, on 127.0.0.1:
 *   - a keyed client's exchanges go sealed (STATS counts them opened) and
 *     give the parameters computed here by hand;
 *   - by hand, as an attacker or a faulty peer would: a session asked over
 *     CURVE, a sealed PUSH applied once; the same bytes sent again (a
 *     recorded message replayed) get no reply, are counted refused, and the
 *     model is as after one push; a message with a changed byte likewise;
 *   - roles hold inside a session: a worker key for rank 0 pushing as rank 1
 *     is refused (ZPS_EDENIED) and changes nothing;
 *   - random frames on the sealed socket (garbage, seal frames naming the
 *     live session with random counters and tags, wrong frame counts) are
 *     all refused unanswered; the server keeps serving and the model is
 *     unchanged;
 *   - a session ends with its CURVE connection: a sealed message after it
 *     closed is answered with the server's notice that it knows no such
 *     session, and nothing else.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "zps/zps.h"
#include "error.h"
#include "harness.h"
#include "json.h"
#include "keys.h"
#include "seal.h"
#include "wire.h"

#define N 4

static char dir[64];
static zps_keypair_t srv_kp, admin_kp, worker_kp;
static harness_server_t srv;

static void path(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", dir, name);
}

static void write_keys(void)
{
    char why[256], p[128];
    snprintf(dir, sizeof(dir), "/tmp/zps-test-seal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    zps_keypair_t *kps[] = {&srv_kp, &admin_kp, &worker_kp};
    const char *names[] = {"server", "admin", "worker"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(zps_keypair_generate(kps[i], why, sizeof(why)), 0);
        path(p, sizeof(p), names[i]);
        assert_int_equal(zps_keypair_write(p, kps[i], false, why, sizeof(why)), 0);
    }
    char a[ZPS_KEY_Z85_CHARS + 1], w[ZPS_KEY_Z85_CHARS + 1];
    zps_key_encode(admin_kp.public_key, a);
    zps_key_encode(worker_kp.public_key, w);
    path(p, sizeof(p), "authorized_keys");
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "%s admin\n%s worker 0\n", a, w);
    assert_int_equal(fclose(f), 0);
}

static void remove_keys(void)
{
    const char *names[] = {"server.key", "server.pub", "admin.key",      "admin.pub",
                           "worker.key", "worker.pub", "authorized_keys"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char p[128];
        path(p, sizeof(p), names[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* ASP, 2 workers, lr 0.5: each push is applied on arrival. */
static void start_server(void)
{
    char key[128], ak[128];
    path(key, sizeof(key), "server.key");
    path(ak, sizeof(ak), "authorized_keys");
    const char *args[] = {
        "--workers",         "2", "--mode",      "asp",   "--lr", "0.5", "--key", key,
        "--authorized-keys", ak,  "--log-level", "error", NULL};
    assert_int_equal(harness_start(&srv, args), 0);
}

/* ---- a keyed client ---- */

static zps_client_t *keyed_client(const char *name, int worker)
{
    char key[128], pub[128], why[256];
    snprintf(key, sizeof(key), "%s/%s.key", dir, name);
    path(pub, sizeof(pub), "server.pub");
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = worker;
    o.timeout_ms = 20000;
    o.heartbeat_ms = 0;
    assert_int_equal(zps_client_opts_set_keys(&o, key, pub, why, sizeof(why)), 0);
    const char *eps[1] = {srv.endpoint};
    zps_client_t *c = NULL;
    assert_int_equal(zps_client_new(eps, 1, &o, &c), 0);
    zps_client_opts_clear(&o);
    return c;
}

/* A number of the "sealed" object of the server's STATS. */
static double sealed_stat(zps_client_t *c, const char *field)
{
    char *json = NULL;
    assert_int_equal(zps_client_stats(c, 0, &json), 0);
    zps_json_t *j = NULL;
    assert_int_equal(zps_json_parse(json, &j, NULL, 0), 0);
    double v = zps_json_number(zps_json_get(zps_json_get(j, "sealed"), field), -1);
    zps_json_free(j);
    free(json);
    return v;
}

static void test_client_exchanges_sealed(void **state)
{
    (void)state;
    zps_client_t *c = keyed_client("admin", 0);
    float init[N] = {10, 20, 30, 40}, grad[N] = {2, 2, 2, 2}, out[N];
    assert_int_equal(zps_client_init(c, init, N), 0);
    /* ASP: each exchange is answered with the parameters after its push. */
    for (uint64_t t = 0; t < 3; t++) {
        assert_int_equal(zps_client_exchange(c, t, grad, N, 1, out, NULL), 0);
        for (int i = 0; i < N; i++)
            assert_float_equal(out[i], init[i] - 0.5f * 2.0f * (float)(t + 1), 1e-6);
    }
    /* The first request went over CURVE while the session was granted; the
     * later ones sealed. */
    assert_true(sealed_stat(c, "opened") >= 2);
    assert_true(sealed_stat(c, "granted") >= 1);
    assert_int_equal(sealed_stat(c, "refused"), 0);
    zps_client_free(c);
}

/* ---- by hand ---- */

static void *ctx;
static void *ctl;  /* CURVE DEALER, the worker key (rank 0) */
static void *data; /* plain DEALER to the sealed socket */
static zps_seal_t seal;
static uint64_t next_id = 100;

static void *curve_dealer(const zps_keypair_t *kp)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int on = 0, tmo = 5000;
    zmq_setsockopt(s, ZMQ_LINGER, &on, sizeof(on));
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, srv_kp.public_key, 32), 0);
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, kp->public_key, 32), 0);
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, kp->secret_key, 32), 0);
    assert_int_equal(zmq_connect(s, srv.endpoint), 0);
    return s;
}

static zps_seal_t *find(void *arg, const unsigned char *id, zps_peer_t *peer)
{
    (void)peer;
    zps_seal_t *s = arg;
    return memcmp(id, s->id, ZPS_SEAL_ID_BYTES) == 0 ? s : NULL;
}

/* Asks for a session over ctl and connects `data` to the sealed socket. */
static void open_session(void)
{
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_SESSION);
    h.request_id = ++next_id;
    h.json = "{\"aes\":true}";
    assert_int_equal(zps_wire_send(ctl, NULL, &h, NULL, 0, NULL, NULL, 0), 0);
    zps_message_t m;
    assert_int_equal(zps_wire_recv(ctl, 0, false, &m), 0);
    assert_int_equal(m.hdr.status, 0);
    zps_json_t *j = NULL;
    assert_int_equal(zps_json_parse(m.hdr.json, &j, NULL, 0), 0);
    unsigned char id[16], key[32];
    assert_int_equal(zps_seal_unhex(zps_json_string(zps_json_get(j, "session")), id, 16), 0);
    assert_int_equal(zps_seal_unhex(zps_json_string(zps_json_get(j, "key")), key, 32), 0);
    enum zps_seal_cipher cipher = zps_seal_cipher_parse(zps_json_string(zps_json_get(j, "cipher")));
    assert_int_not_equal(cipher, ZPS_SEAL_NONE);
    long port = (long)zps_json_number(zps_json_get(j, "port"), 0);
    assert_true(port > 0);
    zps_json_free(j);
    zps_message_close(&m);
    zps_seal_join(&seal, id, key, cipher);

    data = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0, tmo = 5000;
    zmq_setsockopt(data, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(data, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
    char where[64];
    snprintf(where, sizeof(where), "tcp://127.0.0.1:%ld", port);
    assert_int_equal(zmq_connect(data, where), 0);
}

static void push_header(zps_header_t *h, int worker, uint64_t clock)
{
    zps_header_init(h, ZPS_MSG_PUSH);
    h->request_id = ++next_id;
    h->worker = worker;
    h->clock = clock;
    h->batch = 1;
    h->shard_count = 1;
    h->total = N;
}

/* A reply on `data` within ms, opened with the session; false if none came. */
static bool sealed_reply(int ms, zps_message_t *m, int *rc)
{
    zmq_pollitem_t it = {data, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) <= 0)
        return false;
    *rc = zps_wire_recv_sealed(data, 0, false, true, find, &seal, m);
    return true;
}

/* The model as a sealed observer pull sees it. */
static void sealed_pull(float *out)
{
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_PULL);
    h.request_id = ++next_id;
    h.worker = -1;
    h.shard_count = 1;
    assert_int_equal(zps_wire_send_sealed(data, NULL, &h, NULL, 0, false, &seal, 0), 0);
    zps_message_t m;
    int rc = -1;
    assert_true(sealed_reply(5000, &m, &rc));
    assert_int_equal(rc, 0);
    assert_int_equal(m.hdr.status, 0);
    assert_int_equal(m.hdr.length, N);
    memcpy(out, zps_message_floats(&m), N * sizeof(float));
    zps_message_close(&m);
}

static double refused_now(void)
{
    zps_client_t *c = keyed_client("admin", -1);
    double v = sealed_stat(c, "refused");
    zps_client_free(c);
    return v;
}

static void test_replay_tamper_roles(void **state)
{
    (void)state;
    ctl = curve_dealer(&worker_kp);
    open_session();
    float before[N], after[N], grad[N] = {1, 1, 1, 1};
    sealed_pull(before);
    double refused0 = refused_now();

    /* A sealed push as worker 0, the key's rank. */
    zps_header_t h;
    push_header(&h, 0, 3);
    zps_seal_t recorded = seal; /* what an attacker replays: the same bytes */
    assert_int_equal(zps_wire_send_sealed(data, NULL, &h, grad, N, false, &seal, 0), 0);
    zps_message_t m;
    int rc = -1;
    assert_true(sealed_reply(5000, &m, &rc));
    assert_int_equal(rc, 0);
    assert_int_equal(m.hdr.status, 0);
    zps_message_close(&m);
    sealed_pull(after);
    for (int i = 0; i < N; i++)
        assert_float_equal(after[i], before[i] - 0.5f, 1e-6);

    /* Replayed: the identical message (same counter, key and bytes). */
    zps_header_t h2 = h;
    assert_int_equal(zps_wire_send_sealed(data, NULL, &h2, grad, N, false, &recorded, 0), 0);
    assert_false(sealed_reply(700, &m, &rc));
    assert_int_equal(refused_now(), refused0 + 1);

    /* A changed byte: a sealed message built by hand, its header altered. */
    unsigned char frame[ZPS_SEAL_FRAME_BYTES], head[16] = {0};
    zps_seal_message(&seal, frame, head, sizeof(head), false, NULL, NULL, 0, NULL);
    head[5] ^= 1;
    assert_true(zmq_send(data, frame, sizeof(frame), ZMQ_SNDMORE) == (int)sizeof(frame));
    assert_true(zmq_send(data, head, sizeof(head), 0) == (int)sizeof(head));
    assert_false(sealed_reply(700, &m, &rc));
    assert_int_equal(refused_now(), refused0 + 2);

    float now[N];
    sealed_pull(now);
    assert_memory_equal(now, after, sizeof(now));

    /* Random frames: garbage, and seal frames that name the live session. */
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int k = 0; k < 400; k++) {
        int nframes = 1 + (int)(rng % 5);
        for (int f = 0; f < nframes; f++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            unsigned char buf[300];
            size_t len = rng % sizeof(buf);
            for (size_t i = 0; i < len; i++)
                buf[i] = (unsigned char)(rng >> (8 * (i % 8))) ^ (unsigned char)i;
            if (f == 0 && k % 2 == 0) {
                len = ZPS_SEAL_FRAME_BYTES;
                memcpy(buf, "zpsS", 4);
                memcpy(buf + 4, seal.id, ZPS_SEAL_ID_BYTES);
                buf[28] = (unsigned char)(2 + k % 3);
                buf[29] = buf[30] = buf[31] = 0;
                buf[29] = (unsigned char)(buf[28] == 3);
            }
            assert_true(zmq_send(data, buf, len, f + 1 < nframes ? ZMQ_SNDMORE : 0) == (int)len);
        }
    }
    assert_false(sealed_reply(700, &m, &rc));
    assert_true(refused_now() >= refused0 + 2 + 400);
    sealed_pull(now);
    assert_memory_equal(now, after, sizeof(now));

    /* Roles hold inside a session: this worker key is for rank 0 only. */
    push_header(&h, 1, 0);
    assert_int_equal(zps_wire_send_sealed(data, NULL, &h, grad, N, false, &seal, 0), 0);
    assert_true(sealed_reply(5000, &m, &rc));
    assert_int_equal(rc, 0);
    assert_int_equal(m.hdr.status, ZPS_EDENIED);
    zps_message_close(&m);
    sealed_pull(now);
    assert_memory_equal(now, after, sizeof(now));

    /* The session ends with its CURVE connection. */
    zmq_close(ctl);
    ctl = NULL;
    bool told = false;
    for (int attempt = 0; attempt < 50 && !told; attempt++) {
        usleep(100000);
        push_header(&h, 0, 4);
        assert_int_equal(zps_wire_send_sealed(data, NULL, &h, grad, N, false, &seal, 0), 0);
        if (!sealed_reply(2000, &m, &rc))
            continue;
        if (rc == ZPS_ESEAL && m.seal_unknown) {
            assert_memory_equal(m.seal_id, seal.id, ZPS_SEAL_ID_BYTES);
            told = true;
        } else {
            /* Sent before the server saw the connection close: applied. */
            assert_int_equal(rc, 0);
        }
        zps_message_close(&m);
    }
    assert_true(told);
    zmq_close(data);
    data = NULL;
}

static int setup(void **state)
{
    (void)state;
    write_keys();
    start_server();
    ctx = zmq_ctx_new();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (ctl)
        zmq_close(ctl);
    if (data)
        zmq_close(data);
    zmq_ctx_term(ctx);
    harness_stop(&srv);
    remove_keys();
    zps_keypair_clear(&srv_kp);
    zps_keypair_clear(&admin_kp);
    zps_keypair_clear(&worker_kp);
    return 0;
}

int main(void)
{
    assert_int_equal(zps_seal_library_init(), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_exchanges_sealed),
        cmocka_unit_test(test_replay_tamper_roles),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
