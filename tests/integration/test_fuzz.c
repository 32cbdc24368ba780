/*
 * test_fuzz.c - thousands of seeded, randomly spoiled requests sent raw to a
 * running zps-server, checked against a model of the shard kept by the test.
 *
 * Each request starts as a well-formed INIT, PULL, PUSH, STATS, HEARTBEAT or
 * CHECKPOINT for shard 1/2 of a 6-element model, then may have header fields
 * set to hostile values, its payload resized, filled with NaN or given a
 * wrong checksum, its packed header bytes flipped, cut or padded, and frames
 * dropped or added. After every request an observer's pull (the "fence") is
 * sent, so every reply the request caused arrives before the fence's reply.
 *
 * What must hold, for every request:
 *   - the server answers it (a worker's pull may wait instead: it must be
 *     answered by a later step, with the parameters of the version it names);
 *   - an error reply has a status and a reason;
 *   - a push is applied if and only if the rules say it is valid (decided
 *     here from the bytes the test sent, decoded by protobuf-c, not by
 *     common/wire.c), and a retry is flagged as one;
 *   - the parameters the fence returns are, bit for bit, those of a reference
 *     that applies the accepted pushes with the documented float32 formulas.
 * At the end the server still serves STATS and exits cleanly on SIGTERM
 * (under the sanitizer build, any memory error makes that exit status fail).
 *
 * ZPS_FUZZ_SEED and ZPS_FUZZ_ITERS override the seed and the request count.
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
#include "fuzz_rng.h"
#include "harness.h"
#include "wire.h"
#include "zps.pb-c.h"

#define N 6      /* elements; shard 1/2 owns [3, 6) */
#define LO 3     /* its first element */
#define LEN 3    /* its length */
#define LR 0.25f /* the servers' --lr, exact in float32 */
#define MAX_FRAMES 4
#define FRAME_MAX 512
#define FENCE_ID (1ull << 62) /* request ids at and above this are fences */

/* ---- the reference shard ---- */

typedef struct ref {
    bool bsp;
    uint32_t workers;
    float p[LEN];
    uint64_t version;
    uint64_t pushed[2]; /* next clock expected from each worker */
    bool full[2];       /* BSP: a buffered gradient per worker */
    float slot[2][LEN];
    uint32_t batch[2];
    float (*hist)[LEN]; /* parameters of every version */
    size_t hist_cap;
} ref_t;

static void ref_record(ref_t *r)
{
    if (r->version >= r->hist_cap) {
        r->hist_cap = r->hist_cap ? 2 * r->hist_cap : 256;
        r->hist = realloc(r->hist, r->hist_cap * sizeof(*r->hist));
        assert_non_null(r->hist);
    }
    memcpy(r->hist[r->version], r->p, sizeof(r->p));
}

/* SGD, docs/optimizers.md: p = p - lr * g, in float32. */
static void ref_sgd(ref_t *r, const float *g)
{
    for (int i = 0; i < LEN; i++)
        r->p[i] = r->p[i] - LR * g[i];
    r->version++;
    ref_record(r);
}

/*
 * Whether an SGD step with g keeps every parameter finite. docs/consistency.md:
 * a push applied on arrival whose step does not is refused, nothing changes;
 * a BSP step that does not is refused, and the clock moves on.
 */
static bool ref_step_finite(const ref_t *r, const float *g)
{
    for (int i = 0; i < LEN; i++)
        if (!isfinite(r->p[i] - LR * g[i]))
            return false;
    return true;
}

/* An accepted, non-retry push of worker w at its next clock. */
static void ref_push(ref_t *r, uint32_t w, const float *g, uint32_t batch)
{
    r->pushed[w]++;
    if (!r->bsp) {
        ref_sgd(r, g);
        return;
    }
    memcpy(r->slot[w], g, sizeof(r->slot[w]));
    r->batch[w] = batch;
    r->full[w] = true;
    if (!(r->full[0] && r->full[1]))
        return;
    /* docs/consistency.md: acc = n0*g0; mean = (acc + n1*g1) / (n0 + n1). */
    float mean[LEN];
    const float n0 = (float)r->batch[0], n1 = (float)r->batch[1];
    const float denom = (float)((uint64_t)r->batch[0] + r->batch[1]);
    for (int i = 0; i < LEN; i++) {
        float acc = n0 * r->slot[0][i];
        mean[i] = (acc + n1 * r->slot[1][i]) / denom;
    }
    r->full[0] = r->full[1] = false;
    if (ref_step_finite(r, mean)) {
        ref_sgd(r, mean);
        return;
    }
    r->version++;
    ref_record(r);
}

