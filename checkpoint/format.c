/*
 * format.c - the shard checkpoint file format: encoding a zps_ckpt_t into
 * the bytes docs/checkpoint.md specifies, and reading, verifying and
 * decoding them; see checkpoint.h.
 *
 * Encoding streams every section through one buffer, to little-endian and
 * checksumming as it goes, then fills in the header and the section table
 * at the front. Reading makes its checks in the order they become possible:
 * magic, format version, the header's checksum, the table's checksum and
 * layout, then for each section its length, its bytes, its checksum, and
 * whether its contents are a valid shard state. No field is used before its
 * checksum has been verified, and no allocation is larger than the file.
 *
 * Format version 2 is version 1 with an optional last section, the shared
 * data assignment (consistency/assign.h); this file writes version 2 and
 * reads both, a version-1 file as one without that section.
 *
 * Not here: file names, the temporary file, rename and sync, and finding or
 * pruning a shard's files (dir.c); what the server puts into a checkpoint
 * and how it restores one (server/); printing one for people
 * (tool/ckpt_inspect.c).
 */
#include "checkpoint.h"
#include "ckpt_io.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "error.h"
#include "wire.h"

/* Fixed sizes, in bytes (docs/checkpoint.md): the same in format versions 1
 * and 2, which only adds the assignment section. */
#define HEADER_BYTES 64
#define HEADER_CRC_AT 60
#define ENTRY_BYTES 24
#define SHARD_BYTES 40
#define OPT_FIXED_BYTES 112
#define WORKERS_FIXED_BYTES 16
#define WORKER_BYTES 17 /* pushed u64, dropped u64, live u8 */
/* examples u64, batch u32, epochs u32, next u64, nqueue u64, workers u32 */
#define ASSIGN_FIXED_BYTES 36
/* Per worker: nheld u32, finished u8, 3 zero bytes, held u64 x ZPS_ASSIGN_MAX_HELD. */
#define ASSIGN_WORKER_BYTES (8 + 8 * ZPS_ASSIGN_MAX_HELD)

/* The I/O buffer: sections stream through it in pieces of this size. */
#define CHUNK_BYTES (256u * 1024u)

/* ---- little-endian encoding ---- */

static void put_u32(uint8_t *p, uint32_t x)
{
    p[0] = (uint8_t)x;
    p[1] = (uint8_t)(x >> 8);
    p[2] = (uint8_t)(x >> 16);
    p[3] = (uint8_t)(x >> 24);
}

static void put_u64(uint8_t *p, uint64_t x)
{
    put_u32(p, (uint32_t)x);
    put_u32(p + 4, (uint32_t)(x >> 32));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* IEEE-754 values travel as their bit patterns: exact, NaN payloads included. */
static void put_f64(uint8_t *p, double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof(u));
    put_u64(p, u);
}

