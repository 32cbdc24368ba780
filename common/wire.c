/*
 * wire.c - framing, encoding and checking of zps messages; see wire.h.
 */
#include "wire.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "checksum.h"
#include "error.h"
#include "pool.h"
#include "seal.h"
#include "simd.h"
#include "zps.pb-c.h"

void zps_header_init(zps_header_t *hdr, enum zps_msg_type type)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->version = ZPS_PROTOCOL_VERSION;
    hdr->type = (uint32_t)type;
    hdr->worker = -1;
}

bool zps_wire_wants_payload(const zps_header_t *hdr)
{
    if (hdr->flags & ZPS_FLAG_SHM) /* the payload is in shared memory */
        return false;
    if (!hdr->reply)
        return hdr->type == ZPS_MSG_INIT || hdr->type == ZPS_MSG_PUSH;
    return hdr->type == ZPS_MSG_PULL && hdr->status == 0;
}

static void close_frames(zps_message_t *msg)
{
    for (size_t i = 0; i < msg->nframes; i++)
        zmq_msg_close(&msg->frames[i]);
    free(msg->frames);
    msg->frames = NULL;
    msg->nframes = 0;
}

void zps_message_drop_payload(zps_message_t *msg)
{
    if (msg->frames) {
        close_frames(msg);
        msg->has_payload = false;
    }
    if (msg->has_payload) {
        zmq_msg_close(&msg->payload);
        msg->has_payload = false;
    }
}

void zps_message_close(zps_message_t *msg)
{
    zps_message_drop_payload(msg);
    free(msg->json);
    msg->json = NULL;
    msg->hdr.json = NULL;
}

void zps_message_move(zps_message_t *dst, zps_message_t *src)
{
    *dst = *src;
    if (src->has_payload && !src->frames) {
        /* zmq_msg_t is moved by ZeroMQ, not by copying it (a small one holds its bytes). */
        zmq_msg_init(&dst->payload);
        zmq_msg_move(&dst->payload, &src->payload);
        zmq_msg_close(&src->payload);
    }
    src->frames = NULL;
    src->nframes = 0;
    src->has_payload = false;
    src->json = NULL;
    src->hdr.json = NULL;
}

/* Copies the fields of a decoded protobuf header into our plain struct. */
static void header_from_pb(zps_header_t *h, const Zps__Header *pb)
{
    h->version = pb->version;
    h->type = (uint32_t)pb->type;
    h->reply = pb->reply;
    h->worker = pb->worker;
    h->request_id = pb->request_id;
    h->clock = pb->clock;
    h->model_version = pb->model_version;
    h->min_clock = pb->min_clock;
    h->total = pb->total;
    h->offset = pb->offset;
    h->length = pb->length;
    h->batch = pb->batch;
    h->status = pb->status;
    h->checksum = pb->checksum;
    h->flags = pb->flags;
    h->shard_index = pb->shard_index;
    h->shard_count = pb->shard_count;
    h->update_staleness = pb->update_staleness;
    h->next_clock = pb->next_clock;
    h->config_fingerprint = pb->config_fingerprint;
    h->waited_us = pb->waited_us;
    h->shm_buffer = pb->shm_buffer;
    h->plan_examples = pb->plan_examples;
    h->plan_batch = pb->plan_batch;
    h->plan_epochs = pb->plan_epochs;
    h->lease_want = pb->lease_want;
    h->lease_done = pb->lease_done;
    h->nleases = (uint32_t)pb->n_leases;
    for (size_t i = 0; i < pb->n_leases; i++)
        h->leases[i] = pb->leases[i];
    snprintf(h->error, sizeof(h->error), "%s", pb->error ? pb->error : "");
}

static void header_to_pb(Zps__Header *pb, const zps_header_t *h)
{
    pb->version = h->version;
    pb->type = (Zps__MsgType)h->type;
    pb->reply = h->reply;
    pb->worker = h->worker;
    pb->request_id = h->request_id;
    pb->clock = h->clock;
    pb->model_version = h->model_version;
    pb->min_clock = h->min_clock;
    pb->total = h->total;
    pb->offset = h->offset;
    pb->length = h->length;
    pb->batch = h->batch;
    pb->status = h->status;
    pb->checksum = h->checksum;
    pb->flags = h->flags;
    pb->shard_index = h->shard_index;
    pb->shard_count = h->shard_count;
    pb->update_staleness = h->update_staleness;
    pb->next_clock = h->next_clock;
    pb->config_fingerprint = h->config_fingerprint;
    pb->waited_us = h->waited_us;
    pb->shm_buffer = h->shm_buffer;
    pb->plan_examples = h->plan_examples;
    pb->plan_batch = h->plan_batch;
    pb->plan_epochs = h->plan_epochs;
    pb->lease_want = h->lease_want;
    pb->lease_done = h->lease_done;
    pb->n_leases = h->nleases <= ZPS_WIRE_MAX_LEASES ? h->nleases : ZPS_WIRE_MAX_LEASES;
    pb->leases = (uint64_t *)h->leases;
    /* protobuf-c packs the pointers without writing through them. */
    pb->error = (char *)h->error;
    pb->json = (char *)(h->json ? h->json : "");
}

/* ---- buffers for assembled payloads ---- */

/* A pooled buffer's header, in the cache line before its data. */
typedef struct pooled {
    struct pooled *next;
    size_t cap;
} pooled_t;

enum { POOL_HEAD = 64 };

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pooled_t *pool_free;
static uint64_t pool_bytes, pool_limit;

void zps_wire_pool_limit(uint64_t bytes)
{
    pthread_mutex_lock(&pool_lock);
    pool_limit = bytes;
    while (pool_free && pool_bytes > pool_limit) {
        pooled_t *b = pool_free;
        pool_free = b->next;
        pool_bytes -= b->cap;
        free(b);
    }
    pthread_mutex_unlock(&pool_lock);
}

uint64_t zps_wire_pool_bytes(void)
{
    pthread_mutex_lock(&pool_lock);
    uint64_t n = pool_bytes;
    pthread_mutex_unlock(&pool_lock);
    return n;
}

