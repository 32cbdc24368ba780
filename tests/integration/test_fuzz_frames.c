/*
 * test_fuzz_frames.c - seeded fuzz of a running zps-server at the ZeroMQ
 * framing level, checked against a reference shard kept by the test.
 *
 * test_fuzz.c spoils the fields of well-framed requests; this test spoils the
 * framing. From three raw DEALER sockets it sends bursts of messages with
 * random frame counts (the header and 0 to 8 more frames), random message
 * boundaries (the "more" flags of a run of frames), empty frames, frames of
 * 0, 1, 3, 4 and odd sizes, sizes just around the shard's payload and up to
 * 3 MB, random bytes as the header, valid headers with the wrong number or
 * size of payload frames, and valid requests in between. A burst may stop in
 * the middle of a multipart message while another socket completes an
 * exchange, and is then finished: no message is left unfinished.
 *
 * What must hold:
 *   - every message gets exactly one reply, on its own socket, in order, with
 *     the request id of its header (0 when the header does not decode);
 *   - the error code is the documented one for the faults the test chose
 *     (EPROTO, EFRAMES, EVERSION, ELENGTH), and any error has a reason;
 *   - a push is applied if and only if the rules accept it (decided here from
 *     the bytes sent, decoded by protobuf-c, not by common/wire.c);
 *   - every so many bursts the server is alive, answers STATS with counters
 *     that match the messages sent and the pushes applied, and its
 *     parameters are bit for bit those of the reference (SGD in float32).
 *
 * The bytes of one burst stay below half the server's per-connection bound
 * on unread bytes (STATS limits.peer_buffer_bytes, docs/protocol.md
 * "Limits"): past it the server may shut a connection holding an unfinished
 * message, by design, and a test that wants every message answered must not
 * reach it. The checks assert that no connection was shut for it.
 * ZPS_FUZZ_SEED and ZPS_FUZZ_ITERS override the seed and the burst count.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include <cmocka.h>

#include "checksum.h"
#include "error.h"
#include "fuzz_rng.h"
#include "harness.h"
#include "timeutil.h"
#include "wire.h"
#include "zps.pb-c.h"

#define N 2048                       /* elements; shard 1/2 owns [1024, 2048) */
#define LO 1024                      /* its first element */
#define LEN 1024                     /* its length */
#define PBYTES (LEN * sizeof(float)) /* the size of its payload frame */
#define LR 0.25f                     /* the server's --lr, exact in float32 */
#define MAX_FRAMES 9                 /* the header and up to 8 more */
#define MAX_MSGS 3                   /* messages per burst */
#define NOISE_BYTES (3u << 20)       /* the largest frame */
#define SOCKS 3
#define CHECK_EVERY 25 /* bursts between full checks */
#define FLAG_RETRY 2u
#define FLAG_WAIT 32u
#define FLAG_EXCHANGE 64u

#ifdef ZPS_SANITIZED
#define DEFAULT_ITERS 1000
#define TIME_BOUND_S 60.0
#else
#define DEFAULT_ITERS 4000
#define TIME_BOUND_S 20.0
#endif

static double now_s(void)
{
    return (double)zps_now_ns() * 1e-9;
}

/* ---- the reference shard: one worker, ASP, SGD ---- */

typedef struct ref {
    float p[LEN];
    uint64_t pushed; /* the next clock expected from worker 0 */
    unsigned long applied, retries;
} ref_t;

static const float *init_values(void)
{
    static float v[LEN];
    for (int i = 0; i < LEN; i++)
        v[i] = (float)(i % 17 - 8) / 4.0f;
    return v;
}

/* ---- one message ---- */

enum expect {
    EXPECT_ANY,   /* a decoded header of random bytes: any answer but a wrong push */
    EXPECT_OK,    /* a valid request */
    EXPECT_ERROR, /* some error */
    EXPECT_CODE,  /* exactly `code` */
};

