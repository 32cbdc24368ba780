/*
 * shm.h - the shared-memory path between a shard and the workers on its
 * host (docs/protocol.md, "Shared memory").
 *
 * Once the shard's model is known the server may create one POSIX
 * shared-memory segment (mode 0600: only its own user can map it) with a
 * slot per worker rank, where that worker writes its gradient, and a few
 * parameter buffers, where the server puts a version's parameters for
 * workers to read. ZeroMQ then carries only headers: a PUSH with flag SHM
 * says "my gradient is in my slot" (with its length and CRC32C), a PULL
 * reply with flag SHM says "the parameters are in buffer b" (with their
 * CRC32C). Everything else -- the consistency rules, idempotence, the
 * authorization of each request -- is as over TCP.
 *
 * A worker asks for a session (MSG_SHM) over its connection; the reply
 * names the segment and a random token written in it, so a worker that can
 * map the segment and read the token is on this host, with this user. A
 * session belongs to one connection and one rank, ends when the connection
 * closes, and at most one live session holds a rank.
 *
 * What a peer can do to the segment is bounded by what the server does with
 * it. A gradient is copied out of its slot, checksummed and scanned for
 * non-finite values in one pass, before anything uses it: a worker that
 * scribbles on its slot meanwhile spoils its own push (ZPS_ECHECKSUM), never
 * the server's state. A parameter buffer is lent to a worker from the reply
 * that names it until that session's next request (the worker has copied
 * it out by then, and checks its CRC32C); the server writes only buffers no
 * session holds, and there are workers + 2 of them, so one is always free.
 *
 * The segment is the same user's to write, so nothing the server reads from
 * it is trusted but data: its sizes, offsets and counts are the server's own
 * copy (zps_shm_t.layout). Its pages are allocated (fallocate) before they
 * are first touched -- the first page when the segment is made, a rank's
 * slot when its first session is granted, a buffer when it is first
 * written -- so a full /dev/shm means no session, or replies over the
 * socket, never a SIGBUS. A segment cut short afterwards (ftruncate by
 * another process of this user) is caught by shm_guard.h: every session
 * ends, the segment is given up for the rest of the run, and the workers go
 * on over the socket.
 *
 * Not here: the messages (wire.h), when a reply is due (consistency/), the
 * client's side (client/client.c). Loop thread only.
 */
#ifndef ZPS_SHM_H
#define ZPS_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "shm_layout.h"

#define ZPS_SHM_NAME_MAX 64
#define ZPS_SHM_COPIES 2 /* private copies of pushed gradients kept per rank */

typedef struct zps_shm_buf {
    uint64_t version; /* of the parameters it holds, when valid */
    uint32_t crc;
    bool valid;
    bool used;     /* written at least once: its pages are resident */
    bool no_room;  /* its pages could not be allocated: never written */
    uint32_t lent; /* sessions that may still be reading it */
} zps_shm_buf_t;

/* A private copy of a rank's gradient, reused push after push (no fresh pages each time). */
typedef struct zps_shm_copy {
    float *data; /* len floats, or NULL until first used */
    bool busy;   /* a message built on it is alive */
} zps_shm_copy_t;

typedef struct zps_shm_session {
    int fd;        /* the connection; -1: the entry is free */
    uint32_t rank; /* the slot it writes */
    int lent;      /* the buffer its last reply named, or -1 */
} zps_shm_session_t;

typedef struct zps_shm {
    char name[ZPS_SHM_NAME_MAX]; /* shm_open name; "" until created */
    int fd;                      /* the segment's, kept to reserve its regions */
    void *base;
    /* What the server wrote on the segment's first page, kept here: every
     * size, offset and count is read from this copy, never from the
     * segment, which any process of this user can write. */
    zps_shm_layout_t layout;
    zps_shm_buf_t *bufs;
    bool *slot_reserved; /* per rank: its slot's pages are allocated */
    bool lost;           /* the segment was cut short under us (shm_guard.h) */
    bool no_room_logged;
    zps_shm_session_t *sessions; /* one per rank at most */
    zps_shm_copy_t *copies;      /* ZPS_SHM_COPIES per rank */
    uint32_t nsessions;
    uint32_t active; /* sessions open */
    /* Counters (STATS `shm`). */
    uint64_t granted, ended, pushes, replies;
} zps_shm_t;

