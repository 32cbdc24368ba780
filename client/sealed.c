/*
 * sealed.c - the sealed session of one connection (common/seal.h): with
 * CURVE on tcp://, asked for over the CURVE socket at the first send; once
 * granted, requests go sealed with an AEAD over a second, plain DEALER to
 * the server's sealed socket (dsock). It ends when the CURVE connection
 * drops (the server wipes it then), when the server says it does not know
 * it, or when dsock's own connection ends; the next send asks again. A
 * server that grants none is used over CURVE alone, for good.
 */
#include "internal.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "seal.h"
#include "timeutil.h"

#define SEAL_CONNECT_MS 3000 /* a sealed socket not reached by then is given up (CURVE alone) */

enum {
    SEAL_WANTED,  /* asked for at the next send */
    SEAL_ASKED,   /* a SESSION request is out */
    SEAL_ON,      /* granted: requests go sealed over dsock */
    SEAL_REFUSED, /* the server grants none: CURVE alone */
};

typedef struct sealed {
    session_t session;
    int state;           /* SEAL_* */
    unsigned drops;      /* the connection's drops when it was asked for */
    uint64_t request_id; /* the SESSION request asked (SEAL_ASKED) */
    zps_seal_t seal;     /* SEAL_ON: the session */
    void *dsock;         /* SEAL_ON: DEALER to the server's sealed socket */
    void *dmon;          /* dsock's monitor */
    bool tcp;            /* dsock has made a TCP connection */
    uint64_t wait_ns;    /* the first sealed send while dsock had none, or 0 */
    long port;           /* the sealed socket's port */
} sealed_t;

/* Ends the session on this side; the next send asks for another (unless it is refused). */
static void sealed_stop(sealed_t *s)
{
    if (s->dmon)
        zmq_close(s->dmon);
    s->dmon = NULL;
    if (s->dsock)
        zmq_close(s->dsock);
    s->dsock = NULL;
    zps_seal_wipe(&s->seal);
    s->tcp = false;
    s->wait_ns = 0;
    if (s->state != SEAL_REFUSED)
        s->state = SEAL_WANTED;
}

/* The same, counted as a loss: what was sent sealed goes again, at once. */
static void sealed_lose(sealed_t *s)
{
    bool carried = s->state == SEAL_ON;
    sealed_stop(s);
    if (carried)
        s->session.lost++;
}

/* The CURVE connection dropped since the session was asked for: the server wiped it. */
static void notice_drop(sealed_t *s, const conn_t *k)
{
    if ((s->state == SEAL_ASKED || s->state == SEAL_ON) && k->drops != s->drops)
        sealed_lose(s);
}

/* dsock's monitor: the end of its connection loses what was in flight on it. */
static void read_events(sealed_t *s)
{
    uint16_t event;
    while (s->dmon && (event = conn_monitor_event(s->dmon)) != 0) {
        if (event == ZMQ_EVENT_DISCONNECTED)
            s->session.lost++;
        else if (event == ZMQ_EVENT_CONNECTED)
            s->tcp = true;
    }
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

/* Asks k's server for a sealed session, over CURVE; the reply comes to sealed_claim. */
static void ask(sealed_t *s, zps_client_t *c, conn_t *k)
{
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_SESSION);
    h.request_id = ++c->next_id;
    h.json = zps_seal_cipher_available(ZPS_SEAL_AES256GCM) ? "{\"aes\":true}" : "{\"aes\":false}";
    if (conn_send_header(k, &h) == 0) {
        s->state = SEAL_ASKED;
        s->request_id = h.request_id;
        s->drops = k->drops;
    }
}

