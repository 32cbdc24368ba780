/*
 * test_checkpoint.c - the shard checkpoint file: round trips of every field,
 * the byte layout of docs/checkpoint.md, every refusal with its own message,
 * the newest-valid search, pruning, the write protocol's failure paths and
 * `zps checkpoint inspect`, and the optional assignment section of format
 * version 2 (with version-1 files still read).
 *
 * Each test works in its own mkdtemp directory, removed afterwards. Byte
 * offsets are computed here from the layout table in docs/checkpoint.md, not
 * taken from the code under test.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "assign.h"
#include "checkpoint.h"
#include "checksum.h"
#include "ckpt_inspect.h"
#include "error.h"
#include "optimizer.h"
#include "shard.h"

/* ---- the per-test directory ---- */

static char dir[256];

static int make_dir(void **state)
{
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/zps-test-ckpt-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP)
        return rmdir(path);
    if (chmod(path, 0600) != 0 && errno != ENOENT)
        return -1;
    return unlink(path);
}

static int remove_dir(void **state)
{
    (void)state;
    return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *in_dir(const char *name)
{
    static char path[4][512];
    static int turn;
    turn = (turn + 1) % 4;
    snprintf(path[turn], sizeof(path[turn]), "%s/%s", dir, name);
    return path[turn];
}

static const char *ckpt_name(uint32_t i, uint32_t s, uint64_t v)
{
    static char name[4][128];
    static int turn;
    turn = (turn + 1) % 4;
    snprintf(name[turn], sizeof(name[turn]),
             "shard-%" PRIu32 "-of-%" PRIu32 "-v%020" PRIu64 ".zpsckpt", i, s, v);
    return name[turn];
}

/* The names in the directory, sorted, joined by spaces. */
static const char *listing(void)
{
    static char out[4096];
    char *names[256];
    size_t n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 256) {
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            names[n++] = strdup(de->d_name);
    }
    closedir(d);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        strcat(out, i ? " " : "");
        strcat(out, names[i]);
        free(names[i]);
    }
    return out;
}

/* ---- files as bytes ---- */

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void flip_byte(const char *path, size_t at)
{
    size_t len;
    uint8_t *b = slurp(path, &len);
    assert_true(at < len);
    b[at] ^= 0x40;
    spit(path, b, len);
    free(b);
}

static void cut_to(const char *path, size_t len)
{
    assert_int_equal(truncate(path, (off_t)len), 0);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static void set_le32(uint8_t *p, uint32_t x)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(x >> (8 * i));
}

/* ---- a checkpoint with its own arrays ---- */

typedef struct fixture {
    zps_ckpt_t c;
    uint64_t pushed[65536];
    bool live[65536];
    uint64_t dropped[65536];
    bool finished[65536];
} fixture_t;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/*
 * Arbitrary finite float32 bit patterns, including -0, subnormals and the
 * largest finite value (a checkpoint holds no NaN or infinity).
 */
static float *random_floats(size_t n)
{
    float *x = malloc(n ? n * sizeof(float) : 1);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)rnd();
        if ((u & 0x7f800000u) == 0x7f800000u)
            u &= ~0x00800000u; /* Inf or NaN: the same bits with a finite exponent */
        if (i % 7 == 3)
            u = 0x80000000u; /* -0 */
        if (i % 11 == 5)
            u = 0xff7fffffu; /* -FLT_MAX */
        if (i % 13 == 6)
            u = 0x00000001u; /* the smallest subnormal */
        memcpy(&x[i], &u, sizeof(u));
    }
    return x;
}

/*
 * Shard index/count of a model of `total` elements, with `kind`'s state
 * arrays, W workers with mixed liveness and counts. Every optimizer
 * hyperparameter is set to a non-default value.
 */
static fixture_t *make_fixture(uint32_t index, uint32_t count, uint64_t total, zps_opt_kind_t kind,
                               bool nesterov, zps_mode_t mode, uint32_t workers, uint64_t version)
{
    fixture_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    zps_ckpt_t *c = &f->c;
    c->shard_index = index;
    c->shard_count = count;
    c->total = total;
    assert_int_equal(zps_shard_range(total, index, count, &c->range), 0);
    c->version = version;

    zps_opt_config_t *o = &c->opt;
    zps_opt_config_default(o);
    o->kind = kind;
    o->nesterov = nesterov;
    o->lr = 0.0123;
    o->momentum = 0.875;
    o->beta1 = 0.81;
    o->beta2 = 0.9993;
    o->eps = 3e-7;
    o->weight_decay = 0.0625;
    o->schedule = ZPS_SCHED_COSINE;
    o->step_every = 17;
    o->gamma = 0.37;
    o->cosine_steps = 5000;
    o->lr_min = 1.5e-4;
    o->warmup = 33;
    c->opt_steps = version + 1000; /* distinct from the version on purpose */

    c->mode = mode;
    c->workers = workers;
    c->ssp_bound = mode == ZPS_MODE_SSP ? 3 : 0;
    c->backup = mode == ZPS_MODE_BSP && workers > 2 ? 2 : 0;
    /* Distinct clocks a shard can reach (check_clocks): under BSP none past
     * the version; under SSP and ASP, worker 0 alone accounts for it. The
     * largest use the high bytes the 2^53 limit leaves. */
    for (uint32_t w = 0; w < workers; w++) {
        uint64_t back = w % 3 < version ? w % 3 : version;
        f->pushed[w] = mode == ZPS_MODE_BSP ? version - back
                                            : version + (w % 3) + (uint64_t)w * 1000000007ull;
        f->live[w] = w % 2 == 0 || w == 3;
        f->dropped[w] = (uint64_t)w * w + (w == 1 ? ZPS_CKPT_CLOCK_LIMIT - 6 : 0);
    }
    c->pushed = f->pushed;
    c->live = f->live;
    c->dropped = f->dropped;

    size_t len = (size_t)zps_range_len(c->range);
    c->params = random_floats(len);
    zps_optimizer_t *opt;
    assert_int_equal(zps_optimizer_new(o, 0, &opt), 0);
    c->nstate = (uint32_t)zps_optimizer_state_count(opt);
    for (uint32_t i = 0; i < c->nstate; i++) {
        const char *name;
        zps_optimizer_state(opt, i, &name);
        snprintf(c->state_names[i], sizeof(c->state_names[i]), "%s", name);
        c->state[i] = random_floats(len);
    }
    zps_optimizer_free(opt);
    return f;
}

static void free_fixture(fixture_t *f)
{
    free(f->c.params);
    for (int i = 0; i < ZPS_CKPT_MAX_STATE; i++)
        free(f->c.state[i]);
    zps_assign_state_fini(&f->c.assign); /* a snapshot the test attached, if any */
    free(f);
}

/* Every field, arrays bit for bit. */
static void assert_same(const zps_ckpt_t *a, const zps_ckpt_t *b)
{
    assert_int_equal(a->shard_index, b->shard_index);
    assert_int_equal(a->shard_count, b->shard_count);
    assert_int_equal(a->total, b->total);
    assert_int_equal(a->range.lo, b->range.lo);
    assert_int_equal(a->range.hi, b->range.hi);
    assert_int_equal(a->version, b->version);
    const zps_opt_config_t *x = &a->opt, *y = &b->opt;
    assert_int_equal(x->kind, y->kind);
    assert_int_equal(x->nesterov, y->nesterov);
    assert_memory_equal(&x->lr, &y->lr, sizeof(double));
    assert_memory_equal(&x->momentum, &y->momentum, sizeof(double));
    assert_memory_equal(&x->beta1, &y->beta1, sizeof(double));
    assert_memory_equal(&x->beta2, &y->beta2, sizeof(double));
    assert_memory_equal(&x->eps, &y->eps, sizeof(double));
    assert_memory_equal(&x->weight_decay, &y->weight_decay, sizeof(double));
    assert_int_equal(x->schedule, y->schedule);
    assert_int_equal(x->step_every, y->step_every);
    assert_memory_equal(&x->gamma, &y->gamma, sizeof(double));
    assert_int_equal(x->cosine_steps, y->cosine_steps);
    assert_memory_equal(&x->lr_min, &y->lr_min, sizeof(double));
    assert_int_equal(x->warmup, y->warmup);
    assert_int_equal(a->opt_steps, b->opt_steps);
    assert_int_equal(a->mode, b->mode);
    assert_int_equal(a->workers, b->workers);
    assert_int_equal(a->ssp_bound, b->ssp_bound);
    assert_int_equal(a->backup, b->backup);
    for (uint32_t w = 0; w < a->workers; w++) {
        assert_int_equal(a->pushed[w], b->pushed[w]);
        assert_int_equal(a->live[w], b->live[w]);
        assert_int_equal(a->dropped[w], b->dropped[w]);
    }
    size_t len = (size_t)zps_range_len(a->range);
    if (len)
        assert_memory_equal(a->params, b->params, len * sizeof(float));
    assert_int_equal(a->nstate, b->nstate);
    for (uint32_t i = 0; i < a->nstate; i++) {
        assert_string_equal(a->state_names[i], b->state_names[i]);
        if (len)
            assert_memory_equal(a->state[i], b->state[i], len * sizeof(float));
    }
}

/* Writes f and returns the path. */
static const char *write_fixture(const fixture_t *f)
{
    static char path[4][512];
    static int turn;
    turn = (turn + 1) % 4;
    char why[512] = "";
    int rc = zps_ckpt_write(dir, &f->c, path[turn], sizeof(path[turn]), why, sizeof(why));
    if (rc != 0)
        fail_msg("zps_ckpt_write: %s: %s", zps_errname(rc), why);
    return path[turn];
}

/* Byte offsets of the sections, from docs/checkpoint.md's layout. */
typedef struct layout {
    size_t table_end, shard, opt, workers, params, state[2], assign, end;
} layout_t;

/*
 * The assignment section's size by docs/checkpoint.md: 36 bytes, 8 per
 * queued lease, 72 per worker, and with a plan E * B / 8 + 1 bytes of
 * completion bits, B = ceil(N / b).
 */
static size_t assign_bytes(const zps_assign_state_t *s)
{
    size_t n = 36 + 8 * s->nqueue + 72 * (size_t)s->workers;
    if (s->plan.examples > 0) {
        uint64_t per_epoch = (s->plan.examples + s->plan.batch - 1) / s->plan.batch;
        n += (size_t)(per_epoch * s->plan.epochs / 8 + 1);
    }
    return n;
}

