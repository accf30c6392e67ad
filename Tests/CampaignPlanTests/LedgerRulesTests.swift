import Foundation
import Testing
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import CampaignTestSupport
import PlanStream
import SendLedger
@testable import CampaignPlan

@Suite struct LedgerRulesTests {
    static func job(_ extra: String) throws -> CampaignJob {
        try CampaignJob(json: JSONValue.parse(#"{"campaign":"promo"\#(extra),"messages":{"en":{"alert":"Hi {n}"}}}"#), path: "job.json")
    }

    @Test func frequencyCapIsReadAndCheckedInTheJob() throws {
        let cap = try Self.job(#","frequencyCap":{"max":2,"per":"24h","scope":"marketing"}"#).frequencyCap
        #expect(cap == FrequencyCap(max: 2, perSeconds: 86_400, scope: "marketing"))
        #expect(try Self.job(#","frequencyCap":{"max":1,"per":3600,"scope":"news"}"#).frequencyCap?.perSeconds == 3600)
        #expect(try Self.job("").frequencyCap == nil)
        for bad in [#"{"max":0,"per":"24h","scope":"m"}"#, #"{"max":2,"per":"24x","scope":"m"}"#, #"{"max":2,"per":"24h"}"#,
                    #"{"max":2,"per":"91d","scope":"m"}"#, #"{"max":2,"per":"24h","scope":"m","extra":1}"#, #""24h""#] {
            #expect(throws: JobError.self, "\(bad)") { try Self.job(#","frequencyCap":\#(bad)"#) }
        }
    }

    @Test func thePlanDropsByRuleListsEachDropAndKeepsTheCapInItsHeader() throws {
        let dir = TemporaryDirectory("ledger-rules")
        let tokens = (0..<6).map { i in String(format: "%064x", i + 1) }
        try ("token,lang,n\n" + tokens.enumerated().map { "\($1),en,\($0)\n" }.joined()).write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        let now: UInt32 = 1_700_000_000
        // Device 0: reached by promo; 1 and 2: two of the scope within the day; 3: two, one of them too old; 4: another scope.
        let w = try LedgerSegmentWriter(directory: dir.file("ledger"), name: "h-1.seg", campaign: "promo", scope: "marketing")
        try w.append(hashes: [LedgerFormat.tokenHash(DeviceTokenBytes.of(tokens[0]))], seconds: now - 100 * 86_400)
        let x = try LedgerSegmentWriter(directory: dir.file("ledger"), name: "h-2.seg", campaign: "flash", scope: "marketing")
        try x.append(hashes: [1, 2, 3].map { LedgerFormat.tokenHash(DeviceTokenBytes.of(tokens[$0])) }, seconds: now - 3600)
        let y = try LedgerSegmentWriter(directory: dir.file("ledger"), name: "h-3.seg", campaign: "teaser", scope: "marketing")
        try y.append(hashes: [1, 2].map { LedgerFormat.tokenHash(DeviceTokenBytes.of(tokens[$0])) }, seconds: now - 7200)
        try y.append(hashes: [3].map { LedgerFormat.tokenHash(DeviceTokenBytes.of(tokens[$0])) }, seconds: now - 2 * 86_400)
        let z = try LedgerSegmentWriter(directory: dir.file("ledger"), name: "h-4.seg", campaign: "receipt", scope: "transactional")
        try z.append(hashes: [4, 4].map { LedgerFormat.tokenHash(DeviceTokenBytes.of(tokens[$0])) }, seconds: now - 60)
        let job = try Self.job(#","frequencyCap":{"max":2,"per":"24h","scope":"marketing"}"#)
        func plan(allowRepeat: Bool) throws -> (PlanSummary, String, PlanHeader) {
            var options = PlanOptions(now: now)
            options.rules = try LedgerRules.load(directory: dir.file("ledger"), campaign: "promo", cap: job.frequencyCap, allowRepeat: allowRepeat, now: now)
            let planner = try Planner(job: job, options: options)
            let summary = try planner.run(reader: AudienceFile.open(dir.file("a.csv")), plan: PlanWriter(path: dir.file("plan")),
                                          rejects: RejectsWriter(path: dir.file("rejects")))
            return (summary, try String(contentsOfFile: dir.file("rejects"), encoding: .utf8), planner.header)
        }
        let (summary, rejects, header) = try plan(allowRepeat: false)
        #expect(summary.planned == 3 && summary.rejected == [.alreadySent: 1, .frequencyCapped: 2])
        #expect(summary.droppedByRules == 3)
        #expect(rejects.contains(#""token":"\#(tokens[0])","code":"already_sent""#))
        #expect(rejects.contains(#""token":"\#(tokens[1])","code":"frequency_capped""#))
        #expect(!rejects.contains(tokens[3]) && !rejects.contains(tokens[4]))
        #expect(summary.text.contains("campaign rules (not bad rows, not counted toward --max-reject-rate): already_sent 1, frequency_capped 2"))
        #expect(header.frequencyCap == job.frequencyCap)
        #expect(try PlanHeader(json: header.json).frequencyCap == job.frequencyCap)
        let repeated = try plan(allowRepeat: true).0
        #expect(repeated.planned == 4 && repeated.rejected == [.frequencyCapped: 2])
    }

    /// The holdout is drawn from the devices the rules leave: a control group
    /// holding devices the campaign could not have reached would skew the
    /// comparison (found by a new user's trial: 58 of 93 held out were capped).
    @Test func theHoldoutIsDrawnFromTheDevicesTheRulesLeave() throws {
        let dir = TemporaryDirectory("ledger-holdout")
        let tokens = (0..<400).map { i in String(format: "%064x", i &* 2_654_435_761 &+ 17) }
        try ("token,lang\n" + tokens.map { "\($0),en\n" }.joined()).write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        let now: UInt32 = 1_700_000_000
        let capped = Set(tokens.prefix(300))
        for (k, campaign) in ["one", "two"].enumerated() {
            let w = try LedgerSegmentWriter(directory: dir.file("ledger"), name: "h-\(k).seg", campaign: campaign, scope: "marketing")
            try w.append(hashes: capped.map { LedgerFormat.tokenHash(DeviceTokenBytes.of($0)) }, seconds: now - 600)
        }
        let job = try CampaignJob(json: JSONValue.parse(#"""
            {"campaign": "ab", "frequencyCap": {"max": 2, "per": "24h", "scope": "marketing"},
             "variants": [{"name": "A", "weight": 50, "messages": {"en": {"alert": "A"}}}, {"name": "control", "weight": 50, "holdout": true}]}
            """#), path: "job.json")
        var options = PlanOptions(now: now)
        options.rules = try LedgerRules.load(directory: dir.file("ledger"), campaign: "ab", cap: job.frequencyCap, allowRepeat: false, now: now)
        let summary = try Planner(job: job, options: options).run(reader: AudienceFile.open(dir.file("a.csv")), plan: PlanWriter(path: dir.file("plan")),
                                                                  rejects: RejectsWriter(path: dir.file("rejects")), holdout: HoldoutWriter(path: dir.file("holdout")))
        #expect(summary.rejected[.frequencyCapped] == 300, "every capped device dropped by its rule, held out or not")
        let held = try String(contentsOfFile: dir.file("holdout"), encoding: .utf8).split(separator: "\n")
            .compactMap { try? JSONValue.parse(String($0))["token"]?.stringValue }
        #expect(!held.isEmpty && capped.isDisjoint(with: held), "\(capped.intersection(held).count) capped devices held out")
        #expect(summary.planned + held.count == 100)
    }
}

enum DeviceTokenBytes {
    static func of(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var i = hex.startIndex
        while i < hex.endIndex {
            let j = hex.index(i, offsetBy: 2)
            out.append(UInt8(hex[i..<j], radix: 16)!)
            i = j
        }
        return out
    }
}
