import Foundation
import Testing
import APNSWire
import CampaignIO
import CampaignPlan
import PlanStream
import CampaignTestSupport
import GatewaySimulator
@testable import CampaignSend
@testable import SendJournal
@testable import ByteStreams

/// Power loss: the journal loses whatever the disk had not made durable, so
/// its last record may be cut at any byte. Every such journal must resume,
/// and the resume must finish the send with nothing lost.
@Suite(.serialized, .ownThreads) struct PowerLossTests {
    /// Cuts the journal at every byte offset of its last `records` records (and
    /// at every record boundary before them), resumes each cut copy against a
    /// fresh gateway, and checks that every notification ends final exactly once.
    @Test func aJournalCutAtEveryByteOfItsLastRecordsResumesAndLosesNothing() throws {
        var faults = FaultPlan()
        let source = try SendHarness(faults: FaultPlan())
        let tokens = try makePlan(count: 240, in: source.dir, seed: 77)
        let bad = Set(tokens.prefix(40).enumerated().filter { $0.offset % 13 == 5 }.map(\.element))
        faults.badTokens = Set(bad.map { DeviceToken(hex: $0)!.bytes })
        faults.shutdownAfter = 90
        let original = try SendHarness(faults: faults)
        try FileManager.default.copyItem(atPath: source.dir.file("plan.ndjson"), toPath: original.dir.file("plan.ndjson"))
        let first = try original.send(connections: 2)
        #expect(first.outcome == .complete)

        let log = try [UInt8](Data(contentsOf: URL(fileURLWithPath: original.dir.file("journal/journal.log"))))
        let ends = log.indices.filter { log[$0] == 0x0A }.map { $0 + 1 }
        let lastRecords = 6
        #expect(ends.count > lastRecords + 1)
        let cutFrom = ends[ends.count - lastRecords - 1]
        // Every boundary before the tail, then every byte of the tail.
        let offsets = Array(ends.dropLast(lastRecords)) + Array(cutFrom...log.count)

        var resumes = 0
        for offset in offsets {
            let harness = try SendHarness(faults: faults)
            try FileManager.default.copyItem(atPath: source.dir.file("plan.ndjson"), toPath: harness.dir.file("plan.ndjson"))
            try FileManager.default.createDirectory(atPath: harness.dir.file("journal"), withIntermediateDirectories: true)
            try Data(log[0..<offset]).write(to: URL(fileURLWithPath: harness.dir.file("journal/journal.log")))

            let before = try Journal.read(directory: harness.dir.file("journal"))
            #expect(before.tornTail == !ends.contains(offset), "offset \(offset)")
            let report = try harness.send(connections: 2, resume: true)
            #expect(report.outcome == .complete, "offset \(offset): \(report.message ?? "")")
            // Each notification is counted once: already final (accepted or
            // refused), accepted now, or refused now.
            #expect(report.alreadyDone == before.doneCount, "offset \(offset)")
            #expect(report.alreadyDone + report.accepted + report.failed == tokens.count, "offset \(offset)")
            let after = try Journal.read(directory: harness.dir.file("journal"))
            #expect(after.outcome == .complete && !after.tornTail, "offset \(offset)")
            #expect(after.doneCount == tokens.count, "offset \(offset): \(after.doneCount) final")
            #expect(Set(after.failures.map { DeviceToken(bytes: $0.token).hex }) == bad, "offset \(offset)")
            let recorded = try harness.recordedTokens()
            #expect(recorded.count == report.accepted, "offset \(offset)")
            #expect(Set(recorded).isDisjoint(with: bad), "offset \(offset)")
            resumes += 1
        }
        #expect(resumes == offsets.count)
        print("power loss: \(resumes) cut journals (\(log.count - cutFrom + 1) byte offsets of the last \(lastRecords) records, \(ends.count - lastRecords) record boundaries) resumed, none lost")
    }
}

/// Journals from before the spool was raw keep a gzip spool; they still resume.
@Suite struct JournalCreationTests {
    /// A send killed while creating its journal used to leave an empty log:
    /// `--resume` called it empty and a new send refused the directory. The
    /// log now appears with its start record or not at all.
    @Test func aJournalAppearsWholeOrNotAtAll() throws {
        let harness = try SendHarness(faults: FaultPlan())
        let settings = harness.settings(connections: 1)
        let header = PlanHeader(campaign: "c", wire: .binary(.enhanced), expiry: 0, priority: nil, maxPayload: 256, shards: 4, created: 1)
        let dir = harness.dir.file("j")
        // What a kill before the rename leaves: the directory, the lock and a
        // start record written aside. A new send must still be able to start.
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try Data("partial".utf8).write(to: URL(fileURLWithPath: "\(dir)/\(Journal.logName).tmp-999999"))
        FileManager.default.createFile(atPath: "\(dir)/\(Journal.lockName)", contents: nil)
        do {
            let journal = try Journal.create(directory: dir, settings: settings, planHeader: header.json)
            _ = journal
        }
        let state = try Journal.read(directory: dir)
        #expect(state.settings == settings)
        #expect(!state.tornTail)
        let names = try FileManager.default.contentsOfDirectory(atPath: dir)
        #expect(!names.contains { $0.hasPrefix("\(Journal.logName).tmp-\(getpid())") })
        let mode = try FileManager.default.attributesOfItem(atPath: "\(dir)/\(Journal.logName)")[.posixPermissions] as? Int
        #expect(mode == 0o600)
        // And a second create is refused, the first journal untouched.
        #expect { try Journal.create(directory: dir, settings: settings, planHeader: header.json) } throws: {
            ($0 as? JournalError)?.reason == .alreadyExists
        }
        #expect(try Journal.read(directory: dir).settings == settings)
    }
}

@Suite struct SpoolTests {
    @Test func aGzipSpoolFromAnOlderJournalIsStillRead() throws {
        let harness = try SendHarness(faults: FaultPlan())
        _ = try makePlan(count: 120, in: harness.dir)
        let plan = try [UInt8](Data(contentsOf: URL(fileURLWithPath: harness.dir.file("plan.ndjson"))))
        var settings = harness.settings(connections: 1)
        settings.planPath = nil
        let header = try PlanReader(path: harness.dir.file("plan.ndjson")).header
        let journal = try Journal.create(directory: harness.dir.file("j"), settings: settings, planHeader: header.json)
        // Cut short, as a kill leaves it.
        let gz = GzipCompressor().compress(Array(plan.prefix(plan.count * 2 / 3)), sync: true)
        try Data(gz).write(to: URL(fileURLWithPath: harness.dir.file("j/\(Journal.legacySpoolName)")))
        let reader = try PlanReader(source: journal.openSpool(), path: "spool")
        var records = 0
        while (try? reader.next()) ?? nil != nil { records += 1 }
        #expect(records > 60 && records < 120)
        #expect(!reader.isComplete)
    }
}
