import Foundation
import Testing
import APNSWire
import CampaignJSON
import CampaignTLS
import CampaignTestSupport
@testable import GatewaySimulator

/// `--protocol h2` with `--management-port`: channels managed and broadcasts
/// sent over real TLS and HTTP/2 to an in-process simulator on port 0.
@Suite(.ownThreads) struct BroadcastSimulatorTests {
    static let app = "com.example.campaign"   // the test client certificate's UID
    static let channels = "/1/apps/\(app)/channels"
    static let broadcasts = "/4/broadcasts/apps/\(app)"
    static let createStored = #"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#
    static let createUnstored = #"{"message-storage-policy": 0, "push-type": "LiveActivity"}"#

    static func start(_ dir: TemporaryDirectory, tokens: Bool = false, faults: FaultPlan = FaultPlan(),
                      _ configure: (inout SimulatorConfiguration) -> Void = { _ in }) throws -> GatewaySimulator {
        try startHTTP2Simulator(in: dir, faults: faults, tokens: tokens) {
            $0.managementPort = 0
            configure(&$0)
        }
    }

    static func bearer() throws -> (String, String) {
        let key = try PrivateKey.load(pemFile: TestCertificates.path(DevelopmentCertificates.authKey), passphrase: nil)
        let jwt = try ProviderToken(keyID: DevelopmentCertificates.authKeyID, teamID: DevelopmentCertificates.authTeamID,
                                    issuedAt: Int64(Date().timeIntervalSince1970), key: key)
        return ("authorization", "bearer \(jwt.text)")
    }

    /// Creates a channel and returns its id, checking the 201's shape.
    static func create(_ client: H2TestClient, bundle: String = app, body: String = createStored, _ extra: [(String, String)] = []) throws -> String {
        let answer = try client.request("POST", "/1/apps/\(bundle)/channels", extra, text: body)
        #expect(answer.status == 201 && answer.body.isEmpty, "\(answer)")
        let id = try #require(answer.headers["apns-channel-id"], "\(answer)")
        #expect(ChannelID(base64: id)?.base64 == id)
        return id
    }

    static func isCanonicalUUID(_ text: String?) -> Bool { text.map(H2Request.isCanonicalUUID) ?? false }

