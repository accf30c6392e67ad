import Foundation
import Testing
import CampaignTestSupport
import PlanStream
import SendJournal
@testable import SendEngine

/// A campaign's rate over its parts: each running part takes an equal share,
/// judged from the journals beside its own.
@Suite struct CampaignRateTests {
    static let hash = "c0ffee"

    static func header(_ index: Int) -> PlanHeader { PartJournals.header(index, hash: hash) }
    static func settings(_ index: Int, rateTotal: Int? = nil) -> SendSettings { PartJournals.settings(index, rateTotal: rateTotal) }

    /// Starts part `index` of 3 (the job's throttle: 900 a second) in `directory`.
    static func startPart(_ index: Int, in directory: String, hash: String = hash, rateTotal: Int? = nil) throws -> Journal {
        try PartJournals.start(index, in: directory, hash: hash, rateTotal: rateTotal)
    }

    @Test func aPartAloneTakesItsThirdAndSharesWithThePartsThatStartBesideIt() throws {
        let dir = TemporaryDirectory("campaign-rate")
        let own = try Self.startPart(0, in: dir.file("0"))
        let rate = CampaignRate(totalPerSecond: 900, journal: dir.file("0"), part: PlanPart(index: 0, count: 3, campaignHash: Self.hash))
        #expect(rate.perSecond(now: 0) == 300, "no other part in sight: a third")
        let second = try Self.startPart(1, in: dir.file("1"))
        #expect(rate.perSecond(now: 0.1) == 300, "looked at again only after a quarter of a second")
        #expect(rate.perSecond(now: 0.25) == 450, "two parts run")
        // A part of another planning run beside them takes nothing from this one's rate.
        let stranger = try Self.startPart(2, in: dir.file("x"), hash: "other")
        let third = try Self.startPart(2, in: dir.file("2"))
        #expect(rate.perSecond(now: 0.5) == 300)
        _ = (own, second, stranger, third)
    }

    /// A part's directory appears (and its lock is taken) before its journal
    /// does: a look in between must not settle that it is not of this run.
    @Test func aPartSeenBeforeItsJournalIsWrittenIsCountedOnceItIs() throws {
        let dir = TemporaryDirectory("campaign-rate")
        let own = try Self.startPart(0, in: dir.file("0"))
        let rate = CampaignRate(totalPerSecond: 900, journal: dir.file("0"), part: PlanPart(index: 0, count: 3, campaignHash: Self.hash))
        try FileManager.default.createDirectory(atPath: dir.file("1"), withIntermediateDirectories: false)
        #expect(CampaignRate.origin(ofJournal: dir.file("1")) == .unknown)
        #expect(rate.perSecond(now: 0) == 300)
        let second = try Self.startPart(1, in: dir.file("1"))
        #expect(CampaignRate.origin(ofJournal: dir.file("1")) == .part(campaignHash: Self.hash))
        #expect(rate.perSecond(now: 0.25) == 450, "the part that started is counted")
        let third = try Self.startPart(2, in: dir.file("2"))
        #expect(rate.perSecond(now: 0.5) == 300, "three parts at once keep to the campaign's rate")
        _ = (own, second, third)
    }

    @Test func aPartThatEndsLeavesItsShareToTheOthers() throws {
        let dir = TemporaryDirectory("campaign-rate")
        let own = try Self.startPart(0, in: dir.file("0"))
        var others: [Journal]? = [try Self.startPart(1, in: dir.file("1")), try Self.startPart(2, in: dir.file("2"))]
        let rate = CampaignRate(totalPerSecond: 900, journal: dir.file("0"), part: PlanPart(index: 0, count: 3, campaignHash: Self.hash))
        #expect(rate.perSecond(now: 0) == 300)
        others = nil   // their sends end: the locks are let go
        #expect(rate.perSecond(now: 0.25) == 900)
        _ = (own, others)
    }

    @Test func aStartRecordLongerThanOneReadIsReadWhole() throws {
        let dir = TemporaryDirectory("campaign-rate")
        var header = Self.header(1)
        header.campaign = String(repeating: "n", count: 200_000)
        let journal = try Journal.create(directory: dir.file("1"), settings: SendSettings(gatewayHost: "127.0.0.1", gatewayPort: 2197, certificate: "c.pem"),
                                         planHeader: header.json)
        #expect(CampaignRate.origin(ofJournal: dir.file("1")) == .part(campaignHash: Self.hash))
        _ = journal
    }

    /// One part started with `--rate-total 600` beside parts of a job at 900:
    /// every running part keeps to the lowest, whichever was given it.
    @Test func partsGivenDifferentRatesKeepToTheLowest() throws {
        let dir = TemporaryDirectory("campaign-rate")
        let own = try Self.startPart(0, in: dir.file("0"))
        let rate = CampaignRate(totalPerSecond: 900, journal: dir.file("0"), part: PlanPart(index: 0, count: 3, campaignHash: Self.hash))
        #expect(rate.perSecond(now: 0) == 300)
        var slower: Journal? = try Self.startPart(1, in: dir.file("1"), rateTotal: 600)
        #expect(rate.perSecond(now: 0.25) == 300 && rate.agreedPerSecond == 600, "600 over two parts")
        // Resumed with --rate-total 450: its latest start record holds.
        try slower?.append(.start(settings: Self.settings(1, rateTotal: 450), planHeader: Self.header(1).json))
        try slower?.flush()
        #expect(rate.perSecond(now: 0.5) == 225 && rate.agreedPerSecond == 450)
        // It ends: its rate no longer holds the others back.
        slower = nil
        #expect(rate.perSecond(now: 0.75) == 900 && rate.agreedPerSecond == 900)
        _ = own
    }

    /// A journal's torn last line is cut by the resume that follows, which
    /// writes its start record where the torn line was: it is read whole.
    @Test func aStartRecordWrittenOverATornTailIsRead() throws {
        let dir = TemporaryDirectory("campaign-rate")
        let own = try Self.startPart(0, in: dir.file("0"))
        let rate = CampaignRate(totalPerSecond: 900, journal: dir.file("0"), part: PlanPart(index: 0, count: 3, campaignHash: Self.hash))
        var first: Journal? = try Self.startPart(1, in: dir.file("1"))
        first = nil   // killed
        let log = dir.file("1/\(Journal.logName)")
        let handle = try #require(FileHandle(forWritingAtPath: log))
        try handle.seekToEnd()
        // Torn: its checksum does not match what was written of it (the end of the line was written first).
        try handle.write(contentsOf: Data("1234abcd {\"t\":\"sent\",\"below\":{\"0\":1\n".utf8))
        try handle.close()
        #expect(rate.perSecond(now: 0) == 900, "part 1 is not running")
        // The resume cuts the torn tail and goes on from there, given 300 a second.
        let (resumed, _) = try Journal.resume(directory: dir.file("1"))
        try resumed.append(.start(settings: Self.settings(1, rateTotal: 300), planHeader: Self.header(1).json))
        try resumed.flush()
        #expect(rate.perSecond(now: 0.25) == 150 && rate.agreedPerSecond == 300)
        _ = (own, first)
    }
}
