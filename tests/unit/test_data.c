/*
 * test_data.c - the data order rule (every example exactly once per epoch,
 * the same step count for every worker, batches of 1..b+1), the IDX reader's
 * error paths on small files this test writes itself, the synthetic set, and
 * the real Fashion-MNIST files when they are installed ($ZPS_FASHION_MNIST_DIR,
 * default /usr/share/datasets/fashion-mnist). Without them that case is
 * skipped, the others still run, and the program exits 77, which ctest
 * reports as skipped.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "data.h"
#include "error.h"

/* ---- partitioning ---- */

/*
 * Checks one (N, W, b) against the rule written out independently: pieces
 * [floor(w*N/W), floor((w+1)*N/W)), S = ceil(floor(N/W)/b), batches of b
 * except the last, every example once per epoch.
 */
static void check_cover(uint64_t n, uint32_t w_count, uint32_t b, uint64_t seed)
{
    zps_partition_t p;
    assert_int_equal(zps_partition_init(&p, n, w_count, b, seed), 0);
    uint64_t q = n / w_count;
    uint64_t steps = q / b + (q % b != 0);
    assert_int_equal(p.steps, steps);
    assert_true(steps >= 1);

    zps_data_order_t o;
    assert_int_equal(zps_data_order_init(&o, &p), 0);
    uint64_t maxb = zps_partition_max_batch(&p);
    assert_true(maxb >= 1 && maxb <= (uint64_t)b + 1);
    uint32_t *idx = malloc((maxb + 1) * sizeof(uint32_t));
    uint32_t *seen = calloc(n, sizeof(uint32_t));
    assert_non_null(idx);
    assert_non_null(seen);
    uint64_t biggest = 0;

    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        memset(seen, 0, n * sizeof(uint32_t));
        for (uint32_t w = 0; w < w_count; w++) {
            uint64_t lo = w * n / w_count, hi = (w + 1ull) * n / w_count;
            uint64_t got = 0;
            for (uint64_t s = 0; s < steps; s++) {
                size_t k = zps_data_order_batch(&o, epoch, w, s, idx);
                assert_true(k >= 1);
                assert_true(k <= (size_t)b + 1);
                assert_true(k <= maxb);
                if (s + 1 < steps)
                    assert_int_equal(k, b);
                if (k > biggest)
                    biggest = k;
                for (size_t i = 0; i < k; i++) {
                    assert_true(idx[i] < n);
                    seen[idx[i]]++;
                }
                got += k;
                /* The positions are the piece's, in order. */
                uint64_t plo, phi;
                zps_partition_batch_range(&p, w, s, &plo, &phi);
                assert_int_equal(plo, lo + s * b);
                assert_int_equal(phi - plo, k);
            }
            assert_int_equal(got, hi - lo);
        }
        for (uint64_t i = 0; i < n; i++)
            assert_int_equal(seen[i], 1);
    }
    assert_int_equal(biggest, maxb);
    free(idx);
    free(seen);
    zps_data_order_fini(&o);
}

static void test_partition_coverage(void **state)
{
    (void)state;
    static const uint64_t ns[] = {1,  2,   3,   5,   7,   8,    10,   31,  64,
                                  65, 100, 101, 255, 257, 1000, 1001, 4099};
    static const uint32_t ws[] = {1, 2, 3, 4, 5, 7, 8, 16, 33};
    static const uint32_t bs[] = {1, 2, 3, 5, 8, 13, 32, 64, 100, 5000};
    unsigned combos = 0;
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        for (size_t j = 0; j < sizeof(ws) / sizeof(ws[0]); j++)
            for (size_t k = 0; k < sizeof(bs) / sizeof(bs[0]); k++) {
                if (ns[i] < ws[j])
                    continue;
                check_cover(ns[i], ws[j], bs[k], 42 + i);
                combos++;
            }
    assert_true(combos > 1000);
    /* Fashion-MNIST's size with the cluster shapes the experiments use. */
    check_cover(60000, 4, 64, 1);
    check_cover(60000, 7, 100, 1);
}

static void test_partition_examples(void **state)
{
    (void)state;
    zps_partition_t p;
    /* N = 10, W = 3: pieces of 3, 3, 4; S = ceil(3 / 2) = 2; the last
     * worker's last batch has b + 1 = 3 examples. */
    assert_int_equal(zps_partition_init(&p, 10, 3, 2, 7), 0);
    assert_int_equal(p.steps, 2);
    uint64_t lo, hi;
    zps_partition_piece(&p, 0, &lo, &hi);
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 3);
    zps_partition_piece(&p, 2, &lo, &hi);
    assert_int_equal(lo, 6);
    assert_int_equal(hi, 10);
    zps_partition_batch_range(&p, 2, 1, &lo, &hi);
    assert_int_equal(lo, 8);
    assert_int_equal(hi, 10);
    zps_partition_batch_range(&p, 0, 1, &lo, &hi);
    assert_int_equal(lo, 2);
    assert_int_equal(hi, 3);
    assert_int_equal(zps_partition_max_batch(&p), 2);
    /* N = 11, W = 2, b = 5: pieces 5 and 6, S = 1, batches 5 and 6. */
    assert_int_equal(zps_partition_init(&p, 11, 2, 5, 7), 0);
    assert_int_equal(p.steps, 1);
    assert_int_equal(zps_partition_max_batch(&p), 6);

    uint64_t e, s;
    assert_int_equal(zps_partition_init(&p, 100, 4, 10, 7), 0); /* S = 3 */
    zps_partition_clock(&p, 7, &e, &s);
    assert_int_equal(e, 2);
    assert_int_equal(s, 1);

    /* Refused: no workers, no batch, fewer examples than workers. */
    assert_int_equal(zps_partition_init(&p, 3, 4, 1, 0), ZPS_EINVAL);
    assert_int_equal(zps_partition_init(&p, 3, 0, 1, 0), ZPS_EINVAL);
    assert_int_equal(zps_partition_init(&p, 3, 1, 0, 0), ZPS_EINVAL);
    assert_int_equal(zps_partition_init(&p, 0, 1, 1, 0), ZPS_EINVAL);
}

