/*
 * test_checksum.c - CRC32C against published check values, the fast paths
 * (crc32 instruction, carry-less folding) against the table path,
 * chaining, and joining pieces checksummed apart.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "checksum.h"

static void test_check_value(void **state)
{
    (void)state;
    /* The CRC-32C check value (RFC 3720, appendix B.4 family). */
    assert_int_equal(zps_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(zps_crc32c_sw(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(zps_crc32c(0, "", 0), 0);
    /* RFC 3720 B.4: 32 bytes of zeros, and of 0xff. */
    unsigned char buf[32];
    memset(buf, 0, sizeof(buf));
    assert_int_equal(zps_crc32c(0, buf, 32), 0x8a9136aau);
    memset(buf, 0xff, sizeof(buf));
    assert_int_equal(zps_crc32c(0, buf, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)i;
    assert_int_equal(zps_crc32c(0, buf, 32), 0x46dd794eu);
}

/* n pseudo-random bytes from a seeded linear congruential generator; free() them. */
static unsigned char *random_bytes(size_t n, uint32_t seed)
{
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (unsigned char)(seed >> 24);
    }
    return buf;
}

static void test_hw_matches_sw(void **state)
{
    (void)state;
    /* Sizes around the three-way block boundaries (3*256 and 3*8192). */
    size_t max = 3 * 8192 * 2 + 777;
    unsigned char *buf = random_bytes(max + 8, 12345);
    size_t sizes[] = {0, 1, 7, 8, 9, 767, 768, 769, 1536, 24575, 24576, 24577, 49152, max};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        for (size_t off = 0; off < 8; off += 3) {
            uint32_t a = zps_crc32c(0, buf + off, sizes[k]);
            uint32_t b = zps_crc32c_sw(0, buf + off, sizes[k]);
            assert_int_equal(a, b);
        }
    }
    free(buf);
}

/* The folding path (AVX-512 + VPCLMULQDQ, buffers of 1 KiB and up), where the
 * CPU has it: every tail length, every lane boundary, and chained starts. */
static void test_fold_matches_sw(void **state)
{
    (void)state;
    printf("CRC32C kernel for long buffers on this CPU: %s\n", zps_crc32c_kernel());
    size_t max = 70000;
    unsigned char *buf = random_bytes(max + 64, 777);
    for (size_t len = 1000; len <= 1600; len++)
        assert_int_equal(zps_crc32c(0, buf + len % 64, len), zps_crc32c_sw(0, buf + len % 64, len));
    size_t sizes[] = {4096,  4096 + 15, 4096 + 16,   4096 + 63,   4096 + 64,   4096 + 255,
                      65536, 65536 + 1, 65536 + 191, 65536 + 192, 65536 + 193, max};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
        for (size_t off = 0; off < 64; off += 13)
            assert_int_equal(zps_crc32c(0, buf + off, sizes[k]),
                             zps_crc32c_sw(0, buf + off, sizes[k]));
    /* A non-zero starting register enters the fold through the first bytes. */
    uint32_t whole = zps_crc32c_sw(0, buf, max);
    size_t cuts[] = {1, 3, 1023, 1024, 5000, 65536, max - 1024, max - 1};
    for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
        size_t c = cuts[k];
        assert_int_equal(zps_crc32c(zps_crc32c(0, buf, c), buf + c, max - c), whole);
    }
    free(buf);
}

static void test_chaining(void **state)
{
    (void)state;
    const char *text = "the quick brown fox jumps over the lazy dog, again and again";
    size_t n = strlen(text);
    uint32_t whole = zps_crc32c(0, text, n);
    for (size_t cut = 0; cut <= n; cut++)
        assert_int_equal(zps_crc32c(zps_crc32c(0, text, cut), text + cut, n - cut), whole);
}

/* Pieces checksummed apart and joined equal the whole, for the table
 * path's CRC of the whole (independent of the fast paths), at every cut of
 * a short text and at cuts of a buffer of a few MiB. */
static void test_combine(void **state)
{
    (void)state;
    const char *text = "the quick brown fox jumps over the lazy dog, again and again";
    size_t n = strlen(text);
    uint32_t whole = zps_crc32c_sw(0, text, n);
    for (size_t cut = 0; cut <= n; cut++)
        assert_int_equal(zps_crc32c_combine(zps_crc32c(0, text, cut),
                                            zps_crc32c(0, text + cut, n - cut), n - cut),
                         whole);
    size_t big = (3u << 20) + 12345;
    unsigned char *buf = random_bytes(big, 7);
    whole = zps_crc32c_sw(0, buf, big);
    const size_t cuts[] = {0, 1, 4096, 1u << 20, (2u << 20) + 3, big - 1, big};
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        size_t c = cuts[i];
        assert_int_equal(
            zps_crc32c_combine(zps_crc32c(0, buf, c), zps_crc32c(0, buf + c, big - c), big - c),
            whole);
    }
    /* Three pieces, joined left to right. */
    uint32_t crc = zps_crc32c(0, buf, 1000);
    crc = zps_crc32c_combine(crc, zps_crc32c(0, buf + 1000, 1u << 20), 1u << 20);
    crc = zps_crc32c_combine(crc, zps_crc32c(0, buf + 1000 + (1u << 20), big - 1000 - (1u << 20)),
                             big - 1000 - (1u << 20));
    assert_int_equal(crc, whole);
    /* A copy long enough to be cut into chunks for the helper threads:
     * the same bytes, and the CRC continued from a prefix's. */
    unsigned char *dst = malloc(big);
    assert_non_null(dst);
    uint32_t prefix = zps_crc32c_sw(0, "prefix", 6);
    assert_int_equal(zps_crc32c_copy(prefix, dst, buf, big), zps_crc32c_sw(prefix, buf, big));
    assert_memory_equal(dst, buf, big);
    memset(dst, 0, big);
    assert_int_equal(zps_crc32c_copy_out(prefix, dst, buf, big), zps_crc32c_sw(prefix, buf, big));
    assert_memory_equal(dst, buf, big);
    free(dst);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_value),     cmocka_unit_test(test_hw_matches_sw),
        cmocka_unit_test(test_fold_matches_sw), cmocka_unit_test(test_chaining),
        cmocka_unit_test(test_combine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
