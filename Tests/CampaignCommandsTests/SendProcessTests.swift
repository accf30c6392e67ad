import Foundation
import Testing
import APNSWire
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import CampaignPlan
import PlanStream
import CampaignSend
import CampaignTestSupport
import CampaignTLS
import GatewaySimulator
import SendJournal
import ByteStreams

/// Runs the `campaign` binary; `wait` returns its exit status, or nil if it is still running after `timeout`.
final class CampaignProcess {
    let process = Process()
    private let exited = DispatchSemaphore(value: 0)
    let errors = Pipe()
    /// Everything the process wrote to standard error so far, gathered as it comes.
    private let gathered = Gathered()

    /// Standard error, read to its end by a thread of its own: no
    /// `readabilityHandler` (a dispatch source on the pipe), since with many
    /// processes started and ended at once, libdispatch's event loop crashed
    /// on a source whose descriptor had been closed and reused.
    final class Gathered: @unchecked Sendable {
        private let condition = NSCondition()
        private var data = Data()
        private var ended = false

        func start(reading handle: FileHandle) {
            let thread = Thread { [self] in
                let fd = handle.fileDescriptor
                var buffer = [UInt8](repeating: 0, count: 1 << 16)
                while true {
                    let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                    if n < 0 && errno == EINTR { continue }
                    condition.lock()
                    if n > 0 { data.append(contentsOf: buffer[0..<n]) } else { ended = true; condition.broadcast() }
                    condition.unlock()
                    if n <= 0 { break }
                }
                try? handle.close()
            }
            thread.start()
        }

        /// Waits up to `timeout` seconds for the end of the pipe (every writer gone).
        func waitForEnd(timeout: Double) {
            let deadline = Date().addingTimeInterval(timeout)
            condition.lock()
            while !ended, condition.wait(until: deadline) {}
            condition.unlock()
        }

        var text: String { condition.lock(); defer { condition.unlock() }; return String(decoding: data, as: UTF8.self) }
    }

    /// `environment`: variables set (or, with "", removed) on top of this process's.
    init(_ arguments: [String], in dir: String, executable: URL = SimulatorProcessTests.binary, input: String? = nil,
         inputPipe: Pipe? = nil, outputPipe: Pipe? = nil, environment: [String: String] = [:]) throws {
        process.executableURL = executable
        process.arguments = arguments
        if !environment.isEmpty {
            var merged = ProcessInfo.processInfo.environment
            for (k, v) in environment { merged[k] = v.isEmpty ? nil : v }
            process.environment = merged
        }
        process.currentDirectoryURL = URL(fileURLWithPath: dir)
        process.standardError = errors
        if let input { process.standardInput = FileHandle(forReadingAtPath: input) }
        if let inputPipe { process.standardInput = inputPipe }
        process.standardOutput = outputPipe ?? FileHandle.nullDevice
        process.terminationHandler = { [exited] _ in exited.signal() }
        try process.run()
        // (Process closed this side's write end once the child had it.)
        gathered.start(reading: errors.fileHandleForReading)
    }

    func wait(timeout: Double) -> Int32? {
        guard exited.wait(timeout: .now() + timeout) == .success else { return nil }
        exited.signal()
        // What is still in the pipe once the process is gone (a child it
        // left behind holding standard error open is not waited for long).
        gathered.waitForEnd(timeout: 5)
        return process.terminationStatus
    }

    func kill9() {
        kill(process.processIdentifier, SIGKILL)
        _ = wait(timeout: 30)
    }

    /// Standard error as gathered so far (all of it once ``wait(timeout:)`` has returned a status).
    var stderr: String { gathered.text }
}

/// What a wait for an event of a running process came to.
enum RunEvent: Equatable {
    /// The event came while the process was running.
    case came
    /// The process ended first, with this status.
    case ended(Int32)
    /// Neither, within the backstop: a hang (the process is left running).
    case neither
}

