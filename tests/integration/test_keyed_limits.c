/*
 * test_keyed_limits.c - the limits of docs/protocol.md ("Limits") on a keyed
 * server, where they must keep one authenticated peer from taking what
 * belongs to another:
 *
 * - one rank's unread replies count against that rank's share of the reply
 *   copies only: a worker-1 key whose client sends pulls and never reads
 *   their replies gets ZPS_EBUSY itself, and the honest worker 0's pulls,
 *   interleaved with them under ASP (every push a new version), all succeed;
 * - idle connections that never authenticate, from the address a keyed
 *   client connects from, do not lock it out: past
 *   --max-connections-per-host the oldest connection of that address that
 *   has not authenticated gives way, not the keyed client's.
 *
 * The test makes its own keys (a server pair, an admin key for worker 0 and
 * a key for worker 1 only) and runs keyed whatever ZPS_TEST_SECURE says.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "zps/zps.h"
#include "error.h"
#include "harness.h"
#include "keys.h"
#include "timeutil.h"
#include "wire.h"

#define N (1u << 18) /* floats: a 1 MiB shard */
#ifdef ZPS_SANITIZED
#define ROUNDS 60
#else
#define ROUNDS 200
#endif
#define HOSTILE_PULLS 2 /* worker 1's pulls after each of worker 0's */

static char dir[64], srv_key[128], srv_pub[128], admin_key[128], w1_key[128], authorized[128];

static void remove_files(void)
{
    const char *names[] = {"server.key", "server.pub", "admin.key",      "admin.pub",
                           "w1.key",     "w1.pub",     "authorized_keys"};
    char path[160];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* PREFIX.key and PREFIX.pub; the public key in Z85 into z85. */
static void make_pair(const char *name, char z85[ZPS_KEY_Z85_CHARS + 1])
{
    char prefix[128], why[256];
    zps_keypair_t kp;
    snprintf(prefix, sizeof(prefix), "%s/%s", dir, name);
    if (zps_keypair_generate(&kp, why, sizeof(why)) != 0 ||
        zps_keypair_write(prefix, &kp, false, why, sizeof(why)) != 0)
        fail_msg("keys %s: %s", name, why);
    if (z85)
        zps_key_encode(kp.public_key, z85);
    zps_keypair_clear(&kp);
}

static int make_keys(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/zps-keyed-limits-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    atexit(remove_files);
    char admin[ZPS_KEY_Z85_CHARS + 1], w1[ZPS_KEY_Z85_CHARS + 1];
    make_pair("server", NULL);
    make_pair("admin", admin);
    make_pair("w1", w1);
    snprintf(srv_key, sizeof(srv_key), "%s/server.key", dir);
    snprintf(srv_pub, sizeof(srv_pub), "%s/server.pub", dir);
    snprintf(admin_key, sizeof(admin_key), "%s/admin.key", dir);
    snprintf(w1_key, sizeof(w1_key), "%s/w1.key", dir);
    snprintf(authorized, sizeof(authorized), "%s/authorized_keys", dir);
    FILE *f = fopen(authorized, "w");
    if (!f || fprintf(f, "%s admin\n%s worker 1\n", admin, w1) < 0 || fclose(f) != 0)
        return -1;
    return 0;
}

/* The value of "key":N in json, or -1. */
static long long json_count(const char *json, const char *key)
{
    const char *p = json ? strstr(json, key) : NULL;
    return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

static long long stat_of(zps_client_t *c, const char *key)
{
    char *json = NULL;
    if (zps_client_stats(c, 0, &json) != 0)
        return -1;
    long long v = json_count(json, key);
    free(json);
    return v;
}

/* A client of worker `worker` with the admin key (in a sealed session unless no_seal). */
static zps_client_t *client_with(const harness_server_t *srv, int32_t worker, int timeout_ms,
                                 bool no_seal)
{
    const char *eps[1] = {srv->endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.worker = worker;
    o.timeout_ms = timeout_ms;
    o.no_seal = no_seal;
    char why[512];
    if (zps_client_opts_set_keys(&o, admin_key, srv_pub, why, sizeof(why)) != 0)
        fail_msg("client keys: %s", why);
    zps_client_t *c = NULL;
    int rc = zps_client_new(eps, 1, &o, &c);
    zps_client_opts_clear(&o);
    assert_int_equal(rc, 0);
    return c;
}

static zps_client_t *admin_client(const harness_server_t *srv, int32_t worker, int timeout_ms)
{
    return client_with(srv, worker, timeout_ms, false);
}

/* A raw DEALER with worker 1's key that takes as little as it can. */
static void *hostile_socket(void *ctx, const char *endpoint)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    assert_non_null(s);
    int linger = 0, rcvhwm = 1, rcvbuf = 64 * 1024;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm));
    zmq_setsockopt(s, ZMQ_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    zps_keypair_t kp;
    uint8_t srv[ZPS_KEY_BYTES];
    char why[256];
    if (zps_keypair_load(w1_key, &kp, why, sizeof(why)) != 0 ||
        zps_pubkey_load(srv_pub, srv, why, sizeof(why)) != 0)
        fail_msg("worker 1's keys: %s", why);
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, srv, ZPS_KEY_BYTES), 0);
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, kp.public_key, ZPS_KEY_BYTES), 0);
    assert_int_equal(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, kp.secret_key, ZPS_KEY_BYTES), 0);
    zps_keypair_clear(&kp);
    assert_int_equal(zmq_connect(s, endpoint), 0);
    return s;
}

