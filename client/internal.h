/*
 * client/internal.h - what libzps's rooms share (include/zps/zps.h is what
 * it promises). Not installed; outside client/ only the seam's unit test
 * (tests/unit/test_client_session.c) includes it.
 *
 * A client holds one conn_t per shard. Its parts and the room that owns each:
 *   conn.c       the DEALER socket to the server and its monitor (up, drops,
 *                connect_errno, auth_failed): opened, read, replaced; and
 *                the plain session, the socket as a carrier
 *   sealed.c     the sealed session: its own struct, private to it
 *   shm.c        the shared-memory session: likewise
 *   heartbeat.c  the heartbeat thread and its own sockets
 *   call.c       the call engine: begin, send through the sessions, take
 *                replies, resend, wait logs; the zero-copy count and the
 *                last error
 *   slices.c     a vector cut into the shards' slices: checksums, the
 *                finite check, bfloat16 narrowing with error feedback
 *   config.c     the shards' configuration fingerprints and the INIT probe
 *   client.c     the verbs of zps/zps.h, built from the rooms above
 */
#ifndef ZPS_CLIENT_INTERNAL_H
#define ZPS_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "wire.h"
#include "zps/zps.h"

/*
 * The largest frame a client takes from a server's socket (ZMQ_MAXMSGSIZE;
 * a larger one ends the connection before it is allocated): a header with
 * its JSON (a STATS reply) or a payload frame, which a server cuts at
 * ZPS_WIRE_FRAME_BYTES. A sealed socket carries a payload in one frame: its
 * bound is the model's size when the client knows it (seal_granted).
 */
#define REPLY_FRAME_MAX ((int64_t)16 << 20)

/*
 * ---- sessions ----
 *
 * A session carries a connection's requests and brings back their replies:
 * the plain socket (conn.c), the sealed session (sealed.c), the shared-
 * memory session (shm.c), or a test's. A connection offers each request to
 * its sessions in order (conn_t.sessions; the plain socket is last and
 * takes everything), reads replies from each, and polls what each asks
 * for. A session learns that its connection dropped from conn_t.drops,
 * which only conn.c writes, and ends itself then: nothing else ends it.
 * Its own ends, which may lose what was sent on it, it counts in `lost`:
 * the call engine sends a request that is still unanswered again at once.
 */
#define SESSION_PASS 1      /* send: not this session's to carry, ask the next */
#define SESSION_MAX_ITEMS 2 /* poll items a session adds at most */
#define CONN_MAX_SESSIONS 4

typedef struct conn conn_t;
typedef struct session session_t;

typedef struct session_ops {
    const char *name;
    /*
     * Sends k's request in progress (k->req as `h`, a copy the session may
     * change; k->payload, k->count) without blocking. Returns 0 (sent),
     * ZPS_EAGAIN (not now: nothing was sent, no payload is held; tried again
     * soon), SESSION_PASS (not this session's to carry) or another ZPS_E*
     * code (the call fails). It may send requests of its own first.
     */
    int (*send)(session_t *s, zps_client_t *c, conn_t *k, zps_header_t *h);
    /*
     * Takes one message off this session's own sockets without blocking: 0
     * or a ZPS_E* code of a bad message, with *m to close; ZPS_EAGAIN when
     * none is waiting; ZPS_ESOCKET when receiving failed (*m untouched).
     * What concerns only the session it deals with itself and reads on.
     */
    int (*recv)(session_t *s, zps_client_t *c, conn_t *k, zps_message_t *m);
    /* A message session `from` received: true when it was this session's
     * own (an answer to what it asked); the caller closes it. May be NULL. */
    bool (*claim)(session_t *s, zps_client_t *c, conn_t *k, const session_t *from,
                  zps_message_t *m);
    /* What to poll while a request is pending: up to SESSION_MAX_ITEMS, their count. */
    size_t (*poll)(session_t *s, conn_t *k, zmq_pollitem_t *items);
    /* Reads what has happened (its events, its deadlines) while k's request
     * is pending; returns when it next needs a look (UINT64_MAX: never). */
    uint64_t (*wake)(session_t *s, zps_client_t *c, conn_t *k, uint64_t now);
    /* Ends it for good and frees it: the client is being freed (before its context). */
    void (*end)(session_t *s, conn_t *k);
} session_ops_t;