/* A free buffer of at least `size` bytes (and at most twice that), or a new one. */
static void *pool_get(size_t size)
{
    pthread_mutex_lock(&pool_lock);
    for (pooled_t **at = &pool_free; *at; at = &(*at)->next) {
        pooled_t *b = *at;
        if (b->cap >= size && b->cap / 2 <= size) {
            *at = b->next;
            pool_bytes -= b->cap;
            pthread_mutex_unlock(&pool_lock);
            return (char *)b + POOL_HEAD;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    if (size > SIZE_MAX - POOL_HEAD)
        return NULL;
    pooled_t *b = aligned_alloc(POOL_HEAD, (size + 2 * POOL_HEAD - 1) / POOL_HEAD * POOL_HEAD);
    if (!b)
        return NULL;
    b->cap = size;
    return (char *)b + POOL_HEAD;
}

/* ZeroMQ's free callback for a pooled payload: kept while the pool has room. */
static void pool_put(void *data, void *hint)
{
    (void)hint;
    pooled_t *b = (pooled_t *)((char *)data - POOL_HEAD);
    pthread_mutex_lock(&pool_lock);
    if (pool_bytes + b->cap <= pool_limit) {
        b->next = pool_free;
        pool_free = b;
        pool_bytes += b->cap;
        b = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    free(b);
}

void zps_wire_tune_malloc(void)
{
    /* glibc's largest threshold (half its 64 MiB per-thread heap): frames,
     * and the other buffers of a message (a sealed payload opened, a
     * bfloat16 one widened) up to 32 MiB, come from the heap. Fixed values
     * also stop glibc's own adjustment of both, which would return the
     * frames' memory, 2 MiB at a time, after every message. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, -1); /* never trimmed (mallopt(3)) */
    /* One arena for every thread. ZeroMQ's I/O thread allocates the frames
     * it receives, and a thread's own arena is a chain of 64 MiB heaps of
     * which glibc unmaps any that empties, whatever the trim threshold: a
     * server holding W large pushes until its step, then freeing them at
     * once, faulted their pages in anew every clock (docs/benchmarks.md,
     * "Page faults"). The main arena is trimmed only past M_TRIM_THRESHOLD,
     * that is never. Its lock is shared, but the threads here allocate a
     * few buffers a message, not in loops. */
    mallopt(M_ARENA_MAX, 1);
}

void zps_wire_trim_heap(void)
{
    malloc_trim(0);
}

/* Counts a received frame of n bytes that came over the connection. */
static void count_frame(zps_message_t *msg, size_t n)
{
    msg->bytes += n;
    /* ZMTP 3: a flags byte, then the size in one byte or eight. */
    msg->wire_bytes += n + 1 + (n > 255 ? 8 : 1);
}

/* Receives the rest of a multipart message, discarding it. Returns frames dropped. */
static int drain_rest(void *sock, zps_message_t *msg)
{
    int dropped = 0;
    int more = 1;
    size_t sz = sizeof(more);
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        count_frame(msg, zmq_msg_size(&m));
        zmq_msg_close(&m);
        dropped++;
        sz = sizeof(more);
    }
    return dropped;
}

/*
 * ZeroMQ may deliver a small frame inside its receive buffer at any byte
 * offset. Payloads are read as floats, so one that is not 4-byte aligned is
 * moved into a message of its own (malloc'd, hence aligned). Large frames
 * always have their own allocation, so this copies a few kilobytes at most.
 */
static int realign(zmq_msg_t *m)
{
    if (((uintptr_t)zmq_msg_data(m) & (sizeof(float) - 1)) == 0)
        return 0;
    zmq_msg_t copy;
    if (zmq_msg_init_size(&copy, zmq_msg_size(m)) != 0)
        return ZPS_ENOMEM;
    memcpy(zmq_msg_data(&copy), zmq_msg_data(m), zmq_msg_size(m));
    ZPS_ASSERT(((uintptr_t)zmq_msg_data(&copy) & (sizeof(float) - 1)) == 0);
    zmq_msg_move(m, &copy); /* releases m's old content */
    zmq_msg_close(&copy);
    return 0;
}

static bool has_more(void *sock)
{
    int more = 0;
    size_t sz = sizeof(more);
    return zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more;
}

/* Decodes a header frame's bytes into msg->hdr (and msg->json). */
static int decode_header(zps_message_t *msg, const void *data, size_t len)
{
    Zps__Header *pb = zps__header__unpack(NULL, len, data);
    if (!pb)
        return ZPS_EPROTO;
    /* A header with more leases than any worker may hold is no header of ours. */
    if (pb->n_leases > ZPS_WIRE_MAX_LEASES) {
        msg->hdr.request_id = pb->request_id;
        msg->hdr.type = (uint32_t)pb->type;
        zps__header__free_unpacked(pb, NULL);
        return ZPS_EPROTO;
    }
    header_from_pb(&msg->hdr, pb);
    if (pb->json && pb->json[0]) {
        msg->json = strdup(pb->json);
        msg->hdr.json = msg->json;
    }
    zps__header__free_unpacked(pb, NULL);
    return 0;
}

static int judge(zps_message_t *msg, bool verify);
static uint32_t scan_max_run(uint32_t crc, float *dst, const float *src, bool scan_src,
                             size_t count, size_t *first_bad, float *abs_max);
static uint32_t copy_out(const zps_message_t *msg, float *dst, size_t *at, const void *src,
                         size_t bytes, uint32_t crc);

/* Partial results of a pass over pieces, joined in order. */
typedef struct scan_part {
    uint32_t crc; /* of the piece, from 0 */
    size_t bytes; /* the bytes it checksummed */
    size_t bad;   /* its first value not finite, as an index of the whole; SIZE_MAX: none */
    float mx;
} scan_part_t;

static void join_parts(const scan_part_t *part, size_t n, uint32_t *crc, size_t *first_bad,
                       size_t none, float *abs_max)
{
    *first_bad = none;
    *abs_max = 0;
    for (size_t i = 0; i < n; i++) {
        *crc = zps_crc32c_combine(*crc, part[i].crc, part[i].bytes);
        if (*first_bad == none && part[i].bad != SIZE_MAX)
            *first_bad = part[i].bad;
        *abs_max = part[i].mx > *abs_max ? part[i].mx : *abs_max;
    }
}

/* Receives a routing id frame into msg->peer, then the next frame into
 * `frame` with what ZeroMQ says of its connection (descriptor, User-Id). */
static int recv_routed(void *sock, zps_message_t *msg, zmq_msg_t *frame)
{
    size_t n = zmq_msg_size(frame);
    msg->bytes += n;
    msg->has_peer = true;
    msg->peer.len = n < ZPS_PEER_ID_MAX ? n : ZPS_PEER_ID_MAX;
    memcpy(msg->peer.id, zmq_msg_data(frame), msg->peer.len);
    zmq_msg_close(frame);
    if (!has_more(sock))
        return ZPS_EFRAMES;
    zmq_msg_init(frame);
    if (zmq_msg_recv(frame, sock, 0) < 0) {
        zmq_msg_close(frame);
        return ZPS_ESOCKET;
    }
    int fd = zmq_msg_get(frame, ZMQ_SRCFD);
    msg->peer.fd = fd >= 0 ? fd : -1;
    /* Set by ZeroMQ from the ZAP handler's reply, never by the peer. */
    const char *user = zmq_msg_gets(frame, "User-Id");
    if (user && strlen(user) < sizeof(msg->peer.user))
        memcpy(msg->peer.user, user, strlen(user) + 1);
    return 0;
}

/*
 * Clears msg and receives a message's first frame into `frame`: on a ROUTER
 * the routing id goes to msg->peer (it is added by the ROUTER, never on the
 * wire) and `frame` is the frame after it. Counted.
 */
static int recv_first(void *sock, int flags, bool router, zps_message_t *msg, zmq_msg_t *frame)
{
    memset(msg, 0, sizeof(*msg));
    zps_header_init(&msg->hdr, ZPS_MSG_NONE);
    msg->hdr.version = 0;
    msg->peer.fd = -1;
    zmq_msg_init(frame);
    if (zmq_msg_recv(frame, sock, flags) < 0) {
        int e = zmq_errno();
        zmq_msg_close(frame);
        return e == EAGAIN ? ZPS_EAGAIN : ZPS_ESOCKET;
    }
    if (router) {
        int rc = recv_routed(sock, msg, frame);
        if (rc)
            return rc;
    }
    count_frame(msg, zmq_msg_size(frame));
    return 0;
}

/*
 * The rest of a payload sent in several frames, its first already in
 * msg->payload: into msg->frames. Every frame but the last must hold
 * exactly ZPS_WIRE_FRAME_BYTES, and together no more than the header says
 * (ZPS_EFRAMES, ZPS_ELENGTH: the rest is left for drain_rest).
 */
static int recv_frames(void *sock, zps_message_t *msg)
{
    uint64_t want = msg->hdr.length > UINT64_MAX / sizeof(float)
                        ? UINT64_MAX
                        : msg->hdr.length * zps_wire_elem_bytes(&msg->hdr);
    size_t cap = 8;
    msg->frames = malloc(cap * sizeof(zmq_msg_t));
    if (!msg->frames)
        return ZPS_ENOMEM;
    zmq_msg_init(&msg->frames[0]);
    zmq_msg_move(&msg->frames[0], &msg->payload);
    msg->nframes = 1;
    uint64_t got = zmq_msg_size(&msg->frames[0]);
    for (;;) {
        /* A frame followed by another is a whole one. */
        if (zmq_msg_size(&msg->frames[msg->nframes - 1]) != ZPS_WIRE_FRAME_BYTES)
            return ZPS_EFRAMES;
        if (got >= want)
            return ZPS_ELENGTH;
        if (msg->nframes == cap) {
            zmq_msg_t *more = realloc(msg->frames, 2 * cap * sizeof(zmq_msg_t));
            if (!more)
                return ZPS_ENOMEM;
            msg->frames = more;
            cap *= 2;
        }
        zmq_msg_t *f = &msg->frames[msg->nframes];
        zmq_msg_init(f);
        if (zmq_msg_recv(f, sock, 0) < 0) {
            zmq_msg_close(f);
            return ZPS_ESOCKET;
        }
        msg->nframes++;
        count_frame(msg, zmq_msg_size(f));
        got += zmq_msg_size(f);
        if (realign(f) != 0)
            return ZPS_ENOMEM;
        if (!has_more(sock))
            return 0;
    }
}

/* Bytes of a received payload, in one frame or several. */
static uint64_t payload_bytes(zps_message_t *msg)
{
    if (!msg->frames)
        return zmq_msg_size(&msg->payload);
    uint64_t n = 0;
    for (size_t i = 0; i < msg->nframes; i++)
        n += zmq_msg_size(&msg->frames[i]);
    return n;
}

/*
 * A payload's frames, checked (scanned where they are, or widened from
 * bfloat16 into `wide`) or copied out into `out`, in groups of whole frames
 * on the process's helper threads (pool.h).
 */
typedef struct frames_job {
    const zps_message_t *msg;
    float *wide; /* check: a bfloat16 payload widened here */
    float *out;  /* copy out: here (and check nothing) */
    size_t per;  /* frames per group */
    scan_part_t part[ZPS_POOL_CHUNKS_MAX];
} frames_job_t;

static void frames_chunk(void *arg, size_t g, unsigned lane)
{
    (void)lane;
    frames_job_t *j = arg;
    const zps_message_t *msg = j->msg;
    size_t elem = zps_wire_elem_bytes(&msg->hdr);
    size_t first = g * j->per, end = first + j->per < msg->nframes ? first + j->per : msg->nframes;
    /* Every frame but the last is whole (recv_frames). */
    size_t at = first * (ZPS_WIRE_FRAME_BYTES / elem);
    scan_part_t *pt = &j->part[g];
    *pt = (scan_part_t){.bad = SIZE_MAX};
    for (size_t i = first; i < end; i++) {
        const void *src = zmq_msg_data((zmq_msg_t *)&msg->frames[i]);
        size_t bytes = zmq_msg_size((zmq_msg_t *)&msg->frames[i]), k = bytes / elem;
        pt->bytes += bytes;
        if (j->out) {
            pt->crc = copy_out(msg, j->out, &at, src, bytes, pt->crc);
            continue;
        }
        size_t fbad;
        float fmx;
        pt->crc = j->wide ? zps_bf16_widen_scan(j->wide + at, src, k, &fbad, &fmx, pt->crc)
                          : scan_max_run(pt->crc, NULL, src, false, k, &fbad, &fmx);
        if (pt->bad == SIZE_MAX && fbad < k)
            pt->bad = at + fbad;
        pt->mx = fmx > pt->mx ? fmx : pt->mx;
        at += k;
    }
}

/* Runs j over msg's frames; the CRC, first non-finite value (n: none) and max joined. */
static void run_frames(frames_job_t *j, const zps_message_t *msg, uint32_t *crc, size_t *first_bad,
                       size_t n, float *abs_max)
{
    j->msg = msg;
    /* A frame is ZPS_POOL_CHUNK_MIN: groups of whole frames, at most ZPS_POOL_CHUNKS_MAX. */
    j->per = (msg->nframes + ZPS_POOL_CHUNKS_MAX - 1) / ZPS_POOL_CHUNKS_MAX;
    size_t chunks = zps_pool_chunks(msg->nframes, j->per);
    zps_pool_run(chunks, frames_chunk, j);
    *crc = 0;
    join_parts(j->part, chunks, crc, first_bad, n, abs_max);
}

/*
 * Checks a payload of several frames: its checksum and a scan of its
 * values, in one pass over each frame. A float32 one stays where the
 * frames are; a bfloat16 one is widened, in that pass, into one buffer
 * from the pool, which replaces the frames.
 */
static int check_frames(zps_message_t *msg)
{
    size_t n = (size_t)msg->hdr.length;
    float *wide = NULL;
    if (msg->narrow && !(wide = pool_get(n * sizeof(float))))
        return ZPS_ENOMEM;
    frames_job_t j = {.wide = wide};
    uint32_t crc;
    size_t bad;
    float mx;
    run_frames(&j, msg, &crc, &bad, n, &mx);
    if (crc != msg->hdr.checksum) {
        if (wide)
            pool_put(wide, NULL);
        return ZPS_ECHECKSUM;
    }
    if (wide) {
        close_frames(msg);
        if (zmq_msg_init_data(&msg->payload, wide, n * sizeof(float), pool_put, NULL) != 0) {
            pool_put(wide, NULL);
            msg->has_payload = false;
            return ZPS_ENOMEM;
        }
        msg->narrow = false;
    }
    msg->scanned = true;
    msg->first_nonfinite = bad;
    msg->abs_max = mx;
    return 0;
}

float zps_message_at(const zps_message_t *msg, size_t i)
{
    const float *v;
    if (msg->frames) {
        size_t per = ZPS_WIRE_FRAME_BYTES / sizeof(float);
        v = (const float *)zmq_msg_data(&msg->frames[i / per]) + i % per;
    } else {
        v = (const float *)zmq_msg_data((zmq_msg_t *)&msg->payload) + i;
    }
    return *v;
}

/* Frame i of msg's float32 payload: the one frame (i = 0), or frame i of several. */
static zmq_msg_t *payload_frame(const zps_message_t *msg, size_t i)
{
    return msg->frames ? &msg->frames[i] : (zmq_msg_t *)&msg->payload;
}

/* How many frames msg's float32 payload is in (0 without one). */
static size_t payload_frames(const zps_message_t *msg)
{
    return !msg->has_payload || msg->narrow ? 0 : msg->frames ? msg->nframes : 1;
}

void zps_message_copy_out(const zps_message_t *msg, float *dst)
{
    unsigned char *out = (unsigned char *)dst;
    for (size_t i = 0; i < payload_frames(msg); i++) {
        zmq_msg_t *f = payload_frame(msg, i);
        memcpy(out, zmq_msg_data(f), zmq_msg_size(f));
        out += zmq_msg_size(f);
    }
}

bool zps_message_equals(const zps_message_t *msg, const float *v)
{
    const unsigned char *in = (const unsigned char *)v;
    for (size_t i = 0; i < payload_frames(msg); i++) {
        zmq_msg_t *f = payload_frame(msg, i);
        if (memcmp(in, zmq_msg_data(f), zmq_msg_size(f)) != 0)
            return false;
        in += zmq_msg_size(f);
    }
    return true;
}

int zps_message_flatten(zps_message_t *msg)
{
    if (!msg->frames || msg->narrow)
        return 0;
    size_t bytes = (size_t)msg->hdr.length * sizeof(float);
    char *dst = pool_get(bytes);
    if (!dst)
        return ZPS_ENOMEM;
    zps_message_copy_out(msg, (float *)dst);
    zmq_msg_t m;
    if (zmq_msg_init_data(&m, dst, bytes, pool_put, NULL) != 0) {
        pool_put(dst, NULL);
        return ZPS_ENOMEM;
    }
    close_frames(msg);
    zmq_msg_init(&msg->payload);
    zmq_msg_move(&msg->payload, &m);
    zmq_msg_close(&m);
    return 0;
}

int zps_payload_take(zps_payload_t *p, zps_message_t *msg)
{
    ZPS_ASSERT(msg->has_payload && !msg->narrow);
    memset(p, 0, sizeof(*p));
    if (!msg->frames) {
        zmq_msg_init(&p->one);
        zmq_msg_move(&p->one, &msg->payload);
        p->first = zmq_msg_data(&p->one);
        p->seg = &p->first;
        p->nseg = 1;
        p->seg_len = zmq_msg_size(&p->one) / sizeof(float);
    } else {
        p->seg = malloc(msg->nframes * sizeof(*p->seg));
        if (!p->seg)
            return ZPS_ENOMEM;
        for (size_t i = 0; i < msg->nframes; i++)
            p->seg[i] = zmq_msg_data(&msg->frames[i]);
        p->frames = msg->frames;
        p->nseg = msg->nframes;
        p->seg_len = ZPS_WIRE_FRAME_BYTES / sizeof(float);
        msg->frames = NULL;
        msg->nframes = 0;
    }
    msg->has_payload = false;
    return 0;
}

void zps_payload_move(zps_payload_t *dst, zps_payload_t *src)
{
    *dst = *src;
    if (!src->frames && src->nseg) {
        zmq_msg_init(&dst->one);
        zmq_msg_move(&dst->one, &src->one);
        /* A small message's bytes live in the zmq_msg_t itself: they moved. */
        dst->first = zmq_msg_data(&dst->one);
        dst->seg = &dst->first;
    }
    memset(src, 0, sizeof(*src));
}

void zps_payload_close(zps_payload_t *p)
{
    if (p->frames) {
        for (size_t i = 0; i < p->nseg; i++)
            zmq_msg_close(&p->frames[i]);
        free(p->frames);
        free(p->seg);
    } else if (p->nseg) {
        zmq_msg_close(&p->one);
    }
    memset(p, 0, sizeof(*p));
}

/* zps_wire_recv and zps_wire_recv_deferred: `verify` says whether the
 * payload's checksum is checked here. */
static int recv_message(void *sock, int flags, bool router, bool verify, zps_message_t *msg)
{
    zmq_msg_t frame;
    int first = recv_first(sock, flags, router, msg, &frame);
    if (first)
        return first;

    /* `frame` is the header. */
    int rc = decode_header(msg, zmq_msg_data(&frame), zmq_msg_size(&frame));
    zmq_msg_close(&frame);
    if (rc) {
        drain_rest(sock, msg);
        return rc;
    }

    if (has_more(sock)) {
        zmq_msg_init(&msg->payload);
        if (zmq_msg_recv(&msg->payload, sock, 0) < 0) {
            zmq_msg_close(&msg->payload);
            return ZPS_ESOCKET;
        }
        msg->has_payload = true;
        count_frame(msg, zmq_msg_size(&msg->payload));
        rc = has_more(sock) ? recv_frames(sock, msg) : realign(&msg->payload);
        if (rc) {
            drain_rest(sock, msg);
            return rc;
        }
    }
    if (drain_rest(sock, msg) > 0)
        return ZPS_EFRAMES;
    return judge(msg, verify);
}

/*
 * Replaces a bfloat16 payload by its float32 values, checking its checksum
 * and scanning the values in the same pass.
 */
static int widen(zps_message_t *msg)
{
    size_t n = (size_t)msg->hdr.length;
    zmq_msg_t wide;
    if (zmq_msg_init_size(&wide, n * sizeof(float)) != 0)
        return ZPS_ENOMEM;
    size_t bad;
    float mx;
    uint32_t crc =
        zps_bf16_widen_scan(zmq_msg_data(&wide), zmq_msg_data(&msg->payload), n, &bad, &mx, 0);
    if (crc != msg->hdr.checksum) {
        zmq_msg_close(&wide);
        return ZPS_ECHECKSUM;
    }
    zmq_msg_close(&msg->payload);
    zmq_msg_init(&msg->payload);
    zmq_msg_move(&msg->payload, &wide);
    zmq_msg_close(&wide);
    msg->narrow = false;
    msg->scanned = true;
    msg->first_nonfinite = bad;
    msg->abs_max = mx;
    return 0;
}

/* Judges a message consumed whole, most basic fault first. */
static int judge(zps_message_t *msg, bool verify)
{
    if (msg->hdr.version != ZPS_PROTOCOL_VERSION)
        return ZPS_EVERSION;
    if (msg->hdr.type == ZPS_MSG_NONE || msg->hdr.type > ZPS_MSG_TYPE_MAX)
        return ZPS_ETYPE;
    if (msg->has_payload != zps_wire_wants_payload(&msg->hdr))
        return ZPS_EFRAMES;
    if (msg->has_payload) {
        uint64_t bytes = payload_bytes(msg);
        size_t elem = zps_wire_elem_bytes(&msg->hdr);
        if (msg->hdr.length > SIZE_MAX / sizeof(float) || bytes != msg->hdr.length * elem)
            return ZPS_ELENGTH;
        msg->narrow = elem != sizeof(float);
        return verify ? zps_message_check(msg) : 0;
    } else if (msg->hdr.length != 0 && !msg->hdr.reply && msg->hdr.type != ZPS_MSG_PULL &&
               !(msg->hdr.flags & ZPS_FLAG_SHM)) {
        return ZPS_ELENGTH;
    }
    return 0;
}

int zps_message_check(zps_message_t *msg)
{
    if (!msg->has_payload || msg->scanned)
        return 0;
    if (msg->frames)
        return check_frames(msg);
    if (msg->narrow)
        return widen(msg);
    size_t bad;
    float mx;
    if (zps_crc_scan_max(zmq_msg_data(&msg->payload), msg->hdr.length, &bad, &mx) !=
        msg->hdr.checksum)
        return ZPS_ECHECKSUM;
    msg->scanned = true;
    msg->first_nonfinite = bad;
    msg->abs_max = mx;
    return 0;
}

bool zps_peer_same(const zps_peer_t *a, const zps_peer_t *b)
{
    return a->session == b->session && a->len == b->len && memcmp(a->id, b->id, a->len) == 0;
}

int zps_wire_recv(void *sock, int flags, bool router, zps_message_t *msg)
{
    return recv_message(sock, flags, router, true, msg);
}

int zps_wire_recv_deferred(void *sock, int flags, bool router, zps_message_t *msg)
{
    return recv_message(sock, flags, router, false, msg);
}

/* Copies `bytes` of payload to dst + *at (widened when narrow), continuing crc. */
static uint32_t copy_out(const zps_message_t *msg, float *dst, size_t *at, const void *src,
                         size_t bytes, uint32_t crc)
{
    if (msg->narrow) {
        size_t k = bytes / sizeof(uint16_t);
        crc = zps_bf16_widen(dst + *at, src, k, crc);
        *at += k;
        return crc;
    }
    crc = zps_crc32c_copy(crc, dst + *at, src, bytes);
    *at += bytes / sizeof(float);
    return crc;
}

int zps_message_copy_verified(zps_message_t *msg, float *dst)
{
    if (!msg->has_payload)
        return 0;
    uint32_t crc = 0;
    size_t at = 0;
    if (!msg->frames) {
        crc =
            copy_out(msg, dst, &at, zmq_msg_data(&msg->payload), zmq_msg_size(&msg->payload), crc);
    } else {
        frames_job_t j = {.out = dst};
        size_t bad;
        float mx;
        run_frames(&j, msg, &crc, &bad, 0, &mx);
    }
    return crc == msg->hdr.checksum ? 0 : ZPS_ECHECKSUM;
}

static int send_frame(void *sock, zmq_msg_t *m, int flags)
{
    if (zmq_msg_send(m, sock, flags) >= 0)
        return 0;
    int e = zmq_errno();
    zmq_msg_close(m);
    return e == EAGAIN ? ZPS_EAGAIN : ZPS_ESOCKET;
}

/* Sends peer and header frames; `more` says whether a payload frame follows. */
static int send_head(void *sock, const zps_peer_t *peer, const zps_header_t *hdr, bool more,
                     int flags)
{
    Zps__Header pb = ZPS__HEADER__INIT;
    header_to_pb(&pb, hdr);
    if (hdr->type > ZPS_MSG_TYPE_MAX)
        return ZPS_EINVAL;

    zmq_msg_t m;
    if (peer) {
        if (zmq_msg_init_size(&m, peer->len) != 0)
            return ZPS_ENOMEM;
        memcpy(zmq_msg_data(&m), peer->id, peer->len);
        int rc = send_frame(sock, &m, flags | ZMQ_SNDMORE);
        if (rc)
            return rc;
        /* A multipart message is queued whole or not at all: once its first
         * frame is in, the rest cannot block. */
        flags &= ~ZMQ_DONTWAIT;
    }
    size_t n = zps__header__get_packed_size(&pb);
    if (zmq_msg_init_size(&m, n) != 0)
        return ZPS_ENOMEM;
    zps__header__pack(&pb, zmq_msg_data(&m));
    return send_frame(sock, &m, flags | (more ? ZMQ_SNDMORE : 0));
}

/* A payload sent as several frames: its message, alive until ZeroMQ has
 * released every frame that points into it. */
typedef struct split {
    zmq_msg_t whole;
    atomic_size_t refs;
} split_t;

static void split_release(void *data, void *hint)
{
    (void)data;
    split_t *sp = hint;
    if (atomic_fetch_sub(&sp->refs, 1) == 1) {
        zmq_msg_close(&sp->whole);
        free(sp);
    }
}

/* Sends sp's payload as frames of ZPS_WIRE_FRAME_BYTES (the last one the
 * rest), each pointing into it; drops the caller's reference. */
static int send_split(void *sock, split_t *sp)
{
    const char *data = zmq_msg_data(&sp->whole);
    size_t size = zmq_msg_size(&sp->whole);
    int rc = 0;
    for (size_t off = 0; off < size && rc == 0; off += ZPS_WIRE_FRAME_BYTES) {
        size_t n = size - off < ZPS_WIRE_FRAME_BYTES ? size - off : ZPS_WIRE_FRAME_BYTES;
        zmq_msg_t f;
        atomic_fetch_add(&sp->refs, 1);
        if (zmq_msg_init_data(&f, (void *)(data + off), n, split_release, sp) != 0) {
            split_release(NULL, sp);
            rc = ZPS_ENOMEM;
            break;
        }
        rc = send_frame(sock, &f, off + n < size ? ZMQ_SNDMORE : 0);
    }
    split_release(NULL, sp);
    return rc;
}

int zps_wire_send_msg(void *sock, const zps_peer_t *peer, zps_header_t *hdr, zmq_msg_t *payload,
                      int flags)
{
    bool more = zps_wire_wants_payload(hdr);
    /* Without a payload, `length` keeps its own meaning (a PULL's expected
     * range); with one in shared memory, so do `length` and `checksum`. */
    if (more)
        hdr->length = zmq_msg_size(payload) / zps_wire_elem_bytes(hdr);
    else if (!(hdr->flags & ZPS_FLAG_SHM))
        hdr->checksum = 0;
    /* Made before the header goes: once it is queued, the payload must follow. */
    split_t *sp = NULL;
    if (more && zmq_msg_size(payload) > ZPS_WIRE_FRAME_BYTES) {
        sp = malloc(sizeof(*sp));
        if (!sp) {
            zmq_msg_close(payload);
            return ZPS_ENOMEM;
        }
        zmq_msg_init(&sp->whole);
        zmq_msg_move(&sp->whole, payload);
        atomic_init(&sp->refs, 1);
    }
    int rc = send_head(sock, peer, hdr, more, flags);
    if (rc || !more) {
        if (sp)
            split_release(NULL, sp);
        else
            zmq_msg_close(payload);
        return rc;
    }
    if (sp)
        return send_split(sock, sp);
    return send_frame(sock, payload, flags & ~ZMQ_DONTWAIT);
}

/* zps_wire_send and zps_wire_send_summed: `summed` says hdr->checksum is already the payload's. */
static int send_values(void *sock, const zps_peer_t *peer, zps_header_t *hdr, const void *payload,
                       size_t count, zps_wire_free_fn *ffn, void *hint, int flags, bool summed)
{
    zmq_msg_t m;
    if (!zps_wire_wants_payload(hdr)) {
        if (ffn)
            ffn((void *)payload, hint);
        zmq_msg_init(&m);
        return zps_wire_send_msg(sock, peer, hdr, &m, flags);
    }
    size_t bytes = count * zps_wire_elem_bytes(hdr);
    if (ffn && bytes > 0) {
        if (!summed)
            hdr->checksum = zps_crc32c(0, payload, bytes);
        /* ZeroMQ's free callback takes (data, hint); ours has the same shape. */
        if (zmq_msg_init_data(&m, (void *)payload, bytes, ffn, hint) != 0) {
            ffn((void *)payload, hint);
            return ZPS_ENOMEM;
        }
    } else {
        if (ffn)
            ffn((void *)payload, hint);
        if (zmq_msg_init_size(&m, bytes) != 0)
            return ZPS_ENOMEM;
        hdr->checksum = zps_crc32c_copy(0, zmq_msg_data(&m), payload, bytes);
    }
    return zps_wire_send_msg(sock, peer, hdr, &m, flags);
}

int zps_wire_send(void *sock, const zps_peer_t *peer, zps_header_t *hdr, const void *payload,
                  size_t count, zps_wire_free_fn *ffn, void *hint, int flags)
{
    return send_values(sock, peer, hdr, payload, count, ffn, hint, flags, false);
}

int zps_wire_send_summed(void *sock, const zps_peer_t *peer, zps_header_t *hdr, const void *payload,
                         size_t count, zps_wire_free_fn *ffn, void *hint, int flags)
{
    return send_values(sock, peer, hdr, payload, count, ffn, hint, flags, true);
}

uint32_t zps_crc_scan(const float *v, size_t count, size_t *first_bad)
{
    float mx;
    return zps_crc_scan_max(v, count, first_bad, &mx);
}

/*
 * The largest magnitude's bits (sign cleared) of v[count]. Inf and NaN have
 * the largest bits of all, so one unsigned maximum finds both the bound and
 * whether everything is finite; integer operations vectorise without any
 * floating-point licence.
 */
ZPS_CLONES_AVX512 static uint32_t abs_max_bits(const float *v, size_t count)
{
    uint32_t mx = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t b;
        memcpy(&b, &v[i], sizeof(b));
        b &= 0x7fffffffu;
        mx = b > mx ? b : mx;
    }
    return mx;
}

/*
 * zps_crc_scan_max (dst NULL: src is checksummed and scanned where it is),
 * zps_crc_copy_scan_max (src copied to dst, and the copy checksummed and
 * scanned while it is in cache) and, with scan_src, zps_crc_copy_out_scan_max
 * (src copied to dst, but src checksummed and scanned: dst is memory that
 * others may write, such as a shared-memory slot, and what counts is what
 * was meant to be sent), one block at a time; the CRC32C continues from
 * `crc`.
 */
static uint32_t scan_max_run(uint32_t crc, float *dst, const float *src, bool scan_src,
                             size_t count, size_t *first_bad, float *abs_max)
{
    enum { BLOCK = 8192 };
    uint32_t mx = 0;
    *first_bad = count;
    for (size_t i = 0; i < count; i += BLOCK) {
        size_t n = count - i < BLOCK ? count - i : BLOCK;
        const float *v = src + i;
        if (dst) {
            crc = scan_src ? zps_crc32c_copy_out(crc, dst + i, src + i, n * sizeof(float))
                           : zps_crc32c_copy(crc, dst + i, src + i, n * sizeof(float));
            v = scan_src ? src + i : dst + i;
        } else {
            crc = zps_crc32c(crc, v, n * sizeof(float));
        }
        uint32_t m = abs_max_bits(v, n);
        mx = m > mx ? m : mx;
        size_t bad;
        /* The culprit is located only in the block that has one. */
        if (m >= 0x7f800000u && *first_bad == count && !zps_all_finite(v, n, &bad))
            *first_bad = i + bad;
    }
    if (mx >= 0x7f800000u) {
        *abs_max = INFINITY;
    } else {
        memcpy(abs_max, &mx, sizeof(*abs_max));
    }
    return crc;
}

/* A long scan in chunks on the process's helper threads (pool.h). */
typedef struct scan_job {
    float *dst;
    const float *src;
    bool scan_src;
    size_t count, chunk; /* in values */
    scan_part_t part[ZPS_POOL_CHUNKS_MAX];
} scan_job_t;

static void scan_chunk(void *arg, size_t i, unsigned lane)
{
    (void)lane;
    scan_job_t *j = arg;
    size_t lo = i * j->chunk, n = zps_pool_piece(i, j->chunk, j->count);
    scan_part_t *pt = &j->part[i];
    size_t bad;
    pt->crc = scan_max_run(0, j->dst ? j->dst + lo : NULL, j->src + lo, j->scan_src, n, &bad,
                           &pt->mx);
    pt->bytes = n * sizeof(float);
    pt->bad = bad < n ? lo + bad : SIZE_MAX;
}

static uint32_t scan_max(uint32_t crc, float *dst, const float *src, bool scan_src, size_t count,
                         size_t *first_bad, float *abs_max)
{
    if (count * sizeof(float) < 2 * ZPS_POOL_CHUNK_MIN) /* one chunk */
        return scan_max_run(crc, dst, src, scan_src, count, first_bad, abs_max);
    scan_job_t j = {.dst = dst, .src = src, .scan_src = scan_src, .count = count};
    j.chunk = zps_pool_chunk(count * sizeof(float), 64) / sizeof(float);
    size_t chunks = zps_pool_chunks(count, j.chunk);
    zps_pool_run(chunks, scan_chunk, &j);
    join_parts(j.part, chunks, &crc, first_bad, count, abs_max);
    return crc;
}

uint32_t zps_crc_scan_max(const float *v, size_t count, size_t *first_bad, float *abs_max)
{
    return scan_max(0, NULL, v, false, count, first_bad, abs_max);
}

uint32_t zps_crc_copy_scan_max(float *dst, const float *src, size_t count, size_t *first_bad,
                               float *abs_max)
{
    return scan_max(0, dst, src, false, count, first_bad, abs_max);
}

uint32_t zps_crc_copy_out_scan_max(float *dst, const float *src, size_t count, size_t *first_bad,
                                   float *abs_max)
{
    return scan_max(0, dst, src, true, count, first_bad, abs_max);
}

/* A bit test: the AVX-512 version is three times faster than SSE2's. */
ZPS_CLONES_AVX512 bool zps_all_finite(const float *v, size_t count, size_t *first_bad)
{
    /* Exponent bits all ones means Inf or NaN. A branch-free scan over the
     * bits vectorises; the culprit is located only on failure. */
    uint32_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t b;
        memcpy(&b, &v[i], sizeof(b));
        bad |= (uint32_t)((b & 0x7f800000u) == 0x7f800000u);
    }
    if (!bad)
        return true;
    for (size_t i = 0; i < count; i++) {
        if (!isfinite(v[i])) {
            if (first_bad)
                *first_bad = i;
            break;
        }
    }
    return false;
}

