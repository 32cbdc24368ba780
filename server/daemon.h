/*
 * daemon.h - the long-lived state of one running shard, shared by the files
 * of server/ (internal: nothing outside server/ includes it).
 *
 * One zps_daemon_t lives on zps_server_run's stack for the daemon's life.
 * Everything in it outlives a request: the socket and loop handles, the
 * store, the consistency state machine, BSP's buffered gradients, liveness,
 * counters, the reply cache and the checkpoint queue. State of one request
 * travels in a zps_request_t (reply.h), never here.
 *
 * Not here: the loop's callbacks (server.c), what each request does
 * (handlers.c), how replies are built (reply.c), checkpoint jobs
 * (ckpt_queue.c). Every function below runs on the loop's thread.
 */
#ifndef ZPS_DAEMON_H
#define ZPS_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>
#include <zmq.h>

#include "assign.h"
#include "auth.h"
#include "ckpt_queue.h"
#include "conns.h"
#include "consistency.h"
#include "hist.h"
#include "metrics_http.h"
#include "reply_cache.h"
#include "shm.h"
#include "server.h"
#include "sessions.h"
#include "stats.h"
#include "store.h"

/* BSP: one buffered gradient per worker, kept where ZeroMQ received it
 * (in one buffer, or in the frames it came in). */
typedef struct zps_slot {
    bool full;
    zps_payload_t grad;
    uint32_t batch;
    float abs_max;             /* max|g[i]| of the push, or INFINITY (zps_message_t) */
    uint64_t update_staleness; /* what its step will record (the consistency decision's) */
} zps_slot_t;

/*
 * The step being taken (handlers.c, "Steps"): a BSP step, or under SSP and
 * ASP a push applied on arrival; its arguments and result, and while it
 * runs off the loop's thread, the push whose reply waits for it.
 */
typedef struct zps_step {
    uv_work_t work;
    struct zps_daemon *d; /* its daemon, set once at start */
    bool running;         /* queued or running on a threadpool thread */
    uint64_t clock;
    uint32_t k;           /* pushes, their ranks in d->ranks */
    double g_max;         /* the largest |g| of them */
    float *dst;           /* the reply copy written in the step's pass, or NULL */
    zps_reply_buf_t *buf; /* dst's reply-cache buffer, or NULL */
    int shm_buf;          /* dst's shared-memory buffer, or -1 */
    bool ok;              /* the step was finite, and taken */
    size_t where;         /* if not: where it would not have been */
    uint32_t crc;         /* of dst */
    uint32_t refused;     /* steps refused since the push below (or the tick) began them */
    /* The push that made the steps due, answered once they are taken. */
    bool answer_push;
    zps_peer_t push_peer;
    zps_header_t push_req;   /* its request (json NULL) */
    zps_header_t push_reply; /* its reply, as it stood before the steps */
    uint32_t push_reply_flags;
    /* SSP and ASP: the push applied on arrival (its payload the gradient),
     * at lr_scale times the scheduled rate; rc what the store said. */
    bool apply;
    zps_message_t apply_msg;
    double lr_scale;
    uint64_t update_staleness;
    int32_t dc_rank; /* its worker, when its gradient is delay-compensated first; else -1 */
    int rc;
} zps_step_t;

/*
 * A received payload being checked off the loop's thread (server.c,
 * "Checks"): its CRC32C verified and its values scanned before the message
 * is answered.
 */
typedef struct zps_check {
    uv_work_t work;
    struct zps_daemon *d; /* its daemon, set once at start */
    bool running;         /* queued or running on a threadpool thread */
    zps_message_t msg;    /* the message, received unchecked */
    int rc;               /* what the check said */
} zps_check_t;

