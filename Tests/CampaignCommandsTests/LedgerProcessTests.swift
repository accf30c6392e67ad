import Foundation
import Testing
import CampaignIO
import CampaignJSON
import PlanStream
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import SendJournal
import ByteStreams

/// The send ledger and the campaign rules that read it, as an operator runs
/// them: `plan --ledger`, `send --ledger`, against the simulator's record.
@Suite(.ownThreads) struct LedgerProcessTests {
    /// A device's token: the same index is the same device in every audience.
    static func token(_ i: Int) -> String { String(format: "%016llx%016llx%016llx%016llx", 0x1ED6E7, i, i &* 7919, i ^ 0x5A5A) }

    static func audience(_ indices: some Sequence<Int>, to path: String) throws {
        var csv = "token,lang,n\n"
        for i in indices { csv += "\(token(i)),en,\(i)\n" }
        try csv.write(toFile: path, atomically: true, encoding: .utf8)
    }

    static func job(_ campaign: String, cap: Int? = 2, to path: String) throws {
        let rule = cap.map { #","frequencyCap":{"max":\#($0),"per":"24h","scope":"marketing"}"# } ?? ""
        try #"{"campaign":"\#(campaign)"\#(rule),"messages":{"en":{"alert":"Hello {n}"}}}"#.write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// Plans `campaign` (its job and audience files in `dir`) with the ledger; the exit status and the summary.
    static func plan(_ campaign: String, in dir: TemporaryDirectory, extra: [String] = []) throws -> (status: Int32?, summary: JSONValue?, stderr: String) {
        let run = try CampaignProcess(["plan", "\(campaign).json", "\(campaign).csv", "--out", "\(campaign).plan", "--ledger", "ledger",
                                       "--summary", "\(campaign).summary.json"] + extra, in: dir.path)
        let status = run.wait(timeout: 120)
        let summary = try? JSONValue.parse(String(contentsOfFile: dir.file("\(campaign).summary.json"), encoding: .utf8))
        return (status, summary, run.stderr)
    }

    static func send(_ plan: String, journal: String, in dir: TemporaryDirectory, port: Int, extra: [String] = []) throws -> CampaignProcess {
        try CampaignProcess(["send", plan, "--journal", journal, "--gateway", "127.0.0.1:\(port)", "--ledger", "ledger"] + extra
                            + SendProcessTests.credentials(), in: dir.path)
    }

    /// The rejects file's lines with `code`, as tokens.
    static func rejected(_ campaign: String, code: String, in dir: TemporaryDirectory) throws -> [String] {
        let text = (try? String(contentsOfFile: dir.file("\(campaign).plan.rejects.ndjson"), encoding: .utf8)) ?? ""
        return try text.split(separator: "\n").compactMap { line in
            let v = try JSONValue.parse(String(line))
            return v["code"]?.stringValue == code ? v["token"]?.stringValue : nil
        }
    }

    /// A ledger that is not there is a mistyped path to `stats` and `prune`
    /// (66, naming it), not an empty ledger; `--allow-repeat` without a
    /// ledger is a usage error, not a flag silently ignored.
    @Test func aMissingLedgerAndAnAllowRepeatWithoutOneAreSaidSo() throws {
        let dir = TemporaryDirectory("ledger-missing")
        let stats = try PlanProcessTests.run(["ledger", "stats", "nowhere"], in: dir)
        #expect(stats.status == 66 && stats.err.contains("nowhere: no such ledger directory"), "\(stats.err)")
        let prune = try PlanProcessTests.run(["ledger", "prune", "nowhere", "--older-than", "90d"], in: dir)
        #expect(prune.status == 66 && prune.err.contains("nowhere: no such ledger directory"), "\(prune.err)")
        try FileManager.default.createDirectory(atPath: dir.file("empty"), withIntermediateDirectories: true)
        let empty = try PlanProcessTests.run(["ledger", "stats", "empty"], in: dir)
        #expect(empty.status == 0 && String(decoding: empty.out, as: UTF8.self).contains("0 segments"), "an empty ledger is a ledger: \(empty.err)")
        try #"{"campaign":"r","messages":{"en":{"alert":"Hi"}}}"#.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        try "token,lang\n\(String(repeating: "ab", count: 32)),en\n".write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        let repeatAlone = try PlanProcessTests.run(["plan", "job.json", "a.csv", "--out", "plan", "--allow-repeat"], in: dir)
        #expect(repeatAlone.status == 64 && repeatAlone.err.contains("--allow-repeat goes with --ledger DIR"), "\(repeatAlone.err)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("plan")))
    }

    @Test func threeJobsInOneScopeUnderACapOfTwoNeverReachADeviceAThirdTime() throws {
        let dir = TemporaryDirectory("ledger-three")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        // Evening: 0..<400 twice, then 0..<500: the third campaign reaches only 400..<500.
        try Self.audience(0..<400, to: dir.file("eve-a.csv"))
        try Self.audience(100..<400, to: dir.file("eve-b.csv"))
        try Self.audience(0..<500, to: dir.file("eve-c.csv"))
        for name in ["eve-a", "eve-b", "eve-c"] { try Self.job(name, to: dir.file("\(name).json")) }
        var capped: [String: Int] = [:]
        for name in ["eve-a", "eve-b", "eve-c"] {
            let (status, summary, stderr) = try Self.plan(name, in: dir)
            // eve-c drops 300 of 500 rows (60%): rule drops are not bad rows, so --max-reject-rate 0.5 lets it through.
            #expect(status == 0, "\(stderr)")
            capped[name] = Int(summary?["rejected_by_reason"]?["frequency_capped"]?.integerValue ?? 0)
            let sent = try Self.send("\(name).plan", journal: "j-\(name)", in: dir, port: simulator.port)
            #expect(sent.wait(timeout: 120) == 0, "\(sent.stderr)")
        }
        #expect(capped == ["eve-a": 0, "eve-b": 0, "eve-c": 300])
        // Each drop is listed with the rule as its reason.
        let listed = try Self.rejected("eve-c", code: "frequency_capped", in: dir)
        #expect(Set(listed) == Set((100..<400).map(Self.token)))
        let reasons = try String(contentsOfFile: dir.file("eve-c.plan.rejects.ndjson"), encoding: .utf8)
        #expect(reasons.contains("frequency capped: 2 notifications of scope marketing in the last 1 d, the cap is 2"))
        simulator.stop()
        let recorded = try SendProcessTests.recorded(dir)
        var perDevice: [String: Int] = [:]
        for t in recorded { perDevice[t, default: 0] += 1 }
        #expect(perDevice.values.max() == 2)
        #expect(recorded.count == 400 + 300 + 200)
        #expect(perDevice[Self.token(450)] == 1 && perDevice[Self.token(50)] == 2 && perDevice[Self.token(150)] == 2)
    }

    @Test func aReplanSentToANewJournalSendsNothingAgainUnlessAllowRepeat() throws {
        let dir = TemporaryDirectory("ledger-repeat")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        try Self.audience(0..<300, to: dir.file("promo.csv"))
        try Self.job("promo", cap: nil, to: dir.file("promo.json"))
        #expect(try Self.plan("promo", in: dir).status == 0)
        #expect(try Self.send("promo.plan", journal: "j1", in: dir, port: simulator.port).wait(timeout: 120) == 0)
        // A fresh export with 50 new devices, planned again: only those are planned.
        try Self.audience(0..<350, to: dir.file("promo.csv"))
        let again = try Self.plan("promo", in: dir)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.summary?["planned"]?.integerValue == 50)
        #expect(again.summary?["rejected_by_reason"]?["already_sent"]?.integerValue == 300)
        #expect(Set(try Self.rejected("promo", code: "already_sent", in: dir)) == Set((0..<300).map(Self.token)))
        #expect(try Self.send("promo.plan", journal: "j2", in: dir, port: simulator.port).wait(timeout: 120) == 0)
        #expect(try SendProcessTests.recorded(dir).count == 350)
        // --allow-repeat: everyone again.
        let repeated = try Self.plan("promo", in: dir, extra: ["--allow-repeat"])
        #expect(repeated.status == 0)
        #expect(repeated.summary?["planned"]?.integerValue == 350)
        #expect(try Self.send("promo.plan", journal: "j3", in: dir, port: simulator.port).wait(timeout: 120) == 0)
        simulator.stop()
        let recorded = try SendProcessTests.recorded(dir)
        #expect(recorded.count == 700)
        #expect(Set(recorded) == Set((0..<350).map(Self.token)))
    }

    /// The plan's tokens (hex) whose record `selected` picks, given the journal's state and the record's shard and ordinal.
    static func planTokens(journal: String, plan: String, _ selected: (JournalState, Int, Int) -> Bool) throws -> Set<String> {
        let state = try Journal.read(directory: journal)
        let reader = try PlanReader(source: FileSource(path: plan), path: plan)
        var ordinals: [Int: Int] = [:]
        var tokens = Set<String>()
        while let record = try reader.next() {
            let ordinal = ordinals[record.shard, default: 0]
            ordinals[record.shard] = ordinal + 1
            if selected(state, record.shard, ordinal) { tokens.insert(record.token.map { String(format: "%02x", $0) }.joined()) }
        }
        return tokens
    }

    /// The tokens the journal's write-ahead marks hold as handed to a connection (`sent`: below each shard's mark).
    static func journaledHanded(journal: String, plan: String) throws -> Set<String> {
        try planTokens(journal: journal, plan: plan) { state, shard, ordinal in ordinal < (state.sentBelow[shard] ?? 0) }
    }

    /// The tokens the journal holds as accepted: final ordinals that are not failures or skips.
    static func journaledAccepted(journal: String, plan: String) throws -> Set<String> {
        let state = try Journal.read(directory: journal)
        let notAccepted = Set(state.failures.map { "\($0.shard)/\($0.ordinal)" } + state.skipped.map { "\($0.shard)/\($0.ordinal)" })
        return try planTokens(journal: journal, plan: plan) { state, shard, ordinal in
            state.done[shard]?.contains(ordinal) == true && !notAccepted.contains("\(shard)/\(ordinal)")
        }
    }

    @Test func aSendKilledMidwayLeavesInTheLedgerEveryNotificationItJournaledAsAccepted() throws {
        let dir = TemporaryDirectory("ledger-kill")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        try Self.audience(0..<20_000, to: dir.file("night.csv"))
        try Self.job("night", to: dir.file("night.json"))
        #expect(try Self.plan("night", in: dir).status == 0)
        let run = try Self.send("night.plan", journal: "journal", in: dir, port: simulator.port,
                                extra: ["--connections", "2", "--rate", "4000", "--checkpoint-seconds", "0.2"])
        // Killed once the journal holds a thousand and more as accepted (bounded wait on the journal
        // itself: on a busy machine its proofs may lag the simulator's count by thousands).
        #expect(eventually(within: 60) { ((try? Journal.read(directory: dir.file("journal")))?.accepted ?? 0) >= 1500 })
        run.kill9()
        let accepted = try Self.journaledAccepted(journal: dir.file("journal"), plan: dir.file("night.plan"))
        #expect(accepted.count >= 1000 && accepted.count < 20_000, "\(accepted.count) accepted before the kill")
        // Another campaign of the scope with a cap of 1: every device the journal shows reached is capped.
        try Self.audience(0..<20_000, to: dir.file("later.csv"))
        try Self.job("later", cap: 1, to: dir.file("later.json"))
        let later = try Self.plan("later", in: dir)
        #expect(later.status == 0, "\(later.stderr)")
        let capped = Set(try Self.rejected("later", code: "frequency_capped", in: dir))
        #expect(accepted.subtracting(capped).isEmpty, "\(accepted.subtracting(capped).count) accepted notifications missing from the ledger")
        // What the ledger holds beyond what reached the gateway is what the kill cut off between
        // its claim and the gateway's reading: a claim is written as a connection takes a
        // notification, before its write-ahead mark and its bytes, and counts. So every such
        // device was handed over by the journal's marks (written, or in the sockets when the
        // kill came; how many, a loaded machine decides), but for what the two connections had
        // taken and not yet written: what --rate 4000 lets through in a quarter second at most
        // (5 and 42 on a quiet machine; the rate's burst is 400).
        let claimedNotReached = capped.subtracting(try SendProcessTests.recorded(dir))
        let handed = try Self.journaledHanded(journal: dir.file("journal"), plan: dir.file("night.plan"))
        #expect(claimedNotReached.subtracting(handed).count <= 1_000,
                "\(claimedNotReached.subtracting(handed).count) claimed but neither received nor handed over (of \(claimedNotReached.count) not received)")
        #expect(claimedNotReached.count < 20_000 - accepted.count, "the ledger claims what the send took, not the plan")
        // A power loss before the segment's fsync, as the worst case: its entries gone.
        let segments = try FileManager.default.contentsOfDirectory(atPath: dir.file("ledger")).filter { $0.hasSuffix(".seg") }
        #expect(segments.count == 1)
        let segment = dir.file("ledger/\(segments[0])")
        #expect(truncate(segment, 16 + 16 + 4 + 2 + "night".utf8.count + 2 + "marketing".utf8.count) == 0)
        // The resume merges what the journal holds and the segment lacks, then sends the rest.
        let resumed = try CampaignProcess(["send", "--resume", "journal"] + SendProcessTests.credentials(), in: dir.path)
        #expect(resumed.wait(timeout: 120) == 0, "\(resumed.stderr)")
        #expect(resumed.stderr.contains("\(accepted.count) notifications the journal holds as accepted were missing from the ledger and were added"))
        let last = try Self.plan("later", in: dir)
        #expect(last.summary?["rejected_by_reason"]?["frequency_capped"]?.integerValue == 20_000, "\(last.stderr)")
        simulator.stop()
    }

