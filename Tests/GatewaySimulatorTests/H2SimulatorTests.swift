import Foundation
import Testing
import APNSWire
import CampaignIO
import CampaignJSON
import CampaignTLS
import CampaignTestSupport
@testable import GatewaySimulator

/// The HTTP/2 simulator judges requests as APNs does.
@Suite struct H2RequestCheckTests {
    static let token = String(repeating: "ab", count: 32)

    static func request(method: String = "POST", path: String = "/3/device/\(token)", _ fields: [(String, String)] = [],
                        body: String = #"{"aps":{"alert":"hi"}}"#) -> H2Request {
        H2Request(headers: [(":method", method), (":path", path), (":scheme", "https"), (":authority", "x")] + fields, body: Array(body.utf8))
    }

    static let cert = H2Request.Authentication.certificate(topic: "com.example.app")

    @Test(arguments: [
        (request(method: "GET"), 405, "MethodNotAllowed"),
        (request(path: "/2/device/\(token)"), 404, "BadPath"),
        (request(path: "/3/device/"), 400, "MissingDeviceToken"),
        (request(path: "/3/device/abc"), 400, "BadDeviceToken"),
        (request(path: "/3/device/" + String(repeating: "zz", count: 32)), 400, "BadDeviceToken"),
        (request([("apns-topic", "com.other.app")]), 400, "TopicDisallowed"),
        (request([("apns-push-type", "carrier-pigeon")]), 400, "InvalidPushType"),
        (request([("apns-topic", "com.example.app"), ("apns-push-type", "voip")]), 400, "BadTopic"),
        (request([("apns-topic", "com.example.app"), ("apns-push-type", "liveactivity")]), 400, "BadTopic"),
        (request([("apns-topic", "com.example.app.voip"), ("apns-push-type", "alert")]), 400, "BadTopic"),
        (request([("apns-topic", "com.example.app.voip"), ("apns-push-type", "pushtotalk")]), 400, "BadTopic"),
        (request([("apns-priority", "7")]), 400, "BadPriority"),
        (request([("apns-push-type", "background"), ("apns-priority", "10")]), 400, "BadPriority"),
        (request([("apns-expiration", "soon")]), 400, "BadExpirationDate"),
        (request([("apns-id", "not-a-uuid")]), 400, "BadMessageId"),
        (request([("apns-collapse-id", String(repeating: "c", count: 65))]), 400, "BadCollapseId"),
        (request([("apns-topic", "com.example.app"), ("apns-topic", "com.example.app")]), 400, "DuplicateHeaders"),
        (request(body: ""), 400, "PayloadEmpty"),
        (request(body: #"{"aps":{"alert":""#  + String(repeating: "x", count: 4100) + #""}}"#), 413, "PayloadTooLarge"),
        (request(body: #"{"alert":"no aps"}"#), 400, "BadPayload"),
        (request(body: "[1]"), 400, "BadPayload"),
    ])
    func refusalsCarryApplesStatusAndReason(request: H2Request, status: Int, reason: String) {
        #expect(request.validate(authentication: Self.cert) == H2Reply(status: status, reason: APNsReason(name: reason)))
    }

    @Test func validRequestsPass() {
        let voip = #"{"aps":{},"x":""# + String(repeating: "v", count: 4500) + #""}"#
        #expect(Self.request([("apns-topic", "com.example.app.voip"), ("apns-push-type", "voip")], body: voip).validate(authentication: Self.cert) == nil)
        #expect(Self.request([("apns-topic", "com.example.app"), ("apns-priority", "5"), ("apns-expiration", "0"),
                              ("apns-id", "123e4567-e89b-12d3-a456-426614174000"), ("apns-collapse-id", String(repeating: "c", count: 64))])
            .validate(authentication: Self.cert) == nil)
        #expect(Self.request().validate(authentication: .token(refusal: nil)) == H2Reply(status: 400, reason: "MissingTopic"))
        #expect(Self.request([("apns-topic", "any.topic")]).validate(authentication: .token(refusal: nil)) == nil)
        #expect(Self.request([("apns-topic", "t")]).validate(authentication: .token(refusal: H2Reply(status: 403, reason: "InvalidProviderToken")))
            == H2Reply(status: 403, reason: "InvalidProviderToken"))
    }

