/*
 * data.h - training data for zps-worker: the IDX reader (gzip'd, as
 * Fashion-MNIST ships), synthetic sets with a known answer (linear
 * regression, and classification by a random linear teacher), and the rule
 * that cuts every epoch into the workers' batches.
 *
 * Not here: anything that computes on the data (backend.h) or decides when a
 * batch is used (trainer.h).
 *
 * Data order (the rule every worker and --local apply alike):
 *   - epoch e is one seeded permutation perm_e of all N examples
 *     (Fisher-Yates driven by xoshiro256** seeded from (seed, e));
 *   - perm_e is cut into W contiguous pieces; worker w owns positions
 *     [floor(w*N/W), floor((w+1)*N/W));
 *   - every worker takes S = ceil(floor(N/W) / b) steps per epoch, so the
 *     workers stay in lock-step under BSP;
 *   - worker w's batch at step s is piece_w[s*b, (s+1)*b), except the last
 *     step, which takes the rest of the piece (between 1 and b+1 examples);
 *   - global clock t is (epoch t / S, step t % S).
 * Every example is used exactly once per epoch whatever W and b are.
 *
 * All functions are synchronous and may be called from any thread on
 * distinct objects.
 */
#ifndef ZPS_DATA_H
#define ZPS_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- data sets ---- */

typedef struct zps_dataset {
    uint64_t n;       /* examples */
    uint32_t dim;     /* features per example */
    uint32_t classes; /* classification: labels are in [0, classes); 0 for regression */
    float *x;         /* [n, dim] row-major; images scaled to [0, 1]; NULL when bytes is set */
    uint8_t *bytes;   /* images kept as read ([n, dim], x = byte / 255, ZPS_DATA_BYTES):
                         zps_dataset_gather converts a batch at a time; else NULL */
    int32_t *label;   /* [n] when classes > 0, else NULL */
    float *target;    /* [n] when classes == 0 (regression), else NULL */
    float *true_w;    /* synthetic sets: the generating weights, [dim] for regression,
                         [classes, dim] row-major for classification; else NULL */
    float true_b;     /* synthetic regression: the generating bias (0 otherwise) */
} zps_dataset_t;

/* Releases the arrays of `ds` and zeroes it; a zeroed dataset is a no-op. */
void zps_dataset_fini(zps_dataset_t *ds);

/*
 * A raw IDX tensor of unsigned bytes (type code 0x08), as read from a file.
 * dims[0..ndims) are the sizes; data holds their product in row-major order.
 */
typedef struct zps_idx {
    uint32_t ndims;
    uint32_t dims[4];
    uint8_t *data; /* malloc'd; free() it */
    size_t count;  /* product of dims */
} zps_idx_t;

/*
 * Reads an IDX file, gzip'd or plain (zlib reads both). Only unsigned-byte
 * tensors of 1 to 4 dimensions are accepted, and the file must end right
 * after the data. On failure returns
 *   ZPS_EIO      the file cannot be opened or read,
 *   ZPS_ECORRUPT truncated data or a broken gzip stream,
 *   ZPS_EDATA    bad magic, unsupported type, bad dimensions, trailing bytes,
 *   ZPS_ENOMEM,
 * and writes a one-line reason naming the file into err[err_size] (which may
 * be NULL). *out is written only on success.
 */
int zps_idx_read(const char *path, zps_idx_t *out, char *err, size_t err_size);

/*
 * Reads only the header of an IDX file (gzip'd or plain): *out gets ndims,
 * dims and count, and data NULL. The header's errors as zps_idx_read's.
 */
int zps_idx_read_header(const char *path, zps_idx_t *out, char *err, size_t err_size);

/*
 * Loads an image/label pair of IDX files: images [N, rows, cols] become
 * x [N, rows*cols] scaled by 1/255; labels [N] must all be below `classes`.
 * Errors as zps_idx_read, plus ZPS_EDATA for wrong ranks, a count mismatch
 * between the files or a label out of range (the message names the file and
 * the first offending index). *out is written only on success; the caller
 * owns it (zps_dataset_fini).
 */
int zps_dataset_load_idx(const char *images_path, const char *labels_path, uint32_t classes,
                         zps_dataset_t *out, char *err, size_t err_size);

