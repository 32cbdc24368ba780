/*
 * client.c - libzps; see zps/zps.h (include/) for the contract.
 *
 * Every call is one exchange: build a request per shard, send them all, then
 * poll the sockets until each shard's reply with the call's request id is in,
 * resending what is unanswered and discarding replies to earlier requests.
 *
 * Gradients are pushed without copying: each shard's slice is handed to
 * ZeroMQ with a release callback that counts down `inflight`. Before a call
 * returns it waits for that count to reach zero, so the caller's buffer is
 * never read after the call. A request that may never leave (its server is
 * gone) would hold its buffer forever, so a failed call closes that shard's
 * socket, which makes ZeroMQ drop and release it, and opens a new one.
 *
 * Each shard's socket has a ZeroMQ monitor (an inproc PAIR socket) whose
 * events say whether a zps server is connected right now. It is read, and
 * polled with its socket, while a call waits: it turns a call's silence into
 * "nothing to talk to" (ZPS_EUNREACHABLE) or "connected, no answer yet"
 * (ZPS_ETIMEDOUT), and goes into the periodic "waiting for server ..." log
 * records. With CURVE it also reports handshakes the server refused, which
 * end the call at once (ZPS_EAUTH), and a connection whose handshake never
 * completes (a wrong server key) is ZPS_EAUTH at the deadline.
 */
#include "zps/zps.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "bf16.h"
#include "error.h"
#include "json.h"
#include "keys.h"
#include "log.h"
#include "checksum.h"
#include "seal.h"
#include "shm_guard.h"
#include "shm_layout.h"
#include "shard.h"
#include "strbuf.h"
#include "timeutil.h"
#include "wire.h"

#define RETRY_MAX_MS 8000
#define SEND_AGAIN_MS 50     /* a request the socket could not take is tried again after this */
#define WAIT_LOG_FACTOR 3    /* later wait records come this many times further apart */
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

int zps_abi_version(void)
{
    return ZPS_ABI_VERSION;
}

void zps_client_opts_default(zps_client_opts_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->worker = -1;
    opts->observe = false;
    opts->timeout_ms = 30000;
    opts->retry_ms = 1000;
    opts->heartbeat_ms = 1000;
    opts->wait_log_ms = 10000;
}

int zps_client_opts_set_keys(zps_client_opts_t *opts, const char *key_file,
                             const char *server_key_file, char *why, size_t why_size)
{
    zps_keypair_t kp;
    uint8_t server[ZPS_KEY_BYTES];
    char sub[512];
    int rc = zps_keypair_load(key_file, &kp, sub, sizeof(sub));
    if (rc) {
        zps_set_reason(why, why_size, "--key: %s", sub);
        return rc;
    }
    rc = zps_pubkey_load(server_key_file, server, sub, sizeof(sub));
    if (rc) {
        zps_keypair_clear(&kp);
        zps_set_reason(why, why_size, "--server-key: %s", sub);
        return rc;
    }
    opts->curve = true;
    memcpy(opts->curve_public_key, kp.public_key, ZPS_KEY_BYTES);
    memcpy(opts->curve_secret_key, kp.secret_key, ZPS_KEY_BYTES);
    memcpy(opts->curve_server_key, server, ZPS_KEY_BYTES);
    zps_keypair_clear(&kp);
    return 0;
}

void zps_client_opts_clear(zps_client_opts_t *opts)
{
    volatile uint8_t *secret = opts->curve_secret_key;
    for (size_t i = 0; i < sizeof(opts->curve_secret_key); i++)
        secret[i] = 0;
}

__attribute__((format(printf, 2, 3))) static void set_error(zps_client_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
}

/* A PAIR socket receiving `sock`'s monitor events, attached before it
 * connects so no event is missed; NULL when one cannot be set up. */
static void *attach_monitor(zps_client_t *c, conn_t *k, void *sock, int events)
{
    char addr[128];
    snprintf(addr, sizeof(addr), "inproc://zps-client-monitor-%p-%zu-%u", (void *)c,
             (size_t)(k - c->conns), k->mon_gen++);
    if (zmq_socket_monitor(sock, addr, events) != 0)
        return NULL;
    void *mon = zmq_socket(c->ctx, ZMQ_PAIR);
    if (mon && zmq_connect(mon, addr) == 0) {
        int linger = 0;
        zmq_setsockopt(mon, ZMQ_LINGER, &linger, sizeof(linger));
        return mon;
    }
    if (mon)
        zmq_close(mon);
    zmq_socket_monitor(sock, NULL, 0);
    return NULL;
}

/*
 * Attaches a monitor to k->sock before it connects, so no event is missed.
 * Without one (it could not be set up) the connection counts as up: a call
 * then reports ZPS_ETIMEDOUT as it did before monitors.
 */
static void open_monitor(zps_client_t *c, conn_t *k)
{
    k->up = false;
    k->tcp_seen = false;
    k->retried = false;
    k->auth_failed = 0;
    int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED |
                 ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    k->mon = attach_monitor(c, k, k->sock, events);
    if (!k->mon)
        k->up = true;
}

static void close_monitor(conn_t *k)
{
    if (k->mon)
        zmq_close(k->mon);
    k->mon = NULL;
}

/* Ends k's sealed session on this side; the next send asks for another. */
static void seal_end(conn_t *k)
{
    if (k->dmon)
        zmq_close(k->dmon);
    k->dmon = NULL;
    if (k->dsock)
        zmq_close(k->dsock);
    k->dsock = NULL;
    zps_seal_wipe(&k->seal);
    k->seal_tcp = false;
    k->seal_wait_ns = 0;
    if (k->seal_state != SEAL_OFF && k->seal_state != SEAL_REFUSED)
        k->seal_state = SEAL_WANTED;
}

/*
 * A sealed socket that no connection reaches (a firewall lets the CURVE
 * port through and not the other) must not hold requests until their
 * deadline: when SEAL_CONNECT_MS after the first sealed send no TCP
 * connection was made, CURVE carries everything, and what was sent sealed
 * goes again (a retry, should it have arrived after all). A server that is
 * merely stopped or slow still has its kernel accept the connection: that
 * is no reason to give up the session.
 */
static void seal_check_reached(conn_t *k, uint64_t now)
{
    if (k->seal_state != SEAL_ON || k->seal_tcp || k->seal_wait_ns == 0 ||
        now - k->seal_wait_ns < SEAL_CONNECT_MS * 1000000ull)
        return;
    zps_warn("%s: its sealed socket (port %ld) did not answer within %d ms: CURVE carries "
             "everything (is the port filtered? docs/security.md)",
             k->endpoint, k->seal_port, SEAL_CONNECT_MS);
    seal_end(k);
    k->seal_state = SEAL_REFUSED;
    k->drops++;
    if (k->pending)
        k->resend_at_ns = now;
}

/* Reads one monitor event (16-bit event, 32-bit value, then an address
 * frame); 0 when none is waiting. Never blocks. */
static uint16_t monitor_event(void *mon)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return 0;
    }
    uint16_t event = 0;
    if (zmq_msg_size(&m) >= sizeof(event))
        memcpy(&event, zmq_msg_data(&m), sizeof(event));
    bool more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    while (more) {
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0)
            more = false;
        else
            more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    return event ? event : 0xffff;
}

/* Reads the monitor events that have arrived, of sock and of dsock. */
static void read_monitor(conn_t *k)
{
    uint16_t event;
    /* The sealed connection's end loses what was in flight on it, as the
     * CURVE connection's does: it counts as a drop (exchanges are resent). */
    while (k->dmon && (event = monitor_event(k->dmon)) != 0) {
        if (event == ZMQ_EVENT_DISCONNECTED)
            k->drops++;
        else if (event == ZMQ_EVENT_CONNECTED)
            k->seal_tcp = true;
    }
    while (k->mon && (event = monitor_event(k->mon)) != 0) {
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            k->up = k->up_in_call = true;
            k->auth_failed = 0;
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            k->up = false;
            k->drops++;
            /* The server wiped the session with the connection. */
            seal_end(k);
        } else if (event == ZMQ_EVENT_CONNECTED) {
            k->tcp_seen = true;
            k->retried = false;
            k->connect_errno = 0;
            k->refusal_logged = false;
        } else if (event == ZMQ_EVENT_CONNECT_RETRIED) {
            /* ZeroMQ says an attempt failed, not why: connect_reason looks. */
            k->retried = !k->up;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ||
                   event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
                   event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            k->auth_failed = event;
        }
    }
}

/* An IPv6 address (tcp://[addr]:port) needs ZMQ_IPV6 on the socket that
 * connects to it; anything else keeps ZeroMQ's IPv4 default. */
static void allow_ipv6(void *sock, const char *endpoint)
{
    int one = 1;
    if (strncmp(endpoint, "tcp://[", 7) == 0)
        zmq_setsockopt(sock, ZMQ_IPV6, &one, sizeof(one));
}

/* Makes sock a CURVE client when the options ask for it; before it connects. */
static int secure(const zps_client_t *c, void *sock)
{
    if (!c->opts.curve)
        return 0;
    const zps_client_opts_t *o = &c->opts;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, o->curve_server_key, 32) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, o->curve_public_key, 32) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, o->curve_secret_key, 32) != 0)
        return ZPS_ESOCKET;
    return 0;
}

/*
 * Why nothing may be there: "the host name H does not resolve (...)" when a
 * tcp:// endpoint names a host that does not resolve here, else "is a
 * server running there?". ZeroMQ retries a name that does not resolve as it
 * retries a refused connection, without a word, so the client looks. Only
 * on the paths that report a wait or a failure: getaddrinfo may block.
 */
static void why_unanswered(const char *endpoint, char *buf, size_t size)
{
    snprintf(buf, size, "is a server running there?");
    if (strncmp(endpoint, "tcp://", 6) != 0 || endpoint[6] == '[')
        return;
    char host[256];
    const char *h = endpoint + 6;
    const char *semi = strchr(h, ';'); /* "tcp://source;host:port" */
    if (semi)
        h = semi + 1;
    const char *colon = strrchr(h, ':');
    size_t n = colon ? (size_t)(colon - h) : strlen(h);
    if (n == 0 || n >= sizeof(host) || strcmp(h, "*") == 0)
        return;
    memcpy(host, h, n);
    host[n] = '\0';
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(host, NULL, &hints, &res);
    if (res)
        freeaddrinfo(res);
    if (e == EAI_NONAME || e == EAI_AGAIN || e == EAI_FAIL
#ifdef EAI_NODATA
        || e == EAI_NODATA
#endif
    )
        snprintf(buf, size, "the host name %s does not resolve here: %s", host, gai_strerror(e));
}

