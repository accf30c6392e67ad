#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import APNSWire
import CampaignHTTP2
import CampaignIO
import CampaignTLS
import CampaignTestSupport
@testable import ChannelManagement
@testable import GatewayClient

/// The channel management API's requests and answers, as values: golden
/// fields and bodies written from `apns-broadcast.md` §1 and §3, not from the client.
@Suite struct ChannelsWireTests {
    static let id = ChannelID(base64: "dHdvIGJ5dGVzIGFuZCBtb3Jl")!

    func fields(_ op: ChannelOperation, token: String? = nil) -> [String: String] {
        Dictionary(op.headers(bundleID: "com.example.app", authority: "api-manage-broadcast.sandbox.push.apple.com:2195",
                              requestID: "0f6a5c1e-2b7d-4c1a-9e3f-5a6b7c8d9e0f", authorization: token).map { ($0.name, $0.value) },
                   uniquingKeysWith: { a, _ in a })
    }

    @Test func eachOperationIsTheRouteSection1Names() {
        let create = fields(.create(.mostRecent), token: "bearer a.b.c")
        #expect(create[":method"] == "POST")
        #expect(create[":path"] == "/1/apps/com.example.app/channels")
        #expect(create["apns-channel-id"] == nil)
        #expect(create["authorization"] == "bearer a.b.c")
        #expect(create["apns-request-id"] == "0f6a5c1e-2b7d-4c1a-9e3f-5a6b7c8d9e0f")
        #expect(String(decoding: ChannelOperation.create(.mostRecent).body, as: UTF8.self) == #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#)
        #expect(String(decoding: ChannelOperation.create(.noneStored).body, as: UTF8.self) == #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#)

        let read = fields(.read(Self.id))
        #expect(read[":method"] == "GET")
        #expect(read[":path"] == "/1/apps/com.example.app/channels")
        #expect(read["apns-channel-id"] == "dHdvIGJ5dGVzIGFuZCBtb3Jl")
        #expect(read["authorization"] == nil, "with a certificate APNs ignores authorization: none is sent")
        #expect(ChannelOperation.read(Self.id).body.isEmpty)

        let delete = fields(.delete(Self.id))
        #expect(delete[":method"] == "DELETE")
        #expect(delete[":path"] == "/1/apps/com.example.app/channels")
        #expect(delete["apns-channel-id"] == "dHdvIGJ5dGVzIGFuZCBtb3Jl")

        let list = fields(.list)
        #expect(list[":method"] == "GET")
        #expect(list[":path"] == "/1/apps/com.example.app/all-channels")
        #expect(list["apns-channel-id"] == nil)
    }

    @Test func requestIDsAreFreshCanonicalUUIDs() {
        let ids = (0..<200).map { _ in RequestID.make() }
        #expect(Set(ids).count == 200)
        for id in ids {
            #expect(RequestID.isCanonical(id), "\(id)")
            #expect(Array(id.utf8)[14] == UInt8(ascii: "4"))
        }
        #expect(!RequestID.isCanonical("0F6A5C1E-2B7D-4C1A-9E3F-5A6B7C8D9E0F"), "§1: lowercase only")
    }

