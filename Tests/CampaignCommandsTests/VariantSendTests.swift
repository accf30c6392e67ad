import Foundation
import Testing
import APNSWire
import CampaignIO
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import PlanStream

/// A job with variants planned and sent against the simulator: the holdout
/// never reaches the gateway, and every count per variant adds up to the whole.
@Suite(.ownThreads) struct VariantSendTests {
    static let job = #"""
    {"campaign":"spring-ab","format":"h2","topic":"com.example.campaign","variants":[
      {"name":"A","weight":45,"messages":{"en":{"alert":"A {n}"}}},
      {"name":"B","weight":45,"messages":{"en":{"alert":"B {n}"}}},
      {"name":"control","weight":10,"holdout":true}]}
    """#

    /// Plans `count` random devices with the job above; returns the tokens held out.
    static func plan(count: Int, in dir: TemporaryDirectory, seed: UInt64) throws -> (tokens: Set<String>, holdout: Set<String>) {
        let (csv, tokens) = randomAudienceCSV(count: count, seed: seed)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try Self.job.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let run = try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--out", "plan.ndjson", "--shards", "16", "--summary", "summary.json"], in: dir)
        #expect(run.status == 0, "\(run.err)")
        #expect(run.err.contains("held out: plan.ndjson.holdout.ndjson"), "\(run.err)")
        var info = stat()
        #expect(stat(dir.file("plan.ndjson.holdout.ndjson"), &info) == 0 && info.st_mode & 0o777 == 0o600)
        let holdout = try String(contentsOfFile: dir.file("plan.ndjson.holdout.ndjson"), encoding: .utf8).split(separator: "\n").map {
            try #require(JSONValue.parse(String($0))["token"]?.stringValue)
        }
        return (tokens, Set(holdout))
    }

    static func statusJSON(_ dir: TemporaryDirectory, _ journal: String = "journal") throws -> JSONValue {
        let status = try ChannelsTests.run(["status", journal, "--json"], in: dir)
        #expect(status.status == 0, "\(status.err)")
        return try JSONValue.parse(status.out)
    }

    /// Each variant's counts add up to the whole's; returns them by name.
    static func expectVariantsAddUp(_ variants: JSONValue?, planned: Int, accepted: Int, failed: Int) -> [String: [Int64]] {
        var byName: [String: [Int64]] = [:]
        for (name, v) in variants?.objectMembers ?? [] {
            byName[name] = [v["planned"]?.integerValue ?? -1, v["accepted"]?.integerValue ?? -1, v["failed"]?.integerValue ?? -1]
        }
        #expect(byName.keys.sorted() == ["A", "B"], "a holdout has no records to count in a send")
        #expect(byName.values.reduce(0) { $0 + $1[0] } == Int64(planned))
        #expect(byName.values.reduce(0) { $0 + $1[1] } == Int64(accepted))
        #expect(byName.values.reduce(0) { $0 + $1[2] } == Int64(failed))
        return byName
    }

    @Test(.timeLimit(.minutes(2))) func noHoldoutDeviceReachesTheGatewayAndEveryCountPerVariantAddsUp() throws {
        let dir = TemporaryDirectory("variantsend")
        let (tokens, holdout) = try Self.plan(count: 4_000, in: dir, seed: 35)
        #expect(holdout.count > 300 && holdout.count < 500)
        let planned = tokens.subtracting(holdout)
        var faults = FaultPlan()
        let bad = Array(planned.sorted().prefix(7))
        faults.badTokens = Set(bad.map { DeviceToken(hex: $0)!.bytes })
        let simulator = try startHTTP2Simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let run = try H2SendTests.send(dir, simulator, ["--report", "report.json", "--metrics", "send.prom"])
        #expect(run.wait(timeout: 90) == 0, "\(run.stderr)")
        simulator.stop()
        let recorded = Set(try H2SendTests.recorded(dir).map(\.token))
        #expect(recorded.isDisjoint(with: holdout), "a holdout device was sent to")
        #expect(recorded == planned.subtracting(bad))
        #expect(run.stderr.contains("variants (every run): A "))

        let report = try JSONValue.parse(Array(try #require(FileManager.default.contents(atPath: dir.file("report.json")), "no report: the send never finished")))
        let fromReport = Self.expectVariantsAddUp(report["variants"], planned: planned.count, accepted: planned.count - bad.count, failed: bad.count)
        let status = try Self.statusJSON(dir)
        let fromStatus = Self.expectVariantsAddUp(status["variants"], planned: planned.count, accepted: Int(status["accepted"]!.integerValue!),
                                                  failed: Int(status["failed"]!.integerValue!))
        #expect(fromStatus == fromReport)
        // The plan's summary counted the same devices.
        let summary = try JSONValue.parse(Array(try #require(FileManager.default.contents(atPath: dir.file("summary.json")))))
        #expect(summary["per_variant"]?["A"]?["planned"]?.integerValue == fromReport["A"]?[0])
        #expect(summary["per_variant"]?["control"]?["held_out"]?.integerValue == Int64(holdout.count))

        let metrics = try String(contentsOfFile: dir.file("send.prom"), encoding: .utf8)
        #expect(metrics.contains("campaign_send_variant_accepted_total{journal=\"journal\",variant=\"A\"} \(fromReport["A"]![1])"), "\(metrics)")
        #expect(metrics.contains("campaign_send_variant_failed_total{journal=\"journal\",variant=\"B\"} \(fromReport["B"]![2])"))
        let page = try ChannelsTests.run(["status", "journal", "--html", "page.html"], in: dir)
        #expect(page.status == 0, "\(page.err)")
        let html = try String(contentsOfFile: dir.file("page.html"), encoding: .utf8)
        #expect(html.contains("<h2>Variants</h2>") && html.contains("<tr><td>A</td><td>\(fromReport["A"]![0])</td><td>\(fromReport["A"]![1])</td>"))
    }

    @Test(.timeLimit(.minutes(3))) func aKilledSendResumedKeepsEachVariantsCountsRight() throws {
        let dir = TemporaryDirectory("variantkill")
        let (tokens, holdout) = try Self.plan(count: 8_000, in: dir, seed: 36)
        let planned = tokens.subtracting(holdout)
        var faults = FaultPlan()
        let bad = Array(planned.sorted().prefix(40))
        faults.badTokens = Set(bad.map { DeviceToken(hex: $0)!.bytes })
        let simulator = try startHTTP2Simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let start = ["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)", "--rate", "4000", "--report", "report.json"]
            + SendProcessTests.credentials()
        // Each kill once a random number of notifications more are recorded (the last run keeps at least half the send).
        let (kills, finished) = try killRepeatedlyThenFinish(kills: 2, of: planned.count, seed: 36, recorded: { simulator.currentStatistics().accepted }, next: {
            let resume = FileManager.default.fileExists(atPath: dir.file("journal/journal.log"))
            return try CampaignProcess(resume ? ["send", "--resume", "journal", "--report", "report.json"] + SendProcessTests.credentials() : start,
                                       in: dir.path)
        }, kill: { $0.kill9() })
        #expect(kills >= 2 && finished)
        simulator.stop()
        #expect(Set(try H2SendTests.recorded(dir).map(\.token)).isDisjoint(with: holdout))
        let report = try JSONValue.parse(Array(try #require(FileManager.default.contents(atPath: dir.file("report.json")), "no report: the send never finished")))
        let fromReport = Self.expectVariantsAddUp(report["variants"], planned: planned.count, accepted: planned.count - bad.count, failed: bad.count)
        let status = try Self.statusJSON(dir)
        #expect(status["accepted"]?.integerValue == Int64(planned.count - bad.count))
        let fromStatus = Self.expectVariantsAddUp(status["variants"], planned: planned.count, accepted: planned.count - bad.count, failed: bad.count)
        #expect(fromStatus == fromReport)
    }
    /// The holdout file is the control group's only record: the README's
    /// pipe resume (`plan | send --resume J --replan`) of a send already
    /// complete closes the pipe under the planner, and the holdout the
    /// first plan wrote stays whole (it was emptied: 46 lines to 0).
    @Test(.timeLimit(.minutes(2))) func aPipeResumeOfACompleteSendLeavesTheHoldoutWhole() throws {
        let dir = TemporaryDirectory("variantpipe")
        // Plans far larger than a pipe's buffer, so the planner is still
        // writing when the resume closes the pipe; small enough for a
        // sanitized simulator (350 a second under ThreadSanitizer).
        let (csv, _) = randomAudienceCSV(count: 6_000, seed: 37)
        try (csv + "not-a-token,en,1\nzz,en,2\n").write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try Self.job.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        let campaign = SimulatorProcessTests.binary.path
        let credentials = SendProcessTests.credentials().map { "'\($0)'" }.joined(separator: " ")
        func pipe(_ send: String) throws -> CampaignProcess {
            try CampaignProcess(["-c", "'\(campaign)' plan job.json audience.csv | '\(campaign)' \(send)"], in: dir.path,
                                executable: URL(fileURLWithPath: "/bin/bash"))
        }
        let first = try pipe("send --journal journal --gateway 127.0.0.1:\(simulator.port) \(credentials)")
        #expect(first.wait(timeout: 90) == 0, "\(first.stderr)")
        let path = dir.file("spring-ab.holdout.ndjson")
        let written = try #require(FileManager.default.contents(atPath: path))
        let lines = written.split(separator: 0x0A).count
        #expect(lines > 400 && lines < 800, "about a tenth held out: \(lines)")

        let rejects = try #require(FileManager.default.contents(atPath: dir.file("spring-ab.rejects.ndjson")))
        #expect(rejects.split(separator: 0x0A).count == 2)
        let again = try pipe("send --resume journal --replan")
        #expect(again.wait(timeout: 90) == 0, "\(again.stderr)")
        #expect(again.stderr.contains("already complete"), "\(again.stderr)")
        #expect(FileManager.default.contents(atPath: path) == written, "the holdout is as the first plan wrote it")
        #expect(FileManager.default.contents(atPath: dir.file("spring-ab.rejects.ndjson")) == rejects, "so are the rejects")
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o600)
    }
    /// Counts per variant are sums over the journal's outcomes: after a
    /// kill -9 (no end, the variants record behind the proofs) status's
    /// variants add up to its totals.
    @Test(.timeLimit(.minutes(2))) func afterAKillStatusVariantsAddUpToItsTotals() throws {
        let dir = TemporaryDirectory("variant-books")
        let (tokens, holdout) = try Self.plan(count: 6_000, in: dir, seed: 52)
        let planned = tokens.subtracting(holdout)
        var faults = FaultPlan()
        faults.badTokens = Set(planned.sorted().prefix(30).map { DeviceToken(hex: $0)!.bytes })
        let simulator = try startHTTP2Simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let send = try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)", "--rate", "2000"]
                                       + SendProcessTests.credentials(), in: dir.path)
        #expect(simulator.waitForStatistics(timeout: 60) { $0.accepted >= 2_000 })
        send.kill9()
        let status = try Self.statusJSON(dir)
        #expect(status["outcome"]?.stringValue == "killed", "\(status)")
        let accepted = Int(status["accepted"]?.integerValue ?? -1) + Int(status["presumed"]?.integerValue ?? 0)
        let failed = Int(status["failed"]?.integerValue ?? -1)
        #expect(accepted > 0)
        _ = Self.expectVariantsAddUp(status["variants"], planned: planned.count, accepted: accepted, failed: failed)
    }

    /// A send stopped partway has read only part of its plan: each variant's
    /// planned still comes from the plan's trailer, so the report's and the
    /// metrics' variants add up to the plan (they were the records read so far).
    @Test(.timeLimit(.minutes(2))) func aStoppedSendsReportAndMetricsCountEachVariantsWholePlan() throws {
        let dir = TemporaryDirectory("variant-report")
        let (tokens, holdout) = try Self.plan(count: 20_000, in: dir, seed: 61)
        let planned = tokens.subtracting(holdout)
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        let send = try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)", "--rate", "1000",
                                        "--report", "report.json", "--metrics", "metrics.prom"] + SendProcessTests.credentials(), in: dir.path)
        #expect(simulator.waitForStatistics(timeout: 60) { $0.accepted >= 1_000 })
        kill(send.process.processIdentifier, SIGTERM)
        #expect(send.wait(timeout: 30) == 75, "\(send.stderr)")
        let report = try JSONValue.parse(String(contentsOfFile: dir.file("report.json"), encoding: .utf8))
        let accepted = Int(report["accepted"]?.integerValue ?? -1), failed = Int(report["failed"]?.integerValue ?? -1)
        #expect(accepted >= 1_000 && accepted < planned.count, "\(report)")
        _ = Self.expectVariantsAddUp(report["variants"], planned: planned.count, accepted: accepted, failed: failed)
        // The metrics file's last rewrite: the same books.
        var metricPlanned = 0
        for line in try String(contentsOfFile: dir.file("metrics.prom"), encoding: .utf8).split(separator: "\n")
        where line.hasPrefix("campaign_send_variant_planned{") {
            metricPlanned += Int(line.split(separator: " ").last ?? "") ?? -1_000_000
        }
        #expect(metricPlanned == planned.count)
    }

    /// Over a manifest with a part not started: its records count as planned, so the variants add up to the plan.
    @Test(.timeLimit(.minutes(2))) func overAManifestWithAPartNotStartedTheVariantsAddUpToThePlan() throws {
        let dir = TemporaryDirectory("variant-parts")
        let (csv, _) = randomAudienceCSV(count: 6_000, seed: 53)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try Self.job.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        #expect(try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--parts", "3", "--out", "parts"], in: dir).status == 0)
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        for k in 0..<2 {
            let send = try CampaignProcess([ "send", "parts/part-00\(k).plan", "--journal", "j/00\(k)", "--gateway", "127.0.0.1:\(simulator.port)"]
                                           + SendProcessTests.credentials(), in: dir.path)
            #expect(send.wait(timeout: 60) == 0, "\(send.stderr)")
        }
        let status = try JSONValue.parse(try ChannelsTests.run(["status", "--manifest", "parts/manifest.json", "--journals", "j/*", "--json"], in: dir).out)
        let records = try PlanManifest.load(path: dir.file("parts/manifest.json")).records
        #expect(status["not_started"]?.integerValue == 1, "\(status)")
        _ = Self.expectVariantsAddUp(status["variants"], planned: records, accepted: Int(status["accepted"]?.integerValue ?? -1),
                                     failed: Int(status["failed"]?.integerValue ?? -1))
        // And each part's own counts, the one not started included, add up to the totals.
        guard case .array(let parts)? = status["part_status"] else { Issue.record("\(status)"); return }
        for field in ["done", "accepted", "failed", "remaining", "resends", "duplicates_risked"] {
            let sum = parts.reduce(Int64(0)) { $0 + ($1[field]?.integerValue ?? -1_000_000) }
            #expect(sum == status[field]?.integerValue, "\(field): the parts' \(sum) against the totals' \(status[field]?.integerValue ?? -1)")
        }
        for name in ["A", "B"] {
            for count in ["planned", "accepted", "failed"] {
                let sum = parts.reduce(Int64(0)) { $0 + ($1["variants"]?[name]?[count]?.integerValue ?? -1_000_000) }
                #expect(sum == status["variants"]?[name]?[count]?.integerValue, "\(name) \(count): the parts' \(sum)")
            }
        }
        let notStarted = try #require(parts.first { $0["state"]?.stringValue == "not started" })
        #expect(notStarted["remaining"] == notStarted["plan_records"] && notStarted["done"] == .number("0"), "\(notStarted)")
    }
}