/*
 * Creates the segment for a shard of len elements and `workers` ranks,
 * after removing those of this user's servers that died without removing
 * theirs (a /dev/shm/zps-PID-* whose PID is gone).
 * Returns 0, ZPS_EIO (why says what failed) or ZPS_ENOMEM. s must be zeroed
 * first; nothing is created when it fails.
 */
int zps_shm_create(zps_shm_t *s, uint64_t len, uint32_t workers, uint32_t shard_index, char *why,
                   size_t why_size);

/* Whether the segment exists. */
static inline bool zps_shm_ready(const zps_shm_t *s)
{
    return s->base != NULL;
}

/* Unmaps and removes the segment, ends every session. Safe on a zeroed s. */
void zps_shm_destroy(zps_shm_t *s);

/* The bytes of the segment (0 before it exists), for the memory bound. */
uint64_t zps_shm_bytes(const zps_shm_t *s);

/*
 * What of the segment and beside it this shard has touched, in copies of
 * its parameters (STATS `resident_copies`): *buffers, the parameter buffers
 * ever written (their pages stay resident); *copies, the private copies of
 * pushed gradients ever allocated (kept for reuse).
 */
void zps_shm_touched(const zps_shm_t *s, uint32_t *buffers, uint32_t *copies);

/*
 * A session for `rank` on connection fd (replacing fd's own earlier one).
 * NULL with the reason in why when another live connection holds the rank.
 */
zps_shm_session_t *zps_shm_grant(zps_shm_t *s, int fd, uint32_t rank, char *why, size_t why_size);

/* The session of connection fd, or NULL. */
zps_shm_session_t *zps_shm_find(zps_shm_t *s, int fd);

/* Connection fd has closed: its session ends, its buffer is released. */
void zps_shm_end_fd(zps_shm_t *s, int fd);

/* The session sent a new request: the buffer its last reply named is free to it no more. */
void zps_shm_release(zps_shm_t *s, zps_shm_session_t *x);

/*
 * The gradient in x's slot: copies len floats of it into *out (a message on
 * one of the rank's reused private copies, or a new one when both are
 * still held) while checking its CRC32C against crc and scanning it (first
 * non-finite index, largest magnitude) in the same pass. Returns 0,
 * ZPS_ELENGTH (len is not the shard's), ZPS_ECHECKSUM or ZPS_ENOMEM (*out
 * not initialised on failure).
 */
int zps_shm_take_push(zps_shm_t *s, const zps_shm_session_t *x, uint64_t len, uint32_t crc,
                      zmq_msg_t *out, size_t *first_bad, float *abs_max);

/*
 * Lends x a buffer holding params[len] of `version` (copied and
 * checksummed into a free buffer unless one holds that version already):
 * *buf and *crc for the reply. Returns 0, or ZPS_EBUSY when no buffer is
 * free (the reply then goes over TCP).
 */
int zps_shm_lend(zps_shm_t *s, zps_shm_session_t *x, const float *params, uint64_t len,
                 uint64_t version, uint32_t *buf, uint32_t *crc);

/*
 * For a step that writes the next version's parameters in its own pass over
 * memory (while sessions are open): a buffer no session reads, its index in
 * *index, marked empty; NULL when there is none.
 */
float *zps_shm_reserve(zps_shm_t *s, int *index);

/* Buffer `index` (from zps_shm_reserve) now holds `version`, with checksum crc. */
void zps_shm_fill(zps_shm_t *s, int index, uint64_t version, uint32_t crc);

#endif