/* ---- building one request ---- */

typedef struct request {
    uint8_t frame[MAX_FRAMES][FRAME_MAX];
    size_t len[MAX_FRAMES];
    int nframes;
    char what[256]; /* how it was built, for failure messages */
} request_t;

static void note(request_t *q, const char *fmt, ...)
{
    size_t used = strlen(q->what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->what + used, sizeof(q->what) - used, fmt, ap);
    va_end(ap);
}

static float interesting_float(void)
{
    static const float vals[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, 3.4e38f, -3.4e38f, 1e-3f};
    switch (below(4)) {
    case 0:
        return vals[below(sizeof(vals) / sizeof(vals[0]))];
    case 1: {
        uint32_t b = (uint32_t)rnd();
        float f;
        memcpy(&f, &b, sizeof(f));
        return f; /* any bit pattern, NaN and Inf included */
    }
    default:
        return (float)((double)below(2001) - 1000.0) / 64.0f;
    }
}

static uint64_t interesting_u64(uint64_t near)
{
    switch (below(6)) {
    case 0:
        return 0;
    case 1:
        return UINT64_MAX;
    case 2:
        return near + 1;
    case 3:
        return near ? near - 1 : 0;
    case 4:
        return (uint64_t)1 << below(64);
    default:
        return rnd();
    }
}

static void set_frame(request_t *q, int i, const void *data, size_t len)
{
    assert_true(len <= FRAME_MAX);
    memcpy(q->frame[i], data, len);
    q->len[i] = len;
}

static const char *type_name(int type)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&zps__msg_type__descriptor, type);
    return v ? v->name : "?";
}

/*
 * A request of a random kind, for worker `w`'s view of the reference, with
 * zero or more faults. `id` is its request id before any fault.
 */