static layout_t layout_of(const zps_ckpt_t *c)
{
    layout_t l;
    size_t len = (size_t)zps_range_len(c->range);
    l.table_end = 64 + 24 * (4 + (size_t)c->nstate + (c->have_assign ? 1 : 0));
    l.shard = l.table_end;
    l.opt = l.shard + 40;
    l.workers = l.opt + 112 + 16 * (size_t)c->nstate;
    l.params = l.workers + 16 + 17 * (size_t)c->workers;
    l.state[0] = l.params + 4 * len;
    l.state[1] = l.state[0] + 4 * len;
    l.assign = l.params + 4 * len * (1 + (size_t)c->nstate);
    l.end = l.assign + (c->have_assign ? assign_bytes(&c->assign) : 0);
    return l;
}

/* Reads path expecting refusal `code` with exactly `msg`. */
static void expect_refused(const char *path, int code, const char *msg)
{
    zps_ckpt_t out;
    char why[512] = "";
    int rc = zps_ckpt_read(path, &out, why, sizeof(why));
    if (rc != code || strcmp(why, msg) != 0)
        fail_msg("read %s: got %s \"%s\", want %s \"%s\"", path, zps_errname(rc), why,
                 zps_errname(code), msg);
}

/* ---- round trips ---- */

static void test_round_trip_adam(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(1, 3, 1000, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 5, 4242);
    assert_int_equal(f->c.nstate, 2);
    const char *path = write_fixture(f);
    assert_string_equal(path, in_dir("shard-1-of-3-v00000000000000004242.zpsckpt"));
    assert_string_equal(listing(), "shard-1-of-3-v00000000000000004242.zpsckpt");

    zps_ckpt_t out;
    char why[256] = "";
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
    assert_same(&f->c, &out);
    assert_string_equal(out.state_names[0], "m");
    assert_string_equal(out.state_names[1], "v");
    assert_int_equal(zps_ckpt_check_shard(&out, 1, 3, 1000, why, sizeof(why)), 0);
    assert_int_equal(zps_ckpt_check_shard(&out, 1, 3, 0, why, sizeof(why)), 0);
    zps_ckpt_fini(&out);
    zps_ckpt_fini(&out); /* a finished struct is zeroed: fini again is harmless */
    free_fixture(f);
}

static void test_round_trip_every_optimizer_and_mode(void **state)
{
    (void)state;
    const struct {
        zps_opt_kind_t kind;
        bool nesterov;
        zps_mode_t mode;
        uint32_t nstate;
        const char *name0;
    } cases[] = {
        {ZPS_OPT_SGD, false, ZPS_MODE_ASP, 0, NULL},
        {ZPS_OPT_MOMENTUM, false, ZPS_MODE_SSP, 1, "velocity"},
        {ZPS_OPT_MOMENTUM, true, ZPS_MODE_BSP, 1, "velocity"},
        {ZPS_OPT_ADAMW, false, ZPS_MODE_SSP, 2, "m"},
        {ZPS_OPT_ADAGRAD, false, ZPS_MODE_ASP, 1, "sum_sq"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        fixture_t *f =
            make_fixture(0, 2, 77, cases[k].kind, cases[k].nesterov, cases[k].mode, 3, k);
        f->c.opt.schedule = (zps_sched_kind_t)(k % 3);
        const char *path = write_fixture(f);
        zps_ckpt_t out;
        char why[256] = "";
        assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
        assert_same(&f->c, &out);
        assert_int_equal(out.nstate, cases[k].nstate);
        if (cases[k].name0)
            assert_string_equal(out.state_names[0], cases[k].name0);
        zps_ckpt_fini(&out);
        free_fixture(f);
    }
}

/* N < S: shard 1 of 8 of a 3-element model owns nothing and still checkpoints. */
static void test_round_trip_empty_range(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(1, 8, 3, ZPS_OPT_MOMENTUM, true, ZPS_MODE_BSP, 5, 9);
    assert_int_equal(zps_range_len(f->c.range), 0);
    free(f->c.params);
    free(f->c.state[0]);
    f->c.params = NULL; /* NULL is allowed for an empty array */
    f->c.state[0] = NULL;
    const char *path = write_fixture(f);

    size_t len;
    uint8_t *b = slurp(path, &len);
    assert_int_equal(len, layout_of(&f->c).end);
    free(b);

    zps_ckpt_t out;
    char why[256] = "";
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
    assert_same(&f->c, &out);
    assert_true(out.opt.nesterov);
    zps_ckpt_fini(&out);
    free_fixture(f);
}

/* Arrays larger than the I/O buffer, and the largest worker count. */
static void test_round_trip_large(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(2, 3, 450003, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 65536, 123456789);
    const char *path = write_fixture(f);
    zps_ckpt_t out;
    char why[256] = "";
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
    assert_same(&f->c, &out);
    zps_ckpt_fini(&out);
    free_fixture(f);
}

/* Writing the same version again replaces the file whole. */
static void test_rewrite_same_version(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 1, 10, ZPS_OPT_SGD, false, ZPS_MODE_ASP, 2, 5);
    write_fixture(f);
    f->c.params[0] = 42.0f;
    f->c.pushed[1] = 77;
    const char *path = write_fixture(f);
    assert_string_equal(listing(), "shard-0-of-1-v00000000000000000005.zpsckpt");
    zps_ckpt_t out;
    char why[256] = "";
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
    assert_true(out.params[0] == 42.0f);
    assert_int_equal(out.pushed[1], 77);
    zps_ckpt_fini(&out);
    free_fixture(f);
}

/*
 * The point of it all: an optimizer restored from a checkpoint continues
 * bit for bit like the one that was never interrupted.
 */
static void test_restored_optimizer_continues_exactly(void **state)
{
    (void)state;
    const size_t n = 37;
    fixture_t *f = make_fixture(0, 1, n, ZPS_OPT_ADAMW, false, ZPS_MODE_BSP, 1, 0);
    zps_optimizer_t *a, *b;
    assert_int_equal(zps_optimizer_new(&f->c.opt, n, &a), 0);
    float p[37], g[37];
    for (size_t i = 0; i < n; i++)
        p[i] = (float)i * 0.25f - 3.0f;
    for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < n; i++)
            g[i] = (float)((int)(i * 7 + (size_t)step * 3) % 11) - 5.0f;
        zps_optimizer_step(a, p, g, 1.0);
    }

    /* Checkpoint a's state. */
    memcpy(f->c.params, p, sizeof(p));
    for (uint32_t i = 0; i < f->c.nstate; i++)
        memcpy(f->c.state[i], zps_optimizer_state(a, i, NULL), sizeof(p));
    f->c.opt_steps = zps_optimizer_steps(a);
    f->c.version = 3;
    f->pushed[0] = 3;
    const char *path = write_fixture(f);

    /* Restore into a fresh optimizer b. */
    zps_ckpt_t out;
    char why[256] = "";
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
    assert_int_equal(zps_optimizer_new(&out.opt, n, &b), 0);
    assert_int_equal(zps_optimizer_state_count(b), out.nstate);
    for (uint32_t i = 0; i < out.nstate; i++) {
        const char *name;
        float *s = zps_optimizer_state(b, i, &name);
        assert_string_equal(name, out.state_names[i]);
        memcpy(s, out.state[i], sizeof(p));
    }
    zps_optimizer_set_steps(b, out.opt_steps);
    float q[37];
    memcpy(q, out.params, sizeof(q));

    for (int step = 3; step < 8; step++) {
        for (size_t i = 0; i < n; i++)
            g[i] = (float)((int)(i * 7 + (size_t)step * 3) % 11) - 5.0f;
        zps_optimizer_step(a, p, g, 1.0);
        zps_optimizer_step(b, q, g, 1.0);
    }
    assert_memory_equal(p, q, sizeof(p));
    for (uint32_t i = 0; i < out.nstate; i++)
        assert_memory_equal(zps_optimizer_state(a, i, NULL), zps_optimizer_state(b, i, NULL),
                            sizeof(p));
    zps_optimizer_free(a);
    zps_optimizer_free(b);
    zps_ckpt_fini(&out);
    free_fixture(f);
}

/* ---- the byte layout is the documented one ---- */