static void test_permutation_seeded(void **state)
{
    (void)state;
    enum { N = 1000 };
    zps_partition_t p, p2;
    assert_int_equal(zps_partition_init(&p, N, 1, 1, 5), 0);
    assert_int_equal(zps_partition_init(&p2, N, 1, 1, 6), 0);
    uint32_t *a = malloc(N * sizeof(uint32_t)), *b = malloc(N * sizeof(uint32_t));
    assert_non_null(a);
    assert_non_null(b);
    zps_partition_permute(&p, 3, a);
    zps_partition_permute(&p, 3, b);
    assert_memory_equal(a, b, N * sizeof(uint32_t)); /* a function of (seed, epoch) */
    zps_partition_permute(&p, 4, b);
    assert_memory_not_equal(a, b, N * sizeof(uint32_t)); /* another epoch, another order */
    zps_partition_permute(&p2, 3, b);
    assert_memory_not_equal(a, b, N * sizeof(uint32_t)); /* another seed, another order */
    free(a);
    free(b);

    /* Fisher-Yates is uniform: over 6000 epochs of N = 3 each of the 6
     * orders appears about 1000 times (binomial sd ~ 29). */
    zps_partition_t p3;
    assert_int_equal(zps_partition_init(&p3, 3, 1, 1, 11), 0);
    unsigned counts[6] = {0};
    for (uint64_t e = 0; e < 6000; e++) {
        uint32_t v[3];
        zps_partition_permute(&p3, e, v);
        counts[v[0] * 2 + (v[1] > v[2])]++;
    }
    for (int i = 0; i < 6; i++)
        assert_true(counts[i] > 850 && counts[i] < 1150);
}

/* ---- IDX files ---- */

static char tmpdir[256];

static int make_tmpdir(void **state)
{
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/zps-test-data-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
    (void)state;
    static const char *const names[] = {
        "good-img.gz", "good-lab.gz",  "plain-img",    "missing.gz",  "magic.gz",
        "type.gz",     "trunc.gz",     "cut.gz",       "flip.gz",     "trail.gz",
        "few-lab.gz",  "range-lab.gz", "rank.gz",      "zero.gz",     "empty.gz",
        "many-img.gz", "many-lab.gz",  "short-img.gz", "short-lab.gz"};
    char path[512];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
        unlink(path);
    }
    return rmdir(tmpdir);
}

static const char *tmp_path(const char *name)
{
    static char path[4][512];
    static int turn;
    turn = (turn + 1) % 4;
    snprintf(path[turn], sizeof(path[turn]), "%s/%s", tmpdir, name);
    return path[turn];
}

/* Writes an IDX header (magic 00 00 type ndims, big-endian dims) and `len`
 * payload bytes; gzip'd unless plain. */
static void write_idx(const char *name, unsigned type, unsigned ndims, const uint32_t *dims,
                      const uint8_t *payload, size_t len, bool plain)
{
    uint8_t head[4 + 16] = {0, 0, (uint8_t)type, (uint8_t)ndims};
    for (unsigned i = 0; i < ndims; i++) {
        head[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        head[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        head[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        head[7 + 4 * i] = (uint8_t)dims[i];
    }
    const char *path = tmp_path(name);
    if (plain) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(head, 1, 4 + 4 * ndims, f), 4 + 4 * ndims);
        if (len)
            assert_int_equal(fwrite(payload, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
        return;
    }
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, head, 4 + 4 * ndims), (int)(4 + 4 * ndims));
    if (len)
        assert_int_equal(gzwrite(g, payload, (unsigned)len), (int)len);
    assert_int_equal(gzclose(g), Z_OK);
}

static uint8_t pixels[4 * 2 * 3];
static const uint8_t labels[4] = {3, 0, 9, 3};

static void write_good(void)
{
    for (size_t i = 0; i < sizeof(pixels); i++)
        pixels[i] = (uint8_t)(i * 11);
    pixels[5] = 255;
    uint32_t idims[3] = {4, 2, 3}, ldims[1] = {4};
    write_idx("good-img.gz", 8, 3, idims, pixels, sizeof(pixels), false);
    write_idx("good-lab.gz", 8, 1, ldims, labels, 4, false);
}

/* Expects `rc` and an error message that names the file and contains `what`. */
static void expect_error(int rc, int want, const char *err, const char *file, const char *what)
{
    if (rc != want || !strstr(err, file) || !strstr(err, what))
        fail_msg("got %s '%s', wanted %s naming %s with '%s'", zps_errname(rc), err,
                 zps_errname(want), file, what);
}

/*
 * The shared assignment's rule: batch g of the run is batch g % B of epoch
 * g / B, B = ceil(N / b) batches of b positions of the epoch's permutation
 * in order, the last holding the rest; an epoch's batches cover every
 * example exactly once, and they are that epoch's permutation cut in order.
 */
static void test_shared_batches(void **state)
{
    (void)state;
    const uint64_t n = 10;
    const uint32_t b = 3;
    zps_partition_t p;
    assert_int_equal(zps_partition_init(&p, n, 4, b, 7), 0);
    assert_int_equal(zps_shared_batches_per_epoch(&p), 4);
    uint64_t e, lo, hi;
    zps_shared_batch_range(&p, 5, &e, &lo, &hi); /* epoch 1, batch 1 */
    assert_int_equal(e, 1);
    assert_int_equal(lo, 3);
    assert_int_equal(hi, 6);
    zps_shared_batch_range(&p, 7, &e, &lo, &hi); /* epoch 1's last: the rest */
    assert_int_equal(e, 1);
    assert_int_equal(lo, 9);
    assert_int_equal(hi, 10);

    zps_data_order_t o;
    assert_int_equal(zps_data_order_init(&o, &p), 0);
    uint32_t perm[10], idx[3];
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
        zps_partition_permute(&p, epoch, perm);
        bool seen[10] = {false};
        size_t at = 0;
        /* Asked out of order, as leases arrive: 2, 0, 3, 1. */
        static const uint64_t order[4] = {2, 0, 3, 1};
        for (int k = 0; k < 4; k++) {
            uint64_t g = epoch * 4 + order[k];
            size_t m = zps_data_order_shared(&o, g, idx);
            assert_int_equal(m, order[k] == 3 ? 1 : 3);
            for (size_t i = 0; i < m; i++) {
                assert_int_equal(idx[i], perm[order[k] * 3 + i]);
                assert_false(seen[idx[i]]);
                seen[idx[i]] = true;
                at++;
            }
        }
        assert_int_equal(at, n);
    }
    zps_data_order_fini(&o);
}