static void build(request_t *q, const ref_t *r, uint64_t id)
{
    memset(q, 0, sizeof(*q));
    static const Zps__MsgType kinds[] = {
        ZPS__MSG_TYPE__MSG_PUSH,      ZPS__MSG_TYPE__MSG_PUSH,  ZPS__MSG_TYPE__MSG_PUSH,
        ZPS__MSG_TYPE__MSG_PULL,      ZPS__MSG_TYPE__MSG_PULL,  ZPS__MSG_TYPE__MSG_INIT,
        ZPS__MSG_TYPE__MSG_HEARTBEAT, ZPS__MSG_TYPE__MSG_STATS, ZPS__MSG_TYPE__MSG_CHECKPOINT,
    };
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    h.type = kinds[below(sizeof(kinds) / sizeof(kinds[0]))];
    uint32_t w = below(r->workers);
    h.worker = (int32_t)w;
    h.request_id = id;
    h.total = N;
    h.offset = LO;
    h.length = LEN;
    h.shard_index = 1;
    h.shard_count = 2;
    h.batch = 1 + below(64);
    h.model_version = r->version;
    /* Mostly the clock the worker is at, so that pushes are often valid. */
    h.clock = chance(0.7) ? r->pushed[w] : chance(0.5) && r->pushed[w] ? r->pushed[w] - 1 : rnd();
    note(q, "%s w%d clock %llu", type_name(h.type), h.worker, (unsigned long long)h.clock);

    bool with_payload = h.type == ZPS__MSG_TYPE__MSG_PUSH || h.type == ZPS__MSG_TYPE__MSG_INIT;
    float payload[FRAME_MAX / sizeof(float)];
    size_t count = LEN;
    if (h.type == ZPS__MSG_TYPE__MSG_INIT) {
        memcpy(payload, r->hist[0], sizeof(r->hist[0]));
    } else {
        for (size_t i = 0; i < count; i++)
            payload[i] = (float)((double)below(2001) - 1000.0) / 256.0f;
    }
    if (h.type == ZPS__MSG_TYPE__MSG_PULL && chance(0.3)) {
        h.flags = 1; /* ZPS_FLAG_RANGE: offset/length state the expected range */
    } else if (h.type == ZPS__MSG_TYPE__MSG_PULL) {
        h.offset = h.length = 0;
    }

    /* Header fields set to hostile values. */
    int field_faults = chance(0.5) ? 1 + (int)below(2) : 0;
    for (int k = 0; k < field_faults; k++) {
        switch (below(14)) {
        case 0:
            h.version = (uint32_t)interesting_u64(1);
            note(q, ", version %u", h.version);
            break;
        case 1:
            h.type = (Zps__MsgType)below(10);
            note(q, ", type %d", (int)h.type);
            break;
        case 2:
            h.reply = true;
            note(q, ", reply");
            break;
        case 3:
            h.worker = (int32_t)(below(7)) - 3;
            if (chance(0.3))
                h.worker = chance(0.5) ? INT32_MAX : INT32_MIN;
            note(q, ", worker %d", h.worker);
            break;
        case 4:
            h.clock = interesting_u64(h.clock);
            note(q, ", clock %llu", (unsigned long long)h.clock);
            break;
        case 5:
            h.total = interesting_u64(N);
            note(q, ", total %llu", (unsigned long long)h.total);
            break;
        case 6:
            h.offset = interesting_u64(LO);
            note(q, ", offset %llu", (unsigned long long)h.offset);
            break;
        case 7:
            h.length = interesting_u64(LEN);
            note(q, ", length %llu", (unsigned long long)h.length);
            break;
        case 8:
            h.batch = chance(0.5) ? 0 : (uint32_t)rnd();
            note(q, ", batch %u", h.batch);
            break;
        case 9:
            h.shard_index = below(3);
            h.shard_count = below(3);
            note(q, ", shard %u/%u", h.shard_index, h.shard_count);
            break;
        case 10:
            /* Not the exchange bit (common/wire.h, 1 << 6): an exchange's
             * reply waits for the next clock's pull, which this model of
             * the server does not follow; test_exchange.c covers it. Nor
             * the bits that say where and how the payload is (BF16, 1 << 8;
             * SHM, 1 << 9): this model's payloads are float32 frames;
             * test_wire.c, test_exchange.c and test_shm.c cover them. */
            h.flags = (uint32_t)rnd() & ~((1u << 6) | (1u << 8) | (1u << 9));
            note(q, ", flags %#x", h.flags);
            break;
        case 11:
            h.model_version = interesting_u64(r->version);
            note(q, ", model_version %llu", (unsigned long long)h.model_version);
            break;
        case 12:
            h.json = "{\"not\": \"for a request\"}";
            h.error = "nor this";
            note(q, ", json and error set");
            break;
        default:
            h.status = -(int32_t)below(30);
            h.next_clock = rnd();
            h.update_staleness = rnd();
            note(q, ", reply-only fields set");
            break;
        }
    }

    /* Payload faults. */
    bool good_crc = true;
    if (chance(0.25)) {
        switch (below(4)) {
        case 0:
            count = below(9);
            for (size_t i = LEN; i < count; i++)
                payload[i] = 1.0f;
            note(q, ", %zu payload values", count);
            break;
        case 1:
            payload[below(LEN)] = chance(0.5) ? NAN : (chance(0.5) ? INFINITY : -INFINITY);
            note(q, ", a non-finite value");
            break;
        case 2:
            for (size_t i = 0; i < count; i++)
                payload[i] = interesting_float();
            note(q, ", odd values");
            break;
        default:
            good_crc = false;
            note(q, ", wrong checksum");
            break;
        }
    }
    h.checksum = zps_crc32c(0, payload, count * sizeof(float));
    if (!good_crc)
        h.checksum ^= 1u << below(32);

    size_t hlen = zps__header__get_packed_size(&h);
    assert_true(hlen <= FRAME_MAX);
    q->len[0] = zps__header__pack(&h, q->frame[0]);
    q->nframes = 1;
    if (with_payload)
        set_frame(q, q->nframes++, payload, count * sizeof(float));

    /* Byte faults in the packed header. */
    if (chance(0.12)) {
        switch (below(4)) {
        case 0:
            for (int k = 0, n = 1 + (int)below(4); k < n && q->len[0]; k++)
                q->frame[0][below((uint32_t)q->len[0])] ^= (uint8_t)(1u << below(8));
            note(q, ", header bits flipped");
            break;
        case 1:
            q->len[0] = q->len[0] ? below((uint32_t)q->len[0]) : 0;
            note(q, ", header cut to %zu bytes", q->len[0]);
            break;
        case 2:
            q->len[0] = below(64);
            for (size_t i = 0; i < q->len[0]; i++)
                q->frame[0][i] = (uint8_t)rnd();
            note(q, ", header of %zu random bytes", q->len[0]);
            break;
        default: {
            size_t extra = 1 + below(16);
            for (size_t i = 0; i < extra && q->len[0] < FRAME_MAX; i++)
                q->frame[0][q->len[0]++] = (uint8_t)rnd();
            note(q, ", header with trailing bytes");
            break;
        }
        }
    }

    /* Frame faults. */
    if (chance(0.1)) {
        switch (below(3)) {
        case 0:
            if (q->nframes > 1) {
                q->nframes = 1;
                note(q, ", payload frame dropped");
            } else {
                set_frame(q, q->nframes++, payload, LEN * sizeof(float));
                note(q, ", unexpected payload frame");
            }
            break;
        case 1: {
            int extra = 1 + (int)below((uint32_t)(MAX_FRAMES - q->nframes));
            for (int k = 0; k < extra && q->nframes < MAX_FRAMES; k++) {
                size_t n = below(24);
                for (size_t i = 0; i < n; i++)
                    q->frame[q->nframes][i] = (uint8_t)rnd();
                q->len[q->nframes++] = n;
            }
            note(q, ", %d extra frames", extra);
            break;
        }
        default:
            q->len[0] = 0;
            q->nframes = 1;
            note(q, ", one empty frame");
            break;
        }
    }
}

