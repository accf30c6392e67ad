internal import COpenSSL
internal import COpenSSLShims

/// An APNs provider authentication token: a JWT signed with ES256 by the
/// team's `.p8` key (header `{"alg":"ES256","kid":KEY_ID}`, claims
/// `{"iss":TEAM_ID,"iat":SECONDS}`), sent as `authorization: bearer <token>`.
public struct ProviderToken: Sendable, Equatable {
    public let keyID: String
    public let teamID: String
    /// When it was issued (UNIX seconds): Apple refuses tokens older than an
    /// hour, and new tokens more often than every 20 minutes.
    public let issuedAt: Int64
    /// The compact JWT: base64url(header).base64url(claims).base64url(r‖s).
    public let text: String

    /// The part that is signed: base64url(header) "." base64url(claims).
    public static func signingInput(keyID: String, teamID: String, issuedAt: Int64) -> String {
        let header = #"{"alg":"ES256","kid":"\#(keyID)"}"#
        let claims = #"{"iss":"\#(teamID)","iat":\#(issuedAt)}"#
        return Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
    }

    /// Whether `key` can sign provider tokens: a P-256 key, as Apple's `.p8` files hold.
    public static func isProviderTokenKey(_ key: PrivateKey) -> Bool {
        EVP_PKEY_get_base_id(key.pointer) == EVP_PKEY_EC && EVP_PKEY_get_bits(key.pointer) == 256
    }

    /// Signs a new token with `key` (a P-256 key, as Apple's `.p8` files hold).
    public init(keyID: String, teamID: String, issuedAt: Int64, key: PrivateKey) throws(TLSError) {
        guard Self.isProviderTokenKey(key) else {
            throw TLSError(.openSSL(operation: "Signing a provider token", reason: "the key is not a P-256 (ES256) key, as an APNs .p8 key is"))
        }
        let input = Self.signingInput(keyID: keyID, teamID: teamID, issuedAt: issuedAt)
        let der = try Self.sign(Array(input.utf8), key: key)
        guard let raw = Self.rawSignature(fromDER: der) else {
            throw TLSError(.openSSL(operation: "Signing a provider token", reason: "OpenSSL returned a signature that is not DER ECDSA"))
        }
        self.keyID = keyID
        self.teamID = teamID
        self.issuedAt = issuedAt
        text = input + "." + Base64URL.encode(raw)
    }

    /// A token made before (read back from where it was kept); check it with ``verify(_:key:)``.
    public init(keyID: String, teamID: String, issuedAt: Int64, text: String) {
        (self.keyID, self.teamID, self.issuedAt, self.text) = (keyID, teamID, issuedAt, text)
    }

    /// Whether `token` is a valid ES256 JWT for the public half of `key`:
    /// what the tests check against OpenSSL's verifier.
    public static func verify(_ token: String, key: PrivateKey) -> Bool {
        verify(token, evpKey: key.pointer)
    }

    /// Whether `token` is a valid ES256 JWT for `key`: what the simulator checks.
    public static func verify(_ token: String, publicKey key: PublicKey) -> Bool {
        verify(token, evpKey: key.pointer)
    }

    private static func verify(_ token: String, evpKey: OpaquePointer) -> Bool {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let raw = Base64URL.decode(String(parts[2])), raw.count == 64,
              let der = derSignature(fromRaw: raw) else { return false }
        let input = Array("\(parts[0]).\(parts[1])".utf8)
        guard let ctx = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestVerifyInit(ctx, nil, EVP_sha256(), nil, evpKey) == 1 else { OpenSSLErrorQueue.clear(); return false }
        let ok = der.withUnsafeBufferPointer { sig in
            input.withUnsafeBufferPointer { data in
                EVP_DigestVerify(ctx, sig.baseAddress, sig.count, data.baseAddress, data.count) == 1
            }
        }
        OpenSSLErrorQueue.clear()
        return ok
    }

