#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import CampaignIO
import CampaignTestSupport
@testable import SendLedger
import ByteStreams

@Suite struct SendLedgerTests {
    static func bytes(_ path: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: path))) }

    @Test func theFormatsBytesAreFixed() throws {
        // The file header: magic, version 1, zero, CRC-32 of the first 12 bytes.
        let header = LedgerFormat.fileHeader()
        #expect(header.count == 16)
        #expect(Array(header[0..<12]) == Array("CLEDGER".utf8) + [0, 1, 0, 0, 0])
        var crc = CRC32()
        crc.update(Array(header[0..<12]))
        #expect(Array(header[12..<16]) == withUnsafeBytes(of: crc.value.littleEndian) { Array($0) })
        // An entry: hash u64, campaign u32, seconds u32, little-endian: 16 bytes.
        var entry: [UInt8] = []
        LedgerFormat.appendEntry(hash: 0x0102_0304_0506_0708, campaign: 0x0A0B_0C0D, seconds: 1_700_000_000, to: &entry)
        #expect(entry == [8, 7, 6, 5, 4, 3, 2, 1, 0x0D, 0x0C, 0x0B, 0x0A, 0x00, 0xF1, 0x53, 0x65])
        // A block: kind, 3 zeros, length, CRC-32 of the payload, 4 zeros, payload.
        let block = LedgerFormat.block(kind: .entries, payload: entry)
        #expect(Array(block[0..<8]) == [1, 0, 0, 0, 16, 0, 0, 0])
        #expect(Array(block[12..<16]) == [0, 0, 0, 0])
        #expect(Array(block[16...]) == entry)
        // The project's hash: FNV-1a-64 (the shard hash), and names by its low 32 bits.
        #expect(LedgerFormat.tokenHash(Array("a".utf8)) == 0xAF63_DC4C_8601_EC8C)
        #expect(LedgerFormat.nameID("a") == 0x8601_EC8C)
        #expect(LedgerFormat.entryBytes == 16)
    }

    @Test func aSegmentIsWrittenReadAndItsNameIsPerHostAndJournal() throws {
        let dir = TemporaryDirectory("ledger-rw")
        let name = LedgerFormat.segmentName(journalDirectory: dir.file("journal"), host: "box-1")
        #expect(name.hasPrefix("box-1-") && name.hasSuffix(".seg") && name.count == "box-1-".count + 16 + 4)
        #expect(name != LedgerFormat.segmentName(journalDirectory: dir.file("journal2"), host: "box-1"))
        let w = try LedgerSegmentWriter(directory: dir.file("ledger"), name: name, campaign: "spring", scope: "marketing")
        try w.append(hashes: [1, 2, 3], seconds: 1000)
        try w.sync()
        let bytes = try Self.bytes(dir.file("ledger/\(name)"))
        // Header 16, names block 16 + 4 + 2 + 6 + 2 + 9, entries block 16 + 48.
        #expect(bytes.count == 16 + 39 + 64)
        let other = try LedgerSegmentWriter(directory: dir.file("ledger"), name: "box-2-x.seg", campaign: "autumn", scope: "marketing")
        try other.append(hashes: [3, 4], seconds: 5000)
        let view = try LedgerReader.load(directory: dir.file("ledger"),
                                         filter: .init(campaign: "spring", cap: FrequencyCap(max: 2, perSeconds: 3000, scope: "marketing"), now: 6000))
        #expect(view.entriesRead == 5 && view.segments == 2 && view.tornSegments == 0)
        // spring's entries are outside the window (1000 < 3000) but mark the devices reached; autumn's count.
        #expect(view.flags(1) == LedgerView.reachedBit)
        #expect(view.flags(3) == LedgerView.reachedBit | 1)
        #expect(view.flags(4) == 1)
        #expect(view.flags(9) == 0)
        // Another scope does not count.
        let notMine = try LedgerReader.load(directory: dir.file("ledger"),
                                            filter: .init(campaign: "x", cap: FrequencyCap(max: 2, perSeconds: 99_999, scope: "news"), now: 6000))
        #expect(notMine.devices == 0)
    }

    @Test func aTornTailIsIgnoredByReadersAndCutOffByTheNextWriter() throws {
        let dir = TemporaryDirectory("ledger-torn")
        let ledger = dir.file("ledger")
        do {
            let w = try LedgerSegmentWriter(directory: ledger, name: "h-1.seg", campaign: "c", scope: "s")
            try w.append(hashes: [10, 11], seconds: 100)
            try w.append(hashes: [12, 13], seconds: 100)
        }
        let path = "\(ledger)/h-1.seg"
        let whole = try Self.bytes(path)
        let filter = LedgerReader.Filter(campaign: "c", cap: nil, now: 200)
        // Every cut inside the last block (a crash mid-write) loses that block only.
        for cut in stride(from: whole.count - 1, to: whole.count - 48, by: -5) {
            try Data(whole[0..<cut]).write(to: URL(fileURLWithPath: path))
            let view = try LedgerReader.load(directory: ledger, filter: filter)
            #expect(view.entriesRead == 2 && view.tornSegments == 1, "cut at \(cut)")
            #expect(view.flags(11) != 0 && view.flags(12) == 0)
        }
        // A flipped byte in the last block's payload: its CRC fails, the block is ignored.
        var flipped = whole
        flipped[whole.count - 3] ^= 0xFF
        try Data(flipped).write(to: URL(fileURLWithPath: path))
        #expect(try LedgerReader.load(directory: ledger, filter: filter).entriesRead == 2)
        // The next writer of that segment (a resume) cuts the tail off and goes on.
        let w = try LedgerSegmentWriter(directory: ledger, name: "h-1.seg", campaign: "c", scope: "s")
        try w.append(hashes: [14], seconds: 100)
        let view = try LedgerReader.load(directory: ledger, filter: filter)
        #expect(view.entriesRead == 3 && view.tornSegments == 0)
        #expect(view.flags(14) != 0 && view.flags(12) == 0)
        // Garbage that is not a segment is ignored.
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: "\(ledger)/junk.seg"))
        #expect(try LedgerReader.load(directory: ledger, filter: filter).entriesRead == 3)
    }

    @Test func pruneRewritesWithoutOldEntriesAndRemovesEmptySegments() throws {
        let dir = TemporaryDirectory("ledger-prune")
        let ledger = dir.file("ledger")
        do {
            let a = try LedgerSegmentWriter(directory: ledger, name: "h-a.seg", campaign: "old-and-new", scope: "s")
            try a.append(hashes: [1, 2], seconds: 100)
            try a.append(hashes: [3], seconds: 900)
            let b = try LedgerSegmentWriter(directory: ledger, name: "h-b.seg", campaign: "old", scope: "s")
            try b.append(hashes: [4], seconds: 100)
            let c = try LedgerSegmentWriter(directory: ledger, name: "h-c.seg", campaign: "new", scope: "s")
            try c.append(hashes: [5], seconds: 800)
        }
        let r = try LedgerMaintenance.prune(directory: ledger, olderThan: 500)
        #expect(r == LedgerMaintenance.PruneResult(segments: 3, rewritten: 1, removed: 1, busy: 0, entriesKept: 2, entriesDropped: 3))
        #expect(try LedgerReader.segments(of: ledger).map { ($0 as NSString).lastPathComponent } == ["h-a.seg", "h-c.seg"])
        let stats = try LedgerMaintenance.stats(directory: ledger)
        #expect(stats.entries == 2 && stats.segments == 2)
        #expect(stats.campaigns[LedgerFormat.nameID("old-and-new")]?.entries == 1)
        #expect(stats.campaigns[LedgerFormat.nameID("old-and-new")]?.scope == "s")
        // A segment a send holds open is left for the next prune.
        let open = try LedgerSegmentWriter(directory: ledger, name: "h-c.seg", campaign: "new", scope: "s")
        #expect(try LedgerMaintenance.prune(directory: ledger, olderThan: 850).busy == 1)
        _ = open
        let mode = try FileManager.default.attributesOfItem(atPath: "\(ledger)/h-a.seg")[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    @Test func theViewCountsSaturatesAndGrows() {
        var v = LedgerView()
        for i in 1...10_000 as ClosedRange<UInt64> { v.add(i &* 0x9E37_79B9, reached: i % 2 == 0, counted: true) }
        for _ in 0..<200 { v.add(7 &* 0x9E37_79B9, reached: false, counted: true) }
        #expect(v.devices == 10_000)
        #expect(v.flags(2 &* 0x9E37_79B9) == LedgerView.reachedBit | 1)
        #expect(v.flags(3 &* 0x9E37_79B9) == 1)
        #expect(v.flags(7 &* 0x9E37_79B9) == 0x7F)
        #expect(v.flags(123_456_789) == 0)
    }

    @Test func segmentsOfOtherCampaignsOutsideTheWindowAreSkippedByTheirTime() throws {
        let dir = TemporaryDirectory("ledger-skip")
        let ledger = dir.file("ledger")
        let now: UInt32 = 1_800_000_000
        let cap = FrequencyCap(max: 1, perSeconds: 86_400, scope: "marketing")
        func write(_ name: String, campaign: String, scope: String, at: UInt32) throws {
            let w = try LedgerSegmentWriter(directory: ledger, name: name, campaign: campaign, scope: scope)
            try w.append(hashes: [7], seconds: at)
            setModificationTime("\(ledger)/\(name)", seconds: at + 1)
        }
        try write("h-old.seg", campaign: "old", scope: "marketing", at: now - 3 * 86_400)
        try write("h-other.seg", campaign: "receipt", scope: "transactional", at: now - 60)
        try write("h-mine.seg", campaign: "promo", scope: "marketing", at: now - 30 * 86_400)
        try write("h-new.seg", campaign: "new", scope: "marketing", at: now - 3600)
        let view = try LedgerReader.load(directory: ledger, filter: .init(campaign: "promo", cap: cap, now: now))
        // Read: this campaign's (however old) and the scope's within the window; skipped: the rest, unread.
        #expect(view.segmentsSkipped == 2 && view.entriesRead == 2)
        #expect(view.flags(7) == LedgerView.reachedBit | 1)
        // Within the clock skew of the window's start, a segment is read.
        setModificationTime("\(ledger)/h-old.seg", seconds: now - 86_400 - LedgerReader.clockSkewSeconds / 2)
        let skewed = try LedgerReader.load(directory: ledger, filter: .init(campaign: "promo", cap: cap, now: now))
        #expect(skewed.segmentsSkipped == 1 && skewed.entriesRead == 3)
        // A prune keeps a segment's time its newest entry's.
        let w = try LedgerSegmentWriter(directory: ledger, name: "h-two.seg", campaign: "two", scope: "marketing")
        try w.append(hashes: [8], seconds: now - 10 * 86_400)
        try w.append(hashes: [9], seconds: now - 5 * 86_400)
        _ = consume w
        _ = try LedgerMaintenance.prune(directory: ledger, olderThan: now - 7 * 86_400)
        let mtime = try #require(FileManager.default.attributesOfItem(atPath: "\(ledger)/h-two.seg")[.modificationDate] as? Date)
        #expect(UInt32(mtime.timeIntervalSince1970) == now - 5 * 86_400 + 1)
    }
}

extension SendLedgerTests {
    /// A ledger that cannot be read is an error, never an empty ledger a plan goes on without; a missing one is a first campaign's.
    @Test func aLedgerThatIsAFileOrUnreadableIsAnErrorAndAMissingOneIsEmpty() throws {
        let dir = TemporaryDirectory("ledger-paths")
        FileManager.default.createFile(atPath: dir.file("afile"), contents: Data())
        #expect(throws: LedgerError.self) { try LedgerReader.segments(of: dir.file("afile")) }
        #expect(try LedgerReader.segments(of: dir.file("not-yet")).isEmpty)
        #expect(throws: LedgerError.self) { try LedgerSegmentWriter.checkDirectory(dir.file("afile")) }
        try LedgerSegmentWriter.checkDirectory(dir.file("new"))
        var isDirectory: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: dir.file("new"), isDirectory: &isDirectory) && isDirectory.boolValue, "made for the send")
    }
}

