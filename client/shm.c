/*
 * shm.c - the shared-memory session of one connection (server/shm.h): a
 * worker on the server's host asks for one over the socket once the model
 * exists; granted, the segment is mapped and checked, pushes put their
 * gradient in the worker's slot and pulls read the parameters from the
 * server's buffer, and the socket carries only headers. It ends when the
 * connection drops (the server ends it then) or the server says it has
 * none; it is given up for good when another process cuts the segment
 * short or scribbles on it.
 */
#include "internal.h"

#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "json.h"
#include "log.h"
#include "seal.h"
#include "shm_guard.h"
#include "shm_layout.h"

enum {
    SHM_WANTED,  /* asked for at the next send */
    SHM_ASKED,   /* an SHM request is out */
    SHM_ON,      /* granted and mapped */
    SHM_REFUSED, /* the server grants none, or it is not on this host */
};

typedef struct shm {
    session_t session;
    int state;           /* SHM_* */
    int worker;          /* this worker's rank: its slot */
    unsigned drops;      /* the connection's drops when it was asked for */
    uint64_t request_id; /* the SHM request asked (SHM_ASKED) */
    uint64_t sent_id;    /* the last request sent through it */
    unsigned char *base; /* SHM_ON: the mapped segment */
    size_t size;
    uint64_t len; /* the shard's elements */
    uint32_t nbufs;
    uint64_t stride, buf_offset;
    float *slot;         /* this worker's gradient slot */
    uint64_t written_id; /* the request whose payload is in the slot */
} shm_t;

/* Ends the session on this side; the next send asks again (unless refused). */
static void shm_stop(shm_t *s)
{
    if (s->base) {
        zps_shm_guard_remove(s->base);
        munmap(s->base, s->size);
    }
    s->base = NULL;
    s->size = 0;
    s->slot = NULL;
    s->written_id = 0;
    if (s->state != SHM_REFUSED)
        s->state = SHM_WANTED;
}

/*
 * Gives up shared memory with this server for the rest of the client's
 * life: what it carried goes over the socket. For a segment that another
 * process has cut short or scribbled on, which the next session would meet
 * again.
 */
static void give_up(shm_t *s, const conn_t *k, const char *why)
{
    zps_warn("%s: %s; the socket carries everything to this server from now", k->endpoint, why);
    shm_stop(s);
    s->state = SHM_REFUSED;
}

/* The connection dropped since the session was asked for: the server ended it. */
static void notice_drop(shm_t *s, const conn_t *k)
{
    if ((s->state == SHM_ASKED || s->state == SHM_ON) && k->drops != s->drops)
        shm_stop(s);
}

/* Asks k's server for a shared-memory session; the reply comes to shm_claim. */
static void ask(shm_t *s, zps_client_t *c, conn_t *k)
{
    zps_header_t h;
    zps_header_init(&h, ZPS_MSG_SHM);
    h.request_id = ++c->next_id;
    h.worker = s->worker;
    if (conn_send_header(k, &h) == 0) {
        s->state = SHM_ASKED;
        s->request_id = h.request_id;
        s->drops = k->drops;
    }
}

/* Maps the segment an SHM reply names and checks it is the server's; false if not. */
static bool map_segment(shm_t *s, const zps_client_t *c, const char *name, const char *token)
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
    s->base = base;
    s->size = (size_t)st.st_size;
    s->len = l.len;
    s->nbufs = l.nbufs;
    s->stride = l.stride;
    s->buf_offset = l.buf_offset;
    s->slot = (float *)(base + l.slot_offset + (uint64_t)rank * l.stride);
    s->written_id = 0;
    return true;
}

