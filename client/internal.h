/*
 * client/internal.h - what libzps's rooms share (include/zps/zps.h is what
 * it promises). Not installed; nothing outside client/ includes it.
 *
 * A client holds one conn_t per shard. Its parts and the room that owns each:
 *   conn.c       the DEALER socket to the server and its monitor (up, drops,
 *                connect_errno, auth_failed): opened, read, replaced
 *   sealed.c     the sealed session (seal_*, dsock, dmon)
 *   shm.c        the shared-memory session (shm_*)
 *   heartbeat.c  the heartbeat thread and its own sockets
 *   call.c       the call in progress (req, payload, pending, reply,
 *                outcome): begin, send, take replies, resend, wait logs,
 *                and the zero-copy count; the last error
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

#include "seal.h"
#include "wire.h"
#include "zps/zps.h"

#define SEAL_CONNECT_MS 3000 /* a sealed socket not reached by then is given up (CURVE alone) */
/*
 * The largest frame a client takes from a server's socket (ZMQ_MAXMSGSIZE;
 * a larger one ends the connection before it is allocated): a header with
 * its JSON (a STATS reply) or a payload frame, which a server cuts at
 * ZPS_WIRE_FRAME_BYTES. A sealed socket carries a payload in one frame: its
 * bound is the model's size when the client knows it (seal_granted).
 */
#define REPLY_FRAME_MAX ((int64_t)16 << 20)

typedef struct conn {
    char *endpoint;
    void *sock;
    void *mon;              /* PAIR socket receiving sock's monitor events, or NULL */
    unsigned mon_gen;       /* makes each monitor's inproc address unique */
    bool up;                /* a ZMTP handshake with the peer succeeded and it has not gone */
    bool up_in_call;        /* up at some moment of the call in progress */
    bool tcp_seen;          /* a transport connection was made on this socket */
    bool retried;           /* monitor: a connection attempt failed since the last one made
                             * (ZMQ_EVENT_CONNECT_RETRIED), its reason not looked at yet */
    int connect_errno;      /* why the last attempt failed (ECONNREFUSED, ...), or 0 */
    bool refusal_logged;    /* the wait for this failure has been logged */
    unsigned drops;         /* connections of this socket that ended (monitor: DISCONNECTED) */
    unsigned drops_at_send; /* drops when the request in progress was last sent */
    int auth_failed;        /* the handshake failure (a ZMQ_EVENT_HANDSHAKE_FAILED_* event)
                             * reported since this socket's last successful handshake, or 0:
                             * libzmq may not try again after one, so it is kept */
    uint64_t version;       /* model version of this shard's last pull reply (a push's base) */
    uint64_t fingerprint; /* configuration fingerprint of its last reply that was read (0: none) */
    bool refuses;         /* INIT: its probe said it will refuse (another shard, another N) */

    /* The sealed session (common/seal.h): asked for over sock at the first
     * send, then requests go sealed over dsock. It ends when sock's
     * connection does (the server wipes it then) or the server says it does
     * not know it; the next send asks again. */
    int seal_state;           /* SEAL_* */
    uint64_t seal_request_id; /* the SESSION request asked (SEAL_ASKED) */
    zps_seal_t seal;          /* SEAL_ON: the session */
    void *dsock;              /* SEAL_ON: DEALER to the server's sealed socket */
    void *dmon;               /* dsock's monitor (its drops count in `drops`) */
    bool seal_tcp;            /* dsock has made a TCP connection */
    uint64_t seal_wait_ns;    /* the first sealed send while dsock had none, or 0 */
    long seal_port;           /* the sealed socket's port */

    /* The shared-memory session (server/shm.h): asked for over sock at the
     * first send once the model exists, then pushes and pulls carry only
     * headers. It ends when sock's connection drops (the server ends it
     * then) or the server says it has none. */
    int shm_state;           /* SHM_* */
    uint64_t shm_request_id; /* the SHM request asked (SHM_ASKED) */
    unsigned shm_drops;      /* drops when it was granted */
    unsigned char *shm_base; /* SHM_ON: the mapped segment */
    size_t shm_size;
    uint64_t shm_len; /* the shard's elements */
    uint32_t shm_nbufs;
    uint64_t shm_stride, shm_buf_offset;
    float *shm_slot;         /* this worker's gradient slot */
    uint64_t shm_written_id; /* the request whose payload is in the slot */

    /* The request of the call in progress. */
    zps_header_t req;
    const void *payload; /* slice to send (float32, or bfloat16 with ZPS_FLAG_BF16), or NULL */
    size_t count;        /* its elements */
    uint16_t *narrow;    /* wire_bf16: the bfloat16 slice of the push in progress */
    size_t narrow_cap;   /* its elements */
    bool active;         /* takes part in the call in progress */
    bool pending;        /* no reply yet */
    uint64_t resend_at_ns;
    int backoff_ms;
    zps_message_t reply;
    bool have_reply;
    int outcome; /* after an exchange: 0 (answered OK), or why not (a ZPS_E* code; ZPS_EREMOTE:
                  * refused, the reply says why) */
    bool took;   /* after a push: this shard took it */
} conn_t;