typedef struct zps_daemon {
    const zps_server_config_t *cfg;
    uint64_t fingerprint; /* zps_fingerprint(cfg), computed once: cfg never changes */
    char endpoint[256];   /* the bound endpoint */
    char tag[64];         /* log tag, "shard I/S" */

    /* The loop (server.c). */
    uv_loop_t loop;
    uv_poll_t poll;
    uv_idle_t idle;
    uv_timer_t liveness;
    uv_poll_t conns_poll; /* the connection monitor's events */
    uv_timer_t watch;     /* unread bytes and memory, every ZPS_CONNS_WATCH_MS */
    uv_signal_t sigint, sigterm;
    uv_signal_t sighup; /* reloads the authorized keys (with authentication only) */
    uv_poll_t zap_poll; /* the ZAP handler's socket (with authentication only) */
    bool stopping;
    void *ctx;
    void *sock;
    zps_conns_t conns;           /* the accepted connections and their limits */
    zps_metrics_http_t *metrics; /* --metrics-listen's endpoint, or NULL */
    uv_timer_t publish;          /* publishes the metrics' text once a second */
    zps_auth_t auth;             /* the ZAP handler and the authorized keys (auth.h) */

    /* Sealed sessions (sessions.h): a plain ROUTER whose messages are
     * sealed, or NULL when the server grants none. */
    void *seal_sock;
    char seal_endpoint[256];
    uint16_t seal_port_bound;
    zps_conns_t seal_conns;
    zps_sessions_t sessions;
    uv_poll_t seal_poll, seal_conns_poll;

    /* The shard: its parameters, and the rules that say when they change. */
    zps_store_t store;
    zps_consistency_t *consistency;
    /* Shared data assignment (assign.h, docs/worker.md): on shard 0 only,
     * else NULL. Its plan comes with the workers' first lease request. */
    zps_assign_t *assign;
    zps_slot_t *slots; /* [W] */
    zps_step_t step;
    /* Delay compensation (--delay-compensation, handlers.c): the parameters
     * last sent to each worker, [W][store.len] in one block, and whether
     * any were (dc_sent[W]); the compensated gradient [store.len]. Made
     * once the model's size is known (zps_daemon_model_known); dc_failed
     * when that found no memory, and then every push is refused. */
    float *dc_pulled;
    bool *dc_sent;
    float *dc_grad;
    bool dc_failed;
    zps_check_t check;
    /* While a step or a check runs off the loop's thread, the first
     * request that touches the model (or comes from the connection the
     * step or check will answer) waits here, with what decoding it said,
     * and the sockets are not read past it (server.c); a SIGINT or SIGTERM
     * waits for the step or check too. */
    bool held;
    zps_message_t held_msg;
    int held_rc;
    int stop_signal;

    /* Scratch, reused by every BSP step and every batch of ready pulls. */
    uint32_t *ranks;       /* [W] */
    const float **grads;   /* [W] */
    zps_grad_segs_t *segs; /* [W] */
    uint32_t *batches;     /* [W] */
    uint64_t *tokens;      /* [tokens_cap] */
    size_t tokens_cap;

    /* Liveness, on the listening clock (zps_daemon_listening_ns). */
    uint64_t *last_seen_ns; /* [W] last message from each worker */
    uint64_t *evictions;    /* [W] */
    uint64_t listen_ns;     /* the listening clock at the last liveness tick */
    uint64_t tick_ns;       /* wall time (zps_now_ns) of the last liveness tick */
    uint64_t listen_cap_ns; /* most listening time one gap between ticks may add */

    /* Figures for STATS (stats.c). */
    zps_counters_t count;
    zps_vhist_t update_staleness; /* per applied push: updates between its pull and its step */
    zps_vhist_t clock_lag;        /* per push taken: clocks behind the furthest pushed */
    uint64_t furthest_clock;      /* the furthest clock any push taken has had */
    zps_thist_t pull_wait;        /* workers' pulls: time parked */
    uint64_t started_ns;

    /* At most 20 warnings about bad requests per 10-second window (reply.c). */
    uint64_t errors_logged;
    uint64_t error_log_window;

    zps_reply_cache_t reply_cache;    /* pull payloads for workers */
    zps_reply_cache_t observer_cache; /* pull payloads for observers (worker -1) */
    /* The same in bfloat16, for the clients that ask for it (ZPS_FLAG_BF16). */
    zps_reply_cache_t reply_cache16;
    zps_reply_cache_t observer_cache16;
    zps_shm_t shm; /* the shared-memory segment, once a worker asks (shm.h) */
    zps_ckpt_queue_t ckpts;
} zps_daemon_t;

/*
 * Handles what the socket holds, up to a budget (server.c). Whoever sends a
 * reply outside the socket's own callback (a timer, a signal, a finished
 * checkpoint) calls it afterwards: ZMQ_FD is edge-triggered, and a send can
 * consume the edge that announced a request.
 */
void zps_daemon_drain(zps_daemon_t *d);

/*
 * The listening clock, in ns: wall time during which the loop could have
 * heard from a worker. It advances with wall time, except that a gap
 * between liveness ticks longer than their period (the process was
 * stopped, or the machine starved it) counts for one period only. Worker
 * silences are measured on it (server.c).
 */
uint64_t zps_daemon_listening_ns(const zps_daemon_t *d);

/*
 * The model is known (INIT, or a resumed checkpoint), or the shared-memory
 * segment was just made: the limits that depend on the shard's size and on
 * what it holds follow (server.c; conns.h).
 */
void zps_daemon_model_known(zps_daemon_t *d);

/*
 * The steps that ran off the loop's thread are all taken and answered
 * (handlers.c), or a check off it is answered (server.c): the held request
 * is served, or a signal that came meanwhile acted on, and the sockets are
 * read again.
 */
void zps_daemon_steps_done(zps_daemon_t *d);

#endif