struct session {
    const session_ops_t *ops;
    unsigned lost; /* its ends that may have lost what was sent on it (written by it) */
};

/*
 * One server. Each group of fields is written by the one room named above
 * it; the others only read it. The request in progress is prepared between
 * call_begin and call_exchange by the verb making the call (client.c, with
 * slices.c and config.c); during call_exchange only call.c writes it.
 */
struct conn {
    /* conn.c: the connection to the server and its monitor */
    char *endpoint;
    void *sock;
    void *mon;           /* PAIR socket receiving sock's monitor events, or NULL */
    unsigned mon_gen;    /* makes each monitor's inproc address unique */
    bool up;             /* a ZMTP handshake with the peer succeeded and it has not gone */
    unsigned handshakes; /* ZMTP handshakes that succeeded on this connection */
    unsigned connects;   /* transport connections made */
    bool tcp_seen;       /* a transport connection was made on this socket */
    bool retried;        /* monitor: a connection attempt failed since the last one made
                          * (ZMQ_EVENT_CONNECT_RETRIED), its reason not looked at yet */
    int connect_errno;   /* why the last attempt failed (ECONNREFUSED, ...), or 0 */
    unsigned drops;      /* connections of this socket that ended (monitor: DISCONNECTED, or
                          * replaced by conn_reset): the server ended its sessions with each */
    int auth_failed;     /* the handshake failure (a ZMQ_EVENT_HANDSHAKE_FAILED_* event)
                          * reported since this socket's last successful handshake, or 0:
                          * libzmq may not try again after one, so it is kept */
    session_t plain;     /* the socket itself as a session: the last one, takes everything */

    /* client.c (zps_client_new, and a test through conn_add_session) */
    session_t *sessions[CONN_MAX_SESSIONS]; /* in the order a request is offered to them */
    size_t nsessions;
    session_t *shm;    /* shm.c's session, or NULL (not asked for) */
    session_t *sealed; /* sealed.c's session, or NULL (no CURVE, not tcp://, --no-seal) */
    uint64_t version;  /* model version of this shard's last pull reply (a push's base) */
    bool took;         /* after a push: this shard took it (call_begin clears it) */

    /* config.c */
    uint64_t fingerprint; /* configuration fingerprint of its last reply that was read (0: none) */
    bool refuses;         /* INIT: its probe said it will refuse (another shard, another N) */

    /* slices.c */
    uint16_t *narrow;  /* wire_bf16: the bfloat16 slice of the push in progress */
    size_t narrow_cap; /* its elements */

    /* the request of the call in progress (prepared by the verb, then call.c's) */
    zps_header_t req;
    const void *payload; /* slice to send (float32, or bfloat16 with ZPS_FLAG_BF16), or NULL */
    size_t count;        /* its elements */
    bool active;         /* takes part in the call in progress */
    uint64_t staged;     /* a staged exchange (client.c): elements of the slice declared ready */
    bool started;        /* call_start has sent it (call_begin clears it) */

    /* call.c (the verbs read the reply, and close it once read) */
    bool pending;           /* no reply yet */
    bool was_up;            /* up when the call began */
    unsigned handshakes_at; /* handshakes when the call began */
    unsigned drops_at_send; /* drops and sessions' losses when the request was last sent */
    unsigned lost_seen;     /* sessions' losses the engine has answered (by sending again) */
    unsigned logged_at;     /* connects + 1 when a failed attempt was last logged; 0: never */
    uint64_t resend_at_ns;
    int backoff_ms;
    zps_message_t reply;
    bool have_reply;
    int outcome; /* after an exchange: 0 (answered OK), or why not (a ZPS_E* code; ZPS_EREMOTE:
                  * refused, the reply says why) */
};

/* The background thread that keeps a worker from being evicted while it computes. */
typedef struct heartbeat {
    pthread_t thread;
    bool running;
    int stop[2]; /* a pipe: writing to it ends the thread at once */
} heartbeat_t;