static double get_f64(const uint8_t *p)
{
    uint64_t u = get_u64(p);
    double x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

static void put_f32(uint8_t *p, float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    put_u32(p, u);
}

static float get_f32(const uint8_t *p)
{
    uint32_t u = get_u32(p);
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

/* ---- messages ---- */

static const char *section_base_name(uint32_t id)
{
    switch (id) {
    case ZPS_CKPT_SEC_SHARD:
        return "shard";
    case ZPS_CKPT_SEC_OPTIMIZER:
        return "optimizer";
    case ZPS_CKPT_SEC_WORKERS:
        return "workers";
    case ZPS_CKPT_SEC_PARAMS:
        return "params";
    case ZPS_CKPT_SEC_ASSIGN:
        return "assignment";
    }
    return "?";
}

/* "optimizer m" once the optimizer section has named state i, else "optimizer state i". */
static void section_name(uint32_t id, const char *state_name, char *buf, size_t size)
{
    if (id >= ZPS_CKPT_SEC_STATE) {
        if (state_name && state_name[0])
            snprintf(buf, size, "optimizer %s", state_name);
        else
            snprintf(buf, size, "optimizer state %u", (unsigned)(id - ZPS_CKPT_SEC_STATE));
    } else {
        snprintf(buf, size, "%s", section_base_name(id));
    }
}

/* "nan", "inf" or "-inf": how a non-finite value is named in messages. */
static const char *nonfinite_name(float x)
{
    return isnan(x) ? "nan" : x < 0 ? "-inf" : "inf";
}

/* ---- what makes a shard state valid (shared by the writer and the reader) ---- */

static int check_shard_fields(const zps_ckpt_t *c, char *why, size_t why_size)
{
    if (c->shard_count < 1 || c->shard_index >= c->shard_count) {
        zps_set_reason(why, why_size, "shard %" PRIu32 "/%" PRIu32 " does not exist (need I < S)",
                       c->shard_index, c->shard_count);
        return -1;
    }
    if (c->range.lo > c->range.hi || c->range.hi > c->total) {
        zps_set_reason(why, why_size,
                       "range [%" PRIu64 ", %" PRIu64 ") does not fit a model of %" PRIu64
                       " elements",
                       c->range.lo, c->range.hi, c->total);
        return -1;
    }
    /* Every array of the shard is [hi - lo] floats; its byte size must fit. */
    if (zps_range_len(c->range) > (SIZE_MAX - CHUNK_BYTES) / sizeof(float) / 4) {
        zps_set_reason(why, why_size,
                       "range [%" PRIu64 ", %" PRIu64 ") is too large for this machine",
                       c->range.lo, c->range.hi);
        return -1;
    }
    return 0;
}

/*
 * The configuration must pass zps_opt_config_check, and the state arrays
 * must be exactly those this build's optimizer keeps for it, by count and
 * name: restoring them into the wrong slots would be silent corruption.
 */
static int check_opt_fields(const zps_ckpt_t *c, char *why, size_t why_size)
{
    char reason[200];
    if (zps_opt_config_check(&c->opt, reason, sizeof(reason)) != 0) {
        zps_set_reason(why, why_size, "invalid optimizer configuration: %s", reason);
        return -1;
    }
    zps_optimizer_t *opt = NULL;
    int rc = zps_optimizer_new(&c->opt, 0, &opt);
    if (rc != 0) {
        zps_set_reason(why, why_size, "cannot build the optimizer: %s", zps_strerror(rc));
        return rc == ZPS_ENOMEM ? ZPS_ENOMEM : -1;
    }
    int result = 0;
    size_t want = zps_optimizer_state_count(opt);
    if (c->nstate != want) {
        zps_set_reason(why, why_size, "optimizer %s keeps %zu state arrays, not %" PRIu32,
                       zps_opt_name(&c->opt), want, c->nstate);
        result = -1;
    }
    for (size_t i = 0; result == 0 && i < want; i++) {
        const char *name = NULL;
        zps_optimizer_state(opt, i, &name);
        if (strnlen(c->state_names[i], ZPS_CKPT_NAME_SIZE) == ZPS_CKPT_NAME_SIZE ||
            strcmp(c->state_names[i], name) != 0) {
            zps_set_reason(why, why_size, "optimizer %s's state array %zu is '%s', not '%.*s'",
                           zps_opt_name(&c->opt), i, name, ZPS_CKPT_NAME_SIZE, c->state_names[i]);
            result = -1;
        }
    }
    zps_optimizer_free(opt);
    return result;
}

/* The consistency configuration must be one the consistency controller accepts. */
static int check_workers_fields(const zps_ckpt_t *c, char *why, size_t why_size)
{
    zps_consistency_config_t cfg = {
        .mode = c->mode,
        .workers = c->workers,
        .ssp_bound = c->ssp_bound,
        .backup = c->backup,
        .max_pending = 1,
    };
    char reason[200];
    zps_consistency_t *st = NULL;
    int rc = zps_consistency_new(&cfg, &st, reason, sizeof(reason));
    zps_consistency_free(st);
    if (rc == ZPS_ENOMEM) {
        zps_set_reason(why, why_size, "out of memory");
        return ZPS_ENOMEM;
    }
    if (rc != 0) {
        zps_set_reason(why, why_size, "invalid consistency configuration: %s", reason);
        return -1;
    }
    return 0;
}

/*
 * Are the clocks of `c` ones a shard can reach (docs/checkpoint.md, "What a
 * reader checks")? Every count below ZPS_CKPT_CLOCK_LIMIT; under BSP no
 * worker's next clock past the version (the writer clamps it there); under
 * SSP and ASP no more steps than pushes (each step applied one push of a
 * clock below its worker's next). A file whose CRCs are valid but whose
 * clocks break these would wrap a worker's clock, or stall every worker
 * behind one that can never catch up. Returns 0, or -1 with the reason.
 */
static int check_clocks(const zps_ckpt_t *c, char *why, size_t why_size)
{
    if (c->version >= ZPS_CKPT_CLOCK_LIMIT || c->opt_steps >= ZPS_CKPT_CLOCK_LIMIT) {
        zps_set_reason(why, why_size,
                       "version %" PRIu64 ", optimizer step %" PRIu64 ": at most 2^53 - 1",
                       c->version, c->opt_steps);
        return -1;
    }
    uint64_t sum = 0;
    for (uint32_t w = 0; w < c->workers; w++) {
        if (c->pushed[w] >= ZPS_CKPT_CLOCK_LIMIT || c->dropped[w] >= ZPS_CKPT_CLOCK_LIMIT) {
            zps_set_reason(why, why_size,
                           "worker %" PRIu32 "'s next clock %" PRIu64 ", dropped %" PRIu64
                           ": at most 2^53 - 1",
                           w, c->pushed[w], c->dropped[w]);
            return -1;
        }
        if (c->mode == ZPS_MODE_BSP && c->pushed[w] > c->version) {
            zps_set_reason(why, why_size,
                           "worker %" PRIu32 "'s next clock %" PRIu64
                           " is past the version %" PRIu64 " (under BSP it is at most the version)",
                           w, c->pushed[w], c->version);
            return -1;
        }
        sum += c->pushed[w]; /* W < 2^32 terms below 2^53: no overflow */
    }
    if (c->mode != ZPS_MODE_BSP && c->version > sum) {
        zps_set_reason(why, why_size,
                       "version %" PRIu64 " is more steps than the %" PRIu64
                       " pushes the workers' next clocks account for",
                       c->version, sum);
        return -1;
    }
    return 0;
}

/*
 * E * B of plan p into *batches, 0 without a plan (examples 0), after the
 * checks of zps_assign_set_plan that the section's size depends on.
 * Returns 0, or -1 with the reason.
 */
static int assign_batches(const zps_assign_plan_t *p, uint64_t *batches, char *why, size_t why_size)
{
    *batches = 0;
    if (p->examples == 0)
        return 0;
    if (p->batch == 0 || p->epochs == 0) {
        zps_set_reason(why, why_size,
                       "data assignment: a plan of %" PRIu64 " examples in batches of %" PRIu32
                       " for %" PRIu32 " epochs (batch and epochs must be >= 1)",
                       p->examples, p->batch, p->epochs);
        return -1;
    }
    uint64_t per_epoch = (p->examples - 1) / p->batch + 1;
    if (per_epoch > ZPS_ASSIGN_MAX_BATCHES / p->epochs) {
        zps_set_reason(why, why_size,
                       "data assignment: a plan of %" PRIu64 " batches per epoch for %" PRIu32
                       " epochs is more than 2^27 batches",
                       per_epoch, p->epochs);
        return -1;
    }
    *batches = per_epoch * p->epochs;
    return 0;
}

/*
 * The assignment's counts, which its size follows from: for the
 * checkpoint's W workers, a plan zps_assign_set_plan takes (E * B into
 * *batches), and at most ZPS_ASSIGN_MAX_HELD leases queued per worker
 * (leases held and queued together never exceed that, assign.c). Returns 0,
 * or -1 with the reason.
 */
static int check_assign_counts(uint32_t W, const zps_assign_plan_t *plan, uint32_t workers,
                               uint64_t nqueue, uint64_t *batches, char *why, size_t why_size)
{
    if (workers == 0 || workers != W) {
        zps_set_reason(why, why_size,
                       "data assignment for %" PRIu32 " workers; the checkpoint has %" PRIu32,
                       workers, W);
        return -1;
    }
    if (assign_batches(plan, batches, why, why_size) != 0)
        return -1;
    uint64_t cap = (uint64_t)ZPS_ASSIGN_MAX_HELD * workers;
    if (nqueue > cap) {
        zps_set_reason(why, why_size,
                       "data assignment: %" PRIu64 " leases queued, at most %" PRIu64, nqueue, cap);
        return -1;
    }
    return 0;
}

/*
 * Is s, with finished[W], an assignment zps_assign_restore accepts for W
 * workers? Its counts as check_assign_counts wants them; without a plan
 * nothing set but the worker count; with one, the arrays there, at most
 * ZPS_ASSIGN_MAX_HELD leases per worker, and then restore's own checks on a
 * fresh assignment (the cursor within the run, every lease below it, not
 * complete and held once, no completion past the cursor), whose reason is
 * the message. Returns 0, -1 with the reason, or ZPS_ENOMEM.
 */
static int check_assign_fields(uint32_t W, const zps_assign_state_t *s, const bool *finished,
                               char *why, size_t why_size)
{
    uint64_t batches;
    if (check_assign_counts(W, &s->plan, s->workers, s->nqueue, &batches, why, why_size) != 0)
        return -1;
    if (finished == NULL) {
        zps_set_reason(why, why_size, "data assignment: finished must hold %" PRIu32 " entries", W);
        return -1;
    }
    if (s->plan.examples == 0) {
        if (s->plan.batch != 0 || s->plan.epochs != 0 || s->next != 0 || s->nqueue != 0) {
            zps_set_reason(why, why_size,
                           "data assignment without a plan (0 examples) has batch %" PRIu32
                           ", epochs %" PRIu32 ", next %" PRIu64
                           ", %zu leases queued (all must be 0)",
                           s->plan.batch, s->plan.epochs, s->next, s->nqueue);
            return -1;
        }
        for (uint32_t w = 0; s->nheld && w < W; w++) {
            if (s->nheld[w] != 0) {
                zps_set_reason(why, why_size,
                               "data assignment without a plan: worker %" PRIu32 " holds %" PRIu32
                               " leases",
                               w, s->nheld[w]);
                return -1;
            }
        }
        return 0;
    }
    if ((s->nqueue > 0 && s->queue == NULL) || s->held == NULL || s->nheld == NULL ||
        s->done == NULL) {
        zps_set_reason(why, why_size,
                       "data assignment: a plan needs its queue, held, nheld and done arrays");
        return -1;
    }
    for (uint32_t w = 0; w < W; w++) {
        if (s->nheld[w] > ZPS_ASSIGN_MAX_HELD) {
            zps_set_reason(why, why_size,
                           "data assignment: worker %" PRIu32 " holds %" PRIu32
                           " leases, at most %d",
                           w, s->nheld[w], ZPS_ASSIGN_MAX_HELD);
            return -1;
        }
    }
    zps_assign_t *a = NULL;
    int rc = zps_assign_new(W, &a);
    if (rc == 0)
        rc = zps_assign_restore(a, s, why, why_size);
    zps_assign_free(a);
    if (rc == ZPS_ENOMEM) {
        zps_set_reason(why, why_size, "out of memory");
        return ZPS_ENOMEM;
    }
    return rc == 0 ? 0 : -1;
}

/* ---- encoding ---- */

int zps_ckpt_write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, off_t off)
{
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, off);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

/*
 * A stream of bytes into the file through one buffer. The CRC of
 * the current section is computed as bytes are appended; the first write
 * error is kept (errno in err) and later appends stop at once, so a full disk
 * is reported without encoding the rest of a large array.
 */
typedef struct wstream {
    int fd;
    uint8_t *buf; /* [CHUNK_BYTES] */
    size_t fill;
    uint64_t pos; /* bytes appended since the stream began */
    uint32_t crc; /* of the current section so far */
    int err;      /* errno of the first failed write, 0 if none */
} wstream_t;

static void ws_flush(wstream_t *ws)
{
    if (ws->err == 0 && ws->fill > 0 && zps_ckpt_write_all(ws->fd, ws->buf, ws->fill) != 0)
        ws->err = errno ? errno : EIO;
    ws->fill = 0;
}

/* Room for at least `need` (<= CHUNK_BYTES) more bytes in the buffer. */
static uint8_t *ws_room(wstream_t *ws, size_t need)
{
    if (CHUNK_BYTES - ws->fill < need)
        ws_flush(ws);
    return ws->buf + ws->fill;
}

/* The caller encoded n bytes at ws_room(): account and checksum them. */
static void ws_commit(wstream_t *ws, size_t n)
{
    ws->crc = zps_crc32c(ws->crc, ws->buf + ws->fill, n);
    ws->fill += n;
    ws->pos += n;
}

static void ws_u64s(wstream_t *ws, const uint64_t *x, size_t n)
{
    while (n > 0 && ws->err == 0) {
        uint8_t *p = ws_room(ws, 8);
        size_t k = (CHUNK_BYTES - ws->fill) / 8;
        k = k < n ? k : n;
        for (size_t i = 0; i < k; i++)
            put_u64(p + 8 * i, x[i]);
        ws_commit(ws, 8 * k);
        x += k;
        n -= k;
    }
}

/* x: [n] float32, written as n little-endian binary32 values. */
static void ws_f32s(wstream_t *ws, const float *x, size_t n)
{
    while (n > 0 && ws->err == 0) {
        uint8_t *p = ws_room(ws, 4);
        size_t k = (CHUNK_BYTES - ws->fill) / 4;
        k = k < n ? k : n;
        for (size_t i = 0; i < k; i++)
            put_f32(p + 4 * i, x[i]);
        ws_commit(ws, 4 * k);
        x += k;
        n -= k;
    }
}

static void ws_bools(wstream_t *ws, const bool *x, size_t n)
{
    while (n > 0 && ws->err == 0) {
        uint8_t *p = ws_room(ws, 1);
        size_t k = CHUNK_BYTES - ws->fill;
        k = k < n ? k : n;
        for (size_t i = 0; i < k; i++)
            p[i] = x[i] ? 1 : 0;
        ws_commit(ws, k);
        x += k;
        n -= k;
    }
}

static void ws_bytes(wstream_t *ws, const uint8_t *x, size_t n)
{
    while (n > 0 && ws->err == 0) {
        uint8_t *p = ws_room(ws, 1);
        size_t k = CHUNK_BYTES - ws->fill;
        k = k < n ? k : n;
        memcpy(p, x, k);
        ws_commit(ws, k);
        x += k;
        n -= k;
    }
}

/*
 * The assignment section: the counts, the queue, one row per worker, the
 * completion bits (none without a plan). A worker's lease slots past its
 * count hold whatever the module left there; they are written as zeros.
 */
static void ws_assign(wstream_t *ws, const zps_ckpt_t *c)
{
    const zps_assign_state_t *s = &c->assign;
    uint8_t *p = ws_room(ws, ASSIGN_FIXED_BYTES);
    put_u64(p + 0, s->plan.examples);
    put_u32(p + 8, s->plan.batch);
    put_u32(p + 12, s->plan.epochs);
    put_u64(p + 16, s->next);
    put_u64(p + 24, s->nqueue);
    put_u32(p + 32, s->workers);
    ws_commit(ws, ASSIGN_FIXED_BYTES);
    ws_u64s(ws, s->queue, s->nqueue);
    for (uint32_t w = 0; w < s->workers && ws->err == 0; w++) {
        uint32_t n = s->nheld ? s->nheld[w] : 0;
        p = ws_room(ws, ASSIGN_WORKER_BYTES);
        memset(p, 0, ASSIGN_WORKER_BYTES);
        put_u32(p, n);
        p[4] = c->finished[w] ? 1 : 0;
        for (uint32_t i = 0; i < n; i++)
            put_u64(p + 8 + 8 * i, s->held[(size_t)w * ZPS_ASSIGN_MAX_HELD + i]);
        ws_commit(ws, ASSIGN_WORKER_BYTES);
    }
    uint64_t batches = 0;
    assign_batches(&s->plan, &batches, NULL, 0); /* validated: cannot fail */
    if (s->plan.examples != 0)
        ws_bytes(ws, s->done, (size_t)zps_assign_done_bytes(batches));
}

/* The section table entries the writer fills in. */
typedef struct sec {
    uint32_t id;
    uint32_t crc;
    uint64_t offset, length;
} sec_t;

static void encode_header(uint8_t *h, uint64_t file_bytes, uint32_t nsec, uint32_t table_crc)
{
    memset(h, 0, HEADER_BYTES);
    memcpy(h, ZPS_CKPT_MAGIC, 8);
    put_u32(h + 8, ZPS_CKPT_FORMAT);
    put_u32(h + 12, HEADER_BYTES);
    put_u64(h + 16, file_bytes);
    put_u32(h + 24, nsec);
    put_u32(h + 28, table_crc);
    put_u32(h + HEADER_CRC_AT, zps_crc32c(0, h, HEADER_CRC_AT));
}

static void encode_shard(uint8_t *p, const zps_ckpt_t *c)
{
    put_u32(p + 0, c->shard_index);
    put_u32(p + 4, c->shard_count);
    put_u64(p + 8, c->total);
    put_u64(p + 16, c->range.lo);
    put_u64(p + 24, c->range.hi);
    put_u64(p + 32, c->version);
}

/* p: [OPT_FIXED_BYTES + ZPS_CKPT_NAME_SIZE * nstate] */
static void encode_optimizer(uint8_t *p, const zps_ckpt_t *c)
{
    const zps_opt_config_t *o = &c->opt;
    put_u32(p + 0, (uint32_t)o->kind);
    put_u32(p + 4, (uint32_t)o->schedule);
    put_u32(p + 8, o->nesterov ? 1 : 0);
    put_u32(p + 12, c->nstate);
    put_f64(p + 16, o->lr);
    put_f64(p + 24, o->momentum);
    put_f64(p + 32, o->beta1);
    put_f64(p + 40, o->beta2);
    put_f64(p + 48, o->eps);
    put_f64(p + 56, o->weight_decay);
    put_f64(p + 64, o->gamma);
    put_f64(p + 72, o->lr_min);
    put_u64(p + 80, o->step_every);
    put_u64(p + 88, o->cosine_steps);
    put_u64(p + 96, o->warmup);
    put_u64(p + 104, c->opt_steps);
    for (uint32_t i = 0; i < c->nstate; i++) {
        uint8_t *name = p + OPT_FIXED_BYTES + ZPS_CKPT_NAME_SIZE * i;
        memset(name, 0, ZPS_CKPT_NAME_SIZE);
        memcpy(name, c->state_names[i], strnlen(c->state_names[i], ZPS_CKPT_NAME_SIZE - 1));
    }
}

int zps_ckpt_validate(const zps_ckpt_t *c, char *why, size_t why_size)
{
    char reason[256];
    int rc;
    if (check_shard_fields(c, reason, sizeof(reason)) != 0)
        goto invalid;
    zps_range_t rule;
    if (zps_shard_range(c->total, c->shard_index, c->shard_count, &rule) != 0 ||
        rule.lo != c->range.lo || rule.hi != c->range.hi) {
        snprintf(reason, sizeof(reason),
                 "range [%" PRIu64 ", %" PRIu64 ") is not shard %" PRIu32 "/%" PRIu32
                 "'s range [%" PRIu64 ", %" PRIu64 ") of a model of %" PRIu64 " elements",
                 c->range.lo, c->range.hi, c->shard_index, c->shard_count, rule.lo, rule.hi,
                 c->total);
        goto invalid;
    }
    if (c->nstate > ZPS_CKPT_MAX_STATE) {
        snprintf(reason, sizeof(reason), "%" PRIu32 " optimizer state arrays (at most %d)",
                 c->nstate, ZPS_CKPT_MAX_STATE);
        goto invalid;
    }
    if ((rc = check_opt_fields(c, reason, sizeof(reason))) != 0)
        goto refused;
    if ((rc = check_workers_fields(c, reason, sizeof(reason))) != 0)
        goto refused;
    size_t len = (size_t)zps_range_len(c->range);
    if (c->pushed == NULL || c->live == NULL || c->dropped == NULL) {
        snprintf(reason, sizeof(reason), "pushed, live and dropped must hold %" PRIu32 " entries",
                 c->workers);
        goto invalid;
    }
    if (check_clocks(c, reason, sizeof(reason)) != 0)
        goto invalid;
    if (c->have_assign && (rc = check_assign_fields(c->workers, &c->assign, c->finished, reason,
                                                    sizeof(reason))) != 0)
        goto refused;
    if (len > 0 && c->params == NULL) {
        snprintf(reason, sizeof(reason), "params is NULL for a range of %zu elements", len);
        goto invalid;
    }
    for (uint32_t i = 0; i < c->nstate; i++) {
        if (len > 0 && c->state[i] == NULL) {
            snprintf(reason, sizeof(reason), "optimizer state '%s' is NULL", c->state_names[i]);
            goto invalid;
        }
    }
    /* A reader refuses non-finite state, so it is never written: a shard
     * that diverged must not replace its last good checkpoint. */
    size_t bad;
    if (len > 0 && !zps_all_finite(c->params, len, &bad)) {
        snprintf(reason, sizeof(reason), "params element %zu is not finite (%s)", bad,
                 nonfinite_name(c->params[bad]));
        goto invalid;
    }
    for (uint32_t i = 0; i < c->nstate; i++) {
        if (len > 0 && !zps_all_finite(c->state[i], len, &bad)) {
            snprintf(reason, sizeof(reason), "optimizer state '%s' element %zu is not finite (%s)",
                     c->state_names[i], bad, nonfinite_name(c->state[i][bad]));
            goto invalid;
        }
    }
    return 0;

refused:
    if (rc == ZPS_ENOMEM) {
        zps_set_reason(why, why_size, "out of memory");
        return ZPS_ENOMEM;
    }
invalid:
    zps_set_reason(why, why_size, "not a valid checkpoint: %s", reason);
    return ZPS_EINVAL;
}

int zps_ckpt_encode(int fd, const zps_ckpt_t *c, const char *path, char *why, size_t why_size)
{
    if (c == NULL) {
        zps_set_reason(why, why_size, "no checkpoint");
        return ZPS_EINVAL;
    }
    int rc = zps_ckpt_validate(c, why, why_size);
    if (rc != 0)
        return rc;
    wstream_t ws = {.fd = fd};
    ws.buf = malloc(CHUNK_BYTES);
    if (ws.buf == NULL) {
        zps_set_reason(why, why_size, "out of memory");
        return ZPS_ENOMEM;
    }

    size_t len = (size_t)zps_range_len(c->range);
    uint32_t nsec = 4 + c->nstate + (c->have_assign ? 1 : 0);
    sec_t secs[ZPS_CKPT_MAX_SECTIONS];
    uint64_t table_end = HEADER_BYTES + (uint64_t)ENTRY_BYTES * nsec;

    /* Header and table are filled in at the end, when the checksums are known. */
    memset(ws_room(&ws, table_end), 0, table_end);
    ws_commit(&ws, table_end);

    for (uint32_t s = 0; s < nsec; s++) {
        if (s < 4)
            secs[s].id = (uint32_t)ZPS_CKPT_SEC_SHARD + s;
        else if (s < 4 + c->nstate)
            secs[s].id = ZPS_CKPT_SEC_STATE + (s - 4);
        else
            secs[s].id = ZPS_CKPT_SEC_ASSIGN;
        secs[s].offset = ws.pos;
        ws.crc = 0;
        switch (secs[s].id) {
        case ZPS_CKPT_SEC_SHARD:
            encode_shard(ws_room(&ws, SHARD_BYTES), c);
            ws_commit(&ws, SHARD_BYTES);
            break;
        case ZPS_CKPT_SEC_OPTIMIZER: {
            size_t n = OPT_FIXED_BYTES + ZPS_CKPT_NAME_SIZE * (size_t)c->nstate;
            encode_optimizer(ws_room(&ws, n), c);
            ws_commit(&ws, n);
            break;
        }
        case ZPS_CKPT_SEC_WORKERS: {
            uint8_t *p = ws_room(&ws, WORKERS_FIXED_BYTES);
            put_u32(p + 0, (uint32_t)c->mode);
            put_u32(p + 4, c->workers);
            put_u32(p + 8, c->ssp_bound);
            put_u32(p + 12, c->backup);
            ws_commit(&ws, WORKERS_FIXED_BYTES);
            ws_u64s(&ws, c->pushed, c->workers);
            ws_u64s(&ws, c->dropped, c->workers);
            ws_bools(&ws, c->live, c->workers);
            break;
        }
        case ZPS_CKPT_SEC_PARAMS:
            ws_f32s(&ws, c->params, len);
            break;
        case ZPS_CKPT_SEC_ASSIGN:
            ws_assign(&ws, c);
            break;
        default:
            ws_f32s(&ws, c->state[secs[s].id - ZPS_CKPT_SEC_STATE], len);
            break;
        }
        secs[s].length = ws.pos - secs[s].offset;
        secs[s].crc = ws.crc;
    }
    ws_flush(&ws);
    int err = ws.err;
    free(ws.buf);

    if (err == 0) {
        /* The table, then the header that checksums it, at the front. */
        uint8_t front[HEADER_BYTES + ENTRY_BYTES * ZPS_CKPT_MAX_SECTIONS];
        for (uint32_t s = 0; s < nsec; s++) {
            uint8_t *e = front + HEADER_BYTES + ENTRY_BYTES * s;
            put_u32(e + 0, secs[s].id);
            put_u32(e + 4, secs[s].crc);
            put_u64(e + 8, secs[s].offset);
            put_u64(e + 16, secs[s].length);
        }
        encode_header(front, ws.pos, nsec,
                      zps_crc32c(0, front + HEADER_BYTES, (size_t)ENTRY_BYTES * nsec));
        if (pwrite_all(fd, front, (size_t)table_end, 0) != 0)
            err = errno;
    }
    if (err != 0) {
        zps_set_reason(why, why_size, "write %s: %s", path, strerror(err));
        return ZPS_EIO;
    }
    return 0;
}

/* ---- decoding and verifying ---- */

void zps_ckpt_init(zps_ckpt_t *c)
{
    memset(c, 0, sizeof(*c));
}

void zps_ckpt_fini(zps_ckpt_t *c)
{
    if (c == NULL)
        return;
    free(c->pushed);
    free(c->live);
    free(c->dropped);
    free(c->params);
    for (int i = 0; i < ZPS_CKPT_MAX_STATE; i++)
        free(c->state[i]);
    zps_assign_state_fini(&c->assign);
    free(c->finished);
    zps_ckpt_init(c);
}

void zps_ckpt_scan_fini(zps_ckpt_scan_t *scan)
{
    if (scan == NULL)
        return;
    zps_ckpt_fini(&scan->meta);
    memset(scan, 0, sizeof(*scan));
}

/*
 * Reads exactly n bytes at off. Returns 0; ZPS_EIO with the errno text, or
 * when the file ends early (it was checked long enough, so it changed while
 * being read).
 */
static int read_at(int fd, const char *path, uint64_t off, void *dst, size_t n, char *why,
                   size_t why_size)
{
    uint8_t *p = dst;
    while (n > 0) {
        ssize_t k = pread(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            zps_set_reason(why, why_size, "read %s: %s", path, strerror(errno));
            return ZPS_EIO;
        }
        if (k == 0) {
            zps_set_reason(why, why_size,
                           "read %s: the file ended early (did it change while being read?)", path);
            return ZPS_EIO;
        }
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

/* The parsed section table: entries in file order, with names for messages. */
typedef struct entry {
    uint32_t id, crc;
    uint64_t offset, length;
    char name[32];
} entry_t;

/*
 * The header's checks. `h` holds the first `have` bytes of a file of `size`
 * bytes. Returns 0 with the section count and recorded file size, or
 * ZPS_ECORRUPT with the reason.
 */
static int check_header(const uint8_t *h, size_t have, uint64_t size, uint32_t *nsec,
                        uint64_t *total, uint32_t *format, char *why, size_t why_size)
{
    size_t m = have < 8 ? have : 8;
    if (memcmp(h, ZPS_CKPT_MAGIC, m) != 0) {
        zps_set_reason(why, why_size, "bad magic: not a zps checkpoint");
        return ZPS_ECORRUPT;
    }
    if (have < 12) {
        zps_set_reason(why, why_size, "truncated: header ends at byte %d, file has %" PRIu64,
                       HEADER_BYTES, size);
        return ZPS_ECORRUPT;
    }
    *format = get_u32(h + 8);
    bool crc_ok =
        have == HEADER_BYTES && zps_crc32c(0, h, HEADER_CRC_AT) == get_u32(h + HEADER_CRC_AT);
    if (*format < ZPS_CKPT_FORMAT_OLDEST || *format > ZPS_CKPT_FORMAT) {
        /* A newer writer keeps magic and version where they are; a bit flip in
         * the version of a file this build reads shows as a header checksum
         * mismatch. (Two versions: "versions 1 and 2".) */
        zps_set_reason(why, why_size,
                       "unsupported format version %" PRIu32 " (this build reads versions %d and "
                       "%d)%s",
                       *format, ZPS_CKPT_FORMAT_OLDEST, ZPS_CKPT_FORMAT,
                       have == HEADER_BYTES && !crc_ok
                           ? ", or a corrupt header: its checksum does not match"
                           : "");
        return ZPS_ECORRUPT;
    }
    if (have < HEADER_BYTES) {
        zps_set_reason(why, why_size, "truncated: header ends at byte %d, file has %" PRIu64,
                       HEADER_BYTES, size);
        return ZPS_ECORRUPT;
    }
    if (!crc_ok) {
        zps_set_reason(why, why_size, "header checksum mismatch");
        return ZPS_ECORRUPT;
    }
    if (get_u32(h + 12) != HEADER_BYTES) {
        zps_set_reason(why, why_size,
                       "header: header size %" PRIu32 ", format version %" PRIu32 " has %d",
                       get_u32(h + 12), *format, HEADER_BYTES);
        return ZPS_ECORRUPT;
    }
    for (int i = 32; i < HEADER_CRC_AT; i++) {
        if (h[i] != 0) {
            zps_set_reason(why, why_size, "header: reserved byte %d is not zero", i);
            return ZPS_ECORRUPT;
        }
    }
    *nsec = get_u32(h + 24);
    /* Version 1 has no assignment section: one section fewer at most. */
    uint32_t most = ZPS_CKPT_MAX_SECTIONS - (*format < 2 ? 1 : 0);
    if (*nsec < 4 || *nsec > most) {
        zps_set_reason(why, why_size,
                       "header: %" PRIu32 " sections; format version %" PRIu32 " has 4 to %" PRIu32,
                       *nsec, *format, most);
        return ZPS_ECORRUPT;
    }
    *total = get_u64(h + 16);
    return 0;
}

/*
 * The table's layout: the sections in their order (shard, optimizer,
 * workers, params, the state arrays, and from format version 2 on an
 * assignment section last), back to back from the end of the table to the
 * end of the file, so that every byte of the file is under exactly one
 * checksum. *assign: the last section is the assignment.
 */
static int check_layout(const entry_t *e, uint32_t nsec, uint32_t format, uint64_t table_end,
                        uint64_t total, bool *assign, char *why, size_t why_size)
{
    /* The header allows one entry more than 4 + ZPS_CKPT_MAX_STATE only in
     * version 2, and then the last must be the assignment. */
    *assign = format >= 2 && nsec > 4 &&
              (e[nsec - 1].id == ZPS_CKPT_SEC_ASSIGN || nsec - 4 > ZPS_CKPT_MAX_STATE);
    uint64_t at = table_end;
    for (uint32_t s = 0; s < nsec; s++) {
        uint32_t want;
        if (s < 4)
            want = (uint32_t)ZPS_CKPT_SEC_SHARD + s;
        else if (*assign && s == nsec - 1)
            want = ZPS_CKPT_SEC_ASSIGN;
        else
            want = ZPS_CKPT_SEC_STATE + (s - 4);
        if (e[s].id != want) {
            zps_set_reason(why, why_size,
                           "section table: entry %" PRIu32 " has id %" PRIu32 ", expected %" PRIu32,
                           s, e[s].id, want);
            return ZPS_ECORRUPT;
        }
        if (e[s].offset != at) {
            zps_set_reason(why, why_size,
                           "section table: section '%s' starts at byte %" PRIu64
                           ", expected %" PRIu64,
                           e[s].name, e[s].offset, at);
            return ZPS_ECORRUPT;
        }
        if (e[s].length > UINT64_MAX - at) {
            zps_set_reason(why, why_size, "section table: section '%s' is %" PRIu64 " bytes",
                           e[s].name, e[s].length);
            return ZPS_ECORRUPT;
        }
        at += e[s].length;
    }
    if (at != total) {
        zps_set_reason(why, why_size,
                       "section table: sections end at byte %" PRIu64
                       ", the header says the file has %" PRIu64,
                       at, total);
        return ZPS_ECORRUPT;
    }
    return 0;
}

/* State of one load: a read (all or nothing) or a scan (every part, recorded). */
typedef struct loader {
    const char *path;
    int fd;
    uint64_t size;
    uint8_t *buf; /* [CHUNK_BYTES] */
    bool decode_arrays;
    zps_ckpt_scan_t *scan; /* NULL for a read */
    uint32_t format;       /* the header's format version */
    zps_ckpt_t c;
    bool have_shard, have_opt, have_workers;
    int rc; /* first error */
    char *why;
    size_t why_size;
} loader_t;

/* Records a problem with section s. A read stops at the first; a scan goes on. */
static void section_bad(loader_t *L, uint32_t s, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void section_bad(loader_t *L, uint32_t s, int code, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (L->rc == 0) {
        L->rc = code;
        zps_set_reason(L->why, L->why_size, "%s", msg);
    }
    if (L->scan && s < ZPS_CKPT_MAX_SECTIONS) {
        zps_ckpt_section_check_t *sc = &L->scan->sections[s];
        if (sc->status == 0) {
            sc->status = code;
            snprintf(sc->why, sizeof(sc->why), "%s", msg);
        }
    }
}

/*
 * Reads section e (index s) whole into a new buffer and verifies its
 * checksum. Returns the buffer (caller frees), or NULL after recording why.
 */
static uint8_t *load_small(loader_t *L, uint32_t s, const entry_t *e)
{
    uint8_t *p = malloc(e->length > 0 ? (size_t)e->length : 1);
    if (p == NULL) {
        section_bad(L, s, ZPS_ENOMEM, "out of memory");
        return NULL;
    }
    char msg[256];
    int rc = read_at(L->fd, L->path, e->offset, p, (size_t)e->length, msg, sizeof(msg));
    if (rc != 0) {
        section_bad(L, s, rc, "%s", msg);
        free(p);
        return NULL;
    }
    uint32_t crc = zps_crc32c(0, p, (size_t)e->length);
    if (L->scan) {
        L->scan->sections[s].crc_computed = crc;
        L->scan->sections[s].read = true;
    }
    if (crc != e->crc) {
        section_bad(L, s, ZPS_ECORRUPT, "section '%s' checksum mismatch", e->name);
        free(p);
        return NULL;
    }
    return p;
}

static void load_shard(loader_t *L, uint32_t s, const entry_t *e)
{
    if (e->length != SHARD_BYTES) {
        section_bad(L, s, ZPS_ECORRUPT,
                    "section 'shard' is %" PRIu64 " bytes; format version %" PRIu32 " has %d",
                    e->length, L->format, SHARD_BYTES);
        return;
    }
    uint8_t *p = load_small(L, s, e);
    if (p == NULL)
        return;
    zps_ckpt_t *c = &L->c;
    c->shard_index = get_u32(p + 0);
    c->shard_count = get_u32(p + 4);
    c->total = get_u64(p + 8);
    c->range.lo = get_u64(p + 16);
    c->range.hi = get_u64(p + 24);
    c->version = get_u64(p + 32);
    free(p);
    char msg[200];
    if (check_shard_fields(c, msg, sizeof(msg)) != 0) {
        section_bad(L, s, ZPS_ECORRUPT, "section 'shard': %s", msg);
        return;
    }
    L->have_shard = true;
}

static void load_optimizer(loader_t *L, uint32_t s, const entry_t *e, uint32_t nstate)
{
    uint64_t want = OPT_FIXED_BYTES + (uint64_t)ZPS_CKPT_NAME_SIZE * nstate;
    if (e->length != want) {
        section_bad(L, s, ZPS_ECORRUPT,
                    "section 'optimizer' is %" PRIu64 " bytes; with %" PRIu32
                    " state arrays it must be %" PRIu64,
                    e->length, nstate, want);
        return;
    }
    uint8_t *p = load_small(L, s, e);
    if (p == NULL)
        return;
    zps_ckpt_t *c = &L->c;
    uint32_t kind = get_u32(p + 0), schedule = get_u32(p + 4), nesterov = get_u32(p + 8);
    c->nstate = get_u32(p + 12);
    char msg[256];
    int bad = 0;
    if (kind > ZPS_OPT_ADAGRAD) {
        snprintf(msg, sizeof(msg), "unknown optimizer kind %" PRIu32, kind);
        bad = 1;
    } else if (schedule > ZPS_SCHED_COSINE) {
        snprintf(msg, sizeof(msg), "unknown schedule kind %" PRIu32, schedule);
        bad = 1;
    } else if (nesterov > 1) {
        snprintf(msg, sizeof(msg), "nesterov is %" PRIu32 ", not 0 or 1", nesterov);
        bad = 1;
    } else if (c->nstate != nstate) {
        snprintf(msg, sizeof(msg), "%" PRIu32 " state arrays, but the table has %" PRIu32,
                 c->nstate, nstate);
        bad = 1;
    }
    if (!bad) {
        zps_opt_config_t *o = &c->opt;
        o->kind = (zps_opt_kind_t)kind;
        o->schedule = (zps_sched_kind_t)schedule;
        o->nesterov = nesterov == 1;
        o->lr = get_f64(p + 16);
        o->momentum = get_f64(p + 24);
        o->beta1 = get_f64(p + 32);
        o->beta2 = get_f64(p + 40);
        o->eps = get_f64(p + 48);
        o->weight_decay = get_f64(p + 56);
        o->gamma = get_f64(p + 64);
        o->lr_min = get_f64(p + 72);
        o->step_every = get_u64(p + 80);
        o->cosine_steps = get_u64(p + 88);
        o->warmup = get_u64(p + 96);
        c->opt_steps = get_u64(p + 104);
        for (uint32_t i = 0; i < nstate; i++) {
            const uint8_t *name = p + OPT_FIXED_BYTES + ZPS_CKPT_NAME_SIZE * i;
            if (memchr(name, 0, ZPS_CKPT_NAME_SIZE) == NULL) {
                snprintf(msg, sizeof(msg), "the name of state array %" PRIu32 " is not terminated",
                         i);
                bad = 1;
                break;
            }
            memcpy(c->state_names[i], name, ZPS_CKPT_NAME_SIZE);
        }
    }
    free(p);
    if (!bad) {
        int rc = check_opt_fields(c, msg, sizeof(msg));
        if (rc == ZPS_ENOMEM) {
            section_bad(L, s, ZPS_ENOMEM, "out of memory");
            return;
        }
        bad = rc != 0;
    }
    if (bad) {
        section_bad(L, s, ZPS_ECORRUPT, "section 'optimizer': %s", msg);
        return;
    }
    L->have_opt = true;
}

static void load_workers(loader_t *L, uint32_t s, const entry_t *e)
{
    if (e->length < WORKERS_FIXED_BYTES || (e->length - WORKERS_FIXED_BYTES) % WORKER_BYTES) {
        section_bad(L, s, ZPS_ECORRUPT,
                    "section 'workers' is %" PRIu64 " bytes; it must be %d "
                    "plus %d per worker",
                    e->length, WORKERS_FIXED_BYTES, WORKER_BYTES);
        return;
    }
    uint8_t *p = load_small(L, s, e);
    if (p == NULL)
        return;
    zps_ckpt_t *c = &L->c;
    uint32_t mode = get_u32(p + 0);
    c->workers = get_u32(p + 4);
    c->ssp_bound = get_u32(p + 8);
    c->backup = get_u32(p + 12);
    char msg[256];
    uint64_t want = WORKERS_FIXED_BYTES + (uint64_t)WORKER_BYTES * c->workers;
    if (e->length != want) {
        snprintf(msg, sizeof(msg), "%" PRIu64 " bytes, but %" PRIu32 " workers need %" PRIu64,
                 e->length, c->workers, want);
        goto bad;
    }
    if (mode > ZPS_MODE_ASP) {
        snprintf(msg, sizeof(msg), "unknown consistency mode %" PRIu32, mode);
        goto bad;
    }
    c->mode = (zps_mode_t)mode;
    int rc = check_workers_fields(c, msg, sizeof(msg));
    if (rc == ZPS_ENOMEM) {
        section_bad(L, s, ZPS_ENOMEM, "out of memory");
        free(p);
        return;
    }
    if (rc != 0)
        goto bad;
    size_t w = c->workers;
    const uint8_t *live = p + WORKERS_FIXED_BYTES + 16 * w;
    for (size_t i = 0; i < w; i++) {
        if (live[i] > 1) {
            snprintf(msg, sizeof(msg), "live[%zu] is %u, not 0 or 1", i, (unsigned)live[i]);
            goto bad;
        }
    }
    c->pushed = malloc(w * sizeof(uint64_t));
    c->dropped = malloc(w * sizeof(uint64_t));
    c->live = malloc(w * sizeof(bool));
    if (!c->pushed || !c->dropped || !c->live) {
        section_bad(L, s, ZPS_ENOMEM, "out of memory");
        free(p);
        return;
    }
    for (size_t i = 0; i < w; i++) {
        c->pushed[i] = get_u64(p + WORKERS_FIXED_BYTES + 8 * i);
        c->dropped[i] = get_u64(p + WORKERS_FIXED_BYTES + 8 * (w + i));
        c->live[i] = live[i] == 1;
    }
    free(p);
    L->have_workers = true;
    return;

bad:
    free(p);
    section_bad(L, s, ZPS_ECORRUPT, "section 'workers': %s", msg);
}

/*
 * The assignment section. Its length follows from its counts, which are
 * checked first (against the workers section's W when that verified; a scan
 * past a bad one takes the section's own count); then the bytes no state
 * sets (reserved bytes, lease slots past a worker's count, finished other
 * than 0 or 1); then the decoded state as zps_assign_restore checks it.
 */
static void load_assign(loader_t *L, uint32_t s, const entry_t *e)
{
    if (e->length < ASSIGN_FIXED_BYTES) {
        section_bad(L, s, ZPS_ECORRUPT,
                    "section 'assignment' is %" PRIu64 " bytes; its fixed fields need %d",
                    e->length, ASSIGN_FIXED_BYTES);
        return;
    }
    uint8_t *p = load_small(L, s, e);
    if (p == NULL)
        return;
    zps_assign_state_t st;
    memset(&st, 0, sizeof(st));
    bool *finished = NULL;
    st.plan.examples = get_u64(p + 0);
    st.plan.batch = get_u32(p + 8);
    st.plan.epochs = get_u32(p + 12);
    st.next = get_u64(p + 16);
    uint64_t nqueue = get_u64(p + 24);
    st.workers = get_u32(p + 32);
    uint32_t W = L->have_workers ? L->c.workers : st.workers;
    char msg[256];
    uint64_t batches;
    if (check_assign_counts(W, &st.plan, st.workers, nqueue, &batches, msg, sizeof(msg)) != 0)
        goto bad;
    uint64_t done_bytes = st.plan.examples != 0 ? zps_assign_done_bytes(batches) : 0;
    uint64_t want =
        ASSIGN_FIXED_BYTES + 8 * nqueue + (uint64_t)ASSIGN_WORKER_BYTES * W + done_bytes;
    if (e->length != want) {
        free(p);
        section_bad(L, s, ZPS_ECORRUPT,
                    "section 'assignment' is %" PRIu64 " bytes; %" PRIu32 " workers, %" PRIu64
                    " queued leases and %" PRIu64 " batches need %" PRIu64,
                    e->length, W, nqueue, batches, want);
        return;
    }
    const uint8_t *rows = p + ASSIGN_FIXED_BYTES + 8 * nqueue;
    for (uint32_t w = 0; w < W; w++) {
        const uint8_t *r = rows + (size_t)ASSIGN_WORKER_BYTES * w;
        uint32_t n = get_u32(r);
        if (n > ZPS_ASSIGN_MAX_HELD) {
            snprintf(msg, sizeof(msg),
                     "data assignment: worker %" PRIu32 " holds %" PRIu32 " leases, at most %d", w,
                     n, ZPS_ASSIGN_MAX_HELD);
            goto bad;
        }
        if (r[4] > 1) {
            snprintf(msg, sizeof(msg), "finished[%" PRIu32 "] is %u, not 0 or 1", w,
                     (unsigned)r[4]);
            goto bad;
        }
        if (r[5] != 0 || r[6] != 0 || r[7] != 0) {
            snprintf(msg, sizeof(msg), "worker %" PRIu32 "'s reserved bytes 5 to 7 are not zero",
                     w);
            goto bad;
        }
        for (uint32_t i = n; i < ZPS_ASSIGN_MAX_HELD; i++) {
            if (get_u64(r + 8 + 8 * i) != 0) {
                snprintf(msg, sizeof(msg),
                         "worker %" PRIu32 "'s lease slot %" PRIu32 " is past its %" PRIu32
                         " leases and not zero",
                         w, i, n);
                goto bad;
            }
        }
    }
    st.nqueue = (size_t)nqueue;
    st.queue = malloc(nqueue > 0 ? (size_t)nqueue * sizeof(uint64_t) : 1);
    st.held = malloc((size_t)W * ZPS_ASSIGN_MAX_HELD * sizeof(uint64_t));
    st.nheld = malloc((size_t)W * sizeof(uint32_t));
    st.done = done_bytes > 0 ? malloc((size_t)done_bytes) : NULL;
    finished = malloc((size_t)W * sizeof(bool));
    if (!st.queue || !st.held || !st.nheld || (done_bytes > 0 && !st.done) || !finished) {
        zps_assign_state_fini(&st);
        free(finished);
        free(p);
        section_bad(L, s, ZPS_ENOMEM, "out of memory");
        return;
    }
    for (size_t i = 0; i < st.nqueue; i++)
        st.queue[i] = get_u64(p + ASSIGN_FIXED_BYTES + 8 * i);
    for (uint32_t w = 0; w < W; w++) {
        const uint8_t *r = rows + (size_t)ASSIGN_WORKER_BYTES * w;
        st.nheld[w] = get_u32(r);
        finished[w] = r[4] == 1;
        for (uint32_t i = 0; i < ZPS_ASSIGN_MAX_HELD; i++)
            st.held[(size_t)w * ZPS_ASSIGN_MAX_HELD + i] = get_u64(r + 8 + 8 * i);
    }
    if (done_bytes > 0)
        memcpy(st.done, rows + (size_t)ASSIGN_WORKER_BYTES * W, (size_t)done_bytes);
    free(p);
    p = NULL;
    int rc = check_assign_fields(W, &st, finished, msg, sizeof(msg));
    if (rc == ZPS_ENOMEM) {
        zps_assign_state_fini(&st);
        free(finished);
        section_bad(L, s, ZPS_ENOMEM, "out of memory");
        return;
    }
    if (rc != 0)
        goto bad;
    L->c.assign = st;
    L->c.finished = finished;
    L->c.have_assign = true;
    return;

bad:
    free(p);
    zps_assign_state_fini(&st);
    free(finished);
    section_bad(L, s, ZPS_ECORRUPT, "section 'assignment': %s", msg);
}

/* params or a state array: streamed through the buffer, decoded into *dst when wanted. */
static void load_array(loader_t *L, uint32_t s, const entry_t *e, float **dst)
{
    size_t n = 0;
    if (L->have_shard) {
        uint64_t len = zps_range_len(L->c.range);
        if (e->length != len * sizeof(float)) {
            section_bad(L, s, ZPS_ECORRUPT,
                        "section '%s' is %" PRIu64 " bytes; range [%" PRIu64 ", %" PRIu64
                        ") needs %" PRIu64,
                        e->name, e->length, L->c.range.lo, L->c.range.hi, len * sizeof(float));
            return;
        }
        n = (size_t)len;
    }
    float *out = NULL;
    if (L->decode_arrays && L->have_shard && n > 0) {
        out = malloc(n * sizeof(float));
        if (out == NULL) {
            section_bad(L, s, ZPS_ENOMEM, "out of memory");
            return;
        }
    }
    uint32_t crc = 0;
    char msg[256];
    /* The first value that is NaN or infinite, reported once the checksum
     * says the bytes are the ones written. */
    uint64_t first_bad = UINT64_MAX;
    float bad_value = 0;
    for (uint64_t done = 0; done < e->length;) {
        size_t k = e->length - done < CHUNK_BYTES ? (size_t)(e->length - done) : CHUNK_BYTES;
        int rc = read_at(L->fd, L->path, e->offset + done, L->buf, k, msg, sizeof(msg));
        if (rc != 0) {
            section_bad(L, s, rc, "%s", msg);
            free(out);
            return;
        }
        crc = zps_crc32c(crc, L->buf, k);
        /* k is a multiple of 4 when the length is (CHUNK_BYTES is); a length
         * that is not was refused above once the shard section was known. */
        float *o = out ? out + done / sizeof(float) : NULL;
        for (size_t i = 0; i < k / sizeof(float); i++) {
            float x = get_f32(L->buf + sizeof(float) * i);
            if (o)
                o[i] = x;
            if (first_bad == UINT64_MAX && !isfinite(x)) {
                first_bad = done / sizeof(float) + i;
                bad_value = x;
            }
        }
        done += k;
    }
    if (L->scan) {
        L->scan->sections[s].crc_computed = crc;
        L->scan->sections[s].read = true;
    }
    if (crc != e->crc) {
        section_bad(L, s, ZPS_ECORRUPT, "section '%s' checksum mismatch", e->name);
        free(out);
        return;
    }
    if (first_bad != UINT64_MAX) {
        section_bad(L, s, ZPS_ECORRUPT, "section '%s': element %" PRIu64 " is not finite (%s)",
                    e->name, first_bad, nonfinite_name(bad_value));
        free(out);
        return;
    }
    if (dst)
        *dst = out;
    else
        free(out);
}

/*
 * The first section that ends beyond the file, from section `from` on, as
 * the "truncated" message; every such section is recorded as truncated in a
 * scan. Returns whether there was one.
 */
static bool check_truncation(loader_t *L, const entry_t *e, uint32_t nsec, uint32_t from)
{
    bool found = false;
    for (uint32_t s = from; s < nsec; s++) {
        uint64_t end = e[s].offset + e[s].length;
        if (end > L->size) {
            section_bad(L, s, ZPS_ECORRUPT,
                        "truncated: section '%s' ends at byte %" PRIu64 ", file has %" PRIu64,
                        e[s].name, end, L->size);
            found = true;
            if (L->scan == NULL)
                break;
        }
    }
    return found;
}

/* What a file that is not a regular one is, for messages. */
static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    return "an unknown kind of file";
}

/*
 * Reads (scan == NULL: stop at the first problem, decode everything into
 * L->c) or scans (record every part's verdict, keep only the small
 * sections) the checkpoint at path. Returns the first problem's code or 0.
 */
static int load(const char *path, zps_ckpt_scan_t *scan, bool decode_arrays, zps_ckpt_t *out,
                char *why, size_t why_size)
{
    loader_t L = {
        .path = path,
        .fd = -1,
        .decode_arrays = decode_arrays,
        .scan = scan,
        .why = why,
        .why_size = why_size,
    };
    zps_ckpt_init(&L.c);
    if (scan)
        memset(scan, 0, sizeof(*scan));

    /* O_NONBLOCK: opening a FIFO (or a device) named like a checkpoint must
     * not wait for a writer; it is refused below, and for a regular file
     * the flag is cleared again. */
    L.fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (L.fd < 0) {
        zps_set_reason(why, why_size, "cannot open %s: %s", path, strerror(errno));
        return ZPS_EIO;
    }
    struct stat st;
    if (fstat(L.fd, &st) != 0) {
        zps_set_reason(why, why_size, "cannot stat %s: %s", path, strerror(errno));
        L.rc = ZPS_EIO;
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        zps_set_reason(why, why_size, "%s is not a regular file (%s)", path, file_kind(st.st_mode));
        L.rc = ZPS_EIO;
        goto done;
    }
    int fl = fcntl(L.fd, F_GETFL);
    if (fl < 0 || fcntl(L.fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        zps_set_reason(why, why_size, "cannot read %s: %s", path, strerror(errno));
        L.rc = ZPS_EIO;
        goto done;
    }
    L.size = (uint64_t)st.st_size;
    if (scan)
        scan->file_bytes = L.size;

    uint8_t h[HEADER_BYTES];
    size_t have = L.size < HEADER_BYTES ? (size_t)L.size : HEADER_BYTES;
    if ((L.rc = read_at(L.fd, path, 0, h, have, why, why_size)) != 0)
        goto done;
    uint32_t nsec = 0, format = 0;
    uint64_t total = 0;
    L.rc = check_header(h, have, L.size, &nsec, &total, &format, why, why_size);
    L.format = format;
    if (scan)
        scan->format = format;
    if (L.rc != 0)
        goto done;

    uint64_t table_end = HEADER_BYTES + (uint64_t)ENTRY_BYTES * nsec;
    if (L.size < table_end) {
        zps_set_reason(why, why_size,
                       "truncated: section table ends at byte %" PRIu64 ", file has %" PRIu64,
                       table_end, L.size);
        L.rc = ZPS_ECORRUPT;
        goto done;
    }
    uint8_t t[ENTRY_BYTES * ZPS_CKPT_MAX_SECTIONS];
    if ((L.rc = read_at(L.fd, path, HEADER_BYTES, t, (size_t)(table_end - HEADER_BYTES), why,
                        why_size)) != 0)
        goto done;
    if (zps_crc32c(0, t, (size_t)(table_end - HEADER_BYTES)) != get_u32(h + 28)) {
        zps_set_reason(why, why_size, "section table checksum mismatch");
        L.rc = ZPS_ECORRUPT;
        goto done;
    }
    entry_t e[ZPS_CKPT_MAX_SECTIONS];
    for (uint32_t s = 0; s < nsec; s++) {
        const uint8_t *p = t + ENTRY_BYTES * s;
        e[s].id = get_u32(p);
        e[s].crc = get_u32(p + 4);
        e[s].offset = get_u64(p + 8);
        e[s].length = get_u64(p + 16);
        section_name(e[s].id, NULL, e[s].name, sizeof(e[s].name));
    }
    bool assign = false;
    if ((L.rc = check_layout(e, nsec, format, table_end, total, &assign, why, why_size)) != 0)
        goto done;
    if (scan) {
        scan->header_ok = true;
        scan->header_total = total;
        scan->nsections = nsec;
        for (uint32_t s = 0; s < nsec; s++) {
            zps_ckpt_section_check_t *sc = &scan->sections[s];
            sc->id = e[s].id;
            snprintf(sc->name, sizeof(sc->name), "%s", e[s].name);
            sc->offset = e[s].offset;
            sc->length = e[s].length;
            sc->crc_stored = e[s].crc;
        }
    }

    L.buf = malloc(CHUNK_BYTES);
    if (L.buf == NULL) {
        zps_set_reason(why, why_size, "out of memory");
        L.rc = ZPS_ENOMEM;
        goto done;
    }
    if (L.size > total) {
        zps_set_reason(why, why_size,
                       "file has %" PRIu64 " bytes, the header says %" PRIu64
                       ": trailing bytes after the last section",
                       L.size, total);
        L.rc = ZPS_ECORRUPT;
        if (!scan)
            goto done;
    }

    for (uint32_t s = 0; s < nsec; s++) {
        if (L.rc != 0 && !scan)
            break;
        /* A short file is caught before any large section is read, by the
         * name of the first section it cuts (state names are known by now:
         * the optimizer section comes first). */
        if (e[s].id == ZPS_CKPT_SEC_PARAMS) {
            if (check_truncation(&L, e, nsec, s) && !scan)
                break;
        } else if (e[s].id < ZPS_CKPT_SEC_PARAMS && e[s].offset + e[s].length > L.size) {
            check_truncation(&L, e, s + 1, s);
        }
        if (e[s].offset + e[s].length > L.size)
            continue; /* recorded as truncated */
        switch (e[s].id) {
        case ZPS_CKPT_SEC_SHARD:
            load_shard(&L, s, &e[s]);
            break;
        case ZPS_CKPT_SEC_OPTIMIZER:
            load_optimizer(&L, s, &e[s], nsec - 4 - (assign ? 1 : 0));
            if (L.have_opt) {
                for (uint32_t i = 0; i < L.c.nstate; i++) {
                    uint32_t k = 4 + i;
                    section_name(e[k].id, L.c.state_names[i], e[k].name, sizeof(e[k].name));
                    if (scan)
                        snprintf(scan->sections[k].name, sizeof(scan->sections[k].name), "%s",
                                 e[k].name);
                }
            }
            break;
        case ZPS_CKPT_SEC_WORKERS:
            load_workers(&L, s, &e[s]);
            break;
        case ZPS_CKPT_SEC_PARAMS:
            load_array(&L, s, &e[s], &L.c.params);
            break;
        case ZPS_CKPT_SEC_ASSIGN:
            load_assign(&L, s, &e[s]);
            break;
        default:
            load_array(&L, s, &e[s], &L.c.state[e[s].id - ZPS_CKPT_SEC_STATE]);
            break;
        }
    }

    /* The sections' contents together: clocks a shard can reach. */
    if ((L.rc == 0 || scan) && L.have_shard && L.have_opt && L.have_workers) {
        char msg[200];
        uint32_t ws = 0;
        while (ws < nsec && e[ws].id != ZPS_CKPT_SEC_WORKERS)
            ws++;
        if (check_clocks(&L.c, msg, sizeof(msg)) != 0)
            section_bad(&L, ws, ZPS_ECORRUPT, "section 'workers': implausible clocks: %s", msg);
    }

done:
    if (L.fd >= 0)
        close(L.fd);
    free(L.buf);
    if (scan) {
        scan->have_shard = L.have_shard;
        scan->have_optimizer = L.have_opt;
        scan->have_workers = L.have_workers;
        /* the arrays it holds (pushed, live, dropped, the assignment's) move with it */
        scan->meta = L.c;
        for (int i = 0; i < ZPS_CKPT_MAX_STATE; i++) {
            free(scan->meta.state[i]);
            scan->meta.state[i] = NULL;
        }
        free(scan->meta.params);
        scan->meta.params = NULL;
    } else if (L.rc == 0 && out) {
        *out = L.c;
    } else {
        zps_ckpt_fini(&L.c);
    }
    return L.rc;
}

int zps_ckpt_read(const char *path, zps_ckpt_t *out, char *why, size_t why_size)
{
    if (path == NULL || out == NULL) {
        zps_set_reason(why, why_size, "no path or no output");
        return ZPS_EINVAL;
    }
    return load(path, NULL, true, out, why, why_size);
}

int zps_ckpt_verify(const char *path, zps_ckpt_scan_t *scan, char *why, size_t why_size)
{
    if (scan)
        memset(scan, 0, sizeof(*scan));
    if (path == NULL || scan == NULL) {
        zps_set_reason(why, why_size, "no path or no output");
        return ZPS_EINVAL;
    }
    return load(path, scan, false, NULL, why, why_size);
}

int zps_ckpt_check_shard(const zps_ckpt_t *c, uint32_t index, uint32_t count, uint64_t total_or_0,
                         char *why, size_t why_size)
{
    if (c->shard_index != index || c->shard_count != count) {
        zps_set_reason(why, why_size,
                       "the checkpoint is of shard %" PRIu32 "/%" PRIu32 ", this is shard %" PRIu32
                       "/%" PRIu32,
                       c->shard_index, c->shard_count, index, count);
        return ZPS_ERANGE;
    }
    if (total_or_0 != 0 && c->total != total_or_0) {
        zps_set_reason(why, why_size,
                       "the checkpoint holds a model of %" PRIu64
                       " elements, this one has %" PRIu64,
                       c->total, total_or_0);
        return ZPS_ESIZE;
    }
    zps_range_t rule;
    if (zps_shard_range(c->total, index, count, &rule) != 0 || rule.lo != c->range.lo ||
        rule.hi != c->range.hi) {
        zps_set_reason(why, why_size,
                       "the checkpoint's range [%" PRIu64 ", %" PRIu64 ") is not shard %" PRIu32
                       "/%" PRIu32 "'s range [%" PRIu64 ", %" PRIu64 ") of a model of %" PRIu64
                       " elements",
                       c->range.lo, c->range.hi, index, count, rule.lo, rule.hi, c->total);
        return ZPS_ERANGE;
    }
    return 0;
}
