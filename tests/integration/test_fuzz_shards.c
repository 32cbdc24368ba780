/*
 * test_fuzz_shards.c - seeded fuzz of three shards of one model through the
 * client library, mixed with raw messages to single shards, checked against
 * a reference model kept by the test.
 *
 * Three zps-server processes (ASP, one worker, SGD) hold a model of N
 * elements cut by the range rule. Each round sends a few raw messages to
 * random shards -- malformed ones (random header bytes, a payload frame
 * missing or of the wrong size, another shard's range, a wrong total or
 * checksum), and now and then a valid push to that shard alone, which moves
 * its clock ahead of the others' -- then one push through a worker's client
 * at a clock chosen so that every shard, some or none take it.
 *
 * What must hold, after every round:
 *   - a malformed raw message is refused with its documented code;
 *   - the client's push returns 0 when every shard takes it (applies it, or
 *     acknowledges it as a retry), an error when none does, and ZPS_EPARTIAL
 *     when some do, with zps_client_push_taken naming exactly those (decided
 *     here from each shard's clock in the reference);
 *   - each shard's slice, pulled by an observer's client, is bit for bit the
 *     reference's, and each shard's STATS counts the pushes the reference
 *     applied there and the retries it acknowledged, and its clock.
 * And INIT is all-or-nothing: malformed raw INITs leave every shard
 * uninitialised; a client INIT with a NaN sends nothing; one that a shard
 * refuses (other values before any step, another N) changes no shard.
 *
 * ZPS_FUZZ_SEED and ZPS_FUZZ_ITERS override the seed and the round count.
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
#include "zps/zps.h"
#include "error.h"
#include "fuzz_rng.h"
#include "harness.h"
#include "timeutil.h"
#include "wire.h"
#include "zps.pb-c.h"

#define S 3        /* shards */
#define N 2101     /* elements: ranges [0, 700), [700, 1400), [1400, 2101) */
#define LR 0.25f   /* the servers' --lr, exact in float32 */
#define MAXLEN 701 /* the longest slice */

#ifdef ZPS_SANITIZED
#define DEFAULT_ITERS 600
#define TIME_BOUND_S 60.0
#else
#define DEFAULT_ITERS 2000
#define TIME_BOUND_S 20.0
#endif

static double now_s(void)
{
    return (double)zps_now_ns() * 1e-9;
}

/* The range rule, written out here: shard i owns [floor(i*N/S), floor((i+1)*N/S)). */
static uint64_t lo_of(int i, uint64_t n)
{
    return (uint64_t)i * n / S;
}

/* ---- the reference model ---- */

typedef struct ref {
    float p[N];
    uint64_t pushed[S]; /* the next clock each shard expects from worker 0 */
    unsigned long applied[S], retries[S];
} ref_t;

typedef struct fuzz {
    harness_server_t srv[S];
    const char *endpoints[S];
    zps_client_t *worker, *observer;
    void *ctx;
    void *raw[S]; /* a raw DEALER socket per shard */
    ref_t ref;
    uint64_t next_id;
    unsigned long partial, all, none, raw_refused, raw_applied;
} fuzz_t;

static float grad_value(void)
{
    return (float)((double)below(2001) - 1000.0) / 256.0f;
}

/* ---- raw messages to one shard ---- */

/*
 * Sends [header][payload?] to shard `s` and returns the reply's status;
 * the reply must echo `id`.
 */
