/*
 * data.c - IDX files, synthetic sets and the data-order rule; see data.h.
 */
#include "data.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <zlib.h>

#include "error.h"
#include "parse.h"
#include "rng.h"

/* Stream tags keep the generators of different purposes apart for one seed. */
#define ORDER_STREAM 0x4f52444552000000ull /* "ORDER", plus the epoch */
#define SYNTH_W_STREAM 0x53594e5448570000ull
#define SYNTH_TRAIN_STREAM 0x53594e5448540000ull
#define SYNTH_TEST_STREAM 0x53594e5448450000ull
#define SYNTH_TEACHER_STREAM 0x53594e5448430000ull

/* The most classes a synthetic set may have. */
#define SYNTH_MAX_CLASSES 65536u

/* The largest IDX tensor we accept: 16 GiB of bytes is far beyond any set we use. */
#define IDX_MAX_BYTES (1ull << 34)

void zps_dataset_fini(zps_dataset_t *ds)
{
    if (!ds)
        return;
    free(ds->x);
    free(ds->bytes);
    free(ds->label);
    free(ds->target);
    free(ds->true_w);
    memset(ds, 0, sizeof(*ds));
}

/* ---- IDX ---- */

/*
 * Reads exactly `len` bytes. gzread takes an unsigned int count, so large
 * tensors are read in chunks. *got says how many bytes arrived; the return
 * value is 0, or the zlib error kind when the stream failed (-1 for an I/O
 * error, -2 for a data error) and 0 with *got < len at a plain end of file.
 */
static int gz_read_all(gzFile f, void *buf, size_t len, size_t *got)
{
    unsigned char *p = buf;
    *got = 0;
    while (*got < len) {
        size_t want = len - *got;
        if (want > (1u << 30))
            want = 1u << 30;
        int n = gzread(f, p + *got, (unsigned)want);
        if (n < 0) {
            int errnum;
            gzerror(f, &errnum);
            return errnum == Z_ERRNO ? -1 : -2;
        }
        if (n == 0)
            return 0;
        *got += (size_t)n;
    }
    return 0;
}

/* A short description of why the stream stopped, for messages. */
static const char *gz_why(gzFile f)
{
    int errnum;
    const char *msg = gzerror(f, &errnum);
    if (errnum == Z_ERRNO)
        return strerror(errno);
    if (errnum == Z_OK || !msg || !*msg)
        return "unexpected end of file";
    return msg;
}

/* zlib's default 8 KiB input buffer costs a read system call per 8 KiB. */
#define IDX_GZ_BUFFER (256u << 10)
/* Image bytes are converted to floats this many at a time. */
#define IDX_CHUNK (64u << 10)

/*
 * Opens path and reads its IDX header into *idx (data NULL, count the
 * product of the dimensions); *fp is left just after the header. On failure
 * nothing is left open and err says why (the errors of zps_idx_read).
 */
