/*
 * zps/zps.h - libzps, the client side of the zps protocol: the public
 * interface of libzps.so (and of the static archive zps's own programs link).
 *
 * Build against an installed zps with `pkg-config --cflags --libs zps`
 * (docs/client.md has a complete example). Only what this header and
 * zps/errors.h declare is exported; no ZeroMQ, protobuf or libsodium type
 * crosses it.
 *
 * A client talks to the S servers of one cluster (one ZeroMQ DEALER socket
 * each, in shard order: endpoint i must be the server started with
 * --shard i/S). Every call sends its requests to all shards before waiting for
 * any reply, assembles or splits the full model vector by the range rule of
 * common/shard.h, and checks that every server's idea of the model (N, its
 * range) agrees with the client's. The API speaks in floats, clocks and
 * booleans; no wire bits or ZeroMQ types cross it.
 *
 * Calls block until every shard has answered or the call's timeout expires.
 * A call that times out returns ZPS_EUNREACHABLE when a server it still
 * waited for could not be connected to at any moment of the call (nothing
 * listens there, or not a zps server), and ZPS_ETIMEDOUT when every such
 * server was connected but did not answer (a pull that its consistency rule
 * holds back, or a server that is stuck). While it waits, the call logs
 * (common/log.h) which server and request it waits for: see wait_log_ms.
 * An unanswered request is sent again every `retry_ms` (doubling up to 8 s),
 * one that carries values (INIT, PUSH, an exchange) only once the connection
 * it went out on has ended since (TCP loses nothing while it lasts); that is
 * safe because every request is idempotent on the server: a resent
 * INIT carries the values already sent, which a shard acknowledges without
 * change (see zps_client_init); a push already taken is acknowledged without
 * being applied again; a repeated pull is answered once.
 *
 * Configuration: the shards of one model must run the same configuration
 * (mode, W, SSP bound, backup workers, optimizer and schedule, S). Every
 * server reports a fingerprint of it in every reply (docs/protocol.md). The
 * client checks that the shards agree before an INIT and on every pull, and
 * states the agreed fingerprint in its INIT and PUSH requests, which a shard
 * of another configuration refuses (ZPS_ECONFIG) before anything changes. A
 * client that has not learned it yet (no INIT or pull so far) states none,
 * and its pushes are not checked.
 *
 * Liveness: a worker's client (worker >= 0, heartbeat_ms > 0) runs a
 * background thread with sockets of its own that tells every server the
 * worker is alive every heartbeat_ms, so servers started with
 * --worker-timeout do not evict a worker that is merely slow to compute.
 *
 * Threading: a client is used by one thread at a time (its heartbeat thread
 * is its own business). Different clients are independent.
 *
 * Process-wide effects, all stated here: the first zps_client_new tunes
 * malloc for large payloads unless opts.keep_malloc (below); a worker's
 * client runs one heartbeat thread of its own; pushes of large models may
 * use a small pool of helper threads shared by the process's clients
 * (sealing a payload). Log records go to stderr unless zps_set_log_fn
 * routes them elsewhere.
 *
 * Versions: ZPS_ABI_VERSION is the library's SOVERSION (libzps.so.N); it
 * changes when a function changes its meaning or a struct below changes
 * the layout of what it has. zps_abi_version() says which one the loaded
 * library is: a binding checks that it equals the ZPS_ABI_VERSION it was
 * built with. The two structs a caller hands in, zps_client_opts_t and
 * zps_reply_info_t, start with their `size` as the caller knows it:
 * later versions of the library only add fields at their end, read and
 * write no byte past `size`, and take a missing option as its default.
 *
 * Not here: the message bytes (common/wire.h, docs/protocol.md); what a
 * server does with each request and when a pull is allowed (server/,
 * consistency/); the training loop that drives a client (worker/trainer.h).
 */
#ifndef ZPS_ZPS_H
#define ZPS_ZPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZPS_ABI_VERSION 1

/* The ABI version of the library this program runs with (ZPS_ABI_VERSION of its build). */
ZPS_API int zps_abi_version(void);

/* Log records' levels. */
enum zps_log_level {
    ZPS_LOG_DEBUG = 0,
    ZPS_LOG_INFO = 1,
    ZPS_LOG_WARN = 2,
    ZPS_LOG_ERROR = 3,
    ZPS_LOG_OFF = 4,
};