static void test_layout_matches_docs(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(1, 2, 20, ZPS_OPT_ADAM, false, ZPS_MODE_SSP, 3, 0x0012030405060708);
    const char *path = write_fixture(f);
    size_t len;
    uint8_t *b = slurp(path, &len);
    layout_t l = layout_of(&f->c);
    assert_int_equal(len, l.end);

    /* Header. */
    assert_memory_equal(b, "ZPSCKPT\0", 8);
    assert_int_equal(le32(b + 8), 2);
    assert_int_equal(le32(b + 12), 64);
    assert_int_equal(le64(b + 16), len);
    assert_int_equal(le32(b + 24), 6);
    assert_int_equal(le32(b + 28), zps_crc32c(0, b + 64, 6 * 24));
    for (int i = 32; i < 60; i++)
        assert_int_equal(b[i], 0);
    assert_int_equal(le32(b + 60), zps_crc32c(0, b, 60));

    /* Table: ids, offsets, lengths, CRCs. */
    const uint32_t ids[6] = {1, 2, 3, 4, 0x100, 0x101};
    const size_t offs[6] = {l.shard, l.opt, l.workers, l.params, l.state[0], l.state[1]};
    const size_t ends[6] = {l.opt, l.workers, l.params, l.state[0], l.state[1], l.end};
    for (int s = 0; s < 6; s++) {
        const uint8_t *e = b + 64 + 24 * s;
        assert_int_equal(le32(e), ids[s]);
        assert_int_equal(le64(e + 8), offs[s]);
        assert_int_equal(le64(e + 16), ends[s] - offs[s]);
        assert_int_equal(le32(e + 4), zps_crc32c(0, b + offs[s], ends[s] - offs[s]));
    }

    /* Shard section. */
    const uint8_t *p = b + l.shard;
    assert_int_equal(le32(p), 1);
    assert_int_equal(le32(p + 4), 2);
    assert_int_equal(le64(p + 8), 20);
    assert_int_equal(le64(p + 16), 10);
    assert_int_equal(le64(p + 24), 20);
    assert_int_equal(le64(p + 32), 0x0012030405060708);
    assert_int_equal(p[32], 0x08); /* little-endian */

    /* Optimizer section: enums, doubles as their bits, counts, names. */
    p = b + l.opt;
    assert_int_equal(le32(p), ZPS_OPT_ADAM);
    assert_int_equal(le32(p + 4), ZPS_SCHED_COSINE);
    assert_int_equal(le32(p + 8), 0);
    assert_int_equal(le32(p + 12), 2);
    const double dbl[8] = {0.0123, 0.875, 0.81, 0.9993, 3e-7, 0.0625, 0.37, 1.5e-4};
    for (int i = 0; i < 8; i++) {
        uint64_t bits;
        memcpy(&bits, &dbl[i], 8);
        assert_int_equal(le64(p + 16 + 8 * i), bits);
    }
    assert_int_equal(le64(p + 80), 17);
    assert_int_equal(le64(p + 88), 5000);
    assert_int_equal(le64(p + 96), 33);
    assert_int_equal(le64(p + 104), f->c.opt_steps);
    assert_memory_equal(p + 112, "m\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
    assert_memory_equal(p + 128, "v\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);

    /* Workers section. */
    p = b + l.workers;
    assert_int_equal(le32(p), ZPS_MODE_SSP);
    assert_int_equal(le32(p + 4), 3);
    assert_int_equal(le32(p + 8), 3);
    assert_int_equal(le32(p + 12), 0);
    for (int w = 0; w < 3; w++) {
        assert_int_equal(le64(p + 16 + 8 * w), f->pushed[w]);
        assert_int_equal(le64(p + 16 + 24 + 8 * w), f->dropped[w]);
        assert_int_equal(p[16 + 48 + w], f->live[w] ? 1 : 0);
    }

    /* Arrays: float32 bit patterns, little-endian. */
    for (size_t i = 0; i < 10; i++) {
        uint32_t bits;
        memcpy(&bits, &f->c.params[i], 4);
        assert_int_equal(le32(b + l.params + 4 * i), bits);
        memcpy(&bits, &f->c.state[1][i], 4);
        assert_int_equal(le32(b + l.state[1] + 4 * i), bits);
    }
    free(b);
    free_fixture(f);
}

/* ---- refusals, each with its own message ---- */

static void test_refuse_truncated(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 2, 100, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 5, 8);
    layout_t l = layout_of(&f->c);
    char msg[256];
    const char *path = write_fixture(f);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 1093); /* the worked example in docs/checkpoint.md */
    assert_int_equal(l.end, 1093);

    /* Inside params. */
    cut_to(path, l.params + 10);
    snprintf(msg, sizeof(msg), "truncated: section 'params' ends at byte %zu, file has %zu",
             l.state[0], l.params + 10);
    expect_refused(path, ZPS_ECORRUPT, msg);

    /* Inside the last state array: named by its optimizer name. */
    path = write_fixture(f);
    cut_to(path, l.end - 1);
    snprintf(msg, sizeof(msg), "truncated: section 'optimizer v' ends at byte %zu, file has %zu",
             l.end, l.end - 1);
    expect_refused(path, ZPS_ECORRUPT, msg);

    /* Inside the workers section. */
    path = write_fixture(f);
    cut_to(path, l.workers + 3);
    snprintf(msg, sizeof(msg), "truncated: section 'workers' ends at byte %zu, file has %zu",
             l.params, l.workers + 3);
    expect_refused(path, ZPS_ECORRUPT, msg);

    /* Inside the section table, inside the header, empty. */
    path = write_fixture(f);
    cut_to(path, 100);
    snprintf(msg, sizeof(msg), "truncated: section table ends at byte %zu, file has 100",
             l.table_end);
    expect_refused(path, ZPS_ECORRUPT, msg);
    cut_to(path, 30);
    expect_refused(path, ZPS_ECORRUPT, "truncated: header ends at byte 64, file has 30");
    cut_to(path, 0);
    expect_refused(path, ZPS_ECORRUPT, "truncated: header ends at byte 64, file has 0");

    /* Bytes after the last section. */
    path = write_fixture(f);
    FILE *fp = fopen(path, "ab");
    fputc(0, fp);
    fclose(fp);
    snprintf(msg, sizeof(msg),
             "file has %zu bytes, the header says %zu: trailing bytes after the last section",
             l.end + 1, l.end);
    expect_refused(path, ZPS_ECORRUPT, msg);
    free_fixture(f);
}

static void test_refuse_flipped_byte_in_each_part(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 2, 100, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 5, 8);
    layout_t l = layout_of(&f->c);
    const struct {
        size_t at;
        const char *msg;
    } cases[] = {
        {20, "header checksum mismatch"}, /* the recorded file size */
        {40, "header checksum mismatch"}, /* a reserved byte */
        {61, "header checksum mismatch"}, /* the header's own CRC */
        {64 + 24 + 9, "section table checksum mismatch"},
        {l.shard + 33, "section 'shard' checksum mismatch"},
        {l.opt + 17, "section 'optimizer' checksum mismatch"},
        {l.opt + 113, "section 'optimizer' checksum mismatch"}, /* a state name */
        {l.workers + 16 + 8, "section 'workers' checksum mismatch"},
        {l.params + 4 * 7 + 2, "section 'params' checksum mismatch"},
        {l.state[0] + 1, "section 'optimizer m' checksum mismatch"},
        {l.end - 1, "section 'optimizer v' checksum mismatch"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const char *path = write_fixture(f);
        flip_byte(path, cases[k].at);
        expect_refused(path, ZPS_ECORRUPT, cases[k].msg);
    }
    free_fixture(f);
}

static void test_refuse_magic_and_version(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 1, 10, ZPS_OPT_SGD, false, ZPS_MODE_BSP, 1, 1);
    const char *path = write_fixture(f);
    size_t len;
    uint8_t *b = slurp(path, &len);

    /* Wrong magic, also on a short file. */
    uint8_t *x = malloc(len);
    memcpy(x, b, len);
    x[3] = 'X';
    spit(path, x, len);
    expect_refused(path, ZPS_ECORRUPT, "bad magic: not a zps checkpoint");
    spit(path, (const uint8_t *)"PK\003\004", 4);
    expect_refused(path, ZPS_ECORRUPT, "bad magic: not a zps checkpoint");

    /* A newer writer's file: version 7 with a consistent header. */
    memcpy(x, b, len);
    set_le32(x + 8, 7);
    set_le32(x + 60, zps_crc32c(0, x, 60));
    spit(path, x, len);
    expect_refused(path, ZPS_ECORRUPT,
                   "unsupported format version 7 (this build reads versions 1 and 2)");

    /* The same number from a damaged version field says so. */
    memcpy(x, b, len);
    set_le32(x + 8, 7);
    spit(path, x, len);
    expect_refused(path, ZPS_ECORRUPT,
                   "unsupported format version 7 (this build reads versions 1 and 2), or a "
                   "corrupt header: its checksum does not match");

    /* Not a file, not there. */
    zps_ckpt_t out;
    char why[512];
    assert_int_equal(zps_ckpt_read(dir, &out, why, sizeof(why)), ZPS_EIO);
    assert_non_null(strstr(why, "is not a regular file"));
    assert_int_equal(zps_ckpt_read(in_dir("missing"), &out, why, sizeof(why)), ZPS_EIO);
    assert_non_null(strstr(why, "No such file or directory"));
    free(x);
    free(b);
    free_fixture(f);
}

/*
 * After a change inside section `section` (its index in the table) of the
 * file image x: recomputes that section's CRC, then the table's, then the
 * header's, so that only the change itself can be refused.
 */
static void reseal(uint8_t *x, uint32_t section)
{
    uint8_t *e = x + 64 + 24 * section;
    set_le32(e + 4, zps_crc32c(0, x + le64(e + 8), le64(e + 16)));
    set_le32(x + 28, zps_crc32c(0, x + 64, 24 * (size_t)le32(x + 24)));
    set_le32(x + 60, zps_crc32c(0, x, 60));
}

/*
 * A file whose checksums are right but whose contents are not a valid shard
 * state (a writer's bug, or a hand edit with the CRCs recomputed).
 */
static void test_refuse_invalid_contents(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 1, 10, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 3, 1);
    layout_t l = layout_of(&f->c);
    const char *path = write_fixture(f);
    size_t len;
    uint8_t *b = slurp(path, &len);
    const struct {
        size_t at;
        uint32_t value;
        int section; /* table entry whose CRC to fix */
        const char *msg;
    } cases[] = {
        {l.opt + 40 + 4, 0x3ff00000, 1,
         "section 'optimizer': invalid optimizer configuration: --beta2 must be in [0, 1) (got 1)"},
        {l.opt, 9, 1, "section 'optimizer': unknown optimizer kind 9"},
        {l.opt + 112, 'q', 1,
         "section 'optimizer': optimizer adam's state array 0 is 'm', not 'q'"},
        {l.workers + 12, 3, 2,
         "section 'workers': invalid consistency configuration: --backup-workers must be less "
         "than --workers"},
        {l.workers + 16 + 48 + 1, 7, 2, "section 'workers': live[1] is 7, not 0 or 1"},
        {l.shard + 24, 11, 0, "section 'shard': range [0, 11) does not fit a model of 10 elements"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        uint8_t *x = malloc(len);
        memcpy(x, b, len);
        if (cases[k].value <= 0xff && cases[k].at >= l.opt + 112 && cases[k].at < l.workers)
            x[cases[k].at] = (uint8_t)cases[k].value;
        else if (cases[k].at == l.workers + 16 + 48 + 1)
            x[cases[k].at] = (uint8_t)cases[k].value;
        else
            set_le32(x + cases[k].at, cases[k].value);
        reseal(x, cases[k].section);
        spit(path, x, len);
        expect_refused(path, ZPS_ECORRUPT, cases[k].msg);
        free(x);
    }
    free(b);
    free_fixture(f);
}

/*
 * Clocks no shard can reach, with every checksum right: a next clock of
 * 2^64 - 1 (its next push would wrap the worker to clock 0), a BSP worker
 * past the version, more SSP/ASP steps than pushes. The reader refuses
 * each, and the writer never writes one.
 */
static void forge_clock(const char *path, const uint8_t *b, size_t len, size_t at, uint64_t v)
{
    uint8_t *x = malloc(len);
    assert_non_null(x);
    memcpy(x, b, len);
    set_le32(x + at, (uint32_t)v);
    set_le32(x + at + 4, (uint32_t)(v >> 32));
    reseal(x, 2); /* the workers section */
    spit(path, x, len);
    free(x);
}