static int raw_exchange(fuzz_t *f, int s, const Zps__Header *h, const void *payload, size_t bytes,
                        bool with_payload, const char *what)
{
    uint8_t buf[512];
    size_t n = zps__header__get_packed_size(h);
    assert_true(n <= sizeof(buf));
    zps__header__pack(h, buf);
    assert_true(zmq_send(f->raw[s], buf, n, with_payload ? ZMQ_SNDMORE : 0) >= 0);
    if (with_payload)
        assert_true(zmq_send(f->raw[s], payload, bytes, 0) >= 0);
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, f->raw[s], 0) < 0)
        fail_msg("shard %d did not answer: %s", s, what);
    Zps__Header *r = zps__header__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    if (!r)
        fail_msg("shard %d's reply does not decode: %s", s, what);
    while (zmq_msg_more(&m)) {
        zmq_msg_close(&m);
        zmq_msg_init(&m);
        assert_true(zmq_msg_recv(&m, f->raw[s], 0) >= 0);
    }
    zmq_msg_close(&m);
    if (r->request_id != h->request_id)
        fail_msg("shard %d answered request %llu, not %llu: %s", s,
                 (unsigned long long)r->request_id, (unsigned long long)h->request_id, what);
    int status = r->status;
    if (status != 0 && (!r->error || !r->error[0]))
        fail_msg("shard %d refused without a reason: %s", s, what);
    zps__header__free_unpacked(r, NULL);
    return status;
}

static const char *type_name_of(Zps__MsgType type)
{
    return type == ZPS__MSG_TYPE__MSG_INIT ? "INIT" : "PUSH";
}

/* A well-formed PUSH or INIT header for shard s's slice of an n-element model. */
static void slice_header(Zps__Header *h, Zps__MsgType type, int s, uint64_t n, uint64_t id)
{
    zps__header__init(h);
    h->version = ZPS_PROTOCOL_VERSION;
    h->type = type;
    h->worker = 0;
    h->request_id = id;
    h->total = n;
    h->offset = lo_of(s, n);
    h->length = lo_of(s + 1, n) - h->offset;
    h->shard_index = (uint32_t)s;
    h->shard_count = S;
    h->batch = 1;
}

/*
 * A malformed message of a random kind to a random shard: its code must be
 * the documented one. `type` is PUSH or INIT. Returns nothing; changes no
 * shard.
 */
