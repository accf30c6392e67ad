#ifndef C_OPENSSL_SHIMS_H
#define C_OPENSSL_SHIMS_H

// Function-like macros from OpenSSL do not import into Swift. Each wrapper
// here exists only to give such a macro a callable symbol.

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

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
/// EVP_EC_gen is a variadic macro too: a new P-256 key (APNs provider tokens are ES256).
EVP_PKEY *campaign_ec_p256_generate(void);
/// SSL_CTX_set_ecdh_auto etc. are macros; the session-id context is a plain function,
/// but the option masks below are long macros with casts, so we expose them as values.
unsigned long long campaign_ssl_op_no_renegotiation(void);

#endif
