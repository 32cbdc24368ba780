/*
 * conns.h - the connections a shard has accepted, and the limits that hold
 * whoever is at the other end: how many connections, how many from one
 * address, and how many bytes one of them may have sent that the shard has
 * not yet read.
 *
 * ZeroMQ hides connections behind the ROUTER socket, so they are followed
 * from outside it: the socket's monitor reports each accepted and each
 * closed connection by its file descriptor, and every message carries the
 * descriptor it arrived on (ZMQ_SRCFD, set in zps_peer_t by common/wire.c).
 *
 * - Counts. A connection beyond --max-connections, or beyond
 *   --max-connections-per-host from one address, is shut down as soon as its
 *   acceptance is reported (shutdown(2) on its descriptor; ZeroMQ then closes
 *   it). The soft descriptor limit is raised to the hard one at start, and
 *   the default connection limit keeps a quarter of the descriptors free, so
 *   accept(2) does not run out and the server keeps serving.
 * - Keyed (zps_conns_set_keyed): a connection is authenticated once the
 *   server has read a request from it that only a listed key could send
 *   (zps_conns_authenticated). The per-host limit then counts only the
 *   connections of an address that have not authenticated, and past either
 *   limit it is the oldest unauthenticated connection (of that address,
 *   then of all) that is shut down, not the new one, which may be a keyed
 *   client's: strangers from a client's address cannot lock it out, and
 *   authenticated connections are never shut down for the counts. Unkeyed,
 *   nothing tells connections apart: every one counts, the new one goes.
 * - Unread bytes. ZeroMQ keeps every frame of a message until its last
 *   frame arrives and counts messages, not bytes, against its queue limits:
 *   a peer that never finishes a message would grow the server without
 *   bound. So the kernel's count of bytes received on each TCP connection
 *   (TCP_INFO) is compared with the bytes of the complete messages the shard
 *   has read from it; a connection whose difference passes the peer buffer
 *   bound (the largest message the shard accepts, plus 8 MiB for the
 *   kernel's and ZeroMQ's buffers) is shut down. That also stops a payload
 *   larger than the shard's before it has arrived in full.
 * - Memory. Frames a few bytes long cost ZeroMQ more memory than they cost
 *   bytes on the wire, so the process's resident size is watched too: above
 *   the stated bound (zps_conns_set_limits), the connection with the most
 *   unread bytes among those that have not completed a message since the
 *   last check is shut down. So is it when all connections' unread bytes
 *   together pass their own bound.
 *
 * What is not watched: ipc:// connections (no TCP_INFO; local peers of the
 * same machine) and the bytes of a message that has arrived whole but is not
 * read yet (at most a drain's worth: the shard reads before it judges).
 *
 * Not here: what happens to a closed connection's waiting pulls (the
 * caller's `gone` callback; handlers.c cancels them). Loop thread only.
 */
#ifndef ZPS_CONNS_H
#define ZPS_CONNS_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "strbuf.h"

/* The most a request's header frame may add to its payload. */
#define ZPS_MAX_HEADER_BYTES (64ull << 10)
/* Bytes the kernel and ZeroMQ may hold for a connection beyond one message. */
#define ZPS_PEER_BUFFER_SLACK (8ull << 20)
/* What the process holds besides the shard's state and its peers' bytes. */
#ifdef ZPS_SANITIZED
/* AddressSanitizer keeps up to 256 MiB of freed memory in quarantine. */
#define ZPS_MEMORY_BASE (384ull << 20)
#else
#define ZPS_MEMORY_BASE (64ull << 20)
#endif
/* ZeroMQ's own buffers for one connection. */
#define ZPS_CONN_OVERHEAD (256ull << 10)
/* How often unread bytes and resident memory are checked, in ms. */
#define ZPS_CONNS_WATCH_MS 20

typedef struct zps_conn zps_conn_t;
typedef struct zps_conn_host zps_conn_host_t;
struct zps_conn_event;

