/*
 * zps/errors.h - the status codes every zps function returns, and their
 * names: part of libzps's public interface (zps/zps.h includes it).
 *
 * Functions that can fail return 0 on success or one of the negative ZPS_E*
 * codes below. The same codes travel on the wire in the `status` field of an
 * ERROR reply, so their values are part of the protocol: new codes are
 * appended at the end, never renumbered. Everything here is pure and may be
 * used from any thread.
 *
 * ZPS_ERROR_LIST is an X-macro, X(name, value, description), for a binding
 * that wants the table itself (a Python exception per code, a switch).
 */
#ifndef ZPS_ERRORS_H
#define ZPS_ERRORS_H

/* Marks what libzps exports: the library is built with every other symbol hidden. */
#ifndef ZPS_API
#if defined(__GNUC__)
#define ZPS_API __attribute__((visibility("default")))
#else
#define ZPS_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

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

/* A static, human-readable description of `err` (never NULL). */
ZPS_API const char *zps_strerror(int err);

/* The symbolic name of `err` ("ZPS_ERANGE"), or "ZPS_E?" if unknown. */
ZPS_API const char *zps_errname(int err);

#ifdef __cplusplus
}
#endif

#endif