/*
 * Why a connection to endpoint fails: one attempt of our own, as ZeroMQ's
 * would be (tcp://HOST:PORT, the first address HOST resolves to; or
 * ipc://PATH), given at most `ms` milliseconds. Returns the errno of the
 * failure (ECONNREFUSED: nothing listens; ENOENT: no such ipc path), or 0
 * when it connected, timed out or cannot tell. Blocks up to `ms` (and on a
 * name lookup); only called once ZeroMQ has reported a failed attempt.
 */
static int connect_reason(const char *endpoint, int ms)
{
    struct sockaddr_storage ss;
    socklen_t len = 0;
    memset(&ss, 0, sizeof(ss));
    if (strncmp(endpoint, "ipc://", 6) == 0) {
        struct sockaddr_un *un = (struct sockaddr_un *)&ss;
        const char *path = endpoint + 6;
        if (strlen(path) >= sizeof(un->sun_path))
            return 0;
        un->sun_family = AF_UNIX;
        strcpy(un->sun_path, path);
        len = sizeof(*un);
    } else if (strncmp(endpoint, "tcp://", 6) == 0) {
        char host[256];
        const char *h = endpoint + 6;
        if (strchr(h, ';'))
            return 0; /* a source address: leave it to ZeroMQ */
        const char *colon = strrchr(h, ':');
        if (!colon || colon == h)
            return 0;
        size_t n = (size_t)(colon - h);
        if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
            h++;
            n -= 2;
        }
        if (n >= sizeof(host))
            return 0;
        memcpy(host, h, n);
        host[n] = '\0';
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof(hints));
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(host, colon + 1, &hints, &res) != 0 || !res)
            return 0;
        memcpy(&ss, res->ai_addr, res->ai_addrlen);
        len = res->ai_addrlen;
        freeaddrinfo(res);
    } else {
        return 0;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int e = 0;
    if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
        e = errno;
        if (e == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            e = 0;
            if (poll(&p, 1, ms) == 1) {
                socklen_t el = sizeof(e);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0)
                    e = 0;
            }
        }
    }
    close(fd);
    return e;
}

/* "connection refused" for ECONNREFUSED, else strerror's words in lower case. */
static void connect_words(int e, char *buf, size_t size)
{
    snprintf(buf, size, "%s", strerror(e));
    if (buf[0] >= 'A' && buf[0] <= 'Z')
        buf[0] = (char)(buf[0] - 'A' + 'a');
}

/* The server's sealed socket: k's tcp:// endpoint with the port it granted. */
static int seal_endpoint(const conn_t *k, long port, char *out, size_t size)
{
    const char *colon = strrchr(k->endpoint, ':');
    if (!colon || port <= 0 || port > 65535)
        return ZPS_EINVAL;
    int n = snprintf(out, size, "%.*s:%ld", (int)(colon - k->endpoint), k->endpoint, port);
    return n < 0 || (size_t)n >= size ? ZPS_EINVAL : 0;
}

/* Asks k's server for a sealed session, over CURVE; the reply comes to take_reply. */
static void seal_ask(zps_client_t *c, conn_t *k)
{
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_SESSION);
    h.request_id = ++c->next_id;
    h.json = zps_seal_cipher_available(ZPS_SEAL_AES256GCM) ? "{\"aes\":true}" : "{\"aes\":false}";
    if (zps_wire_send(k->sock, NULL, &h, NULL, 0, NULL, NULL, ZMQ_DONTWAIT) == 0) {
        k->seal_state = SEAL_ASKED;
        k->seal_request_id = h.request_id;
    }
}

/* The session k's server granted (m: the SESSION reply), or why not. */
static void seal_granted(zps_client_t *c, conn_t *k, zps_message_t *m)
{
    if (m->hdr.status != 0) {
        /* A server with --no-seal, without a tcp:// address, or from
         * before sealed sessions: CURVE carries everything. */
        zps_debug("%s grants no sealed session (%s): CURVE carries everything", k->endpoint,
                  m->hdr.error);
        k->seal_state = SEAL_REFUSED;
        return;
    }
    zps_json_t *j = NULL;
    unsigned char id[ZPS_SEAL_ID_BYTES], key[ZPS_SEAL_KEY_BYTES];
    const char *sid = NULL, *skey = NULL, *scipher = NULL;
    long port = 0;
    if (m->hdr.json && zps_json_parse(m->hdr.json, &j, NULL, 0) == 0) {
        sid = zps_json_string(zps_json_get(j, "session"));
        skey = zps_json_string(zps_json_get(j, "key"));
        scipher = zps_json_string(zps_json_get(j, "cipher"));
        port = (long)zps_json_number(zps_json_get(j, "port"), 0);
    }
    enum zps_seal_cipher cipher = scipher ? zps_seal_cipher_parse(scipher) : ZPS_SEAL_NONE;
    char where[600];
    bool ok = sid && skey && cipher != ZPS_SEAL_NONE && zps_seal_cipher_available(cipher) &&
              zps_seal_unhex(sid, id, sizeof(id)) == 0 &&
              zps_seal_unhex(skey, key, sizeof(key)) == 0 &&
              seal_endpoint(k, port, where, sizeof(where)) == 0;
    if (skey)
        sodium_memzero((char *)skey, strlen(skey));
    zps_json_free(j);
    if (m->json)
        sodium_memzero(m->json, strlen(m->json));
    if (!ok) {
        zps_warn("%s: unusable sealed session grant: CURVE carries everything", k->endpoint);
        sodium_memzero(key, sizeof(key));
        k->seal_state = SEAL_REFUSED;
        return;
    }
    zps_seal_join(&k->seal, id, key, cipher);
    sodium_memzero(key, sizeof(key));
    k->dsock = zmq_socket(c->ctx, ZMQ_DEALER);
    int linger = 0;
    /* A reply's payload in one frame: at most the whole model's values (the
     * widest kind, float32), once the client knows its size. */
    uint64_t n = c->total > k->count ? c->total : k->count;
    int64_t maxmsg = -1;
    if (n > 0 && n < (uint64_t)INT64_MAX / 8)
        maxmsg = (int64_t)(n * sizeof(float)) + REPLY_FRAME_MAX;
    if (k->dsock) {
        zmq_setsockopt(k->dsock, ZMQ_LINGER, &linger, sizeof(linger));
        zmq_setsockopt(k->dsock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
        allow_ipv6(k->dsock, where);
        k->dmon = attach_monitor(c, k, k->dsock, ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED);
    }
    if (!k->dsock || zmq_connect(k->dsock, where) != 0) {
        zps_warn("%s: cannot connect to its sealed socket %s: CURVE carries everything",
                 k->endpoint, where);
        seal_end(k);
        k->seal_state = SEAL_REFUSED;
        return;
    }
    k->seal_state = SEAL_ON;
    k->seal_tcp = !k->dmon; /* without a monitor, trust it */
    k->seal_port = port;
    zps_debug("%s: sealed session on %s (%s)", k->endpoint, where, zps_seal_cipher_name(cipher));
}

/* The session a sealed reply names: k's, if the id is its (zps_wire_seal_find_fn). */
static struct zps_seal *find_seal(void *arg, const unsigned char *id, zps_peer_t *peer)
{
    (void)peer;
    conn_t *k = arg;
    return k->seal_state == SEAL_ON && memcmp(id, k->seal.id, ZPS_SEAL_ID_BYTES) == 0 ? &k->seal
                                                                                      : NULL;
}

/* ---- shared memory ---- */

/* Ends k's shared-memory session on this side; the next send asks again (unless refused). */
static void shm_end(conn_t *k)
{
    if (k->shm_base) {
        zps_shm_guard_remove(k->shm_base);
        munmap(k->shm_base, k->shm_size);
    }
    k->shm_base = NULL;
    k->shm_size = 0;
    k->shm_slot = NULL;
    k->shm_written_id = 0;
    if (k->shm_state != SHM_OFF && k->shm_state != SHM_REFUSED)
        k->shm_state = SHM_WANTED;
}

/* Asks k's server for a shared-memory session; the reply comes to take_reply. */
static void shm_ask(zps_client_t *c, conn_t *k)
{
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_SHM);
    h.request_id = ++c->next_id;
    h.worker = c->opts.worker;
    if (zps_wire_send(k->sock, NULL, &h, NULL, 0, NULL, NULL, ZMQ_DONTWAIT) == 0) {
        k->shm_state = SHM_ASKED;
        k->shm_request_id = h.request_id;
    }
}

/* Maps the segment named in k's SHM reply m and checks it is the server's; false if not. */
static bool shm_map(zps_client_t *c, conn_t *k, const char *name, const char *token)
{
    unsigned char want[ZPS_SHM_TOKEN_BYTES];
    if (!name || name[0] != '/' || strchr(name + 1, '/') || !token ||
        zps_seal_unhex(token, want, sizeof(want)) != 0)
        return false;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return false; /* another host, or another user: the socket it is */
    struct stat st;
    unsigned char *base = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(zps_shm_layout_t))
        base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return false;
    zps_shm_layout_t l;
    memcpy(&l, base, sizeof(l));
    uint64_t size = (uint64_t)st.st_size, bytes = l.len * sizeof(float);
    uint32_t rank = (uint32_t)c->opts.worker;
    /* Every region must lie inside what was mapped: the layout is read, not trusted. */
    bool ok = memcmp(l.magic, ZPS_SHM_MAGIC, sizeof(l.magic)) == 0 &&
              sodium_memcmp(l.token, want, sizeof(want)) == 0 && l.len > 0 &&
              l.len <= UINT64_MAX / sizeof(float) && l.stride >= bytes && l.stride % 4096 == 0 &&
              rank < l.workers && l.nbufs > 0 && l.size == size && l.buf_offset <= size &&
              l.nbufs <= (size - l.buf_offset) / l.stride && l.slot_offset <= size &&
              l.workers <= (size - l.slot_offset) / l.stride;
    /* Cut short later by another process, it ends the session, not us (shm_guard.h). */
    if (!ok || zps_shm_guard_add(base, (size_t)st.st_size) != 0) {
        munmap(base, (size_t)st.st_size);
        return false;
    }
    k->shm_base = base;
    k->shm_size = (size_t)st.st_size;
    k->shm_len = l.len;
    k->shm_nbufs = l.nbufs;
    k->shm_stride = l.stride;
    k->shm_buf_offset = l.buf_offset;
    k->shm_slot = (float *)(base + l.slot_offset + (uint64_t)rank * l.stride);
    k->shm_written_id = 0;
    return true;
}

