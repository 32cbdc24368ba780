/*
 * metrics.c - the shard's metrics in Prometheus' text format; see metrics.h.
 */
#include "metrics.h"

#include "conns.h"
#include "consistency.h"
#include "daemon.h"
#include "error.h"
#include "hist.h"
#include "timeutil.h"

/* The bounds of the update-staleness and clock-lag buckets, in updates or clocks. */
static const uint64_t count_bounds[] = {0, 1, 2, 4, 8, 16, 32, 63};
/* The bounds of the pull-wait buckets, in seconds. */
static const double wait_bounds[] = {0.0001, 0.001, 0.01, 0.1, 1.0, 10.0, 60.0};

static void head(zps_strbuf_t *b, const char *name, const char *type, const char *help)
{
    zps_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One series of one metric: name{shard="I"[,extra]} value. */
static void one(zps_strbuf_t *b, const zps_daemon_t *d, const char *name, const char *type,
                const char *help, double value)
{
    head(b, name, type, help);
    zps_strbuf_printf(b, "%s{shard=\"%u\"} %.17g\n", name, d->cfg->shard_index, value);
}

static void count_histogram(zps_strbuf_t *b, const zps_daemon_t *d, const char *name,
                            const char *help, const zps_vhist_t *h)
{
    head(b, name, "histogram", help);
    unsigned s = d->cfg->shard_index;
    for (size_t i = 0; i < sizeof(count_bounds) / sizeof(count_bounds[0]); i++)
        zps_strbuf_printf(b, "%s_bucket{shard=\"%u\",le=\"%llu\"} %llu\n", name, s,
                          (unsigned long long)count_bounds[i],
                          (unsigned long long)zps_vhist_count_le(h, count_bounds[i]));
    zps_strbuf_printf(b, "%s_bucket{shard=\"%u\",le=\"+Inf\"} %llu\n", name, s,
                      (unsigned long long)h->n);
    zps_strbuf_printf(b, "%s_sum{shard=\"%u\"} %llu\n%s_count{shard=\"%u\"} %llu\n", name, s,
                      (unsigned long long)h->sum, name, s, (unsigned long long)h->n);
}

static void time_histogram(zps_strbuf_t *b, const zps_daemon_t *d, const char *name,
                           const char *help, const zps_thist_t *h)
{
    head(b, name, "histogram", help);
    unsigned s = d->cfg->shard_index;
    for (size_t i = 0; i < sizeof(wait_bounds) / sizeof(wait_bounds[0]); i++)
        zps_strbuf_printf(
            b, "%s_bucket{shard=\"%u\",le=\"%g\"} %llu\n", name, s, wait_bounds[i],
            (unsigned long long)zps_thist_count_le(h, (uint64_t)(wait_bounds[i] * 1e9)));
    zps_strbuf_printf(b, "%s_bucket{shard=\"%u\",le=\"+Inf\"} %llu\n", name, s,
                      (unsigned long long)h->n);
    zps_strbuf_printf(b, "%s_sum{shard=\"%u\"} %.9f\n%s_count{shard=\"%u\"} %llu\n", name, s,
                      (double)h->sum_ns / 1e9, name, s, (unsigned long long)h->n);
}

/* A per-worker series: one line per worker w of value(d, w). */
static void per_worker(zps_strbuf_t *b, const zps_daemon_t *d, const char *name, const char *type,
                       const char *help, double (*value)(const zps_daemon_t *, uint32_t))
{
    head(b, name, type, help);
    for (uint32_t w = 0; w < d->cfg->consistency.workers; w++)
        zps_strbuf_printf(b, "%s{shard=\"%u\",worker=\"%u\"} %.17g\n", name, d->cfg->shard_index, w,
                          value(d, w));
}

static double worker_clock(const zps_daemon_t *d, uint32_t w)
{
    return (double)zps_consistency_pushed(d->consistency, w);
}

static double worker_live(const zps_daemon_t *d, uint32_t w)
{
    return zps_consistency_live(d->consistency, w) ? 1.0 : 0.0;
}

static double worker_heard(const zps_daemon_t *d, uint32_t w)
{
    uint64_t now = zps_daemon_listening_ns(d);
    return (double)(now > d->last_seen_ns[w] ? now - d->last_seen_ns[w] : 0) / 1e9;
}

static double worker_evictions(const zps_daemon_t *d, uint32_t w)
{
    return (double)d->evictions[w];
}

static double worker_dropped(const zps_daemon_t *d, uint32_t w)
{
    return (double)zps_consistency_dropped(d->consistency, w);
}

void zps_metrics_text(const zps_daemon_t *d, zps_strbuf_t *b)
{
    const zps_consistency_t *rules = d->consistency;
    const zps_counters_t *c = &d->count;
    unsigned s = d->cfg->shard_index;
    uint32_t live = 0;
    for (uint32_t w = 0; w < d->cfg->consistency.workers; w++)
        live += zps_consistency_live(rules, w);

    one(b, d, "zps_model_version", "gauge",
        "Updates the shard's parameters have taken (BSP: clocks completed).",
        (double)zps_consistency_version(rules));
    one(b, d, "zps_min_clock", "gauge", "The lowest clock every live worker has pushed.",
        (double)zps_consistency_min_clock(rules));
    one(b, d, "zps_workers", "gauge", "Workers the shard serves (--workers).",
        (double)d->cfg->consistency.workers);
    one(b, d, "zps_workers_live", "gauge", "Workers not evicted.", (double)live);
    one(b, d, "zps_model_initialized", "gauge", "1 once the model is initialised.",
        zps_consistency_initialized(rules) ? 1.0 : 0.0);
    one(b, d, "zps_shard_parameters", "gauge", "Parameters this shard holds.",
        (double)d->store.len);
    per_worker(b, d, "zps_worker_clock", "gauge", "Clocks the worker has pushed.", worker_clock);
    per_worker(b, d, "zps_worker_live", "gauge", "1 while the worker is not evicted.", worker_live);
    per_worker(b, d, "zps_worker_last_heard_seconds", "gauge",
               "Seconds since the last message from the worker (time the server could listen).",
               worker_heard);
    per_worker(b, d, "zps_worker_evictions_total", "counter",
               "Times the worker was evicted for silence.", worker_evictions);
    per_worker(b, d, "zps_worker_pushes_dropped_total", "counter",
               "The worker's pushes that came too late for their step.", worker_dropped);

    one(b, d, "zps_pushes_applied_total", "counter", "Pushes applied to the parameters on arrival.",
        (double)c->applied);
    one(b, d, "zps_pushes_buffered_total", "counter", "BSP pushes buffered for their clock's step.",
        (double)c->buffered);
    one(b, d, "zps_pushes_dropped_total", "counter",
        "Pushes acknowledged as dropped: too late for their step.", (double)c->dropped);
    one(b, d, "zps_pushes_retried_total", "counter",
        "Pushes seen again (retries): acknowledged, not applied again.", (double)c->retries);
    one(b, d, "zps_pushes_discarded_total", "counter",
        "Buffered pushes of BSP steps refused as not finite.", (double)c->buffered_discarded);
    one(b, d, "zps_pulls_total", "counter", "Pull requests (an exchange's pull included).",
        (double)c->pulls);
    one(b, d, "zps_exchanges_total", "counter",
        "Pushes that were exchanges: their reply is the next clock's pull.", (double)c->exchanges);
    one(b, d, "zps_pulls_cancelled_total", "counter",
        "Waiting pulls dropped because their connection closed.", (double)c->pulls_cancelled);
    one(b, d, "zps_heartbeats_total", "counter", "Heartbeats.", (double)c->heartbeats);
    one(b, d, "zps_optimizer_steps_total", "counter", "BSP steps taken.", (double)c->steps);
    one(b, d, "zps_optimizer_steps_background_total", "counter",
        "Steps (BSP, or pushes applied on arrival) taken off the loop's thread.",
        (double)c->steps_background);
    one(b, d, "zps_payload_checks_background_total", "counter",
        "Received payloads checked (CRC32C, finite scan) off the loop's thread.",
        (double)c->checks_background);
    one(b, d, "zps_steps_refused_total", "counter",
        "Steps or pushes refused because a value would not be finite.", (double)c->steps_refused);
    count_histogram(b, d, "zps_update_staleness_updates",
                    "Per applied push: updates between the version it was computed on and its "
                    "step.",
                    &d->update_staleness);
    count_histogram(b, d, "zps_clock_lag_clocks",
                    "Per push: clocks between it and the furthest clock any worker has pushed.",
                    &d->clock_lag);
    time_histogram(b, d, "zps_pull_wait_seconds",
                   "Per worker pull: seconds it waited for the consistency rule.", &d->pull_wait);

    one(b, d, "zps_received_messages_total", "counter", "Messages received.", (double)c->msgs_in);
    one(b, d, "zps_sent_messages_total", "counter", "Messages sent.", (double)c->msgs_out);
    one(b, d, "zps_received_bytes_total", "counter", "Bytes of messages received.",
        (double)c->bytes_in);
    one(b, d, "zps_sent_bytes_total", "counter", "Bytes of messages sent.", (double)c->bytes_out);
    one(b, d, "zps_replies_dropped_total", "counter",
        "Replies dropped because their peer's queue was full or it was gone.",
        (double)c->replies_dropped);
    head(b, "zps_errors_total", "counter", "ERROR replies, by code.");
    for (int i = 1; i < 32; i++)
        if (c->errors_by_code[i])
            zps_strbuf_printf(b, "zps_errors_total{shard=\"%u\",code=\"%s\"} %llu\n", s,
                              zps_errname(-i), (unsigned long long)c->errors_by_code[i]);

    one(b, d, "zps_checkpoints_written_total", "counter", "Checkpoints written.",
        (double)c->checkpoints);
    one(b, d, "zps_checkpoints_failed_total", "counter", "Checkpoints that could not be written.",
        (double)c->checkpoint_failures);
    if (d->ckpts.written_ns) {
        one(b, d, "zps_checkpoint_age_seconds", "gauge",
            "Seconds since the last checkpoint written.",
            (double)(zps_now_ns() - d->ckpts.written_ns) / 1e9);
        one(b, d, "zps_checkpoint_duration_seconds", "gauge",
            "Seconds the last checkpoint written took.", (double)d->ckpts.write_ns / 1e9);
    }

    const zps_conns_t *k = &d->conns;
    one(b, d, "zps_connections_open", "gauge", "Connections open.", (double)k->open);
    one(b, d, "zps_connections_accepted_total", "counter", "Connections accepted.",
        (double)k->accepted);
    one(b, d, "zps_connections_refused_total", "counter",
        "Connections shut down on arrival: beyond --max-connections or the per-host limit.",
        (double)k->refused);
    head(b, "zps_connections_closed_total", "counter",
         "Connections shut down for their unread bytes or the server's memory, by reason.");
    zps_strbuf_printf(b, "zps_connections_closed_total{shard=\"%u\",reason=\"buffer\"} %llu\n", s,
                      (unsigned long long)k->closed_buffer);
    zps_strbuf_printf(b, "zps_connections_closed_total{shard=\"%u\",reason=\"memory\"} %llu\n", s,
                      (unsigned long long)k->closed_memory);
    if (d->auth.path) {
        one(b, d, "zps_auth_handshakes_refused_total", "counter",
            "CURVE handshakes refused: keys not in --authorized-keys.", (double)d->auth.refused);
        one(b, d, "zps_auth_requests_denied_total", "counter",
            "Requests refused because the key's role does not allow them (ZPS_EDENIED).",
            (double)d->auth.denied);
        one(b, d, "zps_auth_keys", "gauge", "Keys in --authorized-keys as last loaded.",
            (double)zps_authkeys_count(d->auth.keys));
    }
    if (d->seal_sock) {
        one(b, d, "zps_sealed_sessions", "gauge",
            "Sealed sessions open (one per CURVE connection).", (double)d->sessions.used);
        one(b, d, "zps_sealed_sessions_granted_total", "counter", "Sealed sessions granted.",
            (double)d->sessions.granted);
        head(b, "zps_sealed_messages_total", "counter",
             "Sealed messages received: opened, or refused unopened (unknown session, bad tag, "
             "replayed counter).");
        zps_strbuf_printf(b, "zps_sealed_messages_total{shard=\"%u\",result=\"opened\"} %llu\n", s,
                          (unsigned long long)d->sessions.opened);
        zps_strbuf_printf(b, "zps_sealed_messages_total{shard=\"%u\",result=\"refused\"} %llu\n", s,
                          (unsigned long long)d->sessions.refused);
        one(b, d, "zps_sealed_connections_open", "gauge", "Connections to the sealed socket open.",
            (double)d->seal_conns.open);
    }
    one(b, d, "zps_memory_bound_bytes", "gauge", "The bound the server keeps its memory within.",
        (double)zps_conns_memory_bound(k));
    one(b, d, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
        (double)zps_conns_rss());
    if (d->metrics) {
        zps_metrics_http_stats_t h = zps_metrics_http_stats(d->metrics);
        head(b, "zps_metrics_requests_total", "counter",
             "Requests to this endpoint: served, refused (4xx), or dropped (too slow, too many).");
        zps_strbuf_printf(b, "zps_metrics_requests_total{shard=\"%u\",result=\"served\"} %llu\n", s,
                          (unsigned long long)h.served);
        zps_strbuf_printf(b, "zps_metrics_requests_total{shard=\"%u\",result=\"refused\"} %llu\n",
                          s, (unsigned long long)h.refused);
        zps_strbuf_printf(b, "zps_metrics_requests_total{shard=\"%u\",result=\"dropped\"} %llu\n",
                          s, (unsigned long long)h.dropped);
    }
    one(b, d, "zps_uptime_seconds", "gauge", "Seconds since the server started.",
        (double)(zps_now_ns() - d->started_ns) / 1e9);
}
