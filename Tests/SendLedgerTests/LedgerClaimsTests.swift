#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import CampaignIO
import CampaignTestSupport
@testable import SendLedger

/// The cap held across sends: claims written under the scope's lock before
/// a notification is written, counted once per campaign whatever became of it.
@Suite struct LedgerClaimsTests {
    static let cap = FrequencyCap(max: 1, perSeconds: 86_400, scope: "marketing")

    static func claimer(_ campaign: String, in dir: TemporaryDirectory, cap: FrequencyCap = cap, resumed: Bool = false,
                        segment: String? = nil) throws -> LedgerClaims {
        let writer = try LedgerSegmentWriter(directory: dir.file("ledger"), name: segment ?? "box-\(campaign).seg", campaign: campaign, scope: cap.scope)
        return try LedgerClaims(directory: dir.file("ledger"), cap: cap, campaign: campaign, writer: writer, shards: 1, resumed: resumed)
    }

    @Test func theSecondSendOfAScopeSeesTheFirstsClaimsAndItsOwnNeverCount() throws {
        let dir = TemporaryDirectory("claims-two")
        let spring = try Self.claimer("spring", in: dir), summer = try Self.claimer("summer", in: dir)
        #expect(spring.begin(now: 10_000, stopped: { false }) == .locked)
        #expect((0..<10).allSatisfy { spring.admit(hash: UInt64(100 + $0), shard: 0, ordinal: Int32($0)) })
        try spring.end(now: 10_000)
        // Devices 100…109 are spring's: summer, the second to claim, keeps them back and claims the rest.
        #expect(summer.begin(now: 10_001, stopped: { false }) == .locked)
        let admitted = (0..<20).filter { summer.admit(hash: UInt64(100 + $0), shard: 0, ordinal: Int32($0)) }
        try summer.end(now: 10_001)
        #expect(admitted == Array(10..<20) && summer.refused == 10)
        // Spring again (its next batch, or a resume): its own claims never count against it.
        #expect(spring.begin(now: 10_002, stopped: { false }) == .locked)
        #expect(spring.admit(hash: 100, shard: 0, ordinal: 0))
        #expect(!spring.admit(hash: 115, shard: 0, ordinal: 15), "summer's claim counts")
        try spring.end(now: 10_002)
        #expect(spring.claimsWritten == 10 && summer.claimsWritten == 10, "a record claimed once per run")
    }

    @Test func aClaimAndItsProofCountOnceAndOnlyTheProofReaches() throws {
        let dir = TemporaryDirectory("claims-reader")
        let w = try LedgerSegmentWriter(directory: dir.file("ledger"), name: "box-a.seg", campaign: "spring", scope: "marketing")
        try w.append(hashes: [1, 2, 3], seconds: 9000, kind: .claims)
        try w.append(hashes: [1, 2], seconds: 9001, kind: .proofs)
        let cap = FrequencyCap(max: 2, perSeconds: 3600, scope: "marketing")
        let view = try LedgerReader.load(directory: dir.file("ledger"), filter: .init(campaign: "spring", cap: cap, now: 10_000))
        #expect(view.flags(1) == LedgerView.reachedBit | 1 && view.flags(2) == LedgerView.reachedBit | 1)
        #expect(view.flags(3) == 1, "claimed, never proven: counts, but the campaign did not reach it")
        let own = try LedgerReader.load(directory: dir.file("ledger"), filter: .init(campaign: "spring", cap: nil, now: 0, ownClaims: true))
        #expect(own.flags(3) & 0x7F == 1 && own.flags(9) == 0)
        let stats = try LedgerMaintenance.stats(directory: dir.file("ledger"))
        #expect(stats.entries == 2 && stats.claims == 3)
        // Prune keeps each kind.
        w.close()
        _ = try LedgerMaintenance.prune(directory: dir.file("ledger"), olderThan: 9001)
        let pruned = try LedgerMaintenance.stats(directory: dir.file("ledger"))
        #expect(pruned.entries == 2 && pruned.claims == 0)
    }

