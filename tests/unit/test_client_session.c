/*
 * test_client_session.c - the client's session seam (client/internal.h):
 * a session written here, in front of a connection whose socket reaches no
 * server, carries the calls of a real client. It answers every request
 * itself, over an inproc PAIR pair it polls through the seam.
 *
 *   - a pull it carries returns the values it made up, the request it saw
 *     is the engine's (type, shard, range);
 *   - ZPS_EAGAIN from its send is tried again soon, not at retry_ms (60 s);
 *   - a push it took and then lost (counted in `lost`) is sent again at
 *     once, though pushes are otherwise only resent after a connection drop;
 *   - replies it holds until a time it names (wake) come in before the
 *     call's deadline, so the engine slept until that time, not longer;
 *   - a request it passes on goes to the socket, which reaches nothing:
 *     ZPS_EUNREACHABLE;
 *   - its end is called once, when the client is freed.
 *
 * And, through the same session, the structs a caller hands in, which
 * carry their size (zps/zps.h, "Versions"): a reply info too small for this
 * version is ZPS_EINVAL with nothing sent; a newer caller's (a larger
 * size) is written up to this version's fields and not a byte further;
 * a newer caller's options are taken, their unknown tail ignored; too
 * small options or lease requests are ZPS_EINVAL.
 *
 * And the log callback: a call's wait record reaches zps_set_log_fn's
 * function with its level and without time or newline, and
 * zps_set_log_level drops what is below it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"
#include "timeutil.h"

enum { PARAMS = 16, VERSION = 7 };

typedef struct fake {
    session_t session;
    void *in, *out; /* an inproc PAIR pair: replies go into `in`, come out of `out` */
    bool pass;      /* pass every request on to the next session */
    int eagain;     /* sends refused with ZPS_EAGAIN before any is taken */
    int swallow;    /* requests taken and then lost at the next wake */
    bool lose_at_wake;
    uint64_t hold_until; /* replies are given at this time (by wake), not at once; 0: at once */
    zps_header_t held;
    bool have_held;
    int sends, taken, wakes, ends;
    zps_header_t last; /* the last request taken */
    bool grad_ok;      /* every push taken carried grad[i] = i / 2 */
} fake_t;

/* A reply as a server would make it: a pull's values are 100 + their index. */
static void answer(fake_t *f, const zps_header_t *req)
{
    zps_header_t r;
    zps_header_init(&r, req->type);
    r.reply = true;
    r.request_id = req->request_id;
    r.shard_index = req->shard_index;
    r.shard_count = req->shard_count;
    r.model_version = VERSION;
    float v[PARAMS];
    size_t n = 0;
    if (req->type == ZPS_MSG_PULL) {
        r.total = PARAMS;
        r.offset = 0;
        r.length = PARAMS;
        for (n = 0; n < PARAMS; n++)
            v[n] = 100.0f + (float)n;
    }
    assert_int_equal(zps_wire_send(f->in, NULL, &r, n ? v : NULL, n, NULL, NULL, 0), 0);
}

static int fake_send(session_t *s, zps_client_t *c, conn_t *k, zps_header_t *h)
{
    fake_t *f = (fake_t *)s;
    (void)c;
    f->sends++;
    if (f->pass)
        return SESSION_PASS;
    if (f->eagain > 0) {
        f->eagain--;
        return ZPS_EAGAIN;
    }
    f->taken++;
    f->last = *h;
    if (h->type == ZPS_MSG_PUSH) {
        const float *g = k->payload;
        for (size_t i = 0; i < k->count; i++)
            f->grad_ok &= g[i] == (float)i / 2;
        f->grad_ok &= k->count == PARAMS;
    }
    if (f->swallow > 0) {
        f->swallow--;
        f->lose_at_wake = true;
    } else if (f->hold_until) {
        f->held = *h;
        f->have_held = true;
    } else {
        answer(f, h);
    }
    return 0;
}

