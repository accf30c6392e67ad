import Foundation
import Testing
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import LocalTime

/// Where scheduling meets the rest of the tool: `plan | send` (the pipe the
/// tool is named for) with waves, `--due-only` from cron, quiet hours, an
/// expiry counted from each moment, and the rules asked again at the wire.
/// In the scheduled suite: these tests wait on the wall clock, on threads of
/// their own (`.ownThreads`), so they run beside each other and beside every
/// other test without holding the cooperative pool's threads.
extension ScheduledSendTests {

    /// Each token arrived exactly once, none before its moment; the expiry
    /// it was sent with is its moment plus the job's `expiresIn`.
    static func expectOnceAfterMomentsAndExpiry(_ campaign: Campaign, expiresIn: Int64) throws {
        let arrivals = try campaign.arrivals()
        #expect(arrivals.count == campaign.tokens.count, "delivered \(arrivals.count) of \(campaign.tokens.count)")
        #expect(arrivals.values.allSatisfy { $0.count == 1 }, "none twice: \(arrivals.filter { $0.value.count > 1 }.count)")
        #expect(arrivals.allSatisfy { $0.value[0] >= campaign.moments[$0.key]!.at * 1000 }, "none before its moment")
        // From the moment, or from when it was sent if later (a moment already past): never already over.
        let expiries = try campaign.expiries()
        let short = expiries.filter { $0.value < max(campaign.moments[$0.key]!.at, arrivals[$0.key]![0] / 1000 - 1) + expiresIn }
        #expect(short.isEmpty, "\(short.count) sent with an expiry before their moment + expiresIn, e.g. \(short.first.map { "\($0.value) for a moment \(campaign.moments[$0.key]!.at)" } ?? "")")
    }

