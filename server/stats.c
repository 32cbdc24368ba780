/*
 * stats.c - the STATS reply's JSON; see stats.h.
 */
#include "stats.h"

#include "consistency.h"
#include "daemon.h"
#include "error.h"
#include "fingerprint.h"
#include "hist.h"
#include "strbuf.h"
#include "timeutil.h"

void zps_counters_error(zps_counters_t *c, int code)
{
    /* A request before INIT is the normal course of a cluster's start, not
     * an error: counted apart, so a healthy start shows none. */
    if (code == ZPS_ENOTINIT) {
        c->not_initialised++;
        return;
    }
    c->errors++;
    unsigned idx = (unsigned)(-code);
    if (idx < 32)
        c->errors_by_code[idx]++;
}

/*
 * Shard 0's shared data assignment, once a worker has stated the plan:
 * "assignment":{...}, then a comma. The audit is examples_per_epoch and
 * batches_per_epoch_done: an epoch whose batches were all completed counts
 * each of its N examples once.
 */
static void assignment_json(const zps_daemon_t *d, zps_strbuf_t *b)
{
    const zps_assign_t *a = d->assign;
    if (!a || !zps_assign_has_plan(a))
        return;
    uint64_t B = zps_assign_batches_per_epoch(a);
    uint64_t E = zps_assign_batches(a) / B;
    zps_strbuf_printf(b,
                      "\"assignment\":{\"batches_per_epoch\":%llu,\"epochs\":%llu,"
                      "\"next\":%llu,\"queued\":%zu,\"completed\":%llu,\"lease_lost\":%llu,"
                      "\"finish_notices\":%llu,\"held\":[",
                      (unsigned long long)B, (unsigned long long)E,
                      (unsigned long long)zps_assign_next(a), zps_assign_queued(a),
                      (unsigned long long)zps_assign_completed(a),
                      (unsigned long long)d->count.lease_lost,
                      (unsigned long long)d->count.finished);
    for (uint32_t w = 0; w < d->cfg->consistency.workers; w++)
        zps_strbuf_printf(b, "%s%zu", w ? "," : "", zps_assign_held(a, w));
    zps_strbuf_printf(b, "],\"examples_per_epoch\":[");
    for (uint64_t e = 0; e < E; e++)
        zps_strbuf_printf(b, "%s%llu", e ? "," : "",
                          (unsigned long long)zps_assign_epoch_examples(a, (uint32_t)e));
    zps_strbuf_printf(b, "],\"batches_per_epoch_done\":[");
    for (uint64_t e = 0; e < E; e++)
        zps_strbuf_printf(b, "%s%llu", e ? "," : "",
                          (unsigned long long)zps_assign_epoch_batches(a, (uint32_t)e));
    zps_strbuf_printf(b, "]},");
}

