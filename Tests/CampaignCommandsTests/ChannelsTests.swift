#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import APNSWire
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import CampaignTLS
import GatewaySimulator
import ArgumentParser
@testable import CampaignCommands
import ChannelManagement

/// `campaign channels` as a user runs it, against the simulator's channel
/// management API on 127.0.0.1: what it prints, what it leaves in --out,
/// what the simulator's store holds after, and each exit code.
@Suite(.ownThreads) struct ChannelsTests {
    static let bundle = "com.example.campaign"

    static func tokenFlags() -> [String] {
        ["--auth-key", TestCertificates.path(DevelopmentCertificates.authKey), "--key-id", DevelopmentCertificates.authKeyID,
         "--team-id", DevelopmentCertificates.authTeamID, "--ca", TestCertificates.path("ca.pem")]
    }

    /// A simulator with token authentication and a management listener.
    static func simulator(in dir: TemporaryDirectory, latencyMilliseconds: Int = 0,
                          _ configure: (inout SimulatorConfiguration) -> Void = { _ in }) throws -> GatewaySimulator {
        try startHTTP2Simulator(in: dir, tokens: true, latencyMilliseconds: latencyMilliseconds) {
            $0.managementPort = 0
            configure(&$0)
        }
    }

    static func flags(_ simulator: GatewaySimulator, bundle: String = bundle) -> [String] {
        ["--gateway", "127.0.0.1:\(simulator.managementPort)", "--bundle-id", bundle] + tokenFlags()
    }

    /// Runs `campaign ARGS` to its end (killed after `timeout`); its status (nil: it did not end), stdout and stderr.
    static func run(_ arguments: [String], in dir: TemporaryDirectory, timeout: Double = 60,
                    environment: [String: String] = [:]) throws -> (status: Int32?, out: String, err: String) {
        let pipe = Pipe()
        let process = try CampaignProcess(arguments, in: dir.path, outputPipe: pipe, environment: environment)
        try? pipe.fileHandleForWriting.close()
        let handle = pipe.fileHandleForReading
        let reader = BackgroundTask { handle.readDataToEndOfFile() }
        let status = process.wait(timeout: timeout)
        if status == nil { process.kill9() }
        let out = (try? reader.value(timeout: 10)) ?? Data()
        return (status, String(decoding: out, as: UTF8.self), process.stderr)
    }

    static func lines(_ text: String) -> [String] { text.split(separator: "\n").map(String.init) }

    static func live(_ simulator: GatewaySimulator, bundle: String = bundle) -> Set<String> {
        Set(simulator.channelStore.list(environment: "sandbox", bundleID: bundle).map(\.base64))
    }

    @Test(.timeLimit(.minutes(2))) func createListShowDeleteThenTheListIsEmpty() throws {
        let dir = TemporaryDirectory("channels")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let common = Self.flags(simulator)

        let created = try Self.run(["channels", "create", "--count", "3", "--storage", "most-recent", "--out", "night.csv"] + common, in: dir)
        #expect(created.status == 0, "\(created.err)")
        let ids = Self.lines(created.out)
        #expect(ids.count == 3)
        #expect(Set(ids) == Self.live(simulator))
        #expect(try String(contentsOfFile: dir.file("night.csv"), encoding: .utf8) == "channel_id,storage\n" + ids.map { $0 + ",most-recent\n" }.joined(),
                "a CSV names each channel's storage, so plan can refuse an expiration it would refuse")
        // Each answer's request id on standard error, one per created channel, each different.
        let requestIDs = created.err.matches(of: /apns-request-id ([0-9a-f-]{36})/).map { String($0.1) }
        #expect(requestIDs.count == 3 && Set(requestIDs).count == 3 && requestIDs.allSatisfy(RequestID.isCanonical), "\(created.err)")

        let listed = try Self.run(["channels", "list"] + common, in: dir)
        #expect(listed.status == 0, "\(listed.err)")
        #expect(Set(Self.lines(listed.out)) == Set(ids))
        #expect(listed.err.contains("3 channels (apns-request-id "))

        let shown = try Self.run(["channels", "show", ids[1]] + common, in: dir)
        #expect(shown.status == 0, "\(shown.err)")
        #expect(shown.out == "\(ids[1]) most-recent LiveActivity\n")
        let json = try Self.run(["channels", "show", ids[1], "--json"] + common, in: dir)
        let object = try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [String: Any]
        #expect(object?["message-storage-policy"] as? Int == 1)
        #expect(object?["push-type"] as? String == "LiveActivity")
        #expect((object?["apns-request-id"] as? String).map(RequestID.isCanonical) == true)