/* The session k's server granted (m: the SHM reply), or why not. */
static void granted(shm_t *s, const zps_client_t *c, const conn_t *k, const zps_message_t *m)
{
    if (m->hdr.status == ZPS_ENOTINIT) {
        s->state = SHM_WANTED; /* once the model exists */
        return;
    }
    if (m->hdr.status != 0) {
        zps_debug("%s grants no shared-memory session (%s): the socket carries everything",
                  k->endpoint, m->hdr.error);
        s->state = SHM_REFUSED;
        return;
    }
    zps_json_t *j = NULL;
    const char *name = NULL, *token = NULL;
    if (m->hdr.json && zps_json_parse(m->hdr.json, &j, NULL, 0) == 0) {
        name = zps_json_string(zps_json_get(j, "name"));
        token = zps_json_string(zps_json_get(j, "token"));
    }
    bool ok = map_segment(s, c, name, token);
    zps_json_free(j);
    if (!ok) {
        zps_debug("%s: its shared memory is not on this host: the socket carries everything",
                  k->endpoint);
        s->state = SHM_REFUSED;
        return;
    }
    s->state = SHM_ON;
    zps_debug("%s: shared-memory session (%llu elements)", k->endpoint, (unsigned long long)s->len);
}

/*
 * Carries k's request when it moves bulk this session can hold (a pull, a
 * float32 push of the shard's size): the payload goes into the slot (unless
 * slices_sum put it there already) and the socket carries the header alone,
 * flagged ZPS_FLAG_SHM.
 */
static int shm_send(session_t *base, zps_client_t *c, conn_t *k, zps_header_t *h)
{
    shm_t *s = (shm_t *)base;
    notice_drop(s, k);
    if (s->state == SHM_WANTED)
        ask(s, c, k);
    if (s->state == SHM_ON && zps_shm_guard_lost(s->base))
        give_up(s, k, "its shared memory was cut short by another process");
    bool push = h->type == ZPS_MSG_PUSH && k->payload;
    if (s->state != SHM_ON || !(h->type == ZPS_MSG_PULL || push) || (h->flags & ZPS_FLAG_BF16) ||
        (push && k->count != s->len))
        return SESSION_PASS;
    if (push && s->written_id != h->request_id) {
        /* Its checksum was computed from the caller's buffer (slices_sum). */
        memcpy(s->slot, k->payload, k->count * sizeof(float));
        s->written_id = h->request_id;
        if (zps_shm_guard_lost(s->base)) {
            give_up(s, k, "its shared memory was cut short by another process");
            return SESSION_PASS;
        }
    }
    h->flags |= ZPS_FLAG_SHM;
    int rc = conn_send_header(k, h);
    if (rc == 0)
        s->sent_id = h->request_id;
    return rc;
}

/* Its messages come over the socket: the plain session reads them. */
static int shm_recv(session_t *base, zps_client_t *c, conn_t *k, zps_message_t *m)
{
    (void)base;
    (void)c;
    (void)k;
    (void)m;
    return ZPS_EAGAIN;
}

/*
 * The answer to an SHM request; and a refusal of a request it carried:
 * ZPS_ESHM, the server has no session for this connection (it dropped and
 * came back, or its segment is gone), or ZPS_ECHECKSUM, the gradient in the
 * slot was scribbled on by another process of this user. Either way the
 * request goes again at once over the socket (a loss), and after a bad
 * checksum the slot is not used again.
 */
static bool shm_claim(session_t *base, zps_client_t *c, conn_t *k, const session_t *from,
                      zps_message_t *m)
{
    shm_t *s = (shm_t *)base;
    if (from != &k->plain || !m->hdr.reply)
        return false;
    notice_drop(s, k);
    if (m->hdr.type == ZPS_MSG_SHM) {
        if (s->state == SHM_ASKED && m->hdr.request_id == s->request_id)
            granted(s, c, k, m);
        return true;
    }
    bool refused = m->hdr.status == ZPS_ESHM || m->hdr.status == ZPS_ECHECKSUM;
    if (!refused || !k->pending || m->hdr.request_id != k->req.request_id ||
        m->hdr.request_id != s->sent_id)
        return false;
    if (m->hdr.status == ZPS_ECHECKSUM)
        give_up(s, k,
                "the gradient in its shared-memory slot was changed under us "
                "(it failed its checksum at the server)");
    else
        zps_debug("%s: the server has no shared-memory session for us", k->endpoint);
    shm_stop(s);
    s->sent_id = 0;
    s->session.lost++;
    return true;
}