    @Test func answersHaveApplesBodies() {
        #expect(String(decoding: H2Reply(status: 410, reason: "Unregistered", timestampMilliseconds: 1_700_000_000_000).body, as: UTF8.self)
                == #"{"reason":"Unregistered","timestamp":1700000000000}"#)
        #expect(H2Reply.accepted.body.isEmpty)
        #expect(H2Reply(status: 400, reason: "BadDeviceToken").key == "400 BadDeviceToken")
    }
}

@Suite struct ProviderTokenCheckTests {
    static let key = try! PrivateKey.generateP256()
    static let publicKey: PublicKey = {
        let dir = TemporaryDirectory("pub")
        try! SecureFile.write(key.publicKeyPEM(), to: dir.file("K.pem"))
        return try! PublicKey.load(pemFile: dir.file("K.pem"))
    }()

    static func bearer(kid: String = "ABCDEFGHIJ", team: String = "TEAM123456", iat: Int64, key: PrivateKey = key) -> String {
        "bearer " + (try! ProviderToken(keyID: kid, teamID: team, issuedAt: iat, key: key)).text
    }

    @Test func tokensAreCheckedAsAPNsDoes() throws {
        var check = ProviderTokenCheck(keys: ["ABCDEFGHIJ": Self.publicKey], lifetimeSeconds: 3600)
        let now: Int64 = 1_800_000_000
        #expect(check.check(nil, now: now) == H2Reply(status: 403, reason: "MissingProviderToken"))
        #expect(check.check(Self.bearer(kid: "OTHERKEY00", iat: now), now: now) == H2Reply(status: 403, reason: "InvalidProviderToken"))
        #expect(check.check(Self.bearer(iat: now, key: try PrivateKey.generateP256()), now: now) == H2Reply(status: 403, reason: "InvalidProviderToken"))
        #expect(check.check(Self.bearer(team: "short", iat: now), now: now) == H2Reply(status: 403, reason: "InvalidProviderToken"))
        #expect(check.check(Self.bearer(iat: now - 3601), now: now) == H2Reply(status: 403, reason: "ExpiredProviderToken"))
        #expect(!check.hasValidToken)
        let first = Self.bearer(iat: now - 10)
        #expect(check.check(first, now: now) == nil)
        #expect(check.hasValidToken)
        #expect(check.check(first, now: now + 600) == nil)
        #expect(check.check(Self.bearer(iat: now + 500), now: now + 600) == H2Reply(status: 429, reason: "TooManyProviderTokenUpdates"))
        #expect(check.check(Self.bearer(iat: now + 1300), now: now + 1300) == nil, "a new token after 20 minutes is taken")
        #expect(check.check(Self.bearer(iat: now + 1300), now: now + 1300 + 3601) == H2Reply(status: 403, reason: "ExpiredProviderToken"))
    }
}

/// Standard HTTP/2 clients against `--protocol h2`: curl and nghttp2's h2load.
@Suite(.ownThreads) struct H2SimulatorClientTests {
    static func start(_ dir: TemporaryDirectory, tokens: Bool = false, faults: FaultPlan = FaultPlan()) throws -> GatewaySimulator {
        try startHTTP2Simulator(in: dir, faults: faults, tokens: tokens)
    }

    static func run(_ tool: String, _ arguments: [String]) throws -> (status: Int32, out: String) {
        try runTool(tool, arguments)
    }

    static let token = String(repeating: "0f", count: 32)

    static func curl(_ port: Int, path: String = "/3/device/\(token)", _ extra: [String]) throws -> String {
        try run("curl", ["-sS", "--http2", "--max-time", "20", "--cacert", TestCertificates.path("ca.pem"),
                         "-w", " %{http_code} %{http_version}", "https://127.0.0.1:\(port)\(path)"] + extra).out
    }

