import Foundation
import Testing
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
}
