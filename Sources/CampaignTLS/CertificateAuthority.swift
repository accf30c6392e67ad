import CampaignIO
import Foundation
internal import COpenSSL
internal import COpenSSLShims

/// What a certificate is for.
public enum CertificateRole: Sendable {
    /// A TLS server valid for these DNS names and IP addresses.
    case server(dnsNames: [String], ipAddresses: [String])
    /// A TLS client, like an APNs provider certificate.
    case client
}

/// A certificate authority that issues development certificates, so the
/// simulator, the demo and the tests need no Apple account.
public final class CertificateAuthority: @unchecked Sendable {
    public let certificate: Certificate
    public let key: PrivateKey

    /// A new self-signed authority.
    public init(commonName: String, notBefore: Date = Date().addingTimeInterval(-3600), days: Int = 3650) throws(TLSError) {
        let key = try PrivateKey.generateRSA()
        let x509 = try Self.build(
            subject: [("O", "campaign development"), ("CN", commonName)], publicKey: key, issuer: nil,
            notBefore: notBefore, notAfter: notBefore.addingTimeInterval(Double(days) * 86_400),
            extensions: [
                (NID_basic_constraints, "critical,CA:TRUE"),
                (NID_key_usage, "critical,keyCertSign,cRLSign"),
                (NID_subject_key_identifier, "hash"),
            ],
            signer: key)
        self.certificate = x509
        self.key = key
    }

    /// Loads an authority written earlier (its certificate and key in PEM).
    public init(certificate certPath: String, key keyPath: String) throws(TLSError) {
        let identity = try TLSIdentity.pem(certificate: certPath, key: keyPath, passphrase: nil)
        certificate = identity.certificate
        key = identity.key
    }

    /// Issues a certificate with a new key. `subject` is a list of
    /// (attribute, value) pairs such as ("UID", "com.example"), ("CN", "…").
    public func issue(
        subject: [(String, String)], role: CertificateRole,
        notBefore: Date = Date().addingTimeInterval(-3600), notAfter: Date = Date().addingTimeInterval(825 * 86_400)
    ) throws(TLSError) -> TLSIdentity {
        let leafKey = try PrivateKey.generateRSA()
        var extensions: [(Int32, String)] = [
            (NID_basic_constraints, "critical,CA:FALSE"),
            (NID_subject_key_identifier, "hash"),
            (NID_authority_key_identifier, "keyid:always"),
        ]
        switch role {
        case .server(let names, let addresses):
            extensions.append((NID_key_usage, "critical,digitalSignature,keyEncipherment"))
            extensions.append((NID_ext_key_usage, "serverAuth"))
            let alt = names.map { "DNS:\($0)" } + addresses.map { "IP:\($0)" }
            if !alt.isEmpty { extensions.append((NID_subject_alt_name, alt.joined(separator: ","))) }
        case .client:
            extensions.append((NID_key_usage, "critical,digitalSignature"))
            extensions.append((NID_ext_key_usage, "clientAuth"))
        }
        let cert = try Self.build(
            subject: subject, publicKey: leafKey, issuer: certificate,
            notBefore: notBefore, notAfter: notAfter, extensions: extensions, signer: key)
        return TLSIdentity(certificate: cert, chain: [], key: leafKey, source: subject.last?.1 ?? "certificate")
    }

    private static func build(
        subject: [(String, String)], publicKey: PrivateKey, issuer: Certificate?,
        notBefore: Date, notAfter: Date, extensions: [(Int32, String)], signer: PrivateKey
    ) throws(TLSError) -> Certificate {
        func fail(_ what: String) -> TLSError {
            TLSError(.openSSL(operation: what, reason: OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain())))
        }
        OpenSSLErrorQueue.clear()
        guard let x = X509_new() else { throw fail("Creating a certificate") }
        let cert = Certificate(taking: x)
        X509_set_version(x, 2)   // X.509 v3
        var serial: UInt64 = 0
        withUnsafeMutableBytes(of: &serial) { _ = RAND_bytes($0.baseAddress!.assumingMemoryBound(to: UInt8.self), 8) }
        ASN1_INTEGER_set_int64(X509_get_serialNumber(x), Int64(serial >> 2))   // positive, non-zero in practice
        ASN1_TIME_set(X509_getm_notBefore(x), time_t(notBefore.timeIntervalSince1970))
        ASN1_TIME_set(X509_getm_notAfter(x), time_t(notAfter.timeIntervalSince1970))
        let name = X509_get_subject_name(x)
        for (field, value) in subject {
            guard X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8, value, -1, -1, 0) == 1 else {
                throw fail("Setting \(field) in a certificate subject")
            }
        }
        X509_set_issuer_name(x, issuer.map { X509_get_subject_name($0.pointer) } ?? name)
        X509_set_pubkey(x, publicKey.pointer)
        var ctx = X509V3_CTX()
        campaign_x509v3_set_ctx_nodb(&ctx)
        X509V3_set_ctx(&ctx, issuer?.pointer ?? x, x, nil, nil, 0)
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_conf_nid(nil, &ctx, nid, value) else {
                throw fail("Adding the certificate extension \(value)")
            }
            X509_add_ext(x, ext, -1)
            X509_EXTENSION_free(ext)
        }
        guard X509_sign(x, signer.pointer, EVP_sha256()) > 0 else { throw fail("Signing a certificate") }
        return cert
    }
}

