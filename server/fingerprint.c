/*
 * fingerprint.c - the configuration fingerprint; see fingerprint.h.
 *
 * settings() lists the fields once, in their canonical order; the hash and
 * the STATS object are both made from that list, so what STATS shows is
 * exactly what the fingerprint covers.
 */
#include "fingerprint.h"

#include <string.h>

#include "consistency.h"
#include "error.h"
#include "optimizer.h"

enum { FIELD_INT, FIELD_REAL, FIELD_BOOL };

typedef struct field {
    const char *name; /* its key in STATS's "config" object */
    int kind;
    uint64_t u;       /* FIELD_INT, FIELD_BOOL; FIELD_REAL: the double's bits */
    double d;         /* FIELD_REAL */
    const char *text; /* FIELD_INT holding an enum: its name for STATS (the hash takes u) */
} field_t;

#define MAX_FIELDS 24

static field_t int_field(const char *name, uint64_t v, const char *text)
{
    return (field_t){name, FIELD_INT, v, 0.0, text};
}

static field_t bool_field(const char *name, bool v)
{
    return (field_t){name, FIELD_BOOL, v ? 1u : 0u, 0.0, NULL};
}

/* A real number by its IEEE-754 binary64 bits; -0 counts as 0. */
static field_t real_field(const char *name, double v)
{
    if (v == 0.0)
        v = 0.0;
    field_t f = {name, FIELD_REAL, 0, v, NULL};
    memcpy(&f.u, &v, sizeof(f.u));
    return f;
}

/* The fields in canonical order; a setting the configuration does not use is 0. Returns the count.
 */
static size_t settings(const zps_server_config_t *cfg, field_t *f)
{
    const zps_consistency_config_t *cc = &cfg->consistency;
    const zps_opt_config_t *o = &cfg->opt;
    bool bsp = cc->mode == ZPS_MODE_BSP, ssp = cc->mode == ZPS_MODE_SSP;
    bool mom = o->kind == ZPS_OPT_MOMENTUM;
    bool adam = o->kind == ZPS_OPT_ADAM || o->kind == ZPS_OPT_ADAMW;
    bool eps = adam || o->kind == ZPS_OPT_ADAGRAD;
    bool step = o->schedule == ZPS_SCHED_STEP, cosine = o->schedule == ZPS_SCHED_COSINE;
    size_t n = 0;
    f[n++] = int_field("format", ZPS_FINGERPRINT_FORMAT, NULL);
    f[n++] = int_field("shards", cfg->shard_count, NULL);
    f[n++] = int_field("mode", (uint64_t)cc->mode, zps_mode_name(cc->mode));
    f[n++] = int_field("workers", cc->workers, NULL);
    f[n++] = int_field("staleness_bound", ssp ? cc->ssp_bound : 0, NULL);
    f[n++] = int_field("backup_workers", bsp ? cc->backup : 0, NULL);
    zps_lr_scaling_t scaling = bsp ? ZPS_LR_SCALING_NONE : cc->lr_scaling;
    f[n++] = int_field("lr_staleness", (uint64_t)scaling,
                       scaling == ZPS_LR_SCALING_INVERSE ? "inverse" : "none");
    zps_opt_config_t plain = *o;
    plain.nesterov = false; /* the kind's own name: nesterov is its own field */
    f[n++] = int_field("optimizer", (uint64_t)o->kind, zps_opt_name(&plain));
    f[n++] = bool_field("nesterov", mom && o->nesterov);
    f[n++] = real_field("lr", o->lr);
    f[n++] = real_field("momentum", mom ? o->momentum : 0.0);
    f[n++] = real_field("beta1", adam ? o->beta1 : 0.0);
    f[n++] = real_field("beta2", adam ? o->beta2 : 0.0);
    f[n++] = real_field("eps", eps ? o->eps : 0.0);
    f[n++] = real_field("weight_decay", o->weight_decay);
    f[n++] = int_field("schedule", (uint64_t)o->schedule, zps_sched_name(o->schedule));
    f[n++] = int_field("step_every", step ? o->step_every : 0, NULL);
    f[n++] = real_field("gamma", step ? o->gamma : 0.0);
    f[n++] = int_field("cosine_steps", cosine ? o->cosine_steps : 0, NULL);
    f[n++] = real_field("lr_min", cosine ? o->lr_min : 0.0);
    f[n++] = int_field("warmup", o->warmup, NULL);
    f[n++] = real_field("delay_compensation", bsp ? 0.0 : cfg->delay_comp);
    ZPS_ASSERT(n <= MAX_FIELDS);
    return n;
}

uint64_t zps_fingerprint(const zps_server_config_t *cfg)
{
    field_t f[MAX_FIELDS];
    size_t n = settings(cfg, f);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64: offset basis */
    for (size_t i = 0; i < n; i++) {
        for (unsigned byte = 0; byte < 8; byte++) {
            h ^= (f[i].u >> (8 * byte)) & 0xffu; /* little-endian, whatever the host */
            h *= 0x100000001b3ull;               /* FNV-1a 64: prime */
        }
    }
    return h ? h : 1; /* 0 means "unchecked" on the wire */
}

void zps_fingerprint_json(const zps_server_config_t *cfg, zps_strbuf_t *b)
{
    field_t f[MAX_FIELDS];
    size_t n = settings(cfg, f);
    zps_strbuf_printf(b, "{");
    for (size_t i = 0; i < n; i++) {
        zps_strbuf_printf(b, "%s\"%s\":", i ? "," : "", f[i].name);
        if (f[i].text)
            zps_strbuf_json_string(b, f[i].text);
        else if (f[i].kind == FIELD_BOOL)
            zps_strbuf_printf(b, "%s", f[i].u ? "true" : "false");
        else if (f[i].kind == FIELD_REAL)
            zps_strbuf_printf(b, "%.17g", f[i].d);
        else
            zps_strbuf_printf(b, "%llu", (unsigned long long)f[i].u);
    }
    zps_strbuf_printf(b, ",\"fingerprint\":\"%016llx\"}", (unsigned long long)zps_fingerprint(cfg));
}