/// Waits until `event()` holds while `run` runs, looking every 10 ms: tests
/// act on events (so many notifications recorded, a line on standard error),
/// not at wall-clock moments, which a loaded machine moves. `backstop` only
/// bounds a hang; it judges no speed.
func waitForEvent(of run: CampaignProcess, backstop: Double = 120, _ event: () -> Bool) -> RunEvent {
    let deadline = Date().addingTimeInterval(backstop)
    while true {
        if event() { return .came }
        if let status = run.wait(timeout: 0.01) { return .ended(status) }
        if Date() >= deadline { return event() ? .came : .neither }
    }
}

/// How many more notifications a run may be interrupted after: a number
/// drawn from `rng` between 0 and `left` over the interruptions to come
/// plus 2. So interruptions spread over the send, and the run that
/// finishes it keeps at least 2/(interruptions + 2) of it: each
/// interruption lands with thousands of notifications still to send,
/// however late the test's look comes by a loaded machine's measure.
func notificationsBeforeInterrupting(left: Int, interruptionsToCome: Int, rng: inout SplitMix64) -> Int {
    Int(rng.next() % UInt64(max(0, left) / (interruptionsToCome + 2) + 1))
}

/// Starts a run (`next` chooses the command: a first run, or a resume),
/// kills it (`kill` does it) `wanted` times, then lets one run finish.
/// Each kill comes once a random number of further notifications (drawn
/// from `seed`; see ``notificationsBeforeInterrupting(left:interruptionsToCome:rng:)``)
/// are recorded by the gateway: `recorded` is its count so far (duplicates
/// included), `total` the plan's notifications. A number of 0 kills the
/// run right after its process started. Returns the kills made (runs the
/// kill ended) and whether the last run exited 0.
func killRepeatedlyThenFinish(kills wanted: Int, of total: Int, seed: UInt64, recorded: () -> Int,
                              next: () throws -> CampaignProcess, kill: (CampaignProcess) -> Void) throws -> (kills: Int, finished: Bool) {
    var rng = SplitMix64(seed: seed)
    var kills = 0
    var moments: [String] = []   // "more/left" of each kill, for the log
    for attempt in 0..<(wanted * 5) {
        let before = recorded()
        let run = try next()
        if kills < wanted {
            let more = notificationsBeforeInterrupting(left: total - before, interruptionsToCome: wanted - kills, rng: &rng)
            switch more == 0 ? RunEvent.came : waitForEvent(of: run, { recorded() >= before + more }) {
            case .came:
                kill(run)
                // Ended by the kill (a shell whose pipeline was killed exits 137 itself).
                if run.process.terminationReason == .uncaughtSignal || run.process.terminationStatus == 128 + SIGKILL {
                    kills += 1
                    moments.append("\(more)/\(total - before)")
                    if kills == wanted { print("kills after notifications more/left: \(moments.joined(separator: ", "))") }
                    continue
                }
                Issue.record("""
                    attempt \(attempt): the run ended by itself (status \(run.process.terminationStatus)) before its kill, which came \
                    once \(more) more notifications were recorded: the test looked later than a send of the rest lasts
                    """)
            case .ended(let status):
                if status == 0 {
                    Issue.record("attempt \(attempt): the run exited 0 with \(recorded() - before) more notifications recorded, fewer than the \(more) its kill waited for: \(run.stderr.suffix(1500))")
                }
            case .neither:
                Issue.record("attempt \(attempt): in 120 s neither \(more) more notifications were recorded (\(recorded() - before) were) nor did the run end: \(run.stderr.suffix(1500))")
                kill(run)
                return (kills, false)
            }
        }
        let status = run.wait(timeout: 180)
        #expect(status == 0, "attempt \(attempt): \(run.stderr)")
        return (kills, status == 0)
    }
    return (kills, false)
}