extension SendLedgerTests {
    /// A flipped byte in the middle of a segment loses its block only, and
    /// says so: every entry after it is still read (a single bad byte dropped
    /// a whole segment, and the devices it named got a third push; found by a
    /// new user's trial), and the next writer keeps them.
    @Test func aDamagedBlockInTheMiddleLosesThatBlockOnlyAndIsTold() throws {
        let dir = TemporaryDirectory("ledger-damaged")
        let ledger = dir.file("ledger")
        do {
            let w = try LedgerSegmentWriter(directory: ledger, name: "h-1.seg", campaign: "c", scope: "s")
            try w.append(hashes: [10, 11], seconds: 100)
            try w.append(hashes: [12, 13], seconds: 100)
            try w.append(hashes: [14, 15], seconds: 100)
        }
        let path = "\(ledger)/h-1.seg"
        var bytes = try Self.bytes(path)
        // The second entries block's payload: 2 entries of 16 bytes, then the third block (16 + 32 bytes).
        bytes[bytes.count - 48 - 20] ^= 0x5A
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let filter = LedgerReader.Filter(campaign: "c", cap: nil, now: 200)
        let view = try LedgerReader.load(directory: ledger, filter: filter)
        #expect(view.entriesRead == 4 && view.corruptEntries == 2 && view.corruptSegments == [path] && view.tornSegments == 0)
        #expect(view.flags(10) != 0 && view.flags(12) == 0 && view.flags(15) != 0, "the blocks after the damaged one are read")
        let w = try LedgerSegmentWriter(directory: ledger, name: "h-1.seg", campaign: "c", scope: "s")
        try w.append(hashes: [16], seconds: 100)
        #expect(try LedgerReader.load(directory: ledger, filter: filter).flags(15) != 0, "a resumed writer does not cut off what follows the damage")
    }
}