typedef struct message {
    int nframes;
    const uint8_t *data[MAX_FRAMES];
    size_t len[MAX_FRAMES];
    uint8_t header[512];
    float payload[LEN + 8];
    enum expect expect;
    int code;
    uint64_t id;       /* the request id the reply must carry */
    bool is_pull;      /* an observer's pull: the reply carries `params` */
    bool push_apply;   /* a push the rules apply */
    bool push_retry;   /* a push the rules acknowledge as a retry */
    float params[LEN]; /* is_pull: the parameters the reply must carry */
    char what[200];
} message_t;

static uint8_t *noise; /* NOISE_BYTES random bytes, the source of random frames */

static void note(message_t *m, const char *fmt, ...)
{
    size_t used = strlen(m->what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->what + used, sizeof(m->what) - used, fmt, ap);
    va_end(ap);
}

/* Bytes the burst being built may still send in random frames. */
static size_t budget_left;

/* A frame size of interest: tiny, odd, around the payload's, or large. */
static size_t frame_size_any(void)
{
    static const size_t sizes[] = {
        0, 1, 3, 4, 5, 7, PBYTES - 4, PBYTES - 1, PBYTES + 1, PBYTES + 4, PBYTES, 2 * PBYTES};
    switch (below(8)) {
    case 0:
        return below(64);
    case 1:
        return 1 + 2 * below(2 * PBYTES); /* odd */
    case 2:
        if (chance(0.25))
            return NOISE_BYTES - below(1u << 20); /* 2 to 3 MB */
        return below(64 * 1024);
    default:
        return sizes[below(sizeof(sizes) / sizeof(sizes[0]))];
    }
}

/* frame_size_any(), cut to the burst's budget and taken from it. */
static size_t frame_size(void)
{
    size_t size = frame_size_any();
    if (size > budget_left)
        size = budget_left;
    budget_left -= size;
    return size;
}

/* A frame of `size` random bytes (a window on the noise buffer). */
static void add_noise_frame(message_t *m, size_t size)
{
    size_t off = size < NOISE_BYTES ? below((uint32_t)(NOISE_BYTES - size + 1)) : 0;
    m->data[m->nframes] = noise + off;
    m->len[m->nframes] = size;
    m->nframes++;
}

static void pack_header(message_t *m, const Zps__Header *h)
{
    size_t n = zps__header__get_packed_size(h);
    assert_true(n <= sizeof(m->header));
    m->len[0] = zps__header__pack(h, m->header);
    m->data[0] = m->header;
    m->nframes = 1;
}

static bool all_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return false;
    return true;
}

/*
 * What the server must answer, decided from the frames alone with
 * protobuf-c and the documented rules; a push the rules take is applied to
 * the reference here (the messages of one socket are handled in order, and
 * only one socket's burst holds pushes at a time).
 */
static void decide(message_t *m, ref_t *r)
{
    Zps__Header *h = zps__header__unpack(NULL, m->len[0], m->data[0]);
    m->id = h ? h->request_id : 0;
    if (!h) {
        m->expect = EXPECT_CODE;
        m->code = ZPS_EPROTO;
        return;
    }
    if (m->nframes > 2) {
        m->expect = EXPECT_CODE;
        m->code = ZPS_EFRAMES;
    } else if (h->version != ZPS_PROTOCOL_VERSION) {
        m->expect = EXPECT_CODE;
        m->code = ZPS_EVERSION;
    } else if (h->type == ZPS__MSG_TYPE__MSG_PUSH && !h->reply && m->nframes == 2 &&
               h->worker == 0 &&
               (h->shard_count == 0 || (h->shard_index == 1 && h->shard_count == 2)) &&
               h->config_fingerprint == 0 && h->total == N && h->offset == LO && h->length == LEN &&
               h->batch != 0 && m->len[1] == PBYTES &&
               zps_crc32c(0, m->data[1], m->len[1]) == h->checksum) {
        float g[LEN];
        memcpy(g, m->data[1], sizeof(g));
        bool ok = all_finite(g, LEN) && h->clock <= r->pushed;
        if (ok && h->clock < r->pushed) {
            m->push_retry = true;
            r->retries++;
        } else if (ok) {
            float next[LEN];
            for (int i = 0; i < LEN; i++)
                next[i] = r->p[i] - LR * g[i];
            if (all_finite(next, LEN)) {
                memcpy(r->p, next, sizeof(next));
                r->pushed++;
                r->applied++;
                m->push_apply = true;
            } else {
                ok = false;
            }
        }
        if (m->expect != EXPECT_CODE)
            m->expect = ok ? EXPECT_OK : EXPECT_ERROR;
    } else if (m->expect != EXPECT_CODE && m->expect != EXPECT_OK) {
        /* A push the rules refuse is an error; anything else decoded from
         * random bytes may be served (a heartbeat, say). */
        m->expect = h->type == ZPS__MSG_TYPE__MSG_PUSH ? EXPECT_ERROR : EXPECT_ANY;
    }
    if (m->expect == EXPECT_OK && m->is_pull)
        memcpy(m->params, r->p, sizeof(m->params));
    zps__header__free_unpacked(h, NULL);
}