/// Starts a send, kills it with kill -9 once `recorded()` reaches `count`,
/// then resumes it until a run exits 0 (three at most). Whether the kill
/// ended a run mid-send and a resume then finished.
func killOnceThenResume(after count: Int, recorded: () -> Int, start: () throws -> CampaignProcess,
                        resume: () throws -> CampaignProcess) throws -> Bool {
    let first = try start()
    guard waitForEvent(of: first, { recorded() >= count }) == .came else {
        Issue.record("the run ended, or hung, before \(count) notifications were recorded: \(first.stderr.suffix(1500))")
        first.kill9()
        return false
    }
    first.kill9()
    guard first.process.terminationReason == .uncaughtSignal else {
        Issue.record("the run ended by itself before its kill: \(first.stderr.suffix(1500))")
        return false
    }
    for _ in 0..<3 {
        let run = try resume()
        if run.wait(timeout: 180) == 0 { return true }
    }
    Issue.record("three resumes did not finish the send")
    return false
}

/// After a send that was killed and resumed: every token recorded by the
/// gateway, duplicates within what the journal admits, the journal complete.
/// Returns the recorded count, the duplicates and the journal's bound.
@discardableResult
func expectEverythingDeliveredAfterKills(_ dir: TemporaryDirectory, tokens: Set<String>) throws -> (recorded: Int, duplicates: Int, bound: Int) {
    let recorded = try SendProcessTests.recorded(dir)
    #expect(Set(recorded) == tokens, "\(tokens.subtracting(recorded).count) notifications lost")
    let state = try Journal.read(directory: dir.file("journal"))
    let duplicates = recorded.count - Set(recorded).count
    #expect(duplicates <= state.duplicatesRisked, "\(duplicates) duplicates but \(state.duplicatesRisked) reported")
    #expect(state.outcome == .complete)
    #expect(state.doneCount == tokens.count)
    return (recorded.count, duplicates, state.duplicatesRisked)
}

/// A CSV audience (token,lang,n) of `count` random 32-byte tokens; `lang`
/// gives each row's language. Returns the text and the tokens.
func randomAudienceCSV(count: Int, seed: UInt64, lang: (Int) -> String = { _ in "en" }) -> (csv: String, tokens: Set<String>) {
    var rng = SplitMix64(seed: seed)
    var csv = "token,lang,n\n"
    var tokens = Set<String>()
    for i in 0..<count {
        let hex = (0..<4).map { _ in String(format: "%016llx", rng.next()) }.joined()
        tokens.insert(hex)
        csv += "\(hex),\(lang(i)),\(i)\n"
    }
    return (csv, tokens)
}

