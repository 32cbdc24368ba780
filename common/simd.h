/*
 * simd.h - function multiversioning for the loops that run over whole
 * payloads and shards.
 *
 * The baseline x86-64 build only assumes SSE2. A function marked
 * ZPS_CLONES_AVX2 (or ZPS_CLONES_AVX512) is also compiled for those
 * instruction sets, and glibc's loader picks the widest version the CPU has.
 * Only for loops whose result cannot depend on the width: element-wise IEEE
 * operations (each correctly rounded, never contracted: the build has
 * -ffp-contract=off) and bit tests. Elsewhere the macros are empty.
 *
 * Not here: the loops themselves (optimizer/, common/wire.c,
 * common/checksum.c, which picks its kernel at run time on its own).
 */
#ifndef ZPS_SIMD_H
#define ZPS_SIMD_H

#if defined(__x86_64__) && defined(__GLIBC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define ZPS_CLONES_AVX2 __attribute__((target_clones("default", "avx2")))
#define ZPS_CLONES_AVX512 __attribute__((target_clones("default", "avx2", "avx512f")))
#endif
#endif
#ifndef ZPS_CLONES_AVX2
#define ZPS_CLONES_AVX2
#define ZPS_CLONES_AVX512
#endif

#endif
