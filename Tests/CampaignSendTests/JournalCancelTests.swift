import Foundation
import Testing
import CampaignJSON
import CampaignTestSupport
import PlanStream
@testable import CampaignSend
@testable import SendJournal

/// The cancel record and `cancel` on journals no send holds, in-process
/// (a running send's cancel is a process test: CancelTests).
@Suite(.ownThreads) struct JournalCancelTests {
    static let settings = SendSettings(gatewayHost: "127.0.0.1", gatewayPort: 2195, certificate: "c.pem")

    static func journal(in dir: TemporaryDirectory, ending: SendOutcome?) throws -> String {
        let path = dir.file("journal")
        let journal = try Journal.create(directory: path, settings: Self.settings, planHeader: .object([]))
        try journal.append(.done(shard: 0, ranges: [0..<7]))
        if let ending { try journal.append(.end(outcome: ending)) }
        try journal.checkpoint()
        return path
    }

    @Test func theRecordIsOneFramedLineThatReadsBack() throws {
        let dir = TemporaryDirectory("cancel-record")
        let record = JournalCancel(by: "alice@db1 (pid 42)", at: 1_795_000_000, reason: "wrong \"message\"")
        try record.write(directory: dir.file("new/part"))
        #expect(JournalCancel.read(directory: dir.file("new/part")) == record)
        let text = try String(contentsOfFile: dir.file("new/part/cancel"), encoding: .utf8)
        #expect(text.dropFirst(9) == #"{"t":"cancel","by":"alice@db1 (pid 42)","at":1795000000,"reason":"wrong \"message\""}"# + "\n")
        #expect(try FileManager.default.attributesOfItem(atPath: dir.file("new/part/cancel"))[.posixPermissions] as? Int == 0o600)
        // A damaged record is not read, but the file still cancels.
        try ("00000000" + text.dropFirst(8)).write(toFile: dir.file("new/part/cancel"), atomically: true, encoding: .utf8)
        #expect(JournalCancel.read(directory: dir.file("new/part")) == nil)
        #expect(throws: CancelledJournal.self) { try CancelledJournal.refuse(directory: dir.file("new/part")) }
        #expect(SendOutcome(rawValue: "cancelled") == .cancelled && SendOutcome.cancelled.rawValue == "cancelled")
    }

    @Test func aStoppedJournalGetsItsEndFromCancelAndNothingElse() throws {
        let dir = TemporaryDirectory("cancel-stopped")
        let path = try Self.journal(in: dir, ending: .scheduled)
        let before = try Data(contentsOf: URL(fileURLWithPath: "\(path)/journal.log"))
        let record = JournalCancel(by: "cron", at: 1_795_000_000, reason: nil)
        let result = try CampaignCancel.cancel(directory: path, record: record)
        #expect(result.outcome == .cancelled(stopped: nil, accepted: 7, done: 7))
        let after = try Data(contentsOf: URL(fileURLWithPath: "\(path)/journal.log"))
        #expect(after.prefix(before.count) == before, "only appended to")
        #expect(String(decoding: after.dropFirst(before.count), as: UTF8.self).hasSuffix(#" {"t":"end","outcome":"cancelled"}"# + "\n"))
        let state = try Journal.read(directory: path)
        #expect(state.outcome == .cancelled && state.cancel == record && state.accepted == 7)
        #expect(try CampaignCancel.cancel(directory: path, record: record).outcome == .alreadyCancelled(record))
        #expect(throws: CancelledJournal.self) {
            _ = try SendSession(.resume(journal: path, replan: false, adjust: { _ in }))
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: "\(path)/journal.log")) == after)
    }

    @Test func aCompleteJournalHasNothingToCancelAndAMissingOneIsAnErrorUnlessAPartNotStarted() throws {
        let dir = TemporaryDirectory("cancel-complete")
        let path = try Self.journal(in: dir, ending: .complete)
        let record = JournalCancel(by: "bob", at: 1, reason: nil)
        #expect(try CampaignCancel.cancel(directory: path, record: record).outcome == .alreadyComplete)
        #expect(!JournalCancel.exists(directory: path))
        #expect(throws: JournalError.self) { _ = try CampaignCancel.cancel(directory: dir.file("none"), record: record) }
        #expect(try CampaignCancel.cancel(directory: dir.file("parts/003"), record: record, createIfMissing: true).outcome == .cancelledBeforeStart)
        #expect(JournalCancel.read(directory: dir.file("parts/003")) == record)
        #expect(throws: CancelledJournal.self) {
            _ = try SendSession(.new(plan: dir.file("no-plan"), journal: dir.file("parts/003"), settings: Self.settings))
        }
    }
}

