/*
 * reply.h - the request being handled, and the replies that answer it.
 *
 * A zps_request_t is the per-request context: it lives on the stack of the
 * code that answers the request (handle() in server.c while the message is
 * being handled; a parked pull or a checkpoint job when the answer comes
 * later) and carries everything that concerns that request only, such as
 * the flags every reply to it must carry. Nothing per-request is kept in the
 * long-lived zps_daemon_t.
 *
 * Every request gets exactly one reply: an OK reply built with
 * zps_reply_header and sent with zps_reply_send, or an ERROR reply from
 * zps_reply_error. Sends never block (ZMQ_DONTWAIT): a reply the peer cannot
 * take is dropped, counted and logged (rate-limited), and a retry of the
 * request is answered again (every request is idempotent).
 *
 * Not here: the shared payload of pull replies (reply_cache.h), the wire
 * encoding (common/wire.h), what each request does (handlers.h). Loop
 * thread only.
 */
#ifndef ZPS_REPLY_H
#define ZPS_REPLY_H

#include <stdint.h>

#include "wire.h"

struct zps_daemon;

typedef struct zps_request {
    const zps_peer_t *peer;  /* where its replies go (borrowed) */
    const zps_header_t *hdr; /* its header (borrowed) */
    zps_message_t *msg;      /* the whole message while it is handled; NULL when answered later */
    uint32_t reply_flags;    /* ZPS_FLAG_* every reply to it carries (REJOINED) */
} zps_request_t;

/* A request answered after its message is gone: a copy of its route and header, no flags. */
static inline zps_request_t zps_request_later(const zps_peer_t *peer, const zps_header_t *hdr)
{
    zps_request_t r = {peer, hdr, NULL, 0};
    return r;
}

/*
 * An OK reply header for r, with the shard's current state filled in
 * (version, min_clock, N, shard, configuration fingerprint, next_clock for a
 * worker, r's flags). ERROR replies carry the fingerprint too.
 */
void zps_reply_header(const struct zps_daemon *d, const zps_request_t *r, zps_header_t *h);

/*
 * Sends reply h to r's peer; when h is a PULL reply, its payload is the
 * current parameters (the shared copy of reply_cache.h). h->json stays the
 * caller's. Never blocks; a reply that cannot be sent is counted and dropped.
 */
void zps_reply_send(struct zps_daemon *d, const zps_request_t *r, zps_header_t *h);

/* An ERROR reply to r: status `code`, reason printf-formatted; logged (rate-limited). */
void zps_reply_error(struct zps_daemon *d, const zps_request_t *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * The same reply for a refusal that is part of the protocol's normal course,
 * one the client expects and acts on (a shared-memory session asked for
 * before INIT: asked again once the model exists); counted alike, logged
 * only at debug level.
 */
void zps_reply_expected(struct zps_daemon *d, const zps_request_t *r, int code, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));

#endif