static void test_refuse_implausible_clocks(void **state)
{
    (void)state;
    /* BSP, W = 3, version 1: pushed {1, 0, 0}, dropped {0, 1 + 2^53 - 6, 4}. */
    fixture_t *f = make_fixture(0, 1, 10, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 3, 1);
    layout_t l = layout_of(&f->c);
    const char *path = write_fixture(f);
    size_t len;
    uint8_t *b = slurp(path, &len);
    forge_clock(path, b, len, l.workers + 16 + 8 * 2, UINT64_MAX);
    expect_refused(path, ZPS_ECORRUPT,
                   "section 'workers': implausible clocks: worker 2's next clock "
                   "18446744073709551615, dropped 4: at most 2^53 - 1");
    forge_clock(path, b, len, l.workers + 16 + 8 * 1, 2);
    expect_refused(path, ZPS_ECORRUPT,
                   "section 'workers': implausible clocks: worker 1's next clock 2 is past the "
                   "version 1 (under BSP it is at most the version)");
    forge_clock(path, b, len, l.workers + 16 + 8 * 1, 1); /* at the version: fine */
    zps_ckpt_t out;
    char why[512] = "";
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
    zps_ckpt_fini(&out);
    forge_clock(path, b, len, l.shard + 32, ZPS_CKPT_CLOCK_LIMIT); /* the version */
    uint8_t *x = slurp(path, &len);
    reseal(x, 0); /* the shard section */
    spit(path, x, len);
    free(x);
    expect_refused(path, ZPS_ECORRUPT,
                   "section 'workers': implausible clocks: version 9007199254740992, optimizer "
                   "step 1001: at most 2^53 - 1");
    free(b);

    /* The writer refuses the same. */
    zps_ckpt_t c = f->c;
    uint64_t pushed[3] = {1, 0, UINT64_MAX};
    c.pushed = pushed;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: worker 2's next clock 18446744073709551615, "
                             "dropped 4: at most 2^53 - 1");
    free_fixture(f);

    /* ASP, W = 2, version 5: pushed {5, 1000000013}. Five steps need five pushes. */
    f = make_fixture(0, 1, 10, ZPS_OPT_SGD, false, ZPS_MODE_ASP, 2, 5);
    l = layout_of(&f->c);
    path = write_fixture(f);
    b = slurp(path, &len);
    forge_clock(path, b, len, l.workers + 16 + 8 * 1, 0);
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0); /* 5 + 0 pushes */
    zps_ckpt_fini(&out);
    forge_clock(path, b, len, l.workers + 16, 4);
    /* worker 1's stays 1000000013: still enough */
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
    zps_ckpt_fini(&out);
    uint8_t *y = malloc(len);
    assert_non_null(y);
    memcpy(y, b, len);
    set_le32(y + l.workers + 16 + 8, 0);
    set_le32(y + l.workers + 16 + 12, 0);
    forge_clock(path, y, len, l.workers + 16, 4);
    expect_refused(path, ZPS_ECORRUPT,
                   "section 'workers': implausible clocks: version 5 is more steps than the 4 "
                   "pushes the workers' next clocks account for");
    free(y);
    free(b);
    free_fixture(f);
}

static void test_check_shard(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(1, 3, 1000, ZPS_OPT_SGD, false, ZPS_MODE_BSP, 2, 1);
    char why[256];
    assert_int_equal(zps_ckpt_check_shard(&f->c, 1, 3, 1000, why, sizeof(why)), 0);
    assert_int_equal(zps_ckpt_check_shard(&f->c, 0, 3, 1000, why, sizeof(why)), ZPS_ERANGE);
    assert_string_equal(why, "the checkpoint is of shard 1/3, this is shard 0/3");
    assert_int_equal(zps_ckpt_check_shard(&f->c, 1, 4, 0, why, sizeof(why)), ZPS_ERANGE);
    assert_string_equal(why, "the checkpoint is of shard 1/3, this is shard 1/4");
    assert_int_equal(zps_ckpt_check_shard(&f->c, 1, 3, 999, why, sizeof(why)), ZPS_ESIZE);
    assert_string_equal(why, "the checkpoint holds a model of 1000 elements, this one has 999");
    f->c.range.lo += 1;
    assert_int_equal(zps_ckpt_check_shard(&f->c, 1, 3, 0, why, sizeof(why)), ZPS_ERANGE);
    assert_string_equal(why, "the checkpoint's range [334, 666) is not shard 1/3's range "
                             "[333, 666) of a model of 1000 elements");
    free_fixture(f);
}

/* ---- writing: bad input, and failures that must leave nothing behind ---- */

static void test_write_refuses_invalid(void **state)
{
    (void)state;
    char why[512];
    fixture_t *f = make_fixture(0, 2, 100, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 4, 1);
    zps_ckpt_t c = f->c;

    c.range.hi -= 1;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: range [0, 49) is not shard 0/2's range "
                             "[0, 50) of a model of 100 elements");
    c = f->c;
    c.opt.eps = 0;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: invalid optimizer configuration: --eps must "
                             "be > 0 and a normal float32 number (got 0)");
    c = f->c;
    c.nstate = 1;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: optimizer adam keeps 2 state arrays, not 1");
    c = f->c;
    strcpy(c.state_names[1], "w");
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: optimizer adam's state array 1 is 'v', not "
                             "'w'");
    c = f->c;
    c.workers = 0;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: invalid consistency configuration: "
                             "--workers must be between 1 and 65536");
    c = f->c;
    c.params = NULL;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: params is NULL for a range of 50 elements");
    c = f->c;
    c.shard_index = 2;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: shard 2/2 does not exist (need I < S)");
    assert_string_equal(listing(), "");
    free_fixture(f);
}

static void test_failed_write_leaves_nothing(void **state)
{
    (void)state;
    char why[1024];
    fixture_t *f = make_fixture(0, 1, 10000, ZPS_OPT_MOMENTUM, false, ZPS_MODE_BSP, 2, 3);

    /* The "directory" is a regular file: nothing can be created in it (even as root). */
    spit(in_dir("plain"), (const uint8_t *)"x", 1);
    assert_int_equal(zps_ckpt_write(in_dir("plain"), &f->c, NULL, 0, why, sizeof(why)), ZPS_EIO);
    assert_non_null(strstr(why, "Not a directory"));
    assert_string_equal(listing(), "plain");
    assert_int_equal(unlink(in_dir("plain")), 0);

    /* The file system refuses in the middle of the data (a file size limit
     * stands in for a full disk): the temporary file must go. */
    struct rlimit old, small = {.rlim_cur = 4096, .rlim_max = RLIM_INFINITY};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small.rlim_max = old.rlim_max;
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    int rc = zps_ckpt_write(dir, &f->c, NULL, 0, why, sizeof(why));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    assert_int_equal(rc, ZPS_EIO);
    assert_non_null(strstr(why, "File too large"));
    assert_true(strncmp(why, "write ", 6) == 0);
    assert_string_equal(listing(), "");

    /* The rename fails (the final name is a directory): the temporary goes,
     * the directory in the way stays. */
    const char *name = ckpt_name(0, 1, 3);
    assert_int_equal(mkdir(in_dir(name), 0700), 0);
    spit(in_dir("shard-0-of-1-v00000000000000000003.zpsckpt/keep"), (const uint8_t *)"k", 1);
    rc = zps_ckpt_write(dir, &f->c, NULL, 0, why, sizeof(why));
    assert_int_equal(rc, ZPS_EIO);
    assert_true(strncmp(why, "rename ", 7) == 0);
    assert_string_equal(listing(), name);

    /* An existing good file survives a failed rewrite of its version. */
    f->c.version = 4;
    const char *good = write_fixture(f);
    float keep0 = f->c.params[0];
    f->c.params[0] = keep0 + 1.0f;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    signal(SIGXFSZ, SIG_IGN);
    rc = zps_ckpt_write(dir, &f->c, NULL, 0, why, sizeof(why));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    assert_int_equal(rc, ZPS_EIO);
    zps_ckpt_t out;
    assert_int_equal(zps_ckpt_read(good, &out, why, sizeof(why)), 0);
    assert_memory_equal(&out.params[0], &keep0, sizeof(float));
    zps_ckpt_fini(&out);
    free_fixture(f);
}

/* ---- the newest valid checkpoint ---- */

static void test_find_latest_skips_bad_files(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 2, 100, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 5, 3);
    layout_t l = layout_of(&f->c);
    write_fixture(f);
    f->c.version = 7;
    f->c.params[0] = 7.0f;
    const char *v7 = write_fixture(f);
    f->c.version = 12;
    const char *v12 = write_fixture(f);
    cut_to(v12, l.params + 4);
    flip_byte(v7, l.params + 8);

    /* Decoys that must be ignored: other shards (newer), a temporary file, a
     * wrongly formatted name, another file. */
    fixture_t *other = make_fixture(1, 2, 100, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 5, 20);
    write_fixture(other);
    free_fixture(other);
    other = make_fixture(0, 3, 100, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 5, 30);
    write_fixture(other);
    free_fixture(other);
    spit(in_dir(".shard-0-of-2-v00000000000000000099.zpsckpt.tmp.1.2"), (const uint8_t *)"x", 1);
    spit(in_dir("shard-0-of-2-v99.zpsckpt"), (const uint8_t *)"x", 1);
    spit(in_dir("shard-0-of-2-v00000000000000000099.zpsckpt.bak"), (const uint8_t *)"x", 1);
    spit(in_dir("notes.txt"), (const uint8_t *)"x", 1);

    zps_ckpt_t out;
    char path[512], report[2048], want[2048];
    int rc = zps_ckpt_find_latest(dir, 0, 2, &out, path, sizeof(path), report, sizeof(report));
    if (rc != 0)
        fail_msg("find_latest: %s\n%s", zps_errname(rc), report);
    assert_string_equal(path, in_dir(ckpt_name(0, 2, 3)));
    assert_int_equal(out.version, 3);
    f->c.version = 3;
    f->c.params[0] = out.params[0];
    assert_same(&f->c, &out);
    zps_ckpt_fini(&out);
    snprintf(want, sizeof(want),
             "skipped %s: truncated: section 'params' ends at byte %zu, file has %zu\n"
             "skipped %s: section 'params' checksum mismatch\n",
             ckpt_name(0, 2, 12), l.state[0], l.params + 4, ckpt_name(0, 2, 7));
    assert_string_equal(report, want);

    /* At most version 10: v7 is bad, so v3 again; at most 2: none. */
    rc = zps_ckpt_find_at_most(dir, 0, 2, 10, &out, NULL, 0, report, sizeof(report));
    assert_int_equal(rc, 0);
    assert_int_equal(out.version, 3);
    zps_ckpt_fini(&out);
    rc = zps_ckpt_find_at_most(dir, 0, 2, 2, &out, NULL, 0, report, sizeof(report));
    assert_int_equal(rc, ZPS_EIO);
    snprintf(want, sizeof(want), "no checkpoint for shard 0/2 at version <= 2 in %s\n", dir);
    assert_string_equal(report, want);

    /* Nothing usable at all: every candidate listed, then the verdict. */
    assert_int_equal(unlink(in_dir(ckpt_name(0, 2, 3))), 0);
    rc = zps_ckpt_find_latest(dir, 0, 2, &out, path, sizeof(path), report, sizeof(report));
    assert_int_equal(rc, ZPS_ECORRUPT);
    assert_non_null(strstr(report, ckpt_name(0, 2, 12)));
    assert_non_null(strstr(report, ckpt_name(0, 2, 7)));
    snprintf(want, sizeof(want), "no usable checkpoint for shard 0/2 in %s\n", dir);
    assert_non_null(strstr(report, want));
    free_fixture(f);
}