/*
 * Where log records go: fn(level, message, ctx) for each record at or above
 * the level (message without time, level or newline; valid during the
 * call), from whichever thread logs, the heartbeat thread included; fn must
 * be thread-safe and must not call into libzps. NULL: back to one line on
 * stderr each. Process-wide; set it before making clients.
 */
typedef void (*zps_log_fn)(enum zps_log_level level, const char *message, void *ctx);
ZPS_API void zps_set_log_fn(zps_log_fn fn, void *ctx);

/* Records below `level` are dropped (default ZPS_LOG_INFO). Process-wide. */
ZPS_API void zps_set_log_level(enum zps_log_level level);

typedef struct zps_client zps_client_t;

typedef struct zps_client_opts {
    size_t size;      /* sizeof(zps_client_opts_t) as the caller was built: zps_client_opts_default
                       * sets it; smaller than this version's first struct is ZPS_EINVAL */
    int worker;       /* this process's rank, or -1 for tools and observers */
    bool observe;     /* worker -1: a pull for clock t is answered with the model of clock t
                       * once it exists (BSP: version t; SSP/ASP: every worker has pushed every
                       * clock before t), not at once with the current one */
    bool observe_pushes; /* with observe: the model of clock t is the one once t * W pushes
                          * are in, or once every worker has finished (a shared data
                          * assignment, whose workers run different numbers of clocks) */
    int timeout_ms;   /* each call gives up after this long; -1: wait forever */
    int retry_ms;     /* resend an unanswered request after this long; 0: never */
    int heartbeat_ms; /* worker >= 0: say "alive" this often from a background thread; 0: never */
    int wait_log_ms;  /* a call still waiting after this long logs what it waits for (which
                       * server, which request, for how long), then again every 3 times as
                       * long; 0: never */
    /* A one-shot caller (the zps tool): a server whose connection is refused
     * (nothing listens at a tcp:// port, no ipc:// socket there) ends the
     * call at once with ZPS_EUNREACHABLE, zps_client_last_error saying
     * "ENDPOINT: connection refused", within about a second rather than at
     * the deadline. Otherwise (a worker at a cluster's start) the call keeps
     * waiting, ZeroMQ connects again every 100 ms, and with wait_log_ms > 0
     * the first failed attempt is logged at once, with its reason:
     * "waiting for server I at ENDPOINT: connection refused, retrying". */
    bool fail_on_refused;
    /* A one-shot caller: a pull before the model is initialised is refused
     * by the server at once (ZPS_EREMOTE, zps_client_last_remote_status
     * ZPS_ENOTINIT) rather than held until INIT, as a worker's is. */
    bool fail_not_initialised;
    /* CURVE (docs/security.md). When `curve` is set every socket of the
     * client is a CURVE client with this key pair (binary, 32 bytes each,
     * as common/keys.h's zps_keypair_load reads them) that only talks to a
     * server holding the secret of curve_server_key (zps_pubkey_load). The
     * client keeps its own copy, cleared when it is freed. A handshake the
     * server refuses (an unlisted key), or one that never completes on a
     * connected socket (a wrong server key), fails the call with ZPS_EAUTH
     * and zps_client_last_error says "authentication failed for ENDPOINT":
     * a refusal as soon as it is reported, a silent one at the call's
     * deadline. A request the server refuses for the key's role is
     * ZPS_EREMOTE with zps_client_last_remote_status ZPS_EDENIED. */
    bool curve;
    /* With CURVE on tcp://, each connection also asks its server for a
     * sealed session (common/seal.h) and, once granted, sends its requests
     * sealed with an AEAD over a second, plain connection: CURVE then
     * carries only the handshake, the session's key and heartbeats. A
     * server that grants none (--no-seal, an older one) is used over CURVE
     * alone. `no_seal` keeps every byte on CURVE. */
    bool no_seal;
    /* Gradients and parameters travel as bfloat16 (common/bf16.h): half
     * the bytes, for links slower than memory. A push's gradient is rounded
     * with error feedback: the client keeps, per element, what rounding
     * left out and adds it to its next push, so the rounding does not
     * accumulate over clocks. Pulls and exchanges return the server's
     * float32 parameters rounded to bfloat16. INIT always sends float32. */
    bool wire_bf16;
    /* A worker (worker >= 0) asks each server for a shared-memory session
     * (server/shm.h): when the server is on this host and grants one, the
     * gradients and parameters move through shared memory and the socket
     * carries only headers. A server elsewhere, one that grants none
     * (--no-shm) or a connection that drops falls back to the socket. Not
     * with wire_bf16. */
    bool shm;
    /* Leaves the process's malloc settings as they are. Otherwise the first
     * zps_client_new sets them for large payloads (zps_wire_tune_malloc in
     * common/wire.h: buffers up to 32 MiB from the heap, freed memory kept
     * for the next message), without which every reply of more than 1 MiB
     * is received into freshly mapped pages. */
    bool keep_malloc;
    uint8_t curve_public_key[32];
    uint8_t curve_secret_key[32];
    uint8_t curve_server_key[32];
} zps_client_opts_t;

