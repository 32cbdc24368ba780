/*
 * shm.c - the shared-memory session of one connection (server/shm.h): a
 * worker on the server's host asks for one over the socket once the model
 * exists; granted, the segment is mapped and checked, pushes put their
 * gradient in the worker's slot and pulls read the parameters from the
 * server's buffer, and the socket carries only headers. Owns conn_t's shm_*
 * fields.
 */
#include "internal.h"

#include <fcntl.h>
#include <sodium.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "json.h"
#include "log.h"
#include "shm_guard.h"
#include "shm_layout.h"

/* Ends k's shared-memory session on this side; the next send asks again (unless refused). */
void shm_end(conn_t *k)
{
    if (k->shm_base) {
        zps_shm_guard_remove(k->shm_base);
        munmap(k->shm_base, k->shm_size);
    }
    k->shm_base = NULL;
    k->shm_size = 0;
    k->shm_slot = NULL;
    k->shm_written_id = 0;
    if (k->shm_state != SHM_OFF && k->shm_state != SHM_REFUSED)
        k->shm_state = SHM_WANTED;
}

/* Asks k's server for a shared-memory session; the reply comes to take_reply. */
void shm_ask(zps_client_t *c, conn_t *k)
{
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_SHM);
    h.request_id = ++c->next_id;
    h.worker = c->opts.worker;
    if (zps_wire_send(k->sock, NULL, &h, NULL, 0, NULL, NULL, ZMQ_DONTWAIT) == 0) {
        k->shm_state = SHM_ASKED;
        k->shm_request_id = h.request_id;
    }
}

/* Maps the segment named in k's SHM reply m and checks it is the server's; false if not. */
static bool shm_map(zps_client_t *c, conn_t *k, const char *name, const char *token)
{
    unsigned char want[ZPS_SHM_TOKEN_BYTES];
    if (!name || name[0] != '/' || strchr(name + 1, '/') || !token ||
        zps_seal_unhex(token, want, sizeof(want)) != 0)
        return false;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return false; /* another host, or another user: the socket it is */
    struct stat st;
    unsigned char *base = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(zps_shm_layout_t))
        base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return false;
    zps_shm_layout_t l;
    memcpy(&l, base, sizeof(l));
    uint64_t size = (uint64_t)st.st_size, bytes = l.len * sizeof(float);
    uint32_t rank = (uint32_t)c->opts.worker;
    /* Every region must lie inside what was mapped: the layout is read, not trusted. */
    bool ok = memcmp(l.magic, ZPS_SHM_MAGIC, sizeof(l.magic)) == 0 &&
              sodium_memcmp(l.token, want, sizeof(want)) == 0 && l.len > 0 &&
              l.len <= UINT64_MAX / sizeof(float) && l.stride >= bytes && l.stride % 4096 == 0 &&
              rank < l.workers && l.nbufs > 0 && l.size == size && l.buf_offset <= size &&
              l.nbufs <= (size - l.buf_offset) / l.stride && l.slot_offset <= size &&
              l.workers <= (size - l.slot_offset) / l.stride;
    /* Cut short later by another process, it ends the session, not us (shm_guard.h). */
    if (!ok || zps_shm_guard_add(base, (size_t)st.st_size) != 0) {
        munmap(base, (size_t)st.st_size);
        return false;
    }
    k->shm_base = base;
    k->shm_size = (size_t)st.st_size;
    k->shm_len = l.len;
    k->shm_nbufs = l.nbufs;
    k->shm_stride = l.stride;
    k->shm_buf_offset = l.buf_offset;
    k->shm_slot = (float *)(base + l.slot_offset + (uint64_t)rank * l.stride);
    k->shm_written_id = 0;
    return true;
}

