import CampaignIO
import Foundation
internal import COpenSSL
internal import COpenSSLShims

/// An X.509 certificate owned by OpenSSL, freed when released.
public final class Certificate: @unchecked Sendable {
    let pointer: OpaquePointer   // X509*

    init(taking pointer: OpaquePointer) { self.pointer = pointer }
    deinit { X509_free(pointer) }

    /// Every certificate in a PEM file, leaf first.
    public static func load(pemFile path: String) throws(TLSError) -> [Certificate] {
        let data = try readFile(path)
        return try fromPEM(data, path: path)
    }

    static func fromPEM(_ data: [UInt8], path: String) throws(TLSError) -> [Certificate] {
        let bio = memoryBIO(copying: data)
        defer { BIO_free(bio) }
        var result: [Certificate] = []
        while let x = PEM_read_bio_X509(bio, nil, nil, nil) { result.append(Certificate(taking: x)) }
        OpenSSLErrorQueue.clear()   // the read that ends the loop always leaves "no start line"
        guard !result.isEmpty else { throw TLSError(.invalidCertificate(path: path)) }
        return result
    }

    /// The subject as one line, e.g. `UID=com.example, CN=Apple Push Services: com.example`.
    public var subject: String { Self.oneLine(X509_get_subject_name(pointer)) }
    public var issuer: String { Self.oneLine(X509_get_issuer_name(pointer)) }

    public var notAfter: Date { Self.date(X509_get0_notAfter(pointer)) }
    public var notBefore: Date { Self.date(X509_get0_notBefore(pointer)) }

    /// PEM text.
    public func pem() -> [UInt8] {
        memoryBIO { PEM_write_bio_X509($0, pointer) }
    }

    /// Whether `key` is the private key for this certificate.
    public func matches(_ key: PrivateKey) -> Bool {
        let ok = X509_check_private_key(pointer, key.pointer) == 1
        OpenSSLErrorQueue.clear()
        return ok
    }

    static func oneLine(_ name: OpaquePointer?) -> String {
        guard let name else { return "" }
        // RFC 2253 escaping of specials and controls, UTF-8 kept as UTF-8, ", " between parts.
        let flags = UInt(ASN1_STRFLGS_ESC_2253 | ASN1_STRFLGS_ESC_CTRL | ASN1_STRFLGS_UTF8_CONVERT) | UInt(XN_FLAG_SEP_CPLUS_SPC)
        return String(decoding: memoryBIO { X509_NAME_print_ex($0, name, 0, flags) }, as: UTF8.self)
    }

    static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date {
        var tm = tm()
        guard let time, ASN1_TIME_to_tm(time, &tm) == 1 else { return .distantPast }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&tm)))
    }
}

/// A private key owned by OpenSSL, freed when released.
public final class PrivateKey: @unchecked Sendable {
    let pointer: OpaquePointer   // EVP_PKEY*

    init(taking pointer: OpaquePointer) { self.pointer = pointer }
    deinit { EVP_PKEY_free(pointer) }

    /// A new RSA key.
    public static func generateRSA(bits: Int = 2048) throws(TLSError) -> PrivateKey {
        guard let key = campaign_rsa_generate(UInt32(bits)) else {
            throw TLSError(.openSSL(operation: "Generating an RSA key", reason: OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain())))
        }
        return PrivateKey(taking: key)
    }

    /// Loads a PEM key, decrypting it with `passphrase` when it is encrypted.
    public static func load(pemFile path: String, passphrase: String?) throws(TLSError) -> PrivateKey {
        let data = try readFile(path)
        let bio = memoryBIO(copying: data)
        defer { BIO_free(bio) }
        OpenSSLErrorQueue.clear()
        // With no callback, OpenSSL takes the user-data argument as the passphrase;
        // an empty one makes an encrypted key fail instead of prompting on the tty.
        let key = (passphrase ?? "").withCString { PEM_read_bio_PrivateKey(bio, nil, nil, UnsafeMutableRawPointer(mutating: $0)) }
        guard let key else {
            let errors = OpenSSLErrorQueue.drain()
            let encrypted = data.starts(with: Array("-----BEGIN ENCRYPTED PRIVATE KEY".utf8))
                || String(decoding: data, as: UTF8.self).contains("Proc-Type: 4,ENCRYPTED")
            if encrypted {
                throw TLSError(passphrase == nil ? .passphraseNeeded(path: path) : .wrongPassphrase(path: path))
            }
            _ = errors
            throw TLSError(.invalidKey(path: path))
        }
        return PrivateKey(taking: key)
    }

    /// Unencrypted PKCS#8 PEM text.
    public func pem() -> [UInt8] {
        memoryBIO { PEM_write_bio_PrivateKey($0, pointer, nil, nil, 0, nil, nil) }
    }
}

/// A certificate, its key and any intermediate certificates, loaded from PEM
/// files or a PKCS#12 bundle.
public struct TLSIdentity: Sendable {
    public var certificate: Certificate
    public var chain: [Certificate]
    public var key: PrivateKey
    /// Where it came from, for messages.
    public var source: String

    /// Loads a certificate (with any chain) and its key. `keyPath` may be nil
    /// when the key is in the certificate file.
    public static func pem(certificate certPath: String, key keyPath: String?, passphrase: String?) throws(TLSError) -> TLSIdentity {
        let certs = try Certificate.load(pemFile: certPath)
        let key = try PrivateKey.load(pemFile: keyPath ?? certPath, passphrase: passphrase)
        guard certs[0].matches(key) else {
            throw TLSError(.keyDoesNotMatchCertificate(certificate: certPath, key: keyPath ?? certPath))
        }
        return TLSIdentity(certificate: certs[0], chain: Array(certs.dropFirst()), key: key, source: certPath)
    }

