import Foundation
import Testing
import CampaignJSON
import CampaignTestSupport
import GatewaySimulator
import LocalTime
@testable import CampaignSend
@testable import SendJournal

/// `campaign cancel` against sends that run as processes: one mid-stream
/// (slowed by `--rate`), one waiting for its next wave, the parts of a plan.
/// Each cancelled send ends within 10 s with outcome `cancelled` and exit 0;
/// later `--resume` and `--due-only` runs exit 0, send nothing (the
/// simulator's record) and change nothing in the journal.
@Suite(.ownThreads) struct CancelTests {
    /// The journal's log, byte for byte: a cancelled journal is final.
    static func log(_ journal: String) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: "\(journal)/\(Journal.logName)")) }

    /// How many notifications a simulator's record holds.
    /// `status --manifest --json`'s row of part `n`.
    static func part(_ n: Int, of status: JSONValue) -> JSONValue? {
        guard case .array(let rows)? = status["part_status"] else { return nil }
        return rows.first { $0["part"]?.integerValue == Int64(n) }
    }

    static func recordCount(_ dir: TemporaryDirectory) -> Int {
        ((try? String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    /// `campaign cancel ARGS…` in `dir`, timed.
    static func cancel(_ arguments: [String], in dir: TemporaryDirectory) throws -> (status: Int32, err: String) {
        let run = try PlanProcessTests.run(["cancel"] + arguments, in: dir)
        return (run.status, run.err)
    }

    /// After a cancel: `send --resume` and `send --resume --due-only` exit 0
    /// with the sentence, and neither the record nor the journal changes.
    static func expectLaterRunsSendNothing(journal: String, in dir: TemporaryDirectory, gateway: Int, credentials: [String] = []) throws {
        let (recorded, log) = (recordCount(dir), try Self.log(dir.file(journal)))
        for extra in [[], ["--due-only"]] {
            let run = try CampaignProcess(["send", "--resume", journal, "--gateway", "127.0.0.1:\(gateway)"] + credentials + extra, in: dir.path)
            #expect(run.wait(timeout: 30) == 0, "\(run.stderr)")
            #expect(run.stderr.contains("was cancelled by") && run.stderr.contains("nothing is sent"), "\(run.stderr)")
        }
        // A run asked for a report (cron reads it) gets one: the send as far as it went, cancelled.
        let reported = try CampaignProcess(["send", "--resume", journal, "--gateway", "127.0.0.1:\(gateway)", "--report", "cancelled-report.json"]
                                           + credentials, in: dir.path)
        #expect(reported.wait(timeout: 30) == 0, "\(reported.stderr)")
        let report = try JSONValue.parse(Array(Data(contentsOf: URL(fileURLWithPath: dir.file("cancelled-report.json")))))
        let state = try Journal.read(directory: dir.file(journal))
        #expect(report["outcome"]?.stringValue == "cancelled" && report["accepted"]?.integerValue == Int64(state.accepted)
                && report["this_run"]?["accepted"]?.integerValue == 0, "\(report)")
        #expect(recordCount(dir) == recorded, "nothing more arrived")
        #expect(try Self.log(dir.file(journal)) == log, "nothing else in a cancelled journal changes")
    }

    /// An h2 plan of `count` devices in `dir/plan.ndjson`.
    static func h2Plan(count: Int, in dir: TemporaryDirectory) throws {
        let (csv, _) = randomAudienceCSV(count: count, seed: 35)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try #"{"campaign":"oops","format":"h2","topic":"com.example.campaign","messages":{"en":{"alert":"Wrong {n}"}}}"#
            .write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let plan = try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--out", "plan.ndjson"], in: dir)
        #expect(plan.status == 0, "\(plan.err)")
    }

    @Test(.timeLimit(.minutes(3))) func aSendMidStreamEndsWithinTenSecondsCancelledAndStaysSo() throws {
        let dir = TemporaryDirectory("cancel-stream")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        try Self.h2Plan(count: 5000, in: dir)
        let send = try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)", "--rate", "200"]
                                       + SendProcessTests.credentials(), in: dir.path)
        #expect(eventually(within: 60) { Self.recordCount(dir) >= 100 }, "\(send.stderr)")
        let asked = Date()
        let cancel = try Self.cancel(["journal", "--by", "ops on call", "--reason", "wrong message"], in: dir)
        let status = send.wait(timeout: 10)
        if status == nil { send.kill9() }
        #expect(Date().timeIntervalSince(asked) < 10, "the send ends within 10 s of the cancel")
        #expect(status == 0, "a cancelled send exits 0: \(send.stderr)")
        #expect(cancel.status == 0 && cancel.err.contains("cancelled the send in journal"), "\(cancel.err)")
        #expect(send.stderr.contains("send: cancelled:") && send.stderr.contains("cancelled by ops on call"), "\(send.stderr)")
        // What it does next, with what it has in flight: under --rate 200 on
        // loopback, little or nothing (what waits in the queues for its turn is not in flight).
        let proving = send.stderr.firstMatch(of: /send: cancelled: stopping: proving the (\d+) notification/).flatMap { Int($0.1) }
        #expect(send.stderr.contains("send: cancelled: stopping: nothing is in flight") || (proving ?? .max) <= 200, "\(send.stderr)")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.outcome == .cancelled)
        #expect(state.cancel?.by == "ops on call" && state.cancel?.reason == "wrong message")
        #expect(state.accepted == Self.recordCount(dir), "what was sent stays counted: every accepted one is journaled")
        #expect(state.accepted < 5000, "the rest was not sent")
        let accepted = state.accepted

        try Self.expectLaterRunsSendNothing(journal: "journal", in: dir, gateway: simulator.port)
        #expect(try Journal.read(directory: dir.file("journal")).accepted == accepted)

        // Again: already cancelled, said once, exit 0.
        let again = try Self.cancel(["journal"], in: dir)
        #expect(again.status == 0 && again.err.contains("already cancelled by ops on call"), "\(again.err)")

        // status: text, JSON and the page.
        let text = String(decoding: try PlanProcessTests.run(["status", "journal"], in: dir).out, as: UTF8.self)
        #expect(text.contains("outcome: cancelled by ops on call at ") && text.contains("(reason: wrong message)"), "\(text)")
        let json = try JSONValue.parse(PlanProcessTests.run(["status", "journal", "--json"], in: dir).out)
        #expect(json["outcome"]?.stringValue == "cancelled" && json["phase"]?.stringValue == "cancelled")
        #expect(json["cancelled_by"]?.stringValue == "ops on call" && json["cancel_reason"]?.stringValue == "wrong message")
        #expect(json["cancelled_at"]?.stringValue == state.cancel.map { utcText(Int64($0.at)) })
        #expect(json["accepted"]?.integerValue == Int64(accepted) && json["resume"] == .null)
        #expect(try PlanProcessTests.run(["status", "journal", "--html", "page.html"], in: dir).status == 0)
        let page = try String(contentsOfFile: dir.file("page.html"), encoding: .utf8)
        #expect(page.contains("cancelled by ops on call"))
    }

    /// A cancel that cannot signal the send (run on another machine sharing
    /// the journal's storage): the send finds the record itself.
    @Test(.timeLimit(.minutes(2))) func aSendNobodySignalsFindsTheCancelRecordItself() throws {
        let dir = TemporaryDirectory("cancel-unsignalled")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        try Self.h2Plan(count: 3000, in: dir)
        let send = try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)", "--rate", "200"]
                                       + SendProcessTests.credentials(), in: dir.path)
        #expect(eventually(within: 60) { Self.recordCount(dir) >= 50 }, "\(send.stderr)")
        let asked = Date()
        try JournalCancel(by: "node-b", at: Int(time(nil)), reason: nil).write(directory: dir.file("journal"))
        let status = send.wait(timeout: 10)
        if status == nil { send.kill9() }
        #expect(Date().timeIntervalSince(asked) < 10)
        #expect(status == 0, "\(send.stderr)")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.outcome == .cancelled && state.cancel?.by == "node-b" && state.accepted == Self.recordCount(dir))
    }

    /// A scheduled send waiting for its next wave: with its connections open
    /// (the next moment within the hold), between runs (`--hold-open 5`), and
    /// for a moment an hour away.
    @Test(.timeLimit(.minutes(3)), arguments: [(50, 1, [String]()), (50, 1, ["--hold-open", "5"]), (3600, 61, [])])
    func aScheduledSendWaitingForItsNextWaveEndsWithinTenSeconds(lead: Int, aheadMinutes: Int, hold: [String]) throws {
        // The zone `aheadMinutes` ahead was due just now (sent at once); UTC is due in `lead` seconds.
        let next = ScheduledSendTests.soon(Double(lead))
        let campaign = try ScheduledSendTests.Campaign(base: next, groups: [(aheadMinutes, 3), (0, 3)])
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let journal = campaign.dir.file("journal")
        let send = try campaign.send(simulator, hold)
        // Waiting, with the three answers journaled: nothing is in flight.
        #expect(eventually(within: 60) {
            guard (try? campaign.arrivals().count) == 3, let state = try? Journal.read(directory: journal) else { return false }
            return state.waitingUntil != nil && state.accepted == 3
        }, "\(send.stderr)")
        let asked = Date()
        let cancel = try Self.cancel(["journal"], in: campaign.dir)
        let status = send.wait(timeout: 10)
        if status == nil { send.kill9() }
        #expect(Date().timeIntervalSince(asked) < 10, "a waiting send ends within 10 s of the cancel")
        #expect(status == 0, "\(send.stderr)")
        #expect(send.stderr.contains("send: cancelled: stopping: nothing is in flight"), "a waiting send has nothing to prove: \(send.stderr)")
        #expect(cancel.status == 0, "\(cancel.err)")
        #expect(try Journal.read(directory: journal).outcome == .cancelled)
        #expect(try campaign.arrivals().count == 3, "nothing of the next wave")
        try Self.expectLaterRunsSendNothing(journal: "journal", in: campaign.dir, gateway: simulator.port)
        let json = try JSONValue.parse(PlanProcessTests.run(["status", "journal", "--json"], in: campaign.dir).out)
        #expect(json["outcome"]?.stringValue == "cancelled" && json["done"]?.integerValue == 3)
        // Nothing is next for a cancelled send: the rest is never to be sent.
        #expect(json["next_moment"] == .null && json["waiting"]?.integerValue == 0 && json["never_sent_cancelled"]?.integerValue == 3, "\(json)")
        #expect(json["waiting_until"] == .null, "a cancelled send waits for nothing: \(json)")
        let text = String(decoding: try PlanProcessTests.run(["status", "journal"], in: campaign.dir).out, as: UTF8.self)
        #expect(text.contains("3 never to be sent (cancelled)") && !text.contains("next moment"), "\(text)")
    }

    @Test(.timeLimit(.minutes(3))) func cancelOverAManifestCancelsEveryPartStartedOrNot() throws {
        let dir = TemporaryDirectory("cancel-parts")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        _ = try ScaleOutTests.planParts(3, rows: 900, into: dir)
        let flags = ["--gateway", "127.0.0.1:\(simulator.port)"] + SendProcessTests.credentials()
        // Part 0 complete, part 1 sending slowly, part 2 not started.
        let first = try CampaignProcess(["send", "plan/part-000.plan", "--journal", "j/000"] + flags, in: dir.path)
        #expect(first.wait(timeout: 60) == 0, "\(first.stderr)")
        let done0 = Self.recordCount(dir)
        let slow = try CampaignProcess(["send", "plan/part-001.plan", "--journal", "j/001", "--rate", "20"] + flags, in: dir.path)
        #expect(eventually(within: 60) { Self.recordCount(dir) > done0 }, "\(slow.stderr)")
        let before = String(decoding: try PlanProcessTests.run(["status", "--manifest", "plan/manifest.json", "--journals", "j/*"], in: dir).out, as: UTF8.self)
        #expect(before.contains("--journal j/002 "), "a part not started gets its journal beside the others': \(before)")
        let beforeJSON = try JSONValue.parse(PlanProcessTests.run(["status", "--manifest", "plan/manifest.json", "--journals", "j/*", "--json"], in: dir).out)
        let toStart = Self.part(2, of: beforeJSON)?["command"]?.stringValue ?? ""
        #expect(toStart.hasPrefix("campaign send ") && toStart.hasSuffix("part-002.plan --journal j/002"), "--json's command is a command, not prose: \(toStart)")
        let asked = Date()
        let cancel = try Self.cancel(["--manifest", "plan/manifest.json", "--journals", "j/*", "--reason", "wrong audience"], in: dir)
        let slowStatus = slow.wait(timeout: 10)
        if slowStatus == nil { slow.kill9() }
        #expect(slowStatus == 0, "\(slow.stderr)")
        #expect(Date().timeIntervalSince(asked) < 10)
        #expect(cancel.status == 0, "\(cancel.err)")
        #expect(cancel.err.contains("the send in j/000 is complete: there was nothing left to cancel"), "\(cancel.err)")
        #expect(cancel.err.contains("cancelled the send in j/001"), "\(cancel.err)")
        #expect(cancel.err.contains("cancelled j/002 before its send started"), "\(cancel.err)")
        #expect(!JournalCancel.exists(directory: dir.file("j/000")), "a complete journal is left as it is")
        #expect(try Journal.read(directory: dir.file("j/001")).outcome == .cancelled)

        // The part not started refuses to start, as parallel.sh would run it; the cancelled one sends nothing more.
        let recorded = Self.recordCount(dir)
        let late = try CampaignProcess(["send", "plan/part-002.plan", "--journal", "j/002"] + flags, in: dir.path)
        #expect(late.wait(timeout: 30) == 0, "\(late.stderr)")
        #expect(late.stderr.contains("the send in j/002 was cancelled by") && late.stderr.contains("(reason: wrong audience)"), "\(late.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("j/002/\(Journal.logName)")), "no journal was started")
        try Self.expectLaterRunsSendNothing(journal: "j/001", in: dir, gateway: simulator.port)
        #expect(Self.recordCount(dir) == recorded)

        let json = try JSONValue.parse(PlanProcessTests.run(["status", "--manifest", "plan/manifest.json", "--journals", "j/*", "--json"], in: dir).out)
        #expect(json["complete"]?.integerValue == 1 && json["cancelled"]?.integerValue == 2 && json["not_started"]?.integerValue == 0, "\(json)")
        let part2 = Self.part(2, of: json)
        #expect(part2?["state"]?.stringValue == "cancelled" && part2?["cancel_reason"]?.stringValue == "wrong audience"
                && part2?["cancelled_by"]?.stringValue != nil && part2?["cancelled_at"]?.stringValue != nil, "\(String(describing: part2))")
        let text = String(decoding: try PlanProcessTests.run(["status", "--manifest", "plan/manifest.json", "--journals", "j/*"], in: dir).out, as: UTF8.self)
        #expect(text.contains("1 complete, 0 running, 0 stopped, 2 cancelled, 0 not started"), "\(text)")
        #expect(!text.contains("to finish:"), "a cancelled part has nothing to finish: \(text)")
        #expect(text.split(separator: "\n").contains { $0.hasPrefix("  002 ") && $0.contains("cancelled") && !$0.contains("not started") },
                "its row says what the totals count: \(text)")
        #expect(try PlanProcessTests.run(["status", "--manifest", "plan/manifest.json", "--journals", "j/*", "--html", "parts.html"], in: dir).status == 0)
        #expect(try String(contentsOfFile: dir.file("parts.html"), encoding: .utf8).contains("2 cancelled"))

        let alone = try JSONValue.parse(PlanProcessTests.run(["status", "j/002", "--json"], in: dir).out)
        #expect(alone["outcome"]?.stringValue == "cancelled" && alone["cancel_reason"]?.stringValue == "wrong audience")
        // The complete part named alone: one sentence, exit 0.
        let complete = try Self.cancel(["j/000"], in: dir)
        #expect(complete.status == 0 && complete.err.contains("there was nothing left to cancel"), "\(complete.err)")
        // A directory with no journal, named alone, is an error.
        let none = try Self.cancel(["nowhere"], in: dir)
        #expect(none.status == 66, "\(none.err)")
        // Parts whose cancel record has nowhere to go (a pattern not ending in /*) are not cancelled: 73, not 0.
        let nowhere = try Self.cancel(["--manifest", "plan/manifest.json", "--journals", "k/j-*"], in: dir)
        #expect(nowhere.status == 73 && nowhere.err.contains("3 parts are not cancelled and may still be sent"), "\(nowhere.err)")
    }
}