    /// A resume re-checks the cap of every record not yet sent: a campaign
    /// of the scope that went out while the first was stopped has reached
    /// its devices (it sent all 2,985 again, with no word).
    @Test(.timeLimit(.minutes(3))) func aResumeAfterAnotherCampaignOfTheScopeSkipsTheDevicesItReached() throws {
        let dir = TemporaryDirectory("ledger-resume")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        for name in ["early", "late"] {
            try Self.audience(0..<600, to: dir.file("\(name).csv"))
            try Self.job(name, cap: 1, to: dir.file("\(name).json"))
        }
        #expect(try Self.plan("early", in: dir).status == 0)
        let first = try Self.send("early.plan", journal: "j-early", in: dir, port: simulator.port, extra: ["--rate", "300"])
        #expect(simulator.waitForStatistics(timeout: 60) { $0.accepted >= 100 })
        kill(first.process.processIdentifier, SIGTERM)
        #expect(first.wait(timeout: 30) == 75, "\(first.stderr)")
        let sentEarly = try Journal.read(directory: dir.file("j-early")).accepted
        #expect(sentEarly > 0 && sentEarly < 600)
        // The second campaign of the scope: planned against the ledger (the first's devices dropped), sent whole.
        #expect(try Self.plan("late", in: dir).status == 0)
        #expect(try Self.send("late.plan", journal: "j-late", in: dir, port: simulator.port).wait(timeout: 120) == 0)
        let sentLate = try Journal.read(directory: dir.file("j-late")).accepted
        #expect(sentLate == 600 - sentEarly, "\(sentLate) + \(sentEarly)")
        // The first, resumed: every device it had not reached, the second has.
        let resumed = try CampaignProcess(["send", "--resume", "j-early"] + SendProcessTests.credentials(), in: dir.path)
        #expect(resumed.wait(timeout: 120) == 0, "\(resumed.stderr)")
        let state = try Journal.read(directory: dir.file("j-early"))
        #expect(state.accepted == sentEarly, "the resume sent nothing the cap forbids")
        #expect(state.skipped.count == 600 - sentEarly && state.skipped.allSatisfy { $0.rule == "frequency_capped" })
        let json = try JSONValue.parse(String(decoding: try PlanProcessTests.run(["status", "j-early", "--json"], in: dir).out, as: UTF8.self))
        #expect(json["skipped"]?.integerValue == Int64(600 - sentEarly), "\(json)")
        simulator.stop()
        var perDevice: [String: Int] = [:]
        for t in try SendProcessTests.recorded(dir) { perDevice[t, default: 0] += 1 }
        #expect(perDevice.count == 600 && perDevice.values.max() == 1, "no device reached twice under a cap of 1")
    }

