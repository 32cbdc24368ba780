/*
 * test_shm.c - the shared-memory path (server/shm.h) through real
 * zps-server processes on 127.0.0.1, checked against arithmetic done here:
 *   - BSP, two shards, two workers asking for shared memory: after the
 *     first call (which asks, and goes over the socket) every exchange
 *     moves its gradient and parameters through the segments, and each
 *     clock's parameters are w - lr * mean(g) computed by hand; STATS counts
 *     the sessions, the pushes and the replies;
 *   - a server started with --no-shm: the same run goes over the socket;
 *   - a raw peer that holds a session: a push from its slot is applied as
 *     computed here; one whose checksum does not match the slot, one whose
 *     length is not the shard's, one from a connection without a session,
 *     one for another rank, and an INIT claiming shared memory are each
 *     refused with their own code and change nothing; a second connection
 *     cannot take the rank's slot while the first holds it;
 *   - a segment left by a server that died (its PID gone) is removed when a
 *     server creates its own.
 */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "checksum.h"
#include "zps/zps.h"
#include "error.h"
#include "harness.h"
#include "json.h"
#include "shm_layout.h"
#include "timeutil.h"
#include "wire.h"

#define N 10 /* elements; with two shards [0, 5) and [5, 10) */
#define CLOCKS 4

static const float w0[N] = {1, 2, 3, 4, 5, -1, -2, -3, -4, -5};

static void start(harness_server_t *srv, int shards, const char *mode, const char *workers,
                  bool no_shm)
{
    for (int i = 0; i < shards; i++) {
        char shard[32];
        snprintf(shard, sizeof(shard), "%d/%d", i, shards);
        const char *args[] = {"--workers",
                              workers,
                              "--shard",
                              shard,
                              "--mode",
                              mode,
                              "--lr",
                              "0.5",
                              "--log-level",
                              "warn",
                              no_shm ? "--no-shm" : NULL,
                              NULL};
        assert_int_equal(harness_start(&srv[i], args), 0);
    }
}

static zps_client_t *client(harness_server_t *srv, int shards, int worker, bool shm)
{
    const char *eps[2];
    for (int i = 0; i < shards; i++)
        eps[i] = srv[i].endpoint;
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = worker;
    o.timeout_ms = 20000;
    o.shm = shm;
    zps_client_t *c = NULL;
    assert_int_equal(zps_client_new(eps, (size_t)shards, &o, &c), 0);
    return c;
}

static float grad_at(int worker, uint64_t t, int i)
{
    return (float)(worker + 1) * 0.25f * (float)(i + 1) + (float)t * 0.125f; /* exact */
}

typedef struct arg {
    harness_server_t *srv;
    int worker;
    float got[CLOCKS][N];
    int rc;
} arg_t;

static void *worker_main(void *p)
{
    arg_t *a = p;
    zps_client_t *c = client(a->srv, 2, a->worker, true);
    float w[N], g[N];
    a->rc = zps_client_pull(c, 0, w, N, NULL);
    for (uint64_t t = 0; t < CLOCKS && a->rc == 0; t++) {
        for (int i = 0; i < N; i++)
            g[i] = grad_at(a->worker, t, i);
        a->rc = zps_client_exchange(c, t, g, N, 1, a->got[t], NULL);
    }
    if (a->rc)
        fprintf(stderr, "worker %d: %s\n", a->worker, zps_client_last_error(c));
    zps_client_free(c);
    return NULL;
}

/* A number in the `shm` object of a STATS reply. */
static long long shm_stat(const char *json, const char *field)
{
    zps_json_t *j = NULL;
    assert_int_equal(zps_json_parse(json, &j, NULL, 0), 0);
    const zps_json_t *v = zps_json_get(zps_json_get(j, "shm"), field);
    assert_non_null(v);
    long long n = (long long)zps_json_number(v, -1);
    zps_json_free(j);
    return n;
}

/*
 * A shard's memory_bound_bytes less its connections' share (256 KiB each,
 * docs/protocol.md), which moves as clients come and go.
 */
