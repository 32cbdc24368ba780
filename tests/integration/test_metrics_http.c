/*
 * test_metrics_http.c - the /metrics endpoint (common/metrics_http.h) over
 * real sockets on 127.0.0.1: what it answers, what it refuses, and that
 * slow or many clients neither stall it nor the thread that publishes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "error.h"
#include "metrics_http.h"
#include "timeutil.h"

static int connect_to(const zps_metrics_http_t *h)
{
    const char *addr = zps_metrics_http_address(h);
    int port = atoi(strrchr(addr, ':') + 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    return fd;
}

/* Reads until the peer closes or `ms` pass; returns bytes read (NUL-terminated). */
static size_t read_all(int fd, char *buf, size_t size, int ms)
{
    size_t n = 0;
    uint64_t end = zps_now_ns() + (uint64_t)ms * 1000000ull;
    while (n + 1 < size) {
        uint64_t now = zps_now_ns();
        if (now >= end)
            break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)((end - now) / 1000000ull) + 1) <= 0)
            break;
        ssize_t k = recv(fd, buf + n, size - 1 - n, 0);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    buf[n] = '\0';
    return n;
}

/* Waits until `deadline` for the peer to close; true if it closed without
 * sending a byte. */
static bool closed_quietly(int fd, uint64_t deadline)
{
    for (;;) {
        uint64_t now = zps_now_ns();
        if (now >= deadline)
            return false;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)((deadline - now) / 1000000ull) + 1) <= 0)
            continue;
        char byte;
        ssize_t k = recv(fd, &byte, 1, 0);
        return k == 0 || (k < 0 && errno == ECONNRESET);
    }
}

static void ask(zps_metrics_http_t *h, const char *request, char *reply, size_t size)
{
    int fd = connect_to(h);
    assert_int_equal(send(fd, request, strlen(request), MSG_NOSIGNAL), (ssize_t)strlen(request));
    read_all(fd, reply, size, 3000);
    close(fd);
}

static zps_metrics_http_t *start(void)
{
    zps_metrics_http_t *h = NULL;
    char why[256];
    assert_int_equal(zps_metrics_http_start("127.0.0.1:0", &h, why, sizeof(why)), 0);
    return h;
}