/* A file must be the checkpoint its name says it is. */
static void test_find_latest_checks_names(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 2, 100, ZPS_OPT_SGD, false, ZPS_MODE_ASP, 2, 4);
    const char *v4 = write_fixture(f);
    fixture_t *g = make_fixture(1, 2, 100, ZPS_OPT_SGD, false, ZPS_MODE_ASP, 2, 6);
    const char *s1 = write_fixture(g);
    size_t len;
    uint8_t *b = slurp(v4, &len);
    spit(in_dir(ckpt_name(0, 2, 5)), b, len); /* v4's contents under v5's name */
    free(b);
    b = slurp(s1, &len);
    spit(in_dir(ckpt_name(0, 2, 6)), b, len); /* shard 1's file under shard 0's name */
    free(b);

    zps_ckpt_t out;
    char report[2048], want[2048];
    assert_int_equal(zps_ckpt_find_latest(dir, 0, 2, &out, NULL, 0, report, sizeof(report)), 0);
    assert_int_equal(out.version, 4);
    assert_int_equal(out.shard_index, 0);
    zps_ckpt_fini(&out);
    snprintf(want, sizeof(want),
             "skipped %s: the checkpoint is of shard 1/2, this is shard 0/2\n"
             "skipped %s: the file name says version 5, the checkpoint holds version 4\n",
             ckpt_name(0, 2, 6), ckpt_name(0, 2, 5));
    assert_string_equal(report, want);
    free_fixture(f);
    free_fixture(g);
}

static void test_find_latest_none(void **state)
{
    (void)state;
    zps_ckpt_t out;
    char report[1024], want[1024];
    assert_int_equal(zps_ckpt_find_latest(dir, 0, 2, &out, NULL, 0, report, sizeof(report)),
                     ZPS_EIO);
    snprintf(want, sizeof(want), "no checkpoint for shard 0/2 in %s\n", dir);
    assert_string_equal(report, want);

    assert_int_equal(
        zps_ckpt_find_latest(in_dir("nope"), 0, 2, &out, NULL, 0, report, sizeof(report)), ZPS_EIO);
    snprintf(want, sizeof(want), "no checkpoint for shard 0/2 in %s (no such directory)\n",
             in_dir("nope"));
    assert_string_equal(report, want);

    /* The report is cut to its size, never overrun. */
    char tiny[8];
    assert_int_equal(zps_ckpt_find_latest(dir, 0, 2, &out, NULL, 0, tiny, sizeof(tiny)), ZPS_EIO);
    assert_string_equal(tiny, "no chec");
}

/* ---- pruning ---- */

static void test_prune(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 2, 10, ZPS_OPT_SGD, false, ZPS_MODE_BSP, 1, 0);
    for (uint64_t v = 1; v <= 6; v++) {
        f->c.version = v;
        write_fixture(f);
    }
    fixture_t *g = make_fixture(1, 2, 10, ZPS_OPT_SGD, false, ZPS_MODE_BSP, 1, 0);
    for (uint64_t v = 1; v <= 3; v++) {
        g->c.version = v;
        write_fixture(g);
    }
    fixture_t *h = make_fixture(0, 3, 10, ZPS_OPT_SGD, false, ZPS_MODE_BSP, 1, 1);
    write_fixture(h);
    spit(in_dir("notes.txt"), (const uint8_t *)"x", 1);
    spit(in_dir(".shard-0-of-2-v00000000000000000001.zpsckpt.tmp.9.9"), (const uint8_t *)"x", 1);

    assert_int_equal(zps_ckpt_prune(dir, 0, 2, 0), ZPS_EINVAL);
    assert_int_equal(zps_ckpt_prune(dir, 0, 2, 10), 0); /* fewer than keep: nothing goes */
    assert_int_equal(zps_ckpt_prune(dir, 0, 2, 2), 0);
    char want[2048];
    snprintf(want, sizeof(want),
             ".shard-0-of-2-v00000000000000000001.zpsckpt.tmp.9.9 notes.txt "
             "%s %s %s %s %s %s",
             ckpt_name(0, 2, 5), ckpt_name(0, 2, 6), ckpt_name(0, 3, 1), ckpt_name(1, 2, 1),
             ckpt_name(1, 2, 2), ckpt_name(1, 2, 3));
    /* ckpt_name rotates four buffers: build the expectation in two steps. */
    char part[512];
    snprintf(part, sizeof(part),
             ".shard-0-of-2-v00000000000000000001.zpsckpt.tmp.9.9 notes.txt "
             "%s %s %s ",
             ckpt_name(0, 2, 5), ckpt_name(0, 2, 6), ckpt_name(0, 3, 1));
    snprintf(want, sizeof(want), "%s%s %s %s", part, ckpt_name(1, 2, 1), ckpt_name(1, 2, 2),
             ckpt_name(1, 2, 3));
    assert_string_equal(listing(), want);

    assert_int_equal(zps_ckpt_prune(in_dir("nope"), 0, 2, 1), ZPS_EIO);
    free_fixture(f);
    free_fixture(g);
    free_fixture(h);
}

/* ---- verification part by part ---- */

static void test_verify_reports_every_section(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 2, 100, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 5, 8);
    layout_t l = layout_of(&f->c);
    const char *path = write_fixture(f);

    zps_ckpt_scan_t scan;
    char why[256];
    assert_int_equal(zps_ckpt_verify(path, &scan, why, sizeof(why)), 0);
    assert_true(scan.header_ok && scan.have_shard && scan.have_optimizer && scan.have_workers);
    assert_int_equal(scan.nsections, 6);
    assert_string_equal(scan.sections[5].name, "optimizer v");
    for (int s = 0; s < 6; s++) {
        assert_int_equal(scan.sections[s].status, 0);
        assert_true(scan.sections[s].read);
        assert_int_equal(scan.sections[s].crc_computed, scan.sections[s].crc_stored);
    }
    assert_int_equal(scan.meta.pushed[4], f->pushed[4]);
    assert_null(scan.meta.params);
    zps_ckpt_scan_fini(&scan);

    /* Two bad sections: both named, the first one reported. */
    flip_byte(path, l.params + 1);
    flip_byte(path, l.state[0] + 1);
    assert_int_equal(zps_ckpt_verify(path, &scan, why, sizeof(why)), ZPS_ECORRUPT);
    assert_string_equal(why, "section 'params' checksum mismatch");
    const int bad[6] = {0, 0, 0, 1, 1, 0};
    for (int s = 0; s < 6; s++)
        assert_int_equal(scan.sections[s].status, bad[s] ? ZPS_ECORRUPT : 0);
    assert_string_equal(scan.sections[4].why, "section 'optimizer m' checksum mismatch");
    zps_ckpt_scan_fini(&scan);

    /* Truncated in 'optimizer m': params still verified, m and v truncated. */
    path = write_fixture(f);
    cut_to(path, l.state[0] + 8);
    assert_int_equal(zps_ckpt_verify(path, &scan, why, sizeof(why)), ZPS_ECORRUPT);
    assert_int_equal(scan.sections[3].status, 0);
    assert_int_equal(scan.sections[4].status, ZPS_ECORRUPT);
    assert_int_equal(scan.sections[5].status, ZPS_ECORRUPT);
    assert_false(scan.sections[5].read);
    char msg[256];
    snprintf(msg, sizeof(msg), "truncated: section 'optimizer m' ends at byte %zu, file has %zu",
             l.state[1], l.state[0] + 8);
    assert_string_equal(why, msg);
    zps_ckpt_scan_fini(&scan);
    free_fixture(f);
}

/* ---- zps checkpoint inspect ---- */

/* Runs the command with stdout captured; returns its exit status, output in out. */
static int run_inspect(const char *path, char *out, size_t size)
{
    fflush(stdout);
    int saved = dup(1);
    const char *cap = in_dir("inspect.out");
    int fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 1);
    close(fd);
    /* And stderr, so the failing cases stay quiet. */
    int saved_err = dup(2);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    close(devnull);
    int status = zps_cmd_checkpoint_inspect(path);
    fflush(stdout);
    fflush(stderr);
    dup2(saved, 1);
    close(saved);
    dup2(saved_err, 2);
    close(saved_err);
    size_t n;
    uint8_t *b = slurp(cap, &n);
    snprintf(out, size, "%.*s", (int)n, (const char *)b);
    free(b);
    unlink(cap);
    return status;
}

