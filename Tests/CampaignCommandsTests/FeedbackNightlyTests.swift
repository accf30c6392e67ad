import Foundation
import Testing
import APNSWire
import CampaignIO
import CampaignJSON
import CampaignSend
import CampaignTLS
import CampaignTestSupport
import FeedbackStore
import GatewaySimulator
import SendJournal
import GatewayClient

@Suite(.ownThreads) struct FeedbackNightlyTests {
    static let repo = PlanProcessTests.repo

    static func simulator(in dir: TemporaryDirectory, feedback: [FeedbackTuple]) throws -> GatewaySimulator {
        var configuration = SimulatorConfiguration(certificatesDirectory: TestCertificates.directory)
        configuration.recordPath = dir.file("record.ndjson")
        configuration.feedback = feedback
        let simulator = try GatewaySimulator(configuration: configuration)
        try simulator.start()
        return simulator
    }

    @Test func tuplesFromTheFeedbackPortEndUpInTheStoreNewestWinning() throws {
        let dir = TemporaryDirectory("feedback")
        let tuples = (0..<50).map { FeedbackTuple(timestamp: 1_700_000_000 + UInt32($0), token: Array(repeating: UInt8($0), count: 32)) }
        let simulator = try Self.simulator(in: dir, feedback: tuples)
        defer { simulator.stop() }
        var existing = FeedbackStore()
        existing.record(token: tuples[0].token, timestamp: 1_800_000_000)     // newer than the service's: kept
        existing.record(token: tuples[1].token, timestamp: 1_600_000_000)     // older: updated
        existing.record(token: [9, 9, 9], timestamp: 5)                        // unrelated: kept
        try existing.save(path: dir.file("store.ndjson"))
        let first = try FeedbackClient.run(host: "127.0.0.1", port: simulator.feedbackPort, context: TestCertificates.clientContext(),
                                           storePath: dir.file("store.ndjson"))
        #expect(first.tuplesRead == 50 && first.added == 48 && first.updated == 1 && first.storeCount == 51)
        let store = try FeedbackStore.load(path: dir.file("store.ndjson"))
        #expect(store.entries[tuples[0].token] == 1_800_000_000)
        #expect(store.entries[tuples[1].token] == 1_700_000_001)
        #expect(store.entries[[9, 9, 9]] == 5)
        let again = try FeedbackClient.run(host: "127.0.0.1", port: simulator.feedbackPort, context: TestCertificates.clientContext(),
                                           storePath: dir.file("store.ndjson"))
        #expect(again.tuplesRead == 0 && again.storeCount == 51)
        #expect(!FileManager.default.fileExists(atPath: FeedbackClient.incomingPath(store: dir.file("store.ndjson"))))
        #expect(try FileManager.default.attributesOfItem(atPath: dir.file("store.ndjson"))[.posixPermissions] as? Int == 0o600)
    }

    @Test func aReRegisteredDeviceIsPlannedAgainAndTheOthersAreSuppressed() throws {
        let dir = TemporaryDirectory("suppress")
        let tuples = try SimulatorConfiguration.readFeedback(path: Self.repo + "/samples/feedback.ndjson")
        let simulator = try Self.simulator(in: dir, feedback: tuples)
        defer { simulator.stop() }
        let feedback = try PlanProcessTests.run(
            ["feedback", "--store", "store.ndjson", "--feedback", "127.0.0.1:\(simulator.feedbackPort)"] + SendProcessTests.credentials(), in: dir)
        #expect(feedback.status == 0)
        #expect(feedback.err.contains("feedback: 6 tuples read, 6 new"))
        let listed = try PlanProcessTests.run(["feedback", "--store", "store.ndjson", "--list"], in: dir)
        #expect(String(decoding: listed.out, as: UTF8.self).split(separator: "\n").count == 6)
        let plan = try PlanProcessTests.run(["plan", Self.repo + "/jobs/spring.json", Self.repo + "/samples/audience.csv",
                                             "--out", "plan.ndjson", "--feedback-store", "store.ndjson", "--rejects", "rejects.ndjson"], in: dir)
        #expect(plan.status == 0)
        #expect(plan.err.contains("2991 planned, 11 rejected"))
        let rejects = try String(contentsOfFile: dir.file("rejects.ndjson"), encoding: .utf8).split(separator: "\n")
        let suppressed = rejects.filter { $0.contains("suppressed_by_feedback") }
        #expect(suppressed.count == 3)
        #expect(suppressed.allSatisfy { $0.contains("is not newer") })
    }

