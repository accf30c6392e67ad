import Foundation
import Testing
import CampaignTestSupport
@testable import CampaignTLS

/// ES256 provider tokens (issue 15's first piece): the encoding against
/// Apple's documented example, the signature against OpenSSL's verifier.
@Suite struct ProviderTokenTests {
    @Test func theSignedPartMatchesApplesExample() {
        // Apple's "Establishing a token-based connection to APNs": key ABC123DEFG, team DEF123GHIJ, iat 1437179036.
        #expect(ProviderToken.signingInput(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: 1_437_179_036)
                == "eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyM0RFRkcifQ.eyJpc3MiOiJERUYxMjNHSElKIiwiaWF0IjoxNDM3MTc5MDM2fQ")
    }

    @Test func aTokenVerifiesWithItsKeyOnly() throws {
        let key = try PrivateKey.generateP256()
        let token = try ProviderToken(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: 1_700_000_000, key: key)
        let parts = token.text.split(separator: ".")
        #expect(parts.count == 3)
        #expect(Base64URL.decode(String(parts[2]))?.count == 64, "r‖s, 32 bytes each, as JWS wants (not DER)")
        #expect(ProviderToken.verify(token.text, key: key))
        #expect(!ProviderToken.verify(token.text, key: try PrivateKey.generateP256()), "another key")
        let forged = ProviderToken.signingInput(keyID: "ABC123DEFG", teamID: "OTHERTEAM1", issuedAt: 1_700_000_000) + "." + parts[2]
        #expect(!ProviderToken.verify(forged, key: key), "other claims under the same signature")
        // ECDSA signatures are randomized: two tokens differ and both verify.
        let again = try ProviderToken(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: 1_700_000_000, key: key)
        #expect(again.text != token.text && ProviderToken.verify(again.text, key: key))
    }

    @Test func aP8FileSignsTokensItsKeyVerifies() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("p8-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let key = try PrivateKey.generateP256()
        let path = dir.appendingPathComponent("AuthKey_ABC123DEFG.p8").path
        try Data(key.pem()).write(to: URL(fileURLWithPath: path))
        #expect(String(decoding: key.pem(), as: UTF8.self).hasPrefix("-----BEGIN PRIVATE KEY-----"), "PKCS#8, as Apple's .p8")
        let loaded = try PrivateKey.load(pemFile: path, passphrase: nil)
        let token = try ProviderToken(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: 1_700_000_000, key: loaded)
        #expect(ProviderToken.verify(token.text, key: key))
    }

    @Test func anRSAKeyIsRefused() throws {
        let rsa = try PrivateKey.generateRSA(bits: 2048)
        #expect(throws: TLSError.self) { try ProviderToken(keyID: "K", teamID: "T", issuedAt: 1, key: rsa) }
    }

    @Test func base64URLRoundTrips() {
        for n in 0..<40 {
            let bytes = (0..<n).map { UInt8(($0 * 97 + n) & 255) }
            let text = Base64URL.encode(bytes)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(Base64URL.decode(text) == bytes, "\(n)")
        }
        #expect(Base64URL.decode("a") == nil && Base64URL.decode("ab=") == nil)
    }

    /// An independent verifier: Python's `cryptography` (OpenSSL underneath,
    /// but its own JWS handling) checks our r‖s signature over our encoding.
    @Test func aTokenVerifiesWithPythonsCryptography() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("jwt-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let key = try PrivateKey.generateP256()
        try Data(key.publicKeyPEM()).write(to: dir.appendingPathComponent("pub.pem"))
        let token = try ProviderToken(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: 1_437_179_036, key: key)
        let script = """
        import base64, json, sys
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, utils
        def b64(s): return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
        h, c, sig = sys.argv[2].split(".")
        key = serialization.load_pem_public_key(open(sys.argv[1], "rb").read())
        raw = b64(sig)
        der = utils.encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        key.verify(der, (h + "." + c).encode(), ec.ECDSA(hashes.SHA256()))
        print(json.dumps([json.loads(b64(h)), json.loads(b64(c))], sort_keys=True))
        """
        let (status, text) = try runTool("python3", ["-c", script, dir.appendingPathComponent("pub.pem").path, token.text])
        #expect(status == 0, "\(text)")
        #expect(text.trimmingCharacters(in: .whitespacesAndNewlines)
                == #"[{"alg": "ES256", "kid": "ABC123DEFG"}, {"iat": 1437179036, "iss": "DEF123GHIJ"}]"#)
    }
}