static int idx_open(const char *path, gzFile *fp, zps_idx_t *idx, char *err, size_t err_size)
{
    int rc;
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        zps_set_reason(err, err_size, "%s: cannot open: %s", path,
                       errno ? strerror(errno) : "out of memory");
        return errno ? ZPS_EIO : ZPS_ENOMEM;
    }
    (void)gzbuffer(f, IDX_GZ_BUFFER);

    unsigned char head[4];
    size_t got;
    rc = gz_read_all(f, head, 4, &got);
    if (rc == -1) {
        zps_set_reason(err, err_size, "%s: read error: %s", path, gz_why(f));
        rc = ZPS_EIO;
        goto fail;
    }
    if (rc != 0 || got < 4) {
        zps_set_reason(err, err_size, "%s: truncated or not gzip: %zu of 4 header bytes (%s)", path,
                       got, gz_why(f));
        rc = ZPS_ECORRUPT;
        goto fail;
    }
    if (head[0] != 0 || head[1] != 0) {
        zps_set_reason(
            err, err_size,
            "%s: bad magic %02x %02x %02x %02x: not an IDX file (expected 00 00 08 <ndims>)", path,
            head[0], head[1], head[2], head[3]);
        rc = ZPS_EDATA;
        goto fail;
    }
    if (head[2] != 0x08) {
        zps_set_reason(err, err_size,
                       "%s: IDX type 0x%02x is not supported (only unsigned bytes, 0x08)", path,
                       head[2]);
        rc = ZPS_EDATA;
        goto fail;
    }
    uint32_t ndims = head[3];
    if (ndims < 1 || ndims > 4) {
        zps_set_reason(err, err_size, "%s: IDX rank %u is not supported (1 to 4)", path, ndims);
        rc = ZPS_EDATA;
        goto fail;
    }

    unsigned char dimbuf[16];
    rc = gz_read_all(f, dimbuf, 4 * ndims, &got);
    if (rc != 0 || got < 4 * ndims) {
        zps_set_reason(err, err_size, "%s: truncated header: %zu of %u dimension bytes (%s)", path,
                       got, 4 * ndims, gz_why(f));
        rc = rc == -1 ? ZPS_EIO : ZPS_ECORRUPT;
        goto fail;
    }
    zps_idx_t h = {.ndims = ndims};
    uint64_t count = 1;
    for (uint32_t i = 0; i < ndims; i++) {
        const unsigned char *d = dimbuf + 4 * i;
        h.dims[i] = (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
        if (h.dims[i] == 0) {
            zps_set_reason(err, err_size, "%s: dimension %u is zero", path, i);
            rc = ZPS_EDATA;
            goto fail;
        }
        count *= h.dims[i];
        if (count > IDX_MAX_BYTES) {
            zps_set_reason(err, err_size, "%s: dimensions too large (more than %llu elements)",
                           path, (unsigned long long)IDX_MAX_BYTES);
            rc = ZPS_EDATA;
            goto fail;
        }
    }
    h.count = count;
    *idx = h;
    *fp = f;
    return 0;

fail:
    gzclose(f);
    return rc;
}

int zps_idx_read_header(const char *path, zps_idx_t *out, char *err, size_t err_size)
{
    gzFile f;
    zps_idx_t idx;
    int rc = idx_open(path, &f, &idx, err, err_size);
    if (rc)
        return rc;
    gzclose(f);
    *out = idx;
    return 0;
}

/* An image byte as the float a data set holds: every loader and
 * zps_dataset_gather convert with this one expression, so that a set kept
 * as bytes gathers to the same bits as one loaded as floats. */
static inline float pixel(uint8_t b)
{
    return (float)b / 255.0f;
}

/*
 * Reads the `count` data bytes after the header and checks what follows
 * (the gzip trailer, and nothing after the tensor). The bytes go to
 * bytes[count] when it is not NULL, else through a small buffer into
 * x[count] scaled by 1/255: an image set never exists in memory twice.
 * Closes f; errors as zps_idx_read.
 */
static int idx_stream(gzFile f, const char *path, uint64_t count, uint8_t *bytes, float *x,
                      char *err, size_t err_size)
{
    uint8_t chunk[IDX_CHUNK];
    uint64_t done = 0;
    size_t got = 0;
    int rc = 0;
    while (done < count) {
        size_t want = bytes ? (size_t)(count - done)
                            : (size_t)(count - done < IDX_CHUNK ? count - done : IDX_CHUNK);
        uint8_t *to = bytes ? bytes + done : chunk;
        rc = gz_read_all(f, to, want, &got);
        if (rc == 0 && x)
            for (size_t i = 0; i < got; i++)
                x[done + i] = pixel(to[i]);
        done += got;
        if (rc != 0 || got < want)
            break;
    }
    if (rc == -1) {
        zps_set_reason(err, err_size, "%s: read error: %s", path, gz_why(f));
        rc = ZPS_EIO;
        goto out;
    }
    if (rc != 0 || done < count) {
        zps_set_reason(err, err_size, "%s: truncated: expected %llu data bytes, got %llu (%s)",
                       path, (unsigned long long)count, (unsigned long long)done, gz_why(f));
        rc = ZPS_ECORRUPT;
        goto out;
    }
    /* Reading past the data makes zlib check the gzip trailer (CRC and
     * length) and tells us whether anything follows the tensor. */
    unsigned char extra;
    rc = gz_read_all(f, &extra, 1, &got);
    if (rc != 0) {
        zps_set_reason(err, err_size, "%s: corrupt gzip stream after the data: %s", path,
                       gz_why(f));
        rc = rc == -1 ? ZPS_EIO : ZPS_ECORRUPT;
        goto out;
    }
    if (got != 0) {
        zps_set_reason(err, err_size,
                       "%s: trailing bytes after %llu data bytes (dimensions wrong?)", path,
                       (unsigned long long)count);
        rc = ZPS_EDATA;
    }
out:
    gzclose(f);
    return rc;
}