/* A header of random bytes that a server may not leave unanswered. */
static void random_header(message_t *m, size_t size)
{
    for (int tries = 0; tries < 100; tries++) {
        add_noise_frame(m, size);
        /* A waiting observer's pull is answered later, or never, and an
         * exchange is answered by the next clock's pull: re-roll. */
        Zps__Header *h = zps__header__unpack(NULL, m->len[0], m->data[0]);
        bool waits = h && ((h->type == ZPS__MSG_TYPE__MSG_PULL && (h->flags & FLAG_WAIT)) ||
                           (h->type == ZPS__MSG_TYPE__MSG_PUSH && (h->flags & FLAG_EXCHANGE)));
        if (h)
            zps__header__free_unpacked(h, NULL);
        if (!waits)
            return;
        m->nframes = 0;
        size = below(64);
    }
    fail_msg("no random header that does not wait");
}

/* A well-formed request of a random kind; `id` is its request id. */
static void valid_header(Zps__Header *h, const ref_t *r, uint64_t id)
{
    static const Zps__MsgType kinds[] = {
        ZPS__MSG_TYPE__MSG_PUSH,  ZPS__MSG_TYPE__MSG_PUSH,      ZPS__MSG_TYPE__MSG_PUSH,
        ZPS__MSG_TYPE__MSG_PULL,  ZPS__MSG_TYPE__MSG_HEARTBEAT, ZPS__MSG_TYPE__MSG_INIT,
        ZPS__MSG_TYPE__MSG_STATS,
    };
    zps__header__init(h);
    h->version = ZPS_PROTOCOL_VERSION;
    h->type = kinds[below(sizeof(kinds) / sizeof(kinds[0]))];
    h->request_id = id;
    h->worker = -1;
    if (h->type == ZPS__MSG_TYPE__MSG_PUSH || h->type == ZPS__MSG_TYPE__MSG_INIT) {
        h->worker = 0;
        h->total = N;
        h->offset = LO;
        h->length = LEN;
        h->shard_index = 1;
        h->shard_count = 2;
        h->batch = 1 + below(8);
        h->model_version = r->pushed;
        h->clock = chance(0.8) || r->pushed == 0 ? r->pushed : r->pushed - 1;
    }
}

static void fill_payload(message_t *m, const Zps__Header *h)
{
    if (h->type == ZPS__MSG_TYPE__MSG_INIT) {
        memcpy(m->payload, init_values(), PBYTES);
        return;
    }
    for (size_t i = 0; i < sizeof(m->payload) / sizeof(m->payload[0]); i++)
        m->payload[i] = (float)((double)below(2001) - 1000.0) / 256.0f;
}

static const char *type_name(int type)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&zps__msg_type__descriptor, type);
    return v ? v->name : "?";
}