static void test_idx_good(void **state)
{
    (void)state;
    write_good();
    zps_dataset_t ds;
    char err[512] = "";
    int rc = zps_dataset_load_idx(tmp_path("good-img.gz"), tmp_path("good-lab.gz"), 10, &ds, err,
                                  sizeof(err));
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(ds.n, 4);
    assert_int_equal(ds.dim, 6);
    assert_int_equal(ds.classes, 10);
    for (size_t i = 0; i < sizeof(pixels); i++)
        assert_true(ds.x[i] == (float)pixels[i] / 255.0f);
    assert_true(ds.x[5] == 1.0f);
    assert_true(ds.x[0] == 0.0f);
    for (int i = 0; i < 4; i++)
        assert_int_equal(ds.label[i], labels[i]);
    assert_null(ds.target);

    /* Gathering picks rows by index. */
    uint32_t idx[2] = {2, 0};
    float x[12];
    int32_t lab[2];
    zps_dataset_gather(&ds, idx, 2, x, lab, NULL);
    assert_memory_equal(x, ds.x + 12, 6 * sizeof(float));
    assert_memory_equal(x + 6, ds.x, 6 * sizeof(float));
    assert_int_equal(lab[0], 9);
    assert_int_equal(lab[1], 3);
    zps_dataset_fini(&ds);
    zps_dataset_fini(&ds); /* a finished set is a no-op */

    /* Plain (uncompressed) IDX reads the same. */
    uint32_t idims[3] = {4, 2, 3};
    write_idx("plain-img", 8, 3, idims, pixels, sizeof(pixels), true);
    zps_idx_t t;
    rc = zps_idx_read(tmp_path("plain-img"), &t, err, sizeof(err));
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(t.ndims, 3);
    assert_int_equal(t.dims[0], 4);
    assert_int_equal(t.dims[2], 3);
    assert_int_equal(t.count, sizeof(pixels));
    assert_memory_equal(t.data, pixels, sizeof(pixels));
    free(t.data);
}

