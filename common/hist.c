/*
 * hist.c - histograms; see hist.h.
 */
#include "hist.h"

void zps_vhist_add(zps_vhist_t *h, uint64_t value)
{
    if (value < ZPS_VHIST_EXACT)
        h->counts[value]++;
    else
        h->overflow++;
    h->n++;
    h->sum += value;
    if (value > h->max)
        h->max = value;
}

uint64_t zps_vhist_quantile(const zps_vhist_t *h, double q)
{
    if (h->n == 0)
        return 0;
    uint64_t need = (uint64_t)(q * (double)h->n);
    if (need < 1)
        need = 1;
    uint64_t seen = 0;
    for (uint64_t v = 0; v < ZPS_VHIST_EXACT; v++) {
        seen += h->counts[v];
        if (seen >= need)
            return v;
    }
    return h->max;
}

uint64_t zps_vhist_count_le(const zps_vhist_t *h, uint64_t v)
{
    if (v >= h->max)
        return h->n;
    uint64_t n = 0;
    for (uint64_t i = 0; i <= v && i < ZPS_VHIST_EXACT; i++)
        n += h->counts[i];
    return n;
}

void zps_vhist_json(const zps_vhist_t *h, zps_strbuf_t *b)
{
    zps_strbuf_printf(b, "{\"count\":%llu,\"max\":%llu,\"mean\":%.4f,\"p50\":%llu,\"p99\":%llu,",
                      (unsigned long long)h->n, (unsigned long long)h->max,
                      h->n ? (double)h->sum / (double)h->n : 0.0,
                      (unsigned long long)zps_vhist_quantile(h, 0.5),
                      (unsigned long long)zps_vhist_quantile(h, 0.99));
    zps_strbuf_printf(b, "\"histogram\":{");
    const char *sep = "";
    for (int v = 0; v < ZPS_VHIST_EXACT; v++) {
        if (h->counts[v]) {
            zps_strbuf_printf(b, "%s\"%d\":%llu", sep, v, (unsigned long long)h->counts[v]);
            sep = ",";
        }
    }
    if (h->overflow)
        zps_strbuf_printf(b, "%s\">=%d\":%llu", sep, ZPS_VHIST_EXACT,
                          (unsigned long long)h->overflow);
    zps_strbuf_printf(b, "}}");
}

/* Bucket of a duration: the power of two, then 16 linear steps within it. */
static unsigned bucket_of(uint64_t ns)
{
    if (ns < ZPS_THIST_SUB)
        return (unsigned)ns;
    unsigned p = 63u - (unsigned)__builtin_clzll(ns); /* ns in [2^p, 2^(p+1)), p >= 4 */
    unsigned sub = (unsigned)((ns >> (p - 4)) & (ZPS_THIST_SUB - 1));
    return (p - 3) * ZPS_THIST_SUB + sub;
}

/* The largest duration that falls in bucket b. */
static uint64_t bucket_top(unsigned b)
{
    if (b < ZPS_THIST_SUB)
        return b;
    unsigned p = b / ZPS_THIST_SUB + 3;
    uint64_t sub = b % ZPS_THIST_SUB;
    uint64_t lo = (1ull << p) + (sub << (p - 4));
    return lo + (1ull << (p - 4)) - 1;
}

uint64_t zps_thist_count_le(const zps_thist_t *h, uint64_t ns)
{
    uint64_t n = 0;
    for (unsigned b = 0; b < ZPS_THIST_BUCKETS && bucket_top(b) <= ns; b++)
        n += h->counts[b];
    return n;
}

void zps_thist_add(zps_thist_t *h, uint64_t ns)
{
    h->counts[bucket_of(ns)]++;
    h->n++;
    h->sum_ns += ns;
    if (ns > h->max_ns)
        h->max_ns = ns;
}

uint64_t zps_thist_quantile(const zps_thist_t *h, double q)
{
    if (h->n == 0)
        return 0;
    if (q >= 1.0)
        return h->max_ns;
    uint64_t need = (uint64_t)(q * (double)h->n);
    if (need < 1)
        need = 1;
    uint64_t seen = 0;
    for (unsigned b = 0; b < ZPS_THIST_BUCKETS; b++) {
        seen += h->counts[b];
        if (seen >= need) {
            uint64_t top = bucket_top(b);
            return top < h->max_ns ? top : h->max_ns;
        }
    }
    return h->max_ns;
}

void zps_thist_json(const zps_thist_t *h, zps_strbuf_t *b)
{
    zps_strbuf_printf(b,
                      "{\"count\":%llu,\"mean_ms\":%.3f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,"
                      "\"max_ms\":%.3f}",
                      (unsigned long long)h->n, h->n ? (double)h->sum_ns / (double)h->n / 1e6 : 0.0,
                      (double)zps_thist_quantile(h, 0.5) / 1e6,
                      (double)zps_thist_quantile(h, 0.99) / 1e6, (double)h->max_ns / 1e6);
}
