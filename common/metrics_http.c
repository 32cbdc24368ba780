/*
 * metrics_http.c - the /metrics endpoint's thread; see metrics_http.h.
 */
#include "metrics_http.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "error.h"
#include "parse.h"

#define HEADER_MAX 8192
#define CONNS_MAX 64
#define REQUEST_MS 5000
#define RESPONSE_MS 10000

/* One published text; scrapes in progress hold a reference. */
typedef struct snapshot {
    atomic_int refs;
    size_t len;
    char data[];
} snapshot_t;

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t write;
    struct zps_metrics_http *h;
    char buf[HEADER_MAX];
    size_t len;
    char head[256];
    snapshot_t *snap;
    bool answered;
    int open_handles;
} conn_t;

struct zps_metrics_http {
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_async_t stop;
    uv_thread_t thread;
    char address[96];
    uv_mutex_t lock;
    snapshot_t *latest; /* under lock */
    int conns;          /* open, not closing; loop thread */
    atomic_ullong served, refused, dropped;
};

static void snapshot_release(snapshot_t *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        free(s);
}

static snapshot_t *snapshot_take(zps_metrics_http_t *h)
{
    uv_mutex_lock(&h->lock);
    snapshot_t *s = h->latest;
    if (s)
        atomic_fetch_add(&s->refs, 1);
    uv_mutex_unlock(&h->lock);
    return s;
}

void zps_metrics_http_publish(zps_metrics_http_t *h, const char *text, size_t len)
{
    snapshot_t *s = malloc(sizeof(*s) + len);
    if (!s)
        return; /* the previous text stays */
    atomic_init(&s->refs, 1);
    s->len = len;
    memcpy(s->data, text, len);
    uv_mutex_lock(&h->lock);
    snapshot_t *old = h->latest;
    h->latest = s;
    uv_mutex_unlock(&h->lock);
    snapshot_release(old);
}

zps_metrics_http_stats_t zps_metrics_http_stats(const zps_metrics_http_t *h)
{
    zps_metrics_http_stats_t st = {atomic_load(&h->served), atomic_load(&h->refused),
                                   atomic_load(&h->dropped)};
    return st;
}

const char *zps_metrics_http_address(const zps_metrics_http_t *h)
{
    return h->address;
}

/* ---- connections (the endpoint's thread) ---- */

static void on_conn_closed(uv_handle_t *handle)
{
    conn_t *c = handle->data;
    if (--c->open_handles > 0)
        return;
    snapshot_release(c->snap);
    free(c);
}

static void conn_close(conn_t *c)
{
    if (uv_is_closing((uv_handle_t *)&c->tcp))
        return;
    if (!c->answered)
        atomic_fetch_add(&c->h->dropped, 1);
    /* The slot is free from here on: the socket is closed now, and a client
     * that saw it close and connects again may be accepted in this same loop
     * iteration, before the close callbacks run. */
    c->h->conns--;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_timeout(uv_timer_t *t)
{
    conn_close(t->data);
}

static void on_written(uv_write_t *w, int status)
{
    (void)status;
    conn_close(w->data);
}

static void respond(conn_t *c, int code, const char *reason, const char *extra)
{
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->answered = true;
    uv_buf_t bufs[2];
    int n = 1;
    if (code == 200) {
        c->snap = snapshot_take(c->h);
        size_t len = c->snap ? c->snap->len : 0;
        snprintf(c->head, sizeof(c->head),
                 "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                 len);
        if (len) {
            bufs[1] = uv_buf_init(c->snap->data, (unsigned)len);
            n = 2;
        }
        atomic_fetch_add(&c->h->served, 1);
    } else {
        snprintf(c->head, sizeof(c->head),
                 "HTTP/1.1 %d %s\r\n%sContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n%s\n",
                 code, reason, extra, strlen(reason) + 1, reason);
        atomic_fetch_add(&c->h->refused, 1);
    }
    bufs[0] = uv_buf_init(c->head, (unsigned)strlen(c->head));
    c->write.data = c;
    if (uv_write(&c->write, (uv_stream_t *)&c->tcp, bufs, (unsigned)n, on_written) != 0) {
        conn_close(c);
        return;
    }
    /* A client that does not take its response is not waited for. */
    uv_timer_stop(&c->timer);
    uv_timer_start(&c->timer, on_timeout, RESPONSE_MS, 0);
}

/* Judges the request once its headers are in (buf holds them, NUL-terminated). */
static void judge(conn_t *c)
{
    char *eol = strstr(c->buf, "\r\n");
    *eol = '\0';
    char *method = c->buf;
    char *target = strchr(method, ' ');
    char *version = target ? strchr(target + 1, ' ') : NULL;
    if (!target || !version || strchr(version + 1, ' ') ||
        strncmp(version + 1, "HTTP/1.", 7) != 0) {
        respond(c, 400, "Bad Request", "");
        return;
    }
    *target++ = '\0';
    *version = '\0';
    if (strcmp(method, "GET") != 0) {
        respond(c, 405, "Method Not Allowed", "Allow: GET\r\n");
        return;
    }
    size_t path = strcspn(target, "?");
    if (path != 8 || strncmp(target, "/metrics", 8) != 0) {
        respond(c, 404, "Not Found", "");
        return;
    }
    respond(c, 200, "OK", "");
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    conn_t *c = handle->data;
    /* One byte kept for the NUL that ends what was read. */
    buf->base = c->buf + c->len;
    buf->len = sizeof(c->buf) - 1 - c->len;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    conn_t *c = s->data;
    if (n < 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    if (strstr(c->buf, "\r\n\r\n")) {
        judge(c);
        return;
    }
    if (c->len >= sizeof(c->buf) - 1)
        respond(c, 431, "Request Header Fields Too Large", "");
}

static void on_connection(uv_stream_t *server, int status)
{
    zps_metrics_http_t *h = server->data;
    if (status < 0)
        return;
    conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    c->h = h;
    uv_tcp_init(&h->loop, &c->tcp);
    uv_timer_init(&h->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->open_handles = 2;
    h->conns++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 || h->conns > CONNS_MAX) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_timeout, REQUEST_MS, 0);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
        conn_close(c);
}

/* ---- start and stop ---- */

static void close_any(uv_handle_t *handle, void *arg)
{
    (void)arg;
    if (uv_is_closing(handle))
        return;
    if (handle->type == UV_TCP && handle->data && handle->data != handle->loop->data) {
        conn_close(handle->data);
        return;
    }
    if (handle->type == UV_TIMER)
        return; /* a connection's: closed with it */
    uv_close(handle, NULL);
}

static void on_stop(uv_async_t *a)
{
    uv_walk(a->loop, close_any, NULL);
}

static void run(void *arg)
{
    zps_metrics_http_t *h = arg;
    uv_run(&h->loop, UV_RUN_DEFAULT);
}

/* Parses "HOST:PORT" into a socket address. */
static int parse_where(const char *where, struct sockaddr_storage *sa, char *why, size_t why_size)
{
    const char *colon = strrchr(where, ':');
    char host[64];
    long port;
    if (!colon || zps_parse_long(colon + 1, 0, 65535, &port) != 0) {
        zps_set_reason(why, why_size, "'%s' is not HOST:PORT", where);
        return ZPS_EINVAL;
    }
    size_t n = (size_t)(colon - where);
    if (n == 0 || n >= sizeof(host)) {
        zps_set_reason(why, why_size, "'%s' is not HOST:PORT", where);
        return ZPS_EINVAL;
    }
    memcpy(host, where, n);
    host[n] = '\0';
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof(host), "127.0.0.1");
    memset(sa, 0, sizeof(*sa));
    if (host[0] == '[' && host[n - 1] == ']') {
        host[n - 1] = '\0';
        if (uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)sa) == 0)
            return 0;
    } else if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)sa) == 0) {
        return 0;
    }
    zps_set_reason(why, why_size, "'%s': the host must be a numeric address or localhost", where);
    return ZPS_EINVAL;
}