/* ---- what the server sees, decided independently of common/wire.c ---- */

typedef struct view {
    Zps__Header *h; /* NULL when the header does not decode */
    bool is_push;
    bool pull_may_wait; /* a worker's valid pull for a version not there yet */
    bool push_valid;    /* a push the rules accept (retry or applied) */
    bool push_retry;
    uint32_t worker;
    float grad[LEN];
} view_t;

static bool all_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return false;
    return true;
}

static void decide(view_t *v, const request_t *q, const ref_t *r)
{
    memset(v, 0, sizeof(*v));
    v->h = zps__header__unpack(NULL, q->len[0], q->frame[0]);
    const Zps__Header *h = v->h;
    if (!h || h->reply || h->version != ZPS_PROTOCOL_VERSION)
        return;
    bool worker_ok = h->worker >= 0 && (uint32_t)h->worker < r->workers;
    bool shard_ok = h->shard_count == 0 || (h->shard_index == 1 && h->shard_count == 2);
    /* A lease request (1 << 11) is for shard 0, which holds the shared
     * data assignment: this one, shard 1, refuses it. */
    bool lease = (h->flags & (1u << 11)) != 0 || h->lease_done != 0;
    if (h->type == ZPS__MSG_TYPE__MSG_PULL) {
        bool range_ok = !(h->flags & 1u) || (h->total == N && h->offset == LO && h->length == LEN);
        v->pull_may_wait = r->bsp && q->nframes == 1 && worker_ok && shard_ok && range_ok &&
                           !lease && h->clock <= r->pushed[h->worker] && h->clock > r->version;
        return;
    }
    if (h->type != ZPS__MSG_TYPE__MSG_PUSH)
        return;
    v->is_push = true;
    if (lease)
        return;
    /* A payload said to be bfloat16 (1 << 8) or in shared memory (1 << 9)
     * is not this float32 frame: refused. */
    if (q->nframes != 2 || !worker_ok || !shard_ok || (h->flags & ((1u << 8) | (1u << 9))))
        return;
    if (h->total != N || h->offset != LO || h->length != LEN || h->batch == 0)
        return;
    if (q->len[1] != LEN * sizeof(float) || zps_crc32c(0, q->frame[1], q->len[1]) != h->checksum)
        return;
    memcpy(v->grad, q->frame[1], sizeof(v->grad));
    if (!all_finite(v->grad, LEN))
        return;
    v->worker = (uint32_t)h->worker;
    if (h->clock < r->pushed[v->worker]) {
        v->push_valid = v->push_retry = true;
        return;
    }
    /* BSP: the push must be for the step being collected. */
    v->push_valid = h->clock == r->pushed[v->worker] && (!r->bsp || h->clock <= r->version);
    if (v->push_valid && !r->bsp && !ref_step_finite(r, v->grad))
        v->push_valid = false;
}

/* ---- the connection ---- */

