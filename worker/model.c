/*
 * model.c - model specs, the flat parameter layout and He initialisation;
 * see model.h.
 */
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "parse.h"
#include "rng.h"

#define INIT_STREAM 0x494e495448450000ull /* "INITHE" */

/* Parses one layer width from [s, end). */
static int parse_width(const char *s, size_t len, uint32_t *out)
{
    char buf[16];
    if (len == 0 || len >= sizeof(buf))
        return ZPS_EINVAL;
    memcpy(buf, s, len);
    buf[len] = '\0';
    uint64_t v;
    if (zps_parse_u64(buf, &v) != 0 || v == 0 || v > ZPS_MODEL_MAX_WIDTH)
        return ZPS_EINVAL;
    *out = (uint32_t)v;
    return 0;
}

static void layout(zps_model_t *m)
{
    uint64_t off = 0;
    for (uint32_t l = 0; l < m->layers; l++) {
        m->w_off[l] = off;
        off += (uint64_t)m->sizes[l] * m->sizes[l + 1];
        m->b_off[l] = off;
        off += m->sizes[l + 1];
    }
    m->nparams = off;
}

int zps_model_parse(const char *spec, zps_model_t *out, char *err, size_t err_size)
{
    zps_model_t m;
    memset(&m, 0, sizeof(m));
    if (!spec) {
        zps_set_reason(err, err_size, "no model spec");
        return ZPS_EINVAL;
    }
    if (strncmp(spec, "linear:", 7) == 0) {
        uint32_t d;
        if (parse_width(spec + 7, strlen(spec + 7), &d) != 0) {
            zps_set_reason(err, err_size, "model '%s': expected linear:D with D in [1, %u]", spec,
                           ZPS_MODEL_MAX_WIDTH);
            return ZPS_EINVAL;
        }
        m.kind = ZPS_MODEL_LINEAR;
        m.layers = 1;
        m.sizes[0] = d;
        m.sizes[1] = 1;
    } else if (strncmp(spec, "mlp:", 4) == 0) {
        m.kind = ZPS_MODEL_MLP;
        const char *p = spec + 4;
        uint32_t count = 0;
        for (;;) {
            const char *dash = strchr(p, '-');
            size_t len = dash ? (size_t)(dash - p) : strlen(p);
            if (count > ZPS_MODEL_MAX_LAYERS) {
                zps_set_reason(err, err_size, "model '%s': more than %d layers", spec,
                               ZPS_MODEL_MAX_LAYERS);
                return ZPS_EINVAL;
            }
            if (parse_width(p, len, &m.sizes[count]) != 0) {
                zps_set_reason(err, err_size,
                               "model '%s': layer sizes must be integers in [1, %u] joined by '-'",
                               spec, ZPS_MODEL_MAX_WIDTH);
                return ZPS_EINVAL;
            }
            count++;
            if (!dash)
                break;
            p = dash + 1;
        }
        if (count < 2) {
            zps_set_reason(err, err_size, "model '%s': needs at least an input and an output size",
                           spec);
            return ZPS_EINVAL;
        }
        if (m.sizes[count - 1] < 2) {
            zps_set_reason(err, err_size, "model '%s': softmax needs at least 2 outputs", spec);
            return ZPS_EINVAL;
        }
        m.layers = count - 1;
    } else {
        zps_set_reason(err, err_size, "unknown model '%s' (mlp:I-H...-O or linear:D)", spec);
        return ZPS_EINVAL;
    }
    layout(&m);
    if (m.nparams > (1ull << 34)) {
        zps_set_reason(err, err_size, "model '%s': %llu parameters is too many", spec,
                       (unsigned long long)m.nparams);
        return ZPS_EINVAL;
    }
    *out = m;
    return 0;
}

char *zps_model_format(const zps_model_t *m, char *buf, size_t size)
{
    size_t used = 0;
    int n = snprintf(buf, size, "%s:", m->kind == ZPS_MODEL_LINEAR ? "linear" : "mlp");
    if (n < 0 || (size_t)n >= size)
        return buf;
    used = (size_t)n;
    uint32_t count = m->kind == ZPS_MODEL_LINEAR ? 1 : m->layers + 1;
    for (uint32_t i = 0; i < count; i++) {
        n = snprintf(buf + used, size - used, i ? "-%u" : "%u", m->sizes[i]);
        if (n < 0 || (size_t)n >= size - used)
            break;
        used += (size_t)n;
    }
    return buf;
}

size_t zps_model_tensor_count(const zps_model_t *m)
{
    return 2 * (size_t)m->layers;
}

void zps_model_tensor(const zps_model_t *m, size_t i, zps_tensor_t *out)
{
    ZPS_ASSERT(i < zps_model_tensor_count(m));
    uint32_t l = (uint32_t)(i / 2);
    memset(out, 0, sizeof(*out));
    if (i % 2 == 0) {
        snprintf(out->name, sizeof(out->name), "w%u", l);
        out->offset = m->w_off[l];
        out->rows = m->sizes[l];
    } else {
        snprintf(out->name, sizeof(out->name), "b%u", l);
        out->offset = m->b_off[l];
        out->rows = 1;
    }
    out->cols = m->sizes[l + 1];
}

uint32_t zps_model_max_width(const zps_model_t *m)
{
    uint32_t w = 0;
    for (uint32_t l = 0; l <= m->layers; l++)
        if (m->sizes[l] > w)
            w = m->sizes[l];
    return w;
}

void zps_model_init_params(const zps_model_t *m, uint64_t seed, float *params)
{
    zps_rng_t r;
    for (uint32_t l = 0; l < m->layers; l++) {
        /* One stream per layer, so a layer's values do not depend on the
         * sizes of the layers before it. */
        zps_rng_seed(&r, seed, INIT_STREAM + l);
        double sd = sqrt(2.0 / m->sizes[l]);
        uint64_t nw = (uint64_t)m->sizes[l] * m->sizes[l + 1];
        float *w = params + m->w_off[l];
        for (uint64_t i = 0; i < nw; i++)
            w[i] = (float)(sd * zps_rng_normal(&r));
        memset(params + m->b_off[l], 0, m->sizes[l + 1] * sizeof(float));
    }
}

int zps_model_check_data(const zps_model_t *m, const zps_dataset_t *ds, char *err, size_t err_size)
{
    char spec[256];
    zps_model_format(m, spec, sizeof(spec));
    if (ds->dim != m->sizes[0]) {
        zps_set_reason(err, err_size, "model %s takes %u inputs but the data has %u features", spec,
                       m->sizes[0], ds->dim);
        return ZPS_EINVAL;
    }
    if (m->kind == ZPS_MODEL_MLP) {
        if (ds->classes == 0) {
            zps_set_reason(err, err_size, "model %s needs labelled data (a classification set)",
                           spec);
            return ZPS_EINVAL;
        }
        if (ds->classes != m->sizes[m->layers]) {
            zps_set_reason(err, err_size, "model %s has %u outputs but the data has %u classes",
                           spec, m->sizes[m->layers], ds->classes);
            return ZPS_EINVAL;
        }
    } else if (ds->classes != 0) {
        zps_set_reason(err, err_size, "model %s needs regression targets (data 'synthetic')", spec);
        return ZPS_EINVAL;
    }
    return 0;
}
