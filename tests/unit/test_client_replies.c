/*
 * test_client_replies.c - what a client does with replies no zps server
 * sends, from a peer on 127.0.0.1 that is not one: a raw ZeroMQ ROUTER in a
 * child process (so that its own buffers are not counted in this process's
 * memory).
 *
 *   - A frame larger than the client's bound (16 MiB, ZMQ_MAXMSGSIZE): the
 *     connection is dropped before the frame is allocated. A fake server
 *     answering every pull with a 64 MiB frame gets a call that fails at its
 *     deadline, and this process's peak RSS grows by far less than the frame.
 *   - A well-formed reply of another type (a STATS answer to a PULL): the
 *     call fails at once with ZPS_ETYPE, naming both types, and the caller's
 *     buffer is untouched.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

#include "zps/zps.h"
#include "error.h"
#include "timeutil.h"
#include "wire.h"

enum { BIG_BYTES = 64 << 20, PARAMS = 16 };

typedef enum { FAKE_BIG, FAKE_STATS } fake_kind_t;

static long peak_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/*
 * The child: binds a ROUTER on 127.0.0.1, writes its port to `fd`, then
 * answers every request it reads (at most 200, for at most 20 s) as `kind`
 * says, and exits.
 */
static void fake_server(int fd, fake_kind_t kind)
{
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    int linger = 0, timeout = 200;
    zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    if (zmq_bind(router, "tcp://127.0.0.1:*") != 0)
        _exit(2);
    char endpoint[64];
    size_t len = sizeof(endpoint);
    zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &len);
    if (write(fd, endpoint, strlen(endpoint) + 1) < 0)
        _exit(2);
    close(fd);
    char *big = kind == FAKE_BIG ? calloc(1, BIG_BYTES) : NULL;
    uint64_t end = zps_now_ns() + 20000000000ull;
    for (int served = 0; served < 200 && zps_now_ns() < end;) {
        zps_message_t m;
        int rc = zps_wire_recv(router, 0, true, &m);
        if (rc == ZPS_EAGAIN)
            continue;
        if (rc != 0)
            continue;
        served++;
        if (kind == FAKE_BIG) {
            zmq_send(router, m.peer.id, m.peer.len, ZMQ_SNDMORE);
            zmq_send(router, big, BIG_BYTES, 0);
        } else {
            zps_header_t h;
            zps_header_init(&h, ZPS_MSG_STATS);
            h.reply = true;
            h.request_id = m.hdr.request_id;
            h.json = "{\"config\":{\"workers\":1}}";
            zps_wire_send(router, &m.peer, &h, NULL, 0, NULL, NULL, 0);
        }
        zps_message_close(&m);
    }
    free(big);
    zmq_close(router);
    zmq_ctx_term(ctx);
    _exit(0);
}

/* Starts the fake server; *pid its process, endpoint[64] its address. */
static void start_fake(fake_kind_t kind, pid_t *pid, char *endpoint)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    *pid = fork();
    assert_true(*pid >= 0);
    if (*pid == 0) {
        close(p[0]);
        fake_server(p[1], kind);
    }
    close(p[1]);
    ssize_t n = read(p[0], endpoint, 64);
    close(p[0]);
    assert_true(n > 0);
}

static void stop_fake(pid_t pid)
{
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

static zps_client_t *client_of(const char *endpoint, int timeout_ms)
{
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.timeout_ms = timeout_ms;
    o.retry_ms = 300;
    o.heartbeat_ms = 0;
    o.wait_log_ms = 0;
    o.shm = false;
    o.no_seal = true;
    const char *eps[1] = {endpoint};
    zps_client_t *c = NULL;
    assert_int_equal(zps_client_new(eps, 1, &o, &c), 0);
    return c;
}

static void test_oversized_frame(void **state)
{
    (void)state;
    pid_t pid;
    char endpoint[64];
    start_fake(FAKE_BIG, &pid, endpoint);
    zps_client_t *c = client_of(endpoint, 3000);
    float out[PARAMS];
    long before = peak_rss_kib();
    uint64_t t0 = zps_now_ns();
    int rc = zps_client_pull(c, 0, out, PARAMS, NULL);
    double s = (double)(zps_now_ns() - t0) / 1e9;
    long grew = peak_rss_kib() - before;
    print_message("a 64 MiB frame for each pull: %s after %.1f s (%s); peak RSS grew %ld KiB\n",
                  zps_errname(rc), s, zps_client_last_error(c), grew);
    /* No reply is ever taken: the call ends at its deadline, not with data. */
    assert_true(rc == ZPS_ETIMEDOUT || rc == ZPS_EUNREACHABLE);
    assert_true(s >= 2.5);
    /* One such frame received would have added 64 MiB. */
    assert_true(grew < 16 * 1024);
    zps_client_free(c);
    stop_fake(pid);
}

static void test_reply_of_another_type(void **state)
{
    (void)state;
    pid_t pid;
    char endpoint[64];
    start_fake(FAKE_STATS, &pid, endpoint);
    zps_client_t *c = client_of(endpoint, 10000);
    float out[PARAMS];
    for (int i = 0; i < PARAMS; i++)
        out[i] = 7.0f;
    uint64_t t0 = zps_now_ns();
    int rc = zps_client_pull(c, 0, out, PARAMS, NULL);
    double s = (double)(zps_now_ns() - t0) / 1e9;
    print_message("a STATS reply to a pull: %s after %.2f s: %s\n", zps_errname(rc), s,
                  zps_client_last_error(c));
    assert_int_equal(rc, ZPS_ETYPE);
    assert_non_null(strstr(zps_client_last_error(c), "a reply of type"));
    assert_non_null(strstr(zps_client_last_error(c), "not a zps server's answer"));
    /* Well before the 10 s deadline: a wrong answer is final. */
    assert_true(s < 8.0);
    for (int i = 0; i < PARAMS; i++)
        assert_true(out[i] == 7.0f);
    zps_client_free(c);
    stop_fake(pid);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oversized_frame),
        cmocka_unit_test(test_reply_of_another_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
