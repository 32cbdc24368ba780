/*
 * shm.c - the shard's shared-memory segment and its sessions; see shm.h.
 */
#include "shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "error.h"
#include "log.h"
#include "shm_guard.h"
#include "wire.h"

#define PAGE 4096u

static uint64_t round_page(uint64_t n)
{
    return (n + PAGE - 1) / PAGE * PAGE;
}

/*
 * Removes the segments of servers that died without removing theirs
 * (SIGKILL, a crash): /dev/shm/zps-PID-* of this user whose PID no longer
 * exists. A PID taken since by another process keeps its segment.
 */
static void sweep_stale(void)
{
    DIR *dir = opendir("/dev/shm");
    if (!dir)
        return;
    unsigned removed = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        long pid;
        unsigned a, b;
        char tail;
        if (sscanf(e->d_name, "zps-%ld-%u-%u%c", &pid, &a, &b, &tail) != 3 || pid <= 0 ||
            pid == (long)getpid())
            continue;
        char path[300];
        struct stat st;
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        if (stat(path, &st) != 0 || st.st_uid != geteuid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        snprintf(path, sizeof(path), "/%s", e->d_name);
        if (shm_unlink(path) == 0)
            removed++;
    }
    closedir(dir);
    if (removed)
        zps_info("removed %u shared-memory segment(s) of servers no longer running", removed);
}