/* One message of a random kind, decided against the reference. */
static void build(message_t *m, ref_t *r, uint64_t id)
{
    memset(m, 0, sizeof(*m));
    Zps__Header h;
    uint32_t kind = below(20);
    if (kind < 6) {
        /* A valid request, framed right. */
        valid_header(&h, r, id);
        fill_payload(m, &h);
        bool payload = h.type == ZPS__MSG_TYPE__MSG_PUSH || h.type == ZPS__MSG_TYPE__MSG_INIT;
        h.checksum = payload ? zps_crc32c(0, m->payload, PBYTES) : 0;
        pack_header(m, &h);
        if (payload) {
            m->data[1] = (const uint8_t *)m->payload;
            m->len[1] = PBYTES;
            m->nframes = 2;
        }
        m->expect = EXPECT_OK;
        m->is_pull = h.type == ZPS__MSG_TYPE__MSG_PULL;
        note(m, "valid %s clock %llu", type_name(h.type), (unsigned long long)h.clock);
    } else if (kind < 12) {
        /* A valid header, with a random number of frames of random sizes
         * after it; the checksum covers the first of them, so that only
         * their count or size is wrong. */
        valid_header(&h, r, id);
        fill_payload(m, &h);
        int extra = (int)below(MAX_FRAMES);
        size_t first = chance(0.5) ? PBYTES : frame_size();
        if (first <= sizeof(m->payload))
            h.checksum = zps_crc32c(0, m->payload, first);
        else
            h.checksum = zps_crc32c(0, noise, first);
        pack_header(m, &h);
        for (int k = 0; k < extra; k++) {
            size_t size = k == 0 ? first : frame_size();
            if (k == 0) {
                m->data[1] = first <= sizeof(m->payload) ? (const uint8_t *)m->payload : noise;
                m->len[1] = first;
                m->nframes = 2;
            } else {
                add_noise_frame(m, size);
            }
        }
        bool wants = h.type == ZPS__MSG_TYPE__MSG_PUSH || h.type == ZPS__MSG_TYPE__MSG_INIT;
        m->is_pull = h.type == ZPS__MSG_TYPE__MSG_PULL;
        if (m->nframes > 2 || wants != (m->nframes == 2)) {
            m->expect = EXPECT_CODE;
            m->code = ZPS_EFRAMES;
        } else if (wants && m->len[1] != PBYTES) {
            m->expect = EXPECT_CODE;
            m->code = ZPS_ELENGTH;
        } else {
            m->expect = EXPECT_OK; /* framed right after all */
        }
        note(m, "%s with %d frames after the header (first %zu bytes)", type_name(h.type), extra,
             m->nframes > 1 ? m->len[1] : (size_t)0);
    } else if (kind < 17) {
        /* Random bytes as the header, and random frames after it. */
        random_header(m, chance(0.9) ? below(80) : frame_size());
        int extra = (int)below(MAX_FRAMES);
        for (int k = 0; k < extra; k++)
            add_noise_frame(m, frame_size());
        note(m, "a header of %zu random bytes, %d frames after it", m->len[0], extra);
    } else {
        /* Empty frames only. */
        int n = 1 + (int)below(MAX_FRAMES);
        for (int k = 0; k < n; k++)
            add_noise_frame(m, 0);
        note(m, "%d empty frames", n);
    }
    decide(m, r);
}

/* ---- the connection ---- */

typedef struct fuzz {
    harness_server_t srv;
    void *ctx;
    void *sock[SOCKS];
    void *ctl; /* fences and STATS */
    ref_t ref;
    unsigned long sent;   /* complete messages sent, all sockets */
    unsigned long errors; /* error replies received */
    unsigned long big;    /* frames of 1 MB and more */
    size_t burst_bytes;   /* the most random-frame bytes in one burst */
    uint64_t next_id;
} fuzz_t;

typedef struct reply {
    Zps__Header *h;
    size_t plen;
    uint8_t *payload;
} reply_t;

static void reply_free(reply_t *rp)
{
    if (rp->h)
        zps__header__free_unpacked(rp->h, NULL);
    free(rp->payload);
    memset(rp, 0, sizeof(*rp));
}

static void recv_reply(void *sock, reply_t *out, const char *what)
{
    memset(out, 0, sizeof(*out));
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, 0) < 0)
        fail_msg("no reply within 10 s to: %s", what);
    out->h = zps__header__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    if (!out->h)
        fail_msg("a reply that does not decode, to: %s", what);
    int more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    if (more) {
        zmq_msg_init(&m);
        assert_true(zmq_msg_recv(&m, sock, 0) >= 0);
        out->plen = zmq_msg_size(&m);
        out->payload = malloc(out->plen + 1);
        assert_non_null(out->payload);
        memcpy(out->payload, zmq_msg_data(&m), out->plen);
        if (zmq_msg_more(&m))
            fail_msg("a reply of more than two frames, to: %s", what);
        zmq_msg_close(&m);
        if (zps_crc32c(0, out->payload, out->plen) != out->h->checksum)
            fail_msg("a reply payload whose checksum is wrong, to: %s", what);
    }
    if (!out->h->reply)
        fail_msg("a reply without the reply flag, to: %s", what);
}