int zps_idx_read(const char *path, zps_idx_t *out, char *err, size_t err_size)
{
    gzFile f;
    zps_idx_t idx;
    int rc = idx_open(path, &f, &idx, err, err_size);
    if (rc)
        return rc;
    uint8_t *data = malloc(idx.count);
    if (!data) {
        gzclose(f);
        zps_set_reason(err, err_size, "%s: out of memory for %llu bytes", path,
                       (unsigned long long)idx.count);
        return ZPS_ENOMEM;
    }
    rc = idx_stream(f, path, idx.count, data, NULL, err, err_size);
    if (rc) {
        free(data);
        return rc;
    }
    idx.data = data;
    *out = idx;
    return 0;
}

/*
 * An array of `bytes` for a whole data set. From 4 MiB it is aligned to
 * 2 MiB and the kernel is asked for transparent huge pages (where
 * /sys/kernel/mm/transparent_hugepage/enabled is "madvise"): its first
 * touch then faults once per 2 MiB instead of once per 4 KiB, which is most
 * of the cost of loading Fashion-MNIST on a virtual machine. free() frees it.
 */
static void *alloc_set(size_t bytes)
{
    const size_t huge = 2u << 20;
    if (bytes < 2 * huge)
        return malloc(bytes ? bytes : 1);
    size_t len = (bytes + huge - 1) / huge * huge;
    void *p = NULL;
    if (posix_memalign(&p, huge, len) != 0)
        return NULL;
    (void)madvise(p, len, MADV_HUGEPAGE);
    return p;
}

/* An image and a label header that make a data set: ranks 3 and 1, one label an image. */
static int check_pair(const char *images_path, const zps_idx_t *img, const char *labels_path,
                      const zps_idx_t *lab, char *err, size_t err_size)
{
    if (img->ndims != 3) {
        zps_set_reason(err, err_size, "%s: images must have 3 dimensions [N, rows, cols], found %u",
                       images_path, img->ndims);
        return ZPS_EDATA;
    }
    if (lab->ndims != 1) {
        zps_set_reason(err, err_size, "%s: labels must have 1 dimension [N], found %u", labels_path,
                       lab->ndims);
        return ZPS_EDATA;
    }
    if (img->dims[0] != lab->dims[0]) {
        zps_set_reason(err, err_size, "%s has %u labels but %s has %u images", labels_path,
                       lab->dims[0], images_path, img->dims[0]);
        return ZPS_EDATA;
    }
    return 0;
}

static int load_idx(const char *images_path, const char *labels_path, uint32_t classes,
                    bool keep_bytes, zps_dataset_t *out, char *err, size_t err_size)
{
    zps_idx_t img, lab = {0};
    zps_dataset_t ds = {0};
    gzFile f = NULL;
    /* The images' header, then the labels and their checks, then the
     * images' bytes (the bulk). */
    int rc = idx_open(images_path, &f, &img, err, err_size);
    if (rc)
        return rc;
    if ((rc = zps_idx_read(labels_path, &lab, err, err_size)) != 0)
        goto fail;
    if ((rc = check_pair(images_path, &img, labels_path, &lab, err, err_size)) != 0)
        goto fail;
    for (uint32_t i = 0; i < lab.dims[0]; i++) {
        if (lab.data[i] >= classes) {
            zps_set_reason(err, err_size, "%s: label %u of example %u is out of range [0, %u)",
                           labels_path, lab.data[i], i, classes);
            rc = ZPS_EDATA;
            goto fail;
        }
    }

    ds.n = img.dims[0];
    ds.dim = img.dims[1] * img.dims[2];
    ds.classes = classes;
    if (keep_bytes)
        ds.bytes = alloc_set(img.count);
    else
        ds.x = alloc_set(img.count * sizeof(float));
    ds.label = malloc(ds.n * sizeof(int32_t));
    if ((!ds.x && !ds.bytes) || !ds.label) {
        zps_set_reason(err, err_size, "%s: out of memory", images_path);
        rc = ZPS_ENOMEM;
        goto fail;
    }
    rc = idx_stream(f, images_path, img.count, ds.bytes, ds.x, err, err_size);
    f = NULL;
    if (rc)
        goto fail;
    for (uint64_t i = 0; i < ds.n; i++)
        ds.label[i] = lab.data[i];
    free(lab.data);
    *out = ds;
    return 0;

fail:
    if (f)
        gzclose(f);
    zps_dataset_fini(&ds);
    free(lab.data);
    return rc;
}

