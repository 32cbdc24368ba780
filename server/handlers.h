/*
 * handlers.h - what each request does: INIT, PULL, PUSH, STATS, HEARTBEAT
 * and CHECKPOINT, and the work their events set off (BSP steps, parked
 * pulls becoming ready).
 *
 * A request is checked completely before anything changes, so a bad one is
 * answered with an ERROR and leaves the shard as it was. Each handler asks
 * the consistency module (consistency/consistency.h) what the request means,
 * carries out its decision on the store (store.h) and replies (reply.h).
 * Pulls the rules do not allow yet are parked, their routes kept here, and
 * answered from whichever event makes them ready.
 *
 * Not here: decoding, dispatch and liveness (server.c), the rules themselves
 * (consistency/), the payload cache (reply_cache.h), checkpoint writes
 * (ckpt_queue.h). Loop thread only; nothing blocks.
 */
#ifndef ZPS_HANDLERS_H
#define ZPS_HANDLERS_H

#include <stdbool.h>

#include "reply.h"

struct zps_daemon;

/* Each answers request r (r->msg is set) with exactly one reply, now or later. */
void zps_handle_init(struct zps_daemon *d, zps_request_t *r);
void zps_handle_pull(struct zps_daemon *d, zps_request_t *r);
void zps_handle_push(struct zps_daemon *d, zps_request_t *r); /* may take r->msg's payload */
void zps_handle_stats(struct zps_daemon *d, zps_request_t *r);
void zps_handle_heartbeat(struct zps_daemon *d, zps_request_t *r);
void zps_handle_checkpoint(struct zps_daemon *d, zps_request_t *r);
/* RELOAD_KEYS (an admin's, auth.c): the authorized keys file read again,
 * all or nothing; the reply's json is {"keys":N}, the error says why the old
 * list stays. */
void zps_handle_reload_keys(struct zps_daemon *d, zps_request_t *r);
/* SESSION, over a CURVE connection: a sealed session for it (sessions.h);
 * the reply's json is {"session":HEX,"key":HEX,"cipher":NAME,"port":P}. */
void zps_handle_session(struct zps_daemon *d, zps_request_t *r);
/* MSG_SHM: a shared-memory session for a worker on this host (shm.h). */
void zps_handle_shm(struct zps_daemon *d, zps_request_t *r);

/*
 * BSP: takes every step the rules say is due (none under SSP and ASP), or
 * starts the first off the loop's thread (a shard of at least
 * --background-step-bytes): the others follow from there, then the answers
 * that wait for them, then zps_daemon_steps_done. Under SSP and ASP a push
 * applied on arrival runs off the loop's thread the same way, started by
 * zps_handle_push, and is answered once it is applied.
 */
void zps_handlers_take_steps(struct zps_daemon *d);

/* Whether a step is running off the loop's thread (requests that touch the model wait). */
bool zps_handlers_stepping(const struct zps_daemon *d);

/* Whether that step is a BSP step (the workers wait for it; it belongs to a clock). */
bool zps_handlers_bsp_stepping(const struct zps_daemon *d);

/* Whether that step will answer a request of this peer (the push it belongs to). */
bool zps_handlers_awaits(const struct zps_daemon *d, const zps_peer_t *peer);

/* Answers every parked pull the rules now allow. */
void zps_handlers_answer_ready(struct zps_daemon *d);

/* Shutdown: answers every parked pull with ZPS_ESHUTDOWN. */
void zps_handlers_fail_parked(struct zps_daemon *d);

/*
 * Connection `fd` has closed: its parked pulls are dropped unanswered and
 * counted (pulls_cancelled), so a stranger cannot hold a worker's slots
 * after it has gone. A client that resends on a new connection moves its
 * pull there (handlers.c), so only pulls nobody can receive are dropped,
 * unless the descriptor was reused by a new connection within one drain;
 * that client's pull is then dropped too and its resend parks it again.
 */
void zps_handlers_cancel_connection(struct zps_daemon *d, int fd);

#endif