/* A PULL as worker 1 (clock 0: under ASP answered at once); never waits. */
static void hostile_pull(void *s, uint64_t id)
{
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_PULL);
    h.worker = 1;
    h.request_id = id;
    h.total = N;
    int rc = zps_wire_send(s, NULL, &h, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
    assert_true(rc == 0 || rc == ZPS_EAGAIN);
}

static void start_keyed(harness_server_t *srv, const char *const *extra)
{
    const char *args[32] = {
        "--key", srv_key, "--authorized-keys", authorized, "--workers", "2", "--mode", "asp",
        "--lr",  "0.001", "--log-level",       "error"};
    int n = 12;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    assert_int_equal(harness_start(srv, args), 0);
}

/* Worker 0 over CURVE alone (no_seal: its replies carry the shared copies
 * too) or in a sealed session (each reply sealed from the copy at once). */
static void unread_replies_cost_their_rank(bool no_seal)
{
    harness_server_t srv;
    start_keyed(&srv, NULL);
    zps_client_t *w0 = client_with(&srv, 0, 10000, no_seal);
    float *w = calloc(N, sizeof(float)), *g = malloc(N * sizeof(float)),
          *got = malloc(N * sizeof(float));
    assert_true(w && g && got);
    for (uint32_t i = 0; i < N; i++)
        g[i] = 1.0f;
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_init(w0, w, N), 0);

    void *ctx = zmq_ctx_new();
    void *bad = hostile_socket(ctx, srv.endpoint);
    /* Worker 0 pushes (a new version) and pulls it, which makes its copy;
     * worker 1 then pulls that version and never reads: every copy it
     * leaves queued is one worker 0 never gets to share again. */
    int push_errors = 0, pull_errors = 0, busy = 0;
    uint64_t id = 1, start = zps_now_ns();
    for (int t = 0; t < ROUNDS; t++) {
        push_errors += zps_client_push(w0, (uint64_t)t, g, N, 1, &info) != 0;
        int rc = zps_client_pull(w0, (uint64_t)t + 1, got, N, &info);
        if (rc != 0) {
            pull_errors++;
            busy += zps_client_last_remote_status(w0) == ZPS_EBUSY;
        }
        for (int k = 0; k < HOSTILE_PULLS; k++)
            hostile_pull(bad, id++);
    }
    double secs = (double)(zps_now_ns() - start) / 1e9;
    char *json = NULL;
    int stats_rc = zps_client_stats(w0, 0, &json);
    long long refused = json_count(json, "\"ZPS_EBUSY\":");
    long long replies = json_count(json, "\"resident_copies\":{\"replies\":");
    free(json);
    long rss = harness_rss_kb(srv.pid);
    printf("worker 0 %s: %d rounds in %.1f s: worker 0's pulls %d failed (%d ZPS_EBUSY), pushes %d "
           "failed; "
           "worker 1 sent %llu pulls it never read, server refused %lld with ZPS_EBUSY; "
           "reply copies at most %lld; server RSS %ld kB\n",
           no_seal ? "over CURVE" : "sealed", ROUNDS, secs, pull_errors, busy, push_errors,
           (unsigned long long)(id - 1), refused, replies, rss);
    zmq_close(bad);
    zmq_ctx_term(ctx);
    zps_client_free(w0);
    assert_int_equal(harness_stop(&srv), 0);
    free(w);
    free(g);
    free(got);
    assert_int_equal(push_errors, 0);
    assert_int_equal(pull_errors, 0);
    assert_int_equal(stats_rc, 0);
    /* Worker 1's own pulls were refused once its share was queued, and
     * what its replies hold is its share and the cached copy. */
    assert_true(refused > 0);
    assert_true(replies <= 3 + (no_seal ? 2 : 0));
}