static int fake_recv(session_t *s, zps_client_t *c, conn_t *k, zps_message_t *m)
{
    (void)c;
    (void)k;
    return zps_wire_recv_deferred(((fake_t *)s)->out, ZMQ_DONTWAIT, false, m);
}

static size_t fake_poll(session_t *s, conn_t *k, zmq_pollitem_t *items)
{
    (void)k;
    memset(items, 0, sizeof(*items));
    items[0].socket = ((fake_t *)s)->out;
    items[0].events = ZMQ_POLLIN;
    return 1;
}

static uint64_t fake_wake(session_t *s, zps_client_t *c, conn_t *k, uint64_t now)
{
    fake_t *f = (fake_t *)s;
    (void)c;
    (void)k;
    f->wakes++;
    if (f->lose_at_wake) {
        f->lose_at_wake = false;
        f->session.lost++;
    }
    if (!f->have_held)
        return UINT64_MAX;
    if (now < f->hold_until)
        return f->hold_until;
    f->have_held = false;
    answer(f, &f->held);
    return UINT64_MAX;
}

static void fake_end(session_t *s, conn_t *k)
{
    fake_t *f = (fake_t *)s;
    (void)k;
    f->ends++;
    zmq_close(f->in);
    zmq_close(f->out);
}

static const session_ops_t fake_ops = {
    .name = "fake",
    .send = fake_send,
    .recv = fake_recv,
    .claim = NULL,
    .poll = fake_poll,
    .wake = fake_wake,
    .end = fake_end,
};

/* A port of 127.0.0.1 that nothing listens on: one the kernel gave and took back. */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A client of one server at a port of 127.0.0.1 where nothing listens, the fake in front. */
static zps_client_t *client_with_log(fake_t *f, int timeout_ms, int wait_log_ms)
{
    char endpoint[128];
    snprintf(endpoint, sizeof(endpoint), "tcp://127.0.0.1:%d", dead_port());
    const char *eps[] = {endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    o.timeout_ms = timeout_ms;
    o.retry_ms = 60000; /* no resend by the timer within a test */
    o.wait_log_ms = wait_log_ms;
    o.keep_malloc = true;
    zps_client_t *c = NULL;
    assert_int_equal(zps_client_new(eps, 1, &o, &c), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "inproc://fake-session-%p", (void *)f);
    f->session.ops = &fake_ops;
    f->grad_ok = true;
    f->in = zmq_socket(c->ctx, ZMQ_PAIR);
    f->out = zmq_socket(c->ctx, ZMQ_PAIR);
    assert_non_null(f->in);
    assert_non_null(f->out);
    assert_int_equal(zmq_bind(f->out, addr), 0);
    assert_int_equal(zmq_connect(f->in, addr), 0);
    assert_int_equal(conn_add_session(&c->conns[0], &f->session), 0);
    assert_ptr_equal(c->conns[0].sessions[0], &f->session);
    return c;
}

static zps_client_t *client_with(fake_t *f, int timeout_ms)
{
    return client_with_log(f, timeout_ms, 0);
}

static void free_client(zps_client_t *c, fake_t *f)
{
    zps_client_free(c);
    assert_int_equal(f->ends, 1);
}

static void test_carries_a_pull(void **state)
{
    (void)state;
    fake_t f = {0};
    zps_client_t *c = client_with(&f, 3000);
    float out[PARAMS];
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_pull(c, 3, out, PARAMS, &info), 0);
    for (size_t i = 0; i < PARAMS; i++)
        assert_true(out[i] == 100.0f + (float)i);
    assert_int_equal(info.min_version, VERSION);
    assert_int_equal(f.taken, 1);
    assert_int_equal(f.last.type, ZPS_MSG_PULL);
    assert_int_equal(f.last.clock, 3);
    assert_int_equal(f.last.shard_index, 0);
    assert_int_equal(f.last.shard_count, 1);
    assert_int_equal(f.last.total, PARAMS);
    assert_int_equal(f.last.length, PARAMS);
    free_client(c, &f);
}

