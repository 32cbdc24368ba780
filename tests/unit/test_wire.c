/*
 * test_wire.c - message framing over an inproc DEALER/ROUTER pair: every
 * header field and the payload survive a round trip, zero-copy payloads are
 * released, each way a message can be wrong gets its own code, and a
 * payload checksum deferred to the copy is still checked.
 * Malformed messages are built with protobuf-c and raw frames here.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include <cmocka.h>

#include "bf16.h"
#include "checksum.h"
#include "error.h"
#include "wire.h"
#include "zps.pb-c.h"

typedef struct pair {
    void *ctx, *router, *dealer;
} pair_t;

static int setup(void **state)
{
    pair_t *p = calloc(1, sizeof(*p));
    p->ctx = zmq_ctx_new();
    p->router = zmq_socket(p->ctx, ZMQ_ROUTER);
    p->dealer = zmq_socket(p->ctx, ZMQ_DEALER);
    int linger = 0, timeout = 2000;
    zmq_setsockopt(p->router, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(p->dealer, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(p->router, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    zmq_setsockopt(p->dealer, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    if (zmq_bind(p->router, "inproc://wire-test") || zmq_connect(p->dealer, "inproc://wire-test"))
        return -1;
    *state = p;
    return 0;
}

static int teardown(void **state)
{
    pair_t *p = *state;
    zmq_close(p->dealer);
    zmq_close(p->router);
    zmq_ctx_term(p->ctx);
    free(p);
    return 0;
}

static atomic_int released;

static void count_release(void *data, void *hint)
{
    (void)data;
    (void)hint;
    atomic_fetch_add(&released, 1);
}

static void test_round_trip(void **state)
{
    pair_t *p = *state;
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_PUSH);
    h.worker = 3;
    h.request_id = 0x123456789abcull;
    h.clock = 77;
    h.model_version = 76;
    h.min_clock = 70;
    h.total = 1000;
    h.offset = 500;
    h.batch = 64;
    h.flags = ZPS_FLAG_RANGE;
    h.shard_index = 1;
    h.shard_count = 2;
    h.update_staleness = 5;
    h.config_fingerprint = 0xfedcba9876543210ull;
    float v[5] = {1.5f, -2.0f, 0.0f, 3.25f, 1e-30f};
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, v, 5, NULL, NULL, 0), 0);
    assert_int_equal(h.length, 5);
    assert_int_equal(h.checksum, zps_crc32c(0, v, sizeof(v)));

    zps_message_t m;
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    assert_true(m.has_peer);
    assert_true(m.peer.len > 0);
    assert_int_equal(m.hdr.version, ZPS_PROTOCOL_VERSION);
    assert_int_equal(m.hdr.type, ZPS_MSG_PUSH);
    assert_false(m.hdr.reply);
    assert_int_equal(m.hdr.worker, 3);
    assert_true(m.hdr.request_id == 0x123456789abcull);
    assert_int_equal(m.hdr.clock, 77);
    assert_int_equal(m.hdr.model_version, 76);
    assert_int_equal(m.hdr.min_clock, 70);
    assert_int_equal(m.hdr.total, 1000);
    assert_int_equal(m.hdr.offset, 500);
    assert_int_equal(m.hdr.length, 5);
    assert_int_equal(m.hdr.batch, 64);
    assert_int_equal(m.hdr.flags, ZPS_FLAG_RANGE);
    assert_int_equal(m.hdr.shard_index, 1);
    assert_int_equal(m.hdr.shard_count, 2);
    assert_int_equal(m.hdr.update_staleness, 5);
    assert_true(m.hdr.config_fingerprint == 0xfedcba9876543210ull);
    assert_memory_equal(zps_message_floats(&m), v, sizeof(v));

    /* A reply back to that peer, zero-copy, with an error text and JSON. */
    zps_header_t r;
    zps_header_init(&r, ZPS_MSG_PULL);
    r.reply = true;
    r.request_id = m.hdr.request_id;
    static float big[4096];
    for (int i = 0; i < 4096; i++)
        big[i] = (float)i * 0.5f;
    atomic_store(&released, 0);
    assert_int_equal(zps_wire_send(p->router, &m.peer, &r, big, 4096, count_release, NULL, 0), 0);
    zps_message_close(&m);
    zps_message_close(&m); /* twice is harmless */

    zps_message_t back;
    assert_int_equal(zps_wire_recv(p->dealer, 0, false, &back), 0);
    assert_false(back.has_peer);
    assert_true(back.hdr.reply);
    assert_int_equal(back.hdr.length, 4096);
    assert_memory_equal(zps_message_floats(&back), big, sizeof(big));
    zps_message_close(&back);
    /* Released once, after ZeroMQ was done with it (inproc hands the message over). */
    assert_int_equal(atomic_load(&released), 1);

    zps_header_t s;
    zps_header_init(&s, ZPS_MSG_STATS);
    s.reply = true;
    s.status = ZPS_ERANGE;
    snprintf(s.error, sizeof(s.error), "range [0, 3) is not mine");
    s.json = "{\"a\":1}";
    assert_int_equal(zps_wire_send(p->dealer, NULL, &s, NULL, 0, NULL, NULL, 0), 0);
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    assert_int_equal(m.hdr.status, ZPS_ERANGE);
    assert_string_equal(m.hdr.error, "range [0, 3) is not mine");
    assert_string_equal(m.hdr.json, "{\"a\":1}");
    zps_message_close(&m);
}