/* ---- sealed messages ---- */

int zps_wire_recv_sealed(void *sock, int flags, bool router, bool verify,
                         zps_wire_seal_find_fn *find, void *arg, zps_message_t *msg)
{
    zmq_msg_t frame;
    int first = recv_first(sock, flags, router, msg, &frame);
    if (first)
        return first;
    if (!router && zmq_msg_size(&frame) == ZPS_SEAL_UNKNOWN_BYTES &&
        memcmp(zmq_msg_data(&frame), ZPS_SEAL_UNKNOWN, 4) == 0) {
        /* The server's notice that it knows no session of this id. */
        msg->seal_unknown = true;
        memcpy(msg->seal_id, (char *)zmq_msg_data(&frame) + 4, ZPS_SEAL_ID_BYTES);
        zmq_msg_close(&frame);
        drain_rest(sock, msg);
        return ZPS_ESEAL;
    }

    /* `frame` is the seal frame: the session is found before any other
     * frame is read, and nothing is decoded before every tag verifies. */
    unsigned char seal_frame[ZPS_SEAL_FRAME_BYTES];
    uint64_t counter;
    unsigned frames;
    size_t chunks;
    int parsed = zps_seal_frame_parse(zmq_msg_data(&frame), zmq_msg_size(&frame), msg->seal_id,
                                      &counter, &frames, &chunks);
    if (parsed == 0)
        memcpy(seal_frame, zmq_msg_data(&frame), sizeof(seal_frame));
    zmq_msg_close(&frame);
    struct zps_seal *seal = parsed == 0 ? find(arg, msg->seal_id, &msg->peer) : NULL;
    if (!seal) {
        msg->seal_unknown = parsed == 0;
        drain_rest(sock, msg);
        return ZPS_ESEAL;
    }

    zmq_msg_t head, tags;
    zmq_msg_init(&head);
    zmq_msg_init(&tags);
    if (!has_more(sock) || zmq_msg_recv(&head, sock, 0) < 0) {
        zmq_msg_close(&head);
        zmq_msg_close(&tags);
        drain_rest(sock, msg);
        return ZPS_ESEAL;
    }
    count_frame(msg, zmq_msg_size(&head));
    bool have_tags = false;
    if (has_more(sock)) {
        zmq_msg_init(&msg->payload);
        if (zmq_msg_recv(&msg->payload, sock, 0) < 0) {
            zmq_msg_close(&msg->payload);
            zmq_msg_close(&head);
            zmq_msg_close(&tags);
            return ZPS_ESOCKET;
        }
        msg->has_payload = true;
        count_frame(msg, zmq_msg_size(&msg->payload));
        if (has_more(sock)) {
            if (zmq_msg_recv(&tags, sock, 0) < 0) {
                /* ZPS_ESOCKET: the caller closes nothing. */
                zmq_msg_close(&msg->payload);
                msg->has_payload = false;
                zmq_msg_close(&head);
                zmq_msg_close(&tags);
                return ZPS_ESOCKET;
            }
            have_tags = true;
            count_frame(msg, zmq_msg_size(&tags));
        }
    }
    int rc = 0;
    if (drain_rest(sock, msg) > 0 || frames != (msg->has_payload ? 3u : 2u) ||
        msg->has_payload != have_tags)
        rc = ZPS_ESEAL;
    else if (msg->has_payload && realign(&msg->payload) != 0)
        rc = ZPS_ENOMEM;
    if (rc == 0)
        rc = zps_seal_open(seal, seal_frame, zmq_msg_data(&head), zmq_msg_size(&head),
                           msg->has_payload, msg->has_payload ? zmq_msg_data(&msg->payload) : NULL,
                           msg->has_payload ? zmq_msg_size(&msg->payload) : 0, zmq_msg_data(&tags),
                           zmq_msg_size(&tags));
    zmq_msg_close(&tags);
    if (rc == 0)
        rc = decode_header(msg, zmq_msg_data(&head), zmq_msg_size(&head));
    zmq_msg_close(&head);
    (void)chunks; /* checked against the payload by zps_seal_open */
    return rc ? rc : judge(msg, verify);
}