/* The session k's server granted (m: the SHM reply), or why not. */
static void shm_granted(zps_client_t *c, conn_t *k, zps_message_t *m)
{
    if (m->hdr.status == ZPS_ENOTINIT) {
        k->shm_state = SHM_WANTED; /* once the model exists */
        return;
    }
    if (m->hdr.status != 0) {
        zps_debug("%s grants no shared-memory session (%s): the socket carries everything",
                  k->endpoint, m->hdr.error);
        k->shm_state = SHM_REFUSED;
        return;
    }
    zps_json_t *j = NULL;
    const char *name = NULL, *token = NULL;
    if (m->hdr.json && zps_json_parse(m->hdr.json, &j, NULL, 0) == 0) {
        name = zps_json_string(zps_json_get(j, "name"));
        token = zps_json_string(zps_json_get(j, "token"));
    }
    bool ok = shm_map(c, k, name, token);
    zps_json_free(j);
    if (!ok) {
        zps_debug("%s: its shared memory is not on this host: the socket carries everything",
                  k->endpoint);
        k->shm_state = SHM_REFUSED;
        return;
    }
    k->shm_state = SHM_ON;
    k->shm_drops = k->drops;
    zps_debug("%s: shared-memory session (%llu elements)", k->endpoint,
              (unsigned long long)k->shm_len);
}

/*
 * Gives up k's shared memory for the rest of the client's life: what it
 * carried goes over the socket. For a segment that another process has cut
 * short or scribbled on, which the next session would meet again.
 */
static void shm_give_up(conn_t *k, const char *why)
{
    zps_warn("%s: %s; the socket carries everything to this server from now", k->endpoint, why);
    shm_end(k);
    k->shm_state = SHM_REFUSED;
}

/* Whether k's request in progress goes through shared memory: then its payload is in the slot. */
static bool shm_use(conn_t *k)
{
    if (k->shm_state == SHM_ON && k->drops != k->shm_drops)
        shm_end(k); /* the connection dropped: the server ended the session */
    if (k->shm_state == SHM_ON && zps_shm_guard_lost(k->shm_base))
        shm_give_up(k, "its shared memory was cut short by another process");
    bool bulk = k->req.type == ZPS_MSG_PULL || (k->req.type == ZPS_MSG_PUSH && k->payload);
    if (k->shm_state != SHM_ON || !bulk || (k->req.flags & ZPS_FLAG_BF16) ||
        (k->req.type == ZPS_MSG_PUSH && k->count != k->shm_len)) {
        k->req.flags &= ~(uint32_t)ZPS_FLAG_SHM;
        return false;
    }
    if (k->req.type == ZPS_MSG_PUSH && k->shm_written_id != k->req.request_id) {
        /* Its checksum was computed from the caller's buffer (sum_slices). */
        memcpy(k->shm_slot, k->payload, k->count * sizeof(float));
        k->shm_written_id = k->req.request_id;
        if (zps_shm_guard_lost(k->shm_base)) {
            shm_give_up(k, "its shared memory was cut short by another process");
            k->req.flags &= ~(uint32_t)ZPS_FLAG_SHM;
            return false;
        }
    }
    k->req.flags |= ZPS_FLAG_SHM;
    return true;
}

