/*
 * client.h - libzps, the client side of the zps protocol.
 *
 * A client talks to the S servers of one cluster (one ZeroMQ DEALER socket
 * each, in shard order: endpoint i must be the server started with
 * --shard i/S). Every call sends its requests to all shards before waiting for
 * any reply, assembles or splits the full model vector by the range rule of
 * common/shard.h, and checks that every server's idea of the model (N, its
 * range) agrees with the client's.
 *
 * Calls block until every shard has answered or the call's timeout expires.
 * A call that times out returns ZPS_EUNREACHABLE when a server it still
 * waited for could not be connected to at any moment of the call (nothing
 * listens there, or not a zps server), and ZPS_ETIMEDOUT when every such
 * server was connected but did not answer (a pull that its consistency rule
 * holds back, or a server that is stuck). While it waits, the call logs
 * (common/log.h) which server and request it waits for: see wait_log_ms.
 * An unanswered request is sent again every `retry_ms` (doubling up to 8 s);
 * that is safe because every request is idempotent on the server: INIT sets
 * values only once, a push already taken is acknowledged without being
 * applied again, a repeated pull is answered once.
 *
 * Liveness: a worker's client (worker >= 0, heartbeat_ms > 0) runs a
 * background thread with sockets of its own that tells every server the
 * worker is alive every heartbeat_ms, so servers started with
 * --worker-timeout do not evict a worker that is merely slow to compute.
 *
 * Threading: a client is used by one thread at a time. Different clients are
 * independent.
 */
#ifndef ZPS_CLIENT_H
#define ZPS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct zps_client zps_client_t;

typedef struct zps_client_opts {
    int worker;     /* this process's rank, or -1 for tools and observers */
    bool observe;   /* worker -1: a pull for clock t is answered with the model of clock t
                     * once it exists (BSP: version t; SSP/ASP: every worker has pushed every
                     * clock before t), not at once with the current one */
    int timeout_ms; /* each call gives up after this long; -1: wait forever */
    int retry_ms;   /* resend an unanswered request after this long; 0: never */
    int heartbeat_ms; /* worker >= 0: say "alive" this often from a background thread; 0: never */
    int wait_log_ms;  /* a call still waiting after this long logs what it waits for (which
                       * server, which request, for how long), then again every 3 times as
                       * long; 0: never */
} zps_client_opts_t;

/* worker -1, timeout 30 s, retry 1 s, heartbeat 1 s (only used when worker >= 0),
 * wait log after 10 s and then every 30 s. */
void zps_client_opts_default(zps_client_opts_t *opts);

/*
 * Connects to `count` servers (ZeroMQ endpoints such as
 * "tcp://127.0.0.1:7100"). Connection is lazy: a server may start later.
 * Returns 0, ZPS_EINVAL (no endpoints, a malformed endpoint) or ZPS_ENOMEM;
 * *out is written only on success.
 */
int zps_client_new(const char *const *endpoints, size_t count, const zps_client_opts_t *opts,
                   zps_client_t **out);
void zps_client_free(zps_client_t *c); /* NULL is a no-op */

size_t zps_client_server_count(const zps_client_t *c);

/*
 * Sets the initial model: values[n] is split by shard and sent. The first
 * INIT a shard receives sets its values; later ones of the same size are
 * acknowledged and change nothing; another size is refused (ZPS_EREMOTE with
 * the server's ZPS_ESIZE). Returns 0 or a ZPS_E* code. `values` is only read.
 */
int zps_client_init(zps_client_t *c, const float *values, uint64_t n);

/* What the servers' replies said about the model's state. */
typedef struct zps_reply_info {
    uint64_t min_version; /* lowest model version among the shards */
    uint64_t max_version; /* highest model version among the shards */
    uint64_t min_clock;   /* lowest min_clock among the shards */
    uint64_t staleness;   /* push: largest staleness a shard recorded */
    uint64_t next_clock;  /* lowest clock a shard expects next from this worker: where
                           * to resume after being evicted and admitted again
                           * (ZPS_FLAG_REJOINED; a shard that is further on treats
                           * the clocks in between as retries) */
    uint32_t flags;       /* OR of the shards' ZPS_FLAG_* bits */
} zps_reply_info_t;

/*
 * Pulls the parameters for clock `clock` into out[n], where n is the model
 * size. Blocks until every shard allows the pull under its consistency rule
 * (for BSP: until the model for `clock` exists). Returns 0, ZPS_ETIMEDOUT,
 * ZPS_EUNREACHABLE, ZPS_EREMOTE (see zps_client_last_error) or another ZPS_E* code; `out` may
 * be partly written on failure. `info` may be NULL.
 */
int zps_client_pull(zps_client_t *c, uint64_t clock, float *out, uint64_t n,
                    zps_reply_info_t *info);

/*
 * As zps_client_pull for a caller that does not know the model size: learns
 * N from the servers and returns a malloc'd vector in *out (caller frees) and
 * its size in *n.
 */
int zps_client_pull_alloc(zps_client_t *c, uint64_t clock, float **out, uint64_t *n,
                          zps_reply_info_t *info);

/*
 * Pushes a gradient grad[n] computed on `batch` examples at clock `clock`.
 * Each shard's slice is sent without copying; the call returns only once
 * ZeroMQ has released `grad`, so the caller may reuse it at once. Returns 0
 * when every shard took it (info->flags tells whether it was buffered, a
 * retry, or dropped as late), or a ZPS_E* code.
 */
int zps_client_push(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n,
                    uint32_t batch, zps_reply_info_t *info);

/*
 * Asks server `index` for its statistics. *json is malloc'd (caller frees).
 */
int zps_client_stats(zps_client_t *c, size_t index, char **json);

/*
 * Asks every shard to write a checkpoint of its current version and waits
 * until each is on disk (or failed). *report is malloc'd (caller frees): one
 * line per shard, its JSON answer {"version":V,"path":"..."}. Returns 0 or a
 * ZPS_E* code (ZPS_EREMOTE: a shard without --checkpoint-dir, or a failed
 * write; see zps_client_last_error).
 */
int zps_client_checkpoint(zps_client_t *c, char **report);

/*
 * Tells every shard this worker is alive (no reply needed by the caller
 * beyond the acknowledgement). Returns 0 or a ZPS_E* code.
 */
int zps_client_heartbeat(zps_client_t *c);

/*
 * After a failed call: a one-line explanation naming the server, e.g.
 * "tcp://127.0.0.1:7101: range [5, 10) does not match shard 1/2 of 12 (ZPS_ERANGE)".
 * Valid until the next call on `c`.
 */
const char *zps_client_last_error(const zps_client_t *c);

/* After ZPS_EREMOTE: the server's status code (a ZPS_E* value). */
int zps_client_last_remote_status(const zps_client_t *c);

#endif