static void test_nothing_ready(void **state)
{
    pair_t *p = *state;
    zps_message_t m;
    assert_int_equal(zps_wire_recv(p->router, ZMQ_DONTWAIT, true, &m), ZPS_EAGAIN);
}

/* Sends raw frames from the dealer; `hdr` NULL means `junk` as the header. */
static void send_raw(pair_t *p, const Zps__Header *hdr, const void *junk, size_t junk_len,
                     const void *payload, size_t plen, int payload_frames)
{
    uint8_t buf[256];
    const void *head = junk;
    size_t hlen = junk_len;
    if (hdr) {
        hlen = zps__header__pack(hdr, buf);
        head = buf;
    }
    assert_true(zmq_send(p->dealer, head, hlen, payload_frames ? ZMQ_SNDMORE : 0) >= 0);
    for (int i = 0; i < payload_frames; i++)
        assert_true(zmq_send(p->dealer, payload, plen, i + 1 < payload_frames ? ZMQ_SNDMORE : 0) >=
                    0);
}

static void expect(pair_t *p, int code)
{
    zps_message_t m;
    int rc = zps_wire_recv(p->router, 0, true, &m);
    if (rc != code)
        fail_msg("expected %s, got %s", zps_errname(code), zps_errname(rc));
    assert_true(m.has_peer); /* the caller can still answer */
    zps_message_close(&m);
}

