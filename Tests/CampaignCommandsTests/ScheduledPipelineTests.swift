import Foundation
import Testing
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import LocalTime
import SendJournal

/// Where scheduling meets the rest of the tool: `plan | send` (the pipe the
/// tool is named for) with waves, `--due-only` from cron, quiet hours, an
/// expiry counted from each moment, and the rules asked again at the wire.
/// In the scheduled suite: these tests wait on the wall clock, on threads of
/// their own (`.ownThreads`), so they run beside each other and beside every
/// other test without holding the cooperative pool's threads; like the rest of
/// the suite, each waits for events (exits, status, the journal complete) with
/// backstops, and gives lateness a loaded machine's margin.
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

    /// Waits for: the first cron run's exit; `--due-only` runs 1 s apart
    /// until the journal says complete (at most 300 runs or 150 s: backstops,
    /// no longer the moment + 60 s); the waiting send's exit. What the first
    /// run had to send is read from when it began and ended.
    @Test(.timeLimit(.minutes(4))) func aScheduledPlanPipedIntoSendDeliversEveryRecordAfterItsMoment() throws {
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
        let firstBegan = ScheduledSendTests.nowMilliseconds()
        let first = try cron.pipe(simulators.1, ["--due-only"])
        #expect(first.wait(timeout: ScheduledSendTests.backstop) == 0, "\(first.stderr)")
        let firstEnded = ScheduledSendTests.nowMilliseconds()
        // Only what was due: the 20 past, not the 1,980 unless their moment came while the run went (a very busy machine).
        let sentFirst = Set(try cron.arrivals().keys)
        let dueBefore = Set(cron.moments.filter { $0.value.at * 1000 <= firstBegan }.keys)
        let dueBy = Set(cron.moments.filter { $0.value.at * 1000 <= firstEnded }.keys)
        #expect(dueBefore.count >= 20 && sentFirst.isSuperset(of: dueBefore) && sentFirst.isSubset(of: dueBy),
                "only what was due: sent \(sentFirst.count), due before the run \(dueBefore.count), by its end \(dueBy.count)")
        if sentFirst.count < 2000 { #expect(first.stderr.contains("due at \(utcText(moment))"), "\(first.stderr)") }
        let loop = try ScheduledSendTests.cronUntilComplete(cron, simulators.1, pacing: 1_000_000)
        let runs = 1 + loop.runs
        #expect(loop.outcome == "complete", "after \(runs) runs")
        // A run with nothing due between the first and the moment, whenever the first ended well before it
        // (always, unless a very busy machine took most of the 30 s to plan and start).
        if firstEnded + 5000 <= moment * 1000 { #expect(runs > 2, "\(runs) runs") }
        #expect(send.wait(timeout: ScheduledSendTests.backstop) == 0, "\(send.stderr)")
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
        #expect(send.wait(timeout: 150) == 0, "\(send.stderr)")
        let arrivals = try campaign.arrivals()
        #expect(arrivals.count == 2000 && arrivals.values.allSatisfy { $0.count == 1 })
        let utc = arrivals.filter { campaign.moments[$0.key]!.offset == 0 }.map { $0.value[0] }
        #expect(utc.count == 1500 && utc.allSatisfy { $0 >= (t + 25) * 1000 }, "none inside the quiet hours")
        #expect(send.stderr.contains("waiting until \(utcText(t + 25))"), "\(send.stderr)")
    }

    /// Waits for: the moment T; then status telling the send waiting between
    /// runs (phase "waiting", its wait journaled), asserted on that very
    /// status; then the send's exit. The quiet hours last 20 s (they were
    /// 5 s): the wait is there to be seen by a poll on a busy machine, and a
    /// notification written as they began gets a loaded machine's margin
    /// before its arrival counts as sent inside them.
    @Test(.timeLimit(.minutes(3))) func quietHoursThatBeginWhileReadAheadWaitsHoldItBack() throws {
        // Quiet from T+4 s to T+24 s; at --rate 1 most of the 14 were read
        // (and queued) long before they could be written.
        let t = ScheduledSendTests.soon(1)
        let quiet = ScheduledSendTests.quietHours(from: t + 4, to: t + 24)
        let campaign = try Campaign(base: t, groups: [(0, 14)]) { _, _ in quiet }
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        while wallClockSeconds() < Double(t) { usleep(20_000) }
        let send = try campaign.send(simulator, ["--rate", "1", "--connections", "1", "--report", "report.json"])
        // While it waits for the quiet hours' end, status counts the held back as waiting for it, not due now.
        let waiting = ScheduledSendTests.awaitStatus(campaign, "a waiting send") {
            $0["phase"]?.stringValue == "waiting" && $0["waiting_until"]?.stringValue != nil
        }
        #expect(waiting["due_now"]?.integerValue == 0 && waiting["next_moment"]?.stringValue == utcText(t + 24), "\(waiting)")
        #expect(waiting["remaining"]?.integerValue == waiting["waiting"]?.integerValue, "remaining known from the plan's trailer: \(waiting)")
        #expect(send.wait(timeout: ScheduledSendTests.backstop) == 0, "\(send.stderr)")
        let arrivals = try campaign.arrivals()
        #expect(arrivals.count == 14 && arrivals.values.allSatisfy { $0.count == 1 })
        // At --rate 1 a send that did not hold them back would write one a second through the quiet hours.
        let inside = arrivals.values.map { $0[0] }.filter { $0 >= (t + 4) * 1000 + ScheduledSendTests.lateOnALoadedMachine && $0 < (t + 24) * 1000 }
        #expect(inside.isEmpty, "\(inside.count) sent inside the quiet hours: \(inside.map { $0 - t * 1000 })")
        #expect(arrivals.values.contains { $0[0] >= (t + 24) * 1000 }, "some waited for the quiet hours' end")
    }

    /// Waits for the send's exit. 40 devices (they were 20), so that a
    /// notification written at the window's end gets a loaded machine's
    /// margin before its arrival counts as late, while a send that wrote the
    /// queued ones anyway (one a second) still has ~25 arrivals past it.
    @Test(.timeLimit(.minutes(2))) func lateSkipIsDecidedWhenReadAheadIsWritten() throws {
        // Due a second ago with a 4 s window, late: skip; at --rate 1 only
        // the first few can go inside the window: the rest, already read and
        // queued, must be skipped when they come to be written.
        let base = Int64(wallClockSeconds()) - 1
        let campaign = try Campaign(base: base, groups: [(0, 40)]) { time, date in
            #""deliverAt":{"localTime":"\#(time)","date":"\#(date)","window":4,"late":"skip","defaultTimeZone":"UTC"}"#
        }
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let send = try campaign.send(simulator, ["--rate", "1", "--connections", "1", "--report", "report.json"])
        #expect(send.wait(timeout: ScheduledSendTests.backstop) == 0, "\(send.stderr)")
        let arrivals = try campaign.arrivals()
        let late = arrivals.values.map { $0[0] }.filter { $0 > (base + 4) * 1000 + ScheduledSendTests.lateOnALoadedMachine }
        #expect(late.isEmpty, "\(late.count) sent after their window: \(late.map { $0 - base * 1000 })")
        let report = try JSONValue.parse(try String(contentsOfFile: campaign.dir.file("report.json"), encoding: .utf8))
        let skipped = try #require(report["skipped"]?.integerValue)
        #expect(skipped > 0 && Int(skipped) + arrivals.count == 40, "skipped \(skipped), sent \(arrivals.count)")
        let state = try Journal.read(directory: campaign.dir.file("journal"))
        #expect(state.skipped.count == Int(skipped) && state.outcome == .complete)
        #expect(try Self.page(campaign).contains("skipped as too late</text>"), "the page draws the skipped")
        let text = String(decoding: try PlanProcessTests.run(["status", "journal"], in: campaign.dir).out, as: UTF8.self)
        #expect(text.contains("done: 40 (\(arrivals.count) accepted, 0 presumed, 0 failed, \(skipped) skipped as too late)"), "\(text)")
        #expect(Set(state.skipped.map { $0.token.map { String(format: "%02x", $0) }.joined() }).isDisjoint(with: arrivals.keys))
    }

    /// Waits for: the journal created (the send reading its standard input), then the exit.
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
        #expect(eventually(within: ScheduledSendTests.backstop) { FileManager.default.fileExists(atPath: campaign.dir.file("journal/journal.log")) })
        let signalled = Date()
        kill(send.process.processIdentifier, SIGTERM)
        #expect(send.wait(timeout: ScheduledSendTests.backstop) == 75, "\(send.stderr)")
        // A read the signal did not wake would last as long as the planner stalls (to the test's end);
        // the process's exit gets a loaded machine's margin.
        #expect(Date().timeIntervalSince(signalled) < 10, "the read of standard input wakes on the signal")
        #expect(send.stderr.contains("stopped while reading the scheduled plan"), "\(send.stderr)")
        #expect(try campaign.arrivals().isEmpty)
    }

    /// Waits for each process's exit (backstops of 90 s), and a second past the first plan's.
    @Test(.timeLimit(.minutes(3))) func aCutScheduledPipeIsRefusedAtOnceAndAReplanGoesOn() throws {
        // Quiet hours an hour away: every record's moment is its plan time,
        // so a plan made a second later differs in every `at`.
        let t = ScheduledSendTests.soon(0)
        let quiet = ScheduledSendTests.quietHours(from: t + 3600, to: t + 7200)
        let campaign = try Campaign(base: t, groups: [(0, 600)]) { _, _ in quiet }
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let cut = try campaign.pipe(simulator, [], through: "head -n 300")
        #expect(cut.wait(timeout: ScheduledSendTests.backstop) == 65, "\(cut.stderr)")
        #expect(cut.stderr.contains("cut after 299 records") && cut.stderr.contains("--replan"), "\(cut.stderr)")
        let told = try Self.status(campaign)
        #expect(told["resume"]?.stringValue?.hasSuffix("campaign send --resume journal --replan") == true && told["plan_incomplete"] == .bool(true), "\(told)")
        #expect(try campaign.arrivals().isEmpty, "nothing sent from a cut scheduled plan")
        let plain = try campaign.resume(simulator)
        #expect(plain.wait(timeout: ScheduledSendTests.backstop) == 66, "\(plain.stderr)")
        #expect(plain.stderr.contains("--replan"), "\(plain.stderr)")
        let planned = wallClockSeconds().rounded(.down)
        while wallClockSeconds() < planned + 1 { usleep(20_000) }
        let replan = try campaign.pipe(simulator, [], replan: true)
        #expect(replan.wait(timeout: ScheduledSendTests.backstop) == 0, "\(replan.stderr)")
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

    /// Waits for: status telling the send waiting between runs (phase
    /// "waiting", its wait journaled), asserted on that very status; then the
    /// resumed send's exit. The moment is 30 s on (it was 16 s): the wait,
    /// until 5 s before it, is there to be seen by a poll on a busy machine.
    @Test(.timeLimit(.minutes(3))) func statusTellsAWaitingSendFromOneKilledWhileWaiting() throws {
        // Three due now, three in 30 s; a 5 s hold: the send closes its
        // connections and waits (up, its pid alive) until 5 s before the moment.
        let moment = ScheduledSendTests.soon(30)
        let campaign = try Campaign(base: moment, groups: [(1, 3), (0, 3)])
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let send = try campaign.send(simulator, ["--hold-open", "5", "--metrics", "send.prom"])
        let waiting = ScheduledSendTests.awaitStatus(campaign, "a waiting send") {
            $0["phase"]?.stringValue == "waiting" && $0["waiting_until"]?.stringValue != nil
        }
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
        #expect(resumed.wait(timeout: ScheduledSendTests.backstop) == 0, "\(resumed.stderr)")
        #expect(try Journal.read(directory: campaign.dir.file("journal")).settings.holdOpenSeconds == 5, "a resume keeps --hold-open")
        let arrivals = try campaign.arrivals()
        #expect(arrivals.count == 6 && arrivals.values.allSatisfy { $0.count == 1 })
        #expect(try Self.page(campaign).contains("run 2 (resume)"))
        // Nothing more to do: cron's next --due-only changes nothing.
        let log = try Data(contentsOf: URL(fileURLWithPath: campaign.dir.file("journal/journal.log")))
        let again = try campaign.resume(simulator, ["--due-only"])
        #expect(again.wait(timeout: ScheduledSendTests.backstop) == 0 && again.stderr.contains("already complete"))
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