static void test_eagain_is_tried_again_soon(void **state)
{
    (void)state;
    fake_t f = {.eagain = 3};
    zps_client_t *c = client_with(&f, 3000);
    float out[PARAMS];
    assert_int_equal(zps_client_pull(c, 0, out, PARAMS, NULL), 0);
    assert_int_equal(f.sends, 4);
    assert_int_equal(f.taken, 1);
    free_client(c, &f);
}

static void test_a_lost_push_goes_again_at_once(void **state)
{
    (void)state;
    fake_t f = {.swallow = 1};
    zps_client_t *c = client_with(&f, 3000);
    float grad[PARAMS];
    for (size_t i = 0; i < PARAMS; i++)
        grad[i] = (float)i / 2;
    zps_reply_info_t info = ZPS_REPLY_INFO_INIT;
    assert_int_equal(zps_client_push(c, 5, grad, PARAMS, 32, &info), 0);
    assert_true(zps_client_push_taken(c, 0));
    assert_int_equal(f.taken, 2); /* the first lost, the second answered */
    assert_int_equal(f.last.type, ZPS_MSG_PUSH);
    assert_int_equal(f.last.clock, 5);
    assert_int_equal(f.last.batch, 32);
    assert_true(f.grad_ok);
    free_client(c, &f);
}

static void test_its_wake_time_is_kept(void **state)
{
    (void)state;
    fake_t f = {0};
    zps_client_t *c = client_with(&f, 3000);
    uint64_t t0 = zps_now_ns();
    f.hold_until = t0 + 200 * 1000000ull;
    float out[PARAMS];
    assert_int_equal(zps_client_pull(c, 0, out, PARAMS, NULL), 0);
    uint64_t took = zps_now_ns() - t0;
    assert_true(took >= 200 * 1000000ull);
    assert_true(out[PARAMS - 1] == 100.0f + PARAMS - 1);
    assert_true(f.wakes >= 1);
    free_client(c, &f);
}

static void test_what_it_passes_on_goes_to_the_socket(void **state)
{
    (void)state;
    fake_t f = {.pass = true};
    zps_client_t *c = client_with(&f, 300);
    float out[PARAMS];
    assert_int_equal(zps_client_pull(c, 0, out, PARAMS, NULL), ZPS_EUNREACHABLE);
    assert_true(f.sends >= 1);
    assert_int_equal(f.taken, 0);
    free_client(c, &f);
}

static void test_reply_info_sizes(void **state)
{
    (void)state;
    fake_t f = {0};
    zps_client_t *c = client_with(&f, 3000);
    float out[PARAMS];
    zps_reply_info_t bad = {.size = 0};
    assert_int_equal(zps_client_pull(c, 0, out, PARAMS, &bad), ZPS_EINVAL);
    bad.size = offsetof(zps_reply_info_t, leases);
    assert_int_equal(zps_client_pull(c, 0, out, PARAMS, &bad), ZPS_EINVAL);
    assert_int_equal(zps_client_exchange(c, 0, out, PARAMS, 1, out, &bad), ZPS_EINVAL);
    assert_int_equal(f.sends, 0);

    /* A newer caller's struct: this version's fields, then some it does not know. */
    unsigned char buf[sizeof(zps_reply_info_t) + 32];
    memset(buf, 0xab, sizeof(buf));
    zps_reply_info_t *newer = (zps_reply_info_t *)buf;
    newer->size = sizeof(buf);
    assert_int_equal(zps_client_pull(c, 0, out, PARAMS, newer), 0);
    assert_int_equal(newer->size, sizeof(buf));
    assert_int_equal(newer->max_version, VERSION);
    assert_false(newer->leased);
    for (size_t i = sizeof(zps_reply_info_t); i < sizeof(buf); i++)
        assert_int_equal(buf[i], 0xab);
    free_client(c, &f);
}

