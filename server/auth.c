/*
 * auth.c - the ZAP handler and the per-request authorization; see auth.h.
 *
 * ZAP (ZeroMQ RFC 27): the request is the frames version "1.0", request id,
 * domain, address, routing id, mechanism, then the mechanism's credentials
 * (for CURVE: the client's 32-byte public key); the reply is version,
 * request id, status code, status text, user id and metadata. A request that
 * is not well formed is answered 500 when it can be answered at all.
 */
#include "auth.h"

#include <errno.h>
#include <string.h>
#include <zmq.h>

#include "error.h"
#include "log.h"
#include "timeutil.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES_MAX 8
#define REFUSALS_LOGGED 10               /* per window */
#define REFUSAL_WINDOW_NS 10000000000ull /* 10 s */

int zps_auth_open(zps_auth_t *a, void *ctx, const char *path, uint32_t workers)
{
    memset(a, 0, sizeof(*a));
    a->path = path;
    a->workers = workers;
    char why[512];
    int rc = zps_authkeys_load(path, workers, &a->keys, why, sizeof(why));
    if (rc) {
        zps_error("--authorized-keys: %s", why);
        return rc;
    }
    a->zap = zmq_socket(ctx, ZMQ_REP);
    int linger = 0;
    if (!a->zap || zmq_setsockopt(a->zap, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_bind(a->zap, ZAP_ENDPOINT) != 0) {
        zps_error("cannot start the ZAP handler: %s", zmq_strerror(zmq_errno()));
        return ZPS_ESOCKET;
    }
    zps_info("authentication on: %zu authorized keys from %s", zps_authkeys_count(a->keys), path);
    return 0;
}

int zps_auth_fd(const zps_auth_t *a)
{
    int fd = -1;
    size_t len = sizeof(fd);
    if (!a->zap || zmq_getsockopt(a->zap, ZMQ_FD, &fd, &len) != 0)
        return -1;
    return fd;
}

static void send_frame(void *sock, const void *data, size_t len, bool more)
{
    /* A REP socket answers the peer it just heard from over an inproc pipe:
     * the send does not wait; DONTWAIT only makes sure of it. */
    zmq_send(sock, data, len, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0));
}

static void reply(void *sock, const zmq_msg_t *id, const char *code, const char *text,
                  const char *user)
{
    send_frame(sock, "1.0", 3, true);
    send_frame(sock, id ? zmq_msg_data((zmq_msg_t *)id) : "",
               id ? zmq_msg_size((zmq_msg_t *)id) : 0, true);
    send_frame(sock, code, strlen(code), true);
    send_frame(sock, text, strlen(text), true);
    send_frame(sock, user, strlen(user), true);
    send_frame(sock, "", 0, false);
}

static void log_refusal(zps_auth_t *a, const char *address, const char *key)
{
    a->refused++;
    uint64_t now = zps_now_ns();
    if (now - a->log_window > REFUSAL_WINDOW_NS) {
        if (a->logged > REFUSALS_LOGGED)
            zps_warn("%llu more handshakes refused in the last 10 s",
                     (unsigned long long)(a->logged - REFUSALS_LOGGED));
        a->log_window = now;
        a->logged = 0;
    }
    if (a->logged++ < REFUSALS_LOGGED)
        zps_warn("refused a CURVE handshake from %s: key %s is not in %s", address, key, a->path);
}

/* Answers one ZAP request whose frames are f[0..n). */
static void answer(zps_auth_t *a, zmq_msg_t *f, size_t n)
{
    if (n < 7 || zmq_msg_size(&f[0]) != 3 || memcmp(zmq_msg_data(&f[0]), "1.0", 3) != 0) {
        reply(a->zap, n > 1 ? &f[1] : NULL, "500", "malformed ZAP request", "");
        return;
    }
    char address[64];
    size_t alen =
        zmq_msg_size(&f[3]) < sizeof(address) - 1 ? zmq_msg_size(&f[3]) : sizeof(address) - 1;
    memcpy(address, zmq_msg_data(&f[3]), alen);
    address[alen] = '\0';
    bool curve = zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0;
    if (!curve || zmq_msg_size(&f[6]) != ZPS_KEY_BYTES) {
        log_refusal(a, address, "(none: not a CURVE client)");
        reply(a->zap, &f[1], "400", "CURVE required", "");
        return;
    }
    const uint8_t *key = zmq_msg_data(&f[6]);
    char z85[ZPS_KEY_Z85_CHARS + 1];
    zps_key_encode(key, z85);
    if (!zps_authkeys_lookup(a->keys, key, NULL)) {
        log_refusal(a, address, z85);
        reply(a->zap, &f[1], "400", "key not authorized", "");
        return;
    }
    /* The User-Id identifies the key; every request is checked by it. */
    reply(a->zap, &f[1], "200", "OK", z85);
}