typedef struct pending {
    uint64_t id;
    uint64_t clock;
} pending_t;

typedef struct fuzz {
    harness_server_t srv;
    void *ctx, *sock;
    ref_t ref;
    pending_t pending[64]; /* workers' pulls waiting for a step */
    size_t npending;
    unsigned long applied, refused, waited, answered_late;
} fuzz_t;

static void send_request(fuzz_t *f, const request_t *q)
{
    for (int i = 0; i < q->nframes; i++)
        assert_true(
            zmq_send(f->sock, q->frame[i], q->len[i], i + 1 < q->nframes ? ZMQ_SNDMORE : 0) >= 0);
}

typedef struct reply {
    Zps__Header *h;
    float payload[LEN];
    size_t plen; /* bytes as float32 (a bfloat16 payload is widened) */
    bool bf16;   /* the payload came as bfloat16: the parameters rounded */
} reply_t;

static void recv_reply(fuzz_t *f, reply_t *out, const char *what)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, f->sock, 0) < 0)
        fail_msg("no reply within 5 s after: %s", what);
    out->h = zps__header__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    if (!out->h)
        fail_msg("a reply that does not decode, after: %s", what);
    int more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    out->plen = 0;
    /* A request whose flipped bits asked for bfloat16 (1 << 8) gets it. */
    out->bf16 = (out->h->flags & (1u << 8)) != 0;
    size_t elem = out->bf16 ? 2 : sizeof(float);
    if (more) {
        zmq_msg_init(&m);
        assert_true(zmq_msg_recv(&m, f->sock, 0) >= 0);
        size_t bytes = zmq_msg_size(&m);
        if (bytes != LEN * elem)
            fail_msg("a reply payload of %zu bytes, after: %s", bytes, what);
        if (zps_crc32c(0, zmq_msg_data(&m), bytes) != out->h->checksum)
            fail_msg("a reply payload whose checksum is wrong, after: %s", what);
        const unsigned char *b = zmq_msg_data(&m);
        for (size_t i = 0; i < LEN; i++) {
            uint32_t u = 0;
            if (out->bf16)
                u = (uint32_t)(b[2 * i] | (b[2 * i + 1] << 8)) << 16;
            else
                memcpy(&u, b + 4 * i, 4);
            memcpy(&out->payload[i], &u, 4);
        }
        out->plen = LEN * sizeof(float);
        assert_false(zmq_msg_more(&m));
        zmq_msg_close(&m);
    }
}

/* A successful pull reply must carry exactly the parameters of the version it names. */
static void check_params(fuzz_t *f, const reply_t *rp, const char *what)
{
    uint64_t v = rp->h->model_version;
    if (rp->plen != LEN * sizeof(float))
        fail_msg("a successful pull without parameters, after: %s", what);
    if (v > f->ref.version)
        fail_msg("a pull reply names version %llu, the reference is at %llu, after: %s",
                 (unsigned long long)v, (unsigned long long)f->ref.version, what);
    if (rp->bf16) {
        /* Rounded to bfloat16: within half a unit of its 8 bits. */
        for (size_t i = 0; i < LEN; i++) {
            float want = f->ref.hist[v][i];
            if (!(fabsf(rp->payload[i] - want) <= fabsf(want) * 0x1p-8f))
                fail_msg("version %llu element %zu is %a in bfloat16, the reference %a, after: %s",
                         (unsigned long long)v, i, (double)rp->payload[i], (double)want, what);
        }
        return;
    }
    if (memcmp(rp->payload, f->ref.hist[v], sizeof(rp->payload)) != 0)
        fail_msg("version %llu is {%a, %a, %a}, the reference has {%a, %a, %a}, after: %s",
                 (unsigned long long)v, (double)rp->payload[0], (double)rp->payload[1],
                 (double)rp->payload[2], (double)f->ref.hist[v][0], (double)f->ref.hist[v][1],
                 (double)f->ref.hist[v][2], what);
}

static ssize_t pending_find(const fuzz_t *f, uint64_t id)
{
    for (size_t i = 0; i < f->npending; i++)
        if (f->pending[i].id == id)
            return (ssize_t)i;
    return -1;
}