    @Test(.timeLimit(.minutes(3))) func aScheduledPlanPipedIntoSendDeliversEveryRecordAfterItsMoment() throws {
        // 2,000 rows each (~400 KB of plan: past any pipe's buffer), 20 due
        // now and the rest 30 s ahead; one send waits for them (a 5 s hold:
        // connections closed, then a second run), the other is run from a
        // cron-like loop with --due-only. The expiry is 10 s: counted from
        // plan time it would be over before the moment.
        let moment = ScheduledSendTests.soon(30)
        let waiting = try Campaign(base: moment, groups: [(5, 20), (0, 1980)], extra: #""expiresIn":10,"#)
        let cron = try Campaign(base: moment, groups: [(5, 20), (0, 1980)], extra: #""expiresIn":10,"#)
        let simulators = try (startHTTP2Simulator(in: waiting.dir), startHTTP2Simulator(in: cron.dir))
        defer { simulators.0.stop(); simulators.1.stop() }

        let send = try waiting.pipe(simulators.0, ["--hold-open", "5"])
        let first = try cron.pipe(simulators.1, ["--due-only"])
        #expect(first.wait(timeout: 60) == 0, "\(first.stderr)")
        #expect(first.stderr.contains("due at \(utcText(moment))"), "\(first.stderr)")
        #expect(try cron.arrivals().count == 20, "only what was due")
        var runs = 1
        var outcome = "scheduled"
        while outcome != "complete", wallClockSeconds() < Double(moment + 60) {
            let run = try cron.resume(simulators.1, ["--due-only"])
            #expect(run.wait(timeout: 60) == 0, "\(run.stderr)")
            runs += 1
            outcome = try Journal.read(directory: cron.dir.file("journal")).outcome?.rawValue ?? "none"
            if outcome != "complete" { usleep(1_000_000) }   // cron's interval, shortened
        }
        #expect(outcome == "complete" && runs > 2)
        #expect(send.wait(timeout: 60) == 0, "\(send.stderr)")
        #expect(send.stderr.contains("waiting until"), "the send waited between runs: \(send.stderr)")
        #expect(try Self.page(waiting).contains("run 2 (next wave)"), "the send's own next run is not a resume")
        for campaign in [waiting, cron] {
            try Self.expectOnceAfterMomentsAndExpiry(campaign, expiresIn: 10)
            let state = try Journal.read(directory: campaign.dir.file("journal"))
            #expect(state.outcome == .complete && state.accepted == 2000 && state.planRecords == 2000)
        }
    }

    @Test(.timeLimit(.minutes(3))) func quietHoursPipedIntoSendDeliverTheHeldBackDevicesWhenTheyEnd() throws {
        // UTC's 1,500 devices are in their quiet hours until T+25 s; those a
        // minute ahead are past them. A 5 s hold: the send closes its
        // connections, waits, and a later run reads the rest of the spool.
        let t = ScheduledSendTests.soon(1)
        let quiet = ScheduledSendTests.quietHours(from: t - 30, to: t + 25)
        let campaign = try Campaign(base: t, groups: [(0, 1500), (1, 500)]) { _, _ in quiet }
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let send = try campaign.pipe(simulator, ["--hold-open", "5"])
        #expect(send.wait(timeout: 120) == 0, "\(send.stderr)")
        let arrivals = try campaign.arrivals()
        #expect(arrivals.count == 2000 && arrivals.values.allSatisfy { $0.count == 1 })
        let utc = arrivals.filter { campaign.moments[$0.key]!.offset == 0 }.map { $0.value[0] }
        #expect(utc.count == 1500 && utc.allSatisfy { $0 >= (t + 25) * 1000 }, "none inside the quiet hours")
        #expect(send.stderr.contains("waiting until \(utcText(t + 25))"), "\(send.stderr)")
    }

    @Test(.timeLimit(.minutes(2))) func quietHoursThatBeginWhileReadAheadWaitsHoldItBack() throws {
        // Quiet from T+4 s to T+9 s; at --rate 1 most of the 14 were read
        // (and queued) long before they could be written.
        let t = ScheduledSendTests.soon(1)
        let quiet = ScheduledSendTests.quietHours(from: t + 4, to: t + 9)
        let campaign = try Campaign(base: t, groups: [(0, 14)]) { _, _ in quiet }
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        while wallClockSeconds() < Double(t) { usleep(20_000) }
        let send = try campaign.send(simulator, ["--rate", "1", "--connections", "1", "--report", "report.json"])
        // While it waits for the quiet hours' end, status counts the held back as waiting for it, not due now.
        #expect(eventually(within: 15) { (try? Self.status(campaign)["phase"]?.stringValue) == "waiting" })
        let waiting = try Self.status(campaign)
        #expect(waiting["due_now"]?.integerValue == 0 && waiting["next_moment"]?.stringValue == utcText(t + 9), "\(waiting)")
        #expect(waiting["remaining"]?.integerValue == waiting["waiting"]?.integerValue, "remaining known from the plan's trailer: \(waiting)")
        #expect(send.wait(timeout: 60) == 0, "\(send.stderr)")
        let arrivals = try campaign.arrivals()
        #expect(arrivals.count == 14 && arrivals.values.allSatisfy { $0.count == 1 })
        let inside = arrivals.values.map { $0[0] }.filter { $0 >= (t + 4) * 1000 + 300 && $0 < (t + 9) * 1000 }
        #expect(inside.isEmpty, "\(inside.count) sent inside the quiet hours: \(inside.map { $0 - t * 1000 })")
        #expect(arrivals.values.contains { $0[0] >= (t + 9) * 1000 }, "some waited for the quiet hours' end")
    }

    @Test(.timeLimit(.minutes(2))) func lateSkipIsDecidedWhenReadAheadIsWritten() throws {
        // Due a second ago with a 4 s window, late: skip; at --rate 1 only
        // the first few can go inside the window: the rest, already read and
        // queued, must be skipped when they come to be written.
        let base = Int64(wallClockSeconds()) - 1
        let campaign = try Campaign(base: base, groups: [(0, 20)]) { time, date in
            #""deliverAt":{"localTime":"\#(time)","date":"\#(date)","window":4,"late":"skip","defaultTimeZone":"UTC"}"#
        }
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let send = try campaign.send(simulator, ["--rate", "1", "--connections", "1", "--report", "report.json"])
        #expect(send.wait(timeout: 60) == 0, "\(send.stderr)")
        let arrivals = try campaign.arrivals()
        let late = arrivals.values.map { $0[0] }.filter { $0 > (base + 4) * 1000 + 300 }
        #expect(late.isEmpty, "\(late.count) sent after their window: \(late.map { $0 - base * 1000 })")
        let report = try JSONValue.parse(try String(contentsOfFile: campaign.dir.file("report.json"), encoding: .utf8))
        let skipped = try #require(report["skipped"]?.integerValue)
        #expect(skipped > 0 && Int(skipped) + arrivals.count == 20, "skipped \(skipped), sent \(arrivals.count)")
        let state = try Journal.read(directory: campaign.dir.file("journal"))
        #expect(state.skipped.count == Int(skipped) && state.outcome == .complete)
        #expect(try Self.page(campaign).contains("skipped as too late</text>"), "the page draws the skipped")
        let text = String(decoding: try PlanProcessTests.run(["status", "journal"], in: campaign.dir).out, as: UTF8.self)
        #expect(text.contains("done: 20 (\(arrivals.count) accepted, 0 presumed, 0 failed, \(skipped) skipped as too late)"), "\(text)")
        #expect(Set(state.skipped.map { $0.token.map { String(format: "%02x", $0) }.joined() }).isDisjoint(with: arrivals.keys))
    }

    @Test(.timeLimit(.minutes(2))) func aSignalWhileTheScheduledPlanIsStillComingEndsTheSendAtOnce() throws {
        // The planner writes the header, then stalls: the send,
        // reading standard input to its end before its first run, must still
        // end on the first signal (75), nothing sent, the journal kept.
        let campaign = try Campaign(base: ScheduledSendTests.soon(60), groups: [(0, 50)])
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let planner = Pipe()
        defer { try? planner.fileHandleForWriting.close() }
        let send = try CampaignProcess(["send", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)"] + SendProcessTests.credentials(),
                                       in: campaign.dir.path, inputPipe: planner)
        let header = try String(contentsOfFile: campaign.dir.file("plan.ndjson"), encoding: .utf8).split(separator: "\n")[0]
        planner.fileHandleForWriting.write(Data((header + "\n").utf8))
        #expect(eventually(within: 20) { FileManager.default.fileExists(atPath: campaign.dir.file("journal/journal.log")) })
        let signalled = Date()
        kill(send.process.processIdentifier, SIGTERM)
        #expect(send.wait(timeout: 10) == 75, "\(send.stderr)")
        #expect(Date().timeIntervalSince(signalled) < 3, "the read of standard input wakes on the signal")
        #expect(send.stderr.contains("stopped while reading the scheduled plan"), "\(send.stderr)")
        #expect(try campaign.arrivals().isEmpty)
    }

    @Test(.timeLimit(.minutes(2))) func aCutScheduledPipeIsRefusedAtOnceAndAReplanGoesOn() throws {
        // Quiet hours an hour away: every record's moment is its plan time,
        // so a plan made a second later differs in every `at`.
        let t = ScheduledSendTests.soon(0)
        let quiet = ScheduledSendTests.quietHours(from: t + 3600, to: t + 7200)
        let campaign = try Campaign(base: t, groups: [(0, 600)]) { _, _ in quiet }
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let cut = try campaign.pipe(simulator, [], through: "head -n 300")
        #expect(cut.wait(timeout: 30) == 65, "\(cut.stderr)")
        #expect(cut.stderr.contains("cut after 299 records") && cut.stderr.contains("--replan"), "\(cut.stderr)")
        let told = try Self.status(campaign)
        #expect(told["resume"]?.stringValue?.hasSuffix("campaign send --resume journal --replan") == true && told["plan_incomplete"] == .bool(true), "\(told)")
        #expect(try campaign.arrivals().isEmpty, "nothing sent from a cut scheduled plan")
        let plain = try campaign.resume(simulator)
        #expect(plain.wait(timeout: 30) == 66, "\(plain.stderr)")
        #expect(plain.stderr.contains("--replan"), "\(plain.stderr)")
        let planned = wallClockSeconds().rounded(.down)
        while wallClockSeconds() < planned + 1 { usleep(20_000) }
        let replan = try campaign.pipe(simulator, [], replan: true)
        #expect(replan.wait(timeout: 60) == 0, "\(replan.stderr)")
        let arrivals = try campaign.arrivals()
        #expect(arrivals.count == 600 && arrivals.values.allSatisfy { $0.count == 1 })
    }

    /// `status --html`'s page of the campaign's journal.
    static func page(_ campaign: Campaign) throws -> String {
        let run = try PlanProcessTests.run(["status", "journal", "--html", "page.html"], in: campaign.dir)
        #expect(run.status == 0, "\(run.err)")
        return try String(contentsOfFile: campaign.dir.file("page.html"), encoding: .utf8)
    }

    static func status(_ campaign: Campaign) throws -> JSONValue {
        let run = try PlanProcessTests.run(["status", "journal", "--json"], in: campaign.dir)
        return try JSONValue.parse(String(decoding: run.out, as: UTF8.self))
    }

    @Test(.timeLimit(.minutes(2))) func statusTellsAWaitingSendFromOneKilledWhileWaiting() throws {
        // Three due now, three in 16 s; a 5 s hold: the send closes its
        // connections and waits (up, its pid alive) until 5 s before the moment.
        let moment = ScheduledSendTests.soon(16)
        let campaign = try Campaign(base: moment, groups: [(1, 3), (0, 3)])
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let send = try campaign.send(simulator, ["--hold-open", "5", "--metrics", "send.prom"])
        #expect(eventually(within: 10) { (try? Self.status(campaign)["phase"]?.stringValue) == "waiting" })
        let waiting = try Self.status(campaign)
        #expect(waiting["pid"]?.integerValue == Int64(send.process.processIdentifier), "\(waiting)")
        #expect(waiting["outcome"]?.stringValue == "scheduled" && waiting["resume"] == .null)
        #expect(waiting["waiting_until"]?.stringValue == utcText(moment - 5))
        let metrics = try String(contentsOfFile: campaign.dir.file("send.prom"), encoding: .utf8)
        #expect(metrics.split(separator: "\n").contains { $0.hasPrefix("campaign_send_up") && $0.hasSuffix(" 1") }, "up while waiting: \(metrics)")
        let text = String(decoding: try PlanProcessTests.run(["status", "journal"], in: campaign.dir).out, as: UTF8.self)
        #expect(text.contains("waiting (pid \(send.process.processIdentifier)) for its next run"), "\(text)")

        send.kill9()
        let gone = try Self.status(campaign)
        #expect(gone["phase"]?.stringValue == "stopped" && gone["pid"] == .null, "\(gone)")
        #expect(gone["resume"]?.stringValue == "campaign send --resume journal")
        let told = String(decoding: try PlanProcessTests.run(["status", "journal"], in: campaign.dir).out, as: UTF8.self)
        #expect(told.contains("is gone") && told.contains("--resume"), "\(told)")
        let resumed = try campaign.resume(simulator)
        #expect(resumed.wait(timeout: 60) == 0, "\(resumed.stderr)")
        #expect(try Journal.read(directory: campaign.dir.file("journal")).settings.holdOpenSeconds == 5, "a resume keeps --hold-open")
        let arrivals = try campaign.arrivals()
        #expect(arrivals.count == 6 && arrivals.values.allSatisfy { $0.count == 1 })
        #expect(try Self.page(campaign).contains("run 2 (resume)"))
        // Nothing more to do: cron's next --due-only changes nothing.
        let log = try Data(contentsOf: URL(fileURLWithPath: campaign.dir.file("journal/journal.log")))
        let again = try campaign.resume(simulator, ["--due-only"])
        #expect(again.wait(timeout: 30) == 0 && again.stderr.contains("already complete"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: campaign.dir.file("journal/journal.log"))) == log, "a no-op run journaled nothing")
    }

    @Test func aDatePastForEveryDeviceIsWarnedOfAndWithLateSkipRefused() throws {
        let dir = TemporaryDirectory("pastdate")
        try "token,lang,tz\n\(String(repeating: "ab", count: 32)),en,UTC\n\(String(repeating: "cd", count: 32)),en,Asia/Tokyo\n"
            .write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        for late in ["skip", "send"] {
            try #"{"campaign":"past","format":"h2","topic":"com.example.campaign","deliverAt":{"localTime":"09:00","date":"2020-01-01","window":"3h","late":"\#(late)"},"messages":{"en":{"alert":"Hi"}}}"#
                .write(toFile: dir.file("job-\(late).json"), atomically: true, encoding: .utf8)
            let validate = try PlanProcessTests.run(["validate", "job-\(late).json"], in: dir)
            #expect(validate.status == 0 && validate.err.contains("deliverAt.date 2020-01-01 is past"), "\(validate.err)")
            let plan = try PlanProcessTests.run(["plan", "job-\(late).json", "audience.csv", "--out", "plan-\(late).ndjson"], in: dir)
            if late == "skip" {
                #expect(plan.status == 65, "\(plan.err)")
                #expect(plan.err.contains("late: skip would skip them all"), "\(plan.err)")
                #expect(!FileManager.default.fileExists(atPath: dir.file("plan-skip.ndjson")), "no plan written")
            } else {
                #expect(plan.status == 0, "late: send plans it (everything goes at once): \(plan.err)")
            }
        }
    }
}