void zps_auth_serve(zps_auth_t *a)
{
    while (a->zap) {
        zmq_msg_t f[ZAP_FRAMES_MAX];
        size_t n = 0;
        zmq_msg_init(&f[0]);
        if (zmq_msg_recv(&f[0], a->zap, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&f[0]);
            if (zmq_errno() != EAGAIN && zmq_errno() != EINTR)
                zps_warn("ZAP handler: receive failed: %s", zmq_strerror(zmq_errno()));
            return;
        }
        n = 1;
        bool more = zmq_msg_more(&f[0]);
        /* The rest of a message is there once its first frame is; frames
         * beyond ZAP_FRAMES_MAX are read and dropped. */
        while (more) {
            zmq_msg_t extra, *m = n < ZAP_FRAMES_MAX ? &f[n] : &extra;
            zmq_msg_init(m);
            if (zmq_msg_recv(m, a->zap, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(m);
                break;
            }
            more = zmq_msg_more(m);
            if (m == &extra)
                zmq_msg_close(m);
            else
                n++;
        }
        answer(a, f, n);
        for (size_t i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
    }
}

int zps_auth_reload(zps_auth_t *a, const char *who, char *why, size_t why_size)
{
    if (!a->path)
        return 0;
    zps_authkeys_t *fresh;
    int rc = zps_authkeys_load(a->path, a->workers, &fresh, why, why_size);
    if (rc) {
        zps_error("%s: keeping the authorized keys in force (%zu keys): %s", who,
                  zps_authkeys_count(a->keys), why);
        return rc;
    }
    zps_authkeys_free(a->keys);
    a->keys = fresh;
    zps_info("%s: reloaded %s: %zu authorized keys", who, a->path, zps_authkeys_count(fresh));
    return 0;
}

size_t zps_auth_key_count(const zps_auth_t *a)
{
    return a->path ? zps_authkeys_count(a->keys) : 0;
}

bool zps_auth_access(const zps_header_t *hdr, zps_access_t *what, long *worker)
{
    *worker = hdr->worker;
    switch (hdr->type) {
    case ZPS_MSG_INIT:
        *what = ZPS_ACCESS_INIT;
        return true;
    case ZPS_MSG_PUSH:
    case ZPS_MSG_SHM: /* the rank's slot: whoever may push as the rank */
        *what = ZPS_ACCESS_PUSH;
        return true;
    case ZPS_MSG_PULL:
        *what = hdr->worker < 0 ? ZPS_ACCESS_PULL_OBSERVER : ZPS_ACCESS_PULL_WORKER;
        return true;
    case ZPS_MSG_STATS:
    case ZPS_MSG_SESSION: /* any listed key; its requests are each authorized */
        *what = ZPS_ACCESS_STATS;
        return true;
    case ZPS_MSG_HEARTBEAT:
        *what = hdr->worker < 0 ? ZPS_ACCESS_STATS : ZPS_ACCESS_HEARTBEAT;
        return true;
    case ZPS_MSG_CHECKPOINT:
        *what = ZPS_ACCESS_CHECKPOINT;
        return true;
    case ZPS_MSG_RELOAD_KEYS:
        *what = ZPS_ACCESS_RELOAD_KEYS;
        return true;
    default:
        return false;
    }
}

bool zps_auth_allows(zps_auth_t *a, const zps_peer_t *peer, const zps_header_t *hdr, char *why,
                     size_t why_size)
{
    if (!a->path)
        return true;
    uint8_t key[ZPS_KEY_BYTES];
    zps_access_t what;
    long worker;
    if (!peer->user[0] || zps_key_decode(peer->user, strlen(peer->user), key, NULL, 0) != 0) {
        zps_set_reason(why, why_size, "the connection is not authenticated");
        a->denied++;
        return false;
    }
    if (!zps_auth_access(hdr, &what, &worker)) {
        zps_set_reason(why, why_size, "message type %u is not served by this server", hdr->type);
        a->denied++;
        return false;
    }
    if (!zps_authkeys_allows(a->keys, key, what, worker, why, why_size)) {
        a->denied++;
        return false;
    }
    return true;
}

void zps_auth_close(zps_auth_t *a)
{
    if (a->zap)
        zmq_close(a->zap);
    a->zap = NULL;
    zps_authkeys_free(a->keys);
    a->keys = NULL;
}