/* worker -1, timeout 30 s, retry 1 s, heartbeat 1 s (only used when worker >= 0),
 * wait log after 10 s and then every 30 s, no CURVE; and `size`. */
ZPS_API void zps_client_opts_default(zps_client_opts_t *opts);

/*
 * Turns CURVE on in opts with the secret key file key_file (PREFIX.key:
 * refused when group or others may read it) and the server's public key
 * file server_key_file (SERVER.pub), read with common/keys.h. Returns 0, or
 * that module's ZPS_EIO / ZPS_EINVAL / ZPS_ENOMEM with the reason in why
 * (naming the file); opts is changed only on success. Blocks on the file
 * system. The caller clears opts's secret (zps_client_opts_clear) once it
 * has made its client.
 */
ZPS_API int zps_client_opts_set_keys(zps_client_opts_t *opts, const char *key_file,
                                     const char *server_key_file, char *why, size_t why_size);

/* Overwrites the secret key in opts with zeros, in a way the compiler keeps. */
ZPS_API void zps_client_opts_clear(zps_client_opts_t *opts);

/*
 * Connects to `count` servers (ZeroMQ endpoints such as
 * "tcp://127.0.0.1:7100"). Connection is lazy: a server may start later, and
 * the call does not block on the network. The endpoint strings are copied;
 * `opts` may be NULL (zps_client_opts_default). Starts the heartbeat thread
 * when opts asks for one. Returns 0, ZPS_EINVAL (no endpoints, a malformed
 * endpoint), ZPS_EIO or ZPS_ENOMEM; *out is written only on success.
 */
ZPS_API int zps_client_new(const char *const *endpoints, size_t count,
                           const zps_client_opts_t *opts, zps_client_t **out);

/*
 * Stops the heartbeat thread, closes the sockets (dropping whatever is still
 * queued) and frees the client. NULL is a no-op.
 */
ZPS_API void zps_client_free(zps_client_t *c);

/* The number of servers (shards) the client was made with. */
ZPS_API size_t zps_client_server_count(const zps_client_t *c);

/*
 * Sets the initial model: values[n] is split by shard and sent. First, before
 * anything changes anywhere:
 *   - a non-finite value is refused here: ZPS_ENONFINITE, nothing is sent;
 *   - every shard is asked which configuration it runs (an observer's
 *     HEARTBEAT); when they differ the call returns ZPS_ECONFIG, no INIT is
 *     sent, and zps_client_last_error names the shards and the settings
 *     that differ ("... shard 1 at tcp://h:7101 differs from shard 0 at
 *     tcp://h:7100 in workers (3, not 2)");
 *   - a shard that says it would refuse (it is another shard than its place
 *     in the list, or holds another N) is sent the INIT alone, so that its
 *     refusal (ZPS_EREMOTE) leaves every other shard as it was.
 * What a shard does with an INIT (server/handlers.c, docs/protocol.md):
 *   - the first INIT it receives sets its slice of the model;
 *   - a later INIT of the same size is acknowledged and changes nothing
 *     when it carries the same values, or when the model has already taken
 *     a step (version > 0), whatever its values;
 *   - a later INIT of the same size with other values, before any step, is
 *     refused: ZPS_EREMOTE with the server's ZPS_EINITED;
 *   - a later INIT of another size is refused: ZPS_EREMOTE with ZPS_ESIZE.
 * Returns 0, ZPS_EINVAL (n is 0 or values NULL), ZPS_ENONFINITE, ZPS_ECONFIG
 * or another ZPS_E* code. `values` is only read, and not after the call
 * returns. Blocks.
 */
ZPS_API int zps_client_init(zps_client_t *c, const float *values, uint64_t n);

