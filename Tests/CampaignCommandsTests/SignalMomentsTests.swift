import Foundation
import Testing
import CampaignIO
import CampaignJSON
import CampaignTestSupport
import GatewaySimulator
@testable import CampaignSend
@testable import SendJournal

/// SIGTERM and SIGINT at 20 moments, against a gateway made slow by the
/// send's own rate: 10 moments of a `send` of a plan file and 10 of
/// `plan | send`. A moment is an event, not a time: once the run has started
/// (the journal holds its start: the signal watch is set) and a random number
/// of further notifications (drawn from the seed, from 0 to a share of those
/// left) are recorded by the gateway, so every signal comes while
/// notifications remain to be sent. Each signalled run must end with exit 75
/// within 10 s of the signal (the product's promise; or 0 with the send
/// complete, should the signal come as it was ending), and the resumes (with
/// `--replan` after a pipeline) must deliver every notification exactly
/// once, as the simulator's record shows. Plans are larger than the queues.
@Suite(.ownThreads) struct SignalMomentsTests {
    static let signals = [SIGTERM, SIGINT]
    static let moments = 10

    /// The runs the journal holds (0 before it exists).
    static func runs(_ journal: String) -> Int { (try? Journal.read(directory: journal).runs) ?? 0 }

    /// Starts a run with `start`, signals it (and `others`, started with it)
    /// at moment `moment`: once its run is journaled and a random number of
    /// further notifications are recorded; returns its exit status, failing
    /// the test unless it is 75 within 10 s, or 0 with the send complete.
    static func signalAtAMoment(_ moment: Int, simulator: GatewaySimulator, total: Int, journal: String, rng: inout SplitMix64,
                                start: () throws -> (run: CampaignProcess, others: [CampaignProcess])) throws -> Int32? {
        let runsBefore = Self.runs(journal)
        let before = simulator.currentStatistics().accepted
        let more = notificationsBeforeInterrupting(left: total - before, interruptionsToCome: Self.moments - moment, rng: &rng)
        let (run, others) = try start()
        let signal = Self.signals[moment % 2]
        var started = false
        let event = waitForEvent(of: run) {
            guard simulator.currentStatistics().accepted >= before + more else { return false }
            if !started { started = Self.runs(journal) > runsBefore }
            return started
        }
        let status: Int32?
        switch event {
        case .came:
            // As a terminal's Ctrl-C does: every process of the pipeline.
            for process in [run] + others { kill(process.process.processIdentifier, signal) }
            status = run.wait(timeout: 10)
            if status == nil { run.kill9() }
        case .ended(let early):
            status = early
            Issue.record("moment \(moment): the run ended (status \(early)) before its signal, due once it had started and \(more) more were recorded: \(run.stderr.suffix(1500))")
        case .neither:
            status = nil
            Issue.record("moment \(moment): in 120 s the run neither started and had \(more) more recorded nor ended: \(run.stderr.suffix(1500))")
            run.kill9()
        }
        for process in others where process.wait(timeout: 10) == nil { process.kill9() }
        // 0 when the signal came as the send was ending: then it is complete.
        let finishedFirst = status == 0 && (try? Journal.read(directory: journal).outcome) == .complete
        print("moment \(moment): signal \(signal) once \(more) more of \(total - before) left were recorded: \(status.map(String.init) ?? "still running")")
        #expect(status == 75 || finishedFirst,
                "moment \(moment) (signal \(signal) once \(more) more were recorded): \(status.map(String.init) ?? "still running 10 s after the signal"): \(run.stderr.suffix(1500))")
        return status
    }

    /// Every token recorded, each once: a graceful stop proves what is in
    /// flight. Under a sanitizer the simulator in this process reads several
    /// times slower, and a stop's proof can miss its 5-s grace (the send ends
    /// within 10 s whatever the gateway does); what was then written and not
    /// proven is counted as possible duplicates, and the copies stay within
    /// that count (``expectEverythingDeliveredAfterKills(_:tokens:)``).
    static func expectEachOnce(_ dir: TemporaryDirectory, _ tokens: Set<String>) throws {
        let (_, duplicates, _) = try expectEverythingDeliveredAfterKills(dir, tokens: tokens)
        if !Sanitizers.active {
            #expect(duplicates == 0, "graceful stops prove what is in flight: each notification exactly once")
        }
    }

    @Test(.timeLimit(.minutes(10))) func tenMomentsOfASendFromAPlanFile() throws {
        let dir = TemporaryDirectory("moments-send")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        let tokens = try SendProcessTests.plan(count: 24_000, into: dir.file("plan.ndjson"), seed: 41)
        let flags = ["--gateway", "127.0.0.1:\(simulator.port)", "--rate", "4000", "--connections", "2"] + SendProcessTests.credentials()
        var rng = SplitMix64(seed: 41)
        var finished = false
        for moment in 0..<Self.moments where !finished {
            let status = try Self.signalAtAMoment(moment, simulator: simulator, total: tokens.count, journal: dir.file("journal"), rng: &rng) {
                let first = moment == 0
                return (try CampaignProcess(first ? ["send", dir.file("plan.ndjson"), "--journal", dir.file("journal")] + flags
                                                  : ["send", "--resume", dir.file("journal")] + flags, in: dir.path), [])
            }
            finished = status == 0
        }
        if !finished {
            let last = try CampaignProcess(["send", "--resume", dir.file("journal")] + flags, in: dir.path)
            #expect(last.wait(timeout: 120) == 0, "\(last.stderr)")
        }
        simulator.stop()
        try Self.expectEachOnce(dir, Set(tokens))
    }

    @Test(.timeLimit(.minutes(10))) func tenMomentsOfPlanPipedIntoSend() throws {
        let dir = TemporaryDirectory("moments-pipe")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        let (csv, tokens) = randomAudienceCSV(count: 24_000, seed: 42)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try #"{"campaign":"moments","messages":{"en":{"alert":"Notification {n}"}}}"#.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let flags = ["--gateway", "127.0.0.1:\(simulator.port)", "--rate", "4000", "--connections", "2"] + SendProcessTests.credentials()
        /// `campaign plan … | campaign send …`, the two processes joined by a pipe.
        func pipeline(_ send: [String]) throws -> (plan: CampaignProcess, send: CampaignProcess) {
            let pipe = Pipe()
            let plan = try CampaignProcess(["plan", "job.json", "audience.csv", "--rejects", "rejects.ndjson"], in: dir.path, outputPipe: pipe)
            let sending = try CampaignProcess(send + flags, in: dir.path, inputPipe: pipe)
            // Only the children hold the pipe's ends now: the plan sees a broken
            // pipe when the send ends, and the send an end of input when the plan does.
            try? pipe.fileHandleForReading.close()
            try? pipe.fileHandleForWriting.close()
            return (plan, sending)
        }
        var rng = SplitMix64(seed: 42)
        var finished = false
        for moment in 0..<Self.moments where !finished {
            let status = try Self.signalAtAMoment(moment, simulator: simulator, total: tokens.count, journal: dir.file("journal"), rng: &rng) {
                let run = try pipeline(moment == 0 ? ["send", "--journal", "journal"] : ["send", "--resume", "journal", "--replan"])
                return (run.send, [run.plan])
            }
            finished = status == 0
        }
        if !finished {
            let last = try pipeline(["send", "--resume", "journal", "--replan"])
            #expect(last.send.wait(timeout: 120) == 0, "\(last.send.stderr)")
        }
        simulator.stop()
        try Self.expectEachOnce(dir, tokens)
        #expect(try Journal.read(directory: dir.file("journal")).outcome == .complete)
    }
}