static void test_inspect(void **state)
{
    (void)state;
    static char out[1 << 16];
    fixture_t *f = make_fixture(1, 2, 100, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 5, 8);
    const char *path = write_fixture(f);
    layout_t l = layout_of(&f->c);

    assert_int_equal(run_inspect(path, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "result        valid\n"));
    assert_non_null(strstr(out, "format version 2"));
    assert_non_null(strstr(out, "shard         1/2 of a model of 100 elements: range [50, 100), "
                                "50 parameters"));
    assert_non_null(strstr(out, "version       8\n"));
    assert_non_null(strstr(out, "optimizer     adam, step count 1008, state arrays: m v\n"));
    assert_non_null(strstr(out, "  lr 0.0123  momentum 0.875  nesterov no  beta1 0.81  beta2 "
                                "0.9993\n"));
    assert_non_null(strstr(out, "consistency   bsp, 5 workers, staleness 0, backup workers 2\n"));
    assert_non_null(strstr(out, "optimizer m"));

    /* Corrupt: exit 1, the bad section named, the good ones still shown. */
    flip_byte(path, l.params + 3);
    assert_int_equal(run_inspect(path, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "result        INVALID: section 'params' checksum mismatch\n"));
    assert_non_null(strstr(out, "version       8\n"));

    /* Intact, but not the checkpoint its name says: --resume would skip it. */
    path = write_fixture(f);
    assert_int_equal(rename(path, in_dir(ckpt_name(1, 2, 9))), 0);
    assert_int_equal(run_inspect(in_dir(ckpt_name(1, 2, 9)), out, sizeof(out)), 1);
    assert_non_null(strstr(out, "INVALID: the file name does not match its contents"));

    /* Not a checkpoint at all; unusable paths. */
    spit(in_dir("junk"), (const uint8_t *)"hello, world", 12);
    assert_int_equal(run_inspect(in_dir("junk"), out, sizeof(out)), 1);
    assert_non_null(strstr(out, "header        bad: bad magic: not a zps checkpoint\n"));
    assert_int_equal(run_inspect(in_dir("missing"), out, sizeof(out)), 2);
    assert_int_equal(run_inspect(dir, out, sizeof(out)), 2);
    free_fixture(f);
}

/* ---- what is not a checkpoint even with every checksum right ---- */

/* Sets element i of the array section at byte `at` to the float32 bits u and
 * recomputes the section's, the table's and the header's CRCs. */
static void patch_value(const char *path, uint32_t section, size_t at, size_t i, uint32_t u)
{
    size_t len;
    uint8_t *b = slurp(path, &len);
    set_le32(b + at + 4 * i, u);
    reseal(b, section);
    spit(path, b, len);
    free(b);
}

static void test_refuse_non_finite(void **state)
{
    (void)state;
    char why[512], want[1024];
    fixture_t *f = make_fixture(1, 2, 100, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 3, 5);
    layout_t l = layout_of(&f->c);

    /* Never written: the state of a diverged shard must not replace a good file. */
    float keep = f->c.params[7];
    f->c.params[7] = NAN;
    assert_int_equal(zps_ckpt_write(dir, &f->c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: params element 7 is not finite (nan)");
    f->c.params[7] = keep;
    keep = f->c.state[1][49];
    f->c.state[1][49] = -INFINITY;
    assert_int_equal(zps_ckpt_write(dir, &f->c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(
        why, "not a valid checkpoint: optimizer state 'v' element 49 is not finite (-inf)");
    f->c.state[1][49] = keep;
    assert_string_equal(listing(), "");

    /* Written with every checksum right (a hand edit, another writer): refused
     * by name of section and index, skipped by --resume, INVALID to inspect. */
    const char *good = write_fixture(f);
    f->c.version = 6;
    const char *bad = write_fixture(f);
    patch_value(bad, 3, l.params, 3, 0x7fc00000u); /* NaN */
    expect_refused(bad, ZPS_ECORRUPT, "section 'params': element 3 is not finite (nan)");
    assert_int_equal(zps_ckpt_write(dir, &f->c, NULL, 0, why, sizeof(why)), 0);
    patch_value(bad, 4, l.state[0], 0, 0x7f800000u); /* +Inf */
    expect_refused(bad, ZPS_ECORRUPT, "section 'optimizer m': element 0 is not finite (inf)");
    assert_int_equal(zps_ckpt_write(dir, &f->c, NULL, 0, why, sizeof(why)), 0);
    patch_value(bad, 5, l.state[1], 49, 0xff800001u); /* a negative NaN */
    expect_refused(bad, ZPS_ECORRUPT, "section 'optimizer v': element 49 is not finite (nan)");

    zps_ckpt_t out;
    char report[2048];
    assert_int_equal(zps_ckpt_find_latest(dir, 1, 2, &out, NULL, 0, report, sizeof(report)), 0);
    assert_int_equal(out.version, 5);
    zps_ckpt_fini(&out);
    snprintf(want, sizeof(want),
             "skipped %s: section 'optimizer v': element 49 is not finite (nan)\n",
             ckpt_name(1, 2, 6));
    assert_string_equal(report, want);

    zps_ckpt_scan_t scan;
    assert_int_equal(zps_ckpt_verify(bad, &scan, why, sizeof(why)), ZPS_ECORRUPT);
    assert_int_equal(scan.sections[3].status, 0);
    assert_int_equal(scan.sections[5].status, ZPS_ECORRUPT);
    assert_true(scan.sections[5].read);
    assert_int_equal(scan.sections[5].crc_computed, scan.sections[5].crc_stored);
    zps_ckpt_scan_fini(&scan);
    static char text[1 << 16];
    assert_int_equal(run_inspect(bad, text, sizeof(text)), 1);
    assert_non_null(strstr(
        text, "result        INVALID: section 'optimizer v': element 49 is not finite (nan)\n"));
    assert_int_equal(run_inspect(good, text, sizeof(text)), 0);
    free_fixture(f);
}

/* Turns a read that blocks forever into a failure. */
static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_checkpoint: a read of a FIFO blocked\n";
    ssize_t k = write(2, msg, sizeof(msg) - 1);
    (void)k;
    _exit(1);
}

/*
 * A FIFO (or any file that is not a regular one) under a checkpoint's name:
 * refused at once, as a bad candidate, never waited on.
 */
static void test_refuse_fifo(void **state)
{
    (void)state;
    void (*old)(int) = signal(SIGALRM, on_alarm);
    alarm(20);
    fixture_t *f = make_fixture(0, 2, 10, ZPS_OPT_SGD, false, ZPS_MODE_ASP, 2, 3);
    write_fixture(f);
    free_fixture(f);
    const char *fifo = in_dir(ckpt_name(0, 2, 9));
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(mkdir(in_dir(ckpt_name(0, 2, 8)), 0700), 0);

    zps_ckpt_t out;
    char why[1024], want[2048], report[4096];
    assert_int_equal(zps_ckpt_read(fifo, &out, why, sizeof(why)), ZPS_EIO);
    snprintf(want, sizeof(want), "%s is not a regular file (a FIFO)", fifo);
    assert_string_equal(why, want);

    assert_int_equal(zps_ckpt_find_latest(dir, 0, 2, &out, NULL, 0, report, sizeof(report)), 0);
    assert_int_equal(out.version, 3);
    zps_ckpt_fini(&out);
    char part[1024];
    snprintf(part, sizeof(part), "skipped %s: %s is not a regular file (a FIFO)\n",
             ckpt_name(0, 2, 9), fifo);
    snprintf(want, sizeof(want), "%sskipped %s: %s is not a regular file (a directory)\n", part,
             ckpt_name(0, 2, 8), in_dir(ckpt_name(0, 2, 8)));
    assert_string_equal(report, want);

    zps_ckpt_scan_t scan;
    assert_int_equal(zps_ckpt_verify(fifo, &scan, why, sizeof(why)), ZPS_EIO);
    zps_ckpt_scan_fini(&scan);
    static char text[4096];
    assert_int_equal(run_inspect(fifo, text, sizeof(text)), 2);
    alarm(0);
    signal(SIGALRM, old);
}

/* A directory that cannot take a checkpoint is found before any state exists. */
static void test_dir_prepare(void **state)
{
    (void)state;
    char why[1024], want[1024];
    /* Created when missing; an existing one is fine; no probe is left behind. */
    assert_int_equal(zps_ckpt_dir_prepare(in_dir("new"), why, sizeof(why)), 0);
    assert_int_equal(zps_ckpt_dir_prepare(in_dir("new"), why, sizeof(why)), 0);
    assert_string_equal(listing(), "new");
    DIR *d = opendir(in_dir("new"));
    assert_non_null(d);
    struct dirent *de;
    int entries = 0;
    while ((de = readdir(d)) != NULL)
        entries += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    assert_int_equal(entries, 0);

    /* Not a directory; under something that is not a directory. */
    spit(in_dir("plain"), (const uint8_t *)"x", 1);
    assert_int_equal(zps_ckpt_dir_prepare(in_dir("plain"), why, sizeof(why)), ZPS_EIO);
    snprintf(want, sizeof(want), "%s is not a directory", in_dir("plain"));
    assert_string_equal(why, want);
    assert_int_equal(zps_ckpt_dir_prepare(in_dir("plain/sub"), why, sizeof(why)), ZPS_EIO);
    snprintf(want, sizeof(want), "cannot create %s: Not a directory", in_dir("plain/sub"));
    assert_string_equal(why, want);
    assert_int_equal(zps_ckpt_dir_prepare(in_dir("no/such"), why, sizeof(why)), ZPS_EIO);
    snprintf(want, sizeof(want), "cannot create %s: No such file or directory", in_dir("no/such"));
    assert_string_equal(why, want);

    /* Files cannot be written there (a file size limit stands in for a full disk). */
    struct rlimit old, none;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    none.rlim_cur = 0;
    none.rlim_max = old.rlim_max;
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &none), 0);
    int rc = zps_ckpt_dir_prepare(in_dir("new"), why, sizeof(why));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    assert_int_equal(rc, ZPS_EIO);
    assert_true(strncmp(why, "write ", 6) == 0);
    assert_non_null(strstr(why, "/new/.zps-probe."));
    assert_non_null(strstr(why, ": File too large"));
    assert_string_equal(listing(), "new plain");
    d = opendir(in_dir("new"));
    entries = 0;
    while ((de = readdir(d)) != NULL)
        entries += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    assert_int_equal(entries, 0);
}

/* ---- the assignment section (format version 2) ---- */

/*
 * A shared assignment of W = 3 as the module leaves it after a few events:
 * the plan 100 examples in batches of 8 for 2 epochs (B = 13, 26 batches);
 * worker 0 took 0 1 2, worker 1 took 3 4, worker 2 took 5 6 7 8; batches 1,
 * 5 and 6 completed; worker 0 no longer has 2 (given back); worker 1 was
 * evicted (3 and 4 given back) and took the queue's front, 2. So: cursor 9,
 * queue {3, 4}, leases {0}, {2}, {7, 8}. Returns the assignment, the caller
 * frees it.
 */
static zps_assign_t *make_assignment(void)
{
    zps_assign_t *a = NULL;
    assert_int_equal(zps_assign_new(3, &a), 0);
    zps_assign_plan_t plan = {.examples = 100, .batch = 8, .epochs = 2};
    assert_int_equal(zps_assign_set_plan(a, &plan, NULL, 0), 0);
    uint64_t out[ZPS_ASSIGN_MAX_HELD];
    bool exhausted, first;
    assert_int_equal(zps_assign_lease(a, 0, NULL, 0, 3, out, &exhausted), 3);
    assert_int_equal(zps_assign_lease(a, 1, NULL, 0, 2, out, &exhausted), 2);
    assert_int_equal(zps_assign_lease(a, 2, NULL, 0, 4, out, &exhausted), 4);
    assert_int_equal(zps_assign_complete(a, 0, 1, 8, &first, NULL, 0), 0);
    assert_true(first);
    assert_int_equal(zps_assign_complete(a, 2, 5, 8, &first, NULL, 0), 0);
    assert_int_equal(zps_assign_complete(a, 2, 6, 8, &first, NULL, 0), 0);
    const uint64_t have0[1] = {0};
    assert_int_equal(zps_assign_lease(a, 0, have0, 1, 1, out, &exhausted), 1);
    zps_assign_release(a, 1);
    assert_int_equal(zps_assign_lease(a, 1, NULL, 0, 1, out, &exhausted), 1);
    assert_int_equal(out[0], 2);
    return a;
}

/* f with make_assignment()'s snapshot and worker 2 finished; returns the assignment. */
static zps_assign_t *attach_assignment(fixture_t *f)
{
    zps_assign_t *a = make_assignment();
    assert_int_equal(zps_assign_snapshot(a, &f->c.assign), 0);
    f->c.have_assign = true;
    f->finished[2] = true;
    f->c.finished = f->finished;
    return a;
}

/* Worker w's lease slots in a state read back: [8], exactly. */
static void assert_row(const zps_assign_state_t *s, uint32_t w, uint32_t n, const uint64_t *held)
{
    assert_int_equal(s->nheld[w], n);
    for (uint32_t i = 0; i < ZPS_ASSIGN_MAX_HELD; i++)
        assert_int_equal(s->held[(size_t)w * ZPS_ASSIGN_MAX_HELD + i], i < n ? held[i] : 0);
}

static void test_assign_round_trip(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 1, 10, ZPS_OPT_ADAM, false, ZPS_MODE_ASP, 3, 5);
    zps_assign_t *a = attach_assignment(f);
    /* What the snapshot holds, stale lease slots included (worker 0 had 0 1 2). */
    const zps_assign_state_t *snap = &f->c.assign;
    assert_int_equal(snap->next, 9);
    assert_int_equal(snap->nqueue, 2);
    assert_int_equal(snap->held[1], 2); /* past worker 0's one lease: written as 0 */
    assert_int_equal(snap->done[0], 0x62);

    const char *path = write_fixture(f);
    size_t len;
    uint8_t *b = slurp(path, &len);
    layout_t l = layout_of(&f->c);
    assert_int_equal(assign_bytes(snap), 272);
    assert_int_equal(len, l.end);
    assert_int_equal(len, 875); /* the worked example in docs/checkpoint.md */
    assert_int_equal(l.assign, 603);
    assert_int_equal(le32(b + 8), 2);
    assert_int_equal(le32(b + 24), 7); /* the most sections a file has */
    const uint8_t *e = b + 64 + 24 * 6;
    assert_int_equal(le32(e), 5);
    assert_int_equal(le64(e + 8), l.assign);
    assert_int_equal(le64(e + 16), 272);
    assert_int_equal(le32(e + 4), zps_crc32c(0, b + l.assign, 272));

    /* The section, offset by offset as docs/checkpoint.md has it. */
    const uint8_t *p = b + l.assign;
    assert_int_equal(le64(p + 0), 100);
    assert_int_equal(le32(p + 8), 8);
    assert_int_equal(le32(p + 12), 2);
    assert_int_equal(le64(p + 16), 9);
    assert_int_equal(le64(p + 24), 2);
    assert_int_equal(le32(p + 32), 3);
    assert_int_equal(le64(p + 36), 3);
    assert_int_equal(le64(p + 44), 4);
    const uint32_t nheld[3] = {1, 1, 2};
    const uint64_t held[3][2] = {{0, 0}, {2, 0}, {7, 8}};
    for (uint32_t w = 0; w < 3; w++) {
        const uint8_t *r = p + 52 + 72 * w;
        assert_int_equal(le32(r), nheld[w]);
        assert_int_equal(r[4], w == 2 ? 1 : 0);
        assert_int_equal(r[5] | r[6] | r[7], 0);
        for (uint32_t i = 0; i < 8; i++)
            assert_int_equal(le64(r + 8 + 8 * i), i < 2 ? held[w][i] : 0);
    }
    const uint8_t done[4] = {0x62, 0, 0, 0}; /* batches 1, 5 and 6 */
    assert_memory_equal(p + 268, done, 4);

    /* Read back, field by field. */
    zps_ckpt_t out;
    char why[512] = "";
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
    assert_same(&f->c, &out);
    assert_true(out.have_assign);
    const zps_assign_state_t *s = &out.assign;
    assert_int_equal(s->plan.examples, 100);
    assert_int_equal(s->plan.batch, 8);
    assert_int_equal(s->plan.epochs, 2);
    assert_int_equal(s->next, 9);
    assert_int_equal(s->nqueue, 2);
    assert_int_equal(s->queue[0], 3);
    assert_int_equal(s->queue[1], 4);
    assert_int_equal(s->workers, 3);
    for (uint32_t w = 0; w < 3; w++)
        assert_row(s, w, nheld[w], held[w]);
    assert_memory_equal(s->done, done, 4);
    assert_false(out.finished[0]);
    assert_false(out.finished[1]);
    assert_true(out.finished[2]);

    /* Restored, it continues as the original: worker 2 gets the queue, 3 and 4. */
    zps_assign_t *r = NULL;
    assert_int_equal(zps_assign_new(3, &r), 0);
    assert_int_equal(zps_assign_restore(r, s, why, sizeof(why)), 0);
    assert_int_equal(zps_assign_completed(r), 3);
    assert_int_equal(zps_assign_epoch_examples(r, 0), 24);
    uint64_t x[ZPS_ASSIGN_MAX_HELD], y[ZPS_ASSIGN_MAX_HELD];
    const uint64_t have2[2] = {7, 8};
    bool ex_a, ex_r;
    assert_int_equal(zps_assign_lease(a, 2, have2, 2, 5, x, &ex_a), 5);
    assert_int_equal(zps_assign_lease(r, 2, have2, 2, 5, y, &ex_r), 5);
    assert_memory_equal(x, y, sizeof(uint64_t) * 5);
    assert_int_equal(y[2], 3);
    assert_int_equal(y[4], 9);
    assert_int_equal(ex_a, ex_r);
    zps_assign_free(r);
    zps_ckpt_fini(&out);

    /* inspect: the section in the table, and its one line. */
    zps_ckpt_scan_t scan;
    assert_int_equal(zps_ckpt_verify(path, &scan, why, sizeof(why)), 0);
    assert_int_equal(scan.format, 2);
    assert_int_equal(scan.nsections, 7);
    assert_string_equal(scan.sections[6].name, "assignment");
    assert_int_equal(scan.sections[6].id, ZPS_CKPT_SEC_ASSIGN);
    assert_int_equal(scan.sections[6].status, 0);
    assert_true(scan.meta.have_assign);
    assert_int_equal(scan.meta.assign.next, 9);
    zps_ckpt_scan_fini(&scan);
    static char text[1 << 16];
    assert_int_equal(run_inspect(path, text, sizeof(text)), 0);
    assert_non_null(strstr(text, "  assignment           0x0005 "));
    assert_non_null(strstr(text, "assignment    100 examples in batches of 8 for 2 epochs (26 "
                                 "batches): next 9, 2 queued, 4 leases held, 3 completed, 1 of 3 "
                                 "workers finished\n"));
    free(b);
    zps_assign_free(a);
    free_fixture(f);
}

