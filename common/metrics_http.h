/*
 * metrics_http.h - the endpoint Prometheus scrapes: GET /metrics over HTTP/1,
 * answered from the latest text a process has published.
 *
 * The endpoint runs on a thread of its own, with its own libuv loop, so
 * nothing it does (a slow client, a flood of connections, a request it
 * refuses) can stall the caller's work. The caller builds the text in the
 * Prometheus exposition format whenever it likes (a server's loop does it
 * once a second) and hands it over with zps_metrics_http_publish; every
 * scrape is answered with the latest text as it was published.
 *
 * Requests: only a plain `GET /metrics` (a query string is ignored) is
 * answered 200. Another method gets 405, another path 404, a request line
 * that is not HTTP/1.x 400, headers beyond 8 KiB 431. Every response closes
 * its connection. A connection that has not sent its whole request within
 * 5 s, or not taken its response within 10 s, is closed; beyond
 * 64 connections at once, new ones are closed on arrival. Each of these is
 * counted (zps_metrics_http_stats).
 *
 * Not here: the metrics themselves (server/metrics.c, worker/).
 */
#ifndef ZPS_METRICS_HTTP_H
#define ZPS_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

typedef struct zps_metrics_http zps_metrics_http_t;

typedef struct zps_metrics_http_stats {
    uint64_t served;  /* 200 responses */
    uint64_t refused; /* 4xx responses */
    uint64_t dropped; /* connections closed without a response: too many, too slow */
} zps_metrics_http_stats_t;

/*
 * Listens on `where`, "HOST:PORT" (HOST an IPv4 address, [IPv6] or
 * localhost; PORT 0 picks a free one) and starts the endpoint's thread.
 * Returns 0, or ZPS_EINVAL (a bad address: the reason in why) or
 * ZPS_ESOCKET (cannot listen there: the reason in why).
 */
int zps_metrics_http_start(const char *where, zps_metrics_http_t **out, char *why, size_t why_size);

/* Checks that `where` is an address zps_metrics_http_start takes: 0 or ZPS_EINVAL (why). */
int zps_metrics_http_check(const char *where, char *why, size_t why_size);

/* The address it listens on, "HOST:PORT" with the port it got. */
const char *zps_metrics_http_address(const zps_metrics_http_t *h);

/*
 * Makes `text` (len bytes, copied) what the next scrapes get. Any thread;
 * does not wait for a scrape in progress.
 */
void zps_metrics_http_publish(zps_metrics_http_t *h, const char *text, size_t len);

/* Requests answered and refused so far. Any thread. */
zps_metrics_http_stats_t zps_metrics_http_stats(const zps_metrics_http_t *h);

/* Stops the thread, closes every connection and frees h (NULL is a no-op). */
void zps_metrics_http_stop(zps_metrics_http_t *h);

#endif