    func answer(_ status: Int, reason: String? = nil, channel: String? = nil, body: String? = nil, requestIDField: String = "apns-request-id") -> ChannelAnswer {
        var headers = [H2Session.Header(":status", String(status)), H2Session.Header(requestIDField, "1e2d3c4b-0000-4000-8000-00000000abcd")]
        if let channel { headers.append(H2Session.Header("apns-channel-id", channel)) }
        return ChannelAnswer(headers: headers, body: Array((body ?? reason.map { #"{"reason":"\#($0)"}"# } ?? "").utf8))
    }

    @Test func successesAreReadAsSection1WritesThem() throws {
        #expect(try answer(201, channel: "dHdvIGJ5dGVzIGFuZCBtb3Jl").outcome(of: .create(.noneStored)).get() == .created(Self.id))
        #expect(try answer(204).outcome(of: .delete(Self.id)).get() == .deleted)
        #expect(try answer(200, body: #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#).outcome(of: .read(Self.id)).get()
                == .channel(ChannelInfo(id: Self.id, storage: .mostRecent, pushType: "LiveActivity")))
        #expect(try answer(200, body: #"{"channels":["dHdvIGJ5dGVzIGFuZCBtb3Jl","AAAA"]}"#).outcome(of: .list).get()
                == .channels([Self.id, ChannelID(bytes: [0, 0, 0])]))
        // §4: the prose says the list's body is empty.
        #expect(try answer(200).outcome(of: .list).get() == .channels([]))
        #expect(answer(204, requestIDField: "apns-id").requestID == "1e2d3c4b-0000-4000-8000-00000000abcd")
    }

    @Test func a201WithoutAUsableChannelIDIsNotTakenAsSuccess() {
        guard case .failure(var e) = answer(201, channel: "not base64!").outcome(of: .create(.noneStored)) else { Issue.record("taken"); return }
        #expect(e.exitCode == 69)
        // The sentence names the server the request went to (a sandbox one named production's :2196).
        e.gateway = "api-manage-broadcast.sandbox.push.apple.com:2195"
        #expect(e.description.hasPrefix("The server at api-manage-broadcast.sandbox.push.apple.com:2195 answered a request to create a channel with 201 without"),
                "\(e)")
        #expect(!e.description.contains("2196") && e.description.hasSuffix(".") && !e.description.dropLast().contains(". "), "one sentence: \(e)")
    }

    @Test(arguments: [
        (400, "CannotCreateChannelConfig", 69, "delete channels whose events are over"),
        (400, "FeatureNotEnabled", 69, "turn on the Broadcast capability for its App ID"),
        (400, "TopicDisallowed", 65, "without a suffix such as .push-type.liveactivity"),
        (400, "BadChannelId", 65, "not one APNs issued"),
        (400, "ChannelNotRegistered", 66, "no such channel in this environment"),
        (403, "InvalidProviderToken", 77, "--key-id"),
        (403, "ExpiredProviderToken", 77, "clock"),
        (403, "MissingProviderToken", 77, "--auth-key"),
        (403, "BadCertificateEnvironment", 77, "for this environment"),
        (405, "MethodNotAllowed", 65, "the request is wrong"),
        (404, "BadPath", 65, "the request is wrong"),
        (500, "InternalServerError", 69, "run the command again later"),
        (503, "Service Unavailable", 69, "run the command again later"),
    ])
    func eachRefusalHasItsClassCodeAndOneSentence(status: Int, reason: String, code: Int32, advice: String) {
        guard case .failure(let e) = answer(status, reason: reason).outcome(of: .create(.noneStored)) else { Issue.record("taken"); return }
        #expect(e.exitCode == code)
        #expect(e.description.contains(advice), "\(e)")
        #expect(e.description.contains("apns-request-id 1e2d3c4b-0000-4000-8000-00000000abcd"))
        #expect(e.description.hasSuffix(".") && !e.description.dropLast().contains(". "), "one sentence: \(e)")
        #expect((e.answerClass == .transient) == (status >= 500))
    }
}

/// The provider token of a run: one token, renewed only once 50 minutes old.
@Suite struct ChannelsTokenTests {
    final class Clock: @unchecked Sendable { var now: Int64 = 1_700_000_000 }

    @Test func theTokenIsKeptUntil50MinutesThenRenewed() throws {
        let clock = Clock()
        let source = try ProviderTokenSource(keyPath: TestCertificates.path(DevelopmentCertificates.authKey), keyID: DevelopmentCertificates.authKeyID,
                                             teamID: DevelopmentCertificates.authTeamID, now: clock.now)
        let first = source.current(now: clock.now)
        #expect(first.issuedAt == 1_700_000_000)
        clock.now += 49 * 60
        #expect(source.current(now: clock.now) == first, "APNs refuses a token renewed within 20 minutes; none is needed before 50")
        clock.now += 60
        let renewed = source.current(now: clock.now)
        #expect(renewed.issuedAt == 1_700_000_000 + 50 * 60)
        #expect(ProviderToken.claims(of: renewed.text)?.keyID == DevelopmentCertificates.authKeyID)
    }

    @Test func aKeyThatCannotSignTokensIsRefusedNamingIt() {
        #expect(throws: TLSError(.notAProviderTokenKey(path: TestCertificates.path("client.key")))) {
            try ProviderTokenSource(keyPath: TestCertificates.path("client.key"), keyID: "ABCDEFGHIJ", teamID: "ABCDEFGHIJ")
        }
    }
}

