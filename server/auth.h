/*
 * auth.h - who may talk to this shard, and what each may do: the ZAP
 * handler that admits CURVE clients whose public key is in the authorized
 * keys list, and the per-request check of the authenticated key against it
 * (docs/security.md).
 *
 * The ZAP handler is a REP socket bound to inproc://zeromq.zap.01 in the
 * server's ZeroMQ context, before the ROUTER binds. ZeroMQ's I/O thread asks
 * it about every CURVE handshake; the daemon's loop polls its ZMQ_FD and
 * answers without blocking (zps_auth_serve): 200 with the key's Z85 as the
 * User-Id for a listed key, 400 otherwise (logged, at most 10 per 10 s, with
 * the peer's address). Every request's header frame then carries that
 * User-Id (common/wire.c puts it in zps_peer_t.user), and zps_auth_allows
 * checks it against the list in force, so a key removed by a reload is
 * refused from its next request, even on a connection opened before.
 *
 * Every function runs on the loop's thread. Only zps_auth_open and
 * zps_auth_reload block (they read the authorized keys file, at most
 * ZPS_KEYS_FILE_MAX bytes).
 *
 * Not here: key files and the list's format and rules (common/keys.h); the
 * CURVE options of the ROUTER (server.c).
 */
#ifndef ZPS_AUTH_H
#define ZPS_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keys.h"
#include "wire.h"

typedef struct zps_auth {
    const char *path; /* the authorized keys file (borrowed); NULL: authentication is off */
    uint32_t workers; /* every rank in the file must be below it */
    zps_authkeys_t *keys;
    void *zap;           /* the REP socket, or NULL */
    uint64_t refused;    /* handshakes refused (400) */
    uint64_t logged;     /* refusals logged in the current window */
    uint64_t log_window; /* the window's start, in ns */
    uint64_t denied;     /* requests refused with ZPS_EDENIED */
} zps_auth_t;

/*
 * Loads the list at path and binds the ZAP handler in ctx. Returns 0, or a
 * ZPS_E* code after logging why (the file cannot be read or is refused;
 * the socket cannot be bound). On failure zps_auth_close still releases
 * what was acquired.
 */
int zps_auth_open(zps_auth_t *a, void *ctx, const char *path, uint32_t workers);

/* The ZAP socket's ZMQ_FD (edge-triggered), for the loop to poll; -1 when off. */
int zps_auth_fd(const zps_auth_t *a);

/* Answers every ZAP request that has arrived. Never blocks. */
void zps_auth_serve(zps_auth_t *a);

/*
 * Reads the authorized keys file again, for `who` ("SIGHUP", or the
 * request's sender, in the log). All or nothing: on success the new list
 * replaces the old (logged with its size); on failure the old list stays in
 * force and the reason is logged and written to why. Returns 0 (also
 * without authentication: nothing to reload) or the ZPS_E* code.
 */
int zps_auth_reload(zps_auth_t *a, const char *who, char *why, size_t why_size);

/* How many keys the list in force holds (0 without authentication). */
size_t zps_auth_key_count(const zps_auth_t *a);

/*
 * Whether the request `hdr`, received from `peer`, may run: true when
 * authentication is off; otherwise the peer's authenticated key must be
 * allowed the request's access (zps_auth_access) by the list in force.
 * When not, why says what the key may not do. Does not block.
 */
bool zps_auth_allows(zps_auth_t *a, const zps_peer_t *peer, const zps_header_t *hdr, char *why,
                     size_t why_size);

/*
 * What a request asks for, and as which worker. INIT, CHECKPOINT and STATS
 * are their own; PUSH and PULL with worker >= 0 act as that worker; a PULL
 * with worker < 0 is an observer's; a HEARTBEAT acts as its worker, and
 * one with worker < 0 (a client asking every shard for its configuration
 * fingerprint before an INIT) learns no more than STATS tells, so it needs
 * what STATS needs. Returns false for an unknown type.
 */
bool zps_auth_access(const zps_header_t *hdr, zps_access_t *what, long *worker);

/* Closes the ZAP socket and frees the list. Safe on a zeroed or closed one. */
void zps_auth_close(zps_auth_t *a);

#endif