/* Where Debian's dataset-fashion-mnist package puts the files: the default --data-dir. */
#define ZPS_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/*
 * Loads Fashion-MNIST from `dir`: split "train" (60000 examples) or "t10k"
 * (10000), files <split>-images-idx3-ubyte.gz and <split>-labels-idx1-ubyte.gz.
 */
int zps_dataset_load_fashion_mnist(const char *dir, const char *split, zps_dataset_t *out,
                                   char *err, size_t err_size);

/* Parameters of a synthetic set: regression when classes is 0, else classification. */
typedef struct zps_synth_opts {
    uint64_t n;       /* training examples (default 10000) */
    uint64_t n_test;  /* test examples (default 2000) */
    uint32_t dim;     /* features (default 16) */
    uint32_t classes; /* 0: linear regression (default); C >= 2: C classes */
    double noise;     /* standard deviation of the noise added to y or to each class score
                         (default 0) */
    uint64_t seed;    /* generator seed */
} zps_synth_opts_t;

void zps_synth_opts_default(zps_synth_opts_t *o, uint64_t seed);

/*
 * Generates a linear-regression set: w* ~ N(0, 1) [dim] and b* ~ N(0, 1) from
 * the seed, x ~ N(0, 1) [n, dim] and y = w*.x + b* + noise * N(0, 1).
 * `test` false gives the training split (n examples), true the test split
 * (n_test examples, other x, same w* and b*). Returns 0, ZPS_EINVAL (n or dim
 * is 0, noise negative) or ZPS_ENOMEM. The caller owns *out.
 */
int zps_dataset_synthetic_linear(const zps_synth_opts_t *o, bool test, zps_dataset_t *out);

/*
 * Generates a classification set with C = o->classes labels from a fixed
 * random linear teacher: T ~ N(0, 1) [C, dim] from the seed (kept in
 * out->true_w), x ~ N(0, 1) [n, dim], and the label of x is the argmax over k
 * of the score T[k].x + noise * N(0, 1) (the lowest k on a tie). The scores
 * are summed in float64 in feature order. The teacher has no bias, so the
 * classes come out roughly balanced (dim 16 and 10 classes: 2% to 19% of the
 * examples each, over a few seeds). `test` as for
 * zps_dataset_synthetic_linear. Returns 0, ZPS_EINVAL (n or dim is 0,
 * classes below 2, noise negative) or ZPS_ENOMEM. The caller owns *out.
 */
int zps_dataset_synthetic_classes(const zps_synth_opts_t *o, bool test, zps_dataset_t *out);

/* A data set's shape, read without its examples (zps_dataset_shape). */
typedef struct zps_data_shape {
    uint64_t n_train, n_test;
    uint32_t dim;
    uint32_t classes; /* 0: regression */
    bool synthetic;   /* generated whole in float32 by every process that opens it */
} zps_data_shape_t;

/*
 * The shape of the data a --data flag names, without loading or generating
 * it: the options of a synthetic set, the headers of Fashion-MNIST's files
 * (with the checks zps_dataset_open makes of them). Returns 0, ZPS_EINVAL (a
 * bad spec) or the errors of zps_idx_read with a one-line reason in err. For
 * tools that plan a run (zps launch) before any worker loads the data.
 */
int zps_dataset_shape(const char *spec, const char *dir, zps_data_shape_t *out, char *err,
                      size_t err_size);

/*
 * Opens the data a --data flag names: "fashion-mnist" (from `dir`) or
 * "synthetic" with optional ":n=N,test=M,dim=D,classes=C,noise=S,seed=X"
 * (seed defaults to `seed`; without classes a regression set, with C >= 2 a
 * classification set). Fills *train and *test (both owned by the caller
 * afterwards). Returns 0 or a ZPS_E* code with a one-line reason in err.
 */
int zps_dataset_open(const char *spec, const char *dir, uint64_t seed, zps_dataset_t *train,
                     zps_dataset_t *test, char *err, size_t err_size);

/* The parts of a data set that zps_dataset_open_parts loads. */
#define ZPS_DATA_TRAIN 1u
#define ZPS_DATA_TEST 2u
/* With ZPS_DATA_TRAIN: keep Fashion-MNIST's training images as bytes (the
 * set's `bytes`), for a process that reads the training set only through
 * zps_dataset_gather. The test set is always float32: backends evaluate it
 * whole. */
#define ZPS_DATA_BYTES 4u

