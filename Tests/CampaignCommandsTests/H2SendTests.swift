import Foundation
import Testing
import APNSWire
import CampaignIO
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import CampaignTLS
import FeedbackStore
import GatewaySimulator
import SendJournal
import ByteStreams

/// `send` over HTTP/2 against the simulator's `--protocol h2`: every row of
/// the outcome table, asserted from the simulator's record.
@Suite(.ownThreads) struct H2SendTests {
    static func simulator(in dir: TemporaryDirectory, faults: FaultPlan = FaultPlan(), tokens: Bool = false) throws -> GatewaySimulator {
        try startHTTP2Simulator(in: dir, faults: faults, tokens: tokens)
    }

    /// An h2 plan of `count` random devices; returns the tokens.
    static func plan(count: Int, in dir: TemporaryDirectory, seed: UInt64 = 5, topic: String = "com.example.campaign") throws -> [String] {
        // The test credentials under certs/, for commands given relative paths.
        try? FileManager.default.createSymbolicLink(atPath: dir.file("certs"), withDestinationPath: TestCertificates.directory)
        let (csv, tokens) = randomAudienceCSV(count: count, seed: seed)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try #"{"campaign":"h2","format":"h2","topic":"\#(topic)","messages":{"en":{"alert":"Notification {n}"}}}"#
            .write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let run = try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--out", "plan.ndjson", "--shards", "16"], in: dir)
        #expect(run.status == 0, "\(run.err)")
        let order = csv.split(separator: "\n").dropFirst().map { String($0.prefix(64)) }
        #expect(Set(order) == tokens)
        return order
    }

    static func send(_ dir: TemporaryDirectory, _ simulator: GatewaySimulator, _ extra: [String] = [], journal: String = "journal",
                     credentials: [String] = SendProcessTests.credentials()) throws -> CampaignProcess {
        try CampaignProcess(["send", "plan.ndjson", "--journal", journal, "--gateway", "127.0.0.1:\(simulator.port)"] + credentials + extra, in: dir.path)
    }

    /// The simulator's record: token and apns-id of every accepted request, in order.
    static func recorded(_ dir: TemporaryDirectory) throws -> [(token: String, id: String)] {
        guard let text = try? String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8) else { return [] }
        return try text.split(separator: "\n").map {
            let v = try JSONValue.parse(String($0))
            return (try #require(v["token"]?.stringValue), try #require(v["apns_id"]?.stringValue))
        }
    }

