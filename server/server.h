/*
 * server.h - zps-server's daemon: one shard behind a ZeroMQ ROUTER socket,
 * driven by a libuv loop. The public face of server/: a configuration and
 * the call that runs the shard.
 *
 * The loop (server.c) polls the socket's file descriptor, decodes each
 * request (common/wire.c) and hands it to its handler (handlers.c), which
 * asks the consistency rules (consistency/consistency.c) what to do, carries
 * out their decision on the store (store.c) and replies (reply.c). SIGINT
 * and SIGTERM stop it cleanly: waiting pulls are answered with
 * ZPS_ESHUTDOWN, the socket is closed with a linger, the loop ends.
 *
 * Checkpoints (checkpoint/checkpoint.h has the format) are written every
 * checkpoint_every versions, on SIGTERM and on a CHECKPOINT request: the loop
 * copies the shard's state, a threadpool thread writes and syncs it, and the
 * result comes back to the loop (ckpt_queue.c). Under BSP a checkpoint
 * records pushed[w] clamped to the version (zps_consistency_snapshot): a
 * push buffered for the step in progress is not saved, and its worker
 * pushes it again. The optimizer steps of a shard of at least
 * background_step_bytes (BSP's, and pushes applied on arrival under SSP and
 * ASP) run on a threadpool thread while the loop goes on serving what does
 * not touch the model (handlers.c, "steps"); smaller shards step on the
 * loop's thread.
 *
 * Not here: the command line (main.c), the daemon's internal state
 * (daemon.h).
 */
#ifndef ZPS_SERVER_H
#define ZPS_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "consistency.h"
#include "keys.h"
#include "optimizer.h"

typedef struct zps_server_config {
    const char *listen;        /* ZeroMQ endpoint to bind, e.g. tcp://127.0.0.1:7100 */
    const char *endpoint_file; /* if set, the bound endpoint is written there once listening */
    uint32_t shard_index;      /* this is shard I ... */
    uint32_t shard_count;      /* ... of S */
    zps_consistency_config_t consistency; /* mode, W, SSP bound, backups, lr scaling */
    zps_opt_config_t opt;
    /* SSP, ASP: each push applied on arrival is delay-compensated with this
     * lambda (optimizer/delay_comp.h), from a copy of the parameters last
     * sent to its worker; 0: off. */
    double delay_comp;
    const char *checkpoint_dir; /* where checkpoints go; NULL: none */
    uint64_t checkpoint_every;  /* also write one whenever the version is a multiple; 0: never */
    unsigned checkpoint_keep;   /* newest checkpoints kept per shard (>= 1) */
    bool resume;                /* start from the newest valid checkpoint in checkpoint_dir */
    const char *resume_from;    /* start from this checkpoint file */
    uint64_t worker_timeout_ms; /* evict a worker silent this long; 0: never */
    bool insecure;              /* allow a non-loopback endpoint without encryption */
    /* CURVE (docs/security.md): with both set the ROUTER is a CURVE server
     * with this key pair, admits only the keys listed in authorized_keys
     * (reloaded on SIGHUP) and checks every request against their roles.
     * Both NULL: no authentication. */
    const zps_keypair_t *curve_key; /* borrowed for the whole run */
    const char *authorized_keys;
    /* Sealed sessions (common/seal.h), with CURVE on a tcp:// endpoint: a
     * second, plain socket on the same address whose messages are sealed
     * with an AEAD under per-session keys granted over CURVE. seal_port 0
     * lets the system pick the port (clients learn it when granted). */
    bool no_seal;
    uint16_t seal_port;
    /* Shared-memory sessions (shm.h) for workers on this host that ask. */
    bool no_shm;
    const char *metrics_listen; /* HOST:PORT of the Prometheus endpoint (metrics.h); NULL: none */
    /* Limits that hold whoever the peer is (conns.h). The largest message
     * before the model is initialised; after, the shard's payload plus
     * ZPS_MAX_HEADER_BYTES when that is smaller. */
    uint64_t max_message_bytes;
    uint32_t max_connections;         /* 0: zps_conns_default_max() */
    int64_t max_connections_per_host; /* -1: a quarter of max_connections, >= 64; 0: none */
    /* Optimizer steps (BSP's, and pushes applied under SSP and ASP) of a
     * shard of at least this many bytes run off the loop's thread, and so do
     * the checks (CRC32C, finite scan) of the payloads as large it receives
     * (0: every step and check; UINT64_MAX: none). */
    uint64_t background_step_bytes;
    /* Fault injection: every step first waits this long (a slow server). */
    uint32_t step_delay_ms;
    /* Fault injection: every check off the loop's thread first waits this long. */
    uint32_t check_delay_ms;
} zps_server_config_t;

/* background_step_bytes by default: a step of 16 MiB takes milliseconds, its hand-off microseconds.
 */
#define ZPS_BACKGROUND_STEP_BYTES (16ull << 20)

/* Defaults: tcp://127.0.0.1:7100, shard 0/1, BSP, SGD. `consistency.workers` must still be set. */
void zps_server_config_default(zps_server_config_t *cfg);

/*
 * True when `endpoint` only accepts local peers: tcp on 127.0.0.0/8, ::1 or
 * localhost, or ipc:// and inproc://.
 */
bool zps_endpoint_is_local(const char *endpoint);

/*
 * Runs the shard until SIGINT or SIGTERM, on the calling thread (which must
 * be the process's only user of those signals). Blocks. cfg is borrowed for
 * the whole run. Returns 0 after a clean shutdown; ZPS_EIO with *unsaved
 * set to true when it stopped on SIGTERM without saving the shard's state
 * (its checkpoint failed, retries included; the reason is logged); or a
 * ZPS_E* code when it could not start (the reason is logged). `unsaved`
 * may be NULL; when not, it is written in every case.
 */
int zps_server_run(const zps_server_config_t *cfg, bool *unsaved);

#endif
