/*
 * fingerprint.h - the configuration fingerprint: one number that the shards
 * of one model share exactly when they apply the same rules.
 *
 * It covers every setting that must agree across shards for a push to mean
 * the same thing everywhere: the consistency configuration (mode, W, the SSP
 * bound, backup workers, the learning-rate scaling of stale pushes), the
 * optimizer configuration with its schedule, and the shard count S. It does
 * not cover what may differ from shard to shard: the shard's index, its
 * endpoint, checkpoints, --worker-timeout, --max-pending-pulls. A setting
 * the configuration does not use (--momentum under SGD, the SSP bound under
 * BSP) is encoded as 0, so two shards that behave alike agree.
 *
 * The value is the 64-bit FNV-1a hash of a canonical encoding, defined in
 * docs/protocol.md ("Configuration fingerprint") and here, in one place:
 * a list of fields in a fixed order, each a little-endian 64-bit word. It is
 * never 0, which on the wire means "unchecked".
 *
 * Pure functions of a configuration: no I/O, callable from any thread.
 * Not here: where the fingerprint is checked (handlers.c) and carried
 * (reply.c, common/wire.h); how a client compares shards (client/client.c).
 */
#ifndef ZPS_FINGERPRINT_H
#define ZPS_FINGERPRINT_H

#include <stdint.h>

#include "server.h"
#include "strbuf.h"

/* The first word of the encoding; changes whenever the field list does. */
#define ZPS_FINGERPRINT_FORMAT 2u

/* The fingerprint of cfg (never 0). */
uint64_t zps_fingerprint(const zps_server_config_t *cfg);

/*
 * Appends to b, as one JSON object, every setting the fingerprint covers,
 * under the names the STATS reply uses, followed by the fingerprint itself as
 * 16 hex digits: {"shards":2,"mode":"bsp","workers":4,...,"fingerprint":"..."}.
 * Numbers are written so that they read back exactly.
 */
void zps_fingerprint_json(const zps_server_config_t *cfg, zps_strbuf_t *b);

#endif
