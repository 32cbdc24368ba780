/*
 * sessions.h - the sealed sessions a shard has granted (common/seal.h).
 *
 * A session is granted over a CURVE connection to the key that connection
 * authenticated, and lives as long as that connection: when it closes, the
 * session's key is wiped. One connection holds at most one session (a new
 * SESSION request replaces it), so there are never more sessions than
 * connections; past `cap` the least recently used is dropped all the same.
 * Lookups scan the table: it holds one entry per client connection, and a
 * scan of a few hundred ids costs far less than the AEAD of any payload.
 *
 * Loop thread only.
 */
#ifndef ZPS_SESSIONS_H
#define ZPS_SESSIONS_H

#include <stddef.h>
#include <stdint.h>

#include "seal.h"

typedef struct zps_session {
    zps_seal_t seal;
    uint64_t number;  /* 1, 2, ...; 0: the slot is free */
    int fd;           /* the CURVE connection it was granted on */
    char user[41];    /* the key it was granted to, Z85 */
    uint64_t used_ns; /* last message in or out */
} zps_session_t;

typedef struct zps_sessions {
    zps_session_t *slots;
    size_t cap, used;
    uint64_t next_number;
    uint64_t granted, ended;
    uint64_t opened, refused; /* sealed messages opened, and refused (not opened) */
} zps_sessions_t;

/* Returns 0, or ZPS_ENOMEM. */
int zps_sessions_open(zps_sessions_t *s, size_t cap);

/* Wipes every key and frees the table. */
void zps_sessions_close(zps_sessions_t *s);

/* A new session for `user` on connection `fd`, replacing fd's old one. NULL: out of memory. */
zps_session_t *zps_sessions_grant(zps_sessions_t *s, int fd, const char *user,
                                  enum zps_seal_cipher cipher);

/* The session with this id or number, or NULL. */
zps_session_t *zps_sessions_by_id(zps_sessions_t *s, const unsigned char *id);
zps_session_t *zps_sessions_by_number(zps_sessions_t *s, uint64_t number);

/* Connection fd has closed: its session ends. */
void zps_sessions_end_fd(zps_sessions_t *s, int fd);

#endif