static void raw_malformed(fuzz_t *f, Zps__MsgType type, const char *phase)
{
    int s = (int)below(S);
    Zps__Header h;
    slice_header(&h, type, s, N, f->next_id++);
    h.clock = f->ref.pushed[s];
    float pay[MAXLEN + 4];
    for (size_t i = 0; i < sizeof(pay) / sizeof(pay[0]); i++)
        pay[i] = grad_value();
    size_t len = (size_t)h.length;
    h.checksum = zps_crc32c(0, pay, len * sizeof(float));
    char what[160];
    int want;
    size_t bytes = len * sizeof(float);
    bool with_payload = true;
    switch (below(7)) {
    case 0: {
        /* Random bytes that do not decode as a header. */
        uint8_t junk[48];
        Zps__Header *d;
        do {
            for (size_t i = 0; i < sizeof(junk); i++)
                junk[i] = (uint8_t)rnd();
            junk[0] = 0xff; /* field 31, wire type 7: never a valid tag */
            d = zps__header__unpack(NULL, sizeof(junk), junk);
            if (d)
                zps__header__free_unpacked(d, NULL);
        } while (d);
        assert_true(zmq_send(f->raw[s], junk, sizeof(junk), 0) >= 0);
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, f->raw[s], 0) < 0)
            fail_msg("shard %d did not answer random bytes (%s)", s, phase);
        Zps__Header *r = zps__header__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
        zmq_msg_close(&m);
        assert_non_null(r);
        if (r->status != ZPS_EPROTO)
            fail_msg("shard %d answered random bytes with %d, not ZPS_EPROTO (%s)", s, r->status,
                     phase);
        zps__header__free_unpacked(r, NULL);
        f->raw_refused++;
        return;
    }
    case 1:
        with_payload = false;
        want = ZPS_EFRAMES;
        snprintf(what, sizeof(what), "%s without its payload frame", type_name_of(type));
        break;
    case 2:
        bytes = chance(0.5) ? bytes - 1 - below(4) : bytes + 1 + below(8);
        h.checksum = zps_crc32c(0, pay, bytes);
        want = ZPS_ELENGTH;
        snprintf(what, sizeof(what), "a payload of %zu bytes for %zu floats", bytes, len);
        break;
    case 3:
        h.checksum ^= 1u << below(32);
        want = ZPS_ECHECKSUM;
        snprintf(what, sizeof(what), "a wrong checksum");
        break;
    case 4: {
        /* Another shard's slice, or this one's with another shard number. */
        int o = (s + 1 + (int)below(S - 1)) % S;
        if (chance(0.5)) {
            h.offset = lo_of(o, N);
            h.length = lo_of(o + 1, N) - h.offset;
            bytes = (size_t)h.length * sizeof(float);
            h.checksum = zps_crc32c(0, pay, bytes);
        } else {
            h.shard_index = (uint32_t)o;
        }
        want = ZPS_ERANGE;
        snprintf(what, sizeof(what), "shard %d's slice or number", o);
        break;
    }
    case 5:
        h.total = N + 1 + below(5);
        want = type == ZPS__MSG_TYPE__MSG_PUSH ? ZPS_ESIZE : ZPS_ERANGE;
        if (type == ZPS__MSG_TYPE__MSG_INIT) {
            /* An INIT for another N whose slice is not this shard's under it. */
            h.offset = lo_of(s, h.total) + 1;
            h.length = len;
        }
        snprintf(what, sizeof(what), "total %llu", (unsigned long long)h.total);
        break;
    default:
        pay[below((uint32_t)len)] = NAN;
        h.checksum = zps_crc32c(0, pay, bytes);
        want = ZPS_ENONFINITE;
        snprintf(what, sizeof(what), "a NaN");
        break;
    }
    char full[260];
    snprintf(full, sizeof(full), "raw %s to shard %d with %s (%s)", type_name_of(type), s, what,
             phase);
    int st = raw_exchange(f, s, &h, pay, bytes, with_payload, full);
    if (st != want)
        fail_msg("status %d, not %d, to: %s", st, want, full);
    f->raw_refused++;
}

/* A valid push to shard `s` alone at its next clock: applied there only. */
static void raw_valid_push(fuzz_t *f)
{
    int s = (int)below(S);
    Zps__Header h;
    slice_header(&h, ZPS__MSG_TYPE__MSG_PUSH, s, N, f->next_id++);
    h.clock = f->ref.pushed[s];
    h.batch = 1 + below(8);
    float g[MAXLEN];
    size_t len = (size_t)h.length;
    for (size_t i = 0; i < len; i++)
        g[i] = grad_value();
    h.checksum = zps_crc32c(0, g, len * sizeof(float));
    char what[96];
    snprintf(what, sizeof(what), "a valid raw push to shard %d at clock %llu", s,
             (unsigned long long)h.clock);
    int st = raw_exchange(f, s, &h, g, len * sizeof(float), true, what);
    if (st != 0)
        fail_msg("refused (%d): %s", st, what);
    float *p = f->ref.p + h.offset;
    for (size_t i = 0; i < len; i++)
        p[i] = p[i] - LR * g[i];
    f->ref.pushed[s]++;
    f->ref.applied[s]++;
    f->raw_applied++;
}

/* ---- the client's push ---- */