    @Test(.timeLimit(.minutes(2))) func everyNotificationIsAcceptedOnceWithItsHeaders() throws {
        let dir = TemporaryDirectory("h2send")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let tokens = try Self.plan(count: 5_000, in: dir)
        let run = try Self.send(dir, simulator, ["--connections", "3", "--streams", "50"])
        #expect(run.wait(timeout: 90) == 0, "\(run.stderr)")
        simulator.stop()
        let recorded = try Self.recorded(dir)
        #expect(recorded.count == 5_000)
        #expect(Set(recorded.map(\.token)) == Set(tokens))
        #expect(Set(recorded.map(\.id)).count == 5_000, "each notification has its own apns-id")
        let first = try JSONValue.parse(String(try String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8).prefix { $0 != "\n" }))
        #expect(first["topic"]?.stringValue == "com.example.campaign" && first["push_type"]?.stringValue == "alert")
        #expect(first["priority"]?.stringValue == "10")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.outcome == .complete && state.accepted == 5_000 && state.doneCount == 5_000)
    }

    @Test(.timeLimit(.minutes(2))) func refusedTokensAreFinalAndUnregisteredOnesGoToTheStoreWithTheirTime() throws {
        let dir = TemporaryDirectory("h2fail")
        let tokens = try Self.plan(count: 600, in: dir)
        var faults = FaultPlan()
        let bad = Array(tokens[10..<15]), gone = Array(tokens[100..<108])
        faults.badTokens = Set(bad.map { DeviceToken(hex: $0)!.bytes })
        for (i, t) in gone.enumerated() { faults.unregistered[DeviceToken(hex: t)!.bytes] = 1_700_000_000 + UInt32(i) }
        let simulator = try Self.simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator, ["--feedback-store", "store.ndjson"])
        #expect(run.wait(timeout: 90) == 0, "\(run.stderr)")
        simulator.stop()
        let recorded = try Self.recorded(dir).map(\.token)
        #expect(Set(recorded) == Set(tokens).subtracting(bad).subtracting(gone))
        #expect(recorded.count == Set(recorded).count)
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.failures.count == 13)
        #expect(Set(state.failures.filter { $0.status == 400 }.map(\.cause)) == [.http(status: 400, reason: .badDeviceToken)])
        #expect(state.failures.filter { $0.status == 410 }.count == 8)
        let store = try FeedbackStore.load(path: dir.file("store.ndjson"))
        #expect(store.count == 8, "400 BadDeviceToken is not suppressed: the token may be the other environment's")
        for (i, t) in gone.enumerated() { #expect(store.entries[DeviceToken(hex: t)!.bytes] == 1_700_000_000 + UInt32(i)) }
        let failures = try PlanProcessTests.run(["status", "journal", "--failures"], in: dir)
        #expect(String(decoding: failures.out, as: UTF8.self).contains(#""status":410,"reason":"HTTP 410 Unregistered""#))
    }

    @Test(.timeLimit(.minutes(2))) func serverErrorsAndThrottlingAreRetriedUntilAcceptedNeverMadeFinal() throws {
        let dir = TemporaryDirectory("h2retry")
        let tokens = try Self.plan(count: 1_500, in: dir)
        var faults = FaultPlan()
        faults.errorRate = 0.08
        faults.throttleRate = 0.04
        faults.seed = 3
        let simulator = try Self.simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator)
        #expect(run.wait(timeout: 90) == 0, "\(run.stderr)")
        simulator.stop()
        let answers = simulator.currentStatistics().answers
        #expect((answers["500 InternalServerError"] ?? 0) + (answers["503 ServiceUnavailable"] ?? 0) > 50)
        #expect((answers["429 TooManyRequests"] ?? 0) > 20)
        let recorded = try Self.recorded(dir).map(\.token)
        #expect(recorded.count == Set(recorded).count, "a refused request was not processed: no duplicates")
        let state = try Journal.read(directory: dir.file("journal"))
        // The server's trouble says nothing about a notification: each is retried until accepted.
        #expect(Set(recorded) == Set(tokens))
        #expect(state.failures.isEmpty, "\(state.failures.count) made final by a server error")
        #expect(state.accepted == 1_500 && state.outcome == .complete)
    }

    /// A GOAWAY every 250 streams on loopback with the server's stream limit
    /// at 20, and every 100 from 50 ms away with a thousand allowed (hundreds of
    /// requests are then on their way as the GOAWAY is, and the server must
    /// read them before it closes, or the reset destroys its last answers at
    /// the client: a new user's trial found 248 devices reached twice of 1,000).
    @Test(.timeLimit(.minutes(2)), arguments: [(20, 0, 250, 2), (1000, 25, 100, 1)])
    func goAwayAndRefusedStreamsAreResentWithoutDuplicates(maxStreams: Int, latencyMilliseconds: Int, goAwayAfter: Int, connections: Int) throws {
        let dir = TemporaryDirectory("h2goaway")
        let tokens = try Self.plan(count: 3_000, in: dir)
        var faults = FaultPlan()
        faults.goAwayAfter = goAwayAfter
        faults.maxStreams = maxStreams
        let simulator = try startHTTP2Simulator(in: dir, faults: faults, latencyMilliseconds: latencyMilliseconds)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator, ["--connections", String(connections)])
        #expect(run.wait(timeout: 90) == 0, "\(run.stderr)")
        simulator.stop()
        // A GOAWAY every `goAwayAfter` streams answered (from afar, the streams it covers are many more).
        let connections = simulator.currentStatistics().connections
        let wentAway = connections.filter { $0.ending?.hasPrefix("goaway") == true }.count
        #expect(connections.count >= (latencyMilliseconds == 0 ? 12 : 4) && wentAway >= connections.count - 2, "\(connections.map(\.ending))")
        let recorded = try Self.recorded(dir).map(\.token)
        #expect(Set(recorded) == Set(tokens))
        #expect(recorded.count == 3_000, "streams the server did not process went again exactly: \(recorded.count - 3_000) duplicates")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.duplicatesRisked == 0 && state.outcome == .complete)
    }

    @Test(.timeLimit(.minutes(2))) func droppedConnectionsLoseNothingAndDuplicatesStayWithinWhatIsReported() throws {
        let dir = TemporaryDirectory("h2drop")
        let tokens = try Self.plan(count: 3_000, in: dir)
        var faults = FaultPlan()
        faults.dropEvery = 400
        let simulator = try Self.simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        // A notification open on three lost connections is left for the
        // resume (this server processes requests and then drops the
        // connection before answering): each run delivers more, none is lost.
        var status = try Self.send(dir, simulator, ["--connections", "2"]).wait(timeout: 90)
        var runs = 1
        while status == 69 && runs < 6 {
            status = try CampaignProcess(["send", "--resume", "journal"], in: dir.path).wait(timeout: 90)
            runs += 1
        }
        #expect(status == 0, "still \(status) after \(runs) runs")
        simulator.stop()
        let recorded = try Self.recorded(dir).map(\.token)
        #expect(Set(recorded) == Set(tokens), "\(Set(tokens).subtracting(recorded).count) never delivered")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(recorded.count - Set(recorded).count <= state.duplicatesRisked)
        #expect(state.duplicatesRisked > 0, "requests answered but never written back were at risk")
    }

    @Test(.timeLimit(.minutes(2))) func aTopicTheCertificateMayNotUseStopsTheSendWithExit77() throws {
        let dir = TemporaryDirectory("h2topic")
        _ = try Self.plan(count: 200, in: dir, topic: "com.other.app")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator)
        #expect(run.wait(timeout: 60) == 77)
        #expect(run.stderr.contains("APNs refused to send to topic com.other.app (400 TopicDisallowed)"), "\(run.stderr)")
        #expect(try Self.recorded(dir).isEmpty)
    }

    @Test(.timeLimit(.minutes(2))) func tokenAuthenticationSharesOneTokenKeptForTheResume() throws {
        let dir = TemporaryDirectory("h2token")
        let tokens = try Self.plan(count: 2_000, in: dir)
        let simulator = try Self.simulator(in: dir, tokens: true)
        defer { simulator.stop() }
        let auth = ["--auth-key", TestCertificates.path(DevelopmentCertificates.authKey), "--key-id", DevelopmentCertificates.authKeyID,
                    "--team-id", DevelopmentCertificates.authTeamID, "--ca", TestCertificates.path("ca.pem")]
        let run = try Self.send(dir, simulator, ["--connections", "3"], credentials: auth)
        #expect(run.wait(timeout: 90) == 0, "\(run.stderr)")
        let cache = dir.file("journal/provider-token.json")
        #expect(try FileManager.default.attributesOfItem(atPath: cache)[.posixPermissions] as? Int == 0o600)
        let first = try JSONValue.parse(Data(contentsOf: URL(fileURLWithPath: cache)))["token"]?.stringValue
        // A second send of the same plan soon after, in another journal that reuses the kept token.
        try FileManager.default.createDirectory(atPath: dir.file("second"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: cache, toPath: dir.file("second/provider-token.json"))
        let again = try Self.send(dir, simulator, [], journal: "second", credentials: auth)
        #expect(again.wait(timeout: 90) == 0, "\(again.stderr)")
        let second = try JSONValue.parse(Data(contentsOf: URL(fileURLWithPath: dir.file("second/provider-token.json"))))["token"]?.stringValue
        #expect(first != nil && first == second, "the token kept in the journal was reused")
        simulator.stop()
        let recorded = try Self.recorded(dir).map(\.token)
        #expect(recorded.count == 4_000 && Set(recorded) == Set(tokens))
        #expect(simulator.currentStatistics().answers.keys.allSatisfy { $0 == "200" }, "\(simulator.currentStatistics().answers)")
    }

    @Test(.timeLimit(.minutes(3))) func killedMidSendAndResumedNothingIsLost() throws {
        let dir = TemporaryDirectory("h2kill")
        let tokens = try Self.plan(count: 12_000, in: dir)
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let start = ["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)", "--rate", "4000"]
            + SendProcessTests.credentials()
        // Each kill once a random number of notifications more are recorded (the last run keeps at least 2/5 of the send).
        let (kills, finished) = try killRepeatedlyThenFinish(kills: 3, of: tokens.count, seed: 15, recorded: { simulator.currentStatistics().accepted }, next: {
            let resume = FileManager.default.fileExists(atPath: dir.file("journal/journal.log"))
            return try CampaignProcess(resume ? ["send", "--resume", "journal"] + SendProcessTests.credentials() : start, in: dir.path)
        }, kill: { $0.kill9() })
        #expect(kills >= 3 && finished)
        simulator.stop()
        let recorded = try Self.recorded(dir).map(\.token)
        #expect(Set(recorded) == Set(tokens), "\(Set(tokens).subtracting(recorded).count) lost")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(recorded.count - Set(recorded).count <= state.duplicatesRisked)
        #expect(state.outcome == .complete && state.doneCount == 12_000)
        // A notification sent twice carries the same apns-id both times.
        var idOf: [String: String] = [:]
        for r in try Self.recorded(dir) { if let id = idOf[r.token] { #expect(id == r.id) } else { idOf[r.token] = r.id } }
    }
}

extension H2SendTests {
    /// A run killed after lost connections keeps their possible duplicates
    /// (journaled as counted): a resume's report covers the copies the killed
    /// run itself made.
    @Test(.timeLimit(.minutes(3))) func aKilledRunsLostConnectionsStayCountedAsPossibleDuplicates() throws {
        let dir = TemporaryDirectory("h2kill-drops")
        let tokens = try Self.plan(count: 3_000, in: dir)
        var faults = FaultPlan()
        faults.dropEvery = 300
        let simulator = try Self.simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let start = ["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)", "--rate", "600"]
            + SendProcessTests.credentials()
        // Late in the send: the copies its early drops made are answered by then.
        let finished = try killOnceThenResume(after: 2_000, recorded: { simulator.currentStatistics().accepted },
                                              start: { try CampaignProcess(start, in: dir.path) },
                                              resume: { try CampaignProcess(["send", "--resume", "journal"] + SendProcessTests.credentials(), in: dir.path) })
        #expect(finished)
        simulator.stop()
        let recorded = try Self.recorded(dir).map(\.token)
        #expect(Set(recorded) == Set(tokens), "\(Set(tokens).subtracting(recorded).count) lost")
        let state = try Journal.read(directory: dir.file("journal"))
        let duplicates = recorded.count - Set(recorded).count
        #expect(duplicates <= state.duplicatesRisked, "\(duplicates) duplicates but \(state.duplicatesRisked) reported")
        #expect(state.outcome == .complete && state.doneCount == 3_000)
    }

    @Test(.timeLimit(.minutes(2))) func aGatewayThatStopsAnsweringIsPingedDroppedAndGivenUpOnWithExit69() throws {
        let dir = TemporaryDirectory("h2stall")
        _ = try Self.plan(count: 2_000, in: dir)
        var faults = FaultPlan()
        faults.stallAfter = 100
        let simulator = try Self.simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let started = Date()
        let run = try Self.send(dir, simulator, ["--connections", "1", "--ping-after", "0.6"])
        #expect(run.wait(timeout: 60) == 69, "\(run.stderr)")
        #expect(Date().timeIntervalSince(started) < 30)
        #expect(run.stderr.contains("no answer to a PING"), "\(run.stderr)")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.outcome == .gaveUp && state.accepted == 300, "three connections, 100 answered on each: \(state.accepted)")
    }
}

extension H2SendTests {
    /// A hand-made h2 plan whose payloads have no `aps`: APNs refuses each as malformed.
    static func malformedPlan(count: Int, in dir: TemporaryDirectory) throws {
        var text = #"{"header":{"version":1,"campaign":"bad","format":"h2","expiry":0,"priority":10,"maxPayload":4096,"shards":4,"created":1,"topic":"com.example.campaign","pushType":"alert","collapseId":null}}"# + "\n"
        var records = ""
        for i in 1...count {
            let token = (0..<32).map { String(format: "%02x", ($0 * 7 + i) % 256) }.joined()
            records += #"{"seq":\#(i),"shard":\#(i % 4),"token":"\#(token)","lang":"en","payload":{"notaps":\#(i)}}"# + "\n"
        }
        var crc = CRC32()
        crc.update(Array(records.utf8))
        text += records + #"{"trailer":{"records":\#(count),"crc32":"\#(crc.hex)","rows":\#(count),"rejected":0}}"# + "\n"
        try text.write(toFile: dir.file("plan.ndjson"), atomically: true, encoding: .utf8)
    }

    @Test(.timeLimit(.minutes(2))) func aHundredMalformedRefusalsInARowStopTheSendWithExit65() throws {
        let dir = TemporaryDirectory("h2malformed")
        try Self.malformedPlan(count: 400, in: dir)
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator, ["--connections", "1", "--streams", "10"])
        let status = run.wait(timeout: 60)
        let stderr = run.stderr
        #expect(status == 65, "\(stderr)")
        #expect(stderr.contains("APNs refused 100 requests in a row as malformed (the last: status 400 BadPayload)"), "\(stderr)")
        #expect(stderr.contains("with status 400 BadPayload: a bug in the plan or in campaign"))
        let state = try Journal.read(directory: dir.file("journal"))
        // A server that refuses everything may not be APNs: none of it is final.
        #expect(state.failures.isEmpty && state.doneCount == 0, "\(state.failures.count) made final")
        #expect(stderr.contains("refusals left pending"), "\(stderr)")
    }

    static func tokenAuth(kid: String = DevelopmentCertificates.authKeyID) -> [String] {
        ["--auth-key", TestCertificates.path(DevelopmentCertificates.authKey), "--key-id", kid,
         "--team-id", DevelopmentCertificates.authTeamID, "--ca", TestCertificates.path("ca.pem")]
    }

    @Test(.timeLimit(.minutes(2))) func aTokenAPNsDoesNotKnowStopsTheSendWithExit77() throws {
        let dir = TemporaryDirectory("h2badkid")
        _ = try Self.plan(count: 100, in: dir)
        let simulator = try Self.simulator(in: dir, tokens: true)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator, [], credentials: Self.tokenAuth(kid: "OTHERKEY00"))
        #expect(run.wait(timeout: 60) == 77, "\(run.stderr)")
        #expect(run.stderr.contains("APNs refused the provider token (403 InvalidProviderToken): check that --auth-key is the .p8 key whose id is --key-id"), "\(run.stderr)")
        #expect(try Self.recorded(dir).isEmpty)
        #expect(try Journal.read(directory: dir.file("journal")).failures.isEmpty, "nothing is final: a resume with the right key sends it all")
    }

    @Test(.timeLimit(.minutes(2))) func anExpiredTokenTooYoungToRenewStopsTheSendAndNamesTheClock() throws {
        let dir = TemporaryDirectory("h2expired")
        _ = try Self.plan(count: 100, in: dir)
        var configuration = SimulatorConfiguration(certificatesDirectory: TestCertificates.directory)
        configuration.http2 = true
        configuration.authKeysDirectory = TestCertificates.path(DevelopmentCertificates.authKeysDirectory)
        configuration.tokenLifetimeSeconds = -1   // every token is too old: a server whose clock is ahead
        let simulator = try GatewaySimulator(configuration: configuration)
        try simulator.start()
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator, [], credentials: Self.tokenAuth())
        let status = run.wait(timeout: 60)
        let stderr = run.stderr
        #expect(status == 77, "\(stderr)")
        #expect(stderr.contains("403 ExpiredProviderToken), but it was made 0 min"), "\(stderr)")
        #expect(stderr.contains("check this machine's clock"))
        #expect((simulator.currentStatistics().answers["403 ExpiredProviderToken"] ?? 0) <= 4, "one per connection at most, no storm of retries: \(simulator.currentStatistics().answers)")
    }

    @Test(.timeLimit(.minutes(2))) func aCollapseIdTemplateReachesAPNsPerNotification() throws {
        let dir = TemporaryDirectory("h2collapse")
        let (csv, _) = randomAudienceCSV(count: 300, seed: 9)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try #"{"campaign":"h2","format":"h2","topic":"com.example.campaign","collapseId":"offer-{n}","messages":{"en":{"alert":"N {n}"}}}"#
            .write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        #expect(try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--out", "plan.ndjson"], in: dir).status == 0)
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator)
        #expect(run.wait(timeout: 60) == 0, "\(run.stderr)")
        simulator.stop()
        let lines = try String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 300)
        for line in lines {
            let v = try JSONValue.parse(String(line))
            let payload = try JSONValue.parse(try #require(v["payload"]?.stringValue))
            let n = try #require(payload["aps"]?["alert"]?.stringValue?.dropFirst(2))
            #expect(v["collapse_id"]?.stringValue == "offer-\(n)")
        }
    }

    @Test(.timeLimit(.minutes(2))) func tooManyTokenUpdatesRetiresTheConnectionAndTheNextOneDelivers() throws {
        let dir = TemporaryDirectory("h2tmptu")
        let tokens = try Self.plan(count: 800, in: dir)
        var faults = FaultPlan()
        faults.tokenUpdateRefusals = 3
        let simulator = try Self.simulator(in: dir, faults: faults, tokens: true)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator, ["--connections", "2"], credentials: Self.tokenAuth())
        #expect(run.wait(timeout: 60) == 0, "\(run.stderr)")
        simulator.stop()
        let stats = simulator.currentStatistics()
        #expect(stats.answers["429 TooManyProviderTokenUpdates"] == 3)
        #expect(stats.connections.count >= 4, "each refused connection was retired for a new one")
        let recorded = try Self.recorded(dir).map(\.token)
        #expect(recorded.count == 800 && Set(recorded) == Set(tokens))
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.failures.isEmpty && state.duplicatesRisked == 0)
    }

    @Test(.timeLimit(.minutes(5))) func aPayloadOverTheLimitIsRefusedWith413AndIsFinal() throws {
        let dir = TemporaryDirectory("h2big")
        let big = #"{"aps":{"alert":""# + String(repeating: "x", count: 4200) + #""}}"#
        let token = String(repeating: "ab", count: 32)
        let header = #"{"header":{"version":1,"campaign":"big","format":"h2","expiry":0,"priority":10,"maxPayload":5120,"shards":1,"created":1,"topic":"com.example.campaign","pushType":"alert","collapseId":null}}"#
        let records = #"{"seq":1,"shard":0,"token":"\#(token)","lang":"en","payload":\#(big)}"# + "\n"
            + #"{"seq":2,"shard":0,"token":"\#(String(repeating: "cd", count: 32))","lang":"en","payload":{"aps":{"alert":"ok"}}}"# + "\n"
        var crc = CRC32()
        crc.update(Array(records.utf8))
        try (header + "\n" + records + #"{"trailer":{"records":2,"crc32":"\#(crc.hex)","rows":2,"rejected":0}}"# + "\n")
            .write(toFile: dir.file("plan.ndjson"), atomically: true, encoding: .utf8)
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator)
        #expect(run.wait(timeout: 60) == 0, "\(run.stderr)")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.failures.map(\.cause) == [.http(status: 413, reason: .payloadTooLarge)])
        #expect(state.accepted == 1)
    }
}

