import Foundation
import Testing
import CampaignTestSupport
@testable import CampaignTLS
import CampaignIO

@Suite struct DevelopmentCertificateTests {
    @Test func writesEveryFileWithPrivateModesForKeys() throws {
        let dir = TemporaryDirectory()
        let written = try DevelopmentCertificates.write(to: dir.file("certs"), bundleID: "com.example.app")
        let names = written.map { ($0 as NSString).lastPathComponent }.sorted()
        #expect(names == ["AuthKey_DEVKEY0001.p8", "DEVKEY0001.pem", "ca.key", "ca.pem", "client.key", "client.p12", "client.pem", "server.key", "server.pem"])
        for path in written {
            let mode = try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
            if path.hasSuffix(".key") || path.hasSuffix(".p12") || path.hasSuffix(".p8") {
                #expect(mode == 0o600, "\(path)")
            } else {
                #expect(mode == 0o644, "\(path)")
            }
        }
    }

    @Test func clientCertificateLooksLikeAnAPNsProviderCertificate() throws {
        let cert = try Certificate.load(pemFile: TestCertificates.path("client.pem"))[0]
        #expect(cert.subject.contains("UID=com.example.campaign"))
        #expect(cert.subject.contains("CN=Apple Push Services: com.example.campaign"))
        #expect(cert.issuer.contains("CN=campaign development CA"))
        #expect(cert.notAfter > Date())
    }

    @Test func pkcs12BundleLoadsWithItsPassphraseOnly() throws {
        let p12 = TestCertificates.path("client.p12")
        let identity = try TLSIdentity.pkcs12(path: p12, passphrase: "s3cret")
        #expect(identity.certificate.subject.contains("UID=com.example.campaign"))
        #expect(throws: TLSError(.wrongPassphrase(path: p12))) { try TLSIdentity.pkcs12(path: p12, passphrase: "nope") }
        #expect(throws: TLSError(.passphraseNeeded(path: p12))) { try TLSIdentity.pkcs12(path: p12, passphrase: nil) }
    }

    @Test func clearErrorsForBadCredentialFiles() throws {
        let dir = TemporaryDirectory()
        #expect(throws: TLSError(.fileMissing(path: dir.file("none.pem")))) {
            try TLSIdentity.pem(certificate: dir.file("none.pem"), key: nil, passphrase: nil)
        }
        let cert = TestCertificates.path("client.pem"), wrongKey = TestCertificates.path("server.key")
        #expect(throws: TLSError(.keyDoesNotMatchCertificate(certificate: cert, key: wrongKey))) {
            try TLSIdentity.pem(certificate: cert, key: wrongKey, passphrase: nil)
        }
        try Data("not a certificate".utf8).write(to: URL(fileURLWithPath: dir.file("junk.pem")))
        #expect(throws: TLSError(.invalidCertificate(path: dir.file("junk.pem")))) {
            try TLSIdentity.pem(certificate: dir.file("junk.pem"), key: nil, passphrase: nil)
        }
        let error = TLSError(.wrongPassphrase(path: "/x/client.p12"))
        #expect(error.description == "The passphrase for /x/client.p12 is wrong.")
        #expect(error.isCredentialOrTrustFailure)
    }

    @Test func anExpiredClientCertificateIsRefusedBeforeConnecting() throws {
        let ca = try CertificateAuthority(commonName: "test CA")
        let past = Date().addingTimeInterval(-10 * 86_400)
        let expired = try ca.issue(subject: [("CN", "old")], role: .client, notBefore: past, notAfter: past.addingTimeInterval(86_400))
        #expect {
            try TLSContext.client(identity: expired, trust: .system)
        } throws: { error in
            guard let e = error as? TLSError, case .certificateExpired = e.kind else { return false }
            return e.description.hasSuffix("has expired.")
        }
    }
}

/// A TLS server on 127.0.0.1 that accepts one connection, echoes one read, and reports how its handshake ended.
final class OneShotServer: @unchecked Sendable {
    let listener: Listener
    let task: BackgroundTask<String>

    init(identity: TLSIdentity, clientCA: String) throws {
        let listener = try Listener(port: 0)
        let context = try TLSContext.server(identity: identity, clientAuthorities: clientCA)
        self.listener = listener
        task = BackgroundTask {
            guard let socket = try listener.accept(cancellation: nil) else { return "cancelled" }
            do {
                let connection = try TLSConnection.accept(socket: socket, context: context)
                var buffer = [UInt8](repeating: 0, count: 64)
                let n = try buffer.withUnsafeMutableBytes { try connection.read(into: $0, deadline: .after(seconds: 10)) }
                try connection.write(Array(buffer[0..<n]))
                connection.close()
                return "ok \(connection.peerSubject ?? "")"
            } catch let error as TLSError {
                return "refused: \(error)"
            }
        }
    }

