/*
 * bf16.c - bfloat16 narrowing and widening; see bf16.h.
 *
 * The loops work on the values' bits with integer operations only, branch
 * free, so that they vectorise and give the same bits at every width.
 */
#include "bf16.h"

#include <math.h>
#include <string.h>

#include "checksum.h"
#include "simd.h"

enum { BLOCK = 8192 }; /* values per pass: 16 KiB of bfloat16, 32 KiB of float32 */

static inline uint32_t float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static inline float bits_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

/* The rounding itself, on a float32's bits. */
static inline uint16_t narrow_bits(uint32_t u)
{
    uint32_t mag = u & 0x7fffffffu;
    uint32_t sign = (u >> 16) & 0x8000u;
    /* Ties to even: add just under half an ulp, plus one when the kept
     * part is odd. A carry into the exponent is the correct rounding. */
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    /* A finite value that rounded up to Inf is the largest finite one. */
    uint32_t overflow = (uint32_t)((r & 0x7f80u) == 0x7f80u) & (uint32_t)(mag < 0x7f800000u);
    r = overflow ? (sign | ZPS_BF16_MAX_BITS) : r;
    /* NaN keeps its sign and top mantissa bits, and stays a (quiet) NaN. */
    r = mag > 0x7f800000u ? ((u >> 16) | 0x40u) : r;
    return (uint16_t)r;
}

uint16_t zps_bf16_from_float(float x)
{
    return narrow_bits(float_bits(x));
}

float zps_bf16_to_float(uint16_t b)
{
    return bits_float((uint32_t)b << 16);
}

ZPS_CLONES_AVX2 static void narrow_block(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = narrow_bits(float_bits(src[i]));
}

uint32_t zps_bf16_narrow(uint16_t *dst, const float *src, size_t n)
{
    uint32_t crc = 0;
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        narrow_block(dst + i, src + i, m);
        crc = zps_crc32c(crc, dst + i, m * sizeof(uint16_t));
    }
    return crc;
}

ZPS_CLONES_AVX2 static void feedback_block(uint16_t *dst, const float *grad, float *resid, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = grad[i] + resid[i];
        uint16_t b = narrow_bits(float_bits(v));
        dst[i] = b;
        resid[i] = v - bits_float((uint32_t)b << 16);
    }
}

uint32_t zps_bf16_narrow_feedback(uint16_t *dst, const float *grad, float *resid, size_t n)
{
    uint32_t crc = 0;
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        feedback_block(dst + i, grad + i, resid + i, m);
        crc = zps_crc32c(crc, dst + i, m * sizeof(uint16_t));
    }
    return crc;
}

/* Widens src[n] into dst; returns the largest magnitude's bits (0x7f80 and up: not finite). */
ZPS_CLONES_AVX2 static uint16_t widen_block(float *dst, const uint16_t *src, size_t n)
{
    uint16_t mx = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t b = src[i];
        uint16_t mag = b & 0x7fffu;
        mx = mag > mx ? mag : mx;
        uint32_t u = (uint32_t)b << 16;
        memcpy(&dst[i], &u, sizeof(u));
    }
    return mx;
}

uint32_t zps_bf16_widen(float *dst, const uint16_t *src, size_t n, uint32_t crc)
{
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        crc = zps_crc32c(crc, src + i, m * sizeof(uint16_t));
        widen_block(dst + i, src + i, m);
    }
    return crc;
}

uint32_t zps_bf16_widen_scan(float *dst, const uint16_t *src, size_t n, size_t *first_bad,
                             float *abs_max, uint32_t crc)
{
    uint16_t mx = 0;
    *first_bad = n;
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        crc = zps_crc32c(crc, src + i, m * sizeof(uint16_t));
        uint16_t bm = widen_block(dst + i, src + i, m);
        mx = bm > mx ? bm : mx;
        /* The culprit is located only in the block that has one. */
        if (bm >= 0x7f80u && *first_bad == n) {
            for (size_t j = 0; j < m; j++) {
                if ((src[i + j] & 0x7f80u) == 0x7f80u) {
                    *first_bad = i + j;
                    break;
                }
            }
        }
    }
    *abs_max = mx >= 0x7f80u ? INFINITY : bits_float((uint32_t)mx << 16);
    return crc;
}