static void test_idx_errors(void **state)
{
    (void)state;
    write_good();
    char err[512];
    zps_idx_t t;
    zps_dataset_t ds;
    int rc;
    uint32_t idims[3] = {4, 2, 3};

    rc = zps_idx_read(tmp_path("missing.gz"), &t, err, sizeof(err));
    expect_error(rc, ZPS_EIO, err, "missing.gz", "No such file");

    /* A broken magic: first byte 1. */
    {
        uint8_t payload[sizeof(pixels) + 16];
        uint8_t head[16] = {1, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 3};
        memcpy(payload, head, 16);
        memcpy(payload + 16, pixels, sizeof(pixels));
        gzFile g = gzopen(tmp_path("magic.gz"), "wb");
        assert_non_null(g);
        gzwrite(g, payload, sizeof(payload));
        gzclose(g);
    }
    rc = zps_idx_read(tmp_path("magic.gz"), &t, err, sizeof(err));
    expect_error(rc, ZPS_EDATA, err, "magic.gz", "bad magic");

    write_idx("type.gz", 0x0d, 3, idims, pixels, sizeof(pixels), false); /* float32 */
    rc = zps_idx_read(tmp_path("type.gz"), &t, err, sizeof(err));
    expect_error(rc, ZPS_EDATA, err, "type.gz", "type 0x0d");

    /* The header promises 4 images; 3.5 are there. */
    write_idx("trunc.gz", 8, 3, idims, pixels, sizeof(pixels) - 3, false);
    rc = zps_idx_read(tmp_path("trunc.gz"), &t, err, sizeof(err));
    expect_error(rc, ZPS_ECORRUPT, err, "trunc.gz", "truncated");

    write_idx("trail.gz", 8, 3, idims, pixels, sizeof(pixels), false);
    {
        /* Same dims, one more byte than they describe. */
        uint8_t more[sizeof(pixels) + 1];
        memcpy(more, pixels, sizeof(pixels));
        more[sizeof(pixels)] = 7;
        write_idx("trail.gz", 8, 3, idims, more, sizeof(more), false);
    }
    rc = zps_idx_read(tmp_path("trail.gz"), &t, err, sizeof(err));
    expect_error(rc, ZPS_EDATA, err, "trail.gz", "trailing bytes");

    uint32_t zdims[3] = {4, 0, 3};
    write_idx("zero.gz", 8, 3, zdims, NULL, 0, false);
    rc = zps_idx_read(tmp_path("zero.gz"), &t, err, sizeof(err));
    expect_error(rc, ZPS_EDATA, err, "zero.gz", "dimension 1 is zero");

    FILE *f = fopen(tmp_path("empty.gz"), "wb");
    assert_non_null(f);
    fclose(f);
    rc = zps_idx_read(tmp_path("empty.gz"), &t, err, sizeof(err));
    expect_error(rc, ZPS_ECORRUPT, err, "empty.gz", "header");

    /* A gzip stream cut short, and one with a flipped byte: zlib notices
     * (the CRC check at the end at the latest). Use a large incompressible
     * payload so the cut lands inside the deflate data. */
    {
        enum { BIG = 20000 };
        uint8_t *big = malloc(BIG);
        assert_non_null(big);
        uint32_t x = 1;
        for (int i = 0; i < BIG; i++) {
            x = x * 1664525u + 1013904223u;
            big[i] = (uint8_t)(x >> 24);
        }
        uint32_t bdims[1] = {BIG};
        write_idx("cut.gz", 8, 1, bdims, big, BIG, false);
        write_idx("flip.gz", 8, 1, bdims, big, BIG, false);
        free(big);
        FILE *g = fopen(tmp_path("cut.gz"), "rb");
        assert_non_null(g);
        uint8_t *raw = malloc(BIG + 1000);
        size_t len = fread(raw, 1, BIG + 1000, g);
        fclose(g);
        assert_true(len > 1000);
        g = fopen(tmp_path("cut.gz"), "wb");
        fwrite(raw, 1, len / 2, g);
        fclose(g);
        raw[len / 2] ^= 0x5a;
        g = fopen(tmp_path("flip.gz"), "wb");
        fwrite(raw, 1, len, g);
        fclose(g);
        free(raw);
    }
    rc = zps_idx_read(tmp_path("cut.gz"), &t, err, sizeof(err));
    expect_error(rc, ZPS_ECORRUPT, err, "cut.gz", "truncated");
    rc = zps_idx_read(tmp_path("flip.gz"), &t, err, sizeof(err));
    expect_error(rc, ZPS_ECORRUPT, err, "flip.gz", "");

    /* Images are converted as they are decompressed, in pieces: a set of
     * several pieces (3 x 200 x 200 bytes) arrives whole and exact, and the
     * same set cut short is refused as truncated, naming the file. */
    {
        enum { IN = 3, SIDE = 200, BYTES = IN * SIDE * SIDE };
        uint8_t *img = malloc(BYTES);
        assert_non_null(img);
        for (int i = 0; i < BYTES; i++)
            img[i] = (uint8_t)((unsigned)i * 7u + (unsigned)i / 251u);
        uint32_t sdims[3] = {IN, SIDE, SIDE}, ndims1[1] = {IN};
        write_idx("many-img.gz", 8, 3, sdims, img, BYTES, false);
        write_idx("many-lab.gz", 8, 1, ndims1, labels, IN, false);
        rc = zps_dataset_load_idx(tmp_path("many-img.gz"), tmp_path("many-lab.gz"), 10, &ds, err,
                                  sizeof(err));
        if (rc)
            fail_msg("%s", err);
        assert_int_equal(ds.n, IN);
        assert_int_equal(ds.dim, SIDE * SIDE);
        for (int i = 0; i < BYTES; i++)
            if (ds.x[i] != (float)img[i] / 255.0f)
                fail_msg("pixel %d: %.9g, expected %.9g", i, (double)ds.x[i],
                         (double)((float)img[i] / 255.0f));
        zps_dataset_fini(&ds);
        /* The header promises 4 images of which 3 are there. */
        uint32_t four[3] = {IN + 1, SIDE, SIDE}, ndims4[1] = {IN + 1};
        write_idx("short-img.gz", 8, 3, four, img, BYTES, false);
        write_idx("short-lab.gz", 8, 1, ndims4, labels, IN + 1, false);
        rc = zps_dataset_load_idx(tmp_path("short-img.gz"), tmp_path("short-lab.gz"), 10, &ds, err,
                                  sizeof(err));
        expect_error(rc, ZPS_ECORRUPT, err, "short-img.gz",
                     "truncated: expected 160000 data bytes");
        assert_non_null(strstr(err, "got 120000"));
        free(img);
    }

    /* Pairs that do not fit: a count mismatch, a label out of range, images
     * of the wrong rank. */
    uint32_t ldims3[1] = {3};
    write_idx("few-lab.gz", 8, 1, ldims3, labels, 3, false);
    rc = zps_dataset_load_idx(tmp_path("good-img.gz"), tmp_path("few-lab.gz"), 10, &ds, err,
                              sizeof(err));
    expect_error(rc, ZPS_EDATA, err, "few-lab.gz", "has 3 labels but");
    assert_non_null(strstr(err, "4 images"));

    uint8_t bad[4] = {1, 2, 10, 0};
    uint32_t ldims4[1] = {4};
    write_idx("range-lab.gz", 8, 1, ldims4, bad, 4, false);
    rc = zps_dataset_load_idx(tmp_path("good-img.gz"), tmp_path("range-lab.gz"), 10, &ds, err,
                              sizeof(err));
    expect_error(rc, ZPS_EDATA, err, "range-lab.gz", "label 10 of example 2 is out of range");

    uint32_t rdims[2] = {4, 6};
    write_idx("rank.gz", 8, 2, rdims, pixels, sizeof(pixels), false);
    rc = zps_dataset_load_idx(tmp_path("rank.gz"), tmp_path("good-lab.gz"), 10, &ds, err,
                              sizeof(err));
    expect_error(rc, ZPS_EDATA, err, "rank.gz", "3 dimensions");

    /* Missing files through the Fashion-MNIST loader name the full path. */
    rc = zps_dataset_load_fashion_mnist(tmpdir, "train", &ds, err, sizeof(err));
    expect_error(rc, ZPS_EIO, err, "train-images-idx3-ubyte.gz", "cannot open");
    rc = zps_dataset_load_fashion_mnist(tmpdir, "valid", &ds, err, sizeof(err));
    assert_int_equal(rc, ZPS_EINVAL);
}