static int open_conn(zps_client_t *c, conn_t *k)
{
    if (k->seal_state != SEAL_REFUSED)
        k->seal_state = c->opts.curve && !c->opts.no_seal && strncmp(k->endpoint, "tcp://", 6) == 0
                            ? SEAL_WANTED
                            : SEAL_OFF;
    if (k->shm_state != SHM_REFUSED)
        k->shm_state =
            c->opts.shm && c->opts.worker >= 0 && !c->opts.wire_bf16 ? SHM_WANTED : SHM_OFF;
    k->sock = zmq_socket(c->ctx, ZMQ_DEALER);
    if (!k->sock)
        return ZPS_ESOCKET;
    if (secure(c, k->sock) != 0) {
        set_error(c, "%s: cannot use CURVE: %s", k->endpoint, zmq_strerror(zmq_errno()));
        zmq_close(k->sock);
        k->sock = NULL;
        return ZPS_ESOCKET;
    }
    int linger = 0;
    int64_t maxmsg = REPLY_FRAME_MAX;
    zmq_setsockopt(k->sock, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(k->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    allow_ipv6(k->sock, k->endpoint);
    open_monitor(c, k);
    if (zmq_connect(k->sock, k->endpoint) != 0) {
        set_error(c, "%s: cannot connect: %s", k->endpoint, zmq_strerror(zmq_errno()));
        close_monitor(k);
        zmq_close(k->sock);
        k->sock = NULL;
        return ZPS_EINVAL;
    }
    return 0;
}

/*
 * The heartbeat thread: its own DEALER per server (ZeroMQ sockets belong to
 * one thread), HEARTBEAT every heartbeat_ms, replies read and dropped. A
 * server that is away gets nothing queued (ZMQ_IMMEDIATE), so a long outage
 * cannot pile up stale heartbeats.
 */
static void *heartbeat_main(void *arg)
{
    zps_client_t *c = arg;
    size_t n = c->nconns;
    void **socks = calloc(n, sizeof(void *));
    zmq_pollitem_t *items = calloc(n + 1, sizeof(zmq_pollitem_t));
    if (!socks || !items)
        goto done;
    int zero = 0, one = 1;
    int64_t maxmsg = REPLY_FRAME_MAX;
    for (size_t i = 0; i < n; i++) {
        socks[i] = zmq_socket(c->ctx, ZMQ_DEALER);
        if (!socks[i] || secure(c, socks[i]) != 0)
            goto done;
        zmq_setsockopt(socks[i], ZMQ_LINGER, &zero, sizeof(zero));
        zmq_setsockopt(socks[i], ZMQ_IMMEDIATE, &one, sizeof(one));
        zmq_setsockopt(socks[i], ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
        allow_ipv6(socks[i], c->conns[i].endpoint);
        zmq_connect(socks[i], c->conns[i].endpoint);
        items[i + 1].socket = socks[i];
        items[i + 1].events = ZMQ_POLLIN;
    }
    items[0].fd = c->hb.stop[0];
    items[0].events = ZMQ_POLLIN;
    uint64_t id = 0;
    uint64_t next = zps_now_ns();
    for (;;) {
        uint64_t now = zps_now_ns();
        if (now >= next) {
            for (size_t i = 0; i < n; i++) {
                zps_header_t h;
                zps_header_init(&h, ZPS_MSG_HEARTBEAT);
                h.worker = c->opts.worker;
                h.request_id = ++id;
                h.shard_index = (uint32_t)i;
                h.shard_count = (uint32_t)n;
                zps_wire_send(socks[i], NULL, &h, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
            }
            next = now + (uint64_t)c->opts.heartbeat_ms * 1000000ull;
        }
        long wait = (long)((next - zps_now_ns() + 999999) / 1000000);
        if (zmq_poll(items, (int)n + 1, wait < 0 ? 0 : wait) < 0 && zmq_errno() != EINTR)
            break;
        if (items[0].revents)
            break;
        for (size_t i = 0; i < n; i++) {
            zps_message_t m;
            while (items[i + 1].revents &&
                   zps_wire_recv(socks[i], ZMQ_DONTWAIT, false, &m) != ZPS_EAGAIN)
                zps_message_close(&m);
        }
    }
done:
    for (size_t i = 0; socks && i < n; i++)
        if (socks[i])
            zmq_close(socks[i]);
    free(socks);
    free(items);
    return NULL;
}

static int heartbeat_start(zps_client_t *c)
{
    if (pipe(c->hb.stop) != 0)
        return ZPS_EIO;
    if (pthread_create(&c->hb.thread, NULL, heartbeat_main, c) != 0) {
        close(c->hb.stop[0]);
        close(c->hb.stop[1]);
        return ZPS_ENOMEM;
    }
    c->hb.running = true;
    return 0;
}

static void heartbeat_stop(zps_client_t *c)
{
    if (!c->hb.running)
        return;
    char b = 1;
    while (write(c->hb.stop[1], &b, 1) < 0 && errno == EINTR) {
    }
    pthread_join(c->hb.thread, NULL);
    close(c->hb.stop[0]);
    close(c->hb.stop[1]);
    c->hb.running = false;
}

int zps_client_new(const char *const *endpoints, size_t count, const zps_client_opts_t *opts,
                   zps_client_t **out)
{
    if (count == 0 || count > 65536)
        return ZPS_EINVAL;
    zps_client_t *c = calloc(1, sizeof(*c));
    if (!c)
        return ZPS_ENOMEM;
    if (opts)
        c->opts = *opts;
    else
        zps_client_opts_default(&c->opts);
    if (!c->opts.keep_malloc)
        zps_wire_tune_malloc();
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->released, NULL);
    /* Request ids only need to differ between this client's calls; starting
     * from a time-derived value keeps a restarted process from reusing the
     * ids of its previous life while old replies may still be in flight. */
    c->next_id = (zps_now_ns() ^ ((uint64_t)getpid() << 40)) & 0x7fffffffffffffffull;
    c->ctx = zmq_ctx_new();
    c->conns = calloc(count, sizeof(conn_t));
    /* Each socket and its monitor, and the sealed socket and its monitor. */
    c->items = calloc(4 * count, sizeof(zmq_pollitem_t));
    int rc = c->ctx && c->conns && c->items ? 0 : ZPS_ENOMEM;
    c->nconns = count;
    for (size_t i = 0; i < count && rc == 0; i++) {
        c->conns[i].endpoint = strdup(endpoints[i]);
        rc = c->conns[i].endpoint ? open_conn(c, &c->conns[i]) : ZPS_ENOMEM;
    }
    if (rc == 0 && c->opts.worker >= 0 && c->opts.heartbeat_ms > 0)
        rc = heartbeat_start(c);
    if (rc) {
        zps_client_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void zps_client_free(zps_client_t *c)
{
    if (!c)
        return;
    heartbeat_stop(c);
    for (size_t i = 0; i < c->nconns; i++) {
        zps_message_close(&c->conns[i].reply);
        seal_end(&c->conns[i]);
        shm_end(&c->conns[i]);
        close_monitor(&c->conns[i]);
        if (c->conns[i].sock)
            zmq_close(c->conns[i].sock);
        free(c->conns[i].endpoint);
    }
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    /* ZeroMQ holds none of them now. */
    for (size_t i = 0; i < c->nconns; i++)
        free(c->conns[i].narrow);
    free(c->resid);
    pthread_cond_destroy(&c->released);
    pthread_mutex_destroy(&c->mu);
    free(c->conns);
    free(c->items);
    zps_client_opts_clear(&c->opts);
    free(c);
}

size_t zps_client_server_count(const zps_client_t *c)
{
    return c->nconns;
}

int zps_client_check_endpoint(const char *endpoint, char *why, size_t why_size)
{
    const char *bad = NULL;
    if (strncmp(endpoint, "ipc://", 6) == 0) {
        if (endpoint[6] == '\0')
            bad = "no path after ipc://";
    } else if (strncmp(endpoint, "tcp://", 6) == 0) {
        const char *colon = strrchr(endpoint + 6, ':');
        char *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || colon == endpoint + 6)
            bad = "no HOST:PORT after tcp://";
        else if (colon[1] < '0' || colon[1] > '9' || *end != '\0' || port < 1 || port > 65535)
            bad = "PORT is not a number in 1..65535";
    } else {
        bad = "no tcp:// or ipc:// in front";
    }
    if (!bad)
        return 0;
    zps_set_reason(why, why_size,
                   "invalid server endpoint '%s' (%s): expected tcp://HOST:PORT "
                   "(e.g. tcp://127.0.0.1:7100) or ipc://PATH",
                   endpoint, bad);
    return ZPS_EINVAL;
}

int zps_client_connect_error(const zps_client_t *c, size_t index)
{
    return index < c->nconns ? c->conns[index].connect_errno : 0;
}

const char *zps_client_last_error(const zps_client_t *c)
{
    return c->err;
}

int zps_client_last_remote_status(const zps_client_t *c)
{
    return c->remote_status;
}

/* ---- zero-copy bookkeeping ---- */

/* ZeroMQ's release callback, run on its I/O thread. */
static void payload_released(void *data, void *hint)
{
    (void)data;
    zps_client_t *c = hint;
    pthread_mutex_lock(&c->mu);
    if (--c->inflight == 0)
        pthread_cond_broadcast(&c->released);
    pthread_mutex_unlock(&c->mu);
}

/* Waits until ZeroMQ holds no payload of ours, for at most ms (-1: forever). True when none. */
static bool wait_released(zps_client_t *c, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (ms >= 0) {
        until.tv_sec += ms / 1000;
        until.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&c->mu);
    while (c->inflight > 0) {
        if (ms < 0)
            pthread_cond_wait(&c->released, &c->mu);
        else if (pthread_cond_timedwait(&c->released, &c->mu, &until) == ETIMEDOUT)
            break;
    }
    bool done = c->inflight == 0;
    pthread_mutex_unlock(&c->mu);
    return done;
}

/* Replaces a shard's socket: whatever was queued on the old one is dropped (and released). */
static void reset_conn(zps_client_t *c, conn_t *k)
{
    seal_end(k);
    shm_end(k);
    close_monitor(k);
    if (k->sock)
        zmq_close(k->sock);
    k->sock = NULL;
    if (open_conn(c, k) != 0)
        zps_warn("%s: cannot reconnect: %s", k->endpoint, c->err);
}

/* ---- the exchange ---- */

static int send_request(zps_client_t *c, conn_t *k)
{
    if (!k->sock)
        return ZPS_ESOCKET;
    if (k->shm_state == SHM_WANTED)
        shm_ask(c, k);
    if (shm_use(k)) {
        /* Only the header: the payload, if any, is in the slot. */
        int rc = zps_wire_send(k->sock, NULL, &k->req, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
        if (rc && rc != ZPS_EAGAIN)
            set_error(c, "%s: send failed: %s", k->endpoint, zmq_strerror(zmq_errno()));
        if (rc == 0)
            k->drops_at_send = k->drops;
        return rc;
    }
    if (k->seal_state == SEAL_WANTED)
        seal_ask(c, k);
    if (k->seal_state == SEAL_ON) {
        /* Sealed into a message of its own: the caller's buffer is free at once. */
        int rc =
            zps_wire_send_sealed(k->dsock, NULL, &k->req, k->payload, k->payload ? k->count : 0,
                                 k->payload != NULL, &k->seal, ZMQ_DONTWAIT);
        if (rc && rc != ZPS_EAGAIN)
            set_error(c, "%s: send failed: %s", k->endpoint, zmq_strerror(zmq_errno()));
        if (rc == 0)
            k->drops_at_send = k->drops;
        if (rc == 0 && !k->seal_tcp && k->seal_wait_ns == 0)
            k->seal_wait_ns = zps_now_ns();
        return rc;
    }
    zps_wire_free_fn *ffn = NULL;
    if (k->payload && k->count > 0) {
        pthread_mutex_lock(&c->mu);
        c->inflight++;
        pthread_mutex_unlock(&c->mu);
        ffn = payload_released;
    }
    /* A DEALER queues while its server is away, but not while it has no
     * pipe at all, as after a refused CURVE handshake until it reconnects:
     * so never wait here. ZPS_EAGAIN (nothing sent, the payload released)
     * is for the caller to try again soon. A payload's checksum was computed
     * with its finite check (sum_slices). */
    int rc = k->payload ? zps_wire_send_summed(k->sock, NULL, &k->req, k->payload, k->count, ffn, c,
                                               ZMQ_DONTWAIT)
                        : zps_wire_send(k->sock, NULL, &k->req, NULL, 0, NULL, NULL, ZMQ_DONTWAIT);
    if (rc && rc != ZPS_EAGAIN)
        set_error(c, "%s: send failed: %s", k->endpoint, zmq_strerror(zmq_errno()));
    if (rc == 0)
        k->drops_at_send = k->drops;
    return rc;
}

/* Prepares request headers for every shard; the caller then fills in specifics. */
static void begin(zps_client_t *c, enum zps_msg_type type)
{
    uint64_t id = ++c->next_id;
    c->err[0] = '\0';
    c->remote_status = 0;
    c->call = NULL;
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        zps_message_close(&k->reply);
        k->have_reply = false;
        k->outcome = 0;
        k->took = false;
        k->active = true;
        k->pending = false;
        k->payload = NULL;
        k->count = 0;
        zps_header_init(&k->req, type);
        k->req.worker = c->opts.worker;
        k->req.request_id = id;
        k->req.shard_index = (uint32_t)i;
        k->req.shard_count = (uint32_t)c->nconns;
        /* What changes a shard says which configuration it was agreed for. */
        if (type == ZPS_MSG_INIT || type == ZPS_MSG_PUSH)
            k->req.config_fingerprint = c->fingerprint;
        if (c->opts.wire_bf16 && (type == ZPS_MSG_PULL || type == ZPS_MSG_PUSH))
            k->req.flags |= ZPS_FLAG_BF16;
        if (c->opts.fail_not_initialised && type == ZPS_MSG_PULL)
            k->req.flags |= ZPS_FLAG_NOT_INIT_NOW;
    }
}

/* Takes one reply off shard k's socket, if one is there. */
static const char *request_name(const zps_header_t *h);

/* Whether a reply of h's type answers request req: its own type, or PULL for an exchange. */
static bool reply_fits(const zps_header_t *req, const zps_header_t *h)
{
    if (h->type == req->type)
        return true;
    return req->type == ZPS_MSG_PUSH && (req->flags & ZPS_FLAG_EXCHANGE) &&
           h->type == ZPS_MSG_PULL;
}

static int take_reply(zps_client_t *c, conn_t *k)
{
    for (;;) {
        zps_message_t m;
        /* Pull payloads are checksummed while they are copied out (copy_pulled). */
        int rc = zps_wire_recv_deferred(k->sock, ZMQ_DONTWAIT, false, &m);
        bool sealed = false;
        if (rc == ZPS_EAGAIN && k->dsock) {
            rc = zps_wire_recv_sealed(k->dsock, ZMQ_DONTWAIT, false, false, find_seal, k, &m);
            sealed = true;
        }
        if (rc == ZPS_EAGAIN)
            return 0;
        if (rc == ZPS_ESOCKET) {
            set_error(c, "%s: receive failed: %s", k->endpoint, zmq_strerror(zmq_errno()));
            return rc;
        }
        if (sealed && rc == ZPS_ESEAL) {
            /* Nothing of it can be trusted. Only the server's notice that it
             * does not know the session changes anything: ask for a new one
             * and send again what it did not take. */
            if (m.seal_unknown && k->seal_state == SEAL_ON &&
                memcmp(m.seal_id, k->seal.id, ZPS_SEAL_ID_BYTES) == 0) {
                zps_debug("%s: the server no longer knows our sealed session", k->endpoint);
                seal_end(k);
                k->drops++;
                if (k->pending)
                    k->resend_at_ns = zps_now_ns();
            }
            zps_message_close(&m);
            continue;
        }
        if (!sealed && m.hdr.reply && m.hdr.type == ZPS_MSG_SESSION) {
            if (k->seal_state == SEAL_ASKED && m.hdr.request_id == k->seal_request_id)
                seal_granted(c, k, &m);
            zps_message_close(&m);
            continue;
        }
        if (!sealed && m.hdr.reply && m.hdr.type == ZPS_MSG_SHM) {
            if (k->shm_state == SHM_ASKED && m.hdr.request_id == k->shm_request_id)
                shm_granted(c, k, &m);
            zps_message_close(&m);
            continue;
        }
        bool ours = m.hdr.reply && m.hdr.request_id == k->req.request_id;
        if (ours && k->pending && (m.hdr.status == ZPS_ESHM || m.hdr.status == ZPS_ECHECKSUM) &&
            (k->req.flags & ZPS_FLAG_SHM)) {
            /* The server has no session for this connection (it dropped
             * and came back, or its segment is gone): over the socket, at
             * once; ask again. A gradient that failed its checksum in the
             * slot was scribbled on there by another process of this user:
             * over the socket, and the slot is not used again. */
            if (m.hdr.status == ZPS_ECHECKSUM)
                shm_give_up(k, "the gradient in its shared-memory slot was changed under us "
                               "(it failed its checksum at the server)");
            else
                zps_debug("%s: the server has no shared-memory session for us", k->endpoint);
            zps_message_close(&m);
            shm_end(k);
            if (send_request(c, k) != 0)
                k->resend_at_ns = zps_now_ns() + SEND_AGAIN_MS * 1000000ull;
            continue;
        }
        if (!ours || !k->pending) {
            /* A reply to an earlier request (answered twice after a resend,
             * or after that call gave up): not ours to use. */
            zps_message_close(&m);
            continue;
        }
        if (rc == 0 && !reply_fits(&k->req, &m.hdr)) {
            set_error(c, "%s: a reply of type %u to our %s request: not a zps server's answer",
                      k->endpoint, (unsigned)m.hdr.type, request_name(&k->req));
            zps_message_close(&m);
            return ZPS_ETYPE;
        }
        if (rc) {
            set_error(c, "%s: bad reply: %s", k->endpoint, zps_strerror(rc));
            zps_message_close(&m);
            return rc;
        }
        k->reply = m;
        k->have_reply = true;
        k->pending = false;
        if (m.hdr.status != 0) {
            k->outcome = ZPS_EREMOTE;
            /* The first refusal of the call is the one reported. */
            if (c->remote_status == 0) {
                c->remote_status = m.hdr.status;
                set_error(c, "%s: %s (%s)", k->endpoint,
                          m.hdr.error[0] ? m.hdr.error : zps_strerror(m.hdr.status),
                          zps_errname(m.hdr.status));
            }
            return ZPS_EREMOTE;
        }
    }
}

static const char *request_name(const zps_header_t *h)
{
    switch (h->type) {
    case ZPS_MSG_INIT:
        return "init";
    case ZPS_MSG_PULL:
        return "pull";
    case ZPS_MSG_PUSH:
        return h->flags & ZPS_FLAG_EXCHANGE ? "exchange" : "push";
    case ZPS_MSG_STATS:
        return "stats";
    case ZPS_MSG_HEARTBEAT:
        return "heartbeat";
    case ZPS_MSG_CHECKPOINT:
        return "checkpoint";
    case ZPS_MSG_RELOAD_KEYS:
        return "reload-keys";
    default:
        return "request";
    }
}

/* "10 s", or "1500 ms" for a time that is not whole seconds. */
static const char *format_ms(long ms, char *buf, size_t size)
{
    if (ms % 1000 == 0)
        snprintf(buf, size, "%ld s", ms / 1000);
    else
        snprintf(buf, size, "%ld ms", ms);
    return buf;
}

/* One record per server the call still waits for: which, for what, how long. */
static void log_waiting(zps_client_t *c, uint64_t since_ns, uint64_t now)
{
    char what[64], took[32];
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        if (!k->pending)
            continue;
        if (c->call)
            snprintf(what, sizeof(what), "%s", c->call);
        else if (k->req.type == ZPS_MSG_PULL || k->req.type == ZPS_MSG_PUSH)
            snprintf(what, sizeof(what), "%s (clock %llu)", request_name(&k->req),
                     (unsigned long long)k->req.clock);
        else
            snprintf(what, sizeof(what), "%s", request_name(&k->req));
        long ms = (long)((now - since_ns) / 1000000ull);
        format_ms(ms >= 1000 ? (ms + 500) / 1000 * 1000 : ms, took, sizeof(took));
        char why[400];
        if (k->up) {
            zps_info("waiting for server %zu at %s: no answer to %s for %s", i, k->endpoint, what,
                     took);
        } else {
            if (k->connect_errno)
                connect_words(k->connect_errno, why, sizeof(why));
            else
                why_unanswered(k->endpoint, why, sizeof(why));
            zps_warn("waiting for server %zu at %s: no answer to %s for %s (not connected: %s)", i,
                     k->endpoint, what, took, why);
        }
    }
}

/*
 * Sends the prepared requests of the active shards and waits for their
 * replies. Without `all` the first failure ends the wait; with it, a shard
 * that refuses or answers badly does not stop the wait for the others, so
 * each shard's outcome is known (k->outcome) and the first failure is
 * returned. On failure, every shard still waiting has its socket replaced;
 * either way no payload of the caller's is held by ZeroMQ on return.
 */
static int exchange(zps_client_t *c, bool all)
{
    int rc = 0;
    int first = 0; /* with `all`: the first shard's failure */
    uint64_t now = zps_now_ns();
    const uint64_t start = now;
    uint64_t deadline =
        c->opts.timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)c->opts.timeout_ms * 1000000ull;
    uint64_t log_at =
        c->opts.wait_log_ms > 0 ? now + (uint64_t)c->opts.wait_log_ms * 1000000ull : UINT64_MAX;
    size_t waiting = 0;
    for (size_t i = 0; i < c->nconns && rc == 0; i++) {
        conn_t *k = &c->conns[i];
        if (!k->active)
            continue;
        read_monitor(k);
        k->up_in_call = k->up;
        k->pending = true;
        k->backoff_ms = c->opts.retry_ms;
        k->resend_at_ns =
            c->opts.retry_ms > 0 ? now + (uint64_t)c->opts.retry_ms * 1000000ull : UINT64_MAX;
        rc = send_request(c, k);
        if (rc == ZPS_EAGAIN) {
            rc = 0;
            k->resend_at_ns = now + SEND_AGAIN_MS * 1000000ull;
        }
        waiting++;
    }

    while (rc == 0 && waiting > 0) {
        now = zps_now_ns();
        for (size_t i = 0; i < c->nconns; i++) {
            if (c->conns[i].pending) {
                read_monitor(&c->conns[i]);
                seal_check_reached(&c->conns[i], now);
            }
        }
        /* A handshake the server refused will not succeed on a retry: say
         * so now rather than at the deadline. */
        for (size_t i = 0; i < c->nconns && rc == 0; i++) {
            conn_t *k = &c->conns[i];
            if (k->pending && k->auth_failed && !k->up) {
                set_error(c, "authentication failed for %s (%s)", k->endpoint,
                          k->auth_failed == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                              ? "the server does not accept this key"
                          : c->opts.curve
                              ? "the CURVE handshake failed: is --server-key this server's key?"
                              : "the server requires CURVE: give --key and --server-key");
                k->outcome = rc = ZPS_EAUTH;
            }
        }
        if (rc)
            break;
        /* A failed connection attempt: find out why, once per failure. A
         * refusal ends a one-shot caller's call now (fail_on_refused);
         * anyone else keeps waiting (ZeroMQ tries again), and is told at once
         * what it waits for and why. */
        for (size_t i = 0; i < c->nconns && rc == 0; i++) {
            conn_t *k = &c->conns[i];
            if (!k->pending || !k->retried || k->up ||
                (k->refusal_logged && !c->opts.fail_on_refused))
                continue;
            k->retried = false;
            k->connect_errno = connect_reason(k->endpoint, 500);
            if (k->connect_errno == 0)
                continue;
            char words[128];
            connect_words(k->connect_errno, words, sizeof(words));
            if (c->opts.fail_on_refused &&
                (k->connect_errno == ECONNREFUSED || k->connect_errno == ENOENT)) {
                set_error(c, "%s: %s", k->endpoint, words);
                k->outcome = rc = ZPS_EUNREACHABLE;
            } else if (!k->refusal_logged && c->opts.wait_log_ms > 0) {
                zps_warn("waiting for server %zu at %s: %s, retrying", i, k->endpoint, words);
                k->refusal_logged = true;
            }
        }
        if (rc)
            break;
        if (now >= deadline) {
            /* Name a server that was never there first: that is the likelier mistake. */
            char took[32];
            format_ms(c->opts.timeout_ms, took, sizeof(took));
            rc = ZPS_ETIMEDOUT;
            for (size_t i = 0; i < c->nconns; i++)
                if (c->conns[i].pending)
                    c->conns[i].outcome = c->conns[i].up_in_call ? ZPS_ETIMEDOUT : ZPS_EUNREACHABLE;
            for (size_t i = 0; i < c->nconns; i++) {
                conn_t *k = &c->conns[i];
                if (k->pending && !k->up_in_call) {
                    rc = ZPS_EUNREACHABLE;
                    char why[400];
                    why_unanswered(k->endpoint, why, sizeof(why));
                    set_error(c, "no answer from %s within %s (%s)", k->endpoint, took, why);
                    break;
                }
            }
            /* With CURVE, a server that accepts the connection but never
             * completes the handshake holds another key than --server-key
             * (or is not a CURVE server). */
            for (size_t i = 0; c->opts.curve && rc == ZPS_EUNREACHABLE && i < c->nconns; i++) {
                conn_t *k = &c->conns[i];
                if (k->pending && !k->up_in_call && k->tcp_seen) {
                    rc = k->outcome = ZPS_EAUTH;
                    set_error(c,
                              "authentication failed for %s: connected, but no CURVE handshake "
                              "completed within %s (is --server-key this server's key?)",
                              k->endpoint, took);
                }
            }
            for (size_t i = 0; rc == ZPS_ETIMEDOUT && i < c->nconns; i++) {
                if (c->conns[i].pending) {
                    set_error(c, "%s: connected, but no reply within %s", c->conns[i].endpoint,
                              took);
                    break;
                }
            }
            break;
        }
        if (now >= log_at) {
            log_waiting(c, start, now);
            log_at = now + (uint64_t)c->opts.wait_log_ms * WAIT_LOG_FACTOR * 1000000ull;
        }
        uint64_t wake = deadline < log_at ? deadline : log_at;
        size_t n = 0;
        for (size_t i = 0; i < c->nconns; i++) {
            conn_t *k = &c->conns[i];
            if (!k->pending)
                continue;
            /* A request that carries values (INIT, PUSH, an exchange) is
             * sent again only when the connection it went out on has ended
             * since: TCP loses nothing while it lasts, and a shard's worth of
             * values sent twice is held twice by the server until the second
             * is acknowledged (an INIT of 64 MiB slowed past retry_ms by a
             * busy machine was). An exchange also waits on its rule as a
             * pull does. */
            bool carries = k->req.type == ZPS_MSG_INIT || k->req.type == ZPS_MSG_PUSH;
            if (k->resend_at_ns <= now && carries && k->up && k->drops == k->drops_at_send) {
                k->resend_at_ns = now + (uint64_t)k->backoff_ms * 1000000ull;
            } else if (k->resend_at_ns <= now) {
                zps_debug("%s: no reply after %d ms, sending request %llu again", k->endpoint,
                          k->backoff_ms, (unsigned long long)k->req.request_id);
                rc = send_request(c, k);
                if (rc == ZPS_EAGAIN) {
                    rc = 0;
                    k->resend_at_ns = now + SEND_AGAIN_MS * 1000000ull;
                } else if (rc != 0) {
                    break;
                } else if (c->opts.retry_ms <= 0) {
                    k->resend_at_ns = UINT64_MAX; /* sent once, as asked */
                } else {
                    k->backoff_ms =
                        k->backoff_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : k->backoff_ms * 2;
                    k->resend_at_ns = now + (uint64_t)k->backoff_ms * 1000000ull;
                }
            }
            if (k->resend_at_ns < wake)
                wake = k->resend_at_ns;
            if (k->seal_state == SEAL_ON && !k->seal_tcp && k->seal_wait_ns &&
                k->seal_wait_ns + SEAL_CONNECT_MS * 1000000ull < wake)
                wake = k->seal_wait_ns + SEAL_CONNECT_MS * 1000000ull;
            c->items[n].socket = k->sock;
            c->items[n].fd = 0;
            c->items[n].events = ZMQ_POLLIN;
            c->items[n].revents = 0;
            n++;
            /* The monitors too: a refused handshake ends the call now. */
            void *more[3] = {k->mon, k->dsock, k->dmon};
            for (size_t j = 0; j < 3; j++) {
                if (!more[j])
                    continue;
                c->items[n].socket = more[j];
                c->items[n].fd = 0;
                c->items[n].events = ZMQ_POLLIN;
                c->items[n].revents = 0;
                n++;
            }
        }
        if (rc)
            break;
        long wait_ms = wake == UINT64_MAX ? -1 : (long)((wake - now + 999999) / 1000000);
        if (zmq_poll(c->items, (int)n, wait_ms) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            set_error(c, "poll failed: %s", zmq_strerror(zmq_errno()));
            rc = ZPS_ESOCKET;
            break;
        }
        for (size_t i = 0; i < c->nconns && rc == 0; i++) {
            conn_t *k = &c->conns[i];
            if (!k->pending)
                continue;
            rc = take_reply(c, k);
            if (rc && all && rc != ZPS_ESOCKET) {
                /* This shard's answer is in, a refusal or a bad reply: note
                 * it, and keep waiting for the others'. */
                k->outcome = rc;
                k->pending = false;
                first = first ? first : rc;
                rc = 0;
            }
            if (!k->pending)
                waiting--;
        }
    }
    if (rc == 0)
        rc = first;

    if (rc) {
        /* Give ZeroMQ a moment to finish what it is sending, then drop what
         * cannot leave, so the caller's buffer is free. */
        if (!wait_released(c, 50)) {
            for (size_t i = 0; i < c->nconns; i++)
                if (c->conns[i].pending)
                    reset_conn(c, &c->conns[i]);
        }
        for (size_t i = 0; i < c->nconns; i++)
            c->conns[i].pending = false;
    }
    /* Normally immediate: a reply means the server had the whole payload. */
    while (!wait_released(c, 5000))
        zps_warn("still waiting for ZeroMQ to release a pushed buffer");
    return rc;
}

/* Splits a full vector of n elements by shard into the prepared requests. */
static void attach_slices(zps_client_t *c, const float *v, uint64_t n)
{
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        zps_range_t r;
        zps_shard_range(n, (uint32_t)i, (uint32_t)c->nconns, &r);
        k->req.total = n;
        k->req.offset = r.lo;
        k->req.length = zps_range_len(r);
        k->payload = v ? v + r.lo : NULL;
        k->count = (size_t)zps_range_len(r);
    }
}

/* Refuses a call whose value `bad` of shard k's slice is not finite (nothing is sent). */
static int refuse_nonfinite(zps_client_t *c, const conn_t *k, const char *what, size_t bad)
{
    set_error(c, "%s %llu is %g: nothing was sent", what, (unsigned long long)(k->req.offset + bad),
              (double)((const float *)k->payload)[bad]);
    return ZPS_ENONFINITE;
}

/*
 * Computes each shard's payload checksum in the same pass over memory that
 * checks every value is finite, before anything is sent: a value no shard
 * would take is refused here, so no shard takes a part of it. `what` names
 * an element in the message ("gradient element"). Returns 0 or
 * ZPS_ENONFINITE.
 */
static int sum_slices(zps_client_t *c, const char *what)
{
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        const float *v = k->payload;
        size_t bad;
        if (k->req.type == ZPS_MSG_PUSH && k->shm_state == SHM_ON && k->count == k->shm_len) {
            /* Into the shared-memory slot in the same pass (shm_use). */
            float mx;
            k->req.checksum = zps_crc_copy_out_scan_max(k->shm_slot, v, k->count, &bad, &mx);
            k->shm_written_id = bad < k->count ? 0 : k->req.request_id;
        } else {
            k->req.checksum = zps_crc_scan(v, k->count, &bad);
        }
        if (bad < k->count)
            return refuse_nonfinite(c, k, what, bad);
    }
    return 0;
}