static void send_frame(fuzz_t *f, void *sock, const message_t *m, int k)
{
    bool last = k + 1 == m->nframes;
    if (zmq_send(sock, m->data[k], m->len[k], last ? 0 : ZMQ_SNDMORE) < 0)
        fail_msg("zmq_send: %s", zmq_strerror(zmq_errno()));
    if (last)
        f->sent++;
}

static void check_reply(fuzz_t *f, const message_t *m, const reply_t *rp)
{
    const Zps__Header *h = rp->h;
    if (h->request_id != m->id)
        fail_msg("a reply with request id %llu, not %llu, to: %s",
                 (unsigned long long)h->request_id, (unsigned long long)m->id, m->what);
    if (h->status != 0) {
        f->errors++;
        if (!h->error || !h->error[0])
            fail_msg("an error reply (status %d) without a reason, to: %s", h->status, m->what);
    }
    switch (m->expect) {
    case EXPECT_CODE:
        if (h->status != m->code)
            fail_msg("status %d (%s), not %d, to: %s", h->status, h->error, m->code, m->what);
        return;
    case EXPECT_ERROR:
        if (h->status == 0)
            fail_msg("accepted, though the rules refuse it: %s", m->what);
        return;
    case EXPECT_ANY:
        return;
    case EXPECT_OK:
        break;
    }
    if (h->status != 0)
        fail_msg("refused (%d: %s), though valid: %s", h->status, h->error, m->what);
    if (m->push_apply || m->push_retry) {
        bool retry = (h->flags & FLAG_RETRY) != 0;
        if (retry != m->push_retry)
            fail_msg("a push %s flagged as a retry: %s", retry ? "wrongly" : "not", m->what);
    }
    if (m->is_pull) {
        if (rp->plen != PBYTES)
            fail_msg("a pull answered with %zu bytes: %s", rp->plen, m->what);
        if (memcmp(rp->payload, m->params, PBYTES) != 0)
            fail_msg("a pull answered with other parameters than the reference's: %s", m->what);
    }
}

/* A request of no consequence on socket `sock`, answered before returning. */
static void side_exchange(fuzz_t *f, void *sock)
{
    message_t *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    /* Not a pull: the burst's messages sent so far may or may not have been
     * handled yet, so the parameters are not known here. */
    h.type = chance(0.5) ? ZPS__MSG_TYPE__MSG_HEARTBEAT : ZPS__MSG_TYPE__MSG_STATS;
    h.worker = -1;
    h.request_id = f->next_id++;
    pack_header(m, &h);
    m->expect = EXPECT_OK;
    m->id = h.request_id;
    snprintf(m->what, sizeof(m->what), "a %s in the middle of another socket's message",
             type_name(h.type));
    send_frame(f, sock, m, 0);
    reply_t rp;
    recv_reply(sock, &rp, m->what);
    check_reply(f, m, &rp);
    reply_free(&rp);
    free(m);
}

/* The number after "key": in the object "group":{...} of a STATS reply. */
static unsigned long long json_count_in(const char *json, const char *group, const char *key)
{
    char obj[64];
    snprintf(obj, sizeof(obj), "\"%s\":{", group);
    const char *counts = strstr(json, obj);
    assert_non_null(counts);
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *at = strstr(counts, pat);
    assert_non_null(at);
    return strtoull(at + strlen(pat), NULL, 10);
}

static unsigned long long json_count(const char *json, const char *key)
{
    return json_count_in(json, "counts", key);
}

