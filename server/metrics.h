/*
 * metrics.h - a shard's figures in the Prometheus text exposition format,
 * for `zps-server --metrics-listen HOST:PORT` (common/metrics_http.h serves
 * them).
 *
 * The loop builds the text from the same state STATS reports (stats.c) once
 * a second and publishes it; scrapes read the latest text on the endpoint's
 * thread and never touch the shard. Names follow Prometheus' conventions:
 * base units in the name (_seconds, _bytes, or what is counted: _updates,
 * _clocks), _total for counters, every series labelled shard="I". The names
 * are an external interface (rules, dashboards): docs/operations.md lists
 * them, and they never change.
 *
 * Not here: the HTTP side (common/metrics_http.c), STATS' JSON (stats.c).
 */
#ifndef ZPS_SERVER_METRICS_H
#define ZPS_SERVER_METRICS_H

#include "strbuf.h"

struct zps_daemon;

/* Appends the shard's metrics to b. Loop thread; does not block. */
void zps_metrics_text(const struct zps_daemon *d, zps_strbuf_t *b);

#endif