    @Test func aScheduledSendChecksTheCapAgainAtRelease() throws {
        let dir = TemporaryDirectory("ledger-release")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        // Planned in the morning for the evening: quiet hours that do not hold now, so each record is released at once.
        let hour = Int(Date().timeIntervalSince1970) / 3600 % 24
        let quiet = String(format: #""quietHours":{"from":"%02d:00","to":"%02d:00","defaultTimeZone":"UTC"}"#, (hour + 3) % 24, (hour + 4) % 24)
        try #"{"campaign":"evening",\#(quiet),"frequencyCap":{"max":1,"per":"24h","scope":"marketing"},"messages":{"en":{"alert":"Hello {n}"}}}"#
            .write(toFile: dir.file("evening.json"), atomically: true, encoding: .utf8)
        try Self.audience(0..<200, to: dir.file("evening.csv"))
        let planned = try Self.plan("evening", in: dir)
        #expect(planned.status == 0 && planned.summary?["planned"]?.integerValue == 200, "\(planned.stderr)")
        // Meanwhile another campaign of the scope reaches half of them.
        try Self.audience(0..<100, to: dir.file("flash.csv"))
        try Self.job("flash", cap: 1, to: dir.file("flash.json"))
        #expect(try Self.plan("flash", in: dir).status == 0)
        #expect(try Self.send("flash.plan", journal: "j-flash", in: dir, port: simulator.port).wait(timeout: 120) == 0)
        // At release, those are skipped (final, the rule as reason); the others go.
        let evening = try Self.send("evening.plan", journal: "j-evening", in: dir, port: simulator.port, extra: ["--report", "evening.json.report"])
        #expect(evening.wait(timeout: 120) == 0, "\(evening.stderr)")
        let report = try JSONValue.parse(String(contentsOfFile: dir.file("evening.json.report"), encoding: .utf8))
        #expect(report["outcome"]?.stringValue == "complete")
        #expect(report["accepted"]?.integerValue == 100 && report["skipped"]?.integerValue == 100, "\(report)")
        #expect(report["skipped_frequency_capped"]?.integerValue == 100, "\(report)")
        let state = try Journal.read(directory: dir.file("j-evening"))
        #expect(state.skipped.count == 100 && state.skipped.allSatisfy { $0.rule == "frequency_capped" })
        #expect(Set(state.skipped.map { $0.token.map { String(format: "%02x", $0) }.joined() }) == Set((0..<100).map(Self.token)))
        let listed = String(decoding: try PlanProcessTests.run(["status", "j-evening", "--failures"], in: dir).out, as: UTF8.self)
            .split(separator: "\n").map { try! JSONValue.parse(String($0)) }
        #expect(listed.count == 100 && listed.allSatisfy { $0["outcome"]?.stringValue == "skipped" && $0["code"]?.stringValue == "frequency_capped" },
                "a script matches the rule by its code: \(listed.first.map { String(decoding: $0.serialized(), as: UTF8.self) } ?? "none")")
        let status = try PlanProcessTests.run(["status", "j-evening"], in: dir)
        #expect(String(decoding: status.out, as: UTF8.self).contains("100 skipped at their frequencyCap as they were about to go"), "not 'too late': \(String(decoding: status.out, as: UTF8.self))")
        simulator.stop()
        var perDevice: [String: Int] = [:]
        for t in try SendProcessTests.recorded(dir) { perDevice[t, default: 0] += 1 }
        #expect(perDevice.count == 200 && perDevice.values.max() == 1)
    }

