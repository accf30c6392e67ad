import Foundation
import Testing
import CampaignIO
import CampaignJSON
import CampaignTestSupport
@testable import CampaignSend

/// SIGTERM and SIGINT at 20 moments, against a gateway made slow by the
/// send's own rate: 10 moments of a `send` of a plan file and 10 of
/// `plan | send`. Each signalled run must end with exit 75 within 10 s of
/// the signal (or 0, when the signal came after its end), and the resumes
/// (with `--replan` after a pipeline) must deliver every notification exactly
/// once, as the simulator's record shows. Plans are larger than the queues.
@Suite(.ownThreads) struct SignalMomentsTests {
    static let signals = [SIGTERM, SIGINT]

    /// Signals `run` after a random moment (chaos, not synchronisation) and
    /// returns its exit status, failing the test unless it is 75 within 10 s,
    /// or 0 when it had already finished.
    static func signalAtRandom(_ run: CampaignProcess, also others: [CampaignProcess] = [], signal: Int32, rng: inout SplitMix64,
                               moment: Int, journal: String) -> Int32? {
        let delay = Double(150 + Int(rng.next() % 1200)) / 1000
        if let early = run.wait(timeout: delay) { return early }
        // As a terminal's Ctrl-C does: every process of the pipeline.
        for process in [run] + others { kill(process.process.processIdentifier, signal) }
        let status = run.wait(timeout: 10)
        if status == nil { run.kill9() }
        for process in others where process.wait(timeout: 10) == nil { process.kill9() }
        // 0 when the signal came as the send was ending: then it is complete.
        let finishedFirst = status == 0 && (try? Journal.read(directory: journal).outcome) == .complete
        #expect(status == 75 || finishedFirst, "moment \(moment) (signal \(signal)): \(status.map(String.init) ?? "still running 10 s after the signal")")
        return status
    }

    @Test(.timeLimit(.minutes(10))) func tenMomentsOfASendFromAPlanFile() throws {
        let dir = TemporaryDirectory("moments-send")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        let tokens = try SendProcessTests.plan(count: 24_000, into: dir.file("plan.ndjson"), seed: 41)
        let flags = ["--gateway", "127.0.0.1:\(simulator.port)", "--rate", "4000", "--connections", "2"] + SendProcessTests.credentials()
        var rng = SplitMix64(seed: 41)
        var finished = false
        for moment in 0..<10 where !finished {
            let first = moment == 0
            let run = try CampaignProcess(first ? ["send", dir.file("plan.ndjson"), "--journal", dir.file("journal")] + flags
                                                : ["send", "--resume", dir.file("journal")] + flags, in: dir.path)
            let status = Self.signalAtRandom(run, signal: Self.signals[moment % 2], rng: &rng, moment: moment, journal: dir.file("journal"))
            finished = status == 0
        }
        if !finished {
            let last = try CampaignProcess(["send", "--resume", dir.file("journal")] + flags, in: dir.path)
            #expect(last.wait(timeout: 120) == 0, "\(last.stderr)")
        }
        simulator.stop()
        let recorded = try SendProcessTests.recorded(dir)
        #expect(Set(recorded) == Set(tokens))
        #expect(recorded.count == tokens.count, "graceful stops prove what is in flight: each notification exactly once")
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
        for moment in 0..<10 where !finished {
            let run = try pipeline(moment == 0 ? ["send", "--journal", "journal"] : ["send", "--resume", "journal", "--replan"])
            let status = Self.signalAtRandom(run.send, also: [run.plan], signal: Self.signals[moment % 2], rng: &rng, moment: moment,
                                             journal: dir.file("journal"))
            finished = status == 0
        }
        if !finished {
            let last = try pipeline(["send", "--resume", "journal", "--replan"])
            #expect(last.send.wait(timeout: 120) == 0, "\(last.send.stderr)")
        }
        simulator.stop()
        let recorded = try SendProcessTests.recorded(dir)
        #expect(Set(recorded) == tokens)
        #expect(recorded.count == tokens.count, "each notification exactly once")
        #expect(try Journal.read(directory: dir.file("journal")).outcome == .complete)
    }
}