/* Sends [peer] seal frame, header, [payload, tags], sealing the header and
 * encrypting `src` (payload_len bytes, when hdr wants a payload) into a
 * message of its own. */
static int send_sealed(void *sock, const zps_peer_t *peer, const zps_header_t *hdr, const void *src,
                       size_t payload_len, struct zps_seal *seal, int flags)
{
    if (hdr->type > ZPS_MSG_TYPE_MAX)
        return ZPS_EINVAL;
    bool more = zps_wire_wants_payload(hdr);
    Zps__Header pb = ZPS__HEADER__INIT;
    header_to_pb(&pb, hdr);
    size_t chunks = zps_seal_chunks(more, payload_len);
    if (chunks > ZPS_SEAL_MAX_CHUNKS)
        return ZPS_EINVAL;
    zmq_msg_t head, body, tags, sf;
    size_t n = zps__header__get_packed_size(&pb);
    if (zmq_msg_init_size(&head, n) != 0)
        return ZPS_ENOMEM;
    zps__header__pack(&pb, zmq_msg_data(&head));
    if (zmq_msg_init_size(&body, more ? payload_len : 0) != 0) {
        zmq_msg_close(&head);
        return ZPS_ENOMEM;
    }
    if (zmq_msg_init_size(&tags, chunks * ZPS_SEAL_TAG_BYTES) != 0) {
        zmq_msg_close(&head);
        zmq_msg_close(&body);
        return ZPS_ENOMEM;
    }
    if (zmq_msg_init_size(&sf, ZPS_SEAL_FRAME_BYTES) != 0) {
        zmq_msg_close(&head);
        zmq_msg_close(&body);
        zmq_msg_close(&tags);
        return ZPS_ENOMEM;
    }
    zps_seal_message(seal, zmq_msg_data(&sf), zmq_msg_data(&head), n, more, zmq_msg_data(&body),
                     src, more ? payload_len : 0, zmq_msg_data(&tags));
    int rc = 0;
    if (peer) {
        zmq_msg_t m;
        if (zmq_msg_init_size(&m, peer->len) != 0) {
            rc = ZPS_ENOMEM;
        } else {
            memcpy(zmq_msg_data(&m), peer->id, peer->len);
            rc = send_frame(sock, &m, flags | ZMQ_SNDMORE);
            /* Once the first frame is in, the rest cannot block. */
            flags &= ~ZMQ_DONTWAIT;
        }
    }
    if (rc == 0)
        rc = send_frame(sock, &sf, flags | ZMQ_SNDMORE);
    else
        zmq_msg_close(&sf);
    if (rc == 0)
        rc = send_frame(sock, &head, (flags & ~ZMQ_DONTWAIT) | (more ? ZMQ_SNDMORE : 0));
    else
        zmq_msg_close(&head);
    if (rc == 0 && more)
        rc = send_frame(sock, &body, (flags & ~ZMQ_DONTWAIT) | ZMQ_SNDMORE);
    else
        zmq_msg_close(&body);
    if (rc == 0 && more)
        rc = send_frame(sock, &tags, flags & ~ZMQ_DONTWAIT);
    else
        zmq_msg_close(&tags);
    return rc;
}