/* The fence: an observer's pull, answered at once with the current parameters. */
static void send_fence(fuzz_t *f, uint64_t id)
{
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    h.type = ZPS__MSG_TYPE__MSG_PULL;
    h.worker = -1;
    h.request_id = id;
    uint8_t buf[128];
    size_t n = zps__header__pack(&h, buf);
    assert_true(zmq_send(f->sock, buf, n, 0) >= 0);
}

/* Sends one request and its fence; checks every reply in between. */
static void exchange(fuzz_t *f, const request_t *q, uint64_t fence_id)
{
    view_t v;
    decide(&v, q, &f->ref);
    send_request(f, q);
    send_fence(f, fence_id);

    reply_t own = {0};
    bool have_own = false;
    for (;;) {
        reply_t rp;
        recv_reply(f, &rp, q->what);
        if (!rp.h->reply)
            fail_msg("a reply without the reply flag, after: %s", q->what);
        if (rp.h->request_id == fence_id) {
            if (rp.h->status != 0)
                fail_msg("the fence failed (%s), after: %s", rp.h->error, q->what);
            if (rp.h->model_version != f->ref.version)
                fail_msg("the shard is at version %llu, the reference at %llu, after: %s",
                         (unsigned long long)rp.h->model_version,
                         (unsigned long long)f->ref.version, q->what);
            check_params(f, &rp, q->what);
            zps__header__free_unpacked(rp.h, NULL);
            break;
        }
        /* A worker's earlier pull, answered by the step this request caused.
         * (Ids are not unique once bytes are spoiled: an undecodable request
         * is answered with id 0, which a spoiled pull may also carry; so only
         * a successful PULL reply counts as a late answer.) */
        ssize_t k = pending_find(f, rp.h->request_id);
        if (k >= 0 && rp.h->type == ZPS__MSG_TYPE__MSG_PULL && rp.h->status == 0 &&
            !(v.h && v.h->request_id == rp.h->request_id && v.h->type == ZPS__MSG_TYPE__MSG_PULL)) {
            if (rp.h->model_version < f->pending[k].clock)
                fail_msg("a pull for clock %llu answered at version %llu, after: %s",
                         (unsigned long long)f->pending[k].clock,
                         (unsigned long long)rp.h->model_version, q->what);
            check_params(f, &rp, q->what);
            f->pending[k] = f->pending[--f->npending];
            f->answered_late++;
            zps__header__free_unpacked(rp.h, NULL);
            continue;
        }
        if (have_own)
            fail_msg("two replies to one request: %s", q->what);
        own = rp;
        have_own = true;
        /* Apply an accepted push to the reference now: the fence and any
         * late pull answers that follow already include it. */
        if (own.h->status == 0 && v.is_push) {
            if (!v.push_valid)
                fail_msg("the server accepted a push the rules refuse: %s", q->what);
            bool retry = (own.h->flags & 2u) != 0; /* ZPS_FLAG_RETRY */
            if (retry != v.push_retry)
                fail_msg("a push %s flagged as a retry: %s", retry ? "wrongly" : "not", q->what);
            if (!retry) {
                ref_push(&f->ref, v.worker, v.grad, v.h->batch);
                f->applied++;
            }
        }
    }

    if (!have_own) {
        /* Only a worker's pull for a version that does not exist yet may wait. */
        if (!v.pull_may_wait)
            fail_msg("no reply to: %s", q->what);
        if (f->npending == sizeof(f->pending) / sizeof(f->pending[0]))
            fail_msg("more waiting pulls than the server may hold: %s", q->what);
        f->pending[f->npending++] = (pending_t){v.h->request_id, v.h->clock};
        f->waited++;
    } else {
        if (own.h->status != 0) {
            f->refused++;
            if (!own.h->error || !own.h->error[0])
                fail_msg("an error reply (status %d) without a reason, to: %s", own.h->status,
                         q->what);
            if (v.push_valid)
                fail_msg("a valid push was refused (%s): %s", own.h->error, q->what);
        } else if (own.h->type == ZPS__MSG_TYPE__MSG_PULL) {
            check_params(f, &own, q->what);
        }
        zps__header__free_unpacked(own.h, NULL);
    }
    if (v.h)
        zps__header__free_unpacked(v.h, NULL);
}

/* ---- the runs ---- */