        let deleted = try Self.run(["channels", "delete", "--from", "night.csv"] + common, in: dir)
        #expect(deleted.status == 0, "\(deleted.err)")
        #expect(Self.lines(deleted.out) == ids)
        #expect(deleted.err.contains("3 deleted, 0 already gone, 0 left of 3"))
        #expect(Self.live(simulator).isEmpty)

        let empty = try Self.run(["channels", "list"] + common, in: dir)
        #expect(empty.status == 0 && empty.out.isEmpty, "\(empty.err)")

        // Again, as after an interruption: nothing left to do, and no error.
        let again = try Self.run(["channels", "delete", "--from", "night.csv"] + common, in: dir)
        #expect(again.status == 0, "\(again.err)")
        #expect(again.out.isEmpty)
        #expect(again.err.contains("0 deleted, 3 already gone, 0 left of 3"))
        #expect(again.err.contains("was already gone (ChannelNotRegistered)"))
    }

    /// Apple's page: do not assume a channel id's size. Ids of 16, 101 and
    /// 300 bytes (a device token's longest is 100) go through every place an
    /// id is read: create's answer and --out, list, show, a plan and its
    /// send, delete --from.
    @Test(.timeLimit(.minutes(2)), arguments: [16, 101, 300])
    func channelIDsOfAnySizeAreKeptListedShownSentAndDeleted(bytes: Int) throws {
        let dir = TemporaryDirectory("channels-\(bytes)")
        let simulator = try Self.simulator(in: dir) { $0.channelIDBytes = bytes }
        defer { simulator.stop() }
        let common = Self.flags(simulator)

        let created = try Self.run(["channels", "create", "--count", "5", "--out", "night.csv"] + common, in: dir)
        #expect(created.status == 0, "\(created.err)")
        let ids = Self.lines(created.out)
        #expect(ids.count == 5 && Set(ids) == Self.live(simulator), "\(created.err)")
        #expect(ids.allSatisfy { ChannelID(base64: $0)?.bytes.count == bytes })
        let file = try String(contentsOfFile: dir.file("night.csv"), encoding: .utf8)
        #expect(Set(Self.lines(file).dropFirst().map { String($0.split(separator: ",")[0]) }) == Set(ids), "--out keeps all five")

        let listed = try Self.run(["channels", "list"] + common, in: dir)
        #expect(listed.status == 0, "\(listed.err)")
        #expect(Set(Self.lines(listed.out)) == Set(ids))
        let shown = try Self.run(["channels", "show", ids[2]] + common, in: dir)
        #expect(shown.status == 0 && shown.out.hasPrefix(ids[2] + " "), "\(shown.err)")

        try """
        {"campaign": "long-ids", "format": "h2", "broadcast": true, "pushType": "liveactivity", "topic": "\(Self.bundle)",
         "messages": {"en": {"event": "update", "timestamp": "{now:int}", "content-state": {"score": 1}}}}
        """.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let plan = try PlanProcessTests.run(["plan", "job.json", "night.csv", "--out", "plan.ndjson"], in: dir)
        #expect(plan.status == 0, "\(plan.err)")
        let send = try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)"] + Self.tokenFlags(),
                                       in: dir.path)
        #expect(send.wait(timeout: 60) == 0, "\(send.stderr)")
        let sent = try BroadcastSendTests.broadcasts(dir).map(\.channel)
        #expect(sent.sorted() == ids.sorted(), "each channel's update sent once, to the id as issued")

        let deleted = try Self.run(["channels", "delete", "--from", "night.csv"] + common, in: dir)
        #expect(deleted.status == 0, "\(deleted.err)")
        #expect(deleted.err.contains("5 deleted, 0 already gone, 0 left of 5"), "\(deleted.err)")
        #expect(Self.live(simulator).isEmpty)
    }

    @Test func anIDPastTheGenerousBoundIsRefusedInOneSentenceNamingItsSize() throws {
        let text = String(decoding: Base64.encode([UInt8](repeating: 7, count: ChannelID.maxBytes + 1)), as: UTF8.self)
        #expect(ChannelID(base64: text) == nil)
        #expect(ChannelID.problem(with: text)?.description == "\(ChannelID.maxBytes + 1) bytes, more than the \(ChannelID.maxBytes) (4,096 characters) campaign takes")
        #expect(ChannelID.problem(with: "abc") == .notBase64)
        let longest = String(decoding: Base64.encode([UInt8](repeating: 7, count: ChannelID.maxBytes)), as: UTF8.self)
        #expect(ChannelID(base64: longest)?.bytes.count == ChannelID.maxBytes && ChannelID.problem(with: longest) == nil)
        #expect(throws: ChannelError.self) { try channelIDs([text]) }
    }

    @Test(.timeLimit(.minutes(2))) func theCreateOverTheLimitExits69NamingCannotCreateChannelConfigWithTheOthersInOut() throws {
        let dir = TemporaryDirectory("channels-limit")
        let simulator = try Self.simulator(in: dir) { $0.channelLimit = 5 }
        defer { simulator.stop() }
        let result = try Self.run(["channels", "create", "--count", "6", "--out", "ids.txt"] + Self.flags(simulator), in: dir)
        #expect(result.status == 69)
        #expect(result.err.contains("APNs refused to create a channel with 400 CannotCreateChannelConfig (apns-request-id "), "\(result.err)")
        #expect(result.err.contains("delete channels whose events are over"))
        #expect(result.err.contains("5 of 6 channels created, in ids.txt"))
        let written = Self.lines(try String(contentsOfFile: dir.file("ids.txt"), encoding: .utf8))
        #expect(written.count == 5)
        #expect(Set(written) == Self.live(simulator))
        #expect(Self.lines(result.out) == written)
    }

    /// The same limit through the simulator's own command line, as a user sets it.
    @Test(.timeLimit(.minutes(2))) func theSimulatorsChannelLimitFlagMakesTheSixthCreateExit69() throws {
        let dir = TemporaryDirectory("channels-limit-flag")
        let simulator = try CampaignProcess(["simulator", "--protocol", "h2", "--certs", TestCertificates.directory, "--port", "0",
                                             "--management-port", "0", "--channel-limit", "5", "--ready-file", dir.file("ready.json"),
                                             "--max-seconds", "100"], in: dir.path)
        defer { kill(simulator.process.processIdentifier, SIGTERM); _ = simulator.wait(timeout: 10) }
        #expect(eventually(within: 30) { ((try? Data(contentsOf: URL(fileURLWithPath: dir.file("ready.json"))))?.count ?? 0) > 0 })
        let ready = try JSONValue.parse(Array(try Data(contentsOf: URL(fileURLWithPath: dir.file("ready.json")))))
        let management = try #require(ready["management_port"]?.integerValue)
        let result = try Self.run(["channels", "create", "--count", "6", "--out", "ids.csv", "--bundle-id", Self.bundle,
                                   "--gateway", "127.0.0.1:\(management)"] + SendProcessTests.credentials(), in: dir)
        #expect(result.status == 69, "\(result.err)")
        #expect(result.err.contains("CannotCreateChannelConfig"), "\(result.err)")
        #expect(Self.lines(try String(contentsOfFile: dir.file("ids.csv"), encoding: .utf8)).count == 1 + 5, "the five made are on record")
    }

    @Test(.timeLimit(.minutes(2))) func aCreateWhoseAnswerIsLostIsFoundByAListNotMadeTwice() throws {
        let dir = TemporaryDirectory("channels-lost")
        // Every third request on a connection is done, its answer never written, the connection dropped.
        let simulator = try Self.simulator(in: dir) { $0.managementFaults.dropEvery = 3 }
        defer { simulator.stop() }
        let result = try Self.run(["channels", "create", "--count", "7", "--out", "ids.csv"] + Self.flags(simulator), in: dir)
        #expect(result.status == 0, "\(result.err)")
        let written = Self.lines(try String(contentsOfFile: dir.file("ids.csv"), encoding: .utf8)).dropFirst().map { String($0.prefix { $0 != "," }) }
        #expect(written.count == 7)
        #expect(Set(written) == Self.live(simulator), "no channel made that the file does not name")
        #expect(Self.lines(result.out) == Array(written))
        #expect(result.err.contains("after a create went unanswered"), "\(result.err)")
    }

    @Test(.timeLimit(.minutes(2))) func aGatewayThatSaysGoAwayEveryTwoRequestsStillGetsEachChannelMadeOnce() throws {
        let dir = TemporaryDirectory("channels-goaway")
        let simulator = try Self.simulator(in: dir) { $0.managementFaults.goAwayAfter = 2 }
        defer { simulator.stop() }
        let result = try Self.run(["channels", "create", "--count", "5", "--out", "ids.txt"] + Self.flags(simulator), in: dir)
        #expect(result.status == 0, "\(result.err)")
        let written = Self.lines(try String(contentsOfFile: dir.file("ids.txt"), encoding: .utf8))
        #expect(written.count == 5 && Set(written) == Self.live(simulator), "\(result.err)")
    }

    @Test(.timeLimit(.minutes(3)), arguments: [SIGTERM, SIGINT])
    func aSignalMidCreateEndsWithin10sWith75AndEveryCreatedChannelIsInOut(signal: Int32) throws {
        let dir = TemporaryDirectory("channels-signal")
        // 20 ms each way: a request is in flight most of the time, as from far away.
        let simulator = try Self.simulator(in: dir, latencyMilliseconds: 20)
        defer { simulator.stop() }
        let process = try CampaignProcess(["channels", "create", "--count", "10000", "--out", "ids.csv"] + Self.flags(simulator), in: dir.path)
        #expect(eventually(within: 30) {
            ((try? String(contentsOfFile: dir.file("ids.csv"), encoding: .utf8)).map(Self.lines)?.count ?? 0) > 20
        })
        kill(process.process.processIdentifier, signal)
        let status = process.wait(timeout: 10)
        if status == nil { process.kill9() }
        #expect(status == 75, "\(process.stderr)")
        #expect(process.stderr.contains("Stopped by a signal"))
        #expect(process.stderr.contains("; to make the other ") && process.stderr.contains("run it again with --count "), "the same command again would make 10,000 more")
        let written = Self.lines(try String(contentsOfFile: dir.file("ids.csv"), encoding: .utf8))
        #expect(written.first == "channel_id,storage")
        #expect(Set(written.dropFirst().map { String($0.prefix { $0 != "," }) }) == Self.live(simulator), "nothing created is lost track of")
        #expect(written.count - 1 < 10_000)
    }

    @Test(.timeLimit(.minutes(2))) func eachRefusalTheSimulatorMakesHasItsExitCodeAndSentence() throws {
        let dir = TemporaryDirectory("channels-refusals")
        let simulator = try Self.simulator(in: dir) { $0.broadcastDisabled = ["com.example.off"] }
        defer { simulator.stop() }
        let port = "127.0.0.1:\(simulator.managementPort)"

        let suffix = try Self.run(["channels", "create"] + Self.flags(simulator, bundle: Self.bundle + ".push-type.liveactivity"), in: dir)
        #expect(suffix.status == 65)
        #expect(suffix.err.contains("400 TopicDisallowed"), "\(suffix.err)")
        #expect(suffix.err.contains("refused to create a channel"), "the create's own words, though the list before it was refused: \(suffix.err)")
        #expect(suffix.err.contains("without a suffix such as .push-type.liveactivity"))

        let off = try Self.run(["channels", "create"] + Self.flags(simulator, bundle: "com.example.off"), in: dir)
        #expect(off.status == 69)
        #expect(off.err.contains("400 FeatureNotEnabled") && off.err.contains("developer.apple.com"), "\(off.err)")

        let unknownKey = ["--auth-key", TestCertificates.path(DevelopmentCertificates.authKey), "--key-id", "NOSUCHKEY1",
                          "--team-id", DevelopmentCertificates.authTeamID, "--ca", TestCertificates.path("ca.pem")]
        let token = try Self.run(["channels", "list", "--gateway", port, "--bundle-id", Self.bundle] + unknownKey, in: dir)
        #expect(token.status == 77)
        #expect(token.err.contains("403 InvalidProviderToken"), "\(token.err)")

        let missing = try Self.run(["channels", "show", "AAAAAAAAAAAAAAAAAAAAAA=="] + Self.flags(simulator), in: dir)
        #expect(missing.status == 66)
        #expect(missing.err.contains("400 ChannelNotRegistered") && missing.err.contains("no such channel in this environment"), "\(missing.err)")

        // Checked before anything is sent: nothing listens on port 1, which would be 69.
        let badID = try Self.run(["channels", "delete", "AAAA", "not-base64", "--gateway", "127.0.0.1:1", "--bundle-id", Self.bundle] + Self.tokenFlags(), in: dir)
        #expect(badID.status == 65)
        #expect(badID.err == "campaign channels delete: The channel id \"not-base64\" (argument 2) is not base64 as APNs issues channel ids: give it exactly as create or list printed it.\n")

        #expect(simulator.currentStatistics().channelsCreated == 0)
    }

    @Test(.timeLimit(.minutes(2))) func aTokenAtAGatewayThatWantsACertificateIs77() throws {
        let dir = TemporaryDirectory("channels-cert")
        let simulator = try startHTTP2Simulator(in: dir) { $0.managementPort = 0 }
        defer { simulator.stop() }
        let result = try Self.run(["channels", "list"] + Self.flags(simulator), in: dir)
        #expect(result.status == 77, "\(result.err)")
        #expect(Self.lines(result.err).count == 1, "one sentence: \(result.err)")
        // The certificate it wants works.
        let cert = try Self.run(["channels", "list", "--gateway", "127.0.0.1:\(simulator.managementPort)", "--bundle-id", Self.bundle,
                                 "--cert", TestCertificates.path("client.pem"), "--key", TestCertificates.path("client.key"),
                                 "--ca", TestCertificates.path("ca.pem")], in: dir)
        #expect(cert.status == 0, "\(cert.err)")
    }

    @Test(.timeLimit(.minutes(2))) func serverErrorsAreRetriedThenExit69() throws {
        let dir = TemporaryDirectory("channels-errors")
        let simulator = try Self.simulator(in: dir) { $0.managementFaults.errorRate = 1 }
        defer { simulator.stop() }
        let start = Date()
        let result = try Self.run(["channels", "create", "--out", "ids.txt"] + Self.flags(simulator), in: dir)
        #expect(result.status == 69)
        #expect(result.err.contains("Could not list the channels after 5 attempts (last: 50"), "\(result.err)")
        #expect(Self.lines(result.err).filter { $0.contains("trying again in") }.count == 4)
        // 0.5 + 1 + 2 + 4 s of backoff at least; each retry waits its turn.
        #expect(Date().timeIntervalSince(start) >= 7.5)
        #expect(Self.live(simulator).isEmpty)
        #expect((try? String(contentsOfFile: dir.file("ids.txt"), encoding: .utf8)) == "")
    }

    @Test(.timeLimit(.minutes(2))) func anUnreachableOrSilentGatewayEndsWith69WithinABound() throws {
        let dir = TemporaryDirectory("channels-silent")
        let silent = try HostileHTTP2Server(.holdsStreams)
        defer { silent.stop() }
        var start = Date()
        let hung = try Self.run(["channels", "list", "--gateway", "127.0.0.1:\(silent.port)", "--bundle-id", Self.bundle, "--answer-timeout", "1"]
                                + Self.tokenFlags(), in: dir)
        #expect(hung.status == 69)
        #expect(hung.err.contains("no answer within 1 s"), "\(hung.err)")
        #expect(Date().timeIntervalSince(start) < 30)

        let closed = try Listener(host: "127.0.0.1", port: 0)
        let port = closed.port
        closed.close()
        start = Date()
        let unreachable = try Self.run(["channels", "list", "--gateway", "127.0.0.1:\(port)", "--bundle-id", Self.bundle] + Self.tokenFlags(), in: dir)
        #expect(unreachable.status == 69)
        #expect(unreachable.err.contains("127.0.0.1:\(port)"), "\(unreachable.err)")
        #expect(Date().timeIntervalSince(start) < 30)
    }

    @Test(.timeLimit(.minutes(2))) func createAndListGoThroughTheProxyWithoutItsPasswordInSight() throws {
        let dir = TemporaryDirectory("channels-proxy")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let proxy = try TinyProxy(in: dir, user: ("campaign", ProxyTests.password))   // started, on a free port
        defer { proxy.stop() }
        let environment = ProxyTests.cleanEnvironment.merging(["CAMPAIGN_PROXY_USER": "campaign:\(ProxyTests.password)"]) { $1 }
        let via = ["--proxy", proxy.url(), "--proxy-user-env", "CAMPAIGN_PROXY_USER"]
        let created = try Self.run(["channels", "create", "--count", "2"] + Self.flags(simulator) + via, in: dir, environment: environment)
        #expect(created.status == 0, "\(created.err)")
        let listed = try Self.run(["channels", "list"] + Self.flags(simulator) + via, in: dir, environment: environment)
        #expect(Set(Self.lines(listed.out)) == Set(Self.lines(created.out)))
        #expect(Set(Self.lines(listed.out)) == Self.live(simulator))
        #expect(proxy.connectsLogged == 2)
        #expect(!(created.err + listed.err).contains(ProxyTests.password))
    }

    @Test(.timeLimit(.minutes(2))) func throttledRequestsWaitTheirRetryAfterAndEveryChannelIsMadeOnce() throws {
        let dir = TemporaryDirectory("channels-throttled")
        let simulator = try Self.simulator(in: dir) { $0.managementFaults.throttleRate = 0.3 }
        defer { simulator.stop() }
        let result = try Self.run(["channels", "create", "--count", "4", "--out", "ids.txt"] + Self.flags(simulator), in: dir)
        #expect(result.status == 0, "\(result.err)")
        #expect(Set(Self.lines(result.out)) == Self.live(simulator))
        #expect(Self.live(simulator).count == 4)
        // retry-after: 1 is a floor over the first backoff of 0.5 s.
        #expect(result.err.contains("(429 TooManyRequests); trying again in 1 s"), "\(result.err)")
        #expect(!result.err.contains("trying again in 0.5 s"))
    }
}