/* Leases a worker holds at most (consistency/assign.h's ZPS_ASSIGN_MAX_HELD). */
#define ZPS_CLIENT_MAX_LEASES 8

/*
 * Shared data assignment (docs/worker.md): what a worker's next call asks
 * of shard 0. The batches are numbered g = e * B + j over the run's plan
 * (N examples, b per batch, E epochs; B = ceil(N / b)).
 */
typedef struct zps_lease_req {
    size_t size;       /* sizeof(zps_lease_req_t) as the caller was built */
    uint64_t examples; /* the plan: N */
    uint32_t batch;    /*   b */
    uint32_t epochs;   /*   E */
    uint32_t want;     /* leases to hold after the answer (<= ZPS_CLIENT_MAX_LEASES) */
    uint32_t nhave;    /* the leases this worker still has, not yet pushed */
    uint64_t have[ZPS_CLIENT_MAX_LEASES];
    uint64_t done;     /* push, exchange: g + 1 of the batch the gradient is of; 0: none */
} zps_lease_req_t;

/*
 * The next zps_client_pull, zps_client_push or zps_client_exchange carries
 * `req` to shard 0 (copied; NULL clears it): a pull or an exchange asks for
 * leases (the answer in zps_reply_info_t), a push or an exchange names the
 * batch it completes. Used by that one call. Returns 0, or ZPS_EINVAL for
 * more than ZPS_CLIENT_MAX_LEASES leases or a `size` too small.
 */
ZPS_API int zps_client_set_lease(zps_client_t *c, const zps_lease_req_t *req);

/*
 * A worker with no batch left tells every shard that it finishes: SSP's
 * bound and an observer's final model no longer wait for it. Returns 0 or
 * a ZPS_E* code. Blocks.
 */
ZPS_API int zps_client_finish(zps_client_t *c);

/*
 * What the servers' replies said about the model's state. The numbers are
 * combined over the shards as each field says; a boolean is true when at
 * least one shard said so. The caller sets `size` before the call (in C:
 * `zps_reply_info_t info = ZPS_REPLY_INFO_INIT;`); a call given one with a
 * `size` too small for this version's first struct returns ZPS_EINVAL and
 * sends nothing. A call writes it on every return but ZPS_EINVAL (zeros
 * where no shard's reply said anything); it means something after a 0, and
 * after ZPS_EPARTIAL from a push or an exchange.
 */
typedef struct zps_reply_info {
    size_t size;               /* sizeof(zps_reply_info_t) as the caller was built */
    uint64_t min_version;      /* lowest model version among the shards */
    uint64_t max_version;      /* highest model version among the shards */
    uint64_t min_clock;        /* lowest min_clock among the shards */
    uint64_t update_staleness; /* push: the largest update staleness a shard recorded */
    uint64_t next_clock;       /* lowest clock a shard expects next from this worker: where
                                * to resume after being evicted and admitted again
                                * (`rejoined`; a shard that is further on treats the
                                * clocks in between as retries) */
    bool retried;       /* push: a shard had already taken this push; it was not applied again */
    bool dropped;       /* push: a shard dropped it as too late for its step (backup workers) */
    bool buffered;      /* push: a shard keeps it until its clock's synchronous step is taken */
    bool rejoined;      /* a shard had evicted this worker and has admitted it again */
    uint64_t waited_us; /* pull, exchange: the longest a shard held it for its rule (the BSP
                         * barrier, the SSP bound), in microseconds */
    /* A lease request's answer (zps_client_set_lease), from shard 0: this
     * worker's leases as the shard has them, oldest first, and whether any
     * batch is left to hand out. `leased` false: the call carried none. */
    bool leased;
    bool exhausted;
    uint32_t nleases;
    uint64_t leases[ZPS_CLIENT_MAX_LEASES];
} zps_reply_info_t;

#define ZPS_REPLY_INFO_INIT {.size = sizeof(zps_reply_info_t)}

/*
 * Pulls the parameters for clock `clock` into out[n], where n is the model
 * size. Blocks until every shard allows the pull under its consistency rule
 * (for BSP: until the model for `clock` exists; before any INIT: until the
 * model is initialised). Returns 0; ZPS_EINVAL (n is 0 or out NULL);
 * ZPS_ETIMEDOUT or ZPS_EUNREACHABLE (see above); ZPS_ESIZE or ZPS_ERANGE
 * when the servers' model or ranges disagree with n or the range rule;
 * ZPS_ECONFIG when the shards' configurations differ (as for
 * zps_client_init); ZPS_ECHECKSUM; ZPS_EREMOTE (see zps_client_last_error);
 * or another ZPS_E* code. `out` may be partly written on failure. `info` may be NULL.
 */