int zps_metrics_http_check(const char *where, char *why, size_t why_size)
{
    struct sockaddr_storage sa;
    return parse_where(where, &sa, why, why_size);
}

int zps_metrics_http_start(const char *where, zps_metrics_http_t **out, char *why, size_t why_size)
{
    struct sockaddr_storage sa;
    int rc = parse_where(where, &sa, why, why_size);
    if (rc)
        return rc;
    zps_metrics_http_t *h = calloc(1, sizeof(*h));
    if (!h)
        return ZPS_ENOMEM;
    uv_loop_init(&h->loop);
    h->loop.data = h;
    uv_mutex_init(&h->lock);
    uv_tcp_init(&h->loop, &h->listener);
    h->listener.data = h;
    int e = uv_tcp_bind(&h->listener, (struct sockaddr *)&sa, 0);
    if (e == 0)
        e = uv_listen((uv_stream_t *)&h->listener, 64, on_connection);
    if (e != 0) {
        zps_set_reason(why, why_size, "cannot listen on %s: %s", where, uv_strerror(e));
        uv_close((uv_handle_t *)&h->listener, NULL);
        uv_run(&h->loop, UV_RUN_DEFAULT);
        uv_loop_close(&h->loop);
        uv_mutex_destroy(&h->lock);
        free(h);
        return ZPS_ESOCKET;
    }
    struct sockaddr_storage got;
    int len = sizeof(got);
    uv_tcp_getsockname(&h->listener, (struct sockaddr *)&got, &len);
    char ip[64] = "?";
    int port = 0;
    if (got.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&got, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in6 *)&got)->sin6_port);
        snprintf(h->address, sizeof(h->address), "[%s]:%d", ip, port);
    } else {
        uv_ip4_name((struct sockaddr_in *)&got, ip, sizeof(ip));
        port = ntohs(((struct sockaddr_in *)&got)->sin_port);
        snprintf(h->address, sizeof(h->address), "%s:%d", ip, port);
    }
    uv_async_init(&h->loop, &h->stop, on_stop);
    h->stop.data = h;
    if (uv_thread_create(&h->thread, run, h) != 0) {
        zps_set_reason(why, why_size, "cannot start the metrics thread");
        uv_close((uv_handle_t *)&h->listener, NULL);
        uv_close((uv_handle_t *)&h->stop, NULL);
        uv_run(&h->loop, UV_RUN_DEFAULT);
        uv_loop_close(&h->loop);
        uv_mutex_destroy(&h->lock);
        free(h);
        return ZPS_ESOCKET;
    }
    *out = h;
    return 0;
}

void zps_metrics_http_stop(zps_metrics_http_t *h)
{
    if (!h)
        return;
    uv_async_send(&h->stop);
    uv_thread_join(&h->thread);
    uv_loop_close(&h->loop);
    snapshot_release(h->latest);
    uv_mutex_destroy(&h->lock);
    free(h);
}