/* The server is alive, its parameters are the reference's, its counters the test's. */
static void full_check(fuzz_t *f, long burst)
{
    if (!harness_alive(&f->srv))
        fail_msg("the server died before burst %ld", burst);
    message_t *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    h.type = ZPS__MSG_TYPE__MSG_PULL;
    h.worker = -1;
    h.request_id = f->next_id++;
    pack_header(m, &h);
    m->expect = EXPECT_OK;
    m->id = h.request_id;
    m->is_pull = true;
    memcpy(m->params, f->ref.p, sizeof(m->params));
    snprintf(m->what, sizeof(m->what), "the fence after burst %ld", burst);
    send_frame(f, f->ctl, m, 0);
    reply_t rp;
    recv_reply(f->ctl, &rp, m->what);
    check_reply(f, m, &rp);
    if (rp.h->model_version != f->ref.applied)
        fail_msg("the shard is at version %llu, the reference at %lu, after burst %ld",
                 (unsigned long long)rp.h->model_version, f->ref.applied, burst);
    reply_free(&rp);

    h.type = ZPS__MSG_TYPE__MSG_STATS;
    h.request_id = f->next_id++;
    pack_header(m, &h);
    m->is_pull = false;
    m->id = h.request_id;
    snprintf(m->what, sizeof(m->what), "STATS after burst %ld", burst);
    send_frame(f, f->ctl, m, 0);
    recv_reply(f->ctl, &rp, m->what);
    check_reply(f, m, &rp);
    const char *json = rp.h->json;
    assert_non_null(json);
    unsigned long long in = json_count(json, "messages_in");
    unsigned long long applied = json_count(json, "applied");
    unsigned long long retries = json_count(json, "retries");
    unsigned long long errors = json_count(json, "errors");
    if (in != f->sent || applied != f->ref.applied || retries != f->ref.retries ||
        errors != f->errors)
        fail_msg("after burst %ld STATS counts %llu messages in, %llu applied, %llu retries, "
                 "%llu errors; the test sent %lu, applied %lu, %lu retries, %lu errors",
                 burst, in, applied, retries, errors, f->sent, f->ref.applied, f->ref.retries,
                 f->errors);
    unsigned long long shut_buffer = json_count_in(json, "connections", "closed_buffer");
    unsigned long long shut_memory = json_count_in(json, "connections", "closed_memory");
    if (shut_buffer || shut_memory)
        fail_msg("after burst %ld the server has shut %llu connections for unread bytes and "
                 "%llu for memory; the bursts stay below %zu bytes",
                 burst, shut_buffer, shut_memory, f->burst_bytes);
    if (!f->burst_bytes)
        f->burst_bytes = json_count_in(json, "limits", "peer_buffer_bytes") / 2;
    reply_free(&rp);
    free(m);
}

/* One burst: 1 to 3 messages on one socket, maybe cut by another socket's exchange. */
static void burst(fuzz_t *f, long b)
{
    message_t *msgs = calloc(MAX_MSGS, sizeof(*msgs));
    assert_non_null(msgs);
    int n = 1 + (int)below(MAX_MSGS);
    budget_left = f->burst_bytes;
    for (int i = 0; i < n; i++) {
        build(&msgs[i], &f->ref, f->next_id++);
        for (int k = 0; k < msgs[i].nframes; k++)
            f->big += msgs[i].len[k] >= (1u << 20);
    }
    int s = (int)below(SOCKS);
    /* Where to stop for a while: inside a message, after frame `cut_k` of
     * message `cut_m` (none when cut_m is -1). */
    int cut_m = -1, cut_k = 0;
    if (chance(0.3)) {
        int i = (int)below((uint32_t)n);
        if (msgs[i].nframes > 1) {
            cut_m = i;
            cut_k = (int)below((uint32_t)msgs[i].nframes - 1);
        }
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < msgs[i].nframes; k++) {
            send_frame(f, f->sock[s], &msgs[i], k);
            if (i == cut_m && k == cut_k)
                side_exchange(f, f->sock[(s + 1 + (int)below(SOCKS - 1)) % SOCKS]);
        }
    }
    for (int i = 0; i < n; i++) {
        char what[260];
        snprintf(what, sizeof(what), "burst %ld, message %d of %d: %s", b, i + 1, n, msgs[i].what);
        memcpy(msgs[i].what, what, sizeof(msgs[i].what) - 1);
        msgs[i].what[sizeof(msgs[i].what) - 1] = '\0';
        reply_t rp;
        recv_reply(f->sock[s], &rp, msgs[i].what);
        check_reply(f, &msgs[i], &rp);
        reply_free(&rp);
    }
    free(msgs);
}