ZPS_API int zps_client_pull(zps_client_t *c, uint64_t clock, float *out, uint64_t n,
                            zps_reply_info_t *info);

/*
 * As zps_client_pull for a caller that does not know the model size: learns
 * N from the servers and returns a malloc'd vector in *out (caller frees) and
 * its size in *n, both written only on success.
 */
ZPS_API int zps_client_pull_alloc(zps_client_t *c, uint64_t clock, float **out, uint64_t *n,
                                  zps_reply_info_t *info);

/*
 * Pushes a gradient grad[n] computed on `batch` examples at clock `clock`.
 * Each shard's slice is sent without copying; the call returns only once
 * ZeroMQ has released `grad`, so the caller may reuse it at once. The call
 * waits for every shard's answer, even after one refused. Returns:
 *   - 0 when every shard took it (info->retried, ->dropped and ->buffered
 *     tell what became of it);
 *   - ZPS_ENONFINITE when a value is NaN or infinite: refused here, before
 *     any shard sees any of it;
 *   - ZPS_EPARTIAL when some shards took it and others did not (refused it,
 *     or did not answer in time). This is not "nothing happened": the
 *     shards named by zps_client_push_taken have applied, buffered or
 *     acknowledged it. zps_client_last_error names those shards and why the
 *     others did not take it; zps_client_last_remote_status is the first
 *     refusing shard's code (0 if none refused, they only did not answer);
 *     `info` is filled from the shards that took it. Pushing the same
 *     gradient at the same clock again is safe: a shard that took it
 *     acknowledges it as a retry and does not apply it twice.
 *   - otherwise, when no shard took it: ZPS_EINVAL (n is 0 or grad NULL),
 *     ZPS_EREMOTE (every shard refused; the first refusal is reported),
 *     ZPS_ETIMEDOUT or ZPS_EUNREACHABLE (a shard did not answer, none said
 *     it took it), or another ZPS_E* code.
 * `info` may be NULL. Blocks.
 */
ZPS_API int zps_client_push(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n,
                            uint32_t batch, zps_reply_info_t *info);

/*
 * One exchange per clock: pushes grad[n] (computed on `batch` examples at
 * clock `clock`) and pulls the parameters for clock + 1 into out[n], one
 * message each way per shard: a shard answers once its rule allows the pull
 * (under BSP, once the step of `clock` is taken). `out` may not overlap
 * `grad`. Returns what zps_client_push returns for the push (ZPS_EPARTIAL
 * included: zps_client_push_taken says who took it; `out` is then not
 * usable), or, when every shard took the push, what zps_client_pull returns
 * for the pull. `info` carries both (retried/dropped/buffered and the
 * versions, clocks and wait of the pull). A failed exchange may be repeated
 * as it was: a shard that took the push acknowledges it as a retry, and
 * answers the pull again. Blocks.
 */
ZPS_API int zps_client_exchange(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n,
                                uint32_t batch, float *out, zps_reply_info_t *info);

/*
 * A staged exchange: zps_client_exchange for a gradient that becomes final
 * piece by piece (a backward pass produces the last layers' gradients
 * first), so that each shard's request leaves as soon as its slice is
 * final and its transfer overlaps the computation of the rest.
 *
 * zps_client_exchange_begin prepares the exchange of grad[n] (of `batch`
 * examples at `clock`; the lease request too, as zps_client_exchange) and
 * sends nothing. zps_client_exchange_ready(c, lo, hi) says grad[lo, hi)
 * is final: every shard whose whole slice (the range rule) is now final
 * is checked finite and sent at once, without blocking; the caller keeps
 * the slice unchanged until the end. Each element is declared at most
 * once (ZPS_EINVAL otherwise); they may come in any order.
 * zps_client_exchange_end sends the slices not declared yet and waits, as
 * zps_client_exchange does (its timeout counted from here), for the
 * replies: the parameters of clock + 1 go to out[n] (which must not
 * overlap grad, and is not written before this call); its return and
 * `info` are zps_client_exchange's. Between begin and end no other call
 * may be made on `c` (ZPS_EBUSY); every begin that returned 0 must be
 * ended.
 *
 * One difference: a slice found non-finite when its shard is about to be
 * sent is not sent, nor are the slices after it; the shards sent before
 * have the push. End then returns ZPS_ENONFINITE when no shard was sent,
 * else ZPS_EPARTIAL naming who took it (zps_client_push_taken), and the
 * same exchange with a finite gradient may be repeated (a shard that took
 * it acknowledges a retry).
 *
 * Returns: begin 0, ZPS_EINVAL, ZPS_EBUSY or ZPS_ENOMEM; ready 0,
 * ZPS_EINVAL (no exchange begun, a range past n, an element declared
 * twice), ZPS_ENONFINITE (a slice was refused; end still comes) or a
 * send's failure (the call's, which end returns); end as
 * zps_client_exchange, ZPS_EINVAL when no exchange was begun or `info`'s
 * size is too small (the exchange is still completed, info not written).
 */