/// `delete --from` and `create --out` files.
@Suite struct ChannelsFileTests {
    @Test func idsAreReadFromLinesOrACSVColumn() throws {
        let dir = TemporaryDirectory()
        try "# ids\nAAAA\r\n\nAAEC\nAAAA\n".write(toFile: dir.file("ids.txt"), atomically: true, encoding: .utf8)
        #expect(try ChannelIDList.read(path: dir.file("ids.txt")) == [ChannelID(bytes: [0, 0, 0]), ChannelID(bytes: [0, 1, 2])])
        try "match,channel_id,lang\n\"Lyon, Paris\",AAAA,fr\nx,AAEC,en\n".write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        #expect(try ChannelIDList.read(path: dir.file("a.csv")) == [ChannelID(bytes: [0, 0, 0]), ChannelID(bytes: [0, 1, 2])])
    }

    @Test func aBadIDOrAMissingFileStopsTheReadNamingIt() {
        let dir = TemporaryDirectory()
        try? "channel_id\nAAAA\nAAA\n".write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        #expect(throws: ChannelError(.badInput("\(dir.file("a.csv")), line 3: \"AAA\" is not a channel id (base64, as APNs issues them)."))) {
            try ChannelIDList.read(path: dir.file("a.csv"))
        }
        do {
            _ = try ChannelIDList.read(path: dir.file("none.txt"))
            Issue.record("read a missing file")
        } catch {
            #expect(error.exitCode == 66)
            #expect(error.description.contains("none.txt"))
        }
        // A CSV without the column is an input missing what it must have (66, as an audience without a token column).
        try? "token,home\nAAAA,1\n".write(toFile: dir.file("b.csv"), atomically: true, encoding: .utf8)
        do {
            _ = try ChannelIDList.read(path: dir.file("b.csv"))
            Issue.record("read a CSV without channel_id")
        } catch {
            #expect(error.exitCode == 66 && error.description == "\(dir.file("b.csv")), line 1: a CSV file needs a channel_id column in its header.", "\(error)")
        }
    }

    @Test func aCSVOutGetsItsHeaderOnceAndEachIDOnItsOwnLine() throws {
        let dir = TemporaryDirectory()
        let path = dir.file("channels.csv")
        try ChannelIDWriter(path: path).append(ChannelID(bytes: [0, 0, 0]))
        try ChannelIDWriter(path: path).append(ChannelID(bytes: [0, 1, 2]))
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "channel_id\nAAAA\nAAEC\n")
        let mask = umask(0o022)
        umask(mask)
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == Int(0o644 & ~mask))

        try "AAAA".write(toFile: dir.file("ids.txt"), atomically: true, encoding: .utf8)   // no final newline
        try ChannelIDWriter(path: dir.file("ids.txt")).append(ChannelID(bytes: [0, 1, 2]))
        #expect(try String(contentsOfFile: dir.file("ids.txt"), encoding: .utf8) == "AAAA\nAAEC\n")

        try "token,lang\n".write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        #expect(throws: ChannelError.self) { try ChannelIDWriter(path: dir.file("audience.csv")) }
        #expect(try String(contentsOfFile: dir.file("audience.csv"), encoding: .utf8) == "token,lang\n")
    }
}

/// The client against servers that misbehave: retries never faster than
/// their backoff, every wait bounded, a stop obeyed within its grace.
@Suite(.ownThreads) struct ChannelsClientTests {
    /// - Parameter clock: where its backoffs pass (the system's clock by default).
    static func client(port: Int, stop: CancellationPipe, clock: SendClock = SystemClock.shared,
                       _ adjust: (inout ChannelManagementClient.Configuration) -> Void = { _ in }) throws -> ChannelManagementClient {
        var configuration = ChannelManagementClient.Configuration(host: "127.0.0.1", port: port, bundleID: "com.example.campaign")
        adjust(&configuration)
        let context = try TLSContext.client(identity: nil, trust: .file(TestCertificates.path("ca.pem")), http2: true)
        return ChannelManagementClient(configuration: configuration, context: context, tokens: nil, stop: stop, clock: clock)
    }

