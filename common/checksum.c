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
 *
 * Where the CPU has AVX-512 and VPCLMULQDQ, long buffers go through a faster
 * path that folds 64-byte lanes with carry-less multiplication, after Intel's
 * "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ" (Gopal et
 * al., 2009). In the bit-reflected convention a 16-byte chunk X, read little
 * endian, is the polynomial L(x) x^64 + H(x), L being its first 8 bytes. To
 * move X forward by D bits (so that it lines up with a chunk D bits later)
 * it is replaced by L * (x^(D+64) mod P) + H * (x^D mod P), which is
 * congruent to X x^D and fits in 96 bits. A reflected carry-less product of
 * two 64-bit values is x times the product of their polynomials, so the
 * constants are x^(D+63) mod P and x^(D-1) mod P, reflected into 64 bits.
 * Once everything is folded into the last 16 bytes, those bytes have the same
 * CRC (from a zero register) as the whole buffer, and the crc32 instruction
 * finishes. The constants are computed at start-up from the polynomial.
 */
#include "checksum.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "pool.h"

#define POLY 0x82f63b78u /* CRC32C, bit-reflected */

static uint32_t table[8][256];

/* Tables that shift a register state over BLOCK_BIG and BLOCK_SMALL zero bytes. */
#define BLOCK_BIG 8192
#define BLOCK_SMALL 256
static uint32_t shift_big[4][256];
static uint32_t shift_small[4][256];

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static int have_hw;
static int have_fold;

/* Folding constants (see the file comment) for distances of 128 to 2048 bits. */
enum { FOLD_128, FOLD_256, FOLD_384, FOLD_512, FOLD_1024, FOLD_1536, FOLD_2048, FOLD_COUNT };
static const unsigned fold_bits[FOLD_COUNT] = {128, 256, 384, 512, 1024, 1536, 2048};
static uint64_t fold_k[FOLD_COUNT][2]; /* [0] multiplies the first 8 bytes, [1] the last 8 */

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
            table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
            table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
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

/* x^e mod P, bit-reflected into 64 bits: the coefficient of x^m at bit 63 - m. */
static uint64_t xpow_reflected(unsigned e)
{
    uint32_t r = 1; /* x^0, coefficient of x^m at bit m */
    for (unsigned i = 0; i < e; i++)
        r = (r << 1) ^ ((r & 0x80000000u) ? 0x1edc6f41u : 0); /* P without its x^32 term */
    uint64_t k = 0;
    for (unsigned m = 0; m < 32; m++)
        if (r & (1u << m))
            k |= (uint64_t)1 << (63 - m);
    return k;
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
    for (int i = 0; i < FOLD_COUNT; i++) {
        fold_k[i][0] = xpow_reflected(fold_bits[i] + 63);
        fold_k[i][1] = xpow_reflected(fold_bits[i] - 1);
    }
#if defined(__x86_64__)
    have_hw = __builtin_cpu_supports("sse4.2");
    have_fold = have_hw && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx512f") &&
                __builtin_cpu_supports("vpclmulqdq");
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

#include <immintrin.h>

#define FOLD_TARGET "avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2"

/* X moved forward by the distance of constants k (one pair per 128-bit lane), xored into y. */
__attribute__((target(FOLD_TARGET))) static inline __m512i fold512(__m512i x, __m512i k, __m512i y)
{
    __m512i a = _mm512_clmulepi64_epi128(x, k, 0x00);
    __m512i b = _mm512_clmulepi64_epi128(x, k, 0x11);
    return _mm512_ternarylogic_epi64(a, b, y, 0x96); /* a ^ b ^ y */
}

__attribute__((target(FOLD_TARGET))) static inline __m128i fold128(__m128i x, int which, __m128i y)
{
    __m128i k = _mm_set_epi64x((long long)fold_k[which][1], (long long)fold_k[which][0]);
    __m128i a = _mm_clmulepi64_si128(x, k, 0x00);
    __m128i b = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(a, b), y);
}

__attribute__((target(FOLD_TARGET))) static inline __m512i fold_constant(int which)
{
    return _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)fold_k[which][1], (long long)fold_k[which][0]));
}