ZPS_API int zps_client_exchange_begin(zps_client_t *c, uint64_t clock, const float *grad,
                                      uint64_t n, uint32_t batch, float *out);
ZPS_API int zps_client_exchange_ready(zps_client_t *c, uint64_t lo, uint64_t hi);
ZPS_API int zps_client_exchange_end(zps_client_t *c, zps_reply_info_t *info);

/*
 * After zps_client_push or zps_client_exchange: true when shard `index` took that push (it answered
 * OK: applied, buffered, acknowledged as a retry, or dropped as too late).
 * False for an index out of range. Valid until the next call on `c`.
 */
ZPS_API bool zps_client_push_taken(const zps_client_t *c, size_t index);

/*
 * Asks server `index` (only that one) for its statistics. Returns 0 with
 * *json malloc'd (caller frees), ZPS_EINVAL for an index >= the server
 * count, or another ZPS_E* code; *json is written only on success. Blocks.
 */
ZPS_API int zps_client_stats(zps_client_t *c, size_t index, char **json);

/*
 * Asks every shard to write a checkpoint of its current version and waits
 * until each is on disk (or failed). *report is malloc'd (caller frees): one
 * line per shard, its JSON answer {"version":V,"path":"..."}; written only
 * on success. Returns 0 or a ZPS_E* code (ZPS_EREMOTE: a shard without
 * --checkpoint-dir, or a failed write; see zps_client_last_error). Blocks.
 */
ZPS_API int zps_client_checkpoint(zps_client_t *c, char **report);

/*
 * Asks every shard to read its authorized keys file again (an admin key's
 * request; docs/security.md) and waits for each. *report is malloc'd
 * (caller frees): one line per shard, {"keys":N}; written only on success.
 * Returns 0 or a ZPS_E* code: ZPS_EREMOTE when a shard refused (the key's
 * role, no --authorized-keys, a file that does not load: that shard keeps
 * its list; see zps_client_last_error). Blocks.
 */
ZPS_API int zps_client_reload_keys(zps_client_t *c, char **report);

/*
 * After a failed call: a one-line explanation naming the server, e.g.
 * "tcp://127.0.0.1:7101: range [5, 10) does not match shard 1/2 of 12 (ZPS_ERANGE)".
 * Owned by `c`; valid until the next call on `c`. Empty after a success.
 */
ZPS_API const char *zps_client_last_error(const zps_client_t *c);

/*
 * Why the last attempt to connect to server `index` failed, as an errno
 * value (ECONNREFUSED: nothing listens there), or 0 when none failed since
 * the last connection was made (or the reason could not be told, or index
 * is out of range). Kept across calls: a worker's wait log may say what it
 * waits for. Never blocks.
 */
ZPS_API int zps_client_connect_error(const zps_client_t *c, size_t index);

/*
 * Checks that endpoint is one a client can use: tcp://HOST:PORT (HOST a
 * name, an IPv4 address or [IPv6]; PORT 1..65535) or ipc://PATH. Returns 0,
 * or ZPS_EINVAL with why saying the expected form and naming the entry.
 */
ZPS_API int zps_client_check_endpoint(const char *endpoint, char *why, size_t why_size);

/* After ZPS_EREMOTE: the server's status code (a ZPS_E* value). */
ZPS_API int zps_client_last_remote_status(const zps_client_t *c);

#ifdef __cplusplus
}
#endif

#endif
