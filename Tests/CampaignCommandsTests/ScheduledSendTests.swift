import Foundation
import Testing
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import LocalTime
import SendJournal

/// Scheduled campaigns sent for real: waves a minute apart made from the
/// current time with zones whose offsets differ by a minute, checked against
/// the simulator's record of when each notification arrived.
///
/// On a busy machine (other suites, other work on the same cores) a test
/// waits for the event itself (a process's exit, the simulator's record
/// count, a status the journal tells, the journal complete), each wait with
/// a long backstop that is not the assertion; what the test checks of
/// correctness stays strict (nothing before its moment or inside quiet
/// hours, each notification once, nothing lost), and how late a
/// notification may arrive after its moment gets ``lateOnALoadedMachine``.
/// Only ``ScheduledWaveRealTimeTests`` holds the sender to its moments
/// tightly, in a phase of `make test` with few other tests beside it.
@Suite(.ownThreads) struct ScheduledSendTests {
    /// How late (ms) a notification may arrive after it was due when the
    /// machine is loaded: the send process, the simulator and the test share
    /// cores with other work (a notification held past its moment for good,
    /// or until a later wave a minute on, is still caught).
    static let lateOnALoadedMachine: Int64 = 10_000

    /// A backstop (seconds) for waiting on an event the test expects soon: long
    /// enough that only a send that never gets there fails it.
    static let backstop: Double = 90

    /// Polls `status journal --json` until `wanted` holds of what it tells
    /// (the event the test waits for), for at most `within` seconds; the
    /// status that held (asserted on by the caller, so nothing is read twice
    /// across a change), or the last one seen, with an issue recorded.
    static func awaitStatus(_ campaign: Campaign, _ what: String, within: Double = backstop,
                            until wanted: (JSONValue) -> Bool) -> JSONValue {
        var last = JSONValue.null
        let held = eventually(within: within) {
            guard let run = try? PlanProcessTests.run(["status", "journal", "--json"], in: campaign.dir),
                  let status = try? JSONValue.parse(String(decoding: run.out, as: UTF8.self)) else { return false }
            last = status
            return wanted(status)
        }
        #expect(held, "status never told \(what) within \(Int(within)) s: \(last)")
        return last
    }

    /// `campaign send --resume journal --due-only` run the way cron runs it,
    /// `pacing` µs apart (cron's interval, shortened), until the journal
    /// says complete; at most `maxRuns` runs or `backstop` seconds, bounds
    /// only a send that never completes reaches. The runs made and the last
    /// outcome journaled.
    static func cronUntilComplete(_ campaign: Campaign, _ simulator: GatewaySimulator, pacing: useconds_t,
                                  maxRuns: Int = 300, backstop: Double = 150) throws -> (runs: Int, outcome: String) {
        var runs = 0
        var outcome = try Journal.read(directory: campaign.dir.file("journal")).outcome?.rawValue ?? "none"
        let deadline = Date().addingTimeInterval(backstop)
        while outcome != "complete", runs < maxRuns, Date() < deadline {
            let run = try campaign.resume(simulator, ["--due-only"])
            #expect(run.wait(timeout: Self.backstop) == 0, "\(run.stderr)")
            runs += 1
            outcome = try Journal.read(directory: campaign.dir.file("journal")).outcome?.rawValue ?? "none"
            if outcome != "complete" { usleep(pacing) }
        }
        return (runs, outcome)
    }

