#ifndef C_IO_SHIMS_H
#define C_IO_SHIMS_H

// zlib's function-like macros, system calls Swift's Glibc module hides, a
// compiler builtin, CRC-32 with PCLMULQDQ, and libFuzzer's driver: the C side
// of CampaignIO and the planner's hot loop.

#include <zlib.h>
#include <stddef.h>
#include <stdint.h>

/// deflateInit2 is a macro that passes the zlib version and struct size.
int campaign_deflate_init2(z_stream *strm, int level, int windowBits);
/// inflateInit2 is a macro that passes the zlib version and struct size.
int campaign_inflate_init2(z_stream *strm, int windowBits);

/// sync_file_range(SYNC_FILE_RANGE_WRITE) needs _GNU_SOURCE, which the Swift
/// Glibc module does not define: starts writing a file range back to disk
/// without waiting for it. Returns 0, or -1 with errno.
int campaign_start_writeback(int fd, long long offset, long long count);

/// __builtin_prefetch, for a load known well before it is made: the
/// de-duplication table's slot of a row a few rows ahead.
static inline void campaign_prefetch(const void *address) { __builtin_prefetch(address); }

/// CRC-32 as zlib's crc32() computes it (same polynomial, same pre- and
/// post-inversion, so values chain with zlib's), folded with PCLMULQDQ where
/// the processor has it (crc32.c says why).
uint32_t campaign_crc32(uint32_t crc, const uint8_t *bytes, size_t count);

/// libFuzzer's entry for programs that keep their own main (campaign-fuzz).
/// Declared only: it is defined when linking with -sanitize=fuzzer, and
/// referenced only in code compiled with -D CAMPAIGN_FUZZING.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