/*
 * As sum_slices for a bfloat16 push (wire_bf16): every value is checked
 * finite first, so that a refused gradient changes nothing; then each
 * shard's slice, with the residual of the earlier pushes added, is rounded
 * into its bfloat16 buffer (which becomes the payload) and checksummed, and
 * the residual keeps what the rounding left out. n: the model's elements.
 */
static int narrow_slices(zps_client_t *c, uint64_t n, const char *what)
{
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        size_t bad;
        if (!zps_all_finite(k->payload, k->count, &bad))
            return refuse_nonfinite(c, k, what, bad);
    }
    if (c->resid_n != n) {
        /* A model of another size: nothing of the old one carries over. */
        free(c->resid);
        c->resid_n = 0;
        c->resid = calloc((size_t)n, sizeof(float));
        if (!c->resid)
            return ZPS_ENOMEM;
        c->resid_n = n;
    }
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        if (k->narrow_cap < k->count) {
            uint16_t *b = realloc(k->narrow, k->count * sizeof(uint16_t));
            if (!b)
                return ZPS_ENOMEM;
            k->narrow = b;
            k->narrow_cap = k->count;
        }
    }
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        k->req.checksum =
            zps_bf16_narrow_feedback(k->narrow, k->payload, c->resid + k->req.offset, k->count);
        k->payload = k->narrow;
    }
    return 0;
}