    /// The header's `alg` and `kid` and the claims' `iss` and `iat` of a
    /// compact JWT, unverified (to pick the key that verifies it).
    public static func claims(of token: String) -> (alg: String, keyID: String, teamID: String, issuedAt: Int64)? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = Base64URL.decode(String(parts[0])), let claims = Base64URL.decode(String(parts[1])) else { return nil }
        func field(_ json: [UInt8], _ name: String) -> String? {
            // Flat objects of strings and integers, as provider tokens are.
            let text = String(decoding: json, as: UTF8.self)
            guard let range = text.range(of: "\"\(name)\":") else { return nil }
            var rest = text[range.upperBound...].drop { $0 == " " }
            if rest.first == "\"" {
                rest = rest.dropFirst()
                return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
            }
            return String(rest.prefix { $0.isNumber || $0 == "-" })
        }
        guard let alg = field(header, "alg"), let kid = field(header, "kid"), let iss = field(claims, "iss"),
              let iat = field(claims, "iat").flatMap({ Int64($0) }) else { return nil }
        return (alg, kid, iss, iat)
    }

    private static func sign(_ data: [UInt8], key: PrivateKey) throws(TLSError) -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw TLSError(.openSSL(operation: "Signing a provider token", reason: "out of memory")) }
        defer { EVP_MD_CTX_free(ctx) }
        var length = 0
        let ok = EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, key.pointer) == 1
            && data.withUnsafeBufferPointer { EVP_DigestSign(ctx, nil, &length, $0.baseAddress, $0.count) } == 1
        guard ok else { throw TLSError(.openSSL(operation: "Signing a provider token", reason: OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain()))) }
        var signature = [UInt8](repeating: 0, count: length)
        let signed = signature.withUnsafeMutableBufferPointer { sig in
            data.withUnsafeBufferPointer { EVP_DigestSign(ctx, sig.baseAddress, &length, $0.baseAddress, $0.count) }
        }
        guard signed == 1 else { throw TLSError(.openSSL(operation: "Signing a provider token", reason: OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain()))) }
        return Array(signature.prefix(length))
    }

    /// JWS wants r‖s, 32 bytes each; OpenSSL gives DER `SEQUENCE { r, s }`.
    static func rawSignature(fromDER der: [UInt8]) -> [UInt8]? {
        der.withUnsafeBufferPointer { buffer -> [UInt8]? in
            var p: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let sig = d2i_ECDSA_SIG(nil, &p, buffer.count) else { return nil }
            defer { ECDSA_SIG_free(sig) }
            var r: OpaquePointer? = nil, s: OpaquePointer? = nil
            ECDSA_SIG_get0(sig, &r, &s)
            var out = [UInt8](repeating: 0, count: 64)
            let ok = out.withUnsafeMutableBufferPointer { o in
                BN_bn2binpad(r, o.baseAddress, 32) == 32 && BN_bn2binpad(s, o.baseAddress! + 32, 32) == 32
            }
            return ok ? out : nil
        }
    }

    static func derSignature(fromRaw raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 64, let sig = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(sig) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard let r, let s, ECDSA_SIG_set0(sig, r, s) == 1 else { return nil }
        let length = i2d_ECDSA_SIG(sig, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var p: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_ECDSA_SIG(sig, &p)
        }
        return written == length ? der : nil
    }
}

/// A public key (an APNs `.p8` key's public half, as the simulator's `--auth-keys` holds them).
public final class PublicKey: @unchecked Sendable {
    let pointer: OpaquePointer   // EVP_PKEY*

    init(taking pointer: OpaquePointer) { self.pointer = pointer }
    deinit { EVP_PKEY_free(pointer) }

    /// Loads a PEM `PUBLIC KEY`.
    public static func load(pemFile path: String) throws(TLSError) -> PublicKey {
        let data = try readFile(path)
        let bio = memoryBIO(copying: data)
        defer { BIO_free(bio) }
        OpenSSLErrorQueue.clear()
        guard let key = PEM_read_bio_PUBKEY(bio, nil, nil, nil) else {
            OpenSSLErrorQueue.clear()
            throw TLSError(.fileUnreadable(path: path, reason: "is not a PEM public key (-----BEGIN PUBLIC KEY-----)"))
        }
        return PublicKey(taking: key)
    }
}

extension PrivateKey {
    /// The public half as PEM (`PUBLIC KEY`).
    public func publicKeyPEM() -> [UInt8] {
        memoryBIO { PEM_write_bio_PUBKEY($0, pointer) }
    }

    /// A new P-256 key, like the `.p8` keys Apple issues for provider tokens.
    public static func generateP256() throws(TLSError) -> PrivateKey {
        guard let key = campaign_ec_p256_generate() else {
            throw TLSError(.openSSL(operation: "Generating a P-256 key", reason: OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain())))
        }
        return PrivateKey(taking: key)
    }
}

/// Base64 with the URL alphabet and no padding (RFC 4648 §5), as JWTs use it.
public enum Base64URL {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i + 3 <= bytes.count {
            let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            for shift in [18, 12, 6, 0] { out.append(alphabet[Int(v >> UInt32(shift) & 63)]) }
            i += 3
        }
        let rest = bytes.count - i
        if rest > 0 {
            let v = UInt32(bytes[i]) << 16 | (rest == 2 ? UInt32(bytes[i + 1]) << 8 : 0)
            out.append(alphabet[Int(v >> 18 & 63)])
            out.append(alphabet[Int(v >> 12 & 63)])
            if rest == 2 { out.append(alphabet[Int(v >> 6 & 63)]) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Nil for text that is not base64url without padding.
    public static func decode(_ text: String) -> [UInt8]? {
        var values: [UInt32] = []
        for c in text.utf8 {
            guard let v = alphabet.firstIndex(of: c) else { return nil }
            values.append(UInt32(v))
        }
        guard values.count % 4 != 1 else { return nil }
        var out: [UInt8] = []
        var i = 0
        while i < values.count {
            let chunk = values[i..<min(i + 4, values.count)]
            var v: UInt32 = 0
            for (k, x) in chunk.enumerated() { v |= x << UInt32(18 - 6 * k) }
            out.append(UInt8(v >> 16 & 255))
            if chunk.count > 2 { out.append(UInt8(v >> 8 & 255)) }
            if chunk.count > 3 { out.append(UInt8(v & 255)) }
            i += 4
        }
        return out
    }
}