static void client_push(fuzz_t *f, long round)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int s = 0; s < S; s++) {
        lo = f->ref.pushed[s] < lo ? f->ref.pushed[s] : lo;
        hi = f->ref.pushed[s] > hi ? f->ref.pushed[s] : hi;
    }
    uint64_t clock;
    switch (below(10)) {
    case 0:
    case 1:
        clock = hi;
        break;
    case 2:
        clock = lo ? lo - 1 : 0;
        break;
    case 3:
        clock = hi + 1;
        break;
    default:
        clock = lo;
        break;
    }
    static float g[N];
    for (int i = 0; i < N; i++)
        g[i] = grad_value();
    uint32_t batch = 1 + below(8);
    bool nonfinite = chance(0.05);
    if (nonfinite)
        g[below(N)] = chance(0.5) ? NAN : INFINITY;

    /* What each shard does with it, from its clock in the reference. */
    bool taken[S], applied[S];
    int ntaken = 0;
    for (int s = 0; s < S; s++) {
        taken[s] = !nonfinite && clock <= f->ref.pushed[s];
        applied[s] = taken[s] && clock == f->ref.pushed[s];
        ntaken += taken[s];
    }
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    int rc = zps_client_push(f->worker, clock, g, N, batch, &info);
    char what[160];
    snprintf(what, sizeof(what), "round %ld: push at clock %llu%s, shards' clocks %llu %llu %llu",
             round, (unsigned long long)clock, nonfinite ? " with a non-finite value" : "",
             (unsigned long long)f->ref.pushed[0], (unsigned long long)f->ref.pushed[1],
             (unsigned long long)f->ref.pushed[2]);
    if (nonfinite) {
        if (rc != ZPS_ENONFINITE)
            fail_msg("%s returned %d, not ZPS_ENONFINITE", what, rc);
    } else if (ntaken == S) {
        if (rc != 0)
            fail_msg("%s returned %d (%s), not 0", what, rc, zps_client_last_error(f->worker));
        f->all++;
    } else if (ntaken == 0) {
        if (rc != ZPS_EREMOTE || zps_client_last_remote_status(f->worker) != ZPS_ECLOCK)
            fail_msg("%s returned %d (%s), not ZPS_EREMOTE with ZPS_ECLOCK", what, rc,
                     zps_client_last_error(f->worker));
        f->none++;
    } else {
        if (rc != ZPS_EPARTIAL || zps_client_last_remote_status(f->worker) != ZPS_ECLOCK)
            fail_msg("%s returned %d (%s), not ZPS_EPARTIAL with ZPS_ECLOCK", what, rc,
                     zps_client_last_error(f->worker));
        f->partial++;
    }
    for (int s = 0; s < S && !nonfinite; s++) {
        if (zps_client_push_taken(f->worker, (size_t)s) != taken[s])
            fail_msg("%s: zps_client_push_taken(%d) says %s", what, s,
                     taken[s] ? "not taken" : "taken");
        if (taken[s] && !applied[s])
            f->ref.retries[s]++;
        if (!applied[s])
            continue;
        uint64_t lo_s = lo_of(s, N), hi_s = lo_of(s + 1, N);
        for (uint64_t i = lo_s; i < hi_s; i++)
            f->ref.p[i] = f->ref.p[i] - LR * g[i];
        f->ref.pushed[s]++;
        f->ref.applied[s]++;
    }
}

/* ---- the checks ---- */

static unsigned long long json_after(const char *json, const char *key)
{
    const char *at = strstr(json, key);
    if (!at)
        fail_msg("no %s in STATS: %s", key, json);
    return strtoull(at + strlen(key), NULL, 10);
}