/*
 * Puts the lease request set for this call on shard 0's request: `ask`
 * (a pull, an exchange) asks for leases, `complete` (a push, an exchange)
 * names the batch. Used once: a second attempt of the call within it
 * (copy_shm's pull over the socket) asks for nothing.
 */
static void attach_lease(zps_client_t *c, bool ask, bool complete)
{
    if (!c->lease_set || c->nconns == 0)
        return;
    c->lease_set = false;
    zps_header_t *h = &c->conns[0].req;
    const zps_lease_req_t *l = &c->lease;
    if (complete)
        h->lease_done = l->done;
    if (!ask)
        return;
    h->flags |= ZPS_FLAG_LEASE;
    h->plan_examples = l->examples;
    h->plan_batch = l->batch;
    h->plan_epochs = l->epochs;
    h->lease_want = l->want;
    h->nleases = l->nhave;
    memcpy(h->leases, l->have, l->nhave * sizeof(uint64_t));
}

int zps_client_set_lease(zps_client_t *c, const zps_lease_req_t *req)
{
    if (!req) {
        c->lease_set = false;
        return 0;
    }
    if (req->nhave > ZPS_CLIENT_MAX_LEASES || req->want > ZPS_CLIENT_MAX_LEASES)
        return ZPS_EINVAL;
    c->lease = *req;
    c->lease_set = true;
    return 0;
}

int zps_client_finish(zps_client_t *c)
{
    begin(c, ZPS_MSG_HEARTBEAT);
    for (size_t i = 0; i < c->nconns; i++)
        c->conns[i].req.flags |= ZPS_FLAG_FINISHED;
    int rc = exchange(c, false);
    for (size_t i = 0; i < c->nconns; i++)
        zps_message_close(&c->conns[i].reply);
    return rc;
}

/* The replies that said OK, folded into info (NULL: nothing to do). */
static void collect_info(zps_client_t *c, zps_reply_info_t *info)
{
    if (!info)
        return;
    memset(info, 0, sizeof(*info));
    info->min_version = UINT64_MAX;
    info->min_clock = UINT64_MAX;
    bool first = true;
    for (size_t i = 0; i < c->nconns; i++) {
        if (!c->conns[i].have_reply || c->conns[i].reply.hdr.status != 0)
            continue;
        const zps_header_t *h = &c->conns[i].reply.hdr;
        if (h->model_version < info->min_version)
            info->min_version = h->model_version;
        if (h->model_version > info->max_version)
            info->max_version = h->model_version;
        if (h->min_clock < info->min_clock)
            info->min_clock = h->min_clock;
        if (h->update_staleness > info->update_staleness)
            info->update_staleness = h->update_staleness;
        if (first || h->next_clock < info->next_clock)
            info->next_clock = h->next_clock;
        first = false;
        info->retried |= (h->flags & ZPS_FLAG_RETRY) != 0;
        info->dropped |= (h->flags & ZPS_FLAG_DROPPED) != 0;
        info->buffered |= (h->flags & ZPS_FLAG_BUFFERED) != 0;
        info->rejoined |= (h->flags & ZPS_FLAG_REJOINED) != 0;
        if (h->waited_us > info->waited_us)
            info->waited_us = h->waited_us;
        if (i == 0 && (h->flags & ZPS_FLAG_LEASE)) {
            info->leased = true;
            info->exhausted = (h->flags & ZPS_FLAG_EXHAUSTED) != 0;
            info->nleases = h->nleases <= ZPS_CLIENT_MAX_LEASES ? h->nleases : 0;
            memcpy(info->leases, h->leases, info->nleases * sizeof(uint64_t));
        }
    }
}