static void test_each_fault(void **state)
{
    pair_t *p = *state;
    float v[3] = {1, 2, 3};
    uint32_t crc = zps_crc32c(0, v, sizeof(v));

    send_raw(p, NULL, "\xff\xff\xff", 3, NULL, 0, 0);
    expect(p, ZPS_EPROTO);

    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION + 1;
    h.type = ZPS__MSG_TYPE__MSG_PULL;
    h.request_id = 9;
    send_raw(p, &h, NULL, 0, NULL, 0, 0);
    zps_message_t m;
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), ZPS_EVERSION);
    assert_int_equal(m.hdr.request_id, 9); /* what could be decoded is kept */
    zps_message_close(&m);
    h.version = 1; /* a peer from before payloads travelled in frames */
    send_raw(p, &h, NULL, 0, NULL, 0, 0);
    expect(p, ZPS_EVERSION);

    h.version = ZPS_PROTOCOL_VERSION;
    h.type = 0;
    send_raw(p, &h, NULL, 0, NULL, 0, 0);
    expect(p, ZPS_ETYPE);
    h.type = 99;
    send_raw(p, &h, NULL, 0, NULL, 0, 0);
    expect(p, ZPS_ETYPE);

    h.type = ZPS__MSG_TYPE__MSG_PUSH;
    h.length = 3;
    h.checksum = crc;
    send_raw(p, &h, NULL, 0, NULL, 0, 0); /* a push without its payload */
    expect(p, ZPS_EFRAMES);
    send_raw(p, &h, NULL, 0, v, sizeof(v), 2); /* one payload frame too many */
    expect(p, ZPS_EFRAMES);
    h.length = 4;
    send_raw(p, &h, NULL, 0, v, sizeof(v), 1);
    expect(p, ZPS_ELENGTH);
    h.length = 3;
    h.checksum = crc ^ 0x80u;
    send_raw(p, &h, NULL, 0, v, sizeof(v), 1);
    expect(p, ZPS_ECHECKSUM);
    h.checksum = crc;
    send_raw(p, &h, NULL, 0, v, sizeof(v), 1);
    expect(p, 0);

    h.type = ZPS__MSG_TYPE__MSG_PULL;
    send_raw(p, &h, NULL, 0, v, sizeof(v), 1); /* a pull request with a payload */
    expect(p, ZPS_EFRAMES);

    /* More leases than any worker may hold (consistency/assign.h). */
    uint64_t many[ZPS_WIRE_MAX_LEASES + 1] = {0};
    h.n_leases = ZPS_WIRE_MAX_LEASES + 1;
    h.leases = many;
    h.request_id = 11;
    send_raw(p, &h, NULL, 0, NULL, 0, 0);
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), ZPS_EPROTO);
    assert_int_equal(m.hdr.request_id, 11);
    zps_message_close(&m);
    h.n_leases = 0;
    h.leases = NULL;

    /* After all that the pair still talks. */
    test_nothing_ready(state);
}

/* The shared assignment's fields travel as they were set, the leases in order. */
static void test_lease_fields(void **state)
{
    pair_t *p = *state;
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_PULL);
    h.flags = ZPS_FLAG_LEASE;
    h.plan_examples = 60000;
    h.plan_batch = 32;
    h.plan_epochs = 6;
    h.lease_want = 3;
    h.lease_done = 11251;
    h.nleases = 3;
    h.leases[0] = 7;
    h.leases[1] = 5;
    h.leases[2] = UINT64_C(1) << 40;
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, NULL, 0, NULL, NULL, 0), 0);
    zps_message_t m;
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    assert_int_equal(m.hdr.flags, ZPS_FLAG_LEASE);
    assert_int_equal(m.hdr.plan_examples, 60000);
    assert_int_equal(m.hdr.plan_batch, 32);
    assert_int_equal(m.hdr.plan_epochs, 6);
    assert_int_equal(m.hdr.lease_want, 3);
    assert_int_equal(m.hdr.lease_done, 11251);
    assert_int_equal(m.hdr.nleases, 3);
    assert_int_equal(m.hdr.leases[0], 7);
    assert_int_equal(m.hdr.leases[1], 5);
    assert_int_equal(m.hdr.leases[2], UINT64_C(1) << 40);
    zps_message_close(&m);
}

/*
 * zps_wire_recv_deferred checks everything but the payload's checksum, which
 * zps_message_copy_verified checks while copying; zps_wire_recv checks it at
 * once and scans for non-finite values.
 */