int zps_shm_create(zps_shm_t *s, uint64_t len, uint32_t workers, uint32_t shard_index, char *why,
                   size_t why_size)
{
    static unsigned serial;
    if (len == 0 || workers == 0 || len > (UINT64_MAX / 4) / ((uint64_t)2 * workers + 2)) {
        zps_set_reason(why, why_size, "no shared memory for a shard of %llu elements",
                       (unsigned long long)len);
        return ZPS_EINVAL;
    }
    if (sodium_init() < 0) {
        zps_set_reason(why, why_size, "libsodium cannot start: no random token");
        return ZPS_EIO;
    }
    sweep_stale();
    uint32_t nbufs = workers + 2;
    uint64_t stride = round_page(len * sizeof(float));
    uint64_t size = PAGE + stride * ((uint64_t)nbufs + workers);
    zps_shm_buf_t *bufs = calloc(nbufs, sizeof(*bufs));
    zps_shm_session_t *sessions = calloc(workers, sizeof(*sessions));
    zps_shm_copy_t *copies = calloc((size_t)workers * ZPS_SHM_COPIES, sizeof(*copies));
    bool *slot_reserved = calloc(workers, sizeof(*slot_reserved));
    if (!bufs || !sessions || !copies || !slot_reserved) {
        free(bufs);
        free(sessions);
        free(copies);
        free(slot_reserved);
        return ZPS_ENOMEM;
    }
    snprintf(s->name, sizeof(s->name), "/zps-%ld-%u-%u", (long)getpid(), shard_index, serial++);
    int fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    void *base = MAP_FAILED;
    int err = errno;
    const char *what = "cannot create shared memory";
    /* Only the first page is allocated now (the regions are, as they are
     * first used): a size set by ftruncate reserves nothing. */
    if (fd >= 0 && ftruncate(fd, (off_t)size) != 0)
        err = errno;
    else if (fd >= 0 && (err = posix_fallocate(fd, 0, PAGE)) != 0)
        what = "no room for shared memory";
    else if (fd >= 0 && (base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
                            MAP_FAILED)
        err = errno;
    if (base != MAP_FAILED && zps_shm_guard_add(base, size) != 0) {
        munmap(base, size);
        base = MAP_FAILED;
        err = EMFILE;
        what = "too many shared mappings in this process for";
    }
    if (base == MAP_FAILED) {
        zps_set_reason(why, why_size, "%s %s (%llu bytes): %s", what, s->name,
                       (unsigned long long)size, strerror(err));
        if (fd >= 0) {
            close(fd);
            shm_unlink(s->name);
        }
        s->name[0] = '\0';
        free(bufs);
        free(sessions);
        free(copies);
        free(slot_reserved);
        return ZPS_EIO;
    }
    zps_shm_layout_t *l = &s->layout;
    memset(l, 0, sizeof(*l));
    memcpy(l->magic, ZPS_SHM_MAGIC, sizeof(l->magic));
    randombytes_buf(l->token, sizeof(l->token));
    l->len = len;
    l->workers = workers;
    l->nbufs = nbufs;
    l->stride = stride;
    l->buf_offset = PAGE;
    l->slot_offset = PAGE + stride * nbufs;
    l->size = size;
    memcpy(base, l, sizeof(*l));
    for (uint32_t i = 0; i < workers; i++) {
        sessions[i].fd = -1;
        sessions[i].lent = -1;
    }
    s->fd = fd;
    s->base = base;
    s->bufs = bufs;
    s->slot_reserved = slot_reserved;
    s->sessions = sessions;
    s->copies = copies;
    s->nsessions = workers;
    return 0;
}

void zps_shm_destroy(zps_shm_t *s)
{
    if (s->base) {
        zps_shm_guard_remove(s->base);
        munmap(s->base, s->layout.size);
        close(s->fd);
        if (!s->lost)
            shm_unlink(s->name);
    }
    free(s->bufs);
    free(s->slot_reserved);
    free(s->sessions);
    /* The messages built on the copies are closed by now (the daemon's
     * buffered pushes go first). */
    for (uint32_t i = 0; s->copies && i < s->nsessions * ZPS_SHM_COPIES; i++)
        free(s->copies[i].data);
    free(s->copies);
    memset(s, 0, sizeof(*s));
}

uint64_t zps_shm_bytes(const zps_shm_t *s)
{
    return s->base ? s->layout.size : 0;
}

void zps_shm_touched(const zps_shm_t *s, uint32_t *buffers, uint32_t *copies)
{
    uint32_t b = 0, c = 0;
    for (uint32_t i = 0; s->base && i < s->layout.nbufs; i++)
        b += s->bufs[i].used;
    for (uint32_t i = 0; s->copies && i < s->nsessions * ZPS_SHM_COPIES; i++)
        c += s->copies[i].data != NULL;
    *buffers = b;
    *copies = c;
}

static void release_buf(zps_shm_t *s, zps_shm_session_t *x)
{
    if (x->lent >= 0 && s->bufs[x->lent].lent > 0)
        s->bufs[x->lent].lent--;
    x->lent = -1;
}

static void end_session(zps_shm_t *s, zps_shm_session_t *x)
{
    release_buf(s, x);
    x->fd = -1;
    s->ended++;
    s->active--;
}

/*
 * Whether the segment was cut short under us (shm.h): then, once, every
 * session ends, its name goes, and it serves no one for the rest of the run.
 */
static bool lost(zps_shm_t *s)
{
    if (s->lost || !s->base || !zps_shm_guard_lost(s->base))
        return s->lost;
    s->lost = true;
    for (uint32_t i = 0; i < s->nsessions; i++)
        if (s->sessions[i].fd >= 0)
            end_session(s, &s->sessions[i]);
    for (uint32_t i = 0; i < s->layout.nbufs; i++)
        s->bufs[i].valid = false;
    shm_unlink(s->name);
    zps_warn("shared memory %s was cut short by another process: its sessions end, and the "
             "workers on this host go on over the socket",
             s->name);
    return true;
}

/*
 * Allocates the pages of region `index` at `offset` before anything touches
 * them: 0, or the errno of a full /dev/shm (logged once).
 */
static int reserve_region(zps_shm_t *s, uint64_t offset, uint32_t index, const char *what)
{
    int err = posix_fallocate(s->fd, (off_t)(offset + (uint64_t)index * s->layout.stride),
                              (off_t)s->layout.stride);
    if (err && !s->no_room_logged) {
        s->no_room_logged = true;
        zps_warn("shared memory %s: no room for %s (%llu bytes): %s; what it would have carried "
                 "goes over the socket",
                 s->name, what, (unsigned long long)s->layout.stride, strerror(err));
    }
    return err;
}

zps_shm_session_t *zps_shm_find(zps_shm_t *s, int fd)
{
    if (lost(s))
        return NULL;
    for (uint32_t i = 0; i < s->nsessions && fd >= 0; i++)
        if (s->sessions[i].fd == fd)
            return &s->sessions[i];
    return NULL;
}

zps_shm_session_t *zps_shm_grant(zps_shm_t *s, int fd, uint32_t rank, char *why, size_t why_size)
{
    if (!s->base || fd < 0 || rank >= s->nsessions) {
        zps_set_reason(why, why_size, "no shared-memory slot for worker %u", rank);
        return NULL;
    }
    if (lost(s)) {
        zps_set_reason(why, why_size,
                       "this shard's shared memory was cut short by another process: none for "
                       "the rest of the run");
        return NULL;
    }
    zps_shm_session_t *mine = zps_shm_find(s, fd);
    if (mine)
        end_session(s, mine);
    /* Sessions are kept by rank: the slot is the rank's. */
    zps_shm_session_t *x = &s->sessions[rank];
    if (x->fd >= 0) {
        zps_set_reason(why, why_size,
                       "worker %u's shared-memory slot is held by another connection", rank);
        return NULL;
    }
    if (!s->slot_reserved[rank]) {
        int err = reserve_region(s, s->layout.slot_offset, rank, "a worker's slot");
        if (err) {
            zps_set_reason(why, why_size, "no room in /dev/shm for worker %u's slot: %s", rank,
                           strerror(err));
            return NULL;
        }
        s->slot_reserved[rank] = true;
    }
    x->fd = fd;
    x->rank = rank;
    x->lent = -1;
    s->granted++;
    s->active++;
    return x;
}

void zps_shm_end_fd(zps_shm_t *s, int fd)
{
    zps_shm_session_t *x = zps_shm_find(s, fd);
    if (x)
        end_session(s, x);
}

void zps_shm_release(zps_shm_t *s, zps_shm_session_t *x)
{
    release_buf(s, x);
}

static unsigned char *region(const zps_shm_t *s, uint64_t offset, uint32_t index)
{
    return (unsigned char *)s->base + offset + (uint64_t)index * s->layout.stride;
}

/* ZeroMQ's free function for a message on a private copy: called when it is closed. */
static void copy_released(void *data, void *hint)
{
    (void)data;
    ((zps_shm_copy_t *)hint)->busy = false;
}

/* A message of len floats on a free private copy of x's rank, or a new one. */
static int copy_msg(zps_shm_t *s, const zps_shm_session_t *x, uint64_t len, zmq_msg_t *out)
{
    size_t bytes = len * sizeof(float);
    for (int i = 0; i < ZPS_SHM_COPIES; i++) {
        zps_shm_copy_t *c = &s->copies[(size_t)x->rank * ZPS_SHM_COPIES + (size_t)i];
        if (c->busy)
            continue;
        if (!c->data)
            c->data = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (c->data && zmq_msg_init_data(out, c->data, bytes, copy_released, c) == 0) {
            c->busy = true;
            return 0;
        }
    }
    return zmq_msg_init_size(out, bytes) == 0 ? 0 : ZPS_ENOMEM;
}

int zps_shm_take_push(zps_shm_t *s, const zps_shm_session_t *x, uint64_t len, uint32_t crc,
                      zmq_msg_t *out, size_t *first_bad, float *abs_max)
{
    if (len != s->layout.len)
        return ZPS_ELENGTH;
    if (copy_msg(s, x, len, out) != 0)
        return ZPS_ENOMEM;
    const float *slot = (const float *)region(s, s->layout.slot_offset, x->rank);
    /* The copy is what is checked and used: the slot may change under us. */
    uint32_t got = zps_crc_copy_scan_max(zmq_msg_data(out), slot, len, first_bad, abs_max);
    if (lost(s) || got != crc) {
        zmq_msg_close(out);
        return ZPS_ECHECKSUM;
    }
    s->pushes++;
    return 0;
}

/* Whether unlent buffer b is a better one to write than unlent buffer p (free_buf). */
static bool better_to_write(const zps_shm_buf_t *b, const zps_shm_buf_t *p)
{
    /* Written before (its pages are resident already) over never written. */
    if (b->used != p->used)
        return b->used;
    if (!b->used)
        return false;
    /* Among written ones: an empty one (a refused step's), then the oldest version. */
    if (b->valid != p->valid)
        return !b->valid;
    return b->valid && b->version < p->version;
}

/*
 * A buffer nobody reads, to write (better_to_write's choice), or -1 when
 * all are lent. A buffer never written is taken only when every written one
 * is lent, so a shard's resident share of the segment is the buffers it
 * needs at once, not all workers + 2: under BSP every session has let go of
 * version t by the step that writes t + 1, and that step writes over it.
 */
static int free_buf(zps_shm_t *s)
{
    int pick = -1;
    for (uint32_t i = 0; i < s->layout.nbufs; i++) {
        const zps_shm_buf_t *b = &s->bufs[i];
        if (b->lent == 0 && !b->no_room && (pick < 0 || better_to_write(b, &s->bufs[pick])))
            pick = (int)i;
    }
    /* Its pages, before the first write (shm.h); without them it is never used. */
    if (pick >= 0 && !s->bufs[pick].used &&
        reserve_region(s, s->layout.buf_offset, (uint32_t)pick, "a parameter buffer") != 0) {
        s->bufs[pick].no_room = true;
        return -1;
    }
    return pick;
}

float *zps_shm_reserve(zps_shm_t *s, int *index)
{
    if (!s->base || lost(s) || s->active == 0)
        return NULL;
    int pick = free_buf(s);
    if (pick < 0)
        return NULL;
    s->bufs[pick].valid = false;
    s->bufs[pick].used = true;
    *index = pick;
    return (float *)region(s, s->layout.buf_offset, (uint32_t)pick);
}

void zps_shm_fill(zps_shm_t *s, int index, uint64_t version, uint32_t crc)
{
    zps_shm_buf_t *b = &s->bufs[index];
    b->version = version;
    b->crc = crc;
    b->valid = true;
}

int zps_shm_lend(zps_shm_t *s, zps_shm_session_t *x, const float *params, uint64_t len,
                 uint64_t version, uint32_t *buf, uint32_t *crc)
{
    if (len != s->layout.len)
        return ZPS_ELENGTH;
    release_buf(s, x);
    if (lost(s))
        return ZPS_EBUSY;
    int pick = -1;
    for (uint32_t i = 0; i < s->layout.nbufs; i++) {
        if (s->bufs[i].valid && s->bufs[i].version == version) {
            pick = (int)i;
            break;
        }
    }
    if (pick < 0) {
        pick = free_buf(s);
        if (pick < 0)
            return ZPS_EBUSY;
        zps_shm_buf_t *b = &s->bufs[pick];
        b->valid = false;
        b->used = true;
        b->crc = zps_crc32c_copy(0, region(s, s->layout.buf_offset, (uint32_t)pick), params,
                                 len * sizeof(float));
        if (lost(s)) /* cut short while it was written */
            return ZPS_EBUSY;
        b->version = version;
        b->valid = true;
    }
    s->bufs[pick].lent++;
    x->lent = pick;
    *buf = (uint32_t)pick;
    *crc = s->bufs[pick].crc;
    s->replies++;
    return 0;
}
