import Foundation
import Testing
import CampaignIO
import CampaignJSON
import CampaignPlan
import PlanStream
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import ByteStreams

/// `campaign plan … | campaign send` killed as a whole (kill -9 of the shell
/// and both commands: what a machine crash does to a nightly run), then
/// resumed the documented way: the same pipeline into `send --resume --replan`.
@Suite(.ownThreads) struct PipelineCrashTests {
    static func audience(count: Int, in dir: TemporaryDirectory, seed: UInt64) throws -> Set<String> {
        let (csv, tokens) = randomAudienceCSV(count: count, seed: seed) { $0 % 4 == 0 ? "es-MX" : "en-US" }
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try #"{"campaign":"crash","fallback":["en"],"messages":{"en":{"alert":"Number {n}"},"es":{"alert":"Número {n}"}}}"#
            .write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        return tokens
    }

    /// The children of `pid`, read from /proc.
    static func children(of pid: Int32) -> [Int32] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        return entries.compactMap { name -> Int32? in
            guard let child = Int32(name), let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 2 && Int32(fields[1]) == pid ? child : nil
        }
    }

    /// Whether the journal's spooled plan was read to its trailer.
    static func spoolIsComplete(_ dir: TemporaryDirectory) -> Bool {
        guard let reader = try? PlanReader(source: FileSource(path: dir.file("journal/plan.ndjson")), path: "spool") else { return false }
        while (try? reader.next()) ?? nil != nil {}
        return reader.isComplete
    }

    static func shell(_ command: String, in dir: TemporaryDirectory) throws -> CampaignProcess {
        try CampaignProcess(["-c", command], in: dir.path, executable: URL(fileURLWithPath: "/bin/bash"))
    }

    @Test func killedPipelinesResumeWithTheSamePlanAndLoseNothing() throws {
        let dir = TemporaryDirectory("pipeline-kill")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        let tokens = try Self.audience(count: 60_000, in: dir, seed: 3)
        let campaign = SimulatorProcessTests.binary.path
        let credentials = SendProcessTests.credentials().joined(separator: " ")
        let plan = "'\(campaign)' plan job.json audience.csv --rejects rejects.ndjson"
        let start = "\(plan) | '\(campaign)' send --journal journal --gateway 127.0.0.1:\(simulator.port) --connections 2 --rate 8000 \(credentials)"
        let resume = "\(plan) | '\(campaign)' send --resume journal --replan \(credentials)"
        var spoolCutShort = 0
        // Each kill once a random number of notifications more are recorded (the last run keeps at least 1/7 of the send).
        let (kills, finished) = try killRepeatedlyThenFinish(kills: 12, of: tokens.count, seed: 17, recorded: { simulator.currentStatistics().accepted }, next: {
            let hasJournal = FileManager.default.fileExists(atPath: dir.file("journal/journal.log"))
            return try Self.shell(hasJournal ? resume : start, in: dir)
        }, kill: { run in
            for child in Self.children(of: run.process.processIdentifier) { kill(child, SIGKILL) }
            run.kill9()
            // A spool begun and cut short (a kill before the journal was made leaves none).
            if FileManager.default.fileExists(atPath: dir.file("journal/plan.ndjson")) && !Self.spoolIsComplete(dir) { spoolCutShort += 1 }
        })
        #expect(kills >= 12)
        #expect(finished)
        simulator.stop()
        let outcome = try expectEverythingDeliveredAfterKills(dir, tokens: tokens)
        #expect(spoolCutShort > 0, "no kill left the spooled plan cut short: the --replan path was not exercised")
        print("pipeline kills: \(kills) (\(spoolCutShort) left the spooled plan cut short), \(outcome.recorded) recorded, \(outcome.duplicates) duplicates (bound \(outcome.bound))")
    }

    @Test func aReplanFromAnotherAudienceIsRefused() throws {
        let dir = TemporaryDirectory("replan-other")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        let tokens = try Self.audience(count: 3000, in: dir, seed: 4)
        let campaign = SimulatorProcessTests.binary.path
        let credentials = SendProcessTests.credentials().joined(separator: " ")
        // A spool cut short, as a kill leaves it: the first 1,000 planned lines.
        let cut = try Self.shell("'\(campaign)' plan job.json audience.csv --rejects r.ndjson | head -n 1000 | '\(campaign)' send --journal journal " +
                                 "--gateway 127.0.0.1:\(simulator.port) \(credentials)", in: dir)
        #expect(cut.wait(timeout: 120) == 65)
        #expect(cut.stderr.contains("--replan"))
        _ = try Self.audience(count: 3000, in: dir, seed: 5)   // another audience
        let other = try Self.shell("'\(campaign)' plan job.json audience.csv --rejects r.ndjson | '\(campaign)' send --resume journal --replan \(credentials)", in: dir)
        #expect(other.wait(timeout: 120) == 66)
        #expect(other.stderr.contains("differs from the spooled one"))
        _ = try Self.audience(count: 3000, in: dir, seed: 4)   // the original again
        let same = try Self.shell("'\(campaign)' plan job.json audience.csv --rejects r.ndjson | '\(campaign)' send --resume journal --replan \(credentials)", in: dir)
        #expect(same.wait(timeout: 120) == 0, "\(same.stderr)")
        simulator.stop()
        // What holds tokens is private; the default log level names none.
        func mode(_ path: String) throws -> Int {
            try (FileManager.default.attributesOfItem(atPath: dir.file(path))[.posixPermissions] as? Int) ?? -1
        }
        #expect(try mode("journal") == 0o700)
        #expect(try mode("journal/journal.log") == 0o600)
        #expect(try mode("journal/plan.ndjson") == 0o600)
        #expect(try mode("r.ndjson") == 0o600)
        let logs = cut.stderr + other.stderr + same.stderr
        #expect(!logs.isEmpty)
        #expect(!tokens.contains { logs.contains($0) }, "a token appeared in the log")
        let recorded = try SendProcessTests.recorded(dir)
        #expect(recorded.count == 3000 && Set(recorded).count == 3000)
    }
}