static void test_deferred_checksum(void **state)
{
    pair_t *p = *state;
    float v[3] = {1, NAN, 3};
    uint32_t crc = zps_crc32c(0, v, sizeof(v));
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    h.type = ZPS__MSG_TYPE__MSG_PUSH;
    h.request_id = 5;
    h.length = 3;

    /* A bad checksum passes receipt and is caught by the copy. */
    h.checksum = crc ^ 1u;
    send_raw(p, &h, NULL, 0, v, sizeof(v), 1);
    zps_message_t m;
    assert_int_equal(zps_wire_recv_deferred(p->router, 0, true, &m), 0);
    assert_true(m.has_peer);
    assert_true(m.has_payload);
    assert_false(m.scanned);
    float dst[3];
    assert_int_equal(zps_message_copy_verified(&m, dst), ZPS_ECHECKSUM);
    zps_message_close(&m);

    /* A good one copies the payload bit for bit. */
    h.checksum = crc;
    send_raw(p, &h, NULL, 0, v, sizeof(v), 1);
    assert_int_equal(zps_wire_recv_deferred(p->router, 0, true, &m), 0);
    assert_false(m.scanned);
    assert_int_equal(zps_message_copy_verified(&m, dst), 0);
    assert_memory_equal(dst, v, sizeof(v));
    zps_message_close(&m);

    /* The other checks still apply. */
    h.length = 4;
    send_raw(p, &h, NULL, 0, v, sizeof(v), 1);
    assert_int_equal(zps_wire_recv_deferred(p->router, 0, true, &m), ZPS_ELENGTH);
    zps_message_close(&m);
    h.length = 3;

    /* zps_wire_recv verifies on receipt and finds the NaN at index 1. */
    send_raw(p, &h, NULL, 0, v, sizeof(v), 1);
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    assert_true(m.scanned);
    assert_int_equal(m.first_nonfinite, 1);
    zps_message_close(&m);
    h.checksum = crc ^ 1u;
    send_raw(p, &h, NULL, 0, v, sizeof(v), 1);
    expect(p, ZPS_ECHECKSUM);
    assert_int_equal(zps_wire_recv_deferred(p->router, ZMQ_DONTWAIT, true, &m), ZPS_EAGAIN);
}

static void test_helpers(void **state)
{
    (void)state;
    float src[10000], dst[10000];
    for (int i = 0; i < 10000; i++)
        src[i] = (float)i / 7.0f;
    assert_int_equal(zps_crc32c_copy(0, dst, src, sizeof(src)), zps_crc32c(0, src, sizeof(src)));
    assert_memory_equal(dst, src, sizeof(src));

    size_t bad = 99;
    assert_true(zps_all_finite(src, 10000, &bad));
    assert_int_equal(bad, 99);
    src[4321] = NAN;
    assert_false(zps_all_finite(src, 10000, &bad));
    assert_int_equal(bad, 4321);
    src[17] = -INFINITY;
    assert_false(zps_all_finite(src, 10000, &bad));
    assert_int_equal(bad, 17);
}

/*
 * The configuration fingerprint is header field 22, a fixed64: tag byte
 * (22 << 3) | 1 = 0xb1, then 0x01 (the varint's second byte), then eight
 * little-endian bytes. A peer that does not know the field skips it.
 */
static void test_fingerprint_field(void **state)
{
    (void)state;
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_INIT);
    Zps__Header pb = ZPS__HEADER__INIT;
    pb.version = 1;
    pb.type = ZPS__MSG_TYPE__MSG_INIT;
    pb.config_fingerprint = 0x0807060504030201ull;
    uint8_t buf[64];
    size_t n = zps__header__pack(&pb, buf);
    const uint8_t want[] = {0xb1, 0x01, 1, 2, 3, 4, 5, 6, 7, 8};
    bool found = false;
    for (size_t i = 0; i + sizeof(want) <= n; i++)
        found |= memcmp(buf + i, want, sizeof(want)) == 0;
    assert_true(found);

    /* Codes appended for it: their wire values never change. */
    assert_int_equal(ZPS_ECONFIG, -29);
    assert_int_equal(ZPS_EPARTIAL, -30);
    assert_string_equal(zps_errname(ZPS_ECONFIG), "ZPS_ECONFIG");
    assert_string_equal(zps_errname(ZPS_EPARTIAL), "ZPS_EPARTIAL");
}