    /// When each accepted notification arrived (UNIX milliseconds) in a simulator's `--record` file, by token, every arrival kept.
    static func arrivals(inRecord path: String) throws -> [String: [Int64]] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [:] }
        var out: [String: [Int64]] = [:]
        for line in text.split(separator: "\n") {
            let v = try JSONValue.parse(String(line))
            out[try #require(v["token"]?.stringValue), default: []].append(try #require(v["received_ms"]?.integerValue))
        }
        return out
    }

    /// A campaign whose devices sit in fixed-offset zones: `groups` gives each
    /// zone's offset in minutes and its device count. Every device's moment is
    /// `localTime` (the time of day of `base` in UTC) on `base`'s date, so a
    /// zone `m` minutes ahead of UTC has its moment at `base - m·60`.
    struct Campaign {
        let dir = TemporaryDirectory("scheduled")
        /// Each token's zone offset (minutes) and moment.
        var moments: [String: (offset: Int, at: Int64)] = [:]
        var tokens: [String] { Array(moments.keys) }

        /// `extra`: more job keys (`"expiresIn":10,`), each followed by a comma.
        init(base: Int64, groups: [(minutes: Int, count: Int)], format: String = "h2", extra: String = "",
             schedule: ((String, String) -> String)? = nil) throws {
            try? FileManager.default.createSymbolicLink(atPath: dir.file("certs"), withDestinationPath: TestCertificates.directory)
            let day = base - ((base % 86_400) + 86_400) % 86_400
            let date = CivilDate(daysSinceEpoch: Int(day / 86_400)).description
            let text = TimeOfDay(seconds: Int(base - day)).description
            let key = schedule?(text, date) ?? #""deliverAt":{"localTime":"\#(text)","date":"\#(date)","window":"1h","defaultTimeZone":"UTC"}"#
            let wire = format == "h2" ? #""format":"h2","topic":"com.example.campaign""# : #""format":"\#(format)""#
            try #"{"campaign":"waves",\#(extra)\#(wire),\#(key),"messages":{"en":{"alert":"Wave {n}"}}}"#
                .write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
            var rows = ["token,lang,tz,n"]
            var n = 0
            for (minutes, count) in groups {
                for _ in 0..<count {
                    n += 1
                    let token = String(format: "%064x", n * 7919 + minutes + 100_000)
                    rows.append("\(token),en,\(ZoneDatabase.offsetName(minutes * 60)),\(n)")
                    moments[token] = (minutes, base - Int64(minutes * 60))
                }
            }
            try rows.joined(separator: "\n").write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
            let run = try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--out", "plan.ndjson"], in: dir)
            #expect(run.status == 0, "\(run.err)")
        }

        /// When each accepted notification arrived (UNIX milliseconds), by token, every arrival kept.
        func arrivals() throws -> [String: [Int64]] { try ScheduledSendTests.arrivals(inRecord: dir.file("record.ndjson")) }

        func send(_ simulator: GatewaySimulator, _ extra: [String]) throws -> CampaignProcess {
            try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)"]
                                + SendProcessTests.credentials() + extra, in: dir.path)
        }

        /// `campaign plan … | campaign send …`: a new send, or with `replan`
        /// `send --resume journal --replan`; `through` is a filter between them (`head -n 300`).
        func pipe(_ simulator: GatewaySimulator, _ extra: [String], through: String? = nil, replan: Bool = false) throws -> CampaignProcess {
            let campaign = SimulatorProcessTests.binary.path
            let start = replan ? ["send", "--resume", "journal", "--replan"]
                               : ["send", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)"] + SendProcessTests.credentials()
            let send = (start + extra).map { "'\($0)'" }.joined(separator: " ")
            let plan = "'\(campaign)' plan job.json audience.csv --rejects rejects.ndjson" + (through.map { " | \($0)" } ?? "")
            return try CampaignProcess(["-c", "\(plan) | '\(campaign)' \(send)"], in: dir.path, executable: URL(fileURLWithPath: "/bin/bash"))
        }

        /// The expiry each token was sent with (the last time it arrived).
        func expiries() throws -> [String: Int64] {
            guard let text = try? String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8) else { return [:] }
            var out: [String: Int64] = [:]
            for line in text.split(separator: "\n") {
                let v = try JSONValue.parse(String(line))
                out[try #require(v["token"]?.stringValue)] = v["expiry"]?.integerValue
            }
            return out
        }

        func resume(_ simulator: GatewaySimulator, _ extra: [String] = []) throws -> CampaignProcess {
            try CampaignProcess(["send", "--resume", "journal", "--gateway", "127.0.0.1:\(simulator.port)"] + extra, in: dir.path)
        }

        /// Every token arrived exactly once; none before its moment, and each within `late` ms after it
        /// (or, for a moment already past when the send began at `started`, within `pastLate` ms of that:
        /// the process starting and connecting). The defaults are a loaded machine's
        /// (``ScheduledSendTests/lateOnALoadedMachine``); ``ScheduledWaveRealTimeTests`` passes tight ones.
        func expectEachOnceOnTime(started: Int64, late: Int64 = ScheduledSendTests.lateOnALoadedMachine,
                                  pastLate: Int64 = ScheduledSendTests.lateOnALoadedMachine, skipping skipped: Set<String> = []) throws {
            let arrivals = try self.arrivals()
            #expect(Set(arrivals.keys) == Set(tokens).subtracting(skipped), "every notification delivered, none lost")
            #expect(arrivals.values.allSatisfy { $0.count == 1 }, "none twice: \(arrivals.filter { $0.value.count > 1 }.count)")
            for (token, times) in arrivals {
                let (offset, at) = moments[token]!
                let due = max(at * 1000, started)
                #expect(times[0] >= at * 1000, "zone \(offset) min: arrived \(times[0] - at * 1000) ms before its moment")
                #expect(times[0] <= due + (at * 1000 < started ? pastLate : late), "zone \(offset) min: arrived \(times[0] - due) ms after it was due")
            }
        }
    }

    static func nowMilliseconds() -> Int64 { Int64(wallClockSeconds() * 1000) }

    /// A job's `quietHours` key, from `from` to `to` (UNIX seconds) on UTC's clock.
    static func quietHours(from: Int64, to: Int64) -> String {
        let tod = { (s: Int64) in TimeOfDay(seconds: Int(((s % 86_400) + 86_400) % 86_400)).description }
        return #""quietHours":{"from":"\#(tod(from))","to":"\#(tod(to))","defaultTimeZone":"UTC"}"#
    }

    /// The next whole second at least `lead` seconds away.
    static func soon(_ lead: Double) -> Int64 { Int64((wallClockSeconds() + lead).rounded(.up)) }

    /// With a ledger: the waiting send's second run opens its segment again
    /// (it hung for good on its own lock from the first run: found by a new user's trial).
    /// Waits for the send's exit (backstop 150 s, the second wave being a
    /// minute on); each arrival within ``lateOnALoadedMachine`` of its moment.
    @Test(.timeLimit(.minutes(5))) func aWaitingSendWithALedgerStartsItsNextRun() throws {
        let w1 = Self.soon(3)
        let campaign = try Campaign(base: w1, groups: [(0, 10), (-1, 10)])
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let started = Self.nowMilliseconds()
        let send = try campaign.send(simulator, ["--hold-open", "5", "--ledger", "ledger"])
        #expect(send.wait(timeout: 150) == 0, "\(send.stderr)")
        try campaign.expectEachOnceOnTime(started: started)
        let state = try Journal.read(directory: campaign.dir.file("journal"))
        #expect(state.outcome == .complete && state.runs == 2, "the second run sent the second wave")
        let stats = try PlanProcessTests.run(["ledger", "stats", "ledger"], in: campaign.dir)
        #expect(String(decoding: stats.out, as: UTF8.self).contains("20 entries"), "both waves in the ledger: \(String(decoding: stats.out, as: UTF8.self)) \(stats.err)")
    }

    /// Waits for: the simulator's record of the first wave (15), then status
    /// telling the send waiting (its connections open) for the wave a
    /// minute later, the first wave journaled done (so the kill lands in the
    /// wait, not among acceptances still to be journaled); then the resumed
    /// send's exit.
    @Test(.timeLimit(.minutes(5))) func aSendKilledWhileWaitingResumesWithoutLosingOrRepeating() throws {
        let w1 = Self.soon(4)
        let campaign = try Campaign(base: w1, groups: [(3, 5), (0, 10), (-1, 10)])
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let started = Self.nowMilliseconds()
        let first = try campaign.send(simulator, [])
        let firstWave = Set(campaign.moments.filter { $0.value.offset >= 0 }.keys)
        #expect(eventually(within: Self.backstop) { (try? campaign.arrivals().keys.count) == firstWave.count })
        // Waiting, connections open, for the wave a minute later.
        let json = Self.awaitStatus(campaign, "the first wave done and a wait until \(utcText(w1 + 60))") {
            $0["done"]?.integerValue == Int64(firstWave.count) && $0["waiting_until"]?.stringValue == utcText(w1 + 60)
        }
        #expect(json["waiting"]?.integerValue == 10, "\(json)")
        #expect(json["phase"]?.stringValue == "running" && json["waiting_until"]?.stringValue == utcText(w1 + 60), "a wait with the connections open is told: \(json)")
        first.kill9()
        // (Standard error read to its end once the process is gone.)
        #expect(first.stderr.contains("waiting until \(utcText(w1 + 60)) for the next notifications (connections open)"), "\(first.stderr)")
        #expect(first.process.terminationReason == .uncaughtSignal)
        // Killed mid-run (no end record, no process): said so, with what goes on.
        let killed = try JSONValue.parse(String(decoding: try PlanProcessTests.run(["status", "journal", "--json"], in: campaign.dir).out, as: UTF8.self))
        #expect(killed["outcome"]?.stringValue == "killed" && killed["phase"]?.stringValue == "stopped" && killed["resume"]?.stringValue != nil)
        let resumed = try campaign.resume(simulator)
        #expect(resumed.wait(timeout: 150) == 0, "\(resumed.stderr)")
        try campaign.expectEachOnceOnTime(started: started)
        let state = try Journal.read(directory: campaign.dir.file("journal"))
        #expect(state.outcome == .complete && state.accepted == 25)
    }

    /// Waits for: the first run's exit; then `--due-only` runs 0.7 s apart
    /// until the journal says complete (at most 300 runs or 150 s: backstops).
    /// What the first run had to send is what was due while it ran, read
    /// from when it began and ended, not assumed to be the zone 2 min ahead
    /// alone (a busy machine may start it past the first moment).
    @Test(.timeLimit(.minutes(5))) func dueOnlyRunsFromCronDeliverEachNotificationOnceAndEndComplete() throws {
        let w1 = Self.soon(3)
        let campaign = try Campaign(base: w1, groups: [(2, 5), (0, 5), (-1, 5)])
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let firstBegan = Self.nowMilliseconds()
        let first = try campaign.send(simulator, ["--due-only"])
        #expect(first.wait(timeout: Self.backstop) == 0, "\(first.stderr)")
        let firstEnded = Self.nowMilliseconds()
        #expect(first.stderr.contains("send: scheduled"), "\(first.stderr)")
        // Only what was due: all whose moment came before the run began, none whose moment had not come when it ended.
        let sentFirst = Set(try campaign.arrivals().keys)
        let dueBefore = Set(campaign.moments.filter { $0.value.at * 1000 <= firstBegan }.keys)
        let dueBy = Set(campaign.moments.filter { $0.value.at * 1000 <= firstEnded }.keys)
        #expect(!dueBefore.isEmpty && sentFirst.isSuperset(of: dueBefore) && sentFirst.isSubset(of: dueBy),
                "only what was due: sent \(sentFirst.count), due before the run \(dueBefore.count), by its end \(dueBy.count)")
        // The next moment told is the first of those not sent (w1, unless the run began past it).
        let next = try #require(campaign.moments.filter { !sentFirst.contains($0.key) }.map(\.value.at).min())
        #expect(first.stderr.contains("due at \(utcText(next))"), "\(first.stderr)")
        let cron = try Self.cronUntilComplete(campaign, simulator, pacing: 700_000)
        let runs = 1 + cron.runs
        #expect(cron.outcome == "complete", "after \(runs) runs")
        #expect(runs > 3, "runs between the waves, with nothing due, as cron makes them")
        let arrivals = try campaign.arrivals()
        #expect(Set(arrivals.keys) == Set(campaign.tokens))
        #expect(arrivals.values.allSatisfy { $0.count == 1 }, "each delivered once over \(runs) runs")
        for (token, times) in arrivals { #expect(times[0] >= campaign.moments[token]!.at * 1000, "never early") }
        let again = try campaign.resume(simulator, ["--due-only"])
        #expect(again.wait(timeout: Self.backstop) == 0)
        #expect(again.stderr.contains("already complete"))
    }

    /// Waits for: the moment T+6 s (the devices a minute behind inside their
    /// quiet hours), then the send's exit. The devices a minute behind go
    /// within ``lateOnALoadedMachine`` of their quiet hours' end, or of the
    /// send's start if a busy machine got there later.
    @Test(.timeLimit(.minutes(5))) func quietHoursHoldBackDevicesUntilTheyEndEvenWhenTheyBeginAfterPlanning() throws {
        // Quiet from T−55 s to T+8 s on each device's clock. UTC's devices are
        // inside at plan time; those a minute behind enter them at T+5 s, while
        // the send is running; those a minute ahead are past them.
        let t = Self.soon(1)
        let quiet = Self.quietHours(from: t - 55, to: t + 8)
        var campaign = try Campaign(base: t, groups: [(0, 6), (-1, 6), (1, 6)]) { _, _ in quiet }
        // What each may not be sent in: its quiet hours in UTC.
        let quietUTC: [Int: ClosedRange<Int64>] = [0: (t - 55)...(t + 7), -1: (t + 5)...(t + 67), 1: (t - 115)...(t - 54)]
        for (token, value) in campaign.moments { campaign.moments[token] = (value.offset, 0) }
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        // Sending begins once the devices a minute behind are inside their quiet hours.
        while wallClockSeconds() < Double(t + 6) { usleep(50_000) }
        let started = Self.nowMilliseconds()
        let send = try campaign.send(simulator, [])
        #expect(send.wait(timeout: 150) == 0, "\(send.stderr)")
        let arrivals = try campaign.arrivals()
        #expect(Set(arrivals.keys) == Set(campaign.tokens))
        #expect(arrivals.values.allSatisfy { $0.count == 1 })
        for (token, times) in arrivals {
            let offset = campaign.moments[token]!.offset
            let second = times[0] / 1000
            #expect(!quietUTC[offset]!.contains(second), "zone \(offset) min sent at \(second - t) s, inside its quiet hours")
        }
        // The devices a minute behind went once their quiet hours ended, in a later run.
        let behind = arrivals.filter { campaign.moments[$0.key]!.offset == -1 }.map { $0.value[0] }
        let due = max((t + 68) * 1000, started)
        #expect(behind.allSatisfy { $0 >= (t + 68) * 1000 && $0 <= due + Self.lateOnALoadedMachine }, "\(behind.map { $0 - t * 1000 })")
        #expect(send.stderr.contains("held back by their quiet hours"), "\(send.stderr)")
    }

    @Test(.timeLimit(.minutes(2))) func lateNotificationsAreSkippedNotFailedAndListedAsSkipped() throws {
        let base = Int64(wallClockSeconds()) - 1
        // window 1h, late: skip: 2 h late is skipped, 30 min late goes at once.
        let campaign = try Campaign(base: base, groups: [(120, 3), (30, 4), (0, 2)]) { time, date in
            #""deliverAt":{"localTime":"\#(time)","date":"\#(date)","window":"1h","late":"skip","defaultTimeZone":"UTC"}"#
        }
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let send = try campaign.send(simulator, ["--report", "report.json", "--metrics", "send.prom"])
        #expect(send.wait(timeout: 60) == 0, "\(send.stderr)")
        let metrics = try String(contentsOfFile: campaign.dir.file("send.prom"), encoding: .utf8)
        #expect(metrics.split(separator: "\n").contains { $0.hasPrefix("campaign_send_skipped_total{") && $0.hasSuffix("} 3") }, "\(metrics)")
        let skipped = Set(campaign.moments.filter { $0.value.offset == 120 }.keys)
        #expect(Set(try campaign.arrivals().keys) == Set(campaign.tokens).subtracting(skipped))
        let report = try JSONValue.parse(try String(contentsOfFile: campaign.dir.file("report.json"), encoding: .utf8))
        #expect(report["skipped"]?.integerValue == 3 && report["failed"]?.integerValue == 0 && report["outcome"]?.stringValue == "complete")
        let status = try JSONValue.parse(String(decoding: try PlanProcessTests.run(["status", "journal", "--json"], in: campaign.dir).out, as: UTF8.self))
        #expect(status["skipped"]?.integerValue == 3 && status["failed"]?.integerValue == 0 && status["remaining"]?.integerValue == 0)
        let listed = String(decoding: try PlanProcessTests.run(["status", "journal", "--failures"], in: campaign.dir).out, as: UTF8.self)
            .split(separator: "\n").map { try! JSONValue.parse(String($0)) }
        #expect(listed.count == 3)
        #expect(listed.allSatisfy { $0["outcome"]?.stringValue == "skipped" && $0["code"]?.stringValue == "late" && $0["status"] == nil })
        #expect(Set(listed.compactMap { $0["token"]?.stringValue }) == skipped)
        #expect(listed.first?["reason"]?.stringValue?.hasPrefix("skipped: late by 2 h") == true)
    }

    /// A send whose first moment is a few seconds ahead waits without a
    /// connection (they dial when the wave is released): it says it waits,
    /// and does not say its connections are open; then the wave goes.
    @Test(.timeLimit(.minutes(2))) func aFirstWaitDoesNotClaimOpenConnections() throws {
        let campaign = try Campaign(base: Self.soon(8), groups: [(0, 3)])
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let send = try campaign.send(simulator, ["--report", "report.json"])
        #expect(send.wait(timeout: 60) == 0, "\(send.stderr)")
        #expect(send.stderr.contains("for the next notifications") && !send.stderr.contains("(connections open)"), "\(send.stderr)")
        #expect(try campaign.arrivals().count == 3)
        // The wave went in the run's last, partial second, after its last
        // whole one: that second is journaled too, so status tells the
        // connections and the round trip the report does.
        let report = try JSONValue.parse(try String(contentsOfFile: campaign.dir.file("report.json"), encoding: .utf8))
        let told = try Self.status(campaign)
        #expect((report["pool_connections"]?.integerValue ?? 0) > 0 && report["round_trip_ms"]?.doubleValue != nil, "\(report)")
        #expect(told["pool_connections"] == report["pool_connections"] && told["round_trip_ms"] == report["round_trip_ms"], "status \(told), report \(report)")
        let state = try Journal.read(directory: campaign.dir.file("journal"))
        let ticks = state.timeline.last ?? []
        #expect(ticks.last?.accepted == 3, "\(ticks)")
        // The run's time is one measure, in its end record and its report.
        let journaled = try #require(state.runSeconds.last ?? nil)
        #expect(abs(journaled - (report["seconds"]?.doubleValue ?? -1)) < 0.0011, "journal \(journaled) s, report \(report["seconds"] ?? .null)")
    }

    /// A binary replay is asked the schedule's verdict again, as its first
    /// try was when taken: every notification refused with status 1 (the
    /// gateway's trouble, never final) goes again after its backoff while its
    /// window (10 s, `late: skip`) lasts, and is then skipped, final; the send
    /// ends complete instead of replaying past the window until its outage limit.
    @Test(.timeLimit(.minutes(2))) func aBinaryReplayPastItsWindowIsSkipped() throws {
        let base = Int64(wallClockSeconds()) + 2
        let campaign = try Campaign(base: base, groups: [(0, 20)], format: "enhanced") { time, date in
            #""deliverAt":{"localTime":"\#(time)","date":"\#(date)","window":"10s","late":"skip","defaultTimeZone":"UTC"}"#
        }
        var faults = FaultPlan()
        faults.errorRate = 1
        let simulator = try SendProcessTests.simulator(in: campaign.dir, faults: faults)
        defer { simulator.stop() }
        let send = try campaign.send(simulator, ["--report", "report.json"])
        #expect(send.wait(timeout: 90) == 0, "\(send.stderr)")
        let refused = simulator.currentStatistics().rejected[1] ?? 0
        #expect(refused > 20, "replayed within its window: \(refused) refusals of 20 notifications")
        let report = try JSONValue.parse(try String(contentsOfFile: campaign.dir.file("report.json"), encoding: .utf8))
        #expect(report["outcome"]?.stringValue == "complete" && report["skipped"]?.integerValue == 20, "\(report)")
        #expect(report["accepted"]?.integerValue == 0 && report["failed"]?.integerValue == 0)
    }

    /// `campaign_send_in_flight` counts what was handed to a connection and
    /// is not final: not the records skipped as late, nor the one read and
    /// held until its moment. Waits for: status telling the wait journaled,
    /// then a metrics write with the 3 due accepted; then the signal's exit.
    @Test(.timeLimit(.minutes(3))) func whileAScheduledSendWaitsNothingIsInFlight() throws {
        let base = Int64(wallClockSeconds()) - 1
        // 2 h late (skipped), due now, and due in two minutes (waited for, connections open).
        let campaign = try Campaign(base: base, groups: [(120, 1100), (0, 3), (-2, 1)]) { time, date in
            #""deliverAt":{"localTime":"\#(time)","date":"\#(date)","window":"1h","late":"skip","defaultTimeZone":"UTC"}"#
        }
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let send = try campaign.send(simulator, ["--metrics", "send.prom", "--report", "report.json"])
        _ = Self.awaitStatus(campaign, "a wait journaled") { $0["waiting_until"]?.stringValue != nil }
        var metrics = ""
        let written = eventually(within: Self.backstop) {
            metrics = (try? String(contentsOfFile: campaign.dir.file("send.prom"), encoding: .utf8)) ?? ""
            return metrics.split(separator: "\n").contains { $0.hasPrefix("campaign_send_accepted_total{") && $0.hasSuffix("} 3") }
        }
        #expect(written, "\(metrics)")
        let lines = metrics.split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("campaign_send_skipped_total{") && $0.hasSuffix("} 1100") }, "\(metrics)")
        #expect(lines.contains { $0.hasPrefix("campaign_send_in_flight{") && $0.hasSuffix("} 0") }, "\(metrics)")
        #expect(lines.contains { $0.hasPrefix("campaign_send_up{") && $0.hasSuffix("} 1") }, "\(metrics)")
        kill(send.process.processIdentifier, SIGTERM)
        #expect(send.wait(timeout: Self.backstop) == 75, "\(send.stderr)")
        #expect(try campaign.arrivals().count == 3)
        // The journal ends as the report and the exit status do: interrupted while waiting.
        let report = try JSONValue.parse(try String(contentsOfFile: campaign.dir.file("report.json"), encoding: .utf8))
        #expect(report["outcome"]?.stringValue == "interrupted", "\(report)")
        let told = try Self.status(campaign)
        #expect(told["outcome"]?.stringValue == "interrupted" && told["resume"]?.stringValue?.hasSuffix("campaign send --resume journal") == true, "\(told)")
        let text = String(decoding: try PlanProcessTests.run(["status", "journal"], in: campaign.dir).out, as: UTF8.self)
        #expect(text.contains("interrupted while waiting to go on at "), "\(text)")
    }

    /// What quiet hours hold back is the send's state, told by the report of
    /// the run that left it and by status, not only under `this_run`.
    /// Quiet hours that begin after planning (the plan gives each device
    /// the moment it was planned at) and before sending: the gate holds them.
    /// Waits for: the quiet hours' start, a few seconds after planning.
    @Test(.timeLimit(.minutes(2))) func quietHoursHeldBackAreCountedForTheWholeSend() throws {
        var made: Campaign? = nil
        var quietFrom: Int64 = 0
        for lead in [4, 10, 30] as [Int64] {
            let now = Int64(wallClockSeconds())
            quietFrom = now + lead
            let campaign = try Campaign(base: now - 1, groups: [(0, 5)]) { _, _ in Self.quietHours(from: now + lead, to: now + 3600) }
            // Planned before they began (a busy machine may take longer: then again, with more lead).
            if Int64(wallClockSeconds()) < quietFrom { made = campaign; break }
        }
        let campaign = try #require(made)
        while wallClockSeconds() < Double(quietFrom) + 0.05 { usleep(20_000) }
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let send = try campaign.send(simulator, ["--due-only", "--report", "report.json"])
        #expect(send.wait(timeout: Self.backstop) == 0, "\(send.stderr)")
        #expect(try campaign.arrivals().isEmpty, "nothing inside quiet hours")
        let report = try JSONValue.parse(try String(contentsOfFile: campaign.dir.file("report.json"), encoding: .utf8))
        #expect(report["deferred_for_quiet_hours"]?.integerValue == 5, "\(report)")
        #expect(report["this_run"]?["deferred_for_quiet_hours"]?.integerValue == 5)
        let status = try PlanProcessTests.run(["status", "journal", "--json"], in: campaign.dir)
        let json = try JSONValue.parse(String(decoding: status.out, as: UTF8.self))
        #expect(json["deferred_for_quiet_hours"]?.integerValue == 5 && json["waiting"]?.integerValue == 5, "\(json)")
        let text = String(decoding: try PlanProcessTests.run(["status", "journal"], in: campaign.dir).out, as: UTF8.self)
        #expect(text.contains("5 waiting (5 of them held back by their quiet hours)"), "\(text)")
    }

    @Test(.timeLimit(.minutes(2))) func theReportGivesThePlansRecordsAndTheConnectionsOpened() throws {
        // 4 devices due half an hour ago (sent at once), 5 due in an hour (not by --due-only).
        let campaign = try Campaign(base: Int64(wallClockSeconds()) + 3600, groups: [(90, 4), (0, 5)])
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        func report() throws -> JSONValue {
            try JSONValue.parse(try String(contentsOfFile: campaign.dir.file("report.json"), encoding: .utf8))
        }
        let first = try campaign.send(simulator, ["--due-only", "--report", "report.json"])
        #expect(first.wait(timeout: 60) == 0, "\(first.stderr)")
        var r = try report()
        #expect(r["outcome"]?.stringValue == "scheduled" && r["accepted"]?.integerValue == 4, "\(r)")
        #expect(r["plan_records"]?.integerValue == 9, "the plan's records, not those read before the first one not due: \(r)")
        #expect((1...4).contains(r["pool_connections"]?.integerValue ?? 0), "\(r)")
        // Nothing more is due: the run opens no connection.
        let second = try campaign.resume(simulator, ["--due-only"])
        #expect(second.wait(timeout: 60) == 0, "\(second.stderr)")
        r = try report()
        #expect(r["outcome"]?.stringValue == "scheduled" && r["this_run"]?["already_done"]?.integerValue == 4, "\(r)")
        #expect(r["plan_records"]?.integerValue == 9, "\(r)")
        #expect(r["pool_connections"]?.integerValue == 0, "no connection was opened: \(r)")
        #expect(r["this_run"]?["reconnects"]?.integerValue == 0, "\(r)")
        #expect((4...9).contains(r["this_run"]?["records_read"]?.integerValue ?? -1), "what this run read of the plan: \(r)")
    }

    /// Waits for: the simulator's record of the 3 due at once, then status
    /// telling the wait journaled (`waiting_until`: with the connections open,
    /// or between runs), so the signal lands in the wait; then the exit.
    @Test(.timeLimit(.minutes(3)), arguments: [[], ["--hold-open", "5"]])
    func aSignalWhileWaitingEndsTheSendAtOnce(hold: [String]) throws {
        // Due a minute ago (sent at once), and in 50 s: the send waits, with its
        // connections open (the default hold) or between runs (a 5 s hold).
        let w1 = Self.soon(50)
        let campaign = try Campaign(base: w1, groups: [(1, 3), (0, 3)])
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let send = try campaign.send(simulator, hold)
        #expect(eventually(within: Self.backstop) { (try? campaign.arrivals().count) == 3 })
        let waiting = Self.awaitStatus(campaign, "a wait journaled") { $0["waiting_until"]?.stringValue != nil }
        #expect(waiting["waiting"]?.integerValue == 3, "\(waiting)")
        let signalled = Date()
        kill(send.process.processIdentifier, SIGTERM)
        #expect(send.wait(timeout: Self.backstop) == 75, "\(send.stderr)")
        // A wait the signal did not end would last until the moment, some 40 s on;
        // the process's exit gets a loaded machine's margin.
        #expect(Date().timeIntervalSince(signalled) < 10, "a wait ends at once on a signal")
        #expect(try campaign.arrivals().count == 3, "nothing sent before its moment")
        // The journal goes on: what is due is done, the rest still waits.
        let resumed = try campaign.resume(simulator, ["--due-only"])
        #expect(resumed.wait(timeout: Self.backstop) == 0, "\(resumed.stderr)")
        #expect(resumed.stderr.contains("due at \(utcText(w1))"), "\(resumed.stderr)")
        let status = try JSONValue.parse(String(decoding: try PlanProcessTests.run(["status", "journal", "--json"], in: campaign.dir).out, as: UTF8.self))
        #expect(status["waiting"]?.integerValue == 3 && status["done"]?.integerValue == 3)
    }

    @Test(.timeLimit(.minutes(5))) func theBinaryInterfaceReleasesWavesTheSameWay() throws {
        // One engine for both protocols: the same gate in front of binary connections.
        let w1 = Self.soon(3)
        let campaign = try Campaign(base: w1, groups: [(120, 3), (30, 4), (0, 5)], format: "enhanced") { time, date in
            #""deliverAt":{"localTime":"\#(time)","date":"\#(date)","window":"1h","late":"skip","defaultTimeZone":"UTC"}"#
        }
        let simulator = try SendProcessTests.simulator(in: campaign.dir)
        defer { simulator.stop() }
        let started = Self.nowMilliseconds()
        let send = try campaign.send(simulator, [])
        #expect(send.wait(timeout: Self.backstop) == 0, "\(send.stderr)")
        let skipped = Set(campaign.moments.filter { $0.value.offset == 120 }.keys)
        try campaign.expectEachOnceOnTime(started: started, skipping: skipped)
        let state = try Journal.read(directory: campaign.dir.file("journal"))
        #expect(state.outcome == .complete && state.skipped.count == 3 && state.accepted == 9)
    }
}