char *zps_stats_json(const zps_daemon_t *d)
{
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    const zps_consistency_config_t *cc = &d->cfg->consistency;
    const zps_consistency_t *rules = d->consistency;
    zps_strbuf_printf(&b, "{\"shard\":%u,\"shards\":%u,\"endpoint\":", d->cfg->shard_index,
                      d->cfg->shard_count);
    zps_strbuf_json_string(&b, d->endpoint);
    zps_strbuf_printf(&b,
                      ",\"initialized\":%s,\"total\":%llu,\"range\":[%llu,%llu],"
                      "\"version\":%llu,\"min_clock\":%llu,\"mode\":\"%s\",\"staleness_bound\":%u,"
                      "\"backup_workers\":%u,\"optimizer\":\"%s\",\"lr_staleness\":\"%s\","
                      "\"worker_timeout_s\":%.3f,\"workers\":%u,",
                      zps_consistency_initialized(rules) ? "true" : "false",
                      (unsigned long long)d->store.total, (unsigned long long)d->store.range.lo,
                      (unsigned long long)d->store.range.hi,
                      (unsigned long long)zps_consistency_version(rules),
                      (unsigned long long)zps_consistency_min_clock(rules), zps_mode_name(cc->mode),
                      cc->ssp_bound, cc->backup, zps_opt_name(&d->cfg->opt),
                      cc->lr_scaling == ZPS_LR_SCALING_INVERSE ? "inverse" : "none",
                      (double)d->cfg->worker_timeout_ms / 1e3, cc->workers);
    zps_strbuf_printf(&b, "\"config\":");
    zps_fingerprint_json(d->cfg, &b);
    zps_strbuf_printf(&b, ",\"clocks\":[");
    for (uint32_t w = 0; w < cc->workers; w++)
        zps_strbuf_printf(&b, "%s%llu", w ? "," : "",
                          (unsigned long long)zps_consistency_pushed(rules, w));
    zps_strbuf_printf(&b, "],\"live\":[");
    for (uint32_t w = 0; w < cc->workers; w++)
        zps_strbuf_printf(&b, "%s%s", w ? "," : "",
                          zps_consistency_live(rules, w) ? "true" : "false");
    zps_strbuf_printf(&b, "],\"evictions\":[");
    for (uint32_t w = 0; w < cc->workers; w++)
        zps_strbuf_printf(&b, "%s%llu", w ? "," : "", (unsigned long long)d->evictions[w]);
    /* Silences as liveness judges them: on the listening clock. */
    uint64_t now = zps_daemon_listening_ns(d);
    zps_strbuf_printf(&b, "],\"silent_ms\":[");
    for (uint32_t w = 0; w < cc->workers; w++)
        zps_strbuf_printf(&b, "%s%.1f", w ? "," : "",
                          (double)(now > d->last_seen_ns[w] ? now - d->last_seen_ns[w] : 0) / 1e6);
    zps_strbuf_printf(&b, "],\"dropped_per_worker\":[");
    for (uint32_t w = 0; w < cc->workers; w++)
        zps_strbuf_printf(&b, "%s%llu", w ? "," : "",
                          (unsigned long long)zps_consistency_dropped(rules, w));
    zps_strbuf_printf(&b, "],\"discarded_per_worker\":[");
    for (uint32_t w = 0; w < cc->workers; w++)
        zps_strbuf_printf(&b, "%s%llu", w ? "," : "",
                          (unsigned long long)zps_consistency_discarded(rules, w));
    zps_strbuf_printf(&b, "],\"finished\":[");
    for (uint32_t w = 0; w < cc->workers; w++)
        zps_strbuf_printf(&b, "%s%s", w ? "," : "",
                          zps_consistency_finished(rules, w) ? "true" : "false");
    const zps_counters_t *c = &d->count;
    zps_strbuf_printf(
        &b,
        "],\"pending_pulls\":%zu,\"counts\":{\"messages_in\":%llu,"
        "\"messages_out\":%llu,\"bytes_in\":%llu,\"bytes_out\":%llu,\"inits\":%llu,"
        "\"pulls\":%llu,\"pushes\":%llu,\"applied\":%llu,\"buffered\":%llu,"
        "\"steps\":%llu,\"retries\":%llu,\"dropped\":%llu,\"heartbeats\":%llu,"
        "\"stats\":%llu,\"errors\":%llu,\"replies_dropped\":%llu,"
        "\"steps_refused\":%llu,\"buffered_discarded\":%llu,"
        "\"pulls_cancelled\":%llu,\"exchanges\":%llu,\"checks_background\":%llu,"
        "\"steps_background\":%llu,\"not_initialised\":%llu},"
        "\"step_running\":%s,\"check_running\":%s,\"errors_by_code\":{",
        zps_consistency_pending(rules), (unsigned long long)c->msgs_in,
        (unsigned long long)c->msgs_out, (unsigned long long)c->bytes_in,
        (unsigned long long)c->bytes_out, (unsigned long long)c->inits,
        (unsigned long long)c->pulls, (unsigned long long)c->pushes, (unsigned long long)c->applied,
        (unsigned long long)c->buffered, (unsigned long long)c->steps,
        (unsigned long long)c->retries, (unsigned long long)c->dropped,
        (unsigned long long)c->heartbeats, (unsigned long long)c->stats,
        (unsigned long long)c->errors, (unsigned long long)c->replies_dropped,
        (unsigned long long)c->steps_refused, (unsigned long long)c->buffered_discarded,
        (unsigned long long)c->pulls_cancelled, (unsigned long long)c->exchanges,
        (unsigned long long)c->checks_background, (unsigned long long)c->steps_background,
        (unsigned long long)c->not_initialised, d->step.running ? "true" : "false",
        d->check.running ? "true" : "false");
    const char *sep = "";
    for (int i = 1; i < 32; i++) {
        if (c->errors_by_code[i]) {
            zps_strbuf_printf(&b, "%s\"%s\":%llu", sep, zps_errname(-i),
                              (unsigned long long)c->errors_by_code[i]);
            sep = ",";
        }
    }
    zps_strbuf_printf(&b, "},");
    assignment_json(d, &b);
    zps_strbuf_printf(&b, "\"update_staleness\":");
    zps_vhist_json(&d->update_staleness, &b);
    zps_strbuf_printf(&b, ",\"clock_lag\":");
    zps_vhist_json(&d->clock_lag, &b);
    zps_strbuf_printf(&b, ",\"pull_wait\":");
    zps_thist_json(&d->pull_wait, &b);
    zps_strbuf_printf(&b, ",\"checkpoints\":{\"written\":%llu,\"failed\":%llu,\"last\":",
                      (unsigned long long)c->checkpoints,
                      (unsigned long long)c->checkpoint_failures);
    zps_strbuf_json_string(&b, d->ckpts.last_path);
    zps_strbuf_printf(&b, "},");
    zps_conns_json(&d->conns, &b);
    zps_strbuf_printf(&b,
                      ",\"auth\":{\"on\":%s,\"keys\":%zu,\"handshakes_refused\":%llu,"
                      "\"requests_denied\":%llu}",
                      d->auth.path ? "true" : "false",
                      d->auth.keys ? zps_authkeys_count(d->auth.keys) : (size_t)0,
                      (unsigned long long)d->auth.refused, (unsigned long long)d->auth.denied);
    zps_strbuf_printf(&b,
                      ",\"sealed\":{\"on\":%s,\"port\":%u,\"sessions\":%zu,\"granted\":%llu,"
                      "\"ended\":%llu,\"opened\":%llu,\"refused\":%llu,\"connections\":%u}",
                      d->seal_sock ? "true" : "false", (unsigned)d->seal_port_bound,
                      d->sessions.used, (unsigned long long)d->sessions.granted,
                      (unsigned long long)d->sessions.ended, (unsigned long long)d->sessions.opened,
                      (unsigned long long)d->sessions.refused, d->seal_conns.open);
    zps_strbuf_printf(&b,
                      ",\"shm\":{\"on\":%s,\"bytes\":%llu,\"granted\":%llu,\"ended\":%llu,"
                      "\"pushes\":%llu,\"replies\":%llu}",
                      d->cfg->no_shm ? "false" : "true", (unsigned long long)zps_shm_bytes(&d->shm),
                      (unsigned long long)d->shm.granted, (unsigned long long)d->shm.ended,
                      (unsigned long long)d->shm.pushes, (unsigned long long)d->shm.replies);
    /* Shard-sized buffers touched, in copies of the parameters: what an
     * honest run's resident size is made of beside the store
     * (docs/protocol.md, "What an honest run holds"). */
    uint32_t shm_bufs, shm_copies;
    zps_shm_touched(&d->shm, &shm_bufs, &shm_copies);
    zps_strbuf_printf(&b,
                      ",\"resident_copies\":{\"replies\":%zu,\"observer_replies\":%zu,"
                      "\"replies_bf16\":%zu,\"observer_replies_bf16\":%zu,"
                      "\"shm_buffers\":%u,\"shm_private\":%u}",
                      zps_reply_cache_copies_peak(&d->reply_cache),
                      zps_reply_cache_copies_peak(&d->observer_cache),
                      zps_reply_cache_copies_peak(&d->reply_cache16),
                      zps_reply_cache_copies_peak(&d->observer_cache16), shm_bufs, shm_copies);
    if (d->metrics) {
        zps_strbuf_printf(&b, ",\"metrics\":");
        zps_strbuf_json_string(&b, zps_metrics_http_address(d->metrics));
    }
    zps_strbuf_printf(&b, ",\"uptime_s\":%.3f}", (double)(zps_now_ns() - d->started_ns) / 1e9);
    return zps_strbuf_take(&b);
}