@Suite(.ownThreads) struct SendProcessTests {
    static func plan(count: Int, into path: String, seed: UInt64, format: String = "enhanced") throws -> Set<String> {
        let (csv, tokens) = randomAudienceCSV(count: count, seed: seed)
        try csv.write(toFile: path + ".csv", atomically: true, encoding: .utf8)
        let job = try CampaignJob(json: JSONValue.parse(#"{"campaign":"kill","format":"\#(format)","messages":{"en":{"alert":"Notification {n}"}}}"#), path: "job")
        var options = PlanOptions(now: 1_700_000_000)
        options.shards = 32
        _ = try Planner(job: job, options: options).run(reader: AudienceFile.open(path + ".csv"), plan: PlanWriter(path: path), rejects: nil)
        return tokens
    }

    static func simulator(in dir: TemporaryDirectory, faults: FaultPlan = FaultPlan()) throws -> GatewaySimulator {
        var configuration = SimulatorConfiguration(certificatesDirectory: TestCertificates.directory)
        configuration.recordPath = dir.file("record.ndjson")
        configuration.faults = faults
        let simulator = try GatewaySimulator(configuration: configuration)
        try simulator.start()
        return simulator
    }

    static func credentials() -> [String] {
        ["--cert", TestCertificates.path("client.pem"), "--key", TestCertificates.path("client.key"), "--ca", TestCertificates.path("ca.pem")]
    }

    static func recorded(_ dir: TemporaryDirectory) throws -> [String] {
        try String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8).split(separator: "\n").map {
            try #require(try JSONValue.parse(String($0))["token"]?.stringValue)
        }
    }

    @Test func killedTenTimesAtRandomAndResumedNothingIsLost() throws {
        let dir = TemporaryDirectory("kill9")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let tokens = try Self.plan(count: 20_000, into: dir.file("plan.ndjson"), seed: 11)
        let start = ["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway", "127.0.0.1:\(simulator.port)",
                     "--connections", "4", "--rate", "3000"] + Self.credentials()
        // Each kill once a random number of notifications more are recorded (the last run keeps at least 1/6 of the send).
        let (kills, finished) = try killRepeatedlyThenFinish(kills: 10, of: tokens.count, seed: 2026, recorded: { simulator.currentStatistics().accepted }, next: {
            let hasJournal = FileManager.default.fileExists(atPath: dir.file("journal/journal.log"))
            return try CampaignProcess(hasJournal ? ["send", "--resume", dir.file("journal")] + Self.credentials() : start, in: dir.path)
        }, kill: { $0.kill9() })
        #expect(kills >= 10)
        #expect(finished)
        simulator.stop()
        try expectEverythingDeliveredAfterKills(dir, tokens: tokens)
    }

    /// The possible duplicates a run counts as its connections are lost are
    /// journaled as it counts them: a kill -9 does not take them with it
    /// (the killed run's windows resent after drops were missing from the
    /// count: 2,166 duplicates against 1,605 reported).
    @Test(.timeLimit(.minutes(3))) func aKilledRunsLostConnectionsStayCountedAsPossibleDuplicates() throws {
        let dir = TemporaryDirectory("kill9drops")
        var faults = FaultPlan()
        faults.dropEvery = 300
        let simulator = try Self.simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let tokens = try Self.plan(count: 3_000, into: dir.file("plan.ndjson"), seed: 48)
        let start = ["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway", "127.0.0.1:\(simulator.port)",
                     "--rate", "600"] + Self.credentials()
        // Late in the send: the copies its early drops made are proven by then.
        let finished = try killOnceThenResume(after: 2_000, recorded: { simulator.currentStatistics().accepted },
                                              start: { try CampaignProcess(start, in: dir.path) },
                                              resume: { try CampaignProcess(["send", "--resume", dir.file("journal")] + Self.credentials(), in: dir.path) })
        #expect(finished)
        simulator.stop()
        let (_, duplicates, _) = try expectEverythingDeliveredAfterKills(dir, tokens: tokens)
        #expect(duplicates > 0, "the drops made copies: the bound was put to the test")
    }

    /// A binary run that gave up counted what it left unproven as it ended:
    /// its resume counts nothing again. Here the gateway refused everything
    /// with status 1 (never delivered), and the resume reported 2,000 possible
    /// duplicates for a send that delivered each notification once.
    @Test(.timeLimit(.minutes(2))) func aResumeAfterAGatewayInTroubleCountsNoPhantomDuplicates() throws {
        let dir = TemporaryDirectory("gaveup-resume")
        var faults = FaultPlan()
        faults.errorRate = 1
        let sick = try Self.simulator(in: dir, faults: faults)
        let tokens = try Self.plan(count: 2_000, into: dir.file("plan.ndjson"), seed: 49)
        let first = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway", "127.0.0.1:\(sick.port)",
                                         "--outage-limit", "2"] + Self.credentials(), in: dir.path)
        #expect(first.wait(timeout: 60) == 69, "\(first.stderr)")
        sick.stop()
        let healthy = try Self.simulator(in: dir)
        defer { healthy.stop() }
        let resumed = try CampaignProcess(["send", "--resume", dir.file("journal"), "--gateway", "127.0.0.1:\(healthy.port)"] + Self.credentials(),
                                          in: dir.path)
        #expect(resumed.wait(timeout: 60) == 0, "\(resumed.stderr)")
        healthy.stop()
        let recorded = try Self.recorded(dir)
        #expect(Set(recorded) == tokens && recorded.count == tokens.count, "each once")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.outcome == .complete && state.duplicatesRisked == 0, "\(state.duplicatesRisked) possible duplicates reported")
    }

    @Test func aResumeAgainstAnotherPlanIsRefused() throws {
        let dir = TemporaryDirectory("otherplan")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        _ = try Self.plan(count: 300, into: dir.file("plan.ndjson"), seed: 1)
        let first = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"),
                                         "--gateway", "127.0.0.1:\(simulator.port)"] + Self.credentials(), in: dir.path)
        #expect(first.wait(timeout: 60) == 0)
        _ = try Self.plan(count: 300, into: dir.file("plan.ndjson"), seed: 2)   // same path, other plan
        let resumed = try CampaignProcess(["send", "--resume", dir.file("journal")] + Self.credentials(), in: dir.path)
        #expect(resumed.wait(timeout: 60) == 66)
        // Another planning run: its header (its run's id) already tells it from the journal's plan.
        #expect(resumed.stderr.contains("the plan is not the one this journal was started with"), "\(resumed.stderr)")
        // The journal's header over other records: the records' checksum tells them apart.
        let firstHeader = try #require(try String(contentsOfFile: dir.file("journal/journal.log"), encoding: .utf8)
            .split(separator: "\n").lazy.compactMap { line -> String? in
                guard let v = try? JSONValue.parse(String(line.drop { $0 != " " }.dropFirst())), v["t"]?.stringValue == "start",
                      let header = v["plan_header"] else { return nil }
                return String(decoding: header.serialized(), as: UTF8.self)
            }.first, "the journal's start record holds the plan's header")
        let others = try String(contentsOfFile: dir.file("plan.ndjson"), encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        try ([firstHeader] + others.dropFirst().map(String.init)).joined(separator: "\n").write(toFile: dir.file("plan.ndjson"), atomically: true, encoding: .utf8)
        let changed = try CampaignProcess(["send", "--resume", dir.file("journal")] + Self.credentials(), in: dir.path)
        #expect(changed.wait(timeout: 60) == 66)
        #expect(changed.stderr.contains("has changed since the send started"), "\(changed.stderr)")
        #expect(try Self.recorded(dir).count == 300)
    }

    @Test func anIncompletePlanOnStandardInputIsSentAndReported() throws {
        let dir = TemporaryDirectory("incomplete")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        _ = try Self.plan(count: 100, into: dir.file("plan.ndjson"), seed: 3)
        let lines = try String(contentsOfFile: dir.file("plan.ndjson"), encoding: .utf8).split(separator: "\n")
        try (lines.prefix(51).joined(separator: "\n") + "\n").write(toFile: dir.file("cut.ndjson"), atomically: true, encoding: .utf8)
        let run = try CampaignProcess(["send", "-", "--journal", dir.file("journal"), "--gateway", "127.0.0.1:\(simulator.port)",
                                       "--report", dir.file("report.json")] + Self.credentials(), in: dir.path, input: dir.file("cut.ndjson"))
        #expect(run.wait(timeout: 60) == 65)
        simulator.stop()
        #expect(try Self.recorded(dir).count == 50)
        let report = try JSONValue.parse(Array(Data(contentsOf: URL(fileURLWithPath: dir.file("report.json")))))
        #expect(report["outcome"]?.stringValue == "incomplete-plan")
        #expect(report["accepted"]?.integerValue == 50)
    }

    @Test func aPlanFileWithoutItsTrailerIsRefusedBeforeAnythingIsSent() throws {
        let dir = TemporaryDirectory("incomplete-file")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        _ = try Self.plan(count: 100, into: dir.file("plan.ndjson"), seed: 3)
        let lines = try String(contentsOfFile: dir.file("plan.ndjson"), encoding: .utf8).split(separator: "\n")
        try (lines.prefix(51).joined(separator: "\n") + "\n").write(toFile: dir.file("cut.ndjson"), atomically: true, encoding: .utf8)
        let run = try CampaignProcess(["send", dir.file("cut.ndjson"), "--journal", dir.file("journal"),
                                       "--gateway", "127.0.0.1:\(simulator.port)"] + Self.credentials(), in: dir.path)
        #expect(run.wait(timeout: 60) == 65)
        #expect(run.stderr.contains("has no trailer"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("journal")), "no journal for a plan refused whole")
        #expect(simulator.currentStatistics().accepted == 0)
        #expect(simulator.currentStatistics().connections.isEmpty)
    }

    @Test func aFailedPlanLeavesNoPlanAtItsOut() throws {
        let dir = TemporaryDirectory("failed-plan")
        let (csv, _) = randomAudienceCSV(count: 5000, seed: 9)
        let gzip = GzipCompressor().compress(Array(csv.utf8), finish: true)
        try Data(gzip.prefix(gzip.count / 2)).write(to: URL(fileURLWithPath: dir.file("audience.csv.gz")))
        try #"{"campaign":"cut","messages":{"en":{"alert":"Hi {n}"}}}"#.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let run = try CampaignProcess(["plan", dir.file("job.json"), dir.file("audience.csv.gz"), "--out", dir.file("out.plan")], in: dir.path)
        #expect(run.wait(timeout: 60) == 66)
        #expect(!FileManager.default.fileExists(atPath: dir.file("out.plan")), "a failed plan must not be left where send would find it")
        #expect(!FileManager.default.fileExists(atPath: dir.file("out.plan.partial")))
        // And a plan that succeeds is where --out says, complete.
        try Data(gzip).write(to: URL(fileURLWithPath: dir.file("audience.csv.gz")))
        let good = try CampaignProcess(["plan", dir.file("job.json"), dir.file("audience.csv.gz"), "--out", dir.file("out.plan")], in: dir.path)
        #expect(good.wait(timeout: 60) == 0)
        try PlanReader.checkComplete(path: dir.file("out.plan"))
        #expect(!FileManager.default.fileExists(atPath: dir.file("out.plan.partial")))
    }

    @Test func aSignalStopsGracefullyAndTheResumeFinishesWithoutDuplicates() throws {
        let dir = TemporaryDirectory("sigint")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let tokens = try Self.plan(count: 8000, into: dir.file("plan.ndjson"), seed: 5)
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(simulator.port)", "--rate", "2000", "--connections", "2"] + Self.credentials(), in: dir.path)
        #expect(simulator.waitForStatistics(timeout: 60) { $0.accepted >= 500 })
        kill(run.process.processIdentifier, SIGINT)
        #expect(run.wait(timeout: 60) == 75)
        let stopped = try Journal.read(directory: dir.file("journal"))
        #expect(stopped.outcome == .interrupted)
        #expect(stopped.doneCount > 0 && stopped.doneCount < tokens.count)
        let resumed = try CampaignProcess(["send", "--resume", dir.file("journal")] + Self.credentials(), in: dir.path)
        #expect(resumed.wait(timeout: 120) == 0)
        simulator.stop()
        let recorded = try Self.recorded(dir)
        #expect(recorded.count == tokens.count, "graceful stops prove everything in flight: no duplicates")
        #expect(Set(recorded) == tokens)
        #expect(try Journal.read(directory: dir.file("journal")).duplicatesRisked == 0)
    }

    // MARK: - Sends that must end by themselves (plans larger than the queues)
    //
    // With one connection, 20,000 records overfill its queue (8192 frames):
    // the plan reader is waiting for room when the worker stops. Before the
    // fix nothing ever drained that queue and the send never exited.

    @Test(.timeLimit(.minutes(5))) func aGatewayThatDropsEveryConnectionEndsTheSendWithExit69() throws {
        let dir = TemporaryDirectory("dropevery")
        var faults = FaultPlan()
        faults.dropEvery = 64
        let simulator = try Self.simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        _ = try Self.plan(count: 20_000, into: dir.file("plan.ndjson"), seed: 21)
        // A rate and a proof every 64 keep the connection's window small, so
        // the plan reader, not the connection, holds the rest of the plan: it
        // is waiting for room in the full queue when the send gives up.
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(simulator.port)", "--connections", "1", "--checkpoint-every", "64",
                                       "--rate", "500"] + Self.credentials(), in: dir.path)
        let status = run.wait(timeout: 120)
        if status == nil { run.kill9() }
        #expect(status == 69, "still running after 120 s, or the wrong exit: \(run.stderr)")
        #expect(try Journal.read(directory: dir.file("journal")).outcome == .gaveUp)
    }

    @Test(.timeLimit(.minutes(5))) func aGatewayThatDiesMidSendEndsTheSendWithExit69Within120Seconds() throws {
        let dir = TemporaryDirectory("gatewaydies")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        _ = try Self.plan(count: 60_000, into: dir.file("plan.ndjson"), seed: 22)
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(simulator.port)", "--rate", "2000"] + Self.credentials(), in: dir.path)
        #expect(simulator.waitForStatistics(timeout: 60) { $0.accepted >= 1000 })
        simulator.stop()
        let status = run.wait(timeout: 120)
        if status == nil { run.kill9() }
        #expect(status == 69, "still running 120 s after the gateway died, or the wrong exit: \(run.stderr)")
    }

    @Test(.timeLimit(.minutes(5))) func aFirstSignalWhileThePlanIsBeingReadExits75Within10SecondsAndTheResumeDeliversEachOnce() throws {
        let dir = TemporaryDirectory("sigterm-reading")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let tokens = try Self.plan(count: 20_000, into: dir.file("plan.ndjson"), seed: 23)
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(simulator.port)", "--rate", "2000", "--connections", "1"] + Self.credentials(), in: dir.path)
        #expect(simulator.waitForStatistics(timeout: 60) { $0.accepted >= 500 })
        kill(run.process.processIdentifier, SIGTERM)
        let status = run.wait(timeout: 10)
        if status == nil { run.kill9() }
        #expect(status == 75, "still running 10 s after SIGTERM, or the wrong exit: \(run.stderr)")
        let stopped = try Journal.read(directory: dir.file("journal"))
        #expect(stopped.outcome == .interrupted)
        #expect(stopped.doneCount < tokens.count)
        let resumed = try CampaignProcess(["send", "--resume", dir.file("journal")] + Self.credentials(), in: dir.path)
        #expect(resumed.wait(timeout: 120) == 0)
        simulator.stop()
        let recorded = try Self.recorded(dir)
        #expect(recorded.count == tokens.count, "a graceful stop proves what is in flight: each notification exactly once")
        #expect(Set(recorded) == tokens)
    }

    @Test(.timeLimit(.minutes(2))) func aSignalDuringTheBackoffAfterTheGatewayDiedExits75Within10Seconds() throws {
        let dir = TemporaryDirectory("sigterm-backoff")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        _ = try Self.plan(count: 20_000, into: dir.file("plan.ndjson"), seed: 25)
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(simulator.port)", "--connections", "1", "--rate", "2000"] + Self.credentials(), in: dir.path)
        #expect(simulator.waitForStatistics(timeout: 120) { $0.accepted >= 500 })
        // The gateway dies after it was reached: the worker retries with a
        // backoff (0.1 s doubling to 30 s), watching for a stop all along.
        simulator.stop()
        // A few backoffs in: the send has said twice that it is trying again
        // (its lines come at most once a second, the second after some 4
        // attempts), each said just before it sleeps out the backoff.
        let retrying = waitForEvent(of: run) { run.stderr.components(separatedBy: "Trying again in").count - 1 >= 2 }
        #expect(retrying == .came, "the send did not say twice that it is trying again: \(run.stderr)")
        kill(run.process.processIdentifier, SIGTERM)
        let status = run.wait(timeout: 10)
        if status == nil { run.kill9() }
        #expect(status == 75, "still running 10 s after SIGTERM in a backoff, or the wrong exit: \(run.stderr)")
    }

    /// A gateway never reached (nothing listens; no such name) ends the send
    /// quickly with exit 69, saying each attempt's reason, and a wrong
    /// credential path or host leaves no journal behind.
    @Test(.timeLimit(.minutes(2))) func anUnreachableGatewayEndsTheSendWithin10SecondsAndSaysWhy() throws {
        let dir = TemporaryDirectory("unreachable")
        let closed = try Self.simulator(in: dir)
        let port = closed.port
        closed.stop()
        _ = try Self.plan(count: 100, into: dir.file("plan.ndjson"), seed: 27)
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(port)"] + Self.credentials(), in: dir.path)
        let status = run.wait(timeout: 10)
        if status == nil { run.kill9() }
        #expect(status == 69, "\(run.stderr)")
        let stderr = run.stderr
        #expect(stderr.contains("cannot connect to 127.0.0.1:\(port)") && stderr.contains("Connection refused"), "\(stderr)")
        #expect(!stderr.contains("cannot connect to 127.0.0.1:\(port): Cannot connect"), "the gateway named once a line: \(stderr)")
        #expect(try Journal.read(directory: dir.file("journal")).outcome == .gaveUp)

        let noName = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("j2"), "--gateway",
                                          "no-such-gateway.invalid:2195"] + Self.credentials(), in: dir.path)
        #expect(noName.wait(timeout: 10) == 69)
        #expect(!FileManager.default.fileExists(atPath: dir.file("j2")), "no journal for a host that does not resolve")

        let wrongCert = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("j3"), "--gateway", "127.0.0.1:\(port)",
                                             "--cert", dir.file("missing.pem")], in: dir.path)
        #expect(wrongCert.wait(timeout: 10) == 77)
        #expect(!FileManager.default.fileExists(atPath: dir.file("j3")), "no journal to refuse the corrected command")
    }

    /// Progress, the journal and `status` advance while a long send runs:
    /// proofs come every --checkpoint-seconds (2 by default), not only at the
    /// end of a connection's work or every 100,000.
    @Test(.timeLimit(.minutes(3))) func proofsComeByTimeSoTheJournalAdvancesDuringASend() throws {
        let dir = TemporaryDirectory("proof-by-time")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let tokens = try Self.plan(count: 20_000, into: dir.file("plan.ndjson"), seed: 26)
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(simulator.port)", "--rate", "2000", "--connections", "1"] + Self.credentials(), in: dir.path)
        // Over 2 s of sending at 2,000/s: a proof must have been journaled by then.
        #expect(simulator.waitForStatistics(timeout: 120) { $0.accepted >= 6000 })
        let midway = try Journal.read(directory: dir.file("journal"))
        #expect(midway.outcome == nil, "still running")
        #expect(midway.accepted >= 2000, "\(midway.accepted) proven accepted while \(simulator.currentStatistics().accepted) were accepted")
        #expect(run.wait(timeout: 120) == 0, "\(run.stderr)")
        simulator.stop()
        #expect(Set(try Self.recorded(dir)) == tokens)
    }

    @Test(.timeLimit(.minutes(2))) func aSimpleFormatSendExitsOnceEverythingIsWritten() throws {
        let dir = TemporaryDirectory("simple-ends")
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let tokens = try Self.plan(count: 3, into: dir.file("plan.ndjson"), seed: 24, format: "simple")
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(simulator.port)", "--report", dir.file("report.json")] + Self.credentials(), in: dir.path)
        let status = run.wait(timeout: 120)
        if status == nil { run.kill9() }
        #expect(status == 0, "still running 120 s after a 3-record simple send (it never ends by itself), or the wrong exit: \(run.stderr)")
        #expect(simulator.waitForStatistics(timeout: 60) { $0.accepted == 3 })
        simulator.stop()
        #expect(Set(try Self.recorded(dir)) == tokens)
        let report = try JSONValue.parse(Array(Data(contentsOf: URL(fileURLWithPath: dir.file("report.json")))))
        #expect(report["presumed"]?.integerValue == 3)
    }
}