int zps_wire_send_sealed(void *sock, const zps_peer_t *peer, zps_header_t *hdr, const void *payload,
                         size_t count, bool summed, struct zps_seal *seal, int flags)
{
    size_t bytes = 0;
    if (zps_wire_wants_payload(hdr)) {
        bytes = count * zps_wire_elem_bytes(hdr);
        hdr->length = count;
        if (!summed)
            hdr->checksum = zps_crc32c(0, payload, bytes);
    } else {
        hdr->checksum = 0;
    }
    return send_sealed(sock, peer, hdr, payload, bytes, seal, flags);
}

int zps_wire_send_seal_unknown(void *sock, const zps_peer_t *peer, const unsigned char *id)
{
    zmq_msg_t m;
    if (zmq_msg_init_size(&m, peer->len) != 0)
        return ZPS_ENOMEM;
    memcpy(zmq_msg_data(&m), peer->id, peer->len);
    int rc = send_frame(sock, &m, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    if (rc)
        return rc;
    if (zmq_msg_init_size(&m, ZPS_SEAL_UNKNOWN_BYTES) != 0)
        return ZPS_ENOMEM;
    memcpy(zmq_msg_data(&m), ZPS_SEAL_UNKNOWN, 4);
    memcpy((char *)zmq_msg_data(&m) + 4, id, ZPS_SEAL_ID_BYTES);
    return send_frame(sock, &m, 0);
}

int zps_wire_send_msg_sealed(void *sock, const zps_peer_t *peer, zps_header_t *hdr,
                             zmq_msg_t *payload, struct zps_seal *seal, int flags)
{
    size_t bytes = 0;
    if (zps_wire_wants_payload(hdr)) {
        bytes = zmq_msg_size(payload);
        hdr->length = bytes / zps_wire_elem_bytes(hdr);
    } else {
        hdr->checksum = 0;
    }
    int rc = send_sealed(sock, peer, hdr, zmq_msg_data(payload), bytes, seal, flags);
    zmq_msg_close(payload);
    return rc;
}