    @Test func aResumeClaimsNoDeviceItsEarlierRunClaimed() throws {
        let dir = TemporaryDirectory("claims-resume")
        let first = try Self.claimer("spring", in: dir)
        _ = first.begin(now: 5000, stopped: { false })
        #expect(first.admit(hash: 7, shard: 0, ordinal: 0))
        try first.end(now: 5000)
        // The resume on another machine (its own segment), or after this one's writer closed: the same campaign.
        let resumed = try Self.claimer("spring", in: dir, resumed: true, segment: "box2-spring.seg")
        _ = resumed.begin(now: 5001, stopped: { false })
        #expect(resumed.admit(hash: 7, shard: 0, ordinal: 0) && resumed.admit(hash: 8, shard: 0, ordinal: 1))
        try resumed.end(now: 5001)
        #expect(resumed.claimsWritten == 1)
    }

    @Test func entriesOutsideTheWindowOrOfAnotherScopeDoNotCount() throws {
        let dir = TemporaryDirectory("claims-window")
        let old = try LedgerSegmentWriter(directory: dir.file("ledger"), name: "box-old.seg", campaign: "winter", scope: "marketing")
        try old.append(hashes: [1], seconds: 1000, kind: .claims)
        let news = try LedgerSegmentWriter(directory: dir.file("ledger"), name: "box-news.seg", campaign: "daily", scope: "news")
        try news.append(hashes: [2], seconds: 100_000, kind: .claims)
        let recent = try LedgerSegmentWriter(directory: dir.file("ledger"), name: "box-new.seg", campaign: "autumn", scope: "marketing")
        try recent.append(hashes: [3], seconds: 100_000, kind: .entries)
        let c = try Self.claimer("spring", in: dir)
        _ = c.begin(now: 100_500, stopped: { false })
        #expect(c.admit(hash: 1, shard: 0, ordinal: 0), "a day and more ago")
        #expect(c.admit(hash: 2, shard: 0, ordinal: 1), "another scope")
        #expect(!c.admit(hash: 3, shard: 0, ordinal: 2), "an older send's accepted entry counts")
        try c.end(now: 100_500)
    }

    @Test func aLockHeldElsewhereIsWaitedForBoundedAndWakesOnStop() throws {
        let dir = TemporaryDirectory("claims-lock")
        let c = try Self.claimer("spring", in: dir)
        let fd = open(dir.file("ledger/\(LedgerFormat.claimLockName(scope: "marketing"))"), O_RDWR)
        #expect(fd >= 0 && flock(fd, LOCK_EX) == 0)
        defer { close(fd) }
        // Stopping: no wait at all.
        let started = Deadline.now()
        #expect(c.begin(now: 1, stopped: { true }) == .notLocked(waitedSeconds: 0))
        #expect(!c.admit(hash: 5, shard: 0, ordinal: 0), "nothing goes out unclaimed")
        try c.end(now: 1)
        #expect(Deadline.now().nanoseconds - started.nanoseconds < 1_000_000_000)
        // Held elsewhere past the wait: not locked, and nothing admitted or claimed.
        c.lockWaitSeconds = 0.3
        #expect(c.begin(now: 2, stopped: { false }) == .notLocked(waitedSeconds: 0))
        #expect(!c.admit(hash: 5, shard: 0, ordinal: 0))
        try c.end(now: 2)
        #expect(c.claimsWritten == 0 && c.refused == 0)
        // Once it is free: locked again.
        #expect(flock(fd, LOCK_UN) == 0)
        #expect(c.begin(now: 3, stopped: { false }) == .locked)
        #expect(c.admit(hash: 5, shard: 0, ordinal: 0))
        try c.end(now: 3)
        #expect(c.claimsWritten == 1)
    }
}
