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

    /// Starts part `index` of 3 in `directory` (its journal, holding its lock while the send runs).
    static func startPart(_ index: Int, in directory: String, hash: String = hash) throws -> Journal {
        let part = PlanPart(index: index, count: 3, campaignHash: hash)
        var header = PlanHeader(campaign: "paced", wire: .http2, expiry: 0, priority: nil, maxPayload: 4096, shards: 3, created: 1, part: part)
        header.http2 = .init(topic: "com.example.campaign", pushType: "alert", collapseId: nil)
        var settings = SendSettings(gatewayHost: "127.0.0.1", gatewayPort: 2197, certificate: "c.pem")
        settings.planPath = "/p/part-\(index).plan"
        return try Journal.create(directory: directory, settings: settings, planHeader: header.json)
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
        var header = PlanHeader(campaign: String(repeating: "n", count: 200_000), wire: .http2, expiry: 0, priority: nil,
                                maxPayload: 4096, shards: 3, created: 1, part: PlanPart(index: 1, count: 3, campaignHash: Self.hash))
        header.http2 = .init(topic: "com.example.campaign", pushType: "alert", collapseId: nil)
        let journal = try Journal.create(directory: dir.file("1"), settings: SendSettings(gatewayHost: "127.0.0.1", gatewayPort: 2197, certificate: "c.pem"),
                                         planHeader: header.json)
        #expect(CampaignRate.origin(ofJournal: dir.file("1")) == .part(campaignHash: Self.hash))
        _ = journal
    }
}