/* ---- the shards' configuration ---- */

/* A JSON value as a reader wants it: numbers in the fewest digits that read back exactly. */
static void format_value(const zps_json_t *v, char *buf, size_t size)
{
    if (!v) {
        snprintf(buf, size, "(none)");
    } else if (v->type == ZPS_JSON_NUMBER) {
        for (int digits = 6; digits <= 17; digits++) {
            snprintf(buf, size, "%.*g", digits, v->number);
            if (strtod(buf, NULL) == v->number)
                break;
        }
    } else if (v->type == ZPS_JSON_STRING) {
        snprintf(buf, size, "%s", v->string);
    } else if (v->type == ZPS_JSON_BOOL) {
        snprintf(buf, size, "%s", v->boolean ? "true" : "false");
    } else {
        snprintf(buf, size, "?");
    }
}

static bool same_value(const zps_json_t *a, const zps_json_t *b)
{
    if (!a || !b || a->type != b->type)
        return false;
    switch (a->type) {
    case ZPS_JSON_NUMBER:
        return a->number == b->number;
    case ZPS_JSON_STRING:
        return strcmp(a->string, b->string) == 0;
    case ZPS_JSON_BOOL:
        return a->boolean == b->boolean;
    default:
        return true;
    }
}

/*
 * Says in c->err how the shards' configurations differ: asks every shard for
 * its STATS and compares the settings under "config" (the ones the
 * fingerprint covers) of each shard whose fingerprint is not `ref`'s with
 * those of shard `ref`. Without a STATS answer, names the fingerprints.
 */
static void explain_config(zps_client_t *c, size_t ref, const char *outcome)
{
    uint64_t *fp = calloc(c->nconns, sizeof(*fp));
    zps_json_t **cfg = calloc(c->nconns, sizeof(*cfg));
    if (!fp || !cfg) {
        set_error(c, "the shards' configurations differ: %s", outcome);
        free(fp);
        free(cfg);
        return;
    }
    for (size_t i = 0; i < c->nconns; i++)
        fp[i] = c->conns[i].fingerprint;
    begin(c, ZPS_MSG_STATS);
    exchange(c, true);
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        if (k->have_reply && k->reply.hdr.status == 0 && k->reply.json)
            zps_json_parse(k->reply.json, &cfg[i], NULL, 0);
        zps_message_close(&k->reply);
    }
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_strbuf_printf(&b, "the shards' configurations differ, %s:", outcome);
    const zps_json_t *rcfg = zps_json_get(cfg[ref], "config");
    const char *sep = " ";
    for (size_t i = 0; i < c->nconns; i++) {
        if (fp[i] == 0 || fp[i] == fp[ref])
            continue;
        zps_strbuf_printf(&b, "%sshard %zu at %s differs from shard %zu at %s in", sep, i,
                          c->conns[i].endpoint, ref, c->conns[ref].endpoint);
        sep = "; ";
        const zps_json_t *ic = zps_json_get(cfg[i], "config");
        size_t named = 0;
        for (size_t j = 0; rcfg && ic && rcfg->type == ZPS_JSON_OBJECT && j < rcfg->count; j++) {
            const char *key = rcfg->keys[j];
            const zps_json_t *mine = zps_json_get(ic, key);
            if (strcmp(key, "fingerprint") == 0 || same_value(&rcfg->items[j], mine))
                continue;
            char a[64], r[64];
            format_value(mine, a, sizeof(a));
            format_value(&rcfg->items[j], r, sizeof(r));
            zps_strbuf_printf(&b, "%s %s (%s, not %s)", named++ ? "," : "", key, a, r);
        }
        if (named == 0)
            zps_strbuf_printf(&b, " its configuration fingerprint (%016llx, not %016llx)",
                              (unsigned long long)fp[i], (unsigned long long)fp[ref]);
    }
    char *text = zps_strbuf_take(&b);
    set_error(c, "%s", text ? text : "the shards' configurations differ");
    free(text);
    for (size_t i = 0; i < c->nconns; i++)
        zps_json_free(cfg[i]);
    free(cfg);
    free(fp);
}

/*
 * The fingerprints the shards last reported (k->fingerprint) must agree; a
 * shard that reports none (0: an older server) is not compared. Sets
 * c->fingerprint to the agreed one and returns 0, or returns ZPS_ECONFIG
 * with the differences in c->err, `outcome` saying what the caller did not do.
 */
static int agree_config(zps_client_t *c, const char *outcome)
{
    size_t ref = c->nconns;
    for (size_t i = 0; i < c->nconns; i++) {
        uint64_t fp = c->conns[i].fingerprint;
        if (fp == 0)
            continue;
        if (ref == c->nconns) {
            ref = i;
        } else if (fp != c->conns[ref].fingerprint) {
            explain_config(c, ref, outcome);
            return ZPS_ECONFIG;
        }
    }
    c->fingerprint = ref < c->nconns ? c->conns[ref].fingerprint : 0;
    return 0;
}

/* Notes the fingerprint of every shard's reply. */
static void note_fingerprints(zps_client_t *c)
{
    for (size_t i = 0; i < c->nconns; i++)
        if (c->conns[i].have_reply)
            c->conns[i].fingerprint = c->conns[i].reply.hdr.config_fingerprint;
}

/* ---- INIT ---- */

/*
 * Before an INIT changes anything: asks every shard, as an observer's
 * HEARTBEAT (no effect on any worker), which configuration it runs, which
 * shard it is and which N it holds. The configurations must agree
 * (agree_config). A shard that will refuse this INIT (it is another shard
 * than its place in the list, or holds another N) is marked `refuses`.
 */
static int probe_shards(zps_client_t *c, uint64_t n, bool *refusal)
{
    begin(c, ZPS_MSG_HEARTBEAT);
    c->call = "init"; /* to the user, this is the INIT waiting */
    for (size_t i = 0; i < c->nconns; i++)
        c->conns[i].req.worker = -1;
    int rc = exchange(c, false);
    if (rc)
        return rc;
    note_fingerprints(c);
    *refusal = false;
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        const zps_header_t *h = &k->reply.hdr;
        k->refuses = (h->shard_count != 0 &&
                      (h->shard_index != i || h->shard_count != (uint32_t)c->nconns)) ||
                     (h->total != 0 && h->total != n);
        *refusal |= k->refuses;
    }
    return agree_config(c, "nothing was initialised");
}

/* INIT requests for every shard, checksummed and checked for finite values. */
static int prepare_init(zps_client_t *c, const float *values, uint64_t n)
{
    begin(c, ZPS_MSG_INIT);
    attach_slices(c, values, n);
    return sum_slices(c, "initial value");
}

int zps_client_init(zps_client_t *c, const float *values, uint64_t n)
{
    if (n == 0 || !values)
        return ZPS_EINVAL;
    bool refusal = false;
    int rc = probe_shards(c, n, &refusal);
    if (rc == 0)
        rc = prepare_init(c, values, n);
    if (rc == 0 && refusal) {
        /* The shards that will refuse get the INIT alone: their refusal is
         * the answer, and no other shard is initialised meanwhile. Should
         * they take it after all, the others get it next. */
        for (size_t i = 0; i < c->nconns; i++)
            c->conns[i].active = c->conns[i].refuses;
        rc = exchange(c, false);
        if (rc == 0)
            rc = prepare_init(c, values, n);
    }
    if (rc == 0)
        rc = exchange(c, false);
    if (rc == 0)
        c->total = n;
    return rc;
}

/* Checks the pull replies against the range rule; sets *total. */
static int check_pull_replies(zps_client_t *c, uint64_t *total)
{
    uint64_t n = c->conns[0].reply.hdr.total;
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        const zps_header_t *h = &k->reply.hdr;
        if (h->total != n) {
            set_error(c, "%s: reports a %llu-element model, %s reports %llu", k->endpoint,
                      (unsigned long long)h->total, c->conns[0].endpoint, (unsigned long long)n);
            return ZPS_ESIZE;
        }
        zps_range_t r;
        zps_shard_range(n, (uint32_t)i, (uint32_t)c->nconns, &r);
        if (h->offset != r.lo || h->length != zps_range_len(r)) {
            set_error(c,
                      "%s: holds [%llu, %llu), but as shard %zu of %zu it should hold "
                      "[%llu, %llu)",
                      k->endpoint, (unsigned long long)h->offset,
                      (unsigned long long)(h->offset + h->length), i, c->nconns,
                      (unsigned long long)r.lo, (unsigned long long)r.hi);
            return ZPS_ERANGE;
        }
    }
    *total = n;
    return 0;
}

/*
 * A pull reply whose parameters are in k's shared memory: copied into dst
 * with their checksum checked. The buffer is the session's until its next
 * request. ZPS_ESHM when they cannot be had from there (changed under us by
 * another process of this user, or a buffer the session does not have):
 * the session is given up, and the caller pulls again over the socket.
 */
static int copy_shm(zps_client_t *c, conn_t *k, float *dst)
{
    const zps_header_t *h = &k->reply.hdr;
    if (!k->shm_base || h->shm_buffer >= k->shm_nbufs || h->length != k->shm_len) {
        set_error(c,
                  "%s: a shared-memory reply (buffer %u, %llu elements) that this client's "
                  "session cannot hold",
                  k->endpoint, h->shm_buffer, (unsigned long long)h->length);
        shm_give_up(k, "a shared-memory reply that its session cannot hold");
        return ZPS_ESHM;
    }
    const unsigned char *src = k->shm_base + k->shm_buf_offset + h->shm_buffer * k->shm_stride;
    if (zps_crc32c_copy(0, dst, src, h->length * sizeof(float)) != h->checksum ||
        zps_shm_guard_lost(k->shm_base)) {
        set_error(c, "%s: the pulled parameters in shared memory fail their checksum", k->endpoint);
        shm_give_up(k, "the parameters in its shared memory were changed under us (they failed "
                       "their checksum)");
        return ZPS_ESHM;
    }
    return 0;
}