/// The files `campaign certs` writes: a development CA, a server certificate for
/// localhost and 127.0.0.1, and a client certificate shaped like an APNs
/// provider certificate, as PEM and as a PKCS#12 bundle.
public struct DevelopmentCertificates: Sendable {
    public static let caCertificate = "ca.pem"
    public static let caKey = "ca.key"
    public static let serverCertificate = "server.pem"
    public static let serverKey = "server.key"
    public static let clientCertificate = "client.pem"
    public static let clientKey = "client.key"
    public static let clientBundle = "client.p12"
    /// A development provider-token key, as Apple issues them (`AuthKey_<KID>.p8`,
    /// PKCS#8 P-256), with its key id and a team id for tokens.
    public static let authKeyID = "DEVKEY0001"
    public static let authTeamID = "DEVTEAM001"
    public static let authKey = "AuthKey_\(authKeyID).p8"
    /// Its public half, where the simulator's `--auth-keys` looks: `auth-keys/<KID>.pem`.
    public static let authKeysDirectory = "auth-keys"

    /// Writes every file into `directory` (created when missing). Keys and the
    /// bundle are written 0600, certificates 0644. Returns the paths written.
    @discardableResult
    public static func write(
        to directory: String, bundleID: String, p12Passphrase: String = "", days: Int = 825
    ) throws -> [String] {
        try SecureFile.makeDirectory(directory)
        let ca = try CertificateAuthority(commonName: "campaign development CA")
        let now = Date().addingTimeInterval(-3600)
        let server = try ca.issue(
            subject: [("O", "campaign development"), ("CN", "localhost")],
            role: .server(dnsNames: ["localhost"], ipAddresses: ["127.0.0.1", "::1"]),
            notBefore: now, notAfter: now.addingTimeInterval(Double(days) * 86_400))
        let client = try ca.issue(
            subject: clientSubject(bundleID: bundleID), role: .client,
            notBefore: now, notAfter: now.addingTimeInterval(Double(days) * 86_400))
        let files: [(String, [UInt8], mode_t)] = [
            (caCertificate, ca.certificate.pem(), SecureFile.publicMode),
            (caKey, ca.key.pem(), SecureFile.privateMode),
            (serverCertificate, server.certificate.pem(), SecureFile.publicMode),
            (serverKey, server.key.pem(), SecureFile.privateMode),
            (clientCertificate, client.certificate.pem(), SecureFile.publicMode),
            (clientKey, client.key.pem(), SecureFile.privateMode),
            (clientBundle, try client.pkcs12(passphrase: p12Passphrase, friendlyName: "Apple Push Services: \(bundleID)"),
             SecureFile.privateMode),
        ]
        let tokenKey = try PrivateKey.generateP256()
        try SecureFile.makeDirectory((directory as NSString).appendingPathComponent(authKeysDirectory))
        let files2: [(String, [UInt8], mode_t)] = files + [
            (authKey, tokenKey.pem(), SecureFile.privateMode),
            ("\(authKeysDirectory)/\(authKeyID).pem", tokenKey.publicKeyPEM(), SecureFile.publicMode),
        ]
        var written: [String] = []
        for (name, bytes, mode) in files2 {
            let path = (directory as NSString).appendingPathComponent(name)
            try SecureFile.write(bytes, to: path, mode: mode)
            written.append(path)
        }
        return written
    }

    /// The subject of an APNs provider certificate for `bundleID`.
    public static func clientSubject(bundleID: String) -> [(String, String)] {
        [("UID", bundleID), ("CN", "Apple Push Services: \(bundleID)"), ("OU", "campaign development"),
         ("O", "campaign development"), ("C", "US")]
    }
}
