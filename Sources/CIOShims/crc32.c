// CRC-32 (the gzip/zlib polynomial, reflected) by carry-less multiplication.
//
// The plan's checksum covers every byte of a plan: 330 MB for a million
// records, which zlib's table-driven crc32 (Debian builds it without its SIMD
// variants) took 0.13 s to cover, once in `plan` and again in `send`. Folding
// 64 bytes at a time with PCLMULQDQ (Gopal et al., "Fast CRC Computation for
// Generic Polynomials Using PCLMULQDQ Instruction", Intel, 2009; the constants
// are the paper's for the reflected CRC-32 polynomial 0x104C11DB7) does it in
// a fraction of that. The value is zlib's: short inputs, the tail under 16
// bytes and machines without the instruction go to zlib itself, and
// `CRC32Tests` compares the two on random inputs of every length to 1,100.
#include "CIOShims.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <pthread.h>

__attribute__((target("pclmul,sse4.1")))
static uint32_t fold_crc32(const uint8_t *p, size_t len, uint32_t crc) {
    // len >= 64 and a multiple of 16; crc is the running value, already inverted.
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);

    __m128i a = _mm_loadu_si128((const __m128i *)(p + 0));
    __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
    a = _mm_xor_si128(a, _mm_cvtsi32_si128((int)crc));
    p += 64;
    len -= 64;

    // Four lanes, each folded 512 bits forward per step.
    while (len >= 64) {
        __m128i a0 = _mm_clmulepi64_si128(a, k1k2, 0x00), a1 = _mm_clmulepi64_si128(a, k1k2, 0x11);
        __m128i b0 = _mm_clmulepi64_si128(b, k1k2, 0x00), b1 = _mm_clmulepi64_si128(b, k1k2, 0x11);
        __m128i c0 = _mm_clmulepi64_si128(c, k1k2, 0x00), c1 = _mm_clmulepi64_si128(c, k1k2, 0x11);
        __m128i d0 = _mm_clmulepi64_si128(d, k1k2, 0x00), d1 = _mm_clmulepi64_si128(d, k1k2, 0x11);
        a = _mm_xor_si128(_mm_xor_si128(a0, a1), _mm_loadu_si128((const __m128i *)(p + 0)));
        b = _mm_xor_si128(_mm_xor_si128(b0, b1), _mm_loadu_si128((const __m128i *)(p + 16)));
        c = _mm_xor_si128(_mm_xor_si128(c0, c1), _mm_loadu_si128((const __m128i *)(p + 32)));
        d = _mm_xor_si128(_mm_xor_si128(d0, d1), _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        len -= 64;
    }

    // The four lanes into one, 128 bits forward each time.
    __m128i t;
    t = _mm_clmulepi64_si128(a, k3k4, 0x00); a = _mm_clmulepi64_si128(a, k3k4, 0x11);
    a = _mm_xor_si128(_mm_xor_si128(a, t), b);
    t = _mm_clmulepi64_si128(a, k3k4, 0x00); a = _mm_clmulepi64_si128(a, k3k4, 0x11);
    a = _mm_xor_si128(_mm_xor_si128(a, t), c);
    t = _mm_clmulepi64_si128(a, k3k4, 0x00); a = _mm_clmulepi64_si128(a, k3k4, 0x11);
    a = _mm_xor_si128(_mm_xor_si128(a, t), d);

    while (len >= 16) {
        t = _mm_clmulepi64_si128(a, k3k4, 0x00); a = _mm_clmulepi64_si128(a, k3k4, 0x11);
        a = _mm_xor_si128(_mm_xor_si128(a, t), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }

    // 128 bits to 64, then to 32 by Barrett reduction.
    t = _mm_clmulepi64_si128(a, k3k4, 0x10);
    a = _mm_xor_si128(_mm_srli_si128(a, 8), t);
    t = _mm_srli_si128(a, 4);
    a = _mm_clmulepi64_si128(_mm_and_si128(a, low32), k5, 0x00);
    a = _mm_xor_si128(a, t);
    t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), poly, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), poly, 0x00);
    a = _mm_xor_si128(a, t);
    return (uint32_t)_mm_extract_epi32(a, 1);
}

static int pclmul_available;
static pthread_once_t pclmul_checked = PTHREAD_ONCE_INIT;

static void check_pclmul(void) {
    __builtin_cpu_init();
    pclmul_available = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}

// Once per process, however many threads ask first at once (the ledger's
// reader checks its segments on several): a plain static set lazily was a
// data race.
static int has_pclmul(void) {
    pthread_once(&pclmul_checked, check_pclmul);
    return pclmul_available;
}
#endif

uint32_t campaign_crc32(uint32_t crc, const uint8_t *bytes, size_t count) {
#if defined(__x86_64__)
    if (count >= 64 && has_pclmul()) {
        size_t folded = count & ~(size_t)15;
        crc = ~fold_crc32(bytes, folded, ~crc);
        bytes += folded;
        count -= folded;
        if (count == 0) return crc;
    }
#endif
    return (uint32_t)crc32_z(crc, bytes, count);
}