/// The command line's own checks: usage errors (64) before anything is read or sent.
@Suite struct ChannelsArgumentTests {
    static let base = ["--bundle-id", "com.example.app", "--environment", "sandbox", "--cert", "client.pem"]

    @Test(arguments: [
        (["channels", "create", "--storage", "all"] + base, "--storage must be none or most-recent, not \"all\"."),
        (["channels", "create", "--count", "0"] + base, "--count must be between 1 and 10000."),
        (["channels", "list", "--bundle-id", "com.example.app", "--cert", "c.pem"], "Give exactly one of --gateway HOST:PORT or --environment sandbox|production."),
        (["channels", "list", "--bundle-id", "com.example.app", "--cert", "c.pem", "--environment", "development"], "--environment must be sandbox or production."),
        (["channels", "list", "--bundle-id", "com.example.app", "--cert", "c.pem", "--gateway", "localhost"], "--gateway must be HOST:PORT, not \"localhost\"."),
        (["channels", "list", "--bundle-id", "com.example.app", "--environment", "sandbox"], "--auth-key (with --key-id and --team-id) or --cert is required."),
        (["channels", "list", "--auth-key", "k.p8", "--key-id", "ABCDEFGHIJ", "--team-id", "ABCDEFGHIJ"] + base, "Give --auth-key or --cert, not both."),
        (["channels", "list", "--auth-key", "k.p8"] + base, "--auth-key, --key-id and --team-id go together."),
        (["channels", "list", "--bundle-id", "com.example app", "--environment", "sandbox", "--cert", "c.pem"], "--bundle-id must be an app's bundle id (com.example.app), not \"com.example app\"."),
        (["channels", "delete"] + base, "Name the channels as arguments or with --from FILE (one of the two)."),
        (["channels", "delete", "AAAA", "--from", "ids.txt"] + base, "Name the channels as arguments or with --from FILE (one of the two)."),
    ])
    func badFlagsAreUsageErrors(arguments: [String], message: String) {
        do {
            _ = try Campaign.parseAsRoot(arguments)
            Issue.record("expected a validation error")
        } catch {
            #expect(Campaign.exitCode(for: error) == ExitCode(64))
            #expect(Campaign.message(for: error) == message)
        }
    }

    @Test func channelErrorsHaveTheirOwnExitCodesInTheOneMapping() {
        #expect(exitCode(for: ChannelError(.stopped), command: "t") == ExitCode(75))
        #expect(exitCode(for: ChannelError(.refused(operation: .list, status: 403, reason: .invalidProviderToken)), command: "t") == ExitCode(77))
        #expect(exitCode(for: ChannelError(.refused(operation: .create(.noneStored), status: 400, reason: .featureNotEnabled)), command: "t") == ExitCode(69))
        #expect(exitCode(for: ChannelError(.badInput("x")), command: "t") == ExitCode(65))
    }
}
