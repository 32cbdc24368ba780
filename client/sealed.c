/*
 * sealed.c - the sealed session of one connection (common/seal.h): with
 * CURVE on tcp://, asked for over the CURVE socket at the first send; once
 * granted, requests go sealed with an AEAD over a second, plain DEALER to
 * the server's sealed socket (dsock), whose monitor's drops count as the
 * connection's. Owns conn_t's seal_* fields, dsock and dmon.
 */
#include "internal.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "timeutil.h"

/* Ends k's sealed session on this side; the next send asks for another. */
void seal_end(conn_t *k)
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
void seal_check_reached(conn_t *k, uint64_t now)
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
void seal_ask(zps_client_t *c, conn_t *k)
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
void seal_granted(zps_client_t *c, conn_t *k, zps_message_t *m)
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
        conn_allow_ipv6(k->dsock, where);
        k->dmon = conn_attach_monitor(c, k, k->dsock, ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED);
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
struct zps_seal *seal_find(void *arg, const unsigned char *id, zps_peer_t *peer)
{
    (void)peer;
    conn_t *k = arg;
    return k->seal_state == SEAL_ON && memcmp(id, k->seal.id, ZPS_SEAL_ID_BYTES) == 0 ? &k->seal
                                                                                      : NULL;
}