static void test_fuzz_frames(void **state)
{
    (void)state;
    fuzz_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    const char *args[] = {"--workers", "1",    "--mode",      "asp",   "--shard", "1/2",
                          "--lr",      "0.25", "--log-level", "error", NULL};
    assert_int_equal(harness_start(&f->srv, args), 0);

    const char *s = getenv("ZPS_FUZZ_SEED");
    uint64_t seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ 0xf7a3e5ull;
    const char *it = getenv("ZPS_FUZZ_ITERS");
    long iters = it && *it ? strtol(it, NULL, 10) : DEFAULT_ITERS;
    rng_state = seed ? seed : 1;
    printf("fuzz frames: seed %#llx (ZPS_FUZZ_SEED to repeat), %ld bursts, at most %.0f s\n",
           (unsigned long long)seed, iters, TIME_BOUND_S);
    fflush(stdout);

    noise = malloc(NOISE_BYTES);
    assert_non_null(noise);
    for (size_t i = 0; i < NOISE_BYTES; i += 8) {
        uint64_t x = rnd();
        memcpy(noise + i, &x, 8);
    }

    f->ctx = zmq_ctx_new();
    int linger = 0, timeout = 10000;
    for (int i = 0; i <= SOCKS; i++) {
        void *sock = zmq_socket(f->ctx, ZMQ_DEALER);
        assert_non_null(sock);
        zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger));
        zmq_setsockopt(sock, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
        assert_int_equal(harness_secure_socket(sock), 0);
        assert_int_equal(zmq_connect(sock, f->srv.endpoint), 0);
        if (i < SOCKS)
            f->sock[i] = sock;
        else
            f->ctl = sock;
    }
    f->next_id = 1;

    /* The first INIT, raw and valid. */
    message_t *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    h.type = ZPS__MSG_TYPE__MSG_INIT;
    h.request_id = f->next_id++;
    h.total = N;
    h.offset = LO;
    h.length = LEN;
    h.shard_index = 1;
    h.shard_count = 2;
    memcpy(m->payload, init_values(), PBYTES);
    memcpy(f->ref.p, init_values(), PBYTES);
    h.checksum = zps_crc32c(0, m->payload, PBYTES);
    pack_header(m, &h);
    m->data[1] = (const uint8_t *)m->payload;
    m->len[1] = PBYTES;
    m->nframes = 2;
    m->expect = EXPECT_OK;
    m->id = h.request_id;
    snprintf(m->what, sizeof(m->what), "the first INIT");
    send_frame(f, f->ctl, m, 0);
    send_frame(f, f->ctl, m, 1);
    reply_t rp;
    recv_reply(f->ctl, &rp, m->what);
    check_reply(f, m, &rp);
    reply_free(&rp);
    free(m);

    /* The server's bound on unread bytes, now that it knows the shard. */
    full_check(f, -1);
    assert_true(f->burst_bytes >= NOISE_BYTES);

    double t0 = now_s();
    long b = 0;
    for (; b < iters && now_s() - t0 < TIME_BOUND_S; b++) {
        burst(f, b);
        if ((b + 1) % CHECK_EVERY == 0)
            full_check(f, b);
    }
    full_check(f, b);
    printf("  %ld bursts, %lu messages in %.1f s: %lu pushes applied, %lu retries, %lu errors, "
           "%lu frames of 1 MB or more\n",
           b, f->sent, now_s() - t0, f->ref.applied, f->ref.retries, f->errors, f->big);
    /* Both sides of the rules were exercised. */
    assert_true(f->ref.applied > (unsigned long)b / 20);
    assert_true(f->errors > (unsigned long)b / 4);

    for (int i = 0; i < SOCKS; i++)
        zmq_close(f->sock[i]);
    zmq_close(f->ctl);
    zmq_ctx_term(f->ctx);
    assert_int_equal(harness_stop(&f->srv), 0);
    free(noise);
    noise = NULL;
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuzz_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