static long long bound_less_connections(zps_client_t *c, size_t shard)
{
    char *json = NULL;
    assert_int_equal(zps_client_stats(c, shard, &json), 0);
    zps_json_t *j = NULL;
    assert_int_equal(zps_json_parse(json, &j, NULL, 0), 0);
    double bound =
        zps_json_number(zps_json_get(zps_json_get(j, "limits"), "memory_bound_bytes"), -1);
    double open = zps_json_number(zps_json_get(zps_json_get(j, "connections"), "open"), -1);
    assert_true(bound > 0 && open >= 1);
    zps_json_free(j);
    free(json);
    return (long long)bound - (long long)open * 256 * 1024;
}

static void run_two_workers(bool no_shm)
{
    harness_server_t srv[2];
    start(srv, 2, "bsp", "2", no_shm);
    zps_client_t *c = client(srv, 2, 0, false);
    assert_int_equal(zps_client_init(c, w0, N), 0);
    long long bound0[2];
    for (size_t s = 0; s < 2; s++)
        bound0[s] = bound_less_connections(c, s);
    zps_client_free(c);

    pthread_t th[2];
    arg_t args[2];
    for (int w = 0; w < 2; w++) {
        args[w] = (arg_t){.srv = srv, .worker = w, .rc = -1};
        pthread_create(&th[w], NULL, worker_main, &args[w]);
    }
    for (int w = 0; w < 2; w++) {
        pthread_join(th[w], NULL);
        assert_int_equal(args[w].rc, 0);
    }
    /* By hand: w(t+1) = w(t) - 0.5 * (g0(t) + g1(t)) / 2. */
    float want[N];
    memcpy(want, w0, sizeof(want));
    for (uint64_t t = 0; t < CLOCKS; t++) {
        for (int i = 0; i < N; i++) {
            want[i] = want[i] - 0.5f * ((grad_at(0, t, i) + grad_at(1, t, i)) / 2.0f);
            for (int w = 0; w < 2; w++)
                if (args[w].got[t][i] != want[i])
                    fail_msg("clock %llu, worker %d, element %d: got %.9g, want %.9g",
                             (unsigned long long)t, w, i, (double)args[w].got[t][i],
                             (double)want[i]);
        }
    }
    c = client(srv, 2, -1, false);
    for (size_t s = 0; s < 2; s++) {
        char *json = NULL;
        assert_int_equal(zps_client_stats(c, s, &json), 0);
        if (no_shm) {
            assert_int_equal(shm_stat(json, "granted"), 0);
            assert_int_equal(shm_stat(json, "pushes"), 0);
        } else {
            /* Each worker's first call asks; every push after it goes through
             * shared memory, and so does every reply after the grant. */
            assert_int_equal(shm_stat(json, "granted"), 2);
            assert_true(shm_stat(json, "pushes") >= 2 * (CLOCKS - 1));
            assert_true(shm_stat(json, "replies") >= 2 * (CLOCKS - 1));
            assert_true(shm_stat(json, "bytes") > 0);
        }
        free(json);
        /* The memory bound counts the segment once it exists: W slots and
         * W + 2 buffers, and two private copies of each worker's pushes,
         * (4W + 2) x 5 floats here; without shared memory it never grows. */
        long long grew = bound_less_connections(c, s) - bound0[s];
        assert_int_equal(grew, no_shm ? 0 : (4 * 2 + 2) * 5 * (long long)sizeof(float));
    }
    zps_client_free(c);
    for (int i = 0; i < 2; i++)
        assert_int_equal(harness_stop(&srv[i]), 0);
}

static void test_shm_exchanges(void **state)
{
    (void)state;
    run_two_workers(false);
}

static void test_no_shm_server(void **state)
{
    (void)state;
    run_two_workers(true);
}

/* ---- a raw peer ---- */

typedef struct raw {
    void *ctx, *sock;
    uint64_t next_id;
} raw_t;

