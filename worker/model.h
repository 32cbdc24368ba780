/*
 * model.h - the models zps-worker trains: their spec syntax, the layout of
 * their parameters in one flat float32 vector, and He initialisation.
 *
 * Not here: the arithmetic of a forward or backward pass (backend.h); this
 * file only says where each tensor lives.
 *
 * Spec syntax:
 *   mlp:I-H1-...-O   a multilayer perceptron: affine layers I->H1->...->O,
 *                    ReLU after every hidden layer, softmax cross-entropy on
 *                    the O logits (O >= 2 classes). "mlp:784-10" is softmax
 *                    regression; "mlp:784-256-128-10" has two hidden layers.
 *   linear:D         linear regression y = w.x + b on D features with the
 *                    squared loss (y_hat - y)^2 / 2 per example.
 *
 * Layout: for l = 0..L-1, W_l [sizes[l], sizes[l+1]] row-major (input-major:
 * W_l[i][j] connects input i to output j), then b_l [sizes[l+1]]. Offsets are
 * in floats from the start of the vector.
 */
#ifndef ZPS_MODEL_H
#define ZPS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

#define ZPS_MODEL_MAX_LAYERS 16
#define ZPS_MODEL_MAX_WIDTH 1000000u

typedef enum zps_model_kind {
    ZPS_MODEL_MLP = 0,    /* ReLU hidden layers, softmax cross-entropy */
    ZPS_MODEL_LINEAR = 1, /* one affine layer to a scalar, squared loss */
} zps_model_kind_t;

typedef struct zps_model {
    zps_model_kind_t kind;
    uint32_t layers;                          /* L: affine layers */
    uint32_t sizes[ZPS_MODEL_MAX_LAYERS + 1]; /* sizes[0] inputs, sizes[L] outputs */
    uint64_t w_off[ZPS_MODEL_MAX_LAYERS];     /* W_l: [sizes[l], sizes[l+1]] */
    uint64_t b_off[ZPS_MODEL_MAX_LAYERS];     /* b_l: [sizes[l+1]] */
    uint64_t nparams;                         /* length of the flat vector */
} zps_model_t;

/* One tensor of the flat vector, for listings and checkpoints. */
typedef struct zps_tensor {
    char name[16];   /* "w0", "b0", "w1", ... */
    uint64_t offset; /* in floats */
    uint64_t rows;   /* W: inputs; b: 1 */
    uint64_t cols;   /* outputs */
} zps_tensor_t;

/*
 * Parses a spec (see above). Returns 0 or ZPS_EINVAL with a one-line reason
 * in err[err_size] (may be NULL); *out is written only on success.
 */
int zps_model_parse(const char *spec, zps_model_t *out, char *err, size_t err_size);

/* Writes the canonical spec ("mlp:784-256-10") into buf; returns buf. */
char *zps_model_format(const zps_model_t *m, char *buf, size_t size);

/* 2 * L tensors: w0, b0, w1, b1, ... */
size_t zps_model_tensor_count(const zps_model_t *m);
void zps_model_tensor(const zps_model_t *m, size_t i, zps_tensor_t *out);

/* The widest layer, inputs included (the size of a scratch activation row). */
uint32_t zps_model_max_width(const zps_model_t *m);

/*
 * He initialisation from `seed`: every W_l[i][j] ~ N(0, 2 / sizes[l]), every
 * bias 0. params[nparams] is written; the values depend only on the seed
 * and the spec.
 */
void zps_model_init_params(const zps_model_t *m, uint64_t seed, float *params);

/*
 * Checks that a data set fits the model: as many features as inputs, and
 * for an MLP as many classes as outputs, for a linear model a regression set.
 * The kind of set is told by ds->classes, not by its arrays, so that a set
 * opened for its shape only (zps_dataset_open_parts) passes as it would
 * loaded. Returns 0 or ZPS_EINVAL with a reason.
 */
int zps_model_check_data(const zps_model_t *m, const zps_dataset_t *ds, char *err, size_t err_size);

#endif