static size_t shm_poll(session_t *base, conn_t *k, zmq_pollitem_t *items)
{
    (void)base;
    (void)k;
    (void)items;
    return 0;
}

static uint64_t shm_wake(session_t *base, zps_client_t *c, conn_t *k, uint64_t now)
{
    (void)c;
    (void)now;
    notice_drop((shm_t *)base, k);
    return UINT64_MAX;
}

static void shm_end(session_t *base, conn_t *k)
{
    shm_t *s = (shm_t *)base;
    (void)k;
    s->state = SHM_REFUSED;
    shm_stop(s);
    free(s);
}

static const session_ops_t shm_ops = {
    .name = "shm",
    .send = shm_send,
    .recv = shm_recv,
    .claim = shm_claim,
    .poll = shm_poll,
    .wake = shm_wake,
    .end = shm_end,
};

session_t *shm_new(const zps_client_t *c)
{
    if (!c->opts.shm || c->opts.worker < 0 || c->opts.wire_bf16)
        return NULL;
    shm_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->session.ops = &shm_ops;
    s->state = SHM_WANTED;
    s->worker = c->opts.worker;
    return &s->session;
}

/* Whether a push of `count` elements can be checksummed straight into the slot (shm_stage). */
bool shm_can_stage(const session_t *base, size_t count)
{
    const shm_t *s = (const shm_t *)base;
    return s && s->state == SHM_ON && count == s->len;
}

/*
 * Copies a push's v[count] into the slot in the same pass that computes its
 * checksum and finds its first non-finite value (*bad; count when none),
 * for request `request_id`; returns the checksum. Only after shm_can_stage.
 */
uint32_t shm_stage(session_t *base, const float *v, size_t count, uint64_t request_id, size_t *bad)
{
    shm_t *s = (shm_t *)base;
    float mx;
    uint32_t crc = zps_crc_copy_out_scan_max(s->slot, v, count, bad, &mx);
    s->written_id = *bad < count ? 0 : request_id;
    return crc;
}

/*
 * A pull reply whose parameters are in k's shared memory: copied into dst
 * with their checksum checked. The buffer is the session's until its next
 * request. ZPS_ESHM when they cannot be had from there (changed under us by
 * another process of this user, or a buffer the session does not have):
 * the session is given up, and the caller pulls again over the socket.
 */
int shm_copy(session_t *base, zps_client_t *c, conn_t *k, float *dst)
{
    shm_t *s = (shm_t *)base;
    const zps_header_t *h = &k->reply.hdr;
    if (!s || !s->base || h->shm_buffer >= s->nbufs || h->length != s->len) {
        client_set_error(c,
                         "%s: a shared-memory reply (buffer %u, %llu elements) that this "
                         "client's session cannot hold",
                         k->endpoint, h->shm_buffer, (unsigned long long)h->length);
        if (s)
            give_up(s, k, "a shared-memory reply that its session cannot hold");
        return ZPS_ESHM;
    }
    const unsigned char *src = s->base + s->buf_offset + h->shm_buffer * s->stride;
    if (zps_crc32c_copy(0, dst, src, h->length * sizeof(float)) != h->checksum ||
        zps_shm_guard_lost(s->base)) {
        client_set_error(c, "%s: the pulled parameters in shared memory fail their checksum",
                         k->endpoint);
        give_up(s, k,
                "the parameters in its shared memory were changed under us (they failed "
                "their checksum)");
        return ZPS_ESHM;
    }
    return 0;
}