extension H2SendTests {
    /// A plan larger than the queues, a first SIGTERM mid-send: exit 75 within
    /// seconds, then the resume delivers everything, each once.
    @Test(.timeLimit(.minutes(2))) func aSignalMidSendExits75SoonAndTheResumeDeliversEachOnce() throws {
        let dir = TemporaryDirectory("h2signal")
        let tokens = try Self.plan(count: 20_000, in: dir)
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator, ["--rate", "3000"])
        // Once the journal has proven some (a few thousand of the 20,000 recorded by then).
        let proven = waitForEvent(of: run) { ((try? Journal.read(directory: dir.file("journal")))?.doneCount ?? 0) > 0 }
        #expect(proven == .came, "the send ended, or hung, before its journal proved any: \(run.stderr.suffix(1500))")
        let signalled = Date()
        kill(run.process.processIdentifier, SIGTERM)
        let status = run.wait(timeout: 30)
        #expect(status == 75, "\(run.stderr)")
        #expect(Date().timeIntervalSince(signalled) < 10)
        let resumed = try CampaignProcess(["send", "--resume", "journal"] + SendProcessTests.credentials(), in: dir.path)
        #expect(resumed.wait(timeout: 90) == 0, "\(resumed.stderr)")
        simulator.stop()
        let recorded = try Self.recorded(dir).map(\.token)
        #expect(Set(recorded) == Set(tokens))
        #expect(recorded.count == 20_000, "a graceful stop waits for the answers in flight: no duplicates")
    }
}

