/*
 * test_fingerprint.c - the configuration fingerprint (server/fingerprint.c):
 * its value is the FNV-1a 64 of the canonical encoding in docs/protocol.md,
 * recomputed here from that description; every setting it covers changes
 * it; what may differ between shards, and settings a configuration does not
 * use, do not; its STATS object lists the settings and the fingerprint.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "error.h"
#include "fingerprint.h"
#include "json.h"
#include "strbuf.h"

/* S = 2, W = 4, BSP, SGD with lr 0.1: the defaults otherwise. */
static zps_server_config_t base(void)
{
    zps_server_config_t cfg;
    zps_server_config_default(&cfg);
    cfg.shard_index = 1;
    cfg.shard_count = 2;
    cfg.consistency.workers = 4;
    cfg.opt.lr = 0.1;
    return cfg;
}

static uint64_t fnv_word(uint64_t h, uint64_t w)
{
    for (int i = 0; i < 8; i++) {
        h ^= (w >> (8 * i)) & 0xff;
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

/* The encoding as docs/protocol.md lists it, for base(). */
static void test_value_by_hand(void **state)
{
    (void)state;
    const uint64_t words[] = {
        2,         /* format */
        2,         /* S */
        0,         /* mode: bsp */
        4,         /* W */
        0,         /* SSP bound (not SSP) */
        0,         /* backup workers */
        0,         /* lr scaling: none */
        0,         /* optimizer: sgd */
        0,         /* nesterov */
        bits(0.1), /* lr */
        0,         /* momentum (not used by SGD) */
        0,         /* beta1 */
        0,         /* beta2 */
        0,         /* eps */
        bits(0.0), /* weight decay */
        0,         /* schedule: constant */
        0,         /* step_every */
        0,         /* gamma */
        0,         /* cosine_steps */
        0,         /* lr_min */
        0,         /* warmup */
        0,         /* delay compensation (not used by BSP) */
    };
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        h = fnv_word(h, words[i]);
    zps_server_config_t cfg = base();
    assert_true(zps_fingerprint(&cfg) == h);
}

typedef void change_fn(zps_server_config_t *cfg);

static void more_workers(zps_server_config_t *c)
{
    c->consistency.workers = 5;
}
static void ssp(zps_server_config_t *c)
{
    c->consistency.mode = ZPS_MODE_SSP;
}
static void ssp_bound(zps_server_config_t *c)
{
    c->consistency.mode = ZPS_MODE_SSP;
    c->consistency.ssp_bound = 3;
}
static void asp(zps_server_config_t *c)
{
    c->consistency.mode = ZPS_MODE_ASP;
}
static void inverse(zps_server_config_t *c)
{
    c->consistency.mode = ZPS_MODE_ASP;
    c->consistency.lr_scaling = ZPS_LR_SCALING_INVERSE;
}
static void backups(zps_server_config_t *c)
{
    c->consistency.backup = 1;
}
static void shards(zps_server_config_t *c)
{
    c->shard_count = 3;
}
static void lr(zps_server_config_t *c)
{
    c->opt.lr = 0.2;
}
static void adam(zps_server_config_t *c)
{
    c->opt.kind = ZPS_OPT_ADAM;
}
static void nesterov(zps_server_config_t *c)
{
    c->opt.kind = ZPS_OPT_MOMENTUM;
    c->opt.nesterov = true;
}
static void weight_decay(zps_server_config_t *c)
{
    c->opt.weight_decay = 1e-4;
}
static void cosine(zps_server_config_t *c)
{
    c->opt.schedule = ZPS_SCHED_COSINE;
    c->opt.cosine_steps = 100;
}
static void step_gamma(zps_server_config_t *c)
{
    c->opt.schedule = ZPS_SCHED_STEP;
    c->opt.step_every = 10;
    c->opt.gamma = 0.5;
}
static void warmup(zps_server_config_t *c)
{
    c->opt.warmup = 5;
}
static void delay_comp(zps_server_config_t *c)
{
    c->consistency.mode = ZPS_MODE_ASP;
    c->delay_comp = 0.04;
}

/* Every setting that must agree changes the fingerprint; no two changes collide. */
static void test_each_setting_counts(void **state)
{
    (void)state;
    change_fn *changes[] = {more_workers, ssp,    ssp_bound,  asp,   inverse,
                            backups,      shards, lr,         adam,  nesterov,
                            weight_decay, cosine, step_gamma, warmup, delay_comp};
    enum { K = sizeof(changes) / sizeof(changes[0]) };
    uint64_t seen[K + 1];
    zps_server_config_t cfg = base();
    seen[0] = zps_fingerprint(&cfg);
    for (size_t i = 0; i < K; i++) {
        cfg = base();
        changes[i](&cfg);
        seen[i + 1] = zps_fingerprint(&cfg);
        assert_true(seen[i + 1] != 0);
        for (size_t j = 0; j <= i; j++)
            assert_true(seen[i + 1] != seen[j]);
    }
    /* The momentum of a momentum optimizer and the adam betas count. */
    cfg = base();
    cfg.opt.kind = ZPS_OPT_MOMENTUM;
    uint64_t m = zps_fingerprint(&cfg);
    cfg.opt.momentum = 0.5;
    assert_true(zps_fingerprint(&cfg) != m);
    cfg = base();
    cfg.opt.kind = ZPS_OPT_ADAMW;
    uint64_t a = zps_fingerprint(&cfg);
    cfg.opt.beta2 = 0.99;
    assert_true(zps_fingerprint(&cfg) != a);
}

/* What may differ between shards, and settings the configuration does not use, do not count. */
static void test_what_does_not_count(void **state)
{
    (void)state;
    zps_server_config_t cfg = base();
    uint64_t f = zps_fingerprint(&cfg);
    cfg.shard_index = 0;
    cfg.listen = "tcp://127.0.0.1:9";
    cfg.worker_timeout_ms = 1234;
    cfg.consistency.max_pending = 7;
    cfg.checkpoint_every = 10;
    assert_true(zps_fingerprint(&cfg) == f);
    cfg.opt.momentum = 0.3; /* SGD has no momentum */
    cfg.opt.beta1 = 0.1;    /* nor betas, eps, a step or cosine schedule's fields */
    cfg.opt.eps = 1e-3;
    cfg.opt.gamma = 0.9;
    cfg.opt.lr_min = 0.01;
    cfg.opt.weight_decay = -0.0;
    cfg.delay_comp = 0.5; /* BSP's gradients are never stale */
    assert_true(zps_fingerprint(&cfg) == f);
}

/* STATS's "config": each covered setting by name, and the fingerprint in hex. */
static void test_json(void **state)
{
    (void)state;
    zps_server_config_t cfg = base();
    cfg.opt.lr = 0.3;
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_fingerprint_json(&cfg, &b);
    char *text = zps_strbuf_take(&b);
    assert_non_null(text);
    zps_json_t *v = NULL;
    assert_int_equal(zps_json_parse(text, &v, NULL, 0), 0);
    assert_int_equal(zps_json_number(zps_json_get(v, "workers"), -1), 4);
    assert_int_equal(zps_json_number(zps_json_get(v, "shards"), -1), 2);
    assert_string_equal(zps_json_string(zps_json_get(v, "mode")), "bsp");
    assert_string_equal(zps_json_string(zps_json_get(v, "optimizer")), "sgd");
    assert_true(zps_json_number(zps_json_get(v, "lr"), -1) == 0.3);
    char hex[32];
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)zps_fingerprint(&cfg));
    assert_string_equal(zps_json_string(zps_json_get(v, "fingerprint")), hex);
    zps_json_free(v);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_by_hand),
        cmocka_unit_test(test_each_setting_counts),
        cmocka_unit_test(test_what_does_not_count),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