int zps_dataset_load_idx(const char *images_path, const char *labels_path, uint32_t classes,
                         zps_dataset_t *out, char *err, size_t err_size)
{
    return load_idx(images_path, labels_path, classes, false, out, err, err_size);
}

/* The image and label paths of a Fashion-MNIST split, or ZPS_EINVAL. */
static int fashion_paths(const char *dir, const char *split, char images[PATH_MAX],
                         char labels[PATH_MAX], char *err, size_t err_size)
{
    if (strcmp(split, "train") != 0 && strcmp(split, "t10k") != 0) {
        zps_set_reason(err, err_size, "unknown Fashion-MNIST split '%s' (train or t10k)", split);
        return ZPS_EINVAL;
    }
    int a = snprintf(images, PATH_MAX, "%s/%s-images-idx3-ubyte.gz", dir, split);
    int b = snprintf(labels, PATH_MAX, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    if (a < 0 || b < 0 || a >= PATH_MAX || b >= PATH_MAX) {
        zps_set_reason(err, err_size, "data directory path too long: %s", dir);
        return ZPS_EINVAL;
    }
    return 0;
}

static int load_fashion(const char *dir, const char *split, bool keep_bytes, zps_dataset_t *out,
                        char *err, size_t err_size)
{
    char images[PATH_MAX], labels[PATH_MAX];
    int rc = fashion_paths(dir, split, images, labels, err, err_size);
    return rc ? rc : load_idx(images, labels, 10, keep_bytes, out, err, err_size);
}

int zps_dataset_load_fashion_mnist(const char *dir, const char *split, zps_dataset_t *out,
                                   char *err, size_t err_size)
{
    return load_fashion(dir, split, false, out, err, err_size);
}

/*
 * A split's shape from its two headers, as zps_dataset_load_fashion_mnist
 * would find it (the same rank and count checks), without its examples:
 * x and label stay NULL.
 */
static int fashion_shape(const char *dir, const char *split, zps_dataset_t *out, char *err,
                         size_t err_size)
{
    char images[PATH_MAX], labels[PATH_MAX];
    zps_idx_t img, lab;
    int rc = fashion_paths(dir, split, images, labels, err, err_size);
    if (rc || (rc = zps_idx_read_header(images, &img, err, err_size)) != 0 ||
        (rc = zps_idx_read_header(labels, &lab, err, err_size)) != 0 ||
        (rc = check_pair(images, &img, labels, &lab, err, err_size)) != 0)
        return rc;
    memset(out, 0, sizeof(*out));
    out->n = img.dims[0];
    out->dim = img.dims[1] * img.dims[2];
    out->classes = 10;
    return 0;
}

/* ---- synthetic sets ---- */

void zps_synth_opts_default(zps_synth_opts_t *o, uint64_t seed)
{
    o->n = 10000;
    o->n_test = 2000;
    o->dim = 16;
    o->classes = 0;
    o->noise = 0.0;
    o->seed = seed;
}

int zps_dataset_synthetic_linear(const zps_synth_opts_t *o, bool test, zps_dataset_t *out)
{
    uint64_t n = test ? o->n_test : o->n;
    if (n == 0 || n > UINT32_MAX || o->dim == 0 || !(o->noise >= 0))
        return ZPS_EINVAL;
    if (n > SIZE_MAX / sizeof(float) / o->dim)
        return ZPS_ENOMEM;
    zps_dataset_t ds = {.n = n, .dim = o->dim, .classes = 0};
    ds.x = malloc((size_t)n * o->dim * sizeof(float));
    ds.target = malloc((size_t)n * sizeof(float));
    ds.true_w = malloc(o->dim * sizeof(float));
    if (!ds.x || !ds.target || !ds.true_w) {
        zps_dataset_fini(&ds);
        return ZPS_ENOMEM;
    }

    zps_rng_t r;
    zps_rng_seed(&r, o->seed, SYNTH_W_STREAM);
    for (uint32_t j = 0; j < o->dim; j++)
        ds.true_w[j] = (float)zps_rng_normal(&r);
    ds.true_b = (float)zps_rng_normal(&r);

    zps_rng_seed(&r, o->seed, test ? SYNTH_TEST_STREAM : SYNTH_TRAIN_STREAM);
    for (uint64_t i = 0; i < n; i++) {
        float *xi = ds.x + i * o->dim;
        double y = ds.true_b;
        for (uint32_t j = 0; j < o->dim; j++) {
            xi[j] = (float)zps_rng_normal(&r);
            y += (double)ds.true_w[j] * xi[j];
        }
        if (o->noise > 0)
            y += o->noise * zps_rng_normal(&r);
        ds.target[i] = (float)y;
    }
    *out = ds;
    return 0;
}

int zps_dataset_synthetic_classes(const zps_synth_opts_t *o, bool test, zps_dataset_t *out)
{
    uint64_t n = test ? o->n_test : o->n;
    if (n == 0 || n > UINT32_MAX || o->dim == 0 || o->classes < 2 ||
        o->classes > SYNTH_MAX_CLASSES || !(o->noise >= 0))
        return ZPS_EINVAL;
    if (n > SIZE_MAX / sizeof(float) / o->dim)
        return ZPS_ENOMEM;
    uint32_t c = o->classes;
    zps_dataset_t ds = {.n = n, .dim = o->dim, .classes = c};
    ds.x = malloc((size_t)n * o->dim * sizeof(float));
    ds.label = malloc((size_t)n * sizeof(int32_t));
    ds.true_w = malloc((size_t)c * o->dim * sizeof(float));
    if (!ds.x || !ds.label || !ds.true_w) {
        zps_dataset_fini(&ds);
        return ZPS_ENOMEM;
    }

    /* The teacher: one row of weights per class, no bias, so that no class
     * is favoured before the weights are drawn. */
    zps_rng_t r;
    zps_rng_seed(&r, o->seed, SYNTH_TEACHER_STREAM);
    for (size_t j = 0; j < (size_t)c * o->dim; j++)
        ds.true_w[j] = (float)zps_rng_normal(&r);

    /* The split's own stream gives x and the score noise, example by example. */
    zps_rng_seed(&r, o->seed, test ? SYNTH_TEST_STREAM : SYNTH_TRAIN_STREAM);
    for (uint64_t i = 0; i < n; i++) {
        float *xi = ds.x + i * o->dim;
        for (uint32_t j = 0; j < o->dim; j++)
            xi[j] = (float)zps_rng_normal(&r);
        uint32_t best = 0;
        double best_score = 0;
        for (uint32_t k = 0; k < c; k++) {
            const float *tk = ds.true_w + (size_t)k * o->dim;
            double score = 0;
            for (uint32_t j = 0; j < o->dim; j++)
                score += (double)tk[j] * xi[j];
            if (o->noise > 0)
                score += o->noise * zps_rng_normal(&r);
            if (k == 0 || score > best_score) {
                best = k;
                best_score = score;
            }
        }
        ds.label[i] = (int32_t)best;
    }
    *out = ds;
    return 0;
}

/* Parses "n=N,test=M,dim=D,classes=C,noise=S,seed=X" into o. */
static int parse_synth_opts(const char *text, zps_synth_opts_t *o, char *err, size_t err_size)
{
    char **items = NULL;
    size_t count = 0;
    if (zps_parse_list(text, &items, &count) != 0) {
        zps_set_reason(err, err_size, "synthetic: cannot parse options '%s'", text);
        return ZPS_EINVAL;
    }
    int rc = 0;
    const char *bad_classes = NULL; /* points into items */
    for (size_t i = 0; i < count && rc == 0; i++) {
        char *key = items[i];
        char *val = strchr(key, '=');
        if (!val) {
            rc = ZPS_EINVAL;
            break;
        }
        *val++ = '\0';
        uint64_t u;
        double d;
        if (strcmp(key, "classes") == 0) {
            /* Its own message: classes=1 is a plausible slip worth naming. */
            if (zps_parse_u64(val, &u) == 0 && u >= 2 && u <= SYNTH_MAX_CLASSES) {
                o->classes = (uint32_t)u;
            } else {
                bad_classes = val;
                rc = ZPS_EINVAL;
            }
            continue;
        }
        if (strcmp(key, "n") == 0 && zps_parse_u64(val, &u) == 0 && u > 0)
            o->n = u;
        else if (strcmp(key, "test") == 0 && zps_parse_u64(val, &u) == 0 && u > 0)
            o->n_test = u;
        else if (strcmp(key, "dim") == 0 && zps_parse_u64(val, &u) == 0 && u > 0 && u <= 1000000)
            o->dim = (uint32_t)u;
        else if (strcmp(key, "noise") == 0 && zps_parse_double(val, &d) == 0 && d >= 0)
            o->noise = d;
        else if (strcmp(key, "seed") == 0 && zps_parse_u64(val, &u) == 0)
            o->seed = u;
        else
            rc = ZPS_EINVAL;
    }
    if (bad_classes)
        zps_set_reason(err, err_size,
                       "synthetic: bad classes=%s in '%s' (expected an integer from 2 to %u; "
                       "leave classes out for a regression set)",
                       bad_classes, text, SYNTH_MAX_CLASSES);
    else if (rc)
        zps_set_reason(
            err, err_size,
            "synthetic: bad option in '%s' (expected n=N,test=M,dim=D,classes=C,noise=S,seed=X "
            "with N, M, D >= 1, C >= 2 and S >= 0)",
            text);
    free(items);
    return rc;
}

int zps_dataset_open(const char *spec, const char *dir, uint64_t seed, zps_dataset_t *train,
                     zps_dataset_t *test, char *err, size_t err_size)
{
    return zps_dataset_open_parts(spec, dir, seed, ZPS_DATA_TRAIN | ZPS_DATA_TEST, train, test, err,
                                  err_size);
}

int zps_dataset_open_parts(const char *spec, const char *dir, uint64_t seed, unsigned parts,
                           zps_dataset_t *train, zps_dataset_t *test, char *err, size_t err_size)
{
    zps_dataset_t tr = {0}, te = {0};
    int rc;
    if (strcmp(spec, "fashion-mnist") == 0) {
        rc = parts & ZPS_DATA_TRAIN
                 ? load_fashion(dir, "train", parts & ZPS_DATA_BYTES, &tr, err, err_size)
                 : fashion_shape(dir, "train", &tr, err, err_size);
        if (rc)
            return rc;
        rc = parts & ZPS_DATA_TEST ? zps_dataset_load_fashion_mnist(dir, "t10k", &te, err, err_size)
                                   : fashion_shape(dir, "t10k", &te, err, err_size);
        if (rc) {
            zps_dataset_fini(&tr);
            return rc;
        }
        /* A model is built for the training set's shape: a test set of
         * another shape would fail at the first evaluation, hours in. */
        if (te.dim != tr.dim) {
            zps_set_reason(err, err_size,
                           "%s/t10k-images-idx3-ubyte.gz has %" PRIu32
                           " features per example, the training set %s/train-images-idx3-ubyte.gz "
                           "has %" PRIu32,
                           dir, te.dim, dir, tr.dim);
            zps_dataset_fini(&tr);
            zps_dataset_fini(&te);
            return ZPS_EDATA;
        }
    } else if (strncmp(spec, "synthetic", 9) == 0 && (spec[9] == '\0' || spec[9] == ':')) {
        zps_synth_opts_t o;
        zps_synth_opts_default(&o, seed);
        if (spec[9] == ':' && (rc = parse_synth_opts(spec + 10, &o, err, err_size)) != 0)
            return rc;
        int (*make)(const zps_synth_opts_t *, bool, zps_dataset_t *) =
            o.classes ? zps_dataset_synthetic_classes : zps_dataset_synthetic_linear;
        rc = make(&o, false, &tr);
        if (rc == 0)
            rc = make(&o, true, &te);
        if (rc) {
            zps_dataset_fini(&tr);
            zps_set_reason(err, err_size, "synthetic: %s", zps_strerror(rc));
            return rc;
        }
    } else {
        zps_set_reason(err, err_size,
                       "unknown data set '%s' (fashion-mnist or synthetic[:options])", spec);
        return ZPS_EINVAL;
    }
    *train = tr;
    *test = te;
    return 0;
}

int zps_dataset_shape(const char *spec, const char *dir, zps_data_shape_t *out, char *err,
                      size_t err_size)
{
    memset(out, 0, sizeof(*out));
    if (strncmp(spec, "synthetic", 9) == 0 && (spec[9] == '\0' || spec[9] == ':')) {
        zps_synth_opts_t o;
        zps_synth_opts_default(&o, 0);
        int rc = spec[9] == ':' ? parse_synth_opts(spec + 10, &o, err, err_size) : 0;
        if (rc)
            return rc;
        *out = (zps_data_shape_t){.n_train = o.n,
                                  .n_test = o.n_test,
                                  .dim = o.dim,
                                  .classes = o.classes,
                                  .synthetic = true};
        return 0;
    }
    if (strcmp(spec, "fashion-mnist") != 0) {
        zps_set_reason(err, err_size,
                       "unknown data set '%s' (fashion-mnist or synthetic[:options])", spec);
        return ZPS_EINVAL;
    }
    /* Neither part loaded: both read for their shapes, with their checks. */
    zps_dataset_t tr, te;
    int rc = zps_dataset_open_parts(spec, dir, 0, 0, &tr, &te, err, err_size);
    if (rc)
        return rc;
    *out =
        (zps_data_shape_t){.n_train = tr.n, .n_test = te.n, .dim = tr.dim, .classes = tr.classes};
    zps_dataset_fini(&tr);
    zps_dataset_fini(&te);
    return 0;
}

void zps_dataset_gather(const zps_dataset_t *ds, const uint32_t *idx, size_t count, float *x,
                        int32_t *label, float *target)
{
    ZPS_ASSERT(ds->x || ds->bytes || count == 0); /* not a set opened for its shape only */
    for (size_t i = 0; i < count; i++) {
        ZPS_ASSERT(idx[i] < ds->n);
        float *to = x + i * ds->dim;
        if (ds->x) {
            memcpy(to, ds->x + (size_t)idx[i] * ds->dim, ds->dim * sizeof(float));
        } else {
            const uint8_t *from = ds->bytes + (size_t)idx[i] * ds->dim;
            for (uint32_t j = 0; j < ds->dim; j++)
                to[j] = pixel(from[j]);
        }
        if (label && ds->label)
            label[i] = ds->label[idx[i]];
        if (target && ds->target)
            target[i] = ds->target[idx[i]];
    }
}

/* ---- partitioning ---- */

int zps_partition_init(zps_partition_t *p, uint64_t n, uint32_t workers, uint32_t batch,
                       uint64_t seed)
{
    if (workers == 0 || batch == 0 || n < workers || n > UINT32_MAX)
        return ZPS_EINVAL;
    uint64_t q = n / workers; /* the smallest piece */
    p->n = n;
    p->workers = workers;
    p->batch = batch;
    p->seed = seed;
    p->steps = (q + batch - 1) / batch;
    return 0;
}

void zps_partition_piece(const zps_partition_t *p, uint32_t worker, uint64_t *lo, uint64_t *hi)
{
    ZPS_ASSERT(worker < p->workers);
    /* n <= 2^32 - 1 and worker < 2^32, so the products fit in 64 bits. */
    *lo = worker * p->n / p->workers;
    *hi = (worker + 1ull) * p->n / p->workers;
}

void zps_partition_batch_range(const zps_partition_t *p, uint32_t worker, uint64_t step,
                               uint64_t *lo, uint64_t *hi)
{
    ZPS_ASSERT(step < p->steps);
    uint64_t plo, phi;
    zps_partition_piece(p, worker, &plo, &phi);
    *lo = plo + step * p->batch;
    /* The last step takes the rest of the piece, whatever its length. */
    *hi = step + 1 == p->steps ? phi : *lo + p->batch;
    ZPS_ASSERT(*lo < *hi && *hi <= phi);
}

uint64_t zps_partition_max_batch(const zps_partition_t *p)
{
    /* The longest piece has ceil(N/W) elements; its last step holds the
     * rest. Every earlier step (if there is one) holds exactly b. */
    uint64_t longest = (p->n + p->workers - 1) / p->workers;
    uint64_t last = longest - (p->steps - 1) * p->batch;
    return p->steps == 1 || last > p->batch ? last : p->batch;
}

void zps_partition_clock(const zps_partition_t *p, uint64_t clock, uint64_t *epoch, uint64_t *step)
{
    *epoch = clock / p->steps;
    *step = clock % p->steps;
}

void zps_partition_permute(const zps_partition_t *p, uint64_t epoch, uint32_t *perm)
{
    for (uint64_t i = 0; i < p->n; i++)
        perm[i] = (uint32_t)i;
    zps_rng_t r;
    zps_rng_seed(&r, p->seed, ORDER_STREAM + epoch);
    /* Fisher-Yates: position i takes a uniform pick among positions [0, i]. */
    for (uint64_t i = p->n - 1; i > 0; i--) {
        uint64_t j = zps_rng_below(&r, i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int zps_data_order_init(zps_data_order_t *o, const zps_partition_t *part)
{
    uint32_t *perm = malloc(part->n * sizeof(uint32_t));
    if (!perm)
        return ZPS_ENOMEM;
    o->part = *part;
    o->perm = perm;
    o->epoch = UINT64_MAX;
    return 0;
}

void zps_data_order_fini(zps_data_order_t *o)
{
    if (!o)
        return;
    free(o->perm);
    o->perm = NULL;
}

/* Positions [lo, hi) of epoch's permutation (computed once per epoch) into idx. */
static size_t order_range(zps_data_order_t *o, uint64_t epoch, uint64_t lo, uint64_t hi,
                          uint32_t *idx)
{
    if (o->epoch != epoch) {
        zps_partition_permute(&o->part, epoch, o->perm);
        o->epoch = epoch;
    }
    memcpy(idx, o->perm + lo, (hi - lo) * sizeof(uint32_t));
    return (size_t)(hi - lo);
}

size_t zps_data_order_batch(zps_data_order_t *o, uint64_t epoch, uint32_t worker, uint64_t step,
                            uint32_t *idx)
{
    uint64_t lo, hi;
    zps_partition_batch_range(&o->part, worker, step, &lo, &hi);
    return order_range(o, epoch, lo, hi, idx);
}

uint64_t zps_shared_batches_per_epoch(const zps_partition_t *p)
{
    return (p->n + p->batch - 1) / p->batch;
}

void zps_shared_batch_range(const zps_partition_t *p, uint64_t g, uint64_t *epoch, uint64_t *lo,
                            uint64_t *hi)
{
    uint64_t B = zps_shared_batches_per_epoch(p);
    uint64_t j = g % B;
    *epoch = g / B;
    *lo = j * p->batch;
    *hi = *lo + p->batch < p->n ? *lo + p->batch : p->n;
}

size_t zps_data_order_shared(zps_data_order_t *o, uint64_t g, uint32_t *idx)
{
    uint64_t epoch, lo, hi;
    zps_shared_batch_range(&o->part, g, &epoch, &lo, &hi);
    return order_range(o, epoch, lo, hi, idx);
}