static void test_options_and_lease_sizes(void **state)
{
    (void)state;
    char endpoint[64];
    snprintf(endpoint, sizeof(endpoint), "tcp://127.0.0.1:%d", dead_port());
    const char *eps[] = {endpoint};
    zps_client_opts_t o;
    zps_client_opts_default(&o);
    assert_int_equal(o.size, sizeof(o));
    zps_client_t *c = NULL;
    o.size = offsetof(zps_client_opts_t, curve_server_key) + 31; /* short of version 1 */
    assert_int_equal(zps_client_new(eps, 1, &o, &c), ZPS_EINVAL);
    assert_null(c);

    /* A newer caller's options: this version's, then fields it does not know. */
    unsigned char buf[sizeof(zps_client_opts_t) + 64];
    memset(buf, 0x5a, sizeof(buf));
    zps_client_opts_default(&o);
    o.timeout_ms = 1234;
    o.keep_malloc = true;
    memcpy(buf, &o, sizeof(o));
    ((zps_client_opts_t *)buf)->size = sizeof(buf);
    assert_int_equal(zps_client_new(eps, 1, (const zps_client_opts_t *)buf, &c), 0);
    assert_int_equal(c->opts.timeout_ms, 1234);
    assert_int_equal(c->opts.size, sizeof(zps_client_opts_t));

    zps_lease_req_t lr = {.size = 0, .want = 1};
    assert_int_equal(zps_client_set_lease(c, &lr), ZPS_EINVAL);
    lr.size = sizeof(lr);
    assert_int_equal(zps_client_set_lease(c, &lr), 0);
    assert_int_equal(c->lease.want, 1);
    zps_client_free(c);
}

typedef struct records {
    int count;
    enum zps_log_level level; /* the wait record's */
    char wait[256];           /* the first "waiting for server" record that says for what */
} records_t;

static void take_record(enum zps_log_level level, const char *message, void *ctx)
{
    records_t *r = ctx;
    r->count++;
    if (!r->wait[0] && strstr(message, "no answer to")) {
        r->level = level;
        snprintf(r->wait, sizeof(r->wait), "%s", message);
    }
}

/* A pull the fake answers after 300 ms, with wait records after 100 ms. */
static void held_pull(records_t *r)
{
    fake_t f = {0};
    zps_client_t *c = client_with_log(&f, 3000, 100);
    zps_set_log_fn(take_record, r);
    f.hold_until = zps_now_ns() + 300 * 1000000ull;
    float out[PARAMS];
    assert_int_equal(zps_client_pull(c, 4, out, PARAMS, NULL), 0);
    zps_set_log_fn(NULL, NULL);
    free_client(c, &f);
}

static void test_log_records(void **state)
{
    (void)state;
    records_t r = {0};
    held_pull(&r);
    /* Nothing is connected (the fake is no connection): a warning, saying why. */
    assert_int_equal(r.level, ZPS_LOG_WARN);
    assert_non_null(strstr(r.wait, "waiting for server 0 at tcp://127.0.0.1:"));
    assert_non_null(strstr(r.wait, "no answer to pull (clock 4)"));
    assert_non_null(strstr(r.wait, "not connected"));
    assert_null(strchr(r.wait, '\n'));

    records_t quiet = {0};
    zps_set_log_level(ZPS_LOG_ERROR);
    held_pull(&quiet);
    zps_set_log_level(ZPS_LOG_INFO);
    assert_int_equal(quiet.count, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_carries_a_pull),
        cmocka_unit_test(test_eagain_is_tried_again_soon),
        cmocka_unit_test(test_a_lost_push_goes_again_at_once),
        cmocka_unit_test(test_its_wake_time_is_kept),
        cmocka_unit_test(test_what_it_passes_on_goes_to_the_socket),
        cmocka_unit_test(test_reply_info_sizes),
        cmocka_unit_test(test_options_and_lease_sizes),
        cmocka_unit_test(test_log_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