/*
 * zps_dataset_open, loading only the parts named in `parts`: for
 * Fashion-MNIST a part left out is read for its shape only (n, dim and
 * classes from its headers, with the same checks; x and label stay NULL),
 * so that a process that only evaluates does not decompress the training
 * set, nor one that only trains the test set. A synthetic set is always made
 * whole (both parts come from one generator). zps_dataset_open is this with
 * both parts.
 */
int zps_dataset_open_parts(const char *spec, const char *dir, uint64_t seed, unsigned parts,
                           zps_dataset_t *train, zps_dataset_t *test, char *err, size_t err_size);

/*
 * Copies the examples idx[0..count) into x [count, dim] and, as the set has
 * them, label [count] or target [count] (either may be NULL to skip). A set
 * kept as bytes is converted here, to the same floats a loaded one holds.
 */
void zps_dataset_gather(const zps_dataset_t *ds, const uint32_t *idx, size_t count, float *x,
                        int32_t *label, float *target);

/* ---- partitioning (pure arithmetic, no I/O) ---- */

typedef struct zps_partition {
    uint64_t n;       /* N: examples */
    uint32_t workers; /* W */
    uint32_t batch;   /* b: nominal per-worker batch */
    uint64_t seed;
    uint64_t steps; /* S = ceil(floor(N/W) / b): steps per epoch, for every worker */
} zps_partition_t;

/*
 * Sets up the rule for N examples, W workers and batch b. Requires W >= 1,
 * b >= 1, W <= N <= 2^32 - 1; returns 0 or ZPS_EINVAL (out untouched).
 */
int zps_partition_init(zps_partition_t *p, uint64_t n, uint32_t workers, uint32_t batch,
                       uint64_t seed);

/* Worker w's piece of the permutation: positions [*lo, *hi). */
void zps_partition_piece(const zps_partition_t *p, uint32_t worker, uint64_t *lo, uint64_t *hi);

/* Positions [*lo, *hi) of the permutation that form worker w's batch at `step` (< steps). */
void zps_partition_batch_range(const zps_partition_t *p, uint32_t worker, uint64_t step,
                               uint64_t *lo, uint64_t *hi);

/* The largest batch any worker gets at any step (at most b + 1). */
uint64_t zps_partition_max_batch(const zps_partition_t *p);

/* Global clock -> (epoch, step). */
void zps_partition_clock(const zps_partition_t *p, uint64_t clock, uint64_t *epoch, uint64_t *step);

/* Writes the permutation of `epoch` into perm[n]. */
void zps_partition_permute(const zps_partition_t *p, uint64_t epoch, uint32_t *perm);

/*
 * The epoch permutation, computed once per epoch and reused by every step in
 * it. Owns perm; init/fini pair.
 */
typedef struct zps_data_order {
    zps_partition_t part;
    uint32_t *perm; /* [n]: the permutation of `epoch` */
    uint64_t epoch; /* the epoch perm holds; UINT64_MAX before the first call */
} zps_data_order_t;

/* Returns 0 or ZPS_ENOMEM. `part` is copied. */
int zps_data_order_init(zps_data_order_t *o, const zps_partition_t *part);
void zps_data_order_fini(zps_data_order_t *o);

/*
 * Writes the example indices of worker w's batch at (epoch, step) into idx
 * (room for zps_partition_max_batch entries) and returns how many there are
 * (always >= 1). Recomputes the permutation when the epoch changes.
 */
size_t zps_data_order_batch(zps_data_order_t *o, uint64_t epoch, uint32_t worker, uint64_t step,
                            uint32_t *idx);

/*
 * The shared assignment's rule (zps-worker --data-assignment shared;
 * consistency/assign.h): epoch e's permutation is cut into B = ceil(N / b)
 * batches of b positions in order, the last one holding the rest; batch g
 * of the run is batch j = g % B of epoch g / B, positions [j*b, min((j+1)*b,
 * N)). Which worker computes it is decided by shard 0 at run time.
 */
uint64_t zps_shared_batches_per_epoch(const zps_partition_t *p);
void zps_shared_batch_range(const zps_partition_t *p, uint64_t g, uint64_t *epoch, uint64_t *lo,
                            uint64_t *hi);
/* Writes batch g's example indices into idx (room for b) and returns how many (>= 1). */
size_t zps_data_order_shared(zps_data_order_t *o, uint64_t g, uint32_t *idx);

#endif
