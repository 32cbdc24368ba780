/*
 * checksum.h - CRC32C (Castagnoli), the checksum of every message payload
 * and of every checkpoint section.
 *
 * Folds long buffers with AVX-512 carry-less multiplication where the CPU has
 * it, uses the SSE4.2 crc32 instruction on three interleaved streams
 * otherwise, and a slice-by-8 table where neither exists. All give the same
 * values. Thread-safe; no set-up call needed. None of these blocks or
 * allocates.
 *
 * Not here: which bytes a message or a checkpoint checksums (common/wire.h,
 * checkpoint/checkpoint.h, docs/protocol.md, docs/checkpoint.md).
 */
#ifndef ZPS_CHECKSUM_H
#define ZPS_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/*
 * Returns the CRC32C of `len` bytes at `buf`, continuing from `crc`, the value
 * returned for the preceding bytes (0 to start). Chaining is exact:
 * zps_crc32c(zps_crc32c(0, a, n), b, m) equals the CRC of a followed by b.
 */
uint32_t zps_crc32c(uint32_t crc, const void *buf, size_t len);

/*
 * Copies len bytes from src to dst and returns their CRC32C continuing from
 * crc, in one pass over memory: each block is checksummed right after it is
 * copied, while it is in cache. src and dst must not overlap. From 2 MiB the
 * copy is cut into chunks for the process's helper threads (pool.h), their
 * CRCs joined (zps_crc32c_combine).
 */
uint32_t zps_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len);

/*
 * As zps_crc32c_copy, but the CRC is of src, the caller's own memory, not of
 * dst as read back: for a copy into memory another process may write (a
 * shared-memory slot), whose later changes the reader's checksum must find.
 */
uint32_t zps_crc32c_copy_out(uint32_t crc, void *dst, const void *src, size_t len);

/*
 * The CRC32C of a followed by b, from crc_a = zps_crc32c(0, a, ...), crc_b =
 * zps_crc32c(0, b, len_b) and b's length: pieces checksummed apart, on
 * different threads, are joined without reading them again.
 */
uint32_t zps_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* The portable table implementation, exposed so tests can compare the two. */
uint32_t zps_crc32c_sw(uint32_t crc, const void *buf, size_t len);

/*
 * The fastest path this CPU has, which zps_crc32c uses for long buffers:
 * "avx512-vpclmulqdq" (carry-less folding), "sse4.2" (the crc32 instruction
 * on three streams) or "table".
 */
const char *zps_crc32c_kernel(void);

#endif
