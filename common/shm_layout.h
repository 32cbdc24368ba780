/*
 * shm_layout.h - the first page of a shard's shared-memory segment, as the
 * server writes it and a worker on the same host reads it (server/shm.h
 * has the rest of the story; docs/protocol.md, "Shared memory").
 */
#ifndef ZPS_SHM_LAYOUT_H
#define ZPS_SHM_LAYOUT_H

#include <stdint.h>

#define ZPS_SHM_MAGIC "ZPSSHM01"
#define ZPS_SHM_TOKEN_BYTES 16

/*
 * The segment's first page, as both sides read it (native byte order: the
 * segment never leaves its host). Regions are `stride` bytes apart, each
 * page-aligned: buffer b at buf_offset + b * stride, rank r's slot at
 * slot_offset + r * stride; each holds `len` float32 values.
 */
typedef struct zps_shm_layout {
    char magic[8];
    unsigned char token[ZPS_SHM_TOKEN_BYTES];
    uint64_t len;     /* elements of the shard */
    uint32_t workers; /* slots */
    uint32_t nbufs;   /* parameter buffers */
    uint64_t stride;  /* bytes between regions */
    uint64_t buf_offset;
    uint64_t slot_offset;
    uint64_t size; /* of the whole segment */
} zps_shm_layout_t;

#endif
