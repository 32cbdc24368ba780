/*
 * checksum.c - CRC32C; see checksum.h.
 *
 * The CRC register is linear over GF(2): running bytes D through the register
 * from state s gives shift(s, |D|) ^ run(0, D), where shift(s, L) is the state
 * after L zero bytes. So a long buffer can be cut into three blocks whose CRCs
 * are computed side by side (the crc32 instruction has a latency of three
 * cycles but a throughput of one), then joined by shifting the earlier results
 * over the later blocks. A shift over a fixed length is a 32x32 bit matrix,
 * applied here through four 256-entry tables.
 */
#include "checksum.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82f63b78u /* CRC32C, bit-reflected */

static uint32_t table[8][256];

/* Tables that shift a register state over BLOCK_BIG and BLOCK_SMALL zero bytes. */
#define BLOCK_BIG 8192
#define BLOCK_SMALL 256
static uint32_t shift_big[4][256];
static uint32_t shift_small[4][256];

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static int have_hw;

static uint32_t sw_update(uint32_t s, const unsigned char *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        s = table[0][(s ^ *p++) & 0xff] ^ (s >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= s; /* little-endian: the low byte is processed first */
        s = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
            table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
            table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        s = table[0][(s ^ *p++) & 0xff] ^ (s >> 8);
    return s;
}

static uint32_t zeros_shift(uint32_t s, size_t len)
{
    while (len--)
        s = table[0][s & 0xff] ^ (s >> 8);
    return s;
}

static void build_shift(uint32_t t[4][256], size_t len)
{
    uint32_t basis[32];
    for (int j = 0; j < 32; j++)
        basis[j] = zeros_shift(1u << j, len);
    for (int k = 0; k < 4; k++) {
        for (int b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int j = 0; j < 8; j++)
                if (b & (1 << j))
                    v ^= basis[8 * k + j];
            t[k][b] = v;
        }
    }
}

static inline uint32_t apply_shift(uint32_t t[4][256], uint32_t s)
{
    return t[0][s & 0xff] ^ t[1][(s >> 8) & 0xff] ^ t[2][(s >> 16) & 0xff] ^ t[3][s >> 24];
}

static void build_tables(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][n] = c;
    }
    for (int n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            table[k][n] = table[0][table[k - 1][n] & 0xff] ^ (table[k - 1][n] >> 8);
    build_shift(shift_big, BLOCK_BIG);
    build_shift(shift_small, BLOCK_SMALL);
#if defined(__x86_64__)
    have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t zps_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&tables_once, build_tables);
    return ~sw_update(~crc, buf, len);
}

#if defined(__x86_64__)
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t hw_run(uint32_t s, const unsigned char *p,
                                                          size_t len)
{
    uint64_t s64 = s;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        s64 = _mm_crc32_u64(s64, w);
        p += 8;
        len -= 8;
    }
    s = (uint32_t)s64;
    while (len--)
        s = _mm_crc32_u8(s, *p++);
    return s;
}

/* Three blocks of `block` bytes each at p, the first continuing from s. */
__attribute__((target("sse4.2"))) static uint32_t hw_three(uint32_t s, const unsigned char *p,
                                                            size_t block, uint32_t t[4][256])
{
    uint64_t a = s, b = 0, c = 0;
    const unsigned char *pa = p, *pb = p + block, *pc = p + 2 * block;
    for (size_t i = 0; i < block; i += 8) {
        uint64_t wa, wb, wc;
        memcpy(&wa, pa + i, 8);
        memcpy(&wb, pb + i, 8);
        memcpy(&wc, pc + i, 8);
        a = _mm_crc32_u64(a, wa);
        b = _mm_crc32_u64(b, wb);
        c = _mm_crc32_u64(c, wc);
    }
    uint32_t r = apply_shift(t, (uint32_t)a) ^ (uint32_t)b;
    return apply_shift(t, r) ^ (uint32_t)c;
}

static uint32_t hw_update(uint32_t s, const unsigned char *p, size_t len)
{
    while (len >= 3 * BLOCK_BIG) {
        s = hw_three(s, p, BLOCK_BIG, shift_big);
        p += 3 * BLOCK_BIG;
        len -= 3 * BLOCK_BIG;
    }
    while (len >= 3 * BLOCK_SMALL) {
        s = hw_three(s, p, BLOCK_SMALL, shift_small);
        p += 3 * BLOCK_SMALL;
        len -= 3 * BLOCK_SMALL;
    }
    return hw_run(s, p, len);
}
#endif

uint32_t zps_crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&tables_once, build_tables);
#if defined(__x86_64__)
    if (have_hw)
        return ~hw_update(~crc, buf, len);
#endif
    return ~sw_update(~crc, buf, len);
}
