import Foundation
import Testing
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import SendJournal

/// What the operator sees of a whole send (`status --json`, the resumed
/// report, the metrics file) counts every run, a killed one included.
@Suite(.ownThreads) struct WholeSendCountsTests {
    static func json(_ path: String) throws -> JSONValue { try JSONValue.parse(try String(contentsOfFile: path, encoding: .utf8)) }

    static func kinds(_ value: JSONValue?) -> [String: Int] {
        Dictionary(uniqueKeysWithValues: (value?.objectMembers ?? []).map { ($0.key, Int($0.value.integerValue ?? -1)) })
    }

    /// The counters and gauges of a metrics text (`# TYPE name counter`) without a sample line, but for the
    /// breakdowns by label, which have a series once something has a label value.
    static func seriesWithoutASample(_ text: String) -> [String] {
        let lines = text.split(separator: "\n").map(String.init)
        let names = lines.filter { $0.hasPrefix("# TYPE ") }.map { String($0.split(separator: " ")[2]) }
            .filter { !["campaign_send_failed_by_reason_total", "campaign_send_resent_by_kind_total"].contains($0) }
        return names.filter { name in !lines.contains { $0.hasPrefix("\(name){") } }
    }

    /// A sample's value: `campaign_send_NAME{journal="…"LABELS} V`.
    static func sample(_ text: String, _ name: String, labels: String = "") -> Int? {
        for line in text.split(separator: "\n") where line.hasPrefix("campaign_send_\(name){") && line.contains("\(labels)} ") {
            return Int(line.split(separator: " ").last ?? "")
        }
        return nil
    }

    @Test(.timeLimit(.minutes(3))) func aKilledRunsResendsAndConnectionsCountInTheWholeSend() throws {
        let dir = TemporaryDirectory("whole-send")
        _ = try H2SendTests.plan(count: 3000, in: dir)
        var faults = FaultPlan()
        faults.throttleRate = 0.03   // 429, retry after 1 s
        faults.errorRate = 0.03      // 500 or 503
        let simulator = try startHTTP2Simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let first = try H2SendTests.send(dir, simulator, ["--rate", "300", "--metrics", "send.prom"])
        // The metrics file from its first write: every counter with a sample, 0 or not.
        #expect(waitForEvent(of: first) { FileManager.default.fileExists(atPath: dir.file("send.prom")) } == .came, "no metrics file: \(first.stderr)")
        let firstWrite = try String(contentsOfFile: dir.file("send.prom"), encoding: .utf8)
        #expect(Self.seriesWithoutASample(firstWrite) == [], "\(firstWrite)")
        for name in ["accepted_total", "failed_total", "resends_total", "duplicates_risked_total", "connections_total", "drops_total", "pool_connections"] {
            #expect(Self.sample(firstWrite, name) != nil, "\(name) from the first write: \(firstWrite)")
        }
        // Killed once a second's counts with resends of two kinds are journaled
        // (some 1 to 3 s into a send of 10 s at its rate).
        let twoKinds = waitForEvent(of: first) {
            guard let tick = (try? Journal.read(directory: dir.file("journal")))?.timeline.last?.last else { return false }
            return tick.resentByKind.count >= 2 && tick.connections > 0
        }
        #expect(twoKinds == .came, "the first run ended, or hung, before a tick with resends of two kinds: \(first.stderr.suffix(1500))")
        first.kill9()
        let killed = try Journal.read(directory: dir.file("journal"))
        #expect(killed.runOutcomes == [nil], "the run has no end record")
        let tick = try #require(killed.timeline.last?.last)
        #expect(tick.resent > 0 && tick.resent == tick.resentByKind.values.reduce(0, +))

        let status = try PlanProcessTests.run(["status", "journal", "--json"], in: dir)
        let s = try JSONValue.parse(String(decoding: status.out, as: UTF8.self))
        #expect(s["resends"]?.integerValue == Int64(tick.resent), "the killed run's resends, from its last tick: \(s)")
        #expect(s["reconnects"]?.integerValue == Int64(tick.connections), "\(s)")
        #expect(Self.kinds(s["resent_by_kind"]) == tick.resentByKind, "\(s)")

        try FileManager.default.removeItem(atPath: dir.file("send.prom"))
        let resumed = try CampaignProcess(["send", "--resume", "journal", "--report", "report.json"], in: dir.path)
        #expect(resumed.wait(timeout: 120) == 0, "\(resumed.stderr)")
        let r = try Self.json(dir.file("report.json"))
        let thisRun = try #require(r["this_run"])
        let runResends = Int(thisRun["resends"]?.integerValue ?? -1), runConnections = Int(thisRun["reconnects"]?.integerValue ?? -1)
        #expect(r["outcome"]?.stringValue == "complete" && r["runs"]?.integerValue == 2, "\(r)")
        #expect(r["resends"]?.integerValue == Int64(tick.resent + runResends), "the killed run's and this run's: \(r)")
        #expect(r["reconnects"]?.integerValue == Int64(tick.connections + runConnections), "\(r)")
        let whole = tick.resentByKind.merging(Self.kinds(thisRun["resent_by_kind"]), uniquingKeysWith: +)
        #expect(Self.kinds(r["resent_by_kind"]) == whole, "\(r)")

        // The resumed run's metrics (the file the send was started with) count the killed run too.
        let metrics = try String(contentsOfFile: dir.file("send.prom"), encoding: .utf8)
        #expect(Self.sample(metrics, "resends_total") == tick.resent + runResends, "\(metrics)")
        #expect(Self.sample(metrics, "connections_total") == tick.connections + runConnections, "\(metrics)")
        for (kind, n) in whole { #expect(Self.sample(metrics, "resent_by_kind_total", labels: ",kind=\"\(kind)\"") == n, "\(kind): \(metrics)") }

        let after = try JSONValue.parse(String(decoding: try PlanProcessTests.run(["status", "journal", "--json"], in: dir).out, as: UTF8.self))
        #expect(after["resends"] == r["resends"] && after["reconnects"] == r["reconnects"], "\(after)")
        #expect(Self.kinds(after["resent_by_kind"]) == whole, "\(after)")
    }
}