static void init_model(fuzz_t *f)
{
    request_t q = {0};
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    h.type = ZPS__MSG_TYPE__MSG_INIT;
    h.worker = 0;
    h.request_id = 1;
    h.total = N;
    h.offset = LO;
    h.length = LEN;
    h.shard_index = 1;
    h.shard_count = 2;
    const float init[LEN] = {1.0f, -2.0f, 0.5f};
    memcpy(f->ref.p, init, sizeof(init));
    ref_record(&f->ref);
    h.checksum = zps_crc32c(0, init, sizeof(init));
    q.len[0] = zps__header__pack(&h, q.frame[0]);
    set_frame(&q, 1, init, sizeof(init));
    q.nframes = 2;
    snprintf(q.what, sizeof(q.what), "the first INIT");
    exchange(f, &q, FENCE_ID);
}

static void run(const char *mode, uint32_t workers)
{
    fuzz_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    char wbuf[16];
    snprintf(wbuf, sizeof(wbuf), "%u", workers);
    const char *args[] = {"--workers", wbuf,   "--mode",      mode,    "--shard", "1/2",
                          "--lr",      "0.25", "--log-level", "error", NULL};
    assert_int_equal(harness_start(&f->srv, args), 0);
    f->ctx = zmq_ctx_new();
    f->sock = zmq_socket(f->ctx, ZMQ_DEALER);
    int linger = 0, timeout = 5000;
    zmq_setsockopt(f->sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(f->sock, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    assert_int_equal(harness_secure_socket(f->sock), 0);
    assert_int_equal(zmq_connect(f->sock, f->srv.endpoint), 0);
    f->ref.bsp = strcmp(mode, "bsp") == 0;
    f->ref.workers = workers;

    const char *s = getenv("ZPS_FUZZ_SEED");
    uint64_t seed = s && *s ? strtoull(s, NULL, 0) : 0x5eed2026ull + workers;
    const char *it = getenv("ZPS_FUZZ_ITERS");
    long iters = it && *it ? strtol(it, NULL, 10) : 3000;
    rng_state = seed ? seed : 1;
    printf("fuzz %s, %u workers: seed %#llx, %ld requests\n", mode, workers,
           (unsigned long long)seed, iters);

    init_model(f);
    for (long i = 0; i < iters; i++) {
        request_t q;
        build(&q, &f->ref, 100 + (uint64_t)i);
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "#%ld ", i);
        size_t pl = strlen(prefix), wl = strlen(q.what);
        if (pl + wl < sizeof(q.what)) {
            memmove(q.what + pl, q.what, wl + 1);
            memcpy(q.what, prefix, pl);
        }
        exchange(f, &q, FENCE_ID + 1 + (uint64_t)i);
    }
    printf("  %lu pushes applied, %lu requests refused, %lu pulls waited (%lu answered by a "
           "later step); model at version %llu\n",
           f->applied, f->refused, f->waited, f->answered_late, (unsigned long long)f->ref.version);
    /* The fuzz must have exercised both sides of the rules. */
    assert_true(f->applied > (unsigned long)iters / 20);
    assert_true(f->refused > (unsigned long)iters / 5);
    if (f->ref.bsp)
        assert_true(f->answered_late > 0);

    /* Still serving: STATS answers with JSON that counts the errors. */
    Zps__Header h = ZPS__HEADER__INIT;
    h.version = ZPS_PROTOCOL_VERSION;
    h.type = ZPS__MSG_TYPE__MSG_STATS;
    h.worker = -1;
    h.request_id = 7;
    uint8_t buf[128];
    size_t n = zps__header__pack(&h, buf);
    assert_true(zmq_send(f->sock, buf, n, 0) >= 0);
    reply_t rp;
    for (;;) {
        recv_reply(f, &rp, "the final STATS");
        if (rp.h->request_id == 7)
            break;
        assert_true(pending_find(f, rp.h->request_id) >= 0);
        zps__header__free_unpacked(rp.h, NULL);
    }
    assert_int_equal(rp.h->status, 0);
    assert_non_null(strstr(rp.h->json, "\"errors\""));
    zps__header__free_unpacked(rp.h, NULL);

    zmq_close(f->sock);
    zmq_ctx_term(f->ctx);
    assert_int_equal(harness_stop(&f->srv), 0);
    free(f->ref.hist);
    free(f);
}

static void test_fuzz_asp(void **state)
{
    (void)state;
    run("asp", 1);
}

static void test_fuzz_bsp(void **state)
{
    (void)state;
    run("bsp", 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuzz_asp),
        cmocka_unit_test(test_fuzz_bsp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