static int copy_pulled(zps_client_t *c, float *out)
{
    int rc = 0;
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        const zps_header_t *h = &k->reply.hdr;
        if (rc == 0 && (h->flags & ZPS_FLAG_SHM)) {
            rc = copy_shm(c, k, out + h->offset);
        } else if (rc == 0 && zps_message_copy_verified(&k->reply, out + h->offset) != 0) {
            set_error(c, "%s: the pulled parameters fail their checksum", k->endpoint);
            rc = ZPS_ECHECKSUM;
        }
        k->version = h->model_version;
        zps_message_close(&k->reply);
    }
    return rc;
}

/* Every shard's PULL request is for `clock`; an observer may wait for its model. */
static void set_pull_clock(zps_client_t *c, uint64_t clock)
{
    for (size_t i = 0; i < c->nconns; i++) {
        c->conns[i].req.clock = clock;
        if (c->opts.worker == -1 && c->opts.observe)
            c->conns[i].req.flags |= ZPS_FLAG_WAIT |
                                     (c->opts.observe_pushes ? ZPS_FLAG_BY_PUSHES : 0);
    }
}

/*
 * Every shard answered a pull (or an exchange) of an n-element model: checks
 * the replies' ranges and configurations and copies the parameters into
 * out[n]. `refused` ends the message of a configuration that differs.
 */
static int take_pulled(zps_client_t *c, float *out, uint64_t n, zps_reply_info_t *info,
                       const char *refused)
{
    uint64_t total = 0;
    int rc = check_pull_replies(c, &total);
    if (rc == 0 && total != n) {
        set_error(c, "the servers hold a %llu-element model, not %llu", (unsigned long long)total,
                  (unsigned long long)n);
        rc = ZPS_ESIZE;
    }
    if (rc == 0) {
        note_fingerprints(c);
        rc = agree_config(c, refused);
    }
    if (rc)
        return rc;
    collect_info(c, info);
    rc = copy_pulled(c, out);
    if (rc == 0)
        c->total = n;
    return rc;
}

static int pull_once(zps_client_t *c, uint64_t clock, float *out, uint64_t n,
                     zps_reply_info_t *info)
{
    begin(c, ZPS_MSG_PULL);
    attach_slices(c, NULL, n);
    set_pull_clock(c, clock);
    for (size_t i = 0; i < c->nconns; i++)
        c->conns[i].req.flags |= ZPS_FLAG_RANGE;
    attach_lease(c, true, false);
    int rc = exchange(c, false);
    return rc ? rc : take_pulled(c, out, n, info, "the pull is refused");
}

/* A pull whose parameters could not be had from shared memory (copy_shm) is made again over the
 * socket: a pull changes nothing at the server. */
int zps_client_pull(zps_client_t *c, uint64_t clock, float *out, uint64_t n, zps_reply_info_t *info)
{
    if (n == 0 || !out)
        return ZPS_EINVAL;
    int rc = pull_once(c, clock, out, n, info);
    return rc == ZPS_ESHM ? pull_once(c, clock, out, n, info) : rc;
}

static int pull_alloc_once(zps_client_t *c, uint64_t clock, float **out, uint64_t *n,
                           zps_reply_info_t *info)
{
    begin(c, ZPS_MSG_PULL);
    set_pull_clock(c, clock);
    int rc = exchange(c, false);
    uint64_t total = 0;
    if (rc == 0)
        rc = check_pull_replies(c, &total);
    if (rc == 0) {
        note_fingerprints(c);
        rc = agree_config(c, "the pull is refused");
    }
    if (rc)
        return rc;
    float *v = malloc(total * sizeof(float));
    if (!v)
        return ZPS_ENOMEM;
    collect_info(c, info);
    rc = copy_pulled(c, v);
    if (rc) {
        free(v);
        return rc;
    }
    c->total = total;
    *out = v;
    *n = total;
    return 0;
}

int zps_client_pull_alloc(zps_client_t *c, uint64_t clock, float **out, uint64_t *n,
                          zps_reply_info_t *info)
{
    int rc = pull_alloc_once(c, clock, out, n, info);
    return rc == ZPS_ESHM ? pull_alloc_once(c, clock, out, n, info) : rc;
}

/*
 * A push that failed at some shard: when another took it, the call's answer
 * is ZPS_EPARTIAL with c->err naming who took it and why the others did not;
 * otherwise `rc`, the exchange's own failure.
 */
static int push_outcome(zps_client_t *c, uint64_t clock, int rc)
{
    size_t took = 0;
    for (size_t i = 0; i < c->nconns; i++)
        took += c->conns[i].took;
    if (took == 0)
        return rc;
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_strbuf_printf(&b, "push at clock %llu taken by shard", (unsigned long long)clock);
    const char *sep = took > 1 ? "s " : " ";
    for (size_t i = 0; i < c->nconns; i++) {
        if (c->conns[i].took) {
            zps_strbuf_printf(&b, "%s%zu", sep, i);
            sep = ", ";
        }
    }
    zps_strbuf_printf(&b, " only; not by");
    sep = " ";
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        if (k->took)
            continue;
        zps_strbuf_printf(&b, "%sshard %zu at %s: ", sep, i, k->endpoint);
        sep = "; ";
        if (k->outcome == ZPS_EREMOTE)
            zps_strbuf_printf(&b, "%s (%s)",
                              k->reply.hdr.error[0] ? k->reply.hdr.error
                                                    : zps_strerror(k->reply.hdr.status),
                              zps_errname(k->reply.hdr.status));
        else
            zps_strbuf_printf(&b, "%s (%s)", zps_strerror(k->outcome), zps_errname(k->outcome));
    }
    char *text = zps_strbuf_take(&b);
    set_error(c, "%s", text ? text : "push taken by some shards only");
    free(text);
    return ZPS_EPARTIAL;
}

/* The PUSH requests of grad[n] at `clock`, checked finite and summed; `flags` added. */
static int prepare_push(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n,
                        uint32_t batch, uint32_t flags)
{
    begin(c, ZPS_MSG_PUSH);
    attach_slices(c, grad, n);
    int rc = c->opts.wire_bf16 ? narrow_slices(c, n, "gradient element")
                               : sum_slices(c, "gradient element");
    if (rc)
        return rc;
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        k->req.clock = clock;
        k->req.batch = batch;
        k->req.model_version = k->version;
        k->req.flags |= flags;
    }
    attach_lease(c, (flags & ZPS_FLAG_EXCHANGE) != 0, true);
    return 0;
}

int zps_client_push(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n, uint32_t batch,
                    zps_reply_info_t *info)
{
    if (n == 0 || !grad)
        return ZPS_EINVAL;
    int rc = prepare_push(c, clock, grad, n, batch, 0);
    if (rc)
        return rc;
    /* Every shard's answer is awaited, so a push some shard took is never
     * reported as one that failed. */
    rc = exchange(c, true);
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        k->took = k->have_reply && k->reply.hdr.status == 0;
    }
    if (rc)
        rc = push_outcome(c, clock, rc);
    if (rc == 0 || rc == ZPS_EPARTIAL)
        collect_info(c, info);
    for (size_t i = 0; i < c->nconns; i++)
        zps_message_close(&c->conns[i].reply);
    return rc;
}

int zps_client_exchange(zps_client_t *c, uint64_t clock, const float *grad, uint64_t n,
                        uint32_t batch, float *out, zps_reply_info_t *info)
{
    if (n == 0 || !grad || !out || clock == UINT64_MAX)
        return ZPS_EINVAL;
    int rc = prepare_push(c, clock, grad, n, batch, ZPS_FLAG_EXCHANGE);
    if (rc)
        return rc;
    rc = exchange(c, true);
    /* A shard whose pull failed after it took the push says so (TAKEN). */
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        k->took = k->have_reply &&
                  (k->reply.hdr.status == 0 || (k->reply.hdr.flags & ZPS_FLAG_TAKEN) != 0);
    }
    if (rc) {
        size_t took = 0;
        for (size_t i = 0; i < c->nconns; i++)
            took += c->conns[i].took;
        /* Taken everywhere, the pull failed: the pull's failure, as zps_client_pull's. */
        if (took < c->nconns)
            rc = push_outcome(c, clock, rc);
        if (rc == ZPS_EPARTIAL)
            collect_info(c, info);
        for (size_t i = 0; i < c->nconns; i++)
            zps_message_close(&c->conns[i].reply);
        return rc;
    }
    rc = take_pulled(c, out, n, info, "the exchange's pull is refused");
    /* The push is taken; the parameters it brought back could not be had from shared memory
     * (copy_shm): the pull of the next clock again, over the socket (info stays the exchange's). */
    return rc == ZPS_ESHM ? pull_once(c, clock + 1, out, n, NULL) : rc;
}

bool zps_client_push_taken(const zps_client_t *c, size_t index)
{
    return index < c->nconns && c->conns[index].took;
}

/* A request of `type` to every shard whose replies' json make one line each in *report. */
static int ask_every_shard(zps_client_t *c, enum zps_msg_type type, char **report)
{
    begin(c, type);
    int rc = exchange(c, false);
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    for (size_t i = 0; i < c->nconns; i++) {
        if (rc == 0)
            zps_strbuf_printf(&b, "%s\n", c->conns[i].reply.json ? c->conns[i].reply.json : "{}");
        zps_message_close(&c->conns[i].reply);
    }
    if (rc) {
        zps_strbuf_fini(&b);
        return rc;
    }
    *report = zps_strbuf_take(&b);
    return *report ? 0 : ZPS_ENOMEM;
}

int zps_client_checkpoint(zps_client_t *c, char **report)
{
    return ask_every_shard(c, ZPS_MSG_CHECKPOINT, report);
}

int zps_client_reload_keys(zps_client_t *c, char **report)
{
    return ask_every_shard(c, ZPS_MSG_RELOAD_KEYS, report);
}

int zps_client_stats(zps_client_t *c, size_t index, char **json)
{
    if (index >= c->nconns)
        return ZPS_EINVAL;
    /* One shard only: ask it alone, so a dead neighbour cannot time this out. */
    begin(c, ZPS_MSG_STATS);
    for (size_t i = 0; i < c->nconns; i++)
        c->conns[i].active = i == index;
    conn_t *k = &c->conns[index];
    int rc = exchange(c, false);
    if (rc == 0) {
        *json = strdup(k->reply.json ? k->reply.json : "{}");
        if (!*json)
            rc = ZPS_ENOMEM;
    }
    zps_message_close(&k->reply);
    return rc;
}
