/*
 * bf16.h - the bfloat16 wire format: payloads at half the bytes, for links
 * slower than memory (docs/protocol.md, ZPS_FLAG_BF16).
 *
 * A bfloat16 is the upper half of a float32: the same sign and 8-bit
 * exponent (so the same range, and Inf and NaN where a float32 has them),
 * 7 bits of mantissa instead of 23. Widening is exact (the lower half
 * becomes zero). Narrowing rounds to the nearest, ties to even; a finite
 * value that would round past the largest bfloat16 (3.3895e38) becomes that
 * largest value instead of Inf, so a finite float32 always narrows to a
 * finite bfloat16 and the server's finite check keeps its meaning.
 *
 * Gradients are narrowed with error feedback: the worker keeps, per element,
 * what rounding left out (residual r), adds it to the next gradient before
 * rounding, and keeps the new remainder,
 *     v = g + r;   b = bf16(v);   r = v - float(b),
 * so that over many clocks the sum of what was sent follows the sum of the
 * gradients to within one rounding, instead of drifting by one rounding per
 * clock. Parameters need none: every pull sends the server's float32
 * parameters afresh.
 *
 * Each function makes one pass over the values in cache-sized blocks and
 * returns the CRC32C of the bfloat16 bytes (little-endian, as on the wire),
 * computed while the block is in cache.
 */
#ifndef ZPS_BF16_H
#define ZPS_BF16_H

#include <stddef.h>
#include <stdint.h>

/* The largest finite bfloat16, 0x7f7f: (2 - 2^-7) * 2^127. */
#define ZPS_BF16_MAX_BITS 0x7f7fu

/* x rounded to the nearest bfloat16, ties to even; finite stays finite, NaN stays NaN. */
uint16_t zps_bf16_from_float(float x);

/* b widened to float32 (exact). */
float zps_bf16_to_float(uint16_t b);

/* dst[i] = bf16(src[i]) for i < n; returns the CRC32C of dst's 2n bytes. */
uint32_t zps_bf16_narrow(uint16_t *dst, const float *src, size_t n);

/*
 * Narrowing with error feedback: v = grad[i] + resid[i], dst[i] = bf16(v),
 * resid[i] = v - float(dst[i]). grad and resid must be finite. Returns the
 * CRC32C of dst's 2n bytes.
 */
uint32_t zps_bf16_narrow_feedback(uint16_t *dst, const float *grad, float *resid, size_t n);

/* dst[i] = float(src[i]) for i < n; returns the CRC32C of src's 2n bytes,
 * continued from `crc` (0 for a payload's first bytes). */
uint32_t zps_bf16_widen(float *dst, const uint16_t *src, size_t n, uint32_t crc);

/*
 * As zps_bf16_widen, and in *first_bad the index of the first value that is
 * not finite (n when all are), in *abs_max the largest |value| (INFINITY
 * when one is not finite, 0 for n = 0), found in the same pass.
 */
uint32_t zps_bf16_widen_scan(float *dst, const uint16_t *src, size_t n, size_t *first_bad,
                             float *abs_max, uint32_t crc);

#endif