/* The session k's server granted (m: the SESSION reply), or why not. */
static void granted(sealed_t *s, zps_client_t *c, conn_t *k, zps_message_t *m)
{
    if (m->hdr.status != 0) {
        /* A server with --no-seal, without a tcp:// address, or from
         * before sealed sessions: CURVE carries everything. */
        zps_debug("%s grants no sealed session (%s): CURVE carries everything", k->endpoint,
                  m->hdr.error);
        s->state = SEAL_REFUSED;
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
        s->state = SEAL_REFUSED;
        return;
    }
    zps_seal_join(&s->seal, id, key, cipher);
    sodium_memzero(key, sizeof(key));
    s->dsock = zmq_socket(c->ctx, ZMQ_DEALER);
    int linger = 0;
    /* A reply's payload in one frame: at most the whole model's values (the
     * widest kind, float32), once the client knows its size. */
    uint64_t n = c->total > k->count ? c->total : k->count;
    int64_t maxmsg = -1;
    if (n > 0 && n < (uint64_t)INT64_MAX / 8)
        maxmsg = (int64_t)(n * sizeof(float)) + REPLY_FRAME_MAX;
    if (s->dsock) {
        zmq_setsockopt(s->dsock, ZMQ_LINGER, &linger, sizeof(linger));
        zmq_setsockopt(s->dsock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
        conn_allow_ipv6(s->dsock, where);
        s->dmon = conn_attach_monitor(c, k, s->dsock, ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED);
    }
    if (!s->dsock || zmq_connect(s->dsock, where) != 0) {
        zps_warn("%s: cannot connect to its sealed socket %s: CURVE carries everything",
                 k->endpoint, where);
        sealed_stop(s);
        s->state = SEAL_REFUSED;
        return;
    }
    s->state = SEAL_ON;
    s->tcp = !s->dmon; /* without a monitor, trust it */
    s->port = port;
    zps_debug("%s: sealed session on %s (%s)", k->endpoint, where, zps_seal_cipher_name(cipher));
}

/* The session a sealed reply names: this one, if the id is its (zps_wire_seal_find_fn). */
static struct zps_seal *find_seal(void *arg, const unsigned char *id, zps_peer_t *peer)
{
    (void)peer;
    sealed_t *s = arg;
    return s->state == SEAL_ON && memcmp(id, s->seal.id, ZPS_SEAL_ID_BYTES) == 0 ? &s->seal : NULL;
}

static int sealed_send(session_t *base, zps_client_t *c, conn_t *k, zps_header_t *h)
{
    sealed_t *s = (sealed_t *)base;
    notice_drop(s, k);
    if (s->state == SEAL_WANTED)
        ask(s, c, k);
    if (s->state != SEAL_ON)
        return SESSION_PASS;
    /* Sealed into a message of its own: the caller's buffer is free at once. */
    int rc = zps_wire_send_sealed(s->dsock, NULL, h, k->payload, k->payload ? k->count : 0,
                                  k->payload != NULL, &s->seal, ZMQ_DONTWAIT);
    if (rc == 0 && !s->tcp && s->wait_ns == 0)
        s->wait_ns = zps_now_ns();
    return rc;
}

static int sealed_recv(session_t *base, zps_client_t *c, conn_t *k, zps_message_t *m)
{
    sealed_t *s = (sealed_t *)base;
    (void)c;
    notice_drop(s, k);
    while (s->dsock) {
        int rc = zps_wire_recv_sealed(s->dsock, ZMQ_DONTWAIT, false, false, find_seal, s, m);
        if (rc != ZPS_ESEAL)
            return rc;
        /* Nothing of it can be trusted. Only the server's notice that it
         * does not know the session changes anything: ask for a new one
         * and send again what it did not take. */
        if (m->seal_unknown && s->state == SEAL_ON &&
            memcmp(m->seal_id, s->seal.id, ZPS_SEAL_ID_BYTES) == 0) {
            zps_debug("%s: the server no longer knows our sealed session", k->endpoint);
            sealed_lose(s);
        }
        zps_message_close(m);
    }
    return ZPS_EAGAIN;
}

/* The answer to a SESSION request comes back over the CURVE socket. */
static bool sealed_claim(session_t *base, zps_client_t *c, conn_t *k, const session_t *from,
                         zps_message_t *m)
{
    sealed_t *s = (sealed_t *)base;
    if (from != &k->plain || !m->hdr.reply || m->hdr.type != ZPS_MSG_SESSION)
        return false;
    notice_drop(s, k);
    if (s->state == SEAL_ASKED && m->hdr.request_id == s->request_id)
        granted(s, c, k, m);
    return true;
}

static size_t sealed_poll(session_t *base, conn_t *k, zmq_pollitem_t *items)
{
    sealed_t *s = (sealed_t *)base;
    (void)k;
    return conn_poll_items(items, s->dsock, s->dmon);
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
static uint64_t sealed_wake(session_t *base, zps_client_t *c, conn_t *k, uint64_t now)
{
    sealed_t *s = (sealed_t *)base;
    (void)c;
    notice_drop(s, k);
    read_events(s);
    if (s->state != SEAL_ON || s->tcp || s->wait_ns == 0)
        return UINT64_MAX;
    uint64_t until = s->wait_ns + SEAL_CONNECT_MS * 1000000ull;
    if (now < until)
        return until;
    zps_warn("%s: its sealed socket (port %ld) did not answer within %d ms: CURVE carries "
             "everything (is the port filtered? docs/security.md)",
             k->endpoint, s->port, SEAL_CONNECT_MS);
    sealed_lose(s);
    s->state = SEAL_REFUSED;
    return UINT64_MAX;
}

static void sealed_end(session_t *base, conn_t *k)
{
    sealed_t *s = (sealed_t *)base;
    (void)k;
    s->state = SEAL_REFUSED;
    sealed_stop(s);
    free(s);
}

static const session_ops_t sealed_ops = {
    .name = "sealed",
    .send = sealed_send,
    .recv = sealed_recv,
    .claim = sealed_claim,
    .poll = sealed_poll,
    .wake = sealed_wake,
    .end = sealed_end,
};

session_t *sealed_new(const zps_client_t *c, const conn_t *k)
{
    if (!c->opts.curve || c->opts.no_seal || strncmp(k->endpoint, "tcp://", 6) != 0)
        return NULL;
    sealed_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->session.ops = &sealed_ops;
    s->state = SEAL_WANTED;
    return &s->session;
}