    static func development() throws -> OneShotServer {
        let identity = try TLSIdentity.pem(
            certificate: TestCertificates.path("server.pem"), key: TestCertificates.path("server.key"), passphrase: nil)
        return try OneShotServer(identity: identity, clientCA: TestCertificates.path("ca.pem"))
    }
}

@Suite(.ownThreads) struct TLSConnectionTests {
    @Test(arguments: ["127.0.0.1", "localhost"])
    func mutualTLSRoundTrip(host: String) throws {
        let server = try OneShotServer.development()
        let connection = try TLSConnection.connect(host: host, port: server.listener.port, context: TestCertificates.clientContext())
        try connection.write(Array("ping".utf8))
        var buffer = [UInt8](repeating: 0, count: 16)
        let n = try buffer.withUnsafeMutableBytes { try connection.read(into: $0, deadline: .after(seconds: 10)) }
        #expect(Array(buffer[0..<n]) == Array("ping".utf8))
        #expect(try server.task.value().contains("UID=com.example.campaign"))
    }

    @Test func aClientCertificateFromAnotherCAIsRefusedAtTheHandshake() throws {
        let server = try OneShotServer.development()
        let stranger = try CertificateAuthority(commonName: "stranger CA")
        let identity = try stranger.issue(subject: [("CN", "intruder")], role: .client)
        let context = try TLSContext.client(identity: identity, trust: .file(TestCertificates.path("ca.pem")))
        #expect {
            try TLSConnection.connect(host: "127.0.0.1", port: server.listener.port, context: context)
        } throws: { error in
            guard let e = error as? TLSError, case .clientRefused = e.kind else { return false }
            return e.description.hasPrefix("The server refused our client certificate")
        }
        #expect(try server.task.value().hasPrefix("refused: The client's certificate was refused"))
    }

    @Test func aServerFromAnotherCAIsNotTrusted() throws {
        let stranger = try CertificateAuthority(commonName: "stranger CA")
        let identity = try stranger.issue(subject: [("CN", "localhost")], role: .server(dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"]))
        let server = try OneShotServer(identity: identity, clientCA: TestCertificates.path("ca.pem"))
        #expect {
            try TLSConnection.connect(host: "127.0.0.1", port: server.listener.port, context: TestCertificates.clientContext())
        } throws: { error in
            guard let e = error as? TLSError, case .serverNotTrusted(let host, _) = e.kind else { return false }
            return host == "127.0.0.1"
        }
        _ = try? server.task.value()
    }

    @Test func anExpiredServerCertificateIsReportedAsExpired() throws {
        let ca = try CertificateAuthority(
            certificate: TestCertificates.path("ca.pem"), key: TestCertificates.path("ca.key"))
        let past = Date().addingTimeInterval(-10 * 86_400)
        let identity = try ca.issue(subject: [("CN", "localhost")], role: .server(dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"]),
                                    notBefore: past, notAfter: past.addingTimeInterval(86_400))
        let server = try OneShotServer(identity: identity, clientCA: TestCertificates.path("ca.pem"))
        #expect(throws: TLSError(.certificateExpired(subject: "the server 127.0.0.1"))) {
            try TLSConnection.connect(host: "127.0.0.1", port: server.listener.port, context: TestCertificates.clientContext())
        }
        _ = try? server.task.value()
    }

    @Test func aCertificateForAnotherNameIsRefused() throws {
        let ca = try CertificateAuthority(
            certificate: TestCertificates.path("ca.pem"), key: TestCertificates.path("ca.key"))
        let identity = try ca.issue(subject: [("CN", "gateway.example")], role: .server(dnsNames: ["gateway.example"], ipAddresses: []))
        let server = try OneShotServer(identity: identity, clientCA: TestCertificates.path("ca.pem"))
        #expect(throws: TLSError(.hostNameMismatch(host: "localhost"))) {
            try TLSConnection.connect(host: "localhost", port: server.listener.port, context: TestCertificates.clientContext())
        }
        _ = try? server.task.value()
    }

    @Test func aRefusedConnectionSaysWhere() throws {
        let listener = try Listener(port: 0)
        let port = listener.port
        listener.close()
        #expect {
            try TLSConnection.connect(host: "127.0.0.1", port: port, context: TestCertificates.clientContext(), timeout: 5)
        } throws: { error in
            guard let e = error as? TLSError, case .connectionFailed(_, let p, _) = e.kind else { return false }
            return p == port && e.description.hasPrefix("Cannot connect to 127.0.0.1:\(port)")
        }
    }

    @Test func cancellationWakesABlockedRead() throws {
        let server = try OneShotServer.development()
        let connection = try TLSConnection.connect(host: "127.0.0.1", port: server.listener.port, context: TestCertificates.clientContext())
        let pipe = try CancellationPipe()
        pipe.cancel()
        var buffer = [UInt8](repeating: 0, count: 16)
        #expect(throws: TLSError(.cancelled)) {
            _ = try buffer.withUnsafeMutableBytes { try connection.read(into: $0, cancellation: pipe) }
        }
        connection.abort()
        _ = try? server.task.value()
    }
}