    @Test(.timeLimit(.minutes(1))) func aServerErrorIsRetriedAfterAGrowingBackoffThenGivenUpWith69() throws {
        let server = try HostileHTTP2Server(.internalErrorAlways)
        defer { server.stop() }
        let clock = PauseRecordingClock()
        let client = try Self.client(port: server.port, stop: CancellationPipe(), clock: clock) { $0.maxAttempts = 3; $0.backoffSeconds = 0.2 }
        #expect { try client.perform(.list) } throws: { error in
            guard let e = error as? ChannelError, case .gaveUp(_, 3, let last) = e.kind else { return false }
            return e.exitCode == 69 && last == "500 InternalServerError"
        }
        #expect(server.requests == 3)
        #expect(clock.pauses == [0.2, 0.4], "a pause before each retry, doubling; none after the last attempt")
    }

    @Test(.timeLimit(.minutes(1))) func retryAfterZeroDoesNotMakeTheRetriesFaster() throws {
        let server = try HostileHTTP2Server(.throttledRetryAfterZero)
        defer { server.stop() }
        let clock = PauseRecordingClock()
        let client = try Self.client(port: server.port, stop: CancellationPipe(), clock: clock) { $0.maxAttempts = 3; $0.backoffSeconds = 0.3 }
        #expect(throws: ChannelError.self) { try client.perform(.create(.noneStored)) }
        #expect(server.requests == 3)
        #expect(clock.pauses == [0.3, 0.6], "retry-after: 0 is a floor, not an order")
    }

    /// The answer timeout (30 s by default) passes on the client's clock:
    /// here one that skips what a poll would wait for in vain.
    @Test(.timeLimit(.minutes(1))) func aSilentServerCostsEachAttemptItsAnswerTimeoutAndNoMore() throws {
        let server = try HostileHTTP2Server(.holdsStreams)
        defer { server.stop() }
        let clock = PauseRecordingClock(skippingSilentPolls: true)
        let client = try Self.client(port: server.port, stop: CancellationPipe(), clock: clock) { $0.maxAttempts = 2; $0.backoffSeconds = 0.1 }
        #expect { try client.perform(.list) } throws: { error in
            guard let e = error as? ChannelError, case .gaveUp(_, 2, let last) = e.kind else { return false }
            return last == "no answer within 30 s"
        }
        #expect(server.requests == 2)
        #expect(clock.pauses == [0.1])
        // Two answer timeouts and the pause between them, and only the connects' real time beyond.
        #expect(clock.elapsedSeconds >= 60.1 && clock.elapsedSeconds < 62, "\(clock.elapsedSeconds) s on the client's clock")
    }

    @Test(.timeLimit(.minutes(1))) func aServerThatNeverSpeaksTLSIsGivenUpOnAfterTheConnectLimit() throws {
        let server = try HostileHTTP2Server(.neverSpeaksTLS)
        defer { server.stop() }
        let client = try Self.client(port: server.port, stop: CancellationPipe()) { $0.maxAttempts = 2; $0.backoffSeconds = 0.1; $0.connectTimeoutSeconds = 0.5 }
        let start = Date()
        #expect { try client.perform(.list) } throws: { ($0 as? ChannelError)?.exitCode == 69 }
        #expect(Date().timeIntervalSince(start) < 5)
    }

    @Test(.timeLimit(.minutes(1))) func aStopWhileARequestIsUnansweredEndsWithinItsGrace() throws {
        let server = try HostileHTTP2Server(.holdsStreams)
        defer { server.stop() }
        let stop = try CancellationPipe()
        // Used by the task's thread alone; the test only rings `stop`.
        nonisolated(unsafe) let client = try Self.client(port: server.port, stop: stop) { $0.stopGraceSeconds = 1 }
        let run = BackgroundTask { () -> Int32? in
            do { _ = try client.perform(.create(.noneStored)); return nil } catch { return (error as? ChannelError)?.exitCode }
        }
        #expect(eventually(within: 60) { server.requests == 1 })
        let stopped = Date()
        stop.cancel()
        #expect(try run.value(timeout: 10) == 75)
        #expect(Date().timeIntervalSince(stopped) < 3, "the default answer timeout is 30 s; the grace is 1 s")
        #expect(server.requests == 1, "nothing is sent after a stop")
    }

    @Test func aStopBeforeTheFirstRequestSendsNothing() throws {
        let server = try HostileHTTP2Server(.internalErrorAlways)
        defer { server.stop() }
        let stop = try CancellationPipe()
        stop.cancel()
        let client = try Self.client(port: server.port, stop: stop)
        #expect(throws: ChannelError(.stopped)) { try client.perform(.list) }
        #expect(server.connections == 0)
    }
}