extension H2SendTests {
    /// A kill -9 loses no suppression: every 410 is journaled with its time,
    /// and the resume (from another directory: every path in the journal is
    /// absolute) merges all the journal holds into the store.
    @Test(.timeLimit(.minutes(2))) func aKilledSendLosesNoSuppressionAndResumesFromAnywhere() throws {
        let dir = TemporaryDirectory("h2kill410")
        let tokens = try Self.plan(count: 3_000, in: dir)
        var faults = FaultPlan()
        let gone = stride(from: 0, to: 3_000, by: 10).map { tokens[$0] }
        for (i, t) in gone.enumerated() { faults.unregistered[DeviceToken(hex: t)!.bytes] = 1_700_000_000 + UInt32(i) }
        let simulator = try Self.simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        // Relative paths, as a user types them.
        try FileManager.default.createDirectory(atPath: dir.file("out"), withIntermediateDirectories: true)
        let run = try Self.send(dir, simulator, ["--feedback-store", "out/store.ndjson", "--rate", "300", "--connections", "2"],
                                credentials: ["--cert", "certs/client.pem", "--key", "certs/client.key", "--ca", "certs/ca.pem"])
        // Killed once 40 suppressions are journaled: some 400 of the 3,000 sent, 9 s of sending left at its rate.
        let journaled = waitForEvent(of: run) { ((try? Journal.read(directory: dir.file("journal")))?.failures.count ?? 0) >= 40 }
        #expect(journaled == .came, "the send ended, or hung, before 40 suppressions were journaled: \(run.stderr.suffix(1500))")
        run.kill9()
        let killed = try Journal.read(directory: dir.file("journal"))
        #expect(killed.outcome == nil && killed.doneCount < 3_000, "killed mid-send")
        let other = TemporaryDirectory("elsewhere")
        let resume = try CampaignProcess(["send", "--resume", dir.file("journal")], in: other.path)
        #expect(resume.wait(timeout: 60) == 0, "\(resume.stderr)")
        simulator.stop()
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.outcome == .complete && state.failures.count == gone.count)
        let store = try FeedbackStore.load(path: dir.file("out/store.ndjson"))
        #expect(store.count == gone.count, "\(gone.count - store.count) suppressions lost")
        for (i, t) in gone.enumerated() { #expect(store.entries[DeviceToken(hex: t)!.bytes] == 1_700_000_000 + UInt32(i)) }
        #expect(!FileManager.default.fileExists(atPath: other.file("out")), "nothing written relative to the resume's directory")
    }
}