    static func expectRefusal(_ answer: H2TestClient.Answer, _ status: Int, _ reason: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(answer.status == status && answer.text == #"{"reason":"\#(reason)"}"#, "\(answer)", sourceLocation: sourceLocation)
        #expect(answer.headers["content-type"] == "application/json", sourceLocation: sourceLocation)
        #expect(isCanonicalUUID(answer.headers["apns-request-id"]), "every answer carries a request id: \(answer)", sourceLocation: sourceLocation)
    }

    @Test(.timeLimit(.minutes(2))) func channelsAreCreatedReadListedAndDeleted() throws {
        let dir = TemporaryDirectory("channels")
        let simulator = try Self.start(dir)
        defer { simulator.stop() }
        #expect(simulator.managementPort > 0 && simulator.managementPort != simulator.port)
        let client = try H2TestClient(port: simulator.managementPort)
        let stored = try Self.create(client)
        let unstored = try Self.create(client, body: Self.createUnstored)
        #expect(stored != unstored)

        let read = try client.request("GET", Self.channels, [("apns-channel-id", unstored)])
        #expect(read.status == 200 && read.text == #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#, "\(read)")
        #expect(read.headers["content-type"] == "application/json" && Self.isCanonicalUUID(read.headers["apns-request-id"]))
        let list = try client.request("GET", "/1/apps/\(Self.app)/all-channels")
        #expect(list.status == 200)
        let listed = try JSONValue.parse(list.body)["channels"]
        #expect(Set(listed.map { if case .array(let items) = $0 { items.compactMap(\.stringValue) } else { [] } } ?? []) == [stored, unstored], "\(list)")

        let delete = try client.request("DELETE", Self.channels, [("apns-channel-id", unstored)])
        #expect(delete.status == 204 && delete.body.isEmpty && Self.isCanonicalUUID(delete.headers["apns-request-id"]), "\(delete)")
        Self.expectRefusal(try client.request("GET", Self.channels, [("apns-channel-id", unstored)]), 400, "ChannelNotRegistered")
        Self.expectRefusal(try client.request("DELETE", Self.channels, [("apns-channel-id", unstored)]), 400, "ChannelNotRegistered")
        #expect(try client.request("GET", "/1/apps/\(Self.app)/all-channels").text == #"{"channels":["\#(stored)"]}"#)

        // The refusals of §5.4, §5.5 and §5.8.
        Self.expectRefusal(try client.request("GET", Self.channels), 400, "MissingChannelId")
        Self.expectRefusal(try client.request("GET", Self.channels, [("apns-channel-id", "abc")]), 400, "BadChannelId")
        Self.expectRefusal(try client.request("GET", "/1/apps/\(Self.app)/channel"), 404, "BadPath")
        Self.expectRefusal(try client.request("PUT", Self.channels, text: Self.createStored), 405, "MethodNotAllowed")
        Self.expectRefusal(try client.request("POST", "/1/apps/\(Self.app)/all-channels", text: Self.createStored), 405, "MethodNotAllowed")
        Self.expectRefusal(try client.request("POST", "/1/apps/\(Self.app).push-type.liveactivity/channels", text: Self.createStored), 400, "TopicDisallowed")
        Self.expectRefusal(try client.request("POST", "/1/apps/com.other.app/channels", text: Self.createStored), 403, "TopicMismatch")
        Self.expectRefusal(try client.request("POST", Self.channels, text: #"{"message-storage-policy":1,"push-type":"LiveActivity","x":1}"#), 400, "BadRequestParams")
        Self.expectRefusal(try client.request("POST", Self.channels, text: #"{"message-storage-policy":1}"#), 400, "MissingPushType")
        // Each route lives on its own listener, as at Apple.
        Self.expectRefusal(try client.request("POST", Self.broadcasts, [("apns-channel-id", stored)], text: "{}"), 404, "BadPath")
        let device = try H2TestClient(port: simulator.port)
        #expect(try device.request("POST", Self.channels, text: Self.createStored).reason == "BadPath")

        let statistics = simulator.currentStatistics()
        #expect(statistics.channelsCreated == 2 && statistics.channelsDeleted == 1)
        #expect(statistics.managementAnswers["201"] == 2 && statistics.managementAnswers["204"] == 1 && statistics.managementAnswers["200"] == 3)
        #expect(statistics.accepted == 0 && statistics.broadcasts == 0)
    }

    @Test(.timeLimit(.minutes(2))) func requestIDsAreEchoedOrMadeUpOnEveryAnswer() throws {
        let dir = TemporaryDirectory("request-ids")
        let simulator = try Self.start(dir)
        defer { simulator.stop() }
        let management = try H2TestClient(port: simulator.managementPort)
        let id = "7f1d9a52-3c4b-4e8a-9f0e-2b6c8d1e4a37"
        let created = try management.request("POST", Self.channels, [("apns-request-id", id)], text: Self.createStored)
        #expect(created.status == 201 && created.headers["apns-request-id"] == id)
        let refused = try management.request("GET", Self.channels, [("apns-request-id", id)])
        #expect(refused.reason == "MissingChannelId" && refused.headers["apns-request-id"] == id, "errors echo it too")
        let made = try (0..<3).map { _ in try management.request("GET", "/1/apps/\(Self.app)/all-channels").headers["apns-request-id"] }
        #expect(made.allSatisfy(Self.isCanonicalUUID) && Set(made).count == 3, "a fresh lowercase UUID each time: \(made)")
        // One letter-case rule for `apns-request-id` and `apns-id` on every route (Apple words both alike):
        // an uppercase id is taken and echoed lowercased; one that is not a UUID is BadMessageId.
        let upper = try management.request("GET", "/1/apps/\(Self.app)/all-channels", [("apns-request-id", id.uppercased())])
        #expect(upper.status == 200 && upper.headers["apns-request-id"] == id, "\(upper)")
        let notUUID = try management.request("GET", "/1/apps/\(Self.app)/all-channels", [("apns-request-id", "not-a-uuid")])
        Self.expectRefusal(notUUID, 400, "BadMessageId")
        #expect(notUUID.headers["apns-request-id"] != "not-a-uuid")
        let upperCreate = try management.request("POST", Self.channels, [("apns-request-id", id.uppercased())], text: Self.createStored)
        #expect(upperCreate.status == 201 && upperCreate.headers["apns-request-id"] == id, "\(upperCreate)")
        // The create body's push type in the header's spelling is the same push type.
        let lowerBody = try management.request("POST", Self.channels, text: #"{"message-storage-policy": 1, "push-type": "liveactivity"}"#)
        #expect(lowerBody.status == 201, "\(lowerBody)")
        Self.expectRefusal(try management.request("POST", Self.channels, text: #"{"message-storage-policy": 1, "push-type": "alert"}"#),
                           400, "InvalidPushType")

        let channel = try #require(created.headers["apns-channel-id"])
        let device = try H2TestClient(port: simulator.port)
        let headers = [("apns-channel-id", channel), ("apns-push-type", "liveactivity"), ("apns-priority", "10"), ("apns-expiration", "0")]
        let echoed = try device.request("POST", Self.broadcasts, headers + [("apns-request-id", id)], text: #"{"aps":{"event":"update"}}"#)
        #expect(echoed.status == 200 && echoed.headers["apns-request-id"] == id && echoed.body.isEmpty, "\(echoed)")
        let upperBroadcast = try device.request("POST", Self.broadcasts, headers + [("apns-request-id", id.uppercased())], text: #"{"aps":{"event":"update"}}"#)
        #expect(upperBroadcast.status == 200 && upperBroadcast.headers["apns-request-id"] == id, "as an uppercase apns-id is: \(upperBroadcast)")
        let titled = try device.request("POST", Self.broadcasts, [("apns-channel-id", channel), ("apns-push-type", "LiveActivity"),
                                                                  ("apns-priority", "10"), ("apns-expiration", "0")], text: #"{"aps":{"event":"update"}}"#)
        #expect(titled.status == 200, "apns-push-type: LiveActivity is liveactivity: \(titled)")
        // [BC]'s token example sends apns-id: answered as the request id.
        let viaAPNsID = try device.request("POST", Self.broadcasts, headers + [("apns-id", id.uppercased())], text: #"{"aps":{"event":"update"}}"#)
        #expect(viaAPNsID.status == 200 && viaAPNsID.headers["apns-request-id"] == id)
        let fresh = try device.request("POST", Self.broadcasts, headers, text: #"{"aps":{"event":"update"}}"#)
        #expect(fresh.status == 200 && Self.isCanonicalUUID(fresh.headers["apns-request-id"]) && fresh.headers["apns-request-id"] != id)
        let uniques = [echoed, viaAPNsID, fresh].map { $0.headers["apns-unique-id"] }
        #expect(uniques.allSatisfy(Self.isCanonicalUUID) && Set(uniques).count == 3, "\(uniques)")
    }

    @Test(.timeLimit(.minutes(2))) func theChannelLimitRefusesOneMoreAndEachAppListsItsOwn() throws {
        let dir = TemporaryDirectory("channel-limit")
        let simulator = try Self.start(dir, tokens: true) { $0.channelLimit = 3 }
        defer { simulator.stop() }
        let client = try H2TestClient(port: simulator.managementPort, certificate: false)
        let auth = try Self.bearer()
        Self.expectRefusal(try client.request("POST", Self.channels, text: Self.createStored), 403, "MissingProviderToken")
        let ids = try (0..<3).map { _ in try Self.create(client, [auth]) }
        Self.expectRefusal(try client.request("POST", Self.channels, [auth], text: Self.createStored), 400, "CannotCreateChannelConfig")
        // A token covers the team's apps; each app has its own limit and list.
        let other = try Self.create(client, bundle: "com.example.other", [auth])
        let list = try client.request("GET", "/1/apps/\(Self.app)/all-channels", [auth])
        #expect(list.text == #"{"channels":[\#(ids.sorted().map { "\"\($0)\"" }.joined(separator: ","))]}"#, "\(list)")
        #expect(try client.request("GET", "/1/apps/com.example.other/all-channels", [auth]).text == #"{"channels":["\#(other)"]}"#)
        Self.expectRefusal(try client.request("GET", "/1/apps/com.example.other/channels", [auth, ("apns-channel-id", ids[0])]), 400, "ChannelNotRegistered")
        // Deleting frees a place.
        #expect(try client.request("DELETE", Self.channels, [auth, ("apns-channel-id", ids[0])]).status == 204)
        let again = try Self.create(client, [auth])
        #expect(!ids.contains(again))
        // The device listener checks the same token first, on broadcasts too.
        let device = try H2TestClient(port: simulator.port, certificate: false)
        let headers = [("apns-channel-id", again), ("apns-push-type", "liveactivity")]
        Self.expectRefusal(try device.request("POST", Self.broadcasts, headers, text: #"{"aps":{}}"#), 403, "MissingProviderToken")
        Self.expectRefusal(try device.request("POST", Self.broadcasts, [("authorization", "bearer not.a.token")], text: #"{"aps":{}}"#), 403, "InvalidProviderToken")
        #expect(try device.request("POST", Self.broadcasts, headers + [auth], text: #"{"aps":{}}"#).status == 200)
        #expect(try device.request("POST", "/4/broadcasts/apps/com.example.other", [auth, ("apns-channel-id", other), ("apns-push-type", "liveactivity")],
                                   text: #"{"aps":{}}"#).status == 200, "a token names no app: any of the team's")
    }

    @Test(.timeLimit(.minutes(2))) func anAppWithoutTheCapabilityIsFeatureNotEnabled() throws {
        let dir = TemporaryDirectory("feature")
        let simulator = try Self.start(dir) { $0.broadcastDisabled = [Self.app] }
        defer { simulator.stop() }
        Self.expectRefusal(try H2TestClient(port: simulator.managementPort).request("POST", Self.channels, text: Self.createStored), 400, "FeatureNotEnabled")
        Self.expectRefusal(try H2TestClient(port: simulator.port).request("POST", Self.broadcasts, [("apns-push-type", "liveactivity")], text: "{}"),
                           400, "FeatureNotEnabled")
    }

    @Test(.timeLimit(.minutes(2))) func broadcastsAreRecordedWithTheirOwnContentAndCountedApartFromDevicePushes() throws {
        let dir = TemporaryDirectory("broadcast-record")
        let simulator = try Self.start(dir)
        defer { simulator.stop() }
        let management = try H2TestClient(port: simulator.managementPort)
        let home = try Self.create(management), away = try Self.create(management)
        let unstored = try Self.create(management, body: Self.createUnstored)
        let device = try H2TestClient(port: simulator.port)
        for (channel, score) in [(home, "2-1"), (away, "0-3")] {
            let answer = try device.request("POST", Self.broadcasts, [("apns-channel-id", channel), ("apns-push-type", "liveactivity"),
                                                                      ("apns-priority", "5"), ("apns-expiration", "1900000000")],
                                            text: "{\"aps\": {\"timestamp\": 1800000000, \"event\": \"update\",\n \"content-state\": {\"score\": \"\(score)\"}}}")
            #expect(answer.status == 200 && answer.body.isEmpty, "\(answer)")
        }
        Self.expectRefusal(try device.request("POST", Self.broadcasts, [("apns-channel-id", unstored), ("apns-push-type", "liveactivity"),
                                                                        ("apns-expiration", "1900000000")], text: #"{"aps":{}}"#), 400, "BadExpirationDate")
        let start = try device.request("POST", Self.broadcasts, [("apns-channel-id", unstored), ("apns-push-type", "liveactivity")],
                                       text: #"{"aps":{"event":"start"}}"#)
        #expect(start.status == 200)
        let push = try device.request("POST", "/3/device/" + String(repeating: "ab", count: 32), [("apns-topic", Self.app)], text: #"{"aps":{"alert":"hi"}}"#)
        #expect(push.status == 200)
        simulator.stop()

        let lines = try String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8).split(separator: "\n").map { try JSONValue.parse(String($0)) }
        let broadcastLines = lines.filter { $0["kind"]?.stringValue == "broadcast" }
        #expect(lines.count == 4 && broadcastLines.count == 3)
        for (channel, score) in [(home, "2-1"), (away, "0-3")] {
            let line = try #require(broadcastLines.first { $0["channel"]?.stringValue == channel })
            #expect(line["payload"]?["aps"]?["content-state"]?["score"]?.stringValue == score)
            #expect(line["priority"]?.integerValue == 5 && line["expiration"]?.integerValue == 1_900_000_000 && line["bundle"]?.stringValue == Self.app)
            #expect(Self.isCanonicalUUID(line["request_id"]?.stringValue) && Self.isCanonicalUUID(line["unique_id"]?.stringValue))
            #expect(line["event_start_flagged"] == .bool(false))
        }
        let started = try #require(broadcastLines.first { $0["channel"]?.stringValue == unstored })
        #expect(started["event_start_flagged"] == .bool(true) && started["priority"]?.integerValue == 10 && started["expiration"]?.integerValue == 0)
        // Device lines are as they were: no kind, the token and the payload as a string.
        let deviceLine = try #require(lines.first { $0["kind"] == nil })
        #expect(deviceLine["token"]?.stringValue == String(repeating: "ab", count: 32) && deviceLine["payload"]?.stringValue == #"{"aps":{"alert":"hi"}}"#)

        let statistics = simulator.currentStatistics()
        #expect(statistics.accepted == 1 && statistics.answers == ["200": 1])
        #expect(statistics.broadcasts == 3 && statistics.broadcastAnswers == ["200": 3, "400 BadExpirationDate": 1])
        let json = try JSONValue.parse(Array(statistics.json()))
        #expect(json["broadcasts"]?.integerValue == 3 && json["accepted"]?.integerValue == 1 && json["channels_created"]?.integerValue == 3)
    }

    /// Apple returns `apns-unique-id` in development only: a simulator
    /// playing production answers a broadcast's 200 without it.
    @Test(.timeLimit(.minutes(2))) func onlyDevelopmentAnswersABroadcastWithAUniqueID() throws {
        for environment in ["sandbox", "production"] {
            let dir = TemporaryDirectory("broadcast-unique-\(environment)")
            let simulator = try Self.start(dir) { $0.environment = environment }
            defer { simulator.stop() }
            let channel = try Self.create(try H2TestClient(port: simulator.managementPort))
            let answer = try H2TestClient(port: simulator.port).request("POST", Self.broadcasts,
                [("apns-channel-id", channel), ("apns-push-type", "liveactivity"), ("apns-priority", "10"), ("apns-expiration", "0")],
                text: #"{"aps":{"event":"update","content-state":{}}}"#)
            #expect(answer.status == 200, "\(environment): \(answer)")
            #expect(Self.isCanonicalUUID(answer.headers["apns-request-id"]), "\(environment): \(answer)")
            #expect((answer.headers["apns-unique-id"] != nil) == (environment == "sandbox"), "\(environment): \(answer)")
            simulator.stop()
            let line = try JSONValue.parse(try String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8).split(separator: "\n")[0].description)
            #expect((line["unique_id"] == .null) == (environment == "production"), "\(environment): \(line)")
            #expect(line["authority"]?.stringValue == "127.0.0.1", "what the client named, as it named it: \(line)")
        }
    }

    @Test(.timeLimit(.minutes(2))) func theDevicePortsFaultsApplyToBroadcasts() throws {
        var throttled = FaultPlan()
        throttled.throttleRate = 1
        let dir = TemporaryDirectory("broadcast-faults")
        let simulator = try Self.start(dir, faults: throttled)
        defer { simulator.stop() }
        let channel = try Self.create(try H2TestClient(port: simulator.managementPort))
        let headers = [("apns-channel-id", channel), ("apns-push-type", "liveactivity")]
        let answer = try H2TestClient(port: simulator.port).request("POST", Self.broadcasts, headers, text: #"{"aps":{}}"#)
        Self.expectRefusal(answer, 429, "TooManyRequests")
        #expect(answer.headers["retry-after"] == "1")
        // A refused request is still checked first: a wrong one is refused for what is wrong.
        #expect(try H2TestClient(port: simulator.port).request("POST", Self.broadcasts, [("apns-push-type", "liveactivity")], text: "{}").reason == "MissingChannelId")

        var goAway = FaultPlan()
        goAway.goAwayAfter = 1
        let dir2 = TemporaryDirectory("broadcast-goaway")
        let second = try Self.start(dir2, faults: goAway)
        defer { second.stop() }
        let channel2 = try Self.create(try H2TestClient(port: second.managementPort))
        let device = try H2TestClient(port: second.port)
        let headers2 = [("apns-channel-id", channel2), ("apns-push-type", "liveactivity")]
        #expect(try device.request("POST", Self.broadcasts, headers2, text: #"{"aps":{}}"#).status == 200)
        #expect(throws: H2TestClient.Failure.self) { try device.request("POST", Self.broadcasts, headers2, text: #"{"aps":{}}"#) }
        #expect(second.waitForStatistics(timeout: 10) { $0.connections.first?.ending?.hasPrefix("goaway") == true })
    }

    @Test(.timeLimit(.minutes(2))) func managementFaultsAreTransientAndCreateNothing() throws {
        let dir = TemporaryDirectory("management-faults")
        let simulator = try Self.start(dir) { $0.managementFaults.throttleRate = 1 }
        defer { simulator.stop() }
        let client = try H2TestClient(port: simulator.managementPort)
        let throttled = try client.request("POST", Self.channels, text: Self.createStored)
        Self.expectRefusal(throttled, 429, "TooManyRequests")
        #expect(throttled.headers["retry-after"] == "1")
        Self.expectRefusal(try client.request("POST", Self.channels, text: "{"), 400, "BadRequestPayload")
        #expect(simulator.currentStatistics().channelsCreated == 0)

        let dir2 = TemporaryDirectory("management-errors")
        let failing = try Self.start(dir2) { $0.managementFaults.errorRate = 1 }
        defer { failing.stop() }
        let client2 = try H2TestClient(port: failing.managementPort)
        let reasons = try (0..<8).map { _ in try client2.request("POST", Self.channels, text: Self.createStored) }.map { "\($0.status) \($0.reason ?? "")" }
        #expect(Set(reasons).isSubset(of: ["500 InternalServerError", "503 ServiceUnavailable"]) && Set(reasons).count == 2, "\(reasons)")
        #expect(failing.currentStatistics().channelsCreated == 0)
        // The device listener's own faults are not the management listener's.
        #expect(failing.configuration.faults.errorRate == 0)
    }

    @Test(.timeLimit(.minutes(2))) func latencyHoldsTheManagementListenersBytesToo() throws {
        let dir = TemporaryDirectory("management-latency")
        let simulator = try startHTTP2Simulator(in: dir, latencyMilliseconds: 100) { $0.managementPort = 0 }
        defer { simulator.stop() }
        let client = try H2TestClient(port: simulator.managementPort)
        _ = try client.request("GET", "/1/apps/\(Self.app)/all-channels")   // the connection's SETTINGS settle
        let started = Date()
        let answer = try client.request("GET", "/1/apps/\(Self.app)/all-channels")
        // One round trip: 100 ms each way.
        #expect(answer.text == #"{"channels":[]}"# && Date().timeIntervalSince(started) >= 0.2, "\(answer)")
    }

    @Test(.timeLimit(.minutes(2))) func anOutageAnswersTheFirstRequests503OverEveryConnectionThenPasses() throws {
        let dir = TemporaryDirectory("management-outage")
        let simulator = try Self.start(dir) { $0.managementUnavailableFirst = 3 }
        defer { simulator.stop() }
        let (first, second) = (try H2TestClient(port: simulator.managementPort), try H2TestClient(port: simulator.managementPort))
        // A wrong request is refused for what is wrong, and does not use up the outage.
        Self.expectRefusal(try first.request("POST", Self.channels, text: "{"), 400, "BadRequestPayload")
        for client in [first, second, first] {
            Self.expectRefusal(try client.request("POST", Self.channels, text: Self.createStored), 503, "ServiceUnavailable")
        }
        #expect(simulator.currentStatistics().channelsCreated == 0)
        let id = try Self.create(second)
        #expect(try first.request("GET", "/1/apps/\(Self.app)/all-channels").text == #"{"channels":["\#(id)"]}"#)
    }
}

/// curl, with requests written from Apple's pages (not from campaign's client), gets Apple's documented answers.
@Suite(.ownThreads) struct BroadcastCurlTests {
    struct Answer {
        var status: Int
        var headers: [String: String]
        var body: String
    }

    /// One curl request; the response's headers and body read back from the files curl wrote.
    static func curl(_ dir: TemporaryDirectory, _ url: String, _ arguments: [String]) throws -> Answer {
        let (head, body) = (dir.file("head-\(UUID().uuidString)"), dir.file("body-\(UUID().uuidString)"))
        let run = try runTool("curl", ["-sS", "--http2", "--max-time", "20", "--cacert", TestCertificates.path("ca.pem"),
                                       "--cert", TestCertificates.path("client.pem"), "--key", TestCertificates.path("client.key"),
                                       "-D", head, "-o", body, "-w", "%{http_code} %{http_version}", url] + arguments)
        #expect(run.status == 0 && run.out.hasSuffix(" 2"), "\(run.out)")
        var headers: [String: String] = [:]
        for line in (try String(contentsOfFile: head, encoding: .utf8)).split(separator: "\r\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let text = (try? String(contentsOfFile: body, encoding: .utf8)) ?? ""
        return Answer(status: Int(run.out.prefix(3)) ?? 0, headers: headers, body: text)
    }

    @Test(.timeLimit(.minutes(3))) func applesDocumentedRequestsGetApplesDocumentedAnswers() throws {
        let dir = TemporaryDirectory("broadcast-curl")
        let simulator = try startHTTP2Simulator(in: dir) { $0.managementPort = 0 }
        defer { simulator.stop() }
        let bundle = "com.example.campaign"
        let manage = "https://127.0.0.1:\(simulator.managementPort)/1/apps/\(bundle)"
        let send = "https://127.0.0.1:\(simulator.port)/4/broadcasts/apps/\(bundle)"

        // [CM] create: POST with the JSON body → 201, apns-channel-id, empty body.
        let created = try Self.curl(dir, "\(manage)/channels", ["--header", "apns-request-id: 2a8b6c1e-5d4f-4a3b-9c7e-1f0d2e3c4b5a",
                                                                "--data", #"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#])
        #expect(created.status == 201 && created.body.isEmpty && created.headers["apns-request-id"] == "2a8b6c1e-5d4f-4a3b-9c7e-1f0d2e3c4b5a")
        let channel = try #require(created.headers["apns-channel-id"])
        let unstored = try #require(try Self.curl(dir, "\(manage)/channels", ["--data", #"{"message-storage-policy": 0, "push-type": "LiveActivity"}"#])
            .headers["apns-channel-id"])

        // [CM] read: GET with apns-channel-id → 200 JSON.
        let read = try Self.curl(dir, "\(manage)/channels", ["-X", "GET", "--header", "apns-channel-id: \(channel)"])
        #expect(read.status == 200 && read.body == #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#)
        // [CM] list: GET all-channels → {"channels":[…]}.
        let list = try Self.curl(dir, "\(manage)/all-channels", ["-X", "GET"])
        #expect(list.status == 200)
        let listed = try JSONSerialization.jsonObject(with: Data(list.body.utf8)) as? [String: [String]]
        #expect(Set(listed?["channels"] ?? []) == [channel, unstored], "\(list.body)")

        // [BC]/[CLI] broadcast: POST with the channel, push type, priority and expiration → 200, apns-request-id, apns-unique-id.
        let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"currentHealthLevel":0.941,"eventDescription":"Power Panda found a sword!"}}}"#
        let sent = try Self.curl(dir, send, ["--header", "apns-channel-id: \(channel)", "--header", "apns-push-type: liveactivity",
                                             "--header", "apns-priority: 10", "--header", "apns-expiration: 0", "--data", update])
        #expect(sent.status == 200 && sent.body.isEmpty)
        #expect(sent.headers["apns-request-id"].map(H2Request.isCanonicalUUID) == true && sent.headers["apns-unique-id"].map(H2Request.isCanonicalUUID) == true,
                "\(sent.headers)")
        // [CLI]'s broadcast curl leaves out apns-expiration and is answered 200 too.
        #expect(try Self.curl(dir, send, ["--header", "apns-channel-id: \(channel)", "--header", "apns-push-type: Liveactivity",
                                          "--header", "apns-priority: 10", "--data", update]).status == 200)

        // The documented refusals.
        func refused(_ answer: Answer, _ status: Int, _ reason: String) {
            #expect(answer.status == status && answer.body == #"{"reason":"\#(reason)"}"# && answer.headers["apns-request-id"] != nil,
                    "\(answer.status) \(answer.body)")
        }
        refused(try Self.curl(dir, send, ["--header", "apns-push-type: liveactivity", "--header", "apns-priority: 10", "--data", update]),
                400, "MissingChannelId")
        refused(try Self.curl(dir, "https://127.0.0.1:\(simulator.port)/4/broadcasts/apps/\(bundle).push-type.liveactivity",
                              ["--header", "apns-channel-id: \(channel)", "--header", "apns-push-type: liveactivity", "--data", update]),
                400, "TopicDisallowed")
        refused(try Self.curl(dir, send, ["--header", "apns-channel-id: \(unstored)", "--header", "apns-push-type: liveactivity",
                                          "--header", "apns-expiration: 1900000000", "--data", update]), 400, "BadExpirationDate")
        let prefix = #"{"aps":{"event":"update","content-state":{"pad":""#, suffix = #""}}}"#
        let big = prefix + String(repeating: "x", count: 5121 - prefix.utf8.count - suffix.utf8.count) + suffix
        #expect(big.utf8.count == 5121)
        try big.write(toFile: dir.file("big.json"), atomically: true, encoding: .utf8)
        refused(try Self.curl(dir, send, ["--header", "apns-channel-id: \(channel)", "--header", "apns-push-type: liveactivity",
                                          "--data-binary", "@" + dir.file("big.json")]), 413, "PayloadTooLarge")

        // [CM] delete: DELETE with apns-channel-id → 204; then the channel is not registered.
        let deleted = try Self.curl(dir, "\(manage)/channels", ["-X", "DELETE", "--header", "apns-channel-id: \(channel)"])
        #expect(deleted.status == 204 && deleted.body.isEmpty && deleted.headers["apns-request-id"] != nil)
        refused(try Self.curl(dir, send, ["--header", "apns-channel-id: \(channel)", "--header", "apns-push-type: liveactivity", "--data", update]),
                400, "ChannelNotRegistered")
        #expect(simulator.currentStatistics().broadcasts == 2)
    }
}
