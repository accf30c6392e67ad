import Foundation
import Testing
import CampaignIO
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import SendLedger
import LocalTime
import SendJournal

/// A frequencyCap is a promise about a device, kept across processes and
/// faults: two campaigns of one scope with a cap of 1, planned and sent with
/// one ledger, never both reach a device in the simulator's record — when
/// they release at the same moment, when the first was killed with
/// notifications written but not proven, when the first gave up against a
/// gateway that drops and refuses. What the rule stops is skipped, journaled
/// and counted as `frequency_capped`.
@Suite(.ownThreads) struct FrequencyCapAcrossSendsTests {
    /// A job of scope "marketing" with a cap of 1 whose alert names the campaign (the record tells them apart).
    static func job(_ campaign: String, format: String, schedule: String = "", in dir: TemporaryDirectory) throws {
        try #"{"campaign":"\#(campaign)","format":"\#(format)"\#(format == "h2" ? #","topic":"com.example.campaign""# : "")\#(schedule),"frequencyCap":{"max":1,"per":"24h","scope":"marketing"},"messages":{"en":{"alert":"\#(campaign) {n}"}}}"#
            .write(toFile: dir.file("\(campaign).json"), atomically: true, encoding: .utf8)
    }

    /// The simulator's record at `path`: per campaign (the alert's first word), the devices it reached and how often.
    static func reached(_ path: String) throws -> [String: [String: Int]] {
        var out: [String: [String: Int]] = [:]
        for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
            let v = try JSONValue.parse(String(line))
            let token = try #require(v["token"]?.stringValue)
            let payload = try JSONValue.parse(try #require(v["payload"]?.stringValue))
            let campaign = String(try #require(payload["aps"]?["alert"]?.stringValue).split(separator: " ")[0])
            out[campaign, default: [:]][token, default: 0] += 1
        }
        return out
    }

    /// What a journal says the rule stopped, by `status --json`.
    static func status(_ journal: String, in dir: TemporaryDirectory) throws -> JSONValue {
        let run = try PlanProcessTests.run(["status", journal, "--json"], in: dir)
        return try JSONValue.parse(String(decoding: run.out, as: UTF8.self))
    }

    /// Case 1: the same moment (scheduled) or both started at once (not):
    /// the second to claim a device sees the first's claim.
    @Test(.timeLimit(.minutes(3)), arguments: [false, true])
    func twoCampaignsOfAScopeReleasedAtOnceNeverBothReachADevice(scheduled: Bool) throws {
        let dir = TemporaryDirectory("cap-same-moment")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        var schedule = ""
        if scheduled {
            let moment = Int64(Date().timeIntervalSince1970) + 4
            let day = moment - moment % 86_400
            schedule = #","deliverAt":{"localTime":"\#(TimeOfDay(seconds: Int(moment - day)).description)","date":"\#(CivilDate(daysSinceEpoch: Int(day / 86_400)).description)","window":"1h","defaultTimeZone":"UTC"}"#
        }
        for name in ["spring", "summer"] {
            try LedgerProcessTests.audience(0..<2000, to: dir.file("\(name).csv"))
            try Self.job(name, format: "h2", schedule: schedule, in: dir)
            let planned = try LedgerProcessTests.plan(name, in: dir)
            #expect(planned.status == 0 && planned.summary?["planned"]?.integerValue == 2000, "\(planned.stderr)")
        }
        let sends = try ["spring", "summer"].map {
            try LedgerProcessTests.send("\($0).plan", journal: "j-\($0)", in: dir, port: simulator.port, extra: ["--connections", "2"])
        }
        for s in sends { #expect(s.wait(timeout: 120) == 0, "\(s.stderr)") }
        simulator.stop()
        let reached = try Self.reached(dir.file("record.ndjson"))
        let spring = reached["spring"] ?? [:], summer = reached["summer"] ?? [:]
        let both = Set(spring.keys).intersection(summer.keys)
        #expect(both.isEmpty, "\(both.count) devices reached by both campaigns of a cap of 1")
        #expect(Set(spring.keys).union(summer.keys).count == 2000, "every device reached by one of them")
        var accepted = 0, capped = 0
        for name in ["spring", "summer"] {
            let json = try Self.status("j-\(name)", in: dir)
            accepted += Int(json["accepted"]?.integerValue ?? -1)
            capped += Int(json["skipped_frequency_capped"]?.integerValue ?? -1)
            #expect(json["skipped"]?.integerValue == json["skipped_frequency_capped"]?.integerValue, "\(json)")
        }
        #expect(accepted == 2000 && capped == 2000, "\(accepted) accepted and \(capped) skipped at the cap over both")
    }

    /// Case 2: a binary send killed with kill -9 while notifications were
    /// written but not yet proven (the enhanced format proves after a
    /// window): the next campaign of the scope counts them all.
    @Test(.timeLimit(.minutes(3))) func aBinarySendKilledMidwayCountsWhatItWroteAgainstTheNextCampaign() throws {
        let dir = TemporaryDirectory("cap-binary-kill")
        let simulator = try SendProcessTests.simulator(in: dir)
        defer { simulator.stop() }
        for name in ["early", "late"] {
            try LedgerProcessTests.audience(0..<6000, to: dir.file("\(name).csv"))
            try Self.job(name, format: "enhanced", in: dir)
        }
        #expect(try LedgerProcessTests.plan("early", in: dir).status == 0)
        let early = try LedgerProcessTests.send("early.plan", journal: "j-early", in: dir, port: simulator.port,
                                                extra: ["--connections", "2", "--rate", "2000"])
        #expect(simulator.waitForStatistics(timeout: 60) { $0.accepted >= 2000 })
        early.kill9()
        let late = try LedgerProcessTests.plan("late", in: dir)
        #expect(late.status == 0, "\(late.stderr)")
        let sent = try LedgerProcessTests.send("late.plan", journal: "j-late", in: dir, port: simulator.port)
        #expect(sent.wait(timeout: 120) == 0, "\(sent.stderr)")
        simulator.stop()
        let reached = try Self.reached(dir.file("record.ndjson"))
        let both = Set(reached["early", default: [:]].keys).intersection(reached["late", default: [:]].keys)
        #expect(both.isEmpty, "\(both.count) devices reached by both (the early send's unproven notifications were not counted)")
        #expect(reached["early", default: [:]].count >= 2000)
        // Every device the late campaign did not reach was stopped by the rule, at plan or at the wire.
        let dropped = try LedgerProcessTests.rejected("late", code: "frequency_capped", in: dir).count
        let json = try Self.status("j-late", in: dir)
        let capped = Int(json["skipped_frequency_capped"]?.integerValue ?? -1)
        let accepted = Int(json["accepted"]?.integerValue ?? -1)
        #expect(accepted + dropped + capped == 6000, "\(accepted) accepted (\(reached["late", default: [:]].count) recorded), \(dropped) dropped by the plan, \(capped) at the wire; \(json)")
    }

    /// Another send of the scope stopped (SIGSTOP, a frozen container) while
    /// it holds the claim lock: a send never goes on unclaimed (a device got
    /// both campaigns), nor crawls (it waited 10 s a batch): it stops after
    /// 30 s with 69, nothing final, and a first SIGTERM still ends it at once;
    /// once the lock is free, the resume sends every device once.
    @Test(.timeLimit(.minutes(3))) func aClaimLockHeldByAFrozenSendStopsTheSendResumably() throws {
        let dir = TemporaryDirectory("cap-lock-held")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        try LedgerProcessTests.audience(0..<300, to: dir.file("autumn.csv"))
        try Self.job("autumn", format: "h2", in: dir)
        #expect(try LedgerProcessTests.plan("autumn", in: dir).status == 0)
        // The frozen send's lock: held by this process.
        try FileManager.default.createDirectory(atPath: dir.file("ledger"), withIntermediateDirectories: true)
        let lock = dir.file("ledger/\(LedgerFormat.claimLockName(scope: "marketing"))")
        let fd = open(lock, O_RDWR | O_CREAT, 0o600)
        #expect(fd >= 0 && flock(fd, LOCK_EX) == 0)
        // A first signal ends the wait at once.
        let signalled = try LedgerProcessTests.send("autumn.plan", journal: "j-signalled", in: dir, port: simulator.port)
        #expect(eventually(within: 30) { FileManager.default.fileExists(atPath: dir.file("j-signalled/journal.log")) })
        usleep(500_000)
        let signalledAt = Date()
        kill(signalled.process.processIdentifier, SIGTERM)
        #expect(signalled.wait(timeout: 30) == 75, "\(signalled.stderr)")
        #expect(Date().timeIntervalSince(signalledAt) < 10)
        // Left alone: 69 after the wait, naming the lock; nothing sent, nothing final.
        let started = Date()
        let send = try LedgerProcessTests.send("autumn.plan", journal: "j-autumn", in: dir, port: simulator.port)
        #expect(send.wait(timeout: 90) == 69, "\(send.stderr)")
        #expect(Date().timeIntervalSince(started) < 60)
        #expect(send.stderr.contains("has held the ledger's claim lock \(lock) for") && send.stderr.contains("resume"), "\(send.stderr)")
        #expect(simulator.currentStatistics().accepted == 0)
        #expect(try Journal.read(directory: dir.file("j-autumn")).doneCount == 0)
        // Free again: the resume sends each device once.
        close(fd)
        let resumed = try CampaignProcess(["send", "--resume", "j-autumn"] + SendProcessTests.credentials(), in: dir.path)
        #expect(resumed.wait(timeout: 120) == 0, "\(resumed.stderr)")
        simulator.stop()
        let reached = try Self.reached(dir.file("record.ndjson"))["autumn", default: [:]]
        #expect(reached.count == 300 && reached.values.allSatisfy { $0 == 1 })
    }

    /// Case 3: an HTTP/2 send against a gateway that drops connections,
    /// throttles and fails at random: what it may have reached (written,
    /// whatever the answer) counts, so the next campaign of the scope skips
    /// every device the first touched.
    @Test(.timeLimit(.minutes(3))) func anHTTP2SendAgainstATroubledGatewayCountsEveryDeviceItMayHaveReached() throws {
        let dir = TemporaryDirectory("cap-h2-trouble")
        var faults = FaultPlan()
        faults.dropEvery = 400
        faults.throttleRate = 0.05
        faults.errorRate = 0.05
        let troubled = try startHTTP2Simulator(in: dir, faults: faults)
        defer { troubled.stop() }
        for name in ["flash", "weekly"] {
            try LedgerProcessTests.audience(0..<3000, to: dir.file("\(name).csv"))
            try Self.job(name, format: "h2", in: dir)
        }
        #expect(try LedgerProcessTests.plan("flash", in: dir).status == 0)
        let flash = try LedgerProcessTests.send("flash.plan", journal: "j-flash", in: dir, port: troubled.port,
                                                extra: ["--connections", "2", "--rate", "1500"])
        // Stopped partway (SIGTERM once it has touched 1,000 devices), whatever the gateway made of it.
        #expect(troubled.waitForStatistics(timeout: 60) { $0.accepted >= 1000 })
        kill(flash.process.processIdentifier, SIGTERM)
        #expect([75, 69, 0].contains(flash.wait(timeout: 30) ?? -1), "\(flash.stderr)")
        troubled.stop()

        let healthy = try startHTTP2Simulator(in: dir) { $0.recordPath = dir.file("record-weekly.ndjson") }
        defer { healthy.stop() }
        #expect(try LedgerProcessTests.plan("weekly", in: dir).status == 0)
        let weekly = try LedgerProcessTests.send("weekly.plan", journal: "j-weekly", in: dir, port: healthy.port)
        #expect(weekly.wait(timeout: 120) == 0, "\(weekly.stderr)")
        healthy.stop()
        let first = try Self.reached(dir.file("record.ndjson"))["flash", default: [:]]
        let second = try Self.reached(dir.file("record-weekly.ndjson"))["weekly", default: [:]]
        #expect(first.count >= 500, "\(first.count) devices reached before the stop")
        let both = Set(first.keys).intersection(second.keys)
        #expect(both.isEmpty, "\(both.count) of the \(first.count) devices the first send reached got the second too")
    }
}