/* zps_wire_send_summed sends the caller's checksum as it is: a wrong one is caught on receipt. */
static void test_send_summed(void **state)
{
    pair_t *p = *state;
    float v[3] = {1.0f, 2.0f, 3.0f};
    size_t bad;
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_PUSH);
    h.checksum = zps_crc_scan(v, 3, &bad);
    assert_int_equal(bad, 3);
    atomic_store(&released, 0);
    assert_int_equal(zps_wire_send_summed(p->dealer, NULL, &h, v, 3, count_release, NULL, 0), 0);
    zps_message_t m;
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    assert_memory_equal(zps_message_floats(&m), v, sizeof(v));
    zps_message_close(&m);

    zps_header_init(&h, ZPS_MSG_PUSH);
    h.checksum = zps_crc32c(0, v, sizeof(v)) ^ 1u;
    assert_int_equal(zps_wire_send_summed(p->dealer, NULL, &h, v, 3, count_release, NULL, 0), 0);
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), ZPS_ECHECKSUM);
    zps_message_close(&m);
    for (int i = 0; i < 200 && atomic_load(&released) < 2; i++)
        zmq_poll(NULL, 0, 10);
    assert_int_equal(atomic_load(&released), 2);
}

/* A bfloat16 payload: widened and scanned on receipt, or widened by the checked copy. */
static void test_bf16_payload(void **state)
{
    pair_t *p = *state;
    uint16_t v[3] = {0x3f80, 0xc020, 0x7fc0}; /* 1, -2.5, NaN */
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_PUSH);
    h.flags = ZPS_FLAG_BF16;
    h.request_id = 8;
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, v, 3, NULL, NULL, 0), 0);
    assert_int_equal(h.length, 3);
    assert_int_equal(h.checksum, zps_crc32c(0, v, sizeof(v)));
    zps_message_t m;
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    assert_false(m.narrow);
    assert_true(m.scanned);
    assert_int_equal(m.hdr.flags & ZPS_FLAG_BF16, ZPS_FLAG_BF16);
    assert_int_equal(m.hdr.length, 3);
    assert_int_equal(zmq_msg_size(&m.payload), 3 * sizeof(float));
    const float *f = zps_message_floats(&m);
    assert_true(f[0] == 1.0f && f[1] == -2.5f && isnan(f[2]));
    assert_int_equal(m.first_nonfinite, 2);
    zps_message_close(&m);

    /* Deferred: kept as received until the checked copy widens it. */
    h.checksum = 0;
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, v, 2, NULL, NULL, 0), 0);
    assert_int_equal(zps_wire_recv_deferred(p->router, 0, true, &m), 0);
    assert_true(m.narrow);
    assert_null(zps_message_floats(&m));
    float dst[2];
    assert_int_equal(zps_message_copy_verified(&m, dst), 0);
    assert_true(dst[0] == 1.0f && dst[1] == -2.5f);
    zps_message_close(&m);

    /* A bad checksum, either way. */
    Zps__Header raw = ZPS__HEADER__INIT;
    raw.version = ZPS_PROTOCOL_VERSION;
    raw.type = ZPS__MSG_TYPE__MSG_PUSH;
    raw.flags = ZPS_FLAG_BF16;
    raw.length = 3;
    raw.checksum = zps_crc32c(0, v, sizeof(v)) ^ 1u;
    send_raw(p, &raw, NULL, 0, v, sizeof(v), 1);
    expect(p, ZPS_ECHECKSUM);
    send_raw(p, &raw, NULL, 0, v, sizeof(v), 1);
    assert_int_equal(zps_wire_recv_deferred(p->router, 0, true, &m), 0);
    float dst3[3];
    assert_int_equal(zps_message_copy_verified(&m, dst3), ZPS_ECHECKSUM);
    zps_message_close(&m);

    /* Two bytes an element with the flag, four without: anything else is ZPS_ELENGTH. */
    raw.checksum = zps_crc32c(0, v, sizeof(v));
    raw.length = 2;
    send_raw(p, &raw, NULL, 0, v, sizeof(v), 1);
    expect(p, ZPS_ELENGTH);
    raw.flags = 0;
    raw.length = 3;
    send_raw(p, &raw, NULL, 0, v, sizeof(v), 1);
    expect(p, ZPS_ELENGTH);
}

/* Floats a little over three frames' worth: four frames, the last partial. */
#define FRAMED_N (3 * (ZPS_WIRE_FRAME_BYTES / 4) + 1000)

