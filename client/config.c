/*
 * config.c - the shards' configuration: every reply carries a fingerprint
 * of the server's configuration, which must agree across the shards; when
 * they differ, STATS says how. And the probe before an INIT, which asks each
 * shard what it would do with it. Owns conn_t's fingerprint and refuses, and
 * the client's agreed fingerprint.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "strbuf.h"

/* A JSON value as a reader wants it: numbers in the fewest digits that read back exactly. */
static void format_value(const zps_json_t *v, char *buf, size_t size)
{
    if (!v) {
        snprintf(buf, size, "(none)");
    } else if (v->type == ZPS_JSON_NUMBER) {
        for (int digits = 6; digits <= 17; digits++) {
            snprintf(buf, size, "%.*g", digits, v->number);
            if (strtod(buf, NULL) == v->number)
                break;
        }
    } else if (v->type == ZPS_JSON_STRING) {
        snprintf(buf, size, "%s", v->string);
    } else if (v->type == ZPS_JSON_BOOL) {
        snprintf(buf, size, "%s", v->boolean ? "true" : "false");
    } else {
        snprintf(buf, size, "?");
    }
}

static bool same_value(const zps_json_t *a, const zps_json_t *b)
{
    if (!a || !b || a->type != b->type)
        return false;
    switch (a->type) {
    case ZPS_JSON_NUMBER:
        return a->number == b->number;
    case ZPS_JSON_STRING:
        return strcmp(a->string, b->string) == 0;
    case ZPS_JSON_BOOL:
        return a->boolean == b->boolean;
    default:
        return true;
    }
}

/*
 * Says in c->err how the shards' configurations differ: asks every shard for
 * its STATS and compares the settings under "config" (the ones the
 * fingerprint covers) of each shard whose fingerprint is not `ref`'s with
 * those of shard `ref`. Without a STATS answer, names the fingerprints.
 */
static void explain_config(zps_client_t *c, size_t ref, const char *outcome)
{
    uint64_t *fp = calloc(c->nconns, sizeof(*fp));
    zps_json_t **cfg = calloc(c->nconns, sizeof(*cfg));
    if (!fp || !cfg) {
        client_set_error(c, "the shards' configurations differ: %s", outcome);
        free(fp);
        free(cfg);
        return;
    }
    for (size_t i = 0; i < c->nconns; i++)
        fp[i] = c->conns[i].fingerprint;
    call_begin(c, ZPS_MSG_STATS);
    call_exchange(c, true);
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        if (k->have_reply && k->reply.hdr.status == 0 && k->reply.json)
            zps_json_parse(k->reply.json, &cfg[i], NULL, 0);
        zps_message_close(&k->reply);
    }
    zps_strbuf_t b;
    zps_strbuf_init(&b);
    zps_strbuf_printf(&b, "the shards' configurations differ, %s:", outcome);
    const zps_json_t *rcfg = zps_json_get(cfg[ref], "config");
    const char *sep = " ";
    for (size_t i = 0; i < c->nconns; i++) {
        if (fp[i] == 0 || fp[i] == fp[ref])
            continue;
        zps_strbuf_printf(&b, "%sshard %zu at %s differs from shard %zu at %s in", sep, i,
                          c->conns[i].endpoint, ref, c->conns[ref].endpoint);
        sep = "; ";
        const zps_json_t *ic = zps_json_get(cfg[i], "config");
        size_t named = 0;
        for (size_t j = 0; rcfg && ic && rcfg->type == ZPS_JSON_OBJECT && j < rcfg->count; j++) {
            const char *key = rcfg->keys[j];
            const zps_json_t *mine = zps_json_get(ic, key);
            if (strcmp(key, "fingerprint") == 0 || same_value(&rcfg->items[j], mine))
                continue;
            char a[64], r[64];
            format_value(mine, a, sizeof(a));
            format_value(&rcfg->items[j], r, sizeof(r));
            zps_strbuf_printf(&b, "%s %s (%s, not %s)", named++ ? "," : "", key, a, r);
        }
        if (named == 0)
            zps_strbuf_printf(&b, " its configuration fingerprint (%016llx, not %016llx)",
                              (unsigned long long)fp[i], (unsigned long long)fp[ref]);
    }
    char *text = zps_strbuf_take(&b);
    client_set_error(c, "%s", text ? text : "the shards' configurations differ");
    free(text);
    for (size_t i = 0; i < c->nconns; i++)
        zps_json_free(cfg[i]);
    free(cfg);
    free(fp);
}

/*
 * The fingerprints the shards last reported (k->fingerprint) must agree; a
 * shard that reports none (0: an older server) is not compared. Sets
 * c->fingerprint to the agreed one and returns 0, or returns ZPS_ECONFIG
 * with the differences in c->err, `outcome` saying what the caller did not do.
 */
int config_agree(zps_client_t *c, const char *outcome)
{
    size_t ref = c->nconns;
    for (size_t i = 0; i < c->nconns; i++) {
        uint64_t fp = c->conns[i].fingerprint;
        if (fp == 0)
            continue;
        if (ref == c->nconns) {
            ref = i;
        } else if (fp != c->conns[ref].fingerprint) {
            explain_config(c, ref, outcome);
            return ZPS_ECONFIG;
        }
    }
    c->fingerprint = ref < c->nconns ? c->conns[ref].fingerprint : 0;
    return 0;
}

/* Notes the fingerprint of every shard's reply. */
void config_note(zps_client_t *c)
{
    for (size_t i = 0; i < c->nconns; i++)
        if (c->conns[i].have_reply)
            c->conns[i].fingerprint = c->conns[i].reply.hdr.config_fingerprint;
}

/*
 * Before an INIT changes anything: asks every shard, as an observer's
 * HEARTBEAT (no effect on any worker), which configuration it runs, which
 * shard it is and which N it holds. The configurations must agree
 * (config_agree). A shard that will refuse this INIT (it is another shard
 * than its place in the list, or holds another N) is marked `refuses`.
 */
int config_probe(zps_client_t *c, uint64_t n, bool *refusal)
{
    call_begin(c, ZPS_MSG_HEARTBEAT);
    c->call = "init"; /* to the user, this is the INIT waiting */
    for (size_t i = 0; i < c->nconns; i++)
        c->conns[i].req.worker = -1;
    int rc = call_exchange(c, false);
    if (rc)
        return rc;
    config_note(c);
    *refusal = false;
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        const zps_header_t *h = &k->reply.hdr;
        k->refuses = (h->shard_count != 0 &&
                      (h->shard_index != i || h->shard_count != (uint32_t)c->nconns)) ||
                     (h->total != 0 && h->total != n);
        *refusal |= k->refuses;
    }
    return config_agree(c, "nothing was initialised");
}
