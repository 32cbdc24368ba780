/*
 * error.h - the status codes every zps function returns, and their names.
 *
 * Functions that can fail return 0 on success or one of the negative ZPS_E*
 * codes below. The same codes travel on the wire in the `status` field of an
 * ERROR reply, so their values are part of the protocol: append new codes at
 * the end, never renumber. Everything here is pure and may be used from
 * any thread.
 *
 * Not here: logging an error (log.h); what a remote error means to a client
 * (client/client.h, zps_client_last_error); the codes' meanings on the wire
 * (docs/protocol.md).
 */
#ifndef ZPS_ERROR_H
#define ZPS_ERROR_H

#include <stdio.h>
#include <stdlib.h>

/* X(name, value, description) */
#define ZPS_ERROR_LIST(X)                                                                          \
    X(ZPS_OK, 0, "success")                                                                        \
    X(ZPS_EINVAL, -1, "invalid argument")                                                          \
    X(ZPS_ENOMEM, -2, "out of memory")                                                             \
    X(ZPS_EIO, -3, "input/output error")                                                           \
    X(ZPS_ETIMEDOUT, -4, "timed out")                                                              \
    X(ZPS_EPROTO, -5, "undecodable message header")                                                \
    X(ZPS_EVERSION, -6, "wrong protocol version")                                                  \
    X(ZPS_EFRAMES, -7, "wrong number of message frames")                                           \
    X(ZPS_ELENGTH, -8, "payload length does not match the header")                                 \
    X(ZPS_ECHECKSUM, -9, "payload checksum mismatch")                                              \
    X(ZPS_ETYPE, -10, "unknown message type")                                                      \
    X(ZPS_ERANGE, -11, "range does not match this shard")                                          \
    X(ZPS_ENONFINITE, -12, "non-finite value in payload")                                          \
    X(ZPS_ECLOCK, -13, "clock out of order")                                                       \
    X(ZPS_EWORKER, -14, "unknown worker")                                                          \
    X(ZPS_ENOTINIT, -15, "model not initialised")                                                  \
    X(ZPS_ESIZE, -16, "model size differs from the initialised one")                               \
    X(ZPS_EBATCH, -17, "invalid batch size")                                                       \
    X(ZPS_EREMOTE, -18, "the server replied with an error")                                        \
    X(ZPS_ESOCKET, -19, "socket error")                                                            \
    X(ZPS_EBUSY, -20, "too many requests in flight")                                               \
    X(ZPS_ECORRUPT, -21, "corrupt or truncated data")                                              \
    X(ZPS_ESHUTDOWN, -22, "server is shutting down")                                               \
    X(ZPS_EMODE, -23, "request not valid in this mode")                                            \
    X(ZPS_EDATA, -24, "bad data file")                                                             \
    X(ZPS_ENODEV, -25, "no usable device")                                                         \
    X(ZPS_EAGAIN, -26, "nothing ready; try again")                                                 \
    X(ZPS_EINITED, -27, "model already initialised with other values")                             \
    X(ZPS_EUNREACHABLE, -28, "no connection to the server")                                        \
    X(ZPS_ECONFIG, -29, "the shards' configurations differ")                                       \
    X(ZPS_EPARTIAL, -30, "taken by some shards only")                                              \
    X(ZPS_EDENIED, -31, "not authorized")                                                          \
    X(ZPS_EAUTH, -32, "authentication failed")                                                     \
    X(ZPS_ESEAL, -33, "sealed message refused: unknown session, bad tag or replayed")              \
    X(ZPS_ESHM, -34, "no shared-memory session on this connection")

enum zps_error {
#define ZPS_ERROR_ENUM(name, value, text) name = value,
    ZPS_ERROR_LIST(ZPS_ERROR_ENUM)
#undef ZPS_ERROR_ENUM
};

/* Returns a static, human-readable description of `err` (never NULL). */
const char *zps_strerror(int err);

/* Returns the symbolic name of `err` ("ZPS_ERANGE"), or "ZPS_E?" if unknown. */
const char *zps_errname(int err);

/*
 * Writes a printf-formatted reason into why[size] for a caller that asked
 * for one; does nothing when why is NULL or size is 0. The companion of
 * every function that returns a ZPS_E* code with a "why" buffer.
 */
void zps_set_reason(char *why, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * ZPS_ASSERT checks an invariant of zps's own code. It stays on in release
 * builds. It is never used for input from a peer, a file or a flag: those
 * are errors returned to the caller.
 */
#define ZPS_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: zps internal error: assertion '%s' failed\n", __FILE__,        \
                    __LINE__, #cond);                                                              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