/* The section is optional: absent, or present without a plan yet. */
static void test_assign_optional(void **state)
{
    (void)state;
    /* Absent: 4 + k sections, and a read says so. */
    fixture_t *f = make_fixture(0, 1, 10, ZPS_OPT_SGD, false, ZPS_MODE_ASP, 3, 5);
    const char *path = write_fixture(f);
    size_t len;
    uint8_t *b = slurp(path, &len);
    assert_int_equal(le32(b + 24), 4);
    free(b);
    zps_ckpt_t out;
    char why[512] = "";
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
    assert_false(out.have_assign);
    assert_null(out.finished);
    assert_int_equal(out.assign.workers, 0);
    zps_ckpt_fini(&out);

    /* No plan yet: the fixed fields and the rows, all zero but W; no bits.
     * With SGD the section is entry 4, right after params. */
    zps_assign_t *a = NULL;
    assert_int_equal(zps_assign_new(3, &a), 0);
    assert_int_equal(zps_assign_snapshot(a, &f->c.assign), 0);
    zps_assign_free(a);
    f->c.have_assign = true;
    f->c.finished = f->finished;
    f->finished[0] = true;
    path = write_fixture(f);
    b = slurp(path, &len);
    layout_t l = layout_of(&f->c);
    assert_int_equal(len, l.end);
    assert_int_equal(l.end - l.assign, 36 + 72 * 3);
    assert_int_equal(le32(b + 24), 5);
    assert_int_equal(le32(b + 64 + 24 * 4), 5);
    for (size_t i = 0; i < 36; i++)
        assert_int_equal(b[l.assign + i], i == 32 ? 3 : 0);
    assert_int_equal(b[l.assign + 36 + 4], 1);
    free(b);
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
    assert_same(&f->c, &out);
    assert_true(out.have_assign);
    assert_int_equal(out.assign.plan.examples, 0);
    assert_int_equal(out.assign.next, 0);
    assert_int_equal(out.assign.nqueue, 0);
    assert_int_equal(out.assign.workers, 3);
    assert_null(out.assign.done);
    for (uint32_t w = 0; w < 3; w++) {
        assert_row(&out.assign, w, 0, NULL);
        assert_int_equal(out.finished[w], w == 0);
    }
    zps_ckpt_fini(&out);
    static char text[1 << 16];
    assert_int_equal(run_inspect(path, text, sizeof(text)), 0);
    assert_non_null(strstr(text, "assignment    no plan yet, 1 of 3 workers finished\n"));
    free_fixture(f);
}