enum {
    SHM_OFF,     /* not a worker, or not asked for */
    SHM_WANTED,  /* asked for at the next send */
    SHM_ASKED,   /* an SHM request is out */
    SHM_ON,      /* granted and mapped */
    SHM_REFUSED, /* the server grants none, or it is not on this host */
};

enum {
    SEAL_OFF,     /* no CURVE, not tcp://, or --no-seal: never asked */
    SEAL_WANTED,  /* asked for at the next send */
    SEAL_ASKED,   /* a SESSION request is out */
    SEAL_ON,      /* granted: requests go sealed over dsock */
    SEAL_REFUSED, /* the server grants none: CURVE alone */
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

    /* The lease request of the next pull, push or exchange (zps_client_set_lease). */
    zps_lease_req_t lease;
    bool lease_set;

    char err[512];
    int remote_status;
};

/* conn.c: the connection to one server and its monitor. */
int conn_open(zps_client_t *c, conn_t *k);
void conn_reset(zps_client_t *c, conn_t *k);
void conn_close_monitor(conn_t *k);
void conn_read_monitor(conn_t *k);
void *conn_attach_monitor(zps_client_t *c, conn_t *k, void *sock, int events);
void conn_allow_ipv6(void *sock, const char *endpoint);
int conn_secure(const zps_client_t *c, void *sock);
void conn_why_unanswered(const char *endpoint, char *buf, size_t size);
int conn_connect_reason(const char *endpoint, int ms);
void conn_connect_words(int e, char *buf, size_t size);

/* sealed.c: the sealed session. */
void seal_end(conn_t *k);
void seal_check_reached(conn_t *k, uint64_t now);
void seal_ask(zps_client_t *c, conn_t *k);
void seal_granted(zps_client_t *c, conn_t *k, zps_message_t *m);
struct zps_seal *seal_find(void *arg, const unsigned char *id, zps_peer_t *peer);

/* shm.c: the shared-memory session. */
void shm_end(conn_t *k);
void shm_ask(zps_client_t *c, conn_t *k);
void shm_granted(zps_client_t *c, conn_t *k, zps_message_t *m);
void shm_give_up(conn_t *k, const char *why);
bool shm_use(conn_t *k);
int shm_copy(zps_client_t *c, conn_t *k, float *dst);

/* heartbeat.c */
int heartbeat_start(zps_client_t *c);
void heartbeat_stop(zps_client_t *c);

/* call.c: the call in progress. */
__attribute__((format(printf, 2, 3))) void client_set_error(zps_client_t *c, const char *fmt, ...);
void call_begin(zps_client_t *c, enum zps_msg_type type);
int call_exchange(zps_client_t *c, bool all);
void call_collect_info(zps_client_t *c, zps_reply_info_t *info);

/* slices.c */
void slices_attach(zps_client_t *c, const float *v, uint64_t n);
int slices_sum(zps_client_t *c, const char *what);
int slices_narrow(zps_client_t *c, uint64_t n, const char *what);

/* config.c: the shards' configuration and the INIT probe. */
int config_agree(zps_client_t *c, const char *outcome);
void config_note(zps_client_t *c);
int config_probe(zps_client_t *c, uint64_t n, bool *refusal);

#endif