static void test_get_metrics(void **state)
{
    (void)state;
    zps_metrics_http_t *h = start();
    char reply[4096];
    /* Nothing published yet: an empty page. */
    ask(h, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", reply, sizeof(reply));
    assert_non_null(strstr(reply, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(reply, "Content-Length: 0\r\n"));
    const char *text = "# TYPE zps_model_version gauge\nzps_model_version{shard=\"0\"} 42\n";
    zps_metrics_http_publish(h, text, strlen(text));
    ask(h, "GET /metrics?x=1 HTTP/1.0\r\n\r\n", reply, sizeof(reply));
    assert_non_null(strstr(reply, "Content-Type: text/plain; version=0.0.4"));
    char *body = strstr(reply, "\r\n\r\n");
    assert_non_null(body);
    assert_string_equal(body + 4, text);
    /* The latest text is served. */
    const char *next = "zps_model_version{shard=\"0\"} 43\n";
    zps_metrics_http_publish(h, next, strlen(next));
    ask(h, "GET /metrics HTTP/1.1\r\n\r\n", reply, sizeof(reply));
    assert_string_equal(strstr(reply, "\r\n\r\n") + 4, next);
    zps_metrics_http_stats_t st = zps_metrics_http_stats(h);
    assert_int_equal(st.served, 3);
    assert_int_equal(st.refused, 0);
    zps_metrics_http_stop(h);
}

static void test_refusals(void **state)
{
    (void)state;
    zps_metrics_http_t *h = start();
    char reply[4096];
    ask(h, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", reply, sizeof(reply));
    assert_non_null(strstr(reply, "HTTP/1.1 405 "));
    assert_non_null(strstr(reply, "Allow: GET\r\n"));
    ask(h, "GET /metricsx HTTP/1.1\r\n\r\n", reply, sizeof(reply));
    assert_non_null(strstr(reply, "HTTP/1.1 404 "));
    ask(h, "GET / HTTP/1.1\r\n\r\n", reply, sizeof(reply));
    assert_non_null(strstr(reply, "HTTP/1.1 404 "));
    ask(h, "GET /metrics\r\n\r\n", reply, sizeof(reply));
    assert_non_null(strstr(reply, "HTTP/1.1 400 "));
    ask(h, "GET /metrics SPDY/3\r\n\r\n", reply, sizeof(reply));
    assert_non_null(strstr(reply, "HTTP/1.1 400 "));
    /* Headers beyond 8 KiB. */
    char big[12000];
    int n = snprintf(big, sizeof(big), "GET /metrics HTTP/1.1\r\nX-Pad: ");
    memset(big + n, 'a', sizeof(big) - (size_t)n - 5);
    memcpy(big + sizeof(big) - 5, "\r\n\r\n", 5);
    ask(h, big, reply, sizeof(reply));
    assert_non_null(strstr(reply, "HTTP/1.1 431 "));
    zps_metrics_http_stats_t st = zps_metrics_http_stats(h);
    assert_int_equal(st.served, 0);
    assert_int_equal(st.refused, 6);
    zps_metrics_http_stop(h);
}

#define MANY 100

static void test_slow_and_many(void **state)
{
    (void)state;
    zps_metrics_http_t *h = start();
    const char *text = "zps_up 1\n";
    zps_metrics_http_publish(h, text, strlen(text));
    /* MANY connections that send half a request and wait: at most 64 are
     * kept, and each of those is closed 5 s later. */
    int fds[MANY];
    for (int i = 0; i < MANY; i++) {
        fds[i] = connect_to(h);
        send(fds[i], "GET /met", 8, MSG_NOSIGNAL);
    }
    /* Meanwhile the publisher is never held up, and the endpoint frees
     * slots as the slow ones time out. */
    uint64_t t0 = zps_now_ns();
    for (int i = 0; i < 1000; i++)
        zps_metrics_http_publish(h, text, strlen(text));
    double publish_ms = (double)(zps_now_ns() - t0) / 1e6;
    /* Every one is closed by the endpoint, without a byte of answer: those
     * over the limit at once, the others when their 5 s are up. The deadline
     * is shared and generous, so a loaded machine's late timers still count;
     * the client closes none of them first (a close of its own would be
     * counted as a drop too, and could race the scrape below for a slot). */
    int closed = 0;
    uint64_t deadline = zps_now_ns() + 15000ull * 1000000ull;
    for (int i = 0; i < MANY; i++)
        closed += closed_quietly(fds[i], deadline);
    for (int i = 0; i < MANY; i++)
        close(fds[i]);
    /* After the slow ones, a normal scrape is answered. */
    char reply[1024];
    ask(h, "GET /metrics HTTP/1.1\r\n\r\n", reply, sizeof(reply));
    zps_metrics_http_stats_t st = zps_metrics_http_stats(h);
    printf("%d slow connections all closed without an answer (%d); 1000 publishes took %.1f ms; "
           "dropped %llu\n",
           MANY, closed, publish_ms, (unsigned long long)st.dropped);
    assert_int_equal(closed, MANY);
    assert_true(publish_ms < 500.0);
    assert_int_equal(st.dropped, MANY);
    assert_non_null(strstr(reply, "HTTP/1.1 200 OK"));
    assert_string_equal(strstr(reply, "\r\n\r\n") + 4, text);
    zps_metrics_http_stop(h);
}

static void test_bad_addresses(void **state)
{
    (void)state;
    zps_metrics_http_t *h = NULL;
    char why[256];
    assert_int_equal(zps_metrics_http_start("127.0.0.1", &h, why, sizeof(why)), ZPS_EINVAL);
    assert_int_equal(zps_metrics_http_start("example.org:9100", &h, why, sizeof(why)), ZPS_EINVAL);
    assert_int_equal(zps_metrics_http_start("127.0.0.1:70000", &h, why, sizeof(why)), ZPS_EINVAL);
    zps_metrics_http_t *a = start();
    char taken[96];
    snprintf(taken, sizeof(taken), "%s", zps_metrics_http_address(a));
    assert_int_equal(zps_metrics_http_start(taken, &h, why, sizeof(why)), ZPS_ESOCKET);
    assert_non_null(strstr(why, "cannot listen"));
    zps_metrics_http_stop(a);
    assert_int_equal(zps_metrics_http_start("[::1]:0", &h, why, sizeof(why)) == 0 ||
                         strstr(why, "cannot listen") != NULL,
                     1);
    zps_metrics_http_stop(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_metrics),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_slow_and_many),
        cmocka_unit_test(test_bad_addresses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