/* The session k's server granted (m: the SHM reply), or why not. */
void shm_granted(zps_client_t *c, conn_t *k, zps_message_t *m)
{
    if (m->hdr.status == ZPS_ENOTINIT) {
        k->shm_state = SHM_WANTED; /* once the model exists */
        return;
    }
    if (m->hdr.status != 0) {
        zps_debug("%s grants no shared-memory session (%s): the socket carries everything",
                  k->endpoint, m->hdr.error);
        k->shm_state = SHM_REFUSED;
        return;
    }
    zps_json_t *j = NULL;
    const char *name = NULL, *token = NULL;
    if (m->hdr.json && zps_json_parse(m->hdr.json, &j, NULL, 0) == 0) {
        name = zps_json_string(zps_json_get(j, "name"));
        token = zps_json_string(zps_json_get(j, "token"));
    }
    bool ok = shm_map(c, k, name, token);
    zps_json_free(j);
    if (!ok) {
        zps_debug("%s: its shared memory is not on this host: the socket carries everything",
                  k->endpoint);
        k->shm_state = SHM_REFUSED;
        return;
    }
    k->shm_state = SHM_ON;
    k->shm_drops = k->drops;
    zps_debug("%s: shared-memory session (%llu elements)", k->endpoint,
              (unsigned long long)k->shm_len);
}

/*
 * Gives up k's shared memory for the rest of the client's life: what it
 * carried goes over the socket. For a segment that another process has cut
 * short or scribbled on, which the next session would meet again.
 */
void shm_give_up(conn_t *k, const char *why)
{
    zps_warn("%s: %s; the socket carries everything to this server from now", k->endpoint, why);
    shm_end(k);
    k->shm_state = SHM_REFUSED;
}

/* Whether k's request in progress goes through shared memory: then its payload is in the slot. */
bool shm_use(conn_t *k)
{
    if (k->shm_state == SHM_ON && k->drops != k->shm_drops)
        shm_end(k); /* the connection dropped: the server ended the session */
    if (k->shm_state == SHM_ON && zps_shm_guard_lost(k->shm_base))
        shm_give_up(k, "its shared memory was cut short by another process");
    bool bulk = k->req.type == ZPS_MSG_PULL || (k->req.type == ZPS_MSG_PUSH && k->payload);
    if (k->shm_state != SHM_ON || !bulk || (k->req.flags & ZPS_FLAG_BF16) ||
        (k->req.type == ZPS_MSG_PUSH && k->count != k->shm_len)) {
        k->req.flags &= ~(uint32_t)ZPS_FLAG_SHM;
        return false;
    }
    if (k->req.type == ZPS_MSG_PUSH && k->shm_written_id != k->req.request_id) {
        /* Its checksum was computed from the caller's buffer (slices_sum). */
        memcpy(k->shm_slot, k->payload, k->count * sizeof(float));
        k->shm_written_id = k->req.request_id;
        if (zps_shm_guard_lost(k->shm_base)) {
            shm_give_up(k, "its shared memory was cut short by another process");
            k->req.flags &= ~(uint32_t)ZPS_FLAG_SHM;
            return false;
        }
    }
    k->req.flags |= ZPS_FLAG_SHM;
    return true;
}

/*
 * A pull reply whose parameters are in k's shared memory: copied into dst
 * with their checksum checked. The buffer is the session's until its next
 * request. ZPS_ESHM when they cannot be had from there (changed under us by
 * another process of this user, or a buffer the session does not have):
 * the session is given up, and the caller pulls again over the socket.
 */
int shm_copy(zps_client_t *c, conn_t *k, float *dst)
{
    const zps_header_t *h = &k->reply.hdr;
    if (!k->shm_base || h->shm_buffer >= k->shm_nbufs || h->length != k->shm_len) {
        client_set_error(c,
                  "%s: a shared-memory reply (buffer %u, %llu elements) that this client's "
                  "session cannot hold",
                  k->endpoint, h->shm_buffer, (unsigned long long)h->length);
        shm_give_up(k, "a shared-memory reply that its session cannot hold");
        return ZPS_ESHM;
    }
    const unsigned char *src = k->shm_base + k->shm_buf_offset + h->shm_buffer * k->shm_stride;
    if (zps_crc32c_copy(0, dst, src, h->length * sizeof(float)) != h->checksum ||
        zps_shm_guard_lost(k->shm_base)) {
        client_set_error(c, "%s: the pulled parameters in shared memory fail their checksum", k->endpoint);
        shm_give_up(k, "the parameters in its shared memory were changed under us (they failed "
                       "their checksum)");
        return ZPS_ESHM;
    }
    return 0;
}