extension JournalCancelTests {
    @Test func onlyAProcessHoldingTheLockIsSignalled() throws {
        let dir = TemporaryDirectory("cancel-holder")
        let journal = try Journal.create(directory: dir.file("journal"), settings: Self.settings, planHeader: .object([]))
        #expect(CampaignCancel.holdsOpen(pid: getpid(), path: dir.file("journal/lock")))
        #expect(!CampaignCancel.holdsOpen(pid: getpid(), path: dir.file("journal/journal.log.absent")))
        #expect(!CampaignCancel.holdsOpen(pid: 1, path: dir.file("journal/lock")))
        withExtendedLifetime(journal) {}
    }
}

extension JournalCancelTests {
    /// The send holding the journal completes before it notices the cancel
    /// (here this process holds it, and is not signalled): the journal is
    /// complete, and keeps no cancel record.
    @Test(.timeLimit(.minutes(1))) func aSendThatCompletesFirstKeepsNoCancelRecord() throws {
        let dir = TemporaryDirectory("cancel-race")
        let path = dir.file("journal")
        var journal: Journal? = try Journal.create(directory: path, settings: Self.settings, planHeader: .object([]))
        let outcome = Locked<CampaignCancel.Outcome?>(nil)
        let thread = Thread {
            let result = try? CampaignCancel.cancel(directory: path, record: JournalCancel(by: "eve", at: 1, reason: nil), waitSeconds: 20)
            outcome.set(result?.outcome)
        }
        thread.start()
        #expect(eventually(within: 60) { JournalCancel.exists(directory: path) })
        try journal!.append(.end(outcome: .complete))
        try journal!.checkpoint()
        journal = nil   // the lock goes with it
        #expect(eventually(within: 60) { outcome.value != nil })
        #expect(outcome.value == .completedFirst)
        #expect(!JournalCancel.exists(directory: path))
        #expect(try Journal.read(directory: path).outcome == .complete)
    }
}


extension JournalCancelTests {
    @Test func aManifestsPartsAreFoundStartedOrNotAndAnotherRunsJournalIsLeftAlone() throws {
        let dir = TemporaryDirectory("cancel-manifest")
        let manifest = PlanManifest(campaign: "c", campaignHash: "abcd", format: "h2", shards: 4, created: 1, rowsRead: 3, rejected: 0,
                                    parts: (0..<3).map { PlanManifest.Entry(part: $0, file: "part-00\($0).plan", records: 1, crc32: "0") })
        try Data(manifest.json.serialized()).write(to: URL(fileURLWithPath: dir.file("manifest.json")))
        // j/001 holds a journal of something else (no part header).
        _ = try Journal.create(directory: dir.file("j/001"), settings: Self.settings, planHeader: .object([]))
        let found = try CampaignCancel.partDirectories(manifest: dir.file("manifest.json"), glob: dir.file("j/*"))
        #expect(found.directories.map(\.0) == [dir.file("j/000"), dir.file("j/002")])
        #expect(found.directories.allSatisfy { $0.1 })
        #expect(found.unplaced == [1])
        let noSlash = try CampaignCancel.partDirectories(manifest: dir.file("manifest.json"), glob: dir.file("j/0*"))
        #expect(noSlash.directories.isEmpty && noSlash.unplaced == [0, 1, 2])
    }
}
