import Foundation
import CampaignHTTP2
import CampaignIO
import CampaignTLS

/// A plain HTTP/2 client over TLS for tests: one connection, one request at
/// a time, every wait bounded. It sends exactly the headers it is given (no
/// defaults), so a test states the request as Apple's pages write it.
public final class H2TestClient {
    /// An answer: the status, the headers (names lowercase) and the body.
    public struct Answer: CustomStringConvertible {
        public var status: Int
        public var headers: [String: String]
        public var body: [UInt8]
        public var text: String { String(decoding: body, as: UTF8.self) }
        /// `{"reason":"X"}`'s X.
        public var reason: String? {
            (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])?["reason"] as? String
        }
        public var description: String { "\(status) \(headers) \(text)" }
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    private let connection: TLSConnection
    private let session: H2Session
    private let timeout: Double

    /// Connects to 127.0.0.1:`port` with the test CA, presenting the test
    /// client certificate when `certificate` is set (else none: token auth).
    public init(port: Int, certificate: Bool = true, timeout: Double = 10) throws {
        let identity = certificate
            ? try TLSIdentity.pem(certificate: TestCertificates.path("client.pem"), key: TestCertificates.path("client.key"), passphrase: nil)
            : nil
        let context = try TLSContext.client(identity: identity, trust: .file(TestCertificates.path("ca.pem")), http2: true)
        connection = try TLSConnection.connect(host: "127.0.0.1", port: port, context: context, timeout: timeout)
        session = try H2Session(role: .client)
        self.timeout = timeout
    }

    deinit { connection.close() }

    /// Sends one request and waits (at most the timeout) for its answer.
    public func request(_ method: String, _ path: String, _ headers: [(String, String)] = [], body: [UInt8] = []) throws -> Answer {
        let all = [H2Session.Header(":method", method), .init(":scheme", "https"), .init(":path", path), .init(":authority", "127.0.0.1")]
            + headers.map { H2Session.Header($0.0, $0.1) }
        let stream = try session.submitRequest(headers: all, body: body)
        let deadline = Deadline.after(seconds: timeout)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            var out: [UInt8] = []
            try session.send(into: &out)
            if !out.isEmpty { try connection.write(out, deadline: deadline) }
            for event in session.drainEvents() {
                switch event {
                case .message(stream, let headers, let body):
                    var fields: [String: String] = [:]
                    for h in headers { fields[h.name] = h.value }
                    return Answer(status: Int(fields[":status"] ?? "") ?? 0, headers: fields, body: body)
                case .streamClosed(stream, let code) where code != 0:
                    throw Failure(description: "stream \(stream) reset with code \(code)")
                case .goAway(let last, _) where last < stream:
                    throw Failure(description: "GOAWAY before stream \(stream)")
                default: continue
                }
            }
            let n = try connection.read(into: &buffer, deadline: deadline)
            if n == 0 { throw Failure(description: "the server closed the connection") }
            try session.receive(buffer, count: n)
        }
    }

    /// `request` with a body given as text.
    public func request(_ method: String, _ path: String, _ headers: [(String, String)] = [], text: String) throws -> Answer {
        try request(method, path, headers, body: Array(text.utf8))
    }
}