    @Test func thePartsOfAPlanEachAppendTheirOwnSegmentAndThePlanReadsThemAll() throws {
        let dir = TemporaryDirectory("ledger-parts")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        try Self.audience(0..<600, to: dir.file("split.csv"))
        try Self.job("split", to: dir.file("split.json"))
        let plan = try CampaignProcess(["plan", "split.json", "split.csv", "--parts", "3", "--out", "parts", "--ledger", "ledger"], in: dir.path)
        #expect(plan.wait(timeout: 120) == 0, "\(plan.stderr)")
        for k in 0..<3 {
            let part = try Self.send("parts/part-00\(k).plan", journal: "journals/00\(k)", in: dir, port: simulator.port)
            #expect(part.wait(timeout: 120) == 0, "\(part.stderr)")
        }
        let segments = try FileManager.default.contentsOfDirectory(atPath: dir.file("ledger")).filter { $0.hasSuffix(".seg") }
        #expect(segments.count == 3)
        let again = try Self.plan("split", in: dir)
        #expect(again.summary?["rejected_by_reason"]?["already_sent"]?.integerValue == 600, "\(again.stderr)")
        // Each notification twice: claimed before it was written, proven once accepted.
        #expect(again.stderr.contains("3 segments, 1200 entries read, 600 devices concerned"), "\(again.stderr)")
    }
}