    @Test func aFeedbackRunKilledMidReadLeavesAReadableStoreAndLosesNothingItRead() throws {
        let dir = TemporaryDirectory("feedback-kill")
        var rng = SplitMix64(seed: 3)
        let tuples = (0..<100_000).map { _ in
            FeedbackTuple(timestamp: 1_700_000_000, token: (0..<4).flatMap { _ in withUnsafeBytes(of: rng.next()) { Array($0) } })
        }
        let simulator = try Self.simulator(in: dir, feedback: tuples)
        defer { simulator.stop() }
        var before = FeedbackStore()
        before.record(token: [1, 2, 3, 4], timestamp: 7)
        try before.save(path: dir.file("store.ndjson"))
        let run = try CampaignProcess(["feedback", "--store", dir.file("store.ndjson"), "--feedback", "127.0.0.1:\(simulator.feedbackPort)"]
                                      + SendProcessTests.credentials(), in: dir.path)
        // Chaos: kill once the service has handed its list over (and cleared it).
        let incoming = FeedbackClient.incomingPath(store: dir.file("store.ndjson"))
        #expect(simulator.waitForStatistics(timeout: 30) { $0.feedbackServed == tuples.count })
        run.kill9()
        let store = try FeedbackStore.load(path: dir.file("store.ndjson"))   // readable: old or new, never torn
        #expect(store.entries[[1, 2, 3, 4]] == 7)
        let leftover = (try? Data(contentsOf: URL(fileURLWithPath: incoming)).count) ?? 0
        // The next run merges whatever the killed one had read.
        let again = try FeedbackClient.run(host: "127.0.0.1", port: simulator.feedbackPort, context: TestCertificates.clientContext(),
                                           storePath: dir.file("store.ndjson"))
        let merged = try FeedbackStore.load(path: dir.file("store.ndjson"))
        #expect(merged.entries[[1, 2, 3, 4]] == 7)
        #expect(again.tuplesRead == 0)                       // the service cleared its list
        #expect(again.recovered == leftover / 38)            // every whole tuple the killed run had read
        #expect(merged.count == store.count + again.recovered)
        let known = Set(tuples.map(\.token))
        #expect(merged.entries.keys.allSatisfy { $0 == [1, 2, 3, 4] || known.contains($0) })
    }