    @Test(.timeLimit(.minutes(5))) func curlIsAcceptedOverHTTP2AndRefusedWithApplesReasons() throws {
        let dir = TemporaryDirectory("h2curl")
        let simulator = try Self.start(dir)
        defer { simulator.stop() }
        let cert = ["--cert", TestCertificates.path("client.pem"), "--key", TestCertificates.path("client.key")]
        let id = "123e4567-e89b-12d3-a456-426614174000"
        #expect(try Self.curl(simulator.port, cert + ["-H", "apns-topic: com.example.campaign", "-H", "apns-id: \(id)",
                                                       "-H", "apns-push-type: alert", "-d", #"{"aps":{"alert":"hi"}}"#]) == " 200 2")
        #expect(try Self.curl(simulator.port, path: "/3/device/abc", cert + ["-d", #"{"aps":{}}"#]) == #"{"reason":"BadDeviceToken"} 400 2"#)
        #expect(try Self.curl(simulator.port, cert + ["-d", #"{"aps":{}}"#, "-H", "apns-priority: 3"]) == #"{"reason":"BadPriority"} 400 2"#)
        #expect(try Self.curl(simulator.port, cert + ["-X", "PUT", "-d", #"{"aps":{}}"#]) == #"{"reason":"MethodNotAllowed"} 405 2"#)
        // Without a client certificate (and no --auth-keys), the handshake itself is refused.
        #expect(try !Self.curl(simulator.port, ["-d", #"{"aps":{}}"#]).hasSuffix(" 200 2"))
        simulator.stop()
        let lines = try String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 1)
        #expect(lines.first?.contains(#""apns_id":"\#(id)","topic":"com.example.campaign","push_type":"alert""#) == true)
        #expect(simulator.currentStatistics().answers == ["200": 1, "400 BadDeviceToken": 1, "400 BadPriority": 1, "405 MethodNotAllowed": 1])
    }

    /// A connection dropped after its first answer: the device got the
    /// notification (accepted, recorded), the client never got the answer.
    @Test(.timeLimit(.minutes(5))) func anAnswerDroppedWithItsConnectionIsNotCountedAsWritten() throws {
        let dir = TemporaryDirectory("h2drop")
        var faults = FaultPlan()
        faults.dropEvery = 1
        let simulator = try Self.start(dir, faults: faults)
        defer { simulator.stop() }
        let cert = ["--cert", TestCertificates.path("client.pem"), "--key", TestCertificates.path("client.key")]
        let out = try Self.curl(simulator.port, cert + ["-H", "apns-topic: com.example.campaign", "-d", #"{"aps":{"alert":"hi"}}"#])
        #expect(!out.hasSuffix(" 200 2"), "curl got no answer: \(out)")
        simulator.stop()
        let statistics = simulator.currentStatistics()
        #expect(statistics.accepted == 1 && statistics.answers.isEmpty && statistics.answersNeverWritten == 1, "\(statistics)")
        let json = try JSONValue.parse(String(decoding: statistics.json(), as: UTF8.self))
        #expect(json["answers_never_written"] == .number("1") && json["answers"] == .object([]), "none written: \(json)")
        guard case .array(let connections)? = json["per_connection"] else { Issue.record("\(json)"); return }
        #expect(connections.count == 1 && connections[0]["answers"] == .object([]) && connections[0]["answers_never_written"] == .number("1"), "\(json)")
        #expect(try String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8).split(separator: "\n").count == 1)
    }

    @Test(.timeLimit(.minutes(5))) func latencyHoldsEveryByteEachWayAndChangesNone() throws {
        let dir = TemporaryDirectory("h2latency")
        let simulator = try startHTTP2Simulator(in: dir, latencyMilliseconds: 100)
        defer { simulator.stop() }
        let cert = ["--cert", TestCertificates.path("client.pem"), "--key", TestCertificates.path("client.key")]
        let out = try Self.run("curl", ["-sS", "--http2", "--max-time", "20", "--cacert", TestCertificates.path("ca.pem"),
                                        "-w", " %{http_code} %{time_appconnect} %{time_total}",
                                        "https://127.0.0.1:\(simulator.port)/3/device/abc", "-d", #"{"aps":{}}"#] + cert).out
        // The answer arrives whole, a round trip (200 ms) after the TLS
        // handshake, which itself took at least one.
        let parts = out.split(separator: " ")
        #expect(parts.count == 4 && parts[0] == #"{"reason":"BadDeviceToken"}"# && parts[1] == "400", "\(out)")
        let handshake = Double(parts[2]) ?? 0, total = Double(parts[3]) ?? 0
        #expect(handshake >= 0.2 && total - handshake >= 0.2, "\(out)")
        // The relay ends with its connection: the simulator stops at once.
        let started = Date()
        simulator.stop()
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(simulator.currentStatistics().answers == ["400 BadDeviceToken": 1])
    }

    @Test(.timeLimit(.minutes(5))) func h2loadWithAProviderTokenIsAcceptedInFull() throws {
        let dir = TemporaryDirectory("h2load")
        let simulator = try Self.start(dir, tokens: true)
        defer { simulator.stop() }
        let key = try PrivateKey.load(pemFile: TestCertificates.path(DevelopmentCertificates.authKey), passphrase: nil)
        let jwt = try ProviderToken(keyID: DevelopmentCertificates.authKeyID, teamID: DevelopmentCertificates.authTeamID,
                                    issuedAt: Int64(Date().timeIntervalSince1970), key: key)
        try #"{"aps":{"alert":"load"}}"#.write(toFile: dir.file("payload.json"), atomically: true, encoding: .utf8)
        let run = try Self.run("h2load", ["-n", "3000", "-c", "2", "-m", "50", "-d", dir.file("payload.json"),
                                          "-H", "authorization: bearer \(jwt.text)", "-H", "apns-topic: com.example.campaign",
                                          "https://127.0.0.1:\(simulator.port)/3/device/\(Self.token)"])
        #expect(run.status == 0, "\(run.out)")
        // Like Apple, the simulator holds a token connection to one stream
        // until a token is accepted; streams h2load opened before that SETTINGS
        // arrived are refused (REFUSED_STREAM: never processed), and h2load
        // counts them as errors rather than sending them again. Nothing else fails.
        let summary = try #require(run.out.split(separator: "\n").first { $0.hasPrefix("requests: ") })
        let numbers = summary.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
        let (succeeded, failed) = (numbers[3], numbers[4])
        #expect(succeeded + failed == 3000 && failed <= 2 * 49, "\(summary)")
        #expect(run.out.contains("status codes: \(succeeded) 2xx, 0 3xx, 0 4xx, 0 5xx"), "\(run.out)")
        #expect(simulator.currentStatistics().accepted == succeeded, "\(simulator.currentStatistics().connections.map { "\($0.connection): \($0.accepted) \($0.ending ?? "open")" })")
        // A request without the token is refused for it.
        #expect(try Self.curl(simulator.port, ["-H", "apns-topic: com.example.campaign", "-d", #"{"aps":{}}"#]) == #"{"reason":"MissingProviderToken"} 403 2"#)
    }

    @Test(.timeLimit(.minutes(5))) func aPythonHTTP2ClientIsAcceptedAndRefusedWithApplesReasons() throws {
        let dir = TemporaryDirectory("h2python")
        let simulator = try Self.start(dir)
        defer { simulator.stop() }
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        func python(_ topic: String, count: Int) throws -> JSONValue {
            let run = try Self.run("python3", [repo + "/scripts/h2client.py", "--port", String(simulator.port), "--ca", TestCertificates.path("ca.pem"),
                                               "--cert", TestCertificates.path("client.pem"), "--key", TestCertificates.path("client.key"),
                                               "--topic", topic, "--count", String(count), "--streams", "20"])
            #expect(run.status == 0, "\(run.out)")
            return try JSONValue.parse(String(run.out.split(separator: "\n").last ?? ""))
        }
        #expect(try python("com.example.campaign", count: 300)["status"]?["200"]?.integerValue == 300)
        #expect(try python("com.other.app", count: 7)["status"]?["400 TopicDisallowed"]?.integerValue == 7)
        #expect(simulator.currentStatistics().accepted == 300)
    }
}
