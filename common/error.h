/*
 * error.h - the status codes (include/zps/errors.h, public) and what zps's
 * own code adds to them: the reason buffer and the internal assertion.
 *
 * Not here: logging an error (log.h); what a remote error means to a client
 * (zps/zps.h, zps_client_last_error); the codes' meanings on the wire
 * (docs/protocol.md).
 */
#ifndef ZPS_ERROR_H
#define ZPS_ERROR_H

#include <stdio.h>
#include <stdlib.h>

#include "zps/errors.h"

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