    /// Loads a PKCS#12 bundle (`.p12`), as Keychain Access exports it.
    public static func pkcs12(path: String, passphrase: String?) throws(TLSError) -> TLSIdentity {
        let data = try readFile(path)
        OpenSSLErrorQueue.clear()
        // Bundles exported by older tools use RC2 or 3DES, which OpenSSL 3 keeps
        // in its legacy provider; load it once, and do without it if absent.
        PKCS12Legacy.loadOnce
        let bio = memoryBIO(copying: data)
        defer { BIO_free(bio) }
        guard let p12 = d2i_PKCS12_bio(bio, nil) else {
            OpenSSLErrorQueue.clear()
            throw TLSError(.invalidCertificate(path: path))
        }
        defer { PKCS12_free(p12) }
        let pass = passphrase ?? ""
        guard PKCS12_verify_mac(p12, pass, Int32(pass.utf8.count)) == 1 else {
            OpenSSLErrorQueue.clear()
            throw TLSError(passphrase == nil ? .passphraseNeeded(path: path) : .wrongPassphrase(path: path))
        }
        var key: OpaquePointer? = nil
        var cert: OpaquePointer? = nil
        var ca: OpaquePointer? = nil
        guard PKCS12_parse(p12, pass, &key, &cert, &ca) == 1, let key, let cert else {
            let reason = OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain())
            throw TLSError(.openSSL(operation: "Reading \(path)", reason: reason))
        }
        var chain: [Certificate] = []
        if let ca {
            for i in 0..<OPENSSL_sk_num(ca) {
                if let x = OPENSSL_sk_value(ca, i) {
                    let xp = OpaquePointer(x)
                    X509_up_ref(xp)
                    chain.append(Certificate(taking: xp))
                }
            }
            OPENSSL_sk_pop_free(ca) { X509_free(OpaquePointer($0)) }
        }
        let identity = TLSIdentity(certificate: Certificate(taking: cert), chain: chain, key: PrivateKey(taking: key), source: path)
        guard identity.certificate.matches(identity.key) else {
            throw TLSError(.keyDoesNotMatchCertificate(certificate: path, key: path))
        }
        return identity
    }

    /// Writes a PKCS#12 bundle of this identity.
    public func pkcs12(passphrase: String, friendlyName: String) throws(TLSError) -> [UInt8] {
        guard let p12 = PKCS12_create(passphrase, friendlyName, key.pointer, certificate.pointer, nil, 0, 0, 0, 0, 0) else {
            throw TLSError(.openSSL(operation: "Writing a PKCS#12 bundle", reason: OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain())))
        }
        defer { PKCS12_free(p12) }
        return memoryBIO { i2d_PKCS12_bio($0, p12) }
    }

    /// Throws when the certificate is outside its validity period now.
    public func checkValidity(now: Date = Date()) throws(TLSError) {
        if certificate.notAfter < now { throw TLSError(.certificateExpired(subject: "\(source) (\(certificate.subject))")) }
        if certificate.notBefore > now { throw TLSError(.certificateNotYetValid(subject: "\(source) (\(certificate.subject))")) }
    }
}

private enum PKCS12Legacy {
    static let loadOnce: Void = {
        _ = OSSL_PROVIDER_load(nil, "legacy")
        _ = OSSL_PROVIDER_load(nil, "default")
        OpenSSLErrorQueue.clear()
    }()
}

/// A memory BIO holding its own copy of `bytes`, to free with `BIO_free`.
///
/// Not `BIO_new_mem_buf`, which reads the caller's memory in place: given a
/// pointer from `withUnsafeBytes`, it outlived its closure, and once the
/// array was released OpenSSL parsed freed memory (every PKCS#12 bundle was
/// refused). Credential files are small; the copy costs nothing that matters.
func memoryBIO(copying bytes: [UInt8]) -> OpaquePointer? {
    guard let bio = BIO_new(BIO_s_mem()) else { return nil }
    let written = bytes.withUnsafeBytes { raw in
        raw.isEmpty ? 0 : BIO_write(bio, raw.baseAddress, Int32(raw.count))
    }
    guard written == Int32(bytes.count) else { BIO_free(bio); return nil }
    return bio
}

/// Runs `body` with a memory BIO and returns what it wrote.
func memoryBIO(_ body: (OpaquePointer?) -> Int32) -> [UInt8] {
    let bio = BIO_new(BIO_s_mem())
    defer { BIO_free(bio) }
    _ = body(bio)
    var pointer: UnsafeMutablePointer<CChar>? = nil
    let count = BIO_ctrl(bio, BIO_CTRL_INFO, 0, &pointer)
    guard count > 0, let pointer else { return [] }
    return pointer.withMemoryRebound(to: UInt8.self, capacity: count) { Array(UnsafeBufferPointer(start: $0, count: count)) }
}

func readFile(_ path: String) throws(TLSError) -> [UInt8] {
    guard FileManager.default.fileExists(atPath: path) else { throw TLSError(.fileMissing(path: path)) }
    do {
        return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    } catch {
        throw TLSError(.fileUnreadable(path: path, reason: (error as NSError).localizedDescription))
    }
}