/* Every shard's slice is the reference's, and its counters the test's. */
static void check_all(fuzz_t *f, const char *when)
{
    static float got[N];
    int rc = zps_client_pull(f->observer, 0, got, N, NULL);
    if (rc != 0)
        fail_msg("the observer's pull failed (%d: %s), %s", rc, zps_client_last_error(f->observer),
                 when);
    for (int s = 0; s < S; s++) {
        uint64_t lo_s = lo_of(s, N), hi_s = lo_of(s + 1, N);
        for (uint64_t i = lo_s; i < hi_s; i++)
            if (memcmp(&got[i], &f->ref.p[i], sizeof(float)) != 0)
                fail_msg("shard %d: element %llu is %a, the reference has %a, %s", s,
                         (unsigned long long)i, (double)got[i], (double)f->ref.p[i], when);
        char *json = NULL;
        rc = zps_client_stats(f->observer, (size_t)s, &json);
        if (rc != 0)
            fail_msg("STATS of shard %d failed (%d), %s", s, rc, when);
        unsigned long long applied = json_after(json, "\"applied\":");
        unsigned long long retries = json_after(json, "\"retries\":");
        unsigned long long clock = json_after(json, "\"clocks\":[");
        unsigned long long version = json_after(json, "\"version\":");
        if (applied != f->ref.applied[s] || retries != f->ref.retries[s] ||
            clock != f->ref.pushed[s] || version != f->ref.applied[s])
            fail_msg("shard %d's STATS: %llu applied, %llu retries, clock %llu, version %llu; "
                     "the reference: %lu, %lu, %llu, %lu, %s",
                     s, applied, retries, clock, version, f->ref.applied[s], f->ref.retries[s],
                     (unsigned long long)f->ref.pushed[s], f->ref.applied[s], when);
        free(json);
    }
}

/* Whether shard s reports itself initialised. */
static bool initialized(fuzz_t *f, int s)
{
    char *json = NULL;
    assert_int_equal(zps_client_stats(f->observer, (size_t)s, &json), 0);
    bool yes = strstr(json, "\"initialized\":true") != NULL;
    if (!yes)
        assert_non_null(strstr(json, "\"initialized\":false"));
    free(json);
    return yes;
}

static void init_values(float *v, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        v[i] = (float)((int)(i % 23) - 11) / 8.0f;
}

/*
 * INIT is all-or-nothing: malformed raw INITs and refused client INITs leave
 * every shard as it was.
 */
static void init_phase(fuzz_t *f)
{
    for (int k = 0; k < 12; k++)
        raw_malformed(f, ZPS__MSG_TYPE__MSG_INIT, "before any INIT");
    for (int s = 0; s < S; s++)
        if (initialized(f, s))
            fail_msg("shard %d initialised by a malformed INIT", s);

    static float v[N + 8];
    init_values(v, N);
    v[N / 2] = NAN;
    assert_int_equal(zps_client_init(f->worker, v, N), ZPS_ENONFINITE);
    for (int s = 0; s < S; s++)
        if (initialized(f, s))
            fail_msg("shard %d initialised by an INIT with a NaN", s);

    init_values(v, N);
    int rc = zps_client_init(f->worker, v, N);
    if (rc != 0)
        fail_msg("the first INIT failed (%d: %s)", rc, zps_client_last_error(f->worker));
    memcpy(f->ref.p, v, sizeof(f->ref.p));
    check_all(f, "after the first INIT");

    /* The same values again: acknowledged by every shard, nothing changes. */
    assert_int_equal(zps_client_init(f->worker, v, N), 0);
    /* Other values in one shard's slice, before any step: that shard refuses,
     * the others acknowledge values they already hold. */
    int s = (int)below(S);
    v[lo_of(s, N) + below((uint32_t)(lo_of(s + 1, N) - lo_of(s, N)))] += 1.0f;
    rc = zps_client_init(f->worker, v, N);
    if (rc != ZPS_EREMOTE || zps_client_last_remote_status(f->worker) != ZPS_EINITED)
        fail_msg("an INIT with other values in shard %d's slice returned %d (%s)", s, rc,
                 zps_client_last_error(f->worker));
    /* Another N: refused before anything changes. */
    init_values(v, N + 5);
    rc = zps_client_init(f->worker, v, N + 5);
    if (rc == 0)
        fail_msg("an INIT of another N was accepted");
    check_all(f, "after the refused INITs");
}

/* ---- the run ---- */