/* Sends `n` payload bytes from the dealer as frames of the given sizes. */
static void send_frames(pair_t *p, const Zps__Header *hdr, const char *payload, const size_t *sizes,
                        size_t count)
{
    uint8_t buf[256];
    size_t hlen = zps__header__pack(hdr, buf);
    assert_true(zmq_send(p->dealer, buf, hlen, ZMQ_SNDMORE) >= 0);
    size_t off = 0;
    for (size_t i = 0; i < count; i++) {
        assert_true(zmq_send(p->dealer, payload + off, sizes[i], i + 1 < count ? ZMQ_SNDMORE : 0) >=
                    0);
        off += sizes[i];
    }
}

/*
 * A payload above ZPS_WIRE_FRAME_BYTES goes as frames of exactly that size
 * and a last one with the rest, pointing into the sender's buffer. It is
 * verified and scanned where the frames are (zps_wire_recv), kept in them
 * (zps_payload_take) or made one in a pooled buffer (zps_message_flatten;
 * a bfloat16 one is widened into one on receipt), or copied out checked
 * (deferred). Frames cut any other way are refused.
 */
static void test_frames(void **state)
{
    pair_t *p = *state;
    float *v = malloc(FRAMED_N * sizeof(float));
    float *dst = malloc(FRAMED_N * sizeof(float));
    for (size_t i = 0; i < FRAMED_N; i++)
        v[i] = (float)((int)(i % 2001) - 1000) * 0.25f;
    v[FRAMED_N - 7] = -1e6f; /* the largest magnitude, in the last frame */
    zps_wire_pool_limit(64u << 20);

    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_PUSH);
    atomic_store(&released, 0);
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, v, FRAMED_N, count_release, NULL, 0), 0);
    assert_int_equal(h.checksum, zps_crc32c(0, v, FRAMED_N * sizeof(float)));
    /* How it travelled, read raw: header, then 1 MiB, 1 MiB, 1 MiB, the rest. */
    zmq_msg_t f;
    zmq_msg_init(&f);
    assert_true(zmq_msg_recv(&f, p->router, 0) >= 0); /* routing id */
    assert_true(zmq_msg_recv(&f, p->router, 0) >= 0); /* header */
    size_t sizes[8], frames = 0;
    while (zmq_msg_more(&f) && frames < 8) {
        assert_true(zmq_msg_recv(&f, p->router, 0) >= 0);
        sizes[frames++] = zmq_msg_size(&f);
    }
    zmq_msg_close(&f);
    assert_int_equal(frames, 4);
    assert_int_equal(sizes[0], ZPS_WIRE_FRAME_BYTES);
    assert_int_equal(sizes[2], ZPS_WIRE_FRAME_BYTES);
    assert_int_equal(sizes[3], 4000);
    assert_int_equal(atomic_load(&released), 1); /* once, after every frame was done */

    /* Verified on receipt where the frames are, and scanned; kept as frames
     * (zps_payload_take), or made one (zps_message_flatten) in a pooled
     * buffer that the next payload of its size reuses. */
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, v, FRAMED_N, NULL, NULL, 0), 0);
    zps_message_t m;
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    assert_int_equal(m.hdr.length, FRAMED_N);
    assert_int_equal(m.nframes, 4);
    assert_true(m.scanned);
    assert_int_equal(m.first_nonfinite, FRAMED_N);
    assert_true(m.abs_max == 1e6f);
    assert_null(zps_message_floats(&m));
    assert_true(zps_message_at(&m, FRAMED_N - 7) == -1e6f);
    assert_true(zps_message_at(&m, ZPS_WIRE_FRAME_BYTES / 4 + 3) ==
                v[ZPS_WIRE_FRAME_BYTES / 4 + 3]);
    zps_payload_t kept;
    assert_int_equal(zps_payload_take(&kept, &m), 0);
    assert_false(m.has_payload);
    zps_message_close(&m);
    assert_int_equal(kept.nseg, 4);
    assert_int_equal(kept.seg_len, ZPS_WIRE_FRAME_BYTES / 4);
    for (size_t i = 0; i < FRAMED_N; i += 4099)
        assert_true(kept.seg[i / kept.seg_len][i % kept.seg_len] == v[i]);
    zps_payload_t moved;
    zps_payload_move(&moved, &kept);
    assert_int_equal(kept.nseg, 0);
    assert_true(moved.seg[3][FRAMED_N - 7 - 3 * moved.seg_len] == -1e6f);
    zps_payload_close(&moved);
    zps_payload_close(&moved); /* twice is harmless */

    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, v, FRAMED_N, NULL, NULL, 0), 0);
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    assert_int_equal(zps_message_flatten(&m), 0);
    assert_null(m.frames);
    assert_memory_equal(zps_message_floats(&m), v, FRAMED_N * sizeof(float));
    const float *where = zps_message_floats(&m);
    assert_int_equal(zps_wire_pool_bytes(), 0);
    zps_message_close(&m);
    assert_int_equal(zps_wire_pool_bytes(), FRAMED_N * sizeof(float));
    /* The next one of that size reuses the buffer; a NaN in the third
     * frame is found where it is. */
    v[2 * (ZPS_WIRE_FRAME_BYTES / 4) + 5] = NAN;
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, v, FRAMED_N, NULL, NULL, 0), 0);
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    assert_int_equal(m.first_nonfinite, 2 * (ZPS_WIRE_FRAME_BYTES / 4) + 5);
    assert_true(isinf(m.abs_max));
    assert_int_equal(zps_message_flatten(&m), 0);
    assert_ptr_equal(zps_message_floats(&m), where);
    assert_int_equal(zps_wire_pool_bytes(), 0);
    zps_message_close(&m);
    v[2 * (ZPS_WIRE_FRAME_BYTES / 4) + 5] = 1.0f;

    /* Copied out and compared where they arrived, in frames or one: no
     * buffer from the pool (INIT's values go straight into the store). */
    uint64_t pooled = zps_wire_pool_bytes();
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, v, FRAMED_N, NULL, NULL, 0), 0);
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    assert_int_equal(m.nframes, 4);
    memset(dst, 0, FRAMED_N * sizeof(float));
    zps_message_copy_out(&m, dst);
    assert_memory_equal(dst, v, FRAMED_N * sizeof(float));
    assert_true(zps_message_equals(&m, v));
    dst[3 * (ZPS_WIRE_FRAME_BYTES / 4)] += 1.0f; /* the first value of the last frame */
    assert_false(zps_message_equals(&m, dst));
    dst[3 * (ZPS_WIRE_FRAME_BYTES / 4)] = v[3 * (ZPS_WIRE_FRAME_BYTES / 4)];
    dst[FRAMED_N - 1] = -dst[FRAMED_N - 1]; /* the very last */
    assert_false(zps_message_equals(&m, dst));
    assert_int_equal(zps_wire_pool_bytes(), pooled);
    zps_message_close(&m);
    assert_int_equal(zps_wire_pool_bytes(), pooled);
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, v, 5, NULL, NULL, 0), 0);
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    float five[5] = {0};
    zps_message_copy_out(&m, five);
    assert_memory_equal(five, v, sizeof(five));
    assert_true(zps_message_equals(&m, v));
    five[4] += 1.0f;
    assert_false(zps_message_equals(&m, five));
    zps_message_close(&m);

    /* One frame: one segment, the payload's length. */
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, v, 5, NULL, NULL, 0), 0);
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    assert_int_equal(zps_message_flatten(&m), 0); /* nothing to do */
    assert_int_equal(zps_payload_take(&kept, &m), 0);
    zps_message_close(&m);
    zps_payload_move(&moved, &kept);
    assert_int_equal(moved.nseg, 1);
    assert_int_equal(moved.seg_len, 5);
    assert_memory_equal(moved.seg[0], v, 5 * sizeof(float));
    zps_payload_close(&moved);

    /* Deferred: kept as frames, copied out and checked. */
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, v, FRAMED_N, NULL, NULL, 0), 0);
    assert_int_equal(zps_wire_recv_deferred(p->router, 0, true, &m), 0);
    assert_int_equal(m.nframes, 4);
    assert_null(zps_message_floats(&m));
    assert_int_equal(zps_message_copy_verified(&m, dst), 0);
    assert_memory_equal(dst, v, FRAMED_N * sizeof(float));
    zps_message_close(&m);

    /* bfloat16: half the bytes, one full frame and a second with the rest. */
    uint16_t *b = malloc(FRAMED_N * sizeof(uint16_t));
    zps_bf16_narrow(b, v, FRAMED_N);
    zps_header_init(&h, ZPS_MSG_PUSH);
    h.flags = ZPS_FLAG_BF16;
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, b, FRAMED_N, NULL, NULL, 0), 0);
    assert_int_equal(zps_wire_recv(p->router, 0, true, &m), 0);
    for (size_t i = 0; i < FRAMED_N; i++)
        assert_true(zps_message_floats(&m)[i] == zps_bf16_to_float(b[i]));
    zps_message_close(&m);
    assert_int_equal(zps_wire_send(p->dealer, NULL, &h, b, FRAMED_N, NULL, NULL, 0), 0);
    assert_int_equal(zps_wire_recv_deferred(p->router, 0, true, &m), 0);
    assert_int_equal(m.nframes, 2);
    assert_int_equal(zps_message_copy_verified(&m, dst), 0);
    for (size_t i = 0; i < FRAMED_N; i++)
        assert_true(dst[i] == zps_bf16_to_float(b[i]));
    zps_message_close(&m);

    /* Cut another way, or one bit off: refused, each with its code. */
    Zps__Header raw = ZPS__HEADER__INIT;
    raw.version = ZPS_PROTOCOL_VERSION;
    raw.type = ZPS__MSG_TYPE__MSG_PUSH;
    raw.length = FRAMED_N;
    raw.checksum = zps_crc32c(0, v, FRAMED_N * sizeof(float));
    const size_t whole = FRAMED_N * sizeof(float), F = ZPS_WIRE_FRAME_BYTES;
    size_t good[4] = {F, F, F, whole - 3 * F};
    send_frames(p, &raw, (const char *)v, good, 4);
    expect(p, 0);
    size_t short_middle[4] = {F, F - 4, F + 4, whole - 3 * F};
    send_frames(p, &raw, (const char *)v, short_middle, 4);
    expect(p, ZPS_EFRAMES);
    size_t small_first[5] = {4, F - 4, F, F, whole - 3 * F};
    send_frames(p, &raw, (const char *)v, small_first, 5);
    expect(p, ZPS_EFRAMES);
    raw.length = 3 * (F / 4); /* exactly three frames' worth said, four sent */
    send_frames(p, &raw, (const char *)v, good, 4);
    expect(p, ZPS_ELENGTH);
    raw.length = FRAMED_N + 1; /* one value more said than sent */
    send_frames(p, &raw, (const char *)v, good, 4);
    expect(p, ZPS_ELENGTH);
    raw.length = FRAMED_N;
    raw.checksum ^= 1u;
    send_frames(p, &raw, (const char *)v, good, 4);
    expect(p, ZPS_ECHECKSUM);
    send_frames(p, &raw, (const char *)v, good, 4);
    assert_int_equal(zps_wire_recv_deferred(p->router, 0, true, &m), 0);
    assert_int_equal(zps_message_copy_verified(&m, dst), ZPS_ECHECKSUM);
    zps_message_close(&m);
    test_nothing_ready(state);

    zps_wire_pool_limit(0);
    assert_int_equal(zps_wire_pool_bytes(), 0);
    free(b);
    free(v);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),  cmocka_unit_test(test_nothing_ready),
        cmocka_unit_test(test_each_fault),  cmocka_unit_test(test_deferred_checksum),
        cmocka_unit_test(test_helpers),     cmocka_unit_test(test_fingerprint_field),
        cmocka_unit_test(test_send_summed), cmocka_unit_test(test_bf16_payload),
        cmocka_unit_test(test_frames),      cmocka_unit_test(test_lease_fields),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
