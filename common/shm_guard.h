/*
 * shm_guard.h - a shared mapping that another process shrinks ends its
 * session, not the process.
 *
 * A page of a MAP_SHARED mapping past the end of its file faults with
 * SIGBUS when touched. A shard's segment is the same user's by design
 * (mode 0600), so whatever that user runs can ftruncate it under the
 * server or a worker. Each side registers the segments it maps; a SIGBUS
 * whose address lies in one of them replaces that whole mapping with
 * private zero pages at the same address and marks it lost, so the access
 * that faulted completes on zeros (the checksums of what was read then
 * fail), and the owner, asking zps_shm_guard_lost, ends its session and
 * goes on over the socket. A SIGBUS anywhere else goes to the handler that
 * was there before, or kills the process as it would have.
 *
 * At most ZPS_SHM_GUARD_MAX mappings at once; zps_shm_guard_add fails
 * beyond (the caller then does without shared memory).
 */
#ifndef ZPS_SHM_GUARD_H
#define ZPS_SHM_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#define ZPS_SHM_GUARD_MAX 64

/* Watches [base, base + size); 0, or ZPS_EBUSY when every entry is taken. */
int zps_shm_guard_add(void *base, size_t size);

/* Stops watching base's mapping: call before munmap. */
void zps_shm_guard_remove(void *base);

/* Whether a SIGBUS replaced base's mapping since it was added. */
bool zps_shm_guard_lost(const void *base);

#endif