/* The Fashion-MNIST pair is checked as a pair: a test set whose examples
 * have another number of features than the training set's is refused when
 * the data is opened, not at the first evaluation. */
static void test_fashion_mnist_shapes(void **state)
{
    (void)state;
    write_good();
    uint32_t tr_dims[3] = {4, 2, 3}, lab_dims[1] = {4};
    write_idx("train-images-idx3-ubyte.gz", 8, 3, tr_dims, pixels, sizeof(pixels), false);
    write_idx("train-labels-idx1-ubyte.gz", 8, 1, lab_dims, labels, sizeof(labels), false);
    /* Same shape: accepted. */
    write_idx("t10k-images-idx3-ubyte.gz", 8, 3, tr_dims, pixels, sizeof(pixels), false);
    write_idx("t10k-labels-idx1-ubyte.gz", 8, 1, lab_dims, labels, sizeof(labels), false);
    zps_dataset_t tr, te;
    char err[512] = "";
    int rc = zps_dataset_open("fashion-mnist", tmpdir, 1, &tr, &te, err, sizeof(err));
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(tr.dim, 6);
    assert_int_equal(te.dim, 6);
    zps_dataset_fini(&tr);
    zps_dataset_fini(&te);

    /* One part only: the other has its shape from its headers and no
     * examples; the loaded part is the same as when both are loaded. With
     * ZPS_DATA_BYTES the training images stay bytes, and gather to the same
     * floats, bit for bit. */
    for (unsigned parts = 0; parts < 8; parts++) {
        rc = zps_dataset_open_parts("fashion-mnist", tmpdir, 1, parts, &tr, &te, err, sizeof(err));
        if (rc)
            fail_msg("parts %u: %s", parts, err);
        const zps_dataset_t *both[2] = {&tr, &te};
        for (unsigned k = 0; k < 2; k++) {
            const zps_dataset_t *d = both[k];
            assert_int_equal(d->n, 4);
            assert_int_equal(d->dim, 6);
            assert_int_equal(d->classes, 10);
            if (parts & (k ? ZPS_DATA_TEST : ZPS_DATA_TRAIN)) {
                assert_non_null(d->label);
                float got[4 * 6];
                uint32_t order[4] = {0, 1, 2, 3};
                int32_t lab[4];
                if (!k && (parts & ZPS_DATA_BYTES)) {
                    assert_null(d->x);
                    assert_non_null(d->bytes);
                    assert_memory_equal(d->bytes, pixels, sizeof(pixels));
                } else {
                    assert_non_null(d->x);
                    assert_null(d->bytes);
                }
                zps_dataset_gather(d, order, 4, got, lab, NULL);
                for (size_t i = 0; i < sizeof(pixels); i++) {
                    float want = (float)pixels[i] / 255.0f;
                    assert_memory_equal(&got[i], &want, sizeof(float));
                }
                for (size_t i = 0; i < 4; i++)
                    assert_int_equal(d->label[i], labels[i]);
            } else {
                assert_null(d->x);
                assert_null(d->bytes);
                assert_null(d->label);
            }
        }
        zps_dataset_fini(&tr);
        zps_dataset_fini(&te);
    }
    /* A part read for its shape is still checked: images and labels of
     * different counts, and a broken header, are refused. */
    uint32_t three[1] = {3};
    write_idx("t10k-labels-idx1-ubyte.gz", 8, 1, three, labels, 3, false);
    rc = zps_dataset_open_parts("fashion-mnist", tmpdir, 1, ZPS_DATA_TRAIN, &tr, &te, err,
                                sizeof(err));
    expect_error(rc, ZPS_EDATA, err, "t10k-labels-idx1-ubyte.gz", "has 3 labels");
    write_idx("t10k-labels-idx1-ubyte.gz", 8, 1, lab_dims, labels, sizeof(labels), false);
    uint32_t flat[2] = {4, 6};
    write_idx("train-images-idx3-ubyte.gz", 8, 2, flat, pixels, sizeof(pixels), false);
    rc = zps_dataset_open_parts("fashion-mnist", tmpdir, 1, ZPS_DATA_TEST, &tr, &te, err,
                                sizeof(err));
    expect_error(rc, ZPS_EDATA, err, "train-images-idx3-ubyte.gz", "3 dimensions");
    write_idx("train-images-idx3-ubyte.gz", 8, 3, tr_dims, pixels, sizeof(pixels), false);

    /* Two examples of 2x2: 4 features against the training set's 6. */
    uint32_t te_dims[3] = {2, 2, 2}, te_lab_dims[1] = {2};
    write_idx("t10k-images-idx3-ubyte.gz", 8, 3, te_dims, pixels, 8, false);
    write_idx("t10k-labels-idx1-ubyte.gz", 8, 1, te_lab_dims, labels, 2, false);
    rc = zps_dataset_open("fashion-mnist", tmpdir, 1, &tr, &te, err, sizeof(err));
    expect_error(rc, ZPS_EDATA, err, "t10k-images-idx3-ubyte.gz",
                 "has 4 features per example, the training set");
    assert_non_null(strstr(err, "has 6"));
    const char *names[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(unlink(tmp_path(names[i])), 0);
}

/* ---- synthetic data and data specs ---- */

static void test_synthetic(void **state)
{
    (void)state;
    zps_synth_opts_t o;
    zps_synth_opts_default(&o, 9);
    o.n = 500;
    o.n_test = 100;
    o.dim = 7;
    zps_dataset_t a, b, t;
    assert_int_equal(zps_dataset_synthetic_linear(&o, false, &a), 0);
    assert_int_equal(zps_dataset_synthetic_linear(&o, false, &b), 0);
    assert_int_equal(zps_dataset_synthetic_linear(&o, true, &t), 0);
    assert_int_equal(a.n, 500);
    assert_int_equal(t.n, 100);
    assert_int_equal(a.classes, 0);
    assert_null(a.label);
    /* Deterministic, and the test split shares w* and b* but not x. */
    assert_memory_equal(a.x, b.x, 500 * 7 * sizeof(float));
    assert_memory_equal(a.true_w, t.true_w, 7 * sizeof(float));
    assert_true(a.true_b == t.true_b);
    assert_memory_not_equal(a.x, t.x, 100 * 7 * sizeof(float));
    /* Without noise y is exactly w*.x + b* (up to the float rounding of y). */
    double mean = 0, sq = 0;
    for (uint64_t i = 0; i < a.n; i++) {
        double y = a.true_b;
        for (uint32_t j = 0; j < 7; j++)
            y += (double)a.true_w[j] * a.x[i * 7 + j];
        assert_true(fabs(y - a.target[i]) <= 1e-6 * (1 + fabs(y)));
        for (uint32_t j = 0; j < 7; j++) {
            mean += a.x[i * 7 + j];
            sq += (double)a.x[i * 7 + j] * a.x[i * 7 + j];
        }
    }
    mean /= 3500;
    sq /= 3500;
    assert_true(fabs(mean) < 0.1); /* x ~ N(0, 1) */
    assert_true(fabs(sq - 1.0) < 0.1);
    zps_dataset_fini(&b);

    /* Noise: residuals with the requested standard deviation. */
    o.noise = 0.5;
    assert_int_equal(zps_dataset_synthetic_linear(&o, false, &b), 0);
    double r2 = 0;
    for (uint64_t i = 0; i < b.n; i++) {
        double y = b.true_b;
        for (uint32_t j = 0; j < 7; j++)
            y += (double)b.true_w[j] * b.x[i * 7 + j];
        r2 += (b.target[i] - y) * (b.target[i] - y);
    }
    assert_true(fabs(sqrt(r2 / 500) - 0.5) < 0.06);
    zps_dataset_fini(&a);
    zps_dataset_fini(&b);
    zps_dataset_fini(&t);

    o.dim = 0;
    assert_int_equal(zps_dataset_synthetic_linear(&o, false, &a), ZPS_EINVAL);
}

static void test_data_specs(void **state)
{
    (void)state;
    zps_dataset_t tr, te;
    char err[256];
    assert_int_equal(zps_dataset_open("synthetic:n=300,test=50,dim=3,noise=0.1,seed=4", "/none", 1,
                                      &tr, &te, err, sizeof(err)),
                     0);
    assert_int_equal(tr.n, 300);
    assert_int_equal(te.n, 50);
    assert_int_equal(tr.dim, 3);
    zps_dataset_fini(&tr);
    zps_dataset_fini(&te);
    assert_int_equal(zps_dataset_open("synthetic", "/none", 1, &tr, &te, err, sizeof(err)), 0);
    assert_int_equal(tr.n, 10000);
    assert_int_equal(tr.dim, 16);
    zps_dataset_fini(&tr);
    zps_dataset_fini(&te);

    static const char *const bad[] = {"synthetic:n=0",      "synthetic:dim=x", "synthetic:foo=1",
                                      "synthetic:noise=-1", "synthetic:",      "synthetic:n",
                                      "synthetic2",         "mnist",           ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        int rc = zps_dataset_open(bad[i], "/none", 1, &tr, &te, err, sizeof(err));
        if (rc != ZPS_EINVAL || !err[0])
            fail_msg("'%s': %s '%s'", bad[i], zps_errname(rc), err);
    }
    int rc =
        zps_dataset_open("fashion-mnist", "/nonexistent-zps-dir", 1, &tr, &te, err, sizeof(err));
    expect_error(rc, ZPS_EIO, err, "/nonexistent-zps-dir/train-images-idx3-ubyte.gz", "open");
}

/*
 * Classification: the label of every example is the argmax of the teacher's
 * scores, recomputed here in float64 (the lowest class on a tie).
 */
static uint32_t teacher_label(const zps_dataset_t *ds, uint64_t i)
{
    uint32_t best = 0;
    double best_score = 0;
    for (uint32_t k = 0; k < ds->classes; k++) {
        double s = 0;
        for (uint32_t j = 0; j < ds->dim; j++)
            s += (double)ds->true_w[k * ds->dim + j] * ds->x[i * ds->dim + j];
        if (k == 0 || s > best_score) {
            best = k;
            best_score = s;
        }
    }
    return best;
}

static void test_synthetic_classes(void **state)
{
    (void)state;
    zps_synth_opts_t o;
    zps_synth_opts_default(&o, 5);
    o.n = 1000;
    o.n_test = 200;
    o.dim = 16;
    o.classes = 4;
    zps_dataset_t a, b, t;
    assert_int_equal(zps_dataset_synthetic_classes(&o, false, &a), 0);
    assert_int_equal(zps_dataset_synthetic_classes(&o, false, &b), 0);
    assert_int_equal(zps_dataset_synthetic_classes(&o, true, &t), 0);
    assert_int_equal(a.n, 1000);
    assert_int_equal(t.n, 200);
    assert_int_equal(a.dim, 16);
    assert_int_equal(a.classes, 4);
    assert_int_equal(t.classes, 4);
    assert_non_null(a.label);
    assert_null(a.target);

    /* Labels in range, each one the teacher's argmax, every class well
     * represented (a random teacher without bias: no class near empty). */
    unsigned count[4] = {0};
    for (uint64_t i = 0; i < a.n; i++) {
        assert_true(a.label[i] >= 0 && a.label[i] < 4);
        assert_int_equal(a.label[i], teacher_label(&a, i));
        count[a.label[i]]++;
    }
    for (int k = 0; k < 4; k++)
        if (count[k] < 1000 / 4 / 4)
            fail_msg("class %d has %u of 1000 examples", k, count[k]);
    for (uint64_t i = 0; i < t.n; i++)
        assert_int_equal(t.label[i], teacher_label(&t, i));

    /* Deterministic per seed; the test split has the same teacher, other x. */
    assert_memory_equal(a.x, b.x, 1000 * 16 * sizeof(float));
    assert_memory_equal(a.label, b.label, 1000 * sizeof(int32_t));
    assert_memory_equal(a.true_w, b.true_w, 4 * 16 * sizeof(float));
    assert_memory_equal(a.true_w, t.true_w, 4 * 16 * sizeof(float));
    assert_memory_not_equal(a.x, t.x, 200 * 16 * sizeof(float));
    zps_dataset_fini(&b);

    /* Another seed: another teacher, other x and other labels. */
    o.seed = 6;
    assert_int_equal(zps_dataset_synthetic_classes(&o, false, &b), 0);
    assert_memory_not_equal(a.true_w, b.true_w, 4 * 16 * sizeof(float));
    assert_memory_not_equal(a.x, b.x, 1000 * 16 * sizeof(float));
    assert_memory_not_equal(a.label, b.label, 1000 * sizeof(int32_t));
    zps_dataset_fini(&b);

    /* Score noise flips some labels, not most. */
    o.seed = 5;
    o.noise = 0.5;
    assert_int_equal(zps_dataset_synthetic_classes(&o, false, &b), 0);
    unsigned flipped = 0;
    for (uint64_t i = 0; i < b.n; i++) {
        assert_true(b.label[i] >= 0 && b.label[i] < 4);
        flipped += (uint32_t)b.label[i] != teacher_label(&b, i);
    }
    if (flipped == 0 || flipped > b.n / 3)
        fail_msg("noise 0.5 changed %u of %u labels", flipped, (unsigned)b.n);
    zps_dataset_fini(&a);
    zps_dataset_fini(&b);
    zps_dataset_fini(&t);

    /* Ten classes on a larger set: every class present. */
    zps_synth_opts_default(&o, 1);
    o.n = 5000;
    o.classes = 10;
    assert_int_equal(zps_dataset_synthetic_classes(&o, false, &a), 0);
    unsigned count10[10] = {0};
    for (uint64_t i = 0; i < a.n; i++) {
        assert_true(a.label[i] >= 0 && a.label[i] < 10);
        count10[a.label[i]]++;
    }
    for (int k = 0; k < 10; k++)
        if (count10[k] == 0)
            fail_msg("class %d of 10 is missing from 5000 examples", k);
    zps_dataset_fini(&a);

    o.classes = 1;
    assert_int_equal(zps_dataset_synthetic_classes(&o, false, &a), ZPS_EINVAL);
    o.classes = 0;
    assert_int_equal(zps_dataset_synthetic_classes(&o, false, &a), ZPS_EINVAL);
    o.classes = 3;
    o.dim = 0;
    assert_int_equal(zps_dataset_synthetic_classes(&o, false, &a), ZPS_EINVAL);
}

static void test_synthetic_classes_spec(void **state)
{
    (void)state;
    zps_dataset_t tr, te;
    char err[256];
    int rc = zps_dataset_open("synthetic:n=300,test=50,dim=5,classes=3,seed=4", "/none", 1, &tr,
                              &te, err, sizeof(err));
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(tr.n, 300);
    assert_int_equal(te.n, 50);
    assert_int_equal(tr.dim, 5);
    assert_int_equal(tr.classes, 3);
    assert_int_equal(te.classes, 3);
    assert_non_null(tr.label);
    assert_non_null(te.label);
    assert_null(tr.target);
    /* The spec's seed wins over the run's, as for regression. */
    zps_synth_opts_t o;
    zps_synth_opts_default(&o, 4);
    o.n = 300;
    o.dim = 5;
    o.classes = 3;
    zps_dataset_t ref;
    assert_int_equal(zps_dataset_synthetic_classes(&o, false, &ref), 0);
    assert_memory_equal(tr.label, ref.label, 300 * sizeof(int32_t));
    assert_memory_equal(tr.x, ref.x, 300 * 5 * sizeof(float));
    zps_dataset_fini(&ref);
    zps_dataset_fini(&tr);
    zps_dataset_fini(&te);

    /* Without classes the set stays a regression set. */
    rc = zps_dataset_open("synthetic:n=30,test=5,dim=2", "/none", 1, &tr, &te, err, sizeof(err));
    assert_int_equal(rc, 0);
    assert_int_equal(tr.classes, 0);
    assert_null(tr.label);
    assert_non_null(tr.target);
    zps_dataset_fini(&tr);
    zps_dataset_fini(&te);

    /* clang-format off */
    static const char *const bad[][2] = {
        {"synthetic:classes=1", "classes=1"},
        {"synthetic:n=50,classes=0", "classes=0"},
        {"synthetic:classes=x", "classes=x"},
        {"synthetic:classes=", "classes="},
        {"synthetic:classes=-3", "classes=-3"},
        {"synthetic:classes=2.5", "classes=2.5"},
        {"synthetic:classes=65537", "classes=65537"},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        rc = zps_dataset_open(bad[i][0], "/none", 1, &tr, &te, err, sizeof(err));
        if (rc != ZPS_EINVAL || !strstr(err, bad[i][1]) || !strstr(err, "from 2 to"))
            fail_msg("'%s': %s '%s', wanted ZPS_EINVAL naming '%s'", bad[i][0], zps_errname(rc),
                     err, bad[i][1]);
    }
}

/* ---- the real set ---- */

/* Cases skipped for want of data; main() turns them into exit status 77. */
static int skipped;

static void test_fashion_mnist(void **state)
{
    (void)state;
    const char *dir = getenv("ZPS_FASHION_MNIST_DIR");
    if (!dir)
        dir = "/usr/share/datasets/fashion-mnist";
    char path[512];
    snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", dir);
    if (access(path, R_OK) != 0) {
        print_message("skipped: Fashion-MNIST is not installed in %s\n", dir);
        skipped++;
        skip();
    }
    zps_dataset_t tr, te;
    char err[512];
    int rc = zps_dataset_open("fashion-mnist", dir, 1, &tr, &te, err, sizeof(err));
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(tr.n, 60000);
    assert_int_equal(tr.dim, 784);
    assert_int_equal(tr.classes, 10);
    assert_int_equal(te.n, 10000);
    assert_int_equal(te.dim, 784);
    /* Fashion-MNIST is balanced: 6000 and 1000 examples per class. */
    unsigned ctr[10] = {0}, cte[10] = {0};
    for (uint64_t i = 0; i < tr.n; i++)
        ctr[tr.label[i]]++;
    for (uint64_t i = 0; i < te.n; i++)
        cte[te.label[i]]++;
    for (int k = 0; k < 10; k++) {
        assert_int_equal(ctr[k], 6000);
        assert_int_equal(cte[k], 1000);
    }
    float lo = 1, hi = 0;
    for (uint64_t i = 0; i < tr.n * tr.dim; i++) {
        lo = tr.x[i] < lo ? tr.x[i] : lo;
        hi = tr.x[i] > hi ? tr.x[i] : hi;
    }
    assert_true(lo == 0.0f);
    assert_true(hi == 1.0f);
    /* Kept as bytes (what a training worker does), every example gathers
     * to the floats of the set loaded as floats, bit for bit. */
    zps_dataset_t tb, none;
    rc = zps_dataset_open_parts("fashion-mnist", dir, 1, ZPS_DATA_TRAIN | ZPS_DATA_BYTES, &tb,
                                &none, err, sizeof(err));
    if (rc)
        fail_msg("%s", err);
    assert_null(tb.x);
    assert_null(none.x);
    assert_int_equal(none.n, 10000);
    enum { PIECE = 1000 };
    uint32_t idx[PIECE];
    int32_t lab[PIECE];
    float *got = malloc((size_t)PIECE * tr.dim * sizeof(float));
    assert_non_null(got);
    for (uint64_t lo_i = 0; lo_i < tr.n; lo_i += PIECE) {
        for (uint32_t i = 0; i < PIECE; i++)
            idx[i] = (uint32_t)(tr.n - 1 - (lo_i + i)); /* backwards: any order */
        zps_dataset_gather(&tb, idx, PIECE, got, lab, NULL);
        for (uint32_t i = 0; i < PIECE; i++) {
            if (memcmp(got + (size_t)i * tr.dim, tr.x + (size_t)idx[i] * tr.dim,
                       tr.dim * sizeof(float)) != 0)
                fail_msg("example %u gathers to other floats from bytes", idx[i]);
            assert_int_equal(lab[i], tr.label[idx[i]]);
        }
    }
    free(got);
    zps_dataset_fini(&tb);
    zps_dataset_fini(&none);
    zps_dataset_fini(&tr);
    zps_dataset_fini(&te);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partition_coverage),
        cmocka_unit_test(test_partition_examples),
        cmocka_unit_test(test_permutation_seeded),
        cmocka_unit_test(test_shared_batches),
        cmocka_unit_test(test_idx_good),
        cmocka_unit_test(test_idx_errors),
        cmocka_unit_test(test_fashion_mnist_shapes),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_data_specs),
        cmocka_unit_test(test_fashion_mnist),
        cmocka_unit_test(test_synthetic_classes),
        cmocka_unit_test(test_synthetic_classes_spec),
    };
    int failed = cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
    /* A failure wins over a skip: 77 only when everything that ran passed. */
    return failed ? failed : skipped ? 77 : 0;
}