static void test_unread_replies_cost_their_rank(void **state)
{
    (void)state;
    unread_replies_cost_their_rank(false);
}

static void test_unread_replies_cost_their_rank_curve(void **state)
{
    (void)state;
    unread_replies_cost_their_rank(true);
}

/* Binds a TCP socket to `from` and connects it to 127.0.0.1:port; -1 on failure. */
static int idle_connection(const char *from, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    inet_pton(AF_INET, from, &a.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    to.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

#define FLOOD 300
#define PER_HOST 64
#define PROBES 10

static void test_anonymous_flood_same_address(void **state)
{
    (void)state;
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < FLOOD + 128 && rl.rlim_max >= FLOOD + 128) {
        rl.rlim_cur = FLOOD + 128;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    harness_server_t srv;
    const char *extra[] = {"--max-connections", "400", "--max-connections-per-host", "64", NULL};
    start_keyed(&srv, extra);
    zps_client_t *c = admin_client(&srv, -1, 10000);
    float *w = calloc(N, sizeof(float)), *got = malloc(N * sizeof(float));
    assert_true(w && got);
    assert_int_equal(zps_client_init(c, w, N), 0);
    /* Before the flood: the admin client's connection has authenticated. */

    int port = atoi(strrchr(srv.endpoint, ':') + 1);
    int fds[FLOOD], made = 0;
    for (int i = 0; i < FLOOD; i++)
        if ((fds[i] = idle_connection("127.0.0.1", port)) >= 0)
            made++;
    /* Until the server has judged them all (a busy machine is slower), bounded. */
    long long refused = stat_of(c, "\"refused\":");
    for (uint64_t t0 = zps_now_ns();
         refused < made - PER_HOST && zps_now_ns() - t0 < 30000000000ull; zps_sleep_ms(20))
        refused = stat_of(c, "\"refused\":");
    long long open = stat_of(c, "\"open\":");

    /* New keyed clients from the same address are served: each is a new
     * connection past the address's budget. */
    int served = 0;
    uint64_t start = zps_now_ns();
    for (int k = 0; k < PROBES; k++) {
        zps_client_t *p = admin_client(&srv, -1, 5000);
        zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
        served += zps_client_pull(p, 0, got, N, &info) == 0;
        zps_client_free(p);
        if (getenv("ZPS_TEST_VERBOSE"))
            printf("probe %d: refused %lld open %lld unauthenticated %lld authenticated %lld\n", k,
                   stat_of(c, "\"refused\":"), stat_of(c, "\"open\":"),
                   stat_of(c, "\"unauthenticated\":"), stat_of(c, "\"authenticated\":"));
    }
    double secs = (double)(zps_now_ns() - start) / 1e9;
    long long refused_after = stat_of(c, "\"refused\":");
    long long open_after = stat_of(c, "\"open\":");
    printf("%d idle connections from 127.0.0.1 (--max-connections-per-host %d): %lld refused, "
           "%lld open; then %d of %d new keyed clients from 127.0.0.1 served in %.1f s "
           "(%lld refused, %lld open after)\n",
           made, PER_HOST, refused, open, served, PROBES, secs, refused_after, open_after);
    for (int i = 0; i < FLOOD; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    zps_client_free(c);
    assert_int_equal(harness_stop(&srv), 0);
    free(w);
    free(got);
    assert_int_equal(made, FLOOD);
    assert_int_equal(served, PROBES);
    /* The flood holds at most its address's budget (and the clients'
     * connections, authenticated, on top). */
    assert_true(refused >= made - PER_HOST);
    assert_true(open <= PER_HOST + 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unread_replies_cost_their_rank),
        cmocka_unit_test(test_unread_replies_cost_their_rank_curve),
        cmocka_unit_test(test_anonymous_flood_same_address),
    };
    return cmocka_run_group_tests(tests, make_keys, NULL);
}