/* The register s run over len >= 256 bytes at p. */
__attribute__((target(FOLD_TARGET))) static uint32_t fold_update(uint32_t s, const unsigned char *p,
                                                                 size_t len)
{
    /* The register's state enters as a xor into the first four bytes. */
    __m512i z0 =
        _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_castsi128_si512(_mm_cvtsi32_si128((int)s)));
    __m512i z1 = _mm512_loadu_si512(p + 64);
    __m512i z2 = _mm512_loadu_si512(p + 128);
    __m512i z3 = _mm512_loadu_si512(p + 192);
    p += 256;
    len -= 256;
    const __m512i k2048 = fold_constant(FOLD_2048);
    while (len >= 256) {
        z0 = fold512(z0, k2048, _mm512_loadu_si512(p));
        z1 = fold512(z1, k2048, _mm512_loadu_si512(p + 64));
        z2 = fold512(z2, k2048, _mm512_loadu_si512(p + 128));
        z3 = fold512(z3, k2048, _mm512_loadu_si512(p + 192));
        p += 256;
        len -= 256;
    }
    /* Four lanes of 64 bytes into one, at z3's place. */
    __m512i z = fold512(z0, fold_constant(FOLD_1536), z3);
    z = fold512(z1, fold_constant(FOLD_1024), z);
    z = fold512(z2, fold_constant(FOLD_512), z);
    const __m512i k512 = fold_constant(FOLD_512);
    while (len >= 64) {
        z = fold512(z, k512, _mm512_loadu_si512(p));
        p += 64;
        len -= 64;
    }
    /* Four 16-byte chunks into one, at the last one's place. */
    __m128i x = _mm512_extracti32x4_epi32(z, 3);
    x = fold128(_mm512_extracti32x4_epi32(z, 0), FOLD_384, x);
    x = fold128(_mm512_extracti32x4_epi32(z, 1), FOLD_256, x);
    x = fold128(_mm512_extracti32x4_epi32(z, 2), FOLD_128, x);
    while (len >= 16) {
        x = fold128(x, FOLD_128, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    /* The last 16 bytes, from a zero register, have the whole buffer's CRC. */
    uint64_t r = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
    r = _mm_crc32_u64(r, (uint64_t)_mm_extract_epi64(x, 1));
    return hw_run((uint32_t)r, p, len);
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
    if (have_fold && len >= 1024)
        return ~fold_update(~crc, buf, len);
    if (have_hw)
        return ~hw_update(~crc, buf, len);
#endif
    return ~sw_update(~crc, buf, len);
}

/* The CRC is of dst as written (of_src false) or of src (of_src true), each block while in cache. */
static uint32_t copy_run(uint32_t crc, unsigned char *d, const unsigned char *p, size_t len,
                         bool of_src)
{
    enum { BLOCK = 32768 };
    for (size_t i = 0; i < len; i += BLOCK) {
        size_t n = len - i < BLOCK ? len - i : BLOCK;
        memcpy(d + i, p + i, n);
        crc = zps_crc32c(crc, of_src ? p + i : d + i, n);
    }
    return crc;
}

/* A long copy in chunks on the process's helper threads (pool.h). */
typedef struct copy_job {
    unsigned char *d;
    const unsigned char *p;
    bool of_src;
    size_t len, chunk;
    uint32_t crc[ZPS_POOL_CHUNKS_MAX];
} copy_job_t;

static void copy_chunk(void *arg, size_t i, unsigned lane)
{
    (void)lane;
    copy_job_t *j = arg;
    size_t lo = i * j->chunk, n = zps_pool_piece(i, j->chunk, j->len);
    j->crc[i] = copy_run(0, j->d + lo, j->p + lo, n, j->of_src);
}

static uint32_t copy_crc(uint32_t crc, void *dst, const void *src, size_t len, bool of_src)
{
    if (len < 2 * ZPS_POOL_CHUNK_MIN) /* one chunk */
        return copy_run(crc, dst, src, len, of_src);
    copy_job_t j = {.d = dst, .p = src, .of_src = of_src, .len = len,
                    .chunk = zps_pool_chunk(len, 64)};
    size_t chunks = zps_pool_chunks(len, j.chunk);
    zps_pool_run(chunks, copy_chunk, &j);
    for (size_t i = 0; i < chunks; i++)
        crc = zps_crc32c_combine(crc, j.crc[i], zps_pool_piece(i, j.chunk, len));
    return crc;
}

uint32_t zps_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
    return copy_crc(crc, dst, src, len, false);
}

uint32_t zps_crc32c_copy_out(uint32_t crc, void *dst, const void *src, size_t len)
{
    return copy_crc(crc, dst, src, len, true);
}

/*
 * a(x) b(x) mod P, bit-reflected: bit 31 holds the coefficient of x^0, bit 0
 * that of x^31.
 */
static uint32_t gf2_mulmod(uint32_t a, uint32_t b)
{
    uint32_t p = 0;
    for (int i = 0; i < 32; i++) {
        if (a & 0x80000000u)
            p ^= b;
        a <<= 1;
        b = (b & 1) ? (b >> 1) ^ POLY : b >> 1; /* b x mod P */
    }
    return p;
}

/*
 * With the pre- and post-inversion, crc(a b) = shift(crc(a), |b|) ^ crc(b)
 * (the two inversions of b's own CRC cancel those the shift moves), and a
 * shift over n bytes multiplies the register by x^(8n) mod P, a power found
 * by squaring.
 */
uint32_t zps_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    uint32_t pow = 0x00800000u;   /* x^8 */
    uint32_t shift = 0x80000000u; /* x^0 */
    for (uint64_t n = len_b; n; n >>= 1) {
        if (n & 1)
            shift = gf2_mulmod(shift, pow);
        pow = gf2_mulmod(pow, pow);
    }
    return gf2_mulmod(crc_a, shift) ^ crc_b;
}

const char *zps_crc32c_kernel(void)
{
    pthread_once(&tables_once, build_tables);
    return have_fold ? "avx512-vpclmulqdq" : have_hw ? "sse4.2" : "table";
}