typedef struct zps_conns {
    void *monitor;     /* PAIR socket: the ROUTER's connection events */
    zps_conn_t *by_fd; /* [cap], indexed by descriptor */
    size_t cap;
    zps_conn_host_t *hosts; /* [nhosts] addresses with open connections */
    size_t nhosts, hosts_cap;
    struct zps_conn_event *events; /* scratch: one batch of monitor events */
    int *due;                      /* scratch: descriptors to shut down after the batch */

    uint32_t open;  /* connections accepted and not yet closed */
    uint32_t going; /* of those, shut down (or due to be) by us */
    bool keyed;     /* the oldest unauthenticated connection gives way (zps_conns_set_keyed) */
    uint32_t anon;  /* keyed: open, not authenticated, not going */
    int32_t anon_head, anon_tail; /* keyed: the oldest and newest of those */
    uint32_t max;                 /* --max-connections */
    uint32_t per_host;            /* --max-connections-per-host; 0: no limit */
    uint64_t max_message;         /* the largest message accepted now */
    uint64_t peer_buffer;         /* unread bytes allowed per connection */
    uint64_t unread_total;        /* unread bytes allowed over all connections */
    uint64_t held;                /* bytes of the shard's state (zps_conns_set_limits) */

    uint64_t accepted, refused, closed_buffer, closed_memory, accept_failed, authenticated;
    uint64_t logged, log_window; /* rate limit: 10 warnings per 10 s */
    /* Unread bytes (as last checked) of the connections closed so far, and
     * when the last of them closed: memory ZeroMQ has given back to the
     * heap, for the server to hand back to the kernel (server.c). */
    uint64_t released, released_ns;
    uint64_t trimmed, trim_ns; /* `released` at the last trim, and its time (server.c) */
    uint64_t trims;            /* trims done (STATS connections.trims) */
} zps_conns_t;

/*
 * Raises the soft RLIMIT_NOFILE to the hard limit and returns the default
 * --max-connections for the result: three quarters of the descriptors, at
 * most 4096.
 */
uint32_t zps_conns_default_max(void);

/*
 * Starts following `router`'s connections (a ROUTER socket of context
 * `ctx`, not yet bound). Returns 0 or ZPS_ESOCKET / ZPS_ENOMEM.
 */
int zps_conns_open(zps_conns_t *c, void *ctx, void *router, uint32_t max, uint32_t per_host);

/* The descriptor to poll for events (edge-triggered, like ZMQ_FD), or -1. */
int zps_conns_fd(const zps_conns_t *c);

/* Stops following and frees everything (before the ROUTER is closed). */
void zps_conns_close(zps_conns_t *c);

/*
 * Reads every event reported so far: counts connections, shuts down those
 * beyond the limits, and calls gone(arg, fd) for each connection closed.
 */
void zps_conns_events(zps_conns_t *c, void (*gone)(void *arg, int fd), void *arg);

/* Keyed: past a count limit, unauthenticated connections give way, oldest first (see above). */
void zps_conns_set_keyed(zps_conns_t *c, bool keyed);

/*
 * Keyed: connection fd has sent a request that was authenticated (over
 * CURVE: any request, its handshake's key is listed; sealed: a message whose
 * session exists and whose tags verify). It no longer counts against
 * --max-connections-per-host and is never shut down for the counts.
 */
void zps_conns_authenticated(zps_conns_t *c, int fd);

/* Whether fd is a connection whose acceptance zps_conns_events has read. */
bool zps_conns_knows(const zps_conns_t *c, int fd);

/* A complete message of `wire_bytes` was read from connection `fd` (-1: unknown). */
void zps_conns_took(zps_conns_t *c, int fd, uint64_t wire_bytes);

/*
 * Sets the largest message the shard accepts now and the bytes its state
 * holds (parameters, optimizer state, buffered pushes, reply copies, a
 * checkpoint's copy). The other limits follow:
 *   peer buffer  = max_message + ZPS_PEER_BUFFER_SLACK   (per connection)
 *   unread total = max(4 * peer buffer, 64 MiB)          (all connections)
 *   memory bound = ZPS_MEMORY_BASE + held + open * ZPS_CONN_OVERHEAD
 *                  + unread total
 */
void zps_conns_set_limits(zps_conns_t *c, uint64_t max_message, uint64_t held);

/* The memory bound for the connections open now (0 before zps_conns_set_limits). */
uint64_t zps_conns_memory_bound(const zps_conns_t *c);

/*
 * Checks every open TCP connection's unread bytes against the peer buffer
 * bound, their sum against the unread total, and the resident size
 * (zps_conns_rss, read only when some connection holds enough unread bytes
 * to be closed for it) against the memory bound; shuts down the connections
 * that pass them, the one with the most unread bytes first. Call after a
 * drain that left nothing to read.
 */
void zps_conns_watch(zps_conns_t *c);

/* Writes the "connections" and "limits" STATS members (no braces around both). */
void zps_conns_json(const zps_conns_t *c, zps_strbuf_t *b);

/* The process's resident size in bytes (/proc/self/statm), or 0. */
uint64_t zps_conns_rss(void);

#endif