static void test_fuzz_shards(void **state)
{
    (void)state;
    fuzz_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    for (int s = 0; s < S; s++) {
        char shard[16];
        snprintf(shard, sizeof(shard), "%d/%d", s, S);
        const char *args[] = {"--workers", "1",    "--mode",      "asp",   "--shard", shard,
                              "--lr",      "0.25", "--log-level", "error", NULL};
        assert_int_equal(harness_start(&f->srv[s], args), 0);
        f->endpoints[s] = f->srv[s].endpoint;
    }
    zps_client_opts_t opts;
    zps_client_opts_default(&opts);
    opts.worker = 0;
    opts.timeout_ms = 10000;
    opts.retry_ms = 0; /* every request here is answered at once */
    opts.heartbeat_ms = 0;
    opts.wait_log_ms = 0;
    assert_int_equal(zps_client_new(f->endpoints, S, &opts, &f->worker), 0);
    opts.worker = -1;
    assert_int_equal(zps_client_new(f->endpoints, S, &opts, &f->observer), 0);
    f->ctx = zmq_ctx_new();
    int linger = 0, timeout = 10000;
    for (int s = 0; s < S; s++) {
        f->raw[s] = zmq_socket(f->ctx, ZMQ_DEALER);
        assert_non_null(f->raw[s]);
        zmq_setsockopt(f->raw[s], ZMQ_LINGER, &linger, sizeof(linger));
        zmq_setsockopt(f->raw[s], ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
        assert_int_equal(harness_secure_socket(f->raw[s]), 0);
        assert_int_equal(zmq_connect(f->raw[s], f->endpoints[s]), 0);
    }
    f->next_id = 1;

    const char *sd = getenv("ZPS_FUZZ_SEED");
    uint64_t seed = sd && *sd ? strtoull(sd, NULL, 0) : (uint64_t)time(NULL) ^ 0x5a4d5ull;
    const char *it = getenv("ZPS_FUZZ_ITERS");
    long iters = it && *it ? strtol(it, NULL, 10) : DEFAULT_ITERS;
    rng_state = seed ? seed : 1;
    printf("fuzz shards: seed %#llx (ZPS_FUZZ_SEED to repeat), %ld rounds, at most %.0f s\n",
           (unsigned long long)seed, iters, TIME_BOUND_S);
    fflush(stdout);

    init_phase(f);

    double t0 = now_s();
    long r = 0;
    for (; r < iters && now_s() - t0 < TIME_BOUND_S; r++) {
        int raw = (int)below(4);
        for (int k = 0; k < raw; k++)
            raw_malformed(f, ZPS__MSG_TYPE__MSG_PUSH, "fuzz round");
        if (chance(0.25))
            raw_valid_push(f);
        client_push(f, r);
        char when[48];
        snprintf(when, sizeof(when), "after round %ld", r);
        check_all(f, when);
    }

    /* After steps, an INIT of other values is acknowledged and changes nothing. */
    static float v[N];
    for (int i = 0; i < N; i++)
        v[i] = 1.0f;
    int rc = zps_client_init(f->worker, v, N);
    if (rc != 0)
        fail_msg("an INIT after steps returned %d (%s)", rc, zps_client_last_error(f->worker));
    check_all(f, "after an INIT once steps were taken");

    printf("  %ld rounds in %.1f s: client pushes taken by all %lu, by some %lu, by none %lu; "
           "%lu raw pushes applied, %lu raw messages refused; versions %lu %lu %lu\n",
           r, now_s() - t0, f->all, f->partial, f->none, f->raw_applied, f->raw_refused,
           f->ref.applied[0], f->ref.applied[1], f->ref.applied[2]);
    /* Every outcome was exercised. */
    assert_true(f->all > 0 && f->partial > 0 && f->none > 0);

    for (int s = 0; s < S; s++)
        zmq_close(f->raw[s]);
    zmq_ctx_term(f->ctx);
    zps_client_free(f->worker);
    zps_client_free(f->observer);
    for (int s = 0; s < S; s++)
        assert_int_equal(harness_stop(&f->srv[s]), 0);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuzz_shards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