static void raw_open(raw_t *r, const char *endpoint)
{
    r->ctx = zmq_ctx_new();
    r->sock = zmq_socket(r->ctx, ZMQ_DEALER);
    int linger = 0, timeout = 10000;
    zmq_setsockopt(r->sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(r->sock, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    assert_int_equal(harness_secure_socket(r->sock), 0);
    assert_int_equal(zmq_connect(r->sock, endpoint), 0);
    r->next_id = 100;
}

static void raw_close(raw_t *r)
{
    zmq_close(r->sock);
    zmq_ctx_term(r->ctx);
}

/* Sends h (header only) and returns the reply's status; the reply in *m (closed by the caller). */
static int raw_ask(raw_t *r, zps_header_t *h, zps_message_t *m)
{
    h->request_id = ++r->next_id;
    assert_int_equal(zps_wire_send(r->sock, NULL, h, NULL, 0, NULL, NULL, 0), 0);
    for (;;) {
        assert_int_equal(zps_wire_recv(r->sock, 0, false, m), 0);
        if (m->hdr.request_id == h->request_id)
            return m->hdr.status;
        zps_message_close(m);
    }
}

/* Asks for worker `rank`'s session; maps the segment on success (*base, *layout). */
static int raw_session(raw_t *r, int rank, unsigned char **base, zps_shm_layout_t *layout)
{
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_SHM);
    h.worker = rank;
    zps_message_t m;
    int st = raw_ask(r, &h, &m);
    if (st == 0) {
        zps_json_t *j = NULL;
        assert_int_equal(zps_json_parse(m.hdr.json, &j, NULL, 0), 0);
        const char *name = zps_json_string(zps_json_get(j, "name"));
        assert_non_null(name);
        int fd = shm_open(name, O_RDWR, 0);
        assert_true(fd >= 0);
        struct stat st_;
        assert_int_equal(fstat(fd, &st_), 0);
        /* Only its user may map it. */
        assert_int_equal(st_.st_mode & 0777, 0600);
        *base = mmap(NULL, (size_t)st_.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        assert_true(*base != MAP_FAILED);
        memcpy(layout, *base, sizeof(*layout));
        assert_int_equal(layout->size, (uint64_t)st_.st_size);
        zps_json_free(j);
    }
    zps_message_close(&m);
    return st;
}

/* A push of g[n] at `clock` whose payload is (said to be) in the slot; returns the status. */
static int raw_push(raw_t *r, int rank, uint64_t clock, uint64_t n, uint32_t crc, uint32_t type)
{
    zps_header_t h;
    zps_header_init(&h, (enum zps_msg_type)type);
    h.worker = rank;
    h.clock = clock;
    h.total = N;
    h.offset = 0;
    h.length = n;
    h.batch = 1;
    h.checksum = crc;
    h.flags = ZPS_FLAG_SHM;
    zps_message_t m;
    int st = raw_ask(r, &h, &m);
    zps_message_close(&m);
    return st;
}

static void pull_all(harness_server_t *srv, float *out)
{
    zps_client_t *c = client(srv, 1, -1, false);
    assert_int_equal(zps_client_pull(c, 0, out, N, NULL), 0);
    zps_client_free(c);
}

static void test_raw_peer(void **state)
{
    (void)state;
    /* A segment named as a dead server's: the PID of a child that exited. */
    pid_t gone = fork();
    assert_true(gone >= 0);
    if (gone == 0)
        _exit(0);
    assert_int_equal(waitpid(gone, NULL, 0), gone);
    char stale[64];
    snprintf(stale, sizeof(stale), "/zps-%ld-7-0", (long)gone);
    int sfd = shm_open(stale, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(sfd >= 0);
    close(sfd);

    harness_server_t srv[1];
    start(srv, 1, "asp", "2", false);
    raw_t r, other;
    raw_open(&r, srv[0].endpoint);
    raw_open(&other, srv[0].endpoint);

    /* Before the model exists: not yet. */
    unsigned char *base = NULL;
    zps_shm_layout_t l;
    assert_int_equal(raw_session(&r, 0, &base, &l), ZPS_ENOTINIT);
    zps_client_t *c = client(srv, 1, 0, false);
    assert_int_equal(zps_client_init(c, w0, N), 0);
    zps_client_free(c);
    assert_int_equal(raw_session(&r, 0, &base, &l), 0);
    /* Creating its segment, the server removed the dead one's. */
    sfd = shm_open(stale, O_RDONLY, 0);
    if (sfd >= 0) {
        close(sfd);
        shm_unlink(stale);
        fail_msg("the stale segment %s is still there", stale);
    }
    assert_int_equal(l.len, N);
    assert_int_equal(l.workers, 2);
    /* No rank beyond the workers; not the rank another connection holds. */
    unsigned char *base2 = NULL;
    zps_shm_layout_t l2;
    assert_int_equal(raw_session(&other, 2, &base2, &l2), ZPS_EWORKER);
    assert_int_equal(raw_session(&other, 0, &base2, &l2), ZPS_EBUSY);

    float *slot = (float *)(base + l.slot_offset);
    float g[N];
    for (int i = 0; i < N; i++)
        g[i] = 0.25f * (float)(i + 1);
    memcpy(slot, g, sizeof(g));
    uint32_t crc = zps_crc32c(0, g, sizeof(g));

    /* Refused, each with its reason, and nothing changes. */
    assert_int_equal(raw_push(&r, 0, 0, N, crc ^ 1u, ZPS_MSG_PUSH), ZPS_ECHECKSUM);
    assert_int_equal(raw_push(&r, 0, 0, N - 1, crc, ZPS_MSG_PUSH), ZPS_ELENGTH);
    assert_int_equal(raw_push(&r, 1, 0, N, crc, ZPS_MSG_PUSH), ZPS_ESHM);
    assert_int_equal(raw_push(&other, 0, 0, N, crc, ZPS_MSG_PUSH), ZPS_ESHM);
    assert_int_equal(raw_push(&r, 0, 0, N, crc, ZPS_MSG_INIT), ZPS_EFRAMES);
    slot[3] = NAN;
    assert_int_equal(raw_push(&r, 0, 0, N, zps_crc32c(0, slot, sizeof(g)), ZPS_MSG_PUSH),
                     ZPS_ENONFINITE);
    float now[N];
    pull_all(srv, now);
    assert_memory_equal(now, w0, sizeof(now));

    /* The good one: ASP, lr 0.5, applied at once. */
    memcpy(slot, g, sizeof(g));
    assert_int_equal(raw_push(&r, 0, 0, N, crc, ZPS_MSG_PUSH), 0);
    pull_all(srv, now);
    for (int i = 0; i < N; i++)
        assert_true(now[i] == w0[i] - 0.5f * g[i]);

    /* A pull that asks for shared memory is answered from a buffer, which
     * holds the parameters with the CRC32C the reply gives. */
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_PULL);
    h.worker = 0;
    h.clock = 1;
    h.flags = ZPS_FLAG_SHM;
    zps_message_t m;
    assert_int_equal(raw_ask(&r, &h, &m), 0);
    assert_true(m.hdr.flags & ZPS_FLAG_SHM);
    assert_false(m.has_payload);
    assert_true(m.hdr.shm_buffer < l.nbufs);
    assert_int_equal(m.hdr.length, N);
    const float *buf = (const float *)(base + l.buf_offset + m.hdr.shm_buffer * l.stride);
    assert_int_equal(zps_crc32c(0, buf, N * sizeof(float)), m.hdr.checksum);
    assert_memory_equal(buf, now, sizeof(now));
    zps_message_close(&m);

    munmap(base, l.size);
    raw_close(&r);
    /* Its connection gone, the slot is free again for another. */
    bool granted = false;
    for (int i = 0; i < 100 && !granted; i++) {
        int st = raw_session(&other, 0, &base2, &l2);
        granted = st == 0;
        if (!granted) {
            assert_int_equal(st, ZPS_EBUSY);
            zps_sleep_ms(20);
        }
    }
    assert_true(granted);
    munmap(base2, l2.size);
    raw_close(&other);
    assert_int_equal(harness_stop(&srv[0]), 0);
}

int main(void)
{
    /* This test chooses which of its clients ask for shared memory and
     * which servers grant it; the suite-wide switches (ZPS_TEST_SHM: every
     * worker client asks; ZPS_NO_SHM: no server grants) would change the
     * counts it checks. */
    unsetenv("ZPS_TEST_SHM");
    unsetenv("ZPS_NO_SHM");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_exchanges),
        cmocka_unit_test(test_no_shm_server),
        cmocka_unit_test(test_raw_peer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