struct zps_client {
    zps_client_opts_t opts;
    heartbeat_t hb;
    void *ctx;
    conn_t *conns;
    size_t nconns;
    zmq_pollitem_t *items;
    uint64_t next_id;
    uint64_t total;       /* N once known */
    uint64_t fingerprint; /* the configuration every shard reported; 0: not known (yet) */
    const char *call;     /* what wait records name the requests of this exchange after
                           * (NULL: their own type) */

    /* wire_bf16: what rounding left out of each element of the pushed
     * gradients, added to the next push (error feedback, bf16.h). */
    float *resid;
    uint64_t resid_n;

    pthread_mutex_t mu;
    pthread_cond_t released;
    long inflight; /* zero-copy payloads ZeroMQ has not released yet */

    /* client.c: a staged exchange in progress (zps_client_exchange_begin
     * until zps_client_exchange_end): no other call may use the requests. */
    struct {
        bool on;
        uint64_t clock, n;
        float *out;
        int rc;      /* a slice was refused (ZPS_ENONFINITE): it and the unsent ones stay here */
        int send_rc; /* a send failed: the call ends at its end */
    } staged;

    /* The lease request of the next pull, push or exchange (zps_client_set_lease). */
    zps_lease_req_t lease;
    bool lease_set;

    char err[512];
    int remote_status;
};

/* conn.c: the connection to one server and its monitor, and the plain session. */
int conn_open(zps_client_t *c, conn_t *k);
void conn_reset(zps_client_t *c, conn_t *k);
void conn_close(conn_t *k);
void conn_read_monitor(conn_t *k);
uint16_t conn_monitor_event(void *mon);
int conn_failed_attempt(conn_t *k);
int conn_send_header(conn_t *k, zps_header_t *h);
size_t conn_poll_items(zmq_pollitem_t *items, void *a, void *b);
int conn_add_session(conn_t *k, session_t *s);
void *conn_attach_monitor(zps_client_t *c, conn_t *k, void *sock, int events);
void conn_allow_ipv6(void *sock, const char *endpoint);
int conn_secure(const zps_client_t *c, void *sock);
void conn_why_unanswered(const char *endpoint, char *buf, size_t size);
void conn_connect_words(int e, char *buf, size_t size);

/* sealed.c: the sealed session, or NULL when this connection has none (or no memory). */
session_t *sealed_new(const zps_client_t *c, const conn_t *k);

/* shm.c: the shared-memory session, or NULL when this connection has none (or no memory). */
session_t *shm_new(const zps_client_t *c);
bool shm_can_stage(const session_t *s, size_t count);
uint32_t shm_stage(session_t *s, const float *v, size_t count, uint64_t request_id, size_t *bad);
int shm_copy(session_t *s, zps_client_t *c, conn_t *k, float *dst);

/* heartbeat.c */
int heartbeat_start(zps_client_t *c);
void heartbeat_stop(zps_client_t *c);

/* call.c: the call in progress. */
__attribute__((format(printf, 2, 3))) void client_set_error(zps_client_t *c, const char *fmt, ...);
zps_wire_free_fn *call_lend_payload(zps_client_t *c);
void call_begin(zps_client_t *c, enum zps_msg_type type);
int call_exchange(zps_client_t *c, bool all);
int call_start(zps_client_t *c, conn_t *k);
int call_wait(zps_client_t *c, bool all, int rc);
void call_collect_info(zps_client_t *c, zps_reply_info_t *info);

/* slices.c */
void slices_attach(zps_client_t *c, const float *v, uint64_t n);
int slices_sum(zps_client_t *c, const char *what);
int slices_sum_one(zps_client_t *c, conn_t *k, const char *what);
int slices_narrow(zps_client_t *c, uint64_t n, const char *what);
int slices_narrow_prepare(zps_client_t *c, uint64_t n);
int slices_narrow_one(zps_client_t *c, conn_t *k, const char *what);

/* config.c: the shards' configuration and the INIT probe. */
int config_agree(zps_client_t *c, const char *outcome);
void config_note(zps_client_t *c);
int config_probe(zps_client_t *c, uint64_t n, bool *refusal);

#endif