/* Format version 1 is version 2 without the assignment section: still read. */
static void test_format_1_still_reads(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 1, 10, ZPS_OPT_ADAM, false, ZPS_MODE_BSP, 3, 1);
    const char *path = write_fixture(f);
    size_t len;
    uint8_t *b = slurp(path, &len);
    set_le32(b + 8, 1);
    reseal(b, 0);
    spit(path, b, len);
    free(b);
    zps_ckpt_t out;
    char why[512] = "";
    assert_int_equal(zps_ckpt_read(path, &out, why, sizeof(why)), 0);
    assert_same(&f->c, &out);
    assert_false(out.have_assign);
    zps_ckpt_fini(&out);
    static char text[1 << 16];
    assert_int_equal(run_inspect(path, text, sizeof(text)), 0);
    assert_non_null(strstr(text, "format version 1, "));

    /* A version 3 (a newer writer's), with a consistent header. */
    b = slurp(path, &len);
    set_le32(b + 8, 3);
    reseal(b, 0);
    spit(path, b, len);
    free(b);
    expect_refused(path, ZPS_ECORRUPT,
                   "unsupported format version 3 (this build reads versions 1 and 2)");

    /* Version 1 has no assignment section: with 7 sections, or with it as
     * entry 4 of 5, the file is not one. */
    zps_assign_t *a = attach_assignment(f);
    path = write_fixture(f);
    b = slurp(path, &len);
    set_le32(b + 8, 1);
    reseal(b, 0);
    spit(path, b, len);
    expect_refused(path, ZPS_ECORRUPT, "header: 7 sections; format version 1 has 4 to 6");
    /* In version 2, a seventh section must be the assignment. */
    set_le32(b + 8, 2);
    set_le32(b + 64 + 24 * 6, 0x102);
    reseal(b, 0);
    spit(path, b, len);
    expect_refused(path, ZPS_ECORRUPT, "section table: entry 6 has id 258, expected 5");
    free(b);
    free_fixture(f);

    f = make_fixture(0, 1, 10, ZPS_OPT_SGD, false, ZPS_MODE_BSP, 3, 1);
    assert_int_equal(zps_assign_snapshot(a, &f->c.assign), 0);
    f->c.have_assign = true;
    f->c.finished = f->finished;
    path = write_fixture(f);
    b = slurp(path, &len);
    set_le32(b + 8, 1);
    reseal(b, 0);
    spit(path, b, len);
    expect_refused(path, ZPS_ECORRUPT, "section table: entry 4 has id 5, expected 256");
    free(b);
    zps_assign_free(a);
    free_fixture(f);
}

/* Writes image b (len bytes) to path with `n` bytes at section offset `at`
 * set to the little-endian x, the assignment section (entry 6) resealed. */
static void forge_assign(const char *path, const uint8_t *b, size_t len, size_t at, int n,
                         uint64_t x)
{
    uint8_t *y = malloc(len);
    assert_non_null(y);
    memcpy(y, b, len);
    for (int i = 0; i < n; i++)
        y[at + (size_t)i] = (uint8_t)(x >> (8 * i));
    reseal(y, 6);
    spit(path, y, len);
    free(y);
}

/*
 * Assignment sections whose checksums are right but which no shard wrote:
 * each refused with its message, the byte rules by the reader itself, the
 * state's by zps_assign_restore.
 */
static void test_refuse_forged_assignment(void **state)
{
    (void)state;
    fixture_t *f = make_fixture(0, 1, 10, ZPS_OPT_ADAM, false, ZPS_MODE_ASP, 3, 5);
    zps_assign_t *a = attach_assignment(f);
    layout_t l = layout_of(&f->c);
    const char *path = write_fixture(f);
    size_t len;
    uint8_t *b = slurp(path, &len);
    const size_t row = l.assign + 52; /* worker w's row at row + 72 w */
    const struct {
        size_t at;
        int n;
        uint64_t x;
        const char *msg;
    } cases[] = {
        /* Lengths: every count changes the size. */
        {l.assign + 24, 8, 3,
         "section 'assignment' is 272 bytes; 3 workers, 3 queued leases and 26 batches need 280"},
        {l.assign + 12, 4, 3,
         "section 'assignment' is 272 bytes; 3 workers, 2 queued leases and 39 batches need 273"},
        {l.assign + 0, 8, 0,
         "section 'assignment' is 272 bytes; 3 workers, 2 queued leases and 0 batches need 268"},
        /* Counts. */
        {l.assign + 32, 4, 4,
         "section 'assignment': data assignment for 4 workers; the checkpoint has 3"},
        {l.assign + 24, 8, 25,
         "section 'assignment': data assignment: 25 leases queued, at most 24"},
        {l.assign + 8, 4, 0,
         "section 'assignment': data assignment: a plan of 100 examples in batches of 0 for 2 "
         "epochs (batch and epochs must be >= 1)"},
        /* Bytes no state sets. */
        {row + 72 + 4, 1, 2, "section 'assignment': finished[1] is 2, not 0 or 1"},
        {row + 6, 1, 1, "section 'assignment': worker 0's reserved bytes 5 to 7 are not zero"},
        {row + 144 + 8 + 40, 8, 11,
         "section 'assignment': worker 2's lease slot 5 is past its 2 leases and not zero"},
        {row, 4, 9, "section 'assignment': data assignment: worker 0 holds 9 leases, at most 8"},
        /* States no run reaches: zps_assign_restore's reasons. */
        {row + 144 + 16, 8, 9,
         "section 'assignment': data assignment: lease of batch 9, which was never handed out "
         "(next 9)"},
        {row + 8, 8, 1,
         "section 'assignment': data assignment: lease of batch 1, which is complete"},
        {row + 72 + 8, 8, 3, "section 'assignment': data assignment: batch 3 is leased twice"},
        {l.assign + 16, 8, 27,
         "section 'assignment': data assignment: next batch 27 is past the run's 26"},
        {row + 216 + 2, 1, 1,
         "section 'assignment': data assignment: batch 16 is complete but was never handed out"},
        {row + 216 + 3, 1, 4,
         "section 'assignment': data assignment: completion bits past the run's end"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        forge_assign(path, b, len, cases[k].at, cases[k].n, cases[k].x);
        expect_refused(path, ZPS_ECORRUPT, cases[k].msg);
    }

    /* A scan names the section and keeps the others. */
    forge_assign(path, b, len, row + 72 + 4, 1, 2);
    zps_ckpt_scan_t scan;
    char why[512], msg[256];
    assert_int_equal(zps_ckpt_verify(path, &scan, why, sizeof(why)), ZPS_ECORRUPT);
    for (int s = 0; s < 6; s++)
        assert_int_equal(scan.sections[s].status, 0);
    assert_int_equal(scan.sections[6].status, ZPS_ECORRUPT);
    assert_string_equal(scan.sections[6].why, "section 'assignment': finished[1] is 2, not 0 or 1");
    assert_false(scan.meta.have_assign);
    zps_ckpt_scan_fini(&scan);

    /* A flipped byte, a cut: as in any section. */
    spit(path, b, len);
    flip_byte(path, l.assign + 17);
    expect_refused(path, ZPS_ECORRUPT, "section 'assignment' checksum mismatch");
    spit(path, b, len);
    cut_to(path, l.assign + 100);
    snprintf(msg, sizeof(msg), "truncated: section 'assignment' ends at byte %zu, file has %zu",
             l.end, l.assign + 100);
    expect_refused(path, ZPS_ECORRUPT, msg);
    free(b);
    zps_assign_free(a);
    free_fixture(f);
}

/* The writer refuses what the reader would, and writes nothing. */
static void test_write_refuses_invalid_assignment(void **state)
{
    (void)state;
    char why[512];
    fixture_t *f = make_fixture(0, 1, 10, ZPS_OPT_ADAM, false, ZPS_MODE_ASP, 3, 5);
    zps_assign_t *a = attach_assignment(f);
    zps_ckpt_t c = f->c;
    c.assign.workers = 2;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: data assignment for 2 workers; the "
                             "checkpoint has 3");
    c = f->c;
    c.finished = NULL;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: data assignment: finished must hold 3 "
                             "entries");
    c = f->c;
    c.assign.nqueue = 25;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: data assignment: 25 leases queued, at most "
                             "24");
    c = f->c;
    c.assign.plan.examples = 0;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: data assignment without a plan (0 "
                             "examples) has batch 8, epochs 2, next 9, 2 leases queued (all "
                             "must be 0)");
    c = f->c;
    uint32_t nheld[3] = {9, 1, 2};
    c.assign.nheld = nheld;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: data assignment: worker 0 holds 9 leases, "
                             "at most 8");
    c = f->c;
    uint64_t held[3 * ZPS_ASSIGN_MAX_HELD];
    memcpy(held, f->c.assign.held, sizeof(held));
    held[2 * ZPS_ASSIGN_MAX_HELD + 1] = 9;
    c.assign.held = held;
    assert_int_equal(zps_ckpt_write(dir, &c, NULL, 0, why, sizeof(why)), ZPS_EINVAL);
    assert_string_equal(why, "not a valid checkpoint: data assignment: lease of batch 9, which "
                             "was never handed out (next 9)");
    assert_string_equal(listing(), "");
    zps_assign_free(a);
    free_fixture(f);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, make_dir, remove_dir)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_round_trip_adam),
        T(test_round_trip_every_optimizer_and_mode),
        T(test_round_trip_empty_range),
        T(test_round_trip_large),
        T(test_rewrite_same_version),
        T(test_restored_optimizer_continues_exactly),
        T(test_layout_matches_docs),
        T(test_refuse_truncated),
        T(test_refuse_flipped_byte_in_each_part),
        T(test_refuse_magic_and_version),
        T(test_refuse_invalid_contents),
        T(test_refuse_implausible_clocks),
        T(test_check_shard),
        T(test_write_refuses_invalid),
        T(test_failed_write_leaves_nothing),
        T(test_find_latest_skips_bad_files),
        T(test_find_latest_checks_names),
        T(test_find_latest_none),
        T(test_prune),
        T(test_verify_reports_every_section),
        T(test_inspect),
        T(test_refuse_non_finite),
        T(test_refuse_fifo),
        T(test_dir_prepare),
        T(test_assign_round_trip),
        T(test_assign_optional),
        T(test_format_1_still_reads),
        T(test_refuse_forged_assignment),
        T(test_write_refuses_invalid_assignment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
