#include "COpenSSLShims.h"
#include <openssl/rsa.h>

int campaign_ssl_ctx_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}

int campaign_ssl_ctx_set_max_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_max_proto_version(ctx, version);
}

long campaign_ssl_ctx_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}

int campaign_ssl_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

void campaign_x509v3_set_ctx_nodb(X509V3_CTX *ctx) {
    X509V3_set_ctx_nodb(ctx);
}

EVP_PKEY *campaign_ec_p256_generate(void) {
    return EVP_EC_gen("P-256");
}

EVP_PKEY *campaign_rsa_generate(unsigned int bits) {
    return EVP_RSA_gen(bits);
}

unsigned long long campaign_ssl_op_no_renegotiation(void) {
    return (unsigned long long)SSL_OP_NO_RENEGOTIATION;
}
