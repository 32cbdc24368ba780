/*
 * slices.c - a full vector cut into the shards' slices by the range rule
 * (common/shard.h), each slice checksummed in the same pass that checks its
 * values are finite, or rounded to bfloat16 with error feedback. Owns
 * conn_t's narrow buffer and the client's residual.
 */
#include "internal.h"

#include <stdlib.h>

#include "bf16.h"
#include "checksum.h"
#include "shard.h"

/* Splits a full vector of n elements by shard into the prepared requests. */
void slices_attach(zps_client_t *c, const float *v, uint64_t n)
{
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        zps_range_t r;
        zps_shard_range(n, (uint32_t)i, (uint32_t)c->nconns, &r);
        k->req.total = n;
        k->req.offset = r.lo;
        k->req.length = zps_range_len(r);
        k->payload = v ? v + r.lo : NULL;
        k->count = (size_t)zps_range_len(r);
    }
}

/* Refuses a call whose value `bad` of shard k's slice is not finite (nothing is sent). */
static int refuse_nonfinite(zps_client_t *c, const conn_t *k, const char *what, size_t bad)
{
    client_set_error(c, "%s %llu is %g: nothing was sent", what,
                     (unsigned long long)(k->req.offset + bad),
                     (double)((const float *)k->payload)[bad]);
    return ZPS_ENONFINITE;
}

/* Shard k's slice: checksummed in the pass that checks it is finite (slices_sum). */
int slices_sum_one(zps_client_t *c, conn_t *k, const char *what)
{
    const float *v = k->payload;
    size_t bad;
    if (k->req.type == ZPS_MSG_PUSH && shm_can_stage(k->shm, k->count)) {
        /* Into the shared-memory slot in the same pass (shm.c). */
        k->req.checksum = shm_stage(k->shm, v, k->count, k->req.request_id, &bad);
    } else {
        k->req.checksum = zps_crc_scan(v, k->count, &bad);
    }
    return bad < k->count ? refuse_nonfinite(c, k, what, bad) : 0;
}

/*
 * Computes each shard's payload checksum in the same pass over memory that
 * checks every value is finite, before anything is sent: a value no shard
 * would take is refused here, so no shard takes a part of it. `what` names
 * an element in the message ("gradient element"). Returns 0 or
 * ZPS_ENONFINITE.
 */
int slices_sum(zps_client_t *c, const char *what)
{
    for (size_t i = 0; i < c->nconns; i++) {
        int rc = slices_sum_one(c, &c->conns[i], what);
        if (rc)
            return rc;
    }
    return 0;
}

/* The residual of n elements and every shard's bfloat16 buffer, before narrowing. */
int slices_narrow_prepare(zps_client_t *c, uint64_t n)
{
    if (c->resid_n != n) {
        /* A model of another size: nothing of the old one carries over. */
        free(c->resid);
        c->resid_n = 0;
        c->resid = calloc((size_t)n, sizeof(float));
        if (!c->resid)
            return ZPS_ENOMEM;
        c->resid_n = n;
    }
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        if (k->narrow_cap < k->count) {
            uint16_t *b = realloc(k->narrow, k->count * sizeof(uint16_t));
            if (!b)
                return ZPS_ENOMEM;
            k->narrow = b;
            k->narrow_cap = k->count;
        }
    }
    return 0;
}

/* Shard k's slice, checked finite, then narrowed with its residual (slices_narrow). */
int slices_narrow_one(zps_client_t *c, conn_t *k, const char *what)
{
    size_t bad;
    if (!zps_all_finite(k->payload, k->count, &bad))
        return refuse_nonfinite(c, k, what, bad);
    k->req.checksum =
        zps_bf16_narrow_feedback(k->narrow, k->payload, c->resid + k->req.offset, k->count);
    k->payload = k->narrow;
    return 0;
}

/*
 * As slices_sum for a bfloat16 push (wire_bf16): every value is checked
 * finite first, so that a refused gradient changes nothing; then each
 * shard's slice, with the residual of the earlier pushes added, is rounded
 * into its bfloat16 buffer (which becomes the payload) and checksummed, and
 * the residual keeps what the rounding left out. n: the model's elements.
 */
int slices_narrow(zps_client_t *c, uint64_t n, const char *what)
{
    for (size_t i = 0; i < c->nconns; i++) {
        conn_t *k = &c->conns[i];
        size_t bad;
        if (!zps_all_finite(k->payload, k->count, &bad))
            return refuse_nonfinite(c, k, what, bad);
    }
    int rc = slices_narrow_prepare(c, n);
    for (size_t i = 0; i < c->nconns && rc == 0; i++)
        rc = slices_narrow_one(c, &c->conns[i], what);
    return rc;
}
