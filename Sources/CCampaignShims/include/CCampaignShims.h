#ifndef C_CAMPAIGN_SHIMS_H
#define C_CAMPAIGN_SHIMS_H

// Function-like macros from OpenSSL and zlib do not import into Swift.
// Each wrapper here exists only to give such a macro a callable symbol.

#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <zlib.h>
#include <stddef.h>
#include <stdint.h>

/// SSL_CTX_set_min_proto_version is a macro over SSL_CTX_ctrl.
int campaign_ssl_ctx_set_min_proto_version(SSL_CTX *ctx, int version);
/// SSL_CTX_set_max_proto_version is a macro over SSL_CTX_ctrl.
int campaign_ssl_ctx_set_max_proto_version(SSL_CTX *ctx, int version);
/// SSL_CTX_set_mode is a macro over SSL_CTX_ctrl; used for partial and moving writes.
long campaign_ssl_ctx_set_mode(SSL_CTX *ctx, long mode);
/// SSL_set_tlsext_host_name (SNI) is a macro over SSL_ctrl.
int campaign_ssl_set_tlsext_host_name(SSL *ssl, const char *name);
/// X509V3_set_ctx_nodb is a macro that writes a struct field.
void campaign_x509v3_set_ctx_nodb(X509V3_CTX *ctx);
/// EVP_RSA_gen is a variadic macro; Swift cannot call EVP_PKEY_Q_keygen directly.
EVP_PKEY *campaign_rsa_generate(unsigned int bits);
/// SSL_CTX_set_ecdh_auto etc. are macros; the session-id context is a plain function,
/// but the option masks below are long macros with casts, so we expose them as values.
unsigned long long campaign_ssl_op_no_renegotiation(void);

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