    static func nightly(_ dir: TemporaryDirectory, simulator: GatewaySimulator, extra: [String: String] = [:]) throws -> (status: Int32, out: String, err: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [Self.repo + "/scripts/nightly.sh"]
        var environment = ProcessInfo.processInfo.environment
        environment["JOB"] = Self.repo + "/jobs/spring.json"
        environment["AUDIENCE"] = Self.repo + "/samples/audience.csv"
        environment["GATEWAY"] = "127.0.0.1:\(simulator.port)"
        environment["FEEDBACK"] = "127.0.0.1:\(simulator.feedbackPort)"
        environment["CERT"] = TestCertificates.path("client.pem")
        environment["KEY"] = TestCertificates.path("client.key")
        environment["CA"] = TestCertificates.path("ca.pem")
        environment["OUT"] = dir.file("out")
        environment["BIN"] = SimulatorProcessTests.binary.path
        environment.merge(extra) { $1 }
        process.environment = environment
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let o = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let e = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, o, e)
    }

    @Test func nightlyInPartsTwiceTheSameDayDeliversEachNotificationOnce() throws {
        let dir = TemporaryDirectory("nightlyparts")
        let tuples = try SimulatorConfiguration.readFeedback(path: Self.repo + "/samples/feedback.ndjson")
        let simulator = try Self.simulator(in: dir, feedback: tuples)
        defer { simulator.stop() }
        let first = try Self.nightly(dir, simulator: simulator, extra: ["PARTS": "4", "JOBS": "2"])
        #expect(first.status == 0, "\(first.err)")
        #expect(first.err.contains("parts: 4 complete, 0 running, 0 stopped, 0 not started"), "\(first.err)")
        let second = try Self.nightly(dir, simulator: simulator, extra: ["PARTS": "4"])
        #expect(second.status == 0, "\(second.err)")
        #expect(second.out.contains("today's parts exist: resuming those not complete"))
        simulator.stop()
        let recorded = try String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8).split(separator: "\n")
            .map { try JSONValue.parse(String($0))["token"]?.stringValue ?? "" }
        #expect(recorded.count == 2991)
        #expect(Set(recorded).count == recorded.count)
    }

    @Test func nightlyTwiceTheSameDayDeliversEachNotificationOnce() throws {
        let dir = TemporaryDirectory("nightly")
        let tuples = try SimulatorConfiguration.readFeedback(path: Self.repo + "/samples/feedback.ndjson")
        let simulator = try Self.simulator(in: dir, feedback: tuples)
        defer { simulator.stop() }
        let first = try Self.nightly(dir, simulator: simulator)
        #expect(first.status == 0, "\(first.err)")
        let second = try Self.nightly(dir, simulator: simulator)
        #expect(second.status == 0, "\(second.err)")
        #expect(second.out.contains("today's journal exists: resuming it"))
        simulator.stop()
        let recorded = try String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8).split(separator: "\n")
            .map { try JSONValue.parse(String($0))["token"]?.stringValue ?? "" }
        #expect(recorded.count == 2991)
        #expect(Set(recorded).count == recorded.count)
    }

    /// An HTTP/2 nightly with a provider token, as cron runs it: a bare
    /// environment (`env -i PATH=/usr/bin:/bin`), `make nightly` with an
    /// installed binary (BIN=): nothing built or installed, no feedback step,
    /// SEND_ARGS passed through; twice the same day, each notification once.
    @Test(.timeLimit(.minutes(3))) func anHTTP2NightlyWithAKeyRunsUnderCronsEnvironment() throws {
        let dir = TemporaryDirectory("nightly-h2")
        let simulator = try startHTTP2Simulator(in: dir, tokens: true)
        defer { simulator.stop() }
        func nightly() throws -> (status: Int32, out: String) {
            try runTool("env", ["-i", "PATH=/usr/bin:/bin", "HOME=\(dir.path)", "make", "-s", "-C", Self.repo, "nightly",
                                "JOB=\(Self.repo)/jobs/spring-h2.json", "AUDIENCE=\(Self.repo)/samples/audience.csv",
                                "GATEWAY=127.0.0.1:\(simulator.port)", "AUTH_KEY=\(TestCertificates.path(DevelopmentCertificates.authKey))",
                                "KEY_ID=\(DevelopmentCertificates.authKeyID)", "TEAM_ID=\(DevelopmentCertificates.authTeamID)",
                                "CA=\(TestCertificates.path("ca.pem"))", "OUT=\(dir.file("out"))", "BIN=\(SimulatorProcessTests.binary.path)",
                                "SEND_ARGS=--connections 2 --streams 50"])
        }
        let first = try nightly()
        #expect(first.status == 0, "\(first.out)")
        #expect(!first.out.contains("feedback") && !first.out.contains("Installing") && !first.out.contains("pip"), "\(first.out)")
        #expect(first.out.contains("(h2)"), "\(first.out)")
        let second = try nightly()
        #expect(second.status == 0, "\(second.out)")
        #expect(second.out.contains("today's journal exists: resuming it"))
        simulator.stop()
        let recorded = try H2SendTests.recorded(dir).map(\.token)
        #expect(recorded.count == 2994 && Set(recorded).count == recorded.count, "every valid row of the sample (no feedback step for h2): \(recorded.count)")
        let journal = try FileManager.default.contentsOfDirectory(atPath: dir.file("out/spring-sale-h2")).filter { $0.hasPrefix("20") }
        let state = try Journal.read(directory: dir.file("out/spring-sale-h2/\(journal.first ?? "")/journal"))
        #expect(state.settings.connections == 2 && state.settings.streams == 50, "SEND_ARGS reached send")
    }

    @Test func aSecondConcurrentNightlyRunIsRefused() throws {
        let dir = TemporaryDirectory("nightly-lock")
        let simulator = try Self.simulator(in: dir, feedback: [])
        defer { simulator.stop() }
        try FileManager.default.createDirectory(atPath: dir.file("out/spring-sale"), withIntermediateDirectories: true)
        let fd = open(dir.file("out/spring-sale/nightly.lock"), O_RDWR | O_CREAT, 0o600)
        defer { close(fd) }
        #expect(flock(fd, LOCK_EX | LOCK_NB) == 0)
        let refused = try Self.nightly(dir, simulator: simulator)
        #expect(refused.status == 75)
        #expect(refused.err.contains("another run of spring-sale is in progress"))
    }

    @Test func pruneDaysRemovesOldEntriesOnly() throws {
        let dir = TemporaryDirectory("prune")
        var store = FeedbackStore()
        let now = UInt32(Date().timeIntervalSince1970)
        store.record(token: [1], timestamp: now - 100 * 86_400)
        store.record(token: [2], timestamp: now - 10 * 86_400)
        try store.save(path: dir.file("store.ndjson"))
        let result = try PlanProcessTests.run(["feedback", "--store", "store.ndjson", "--prune-days", "30"], in: dir)
        #expect(result.status == 0)
        #expect(result.err.contains("pruned 1 entries older than 30 days; the store holds 1"))
        #expect(try FeedbackStore.load(path: dir.file("store.ndjson")).entries.keys.map { $0 } == [[2]])
    }
}