extension H2SendTests {
    /// A 403 answers that nothing was processed: no possible duplicates, in
    /// this run or in the resume that follows with the right key; `status`
    /// knows the plan's size from its trailer although the send stopped early.
    @Test(.timeLimit(.minutes(2))) func aRefusedKeyRisksNoDuplicateAndTheResumeWithTheRightOneDeliversEachOnce() throws {
        let dir = TemporaryDirectory("h2403")
        let tokens = try Self.plan(count: 400, in: dir)
        let simulator = try Self.simulator(in: dir, tokens: true)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator, [], credentials: Self.tokenAuth(kid: "OTHERKEY00"))
        #expect(run.wait(timeout: 60) == 77, "\(run.stderr)")
        let status = try PlanProcessTests.run(["status", "journal", "--json"], in: dir)
        let json = try JSONValue.parse(Array(status.out))
        #expect(json["duplicates_risked"]?.integerValue == 0, "\(String(decoding: status.out, as: UTF8.self))")
        #expect(json["plan_records"]?.integerValue == 400 && json["remaining"]?.integerValue == 400)
        let resume = try CampaignProcess(["send", "--resume", "journal"] + Self.tokenAuth(), in: dir.path)
        #expect(resume.wait(timeout: 60) == 0, "\(resume.stderr)")
        simulator.stop()
        let recorded = try Self.recorded(dir).map(\.token)
        #expect(recorded.count == 400 && Set(recorded) == Set(tokens))
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.duplicatesRisked == 0 && state.outcome == .complete, "\(state.duplicatesRisked) possible duplicates")
    }

    /// Credentials that cannot work are refused before anything is sent or journaled.
    @Test(.timeLimit(.minutes(2))) func aKeyThatIsNotP256AndIdsThatAreNotApplesAreRefusedBeforeAnyJournal() throws {
        let dir = TemporaryDirectory("h2badkey")
        _ = try Self.plan(count: 10, in: dir)
        try SecureFile.write(try PrivateKey.generateRSA(bits: 2048).pem(), to: dir.file("AuthKey_RSA.p8"))
        let rsa = try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:9", "--auth-key", "AuthKey_RSA.p8",
                                       "--key-id", DevelopmentCertificates.authKeyID, "--team-id", DevelopmentCertificates.authTeamID], in: dir.path)
        #expect(rsa.wait(timeout: 30) == 77, "\(rsa.stderr)")
        #expect(rsa.stderr.contains("is not a P-256 (ES256) key, as an APNs .p8 key is"), "\(rsa.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("journal")))
        for (kid, team) in [("devkey0001", DevelopmentCertificates.authTeamID), (DevelopmentCertificates.authKeyID, "devteam001"), ("SHORT", "TEAM")] {
            let run = try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:9", "--auth-key",
                                           TestCertificates.path(DevelopmentCertificates.authKey), "--key-id", kid, "--team-id", team], in: dir.path)
            #expect(run.wait(timeout: 30) == 64, "\(kid) \(team): \(run.stderr)")
            #expect(run.stderr.contains("must be 10 upper-case letters or digits"), "\(run.stderr)")
            #expect(!FileManager.default.fileExists(atPath: dir.file("journal")))
        }
    }
}
