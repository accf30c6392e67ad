#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import APNSWire
import CampaignJSON
@testable import CampaignSend
import CampaignTestSupport
@testable import CampaignCommands
import GatewayClient
import GatewaySimulator
@testable import SendJournal
@testable import SendEngine

/// What an operator reads of an HTTP/2 send: failures and retries by the
/// reason APNs gave, in the report, `status`, the metrics file and the page.
@Suite(.ownThreads) struct OperatorViewTests {
    @Test(.timeLimit(.minutes(2))) func failuresAndRetriesAreNamedByTheirReasonEverywhere() throws {
        let dir = TemporaryDirectory("reasons")
        let tokens = try H2SendTests.plan(count: 1_500, in: dir)
        var faults = FaultPlan()
        faults.badTokens = Set(tokens[0..<4].map { DeviceToken(hex: $0)!.bytes })
        for t in tokens[10..<17] { faults.unregistered[DeviceToken(hex: t)!.bytes] = 1_700_000_000 }
        faults.throttleRate = 0.02
        faults.errorRate = 0.02
        let simulator = try startHTTP2Simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let run = try H2SendTests.send(dir, simulator, ["--report", dir.file("report.json"), "--metrics", dir.file("metrics.prom")])
        #expect(run.wait(timeout: 90) == 0, "\(run.stderr.suffix(1500))")
        simulator.stop()

        let report = try JSONValue.parse(Data(contentsOf: URL(fileURLWithPath: dir.file("report.json"))))
        #expect(report["failed_by_reason"]?["400 BadDeviceToken"] == .number("4"))
        #expect(report["failed_by_reason"]?["410 Unregistered"] == .number("7"))
        let resent = report["this_run"]?["resent_by_kind"]
        #expect(resent?["429 TooManyRequests"]?.integerValue ?? 0 > 0, "\(String(describing: resent))")
        #expect((resent?["500 InternalServerError"]?.integerValue ?? 0) + (resent?["503 ServiceUnavailable"]?.integerValue ?? 0) > 0)
        #expect(run.stderr.contains("410 Unregistered: 7") && run.stderr.contains("400 BadDeviceToken: 4"), "\(run.stderr.suffix(800))")

        let status = try PlanProcessTests.run(["status", "journal", "--json"], in: dir)
        let json = try JSONValue.parse(status.out)
        #expect(json["failed_by_reason"]?["410 Unregistered"] == .number("7") && json["failed_by_reason"]?["400 BadDeviceToken"] == .number("4"))
        let text = String(decoding: try PlanProcessTests.run(["status", "journal"], in: dir).out, as: UTF8.self)
        #expect(text.contains("failed: 400 BadDeviceToken: 4, 410 Unregistered: 7"), "\(text)")

        let metrics = try String(contentsOfFile: dir.file("metrics.prom"), encoding: .utf8)
        let label = "journal=\"journal\""   // as the send was given it
        #expect(metrics.contains("campaign_send_failed_total{\(label)} 11"), "\(metrics)")
        #expect(metrics.contains("campaign_send_failed_by_reason_total{\(label),status=\"410\",reason=\"Unregistered\"} 7"))
        #expect(metrics.contains("campaign_send_resent_by_kind_total{\(label),kind=\"429 TooManyRequests\"}"))
        #expect(metrics.contains("campaign_send_up{\(label)} 0") && metrics.contains("campaign_send_in_flight{\(label)} 0"), "the ended run says so")

        #expect(try PlanProcessTests.run(["status", "journal", "--html", "page.html"], in: dir).status == 0)
        let page = try String(contentsOfFile: dir.file("page.html"), encoding: .utf8)
        #expect(page.contains("410 Unregistered") && page.contains("400 BadDeviceToken") && !page.contains("status 400: HTTP 400"))
        // The campaign named, its protocol's words, not the binary interface's.
        #expect(page.contains("<title>campaign h2: send</title>") && page.contains("HTTP/2 provider API"))
        #expect(page.contains("com.example.campaign · alert") && page.contains("1500 notifications"))
        #expect(!page.contains("proof of acceptance"), "binary-only words on an HTTP/2 page")

    }

    /// A kill and a resume: the resume rewrites the report and metrics the
    /// send was started with, counting every run of it.
    @Test(.timeLimit(.minutes(2))) func theReportAndMetricsCountTheWholeSendAcrossAKillAndAResume() throws {
        let dir = TemporaryDirectory("whole")
        let tokens = try H2SendTests.plan(count: 6_000, in: dir)
        var faults = FaultPlan()
        let bad = tokens[0..<3], gone = tokens[5_990..<6_000]   // refused in the first run, and in the resume
        faults.badTokens = Set(bad.map { DeviceToken(hex: $0)!.bytes })
        for t in gone { faults.unregistered[DeviceToken(hex: t)!.bytes] = 1_700_000_000 }
        faults.throttleRate = 0.01
        faults.errorRate = 0.01
        let simulator = try startHTTP2Simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let first = try H2SendTests.send(dir, simulator, ["--rate", "1000", "--report", "report.json", "--metrics", "metrics.prom"])
        // Killed once a quarter of the send is recorded: 4,500 are left, some 4 s of sending at its rate.
        let quarter = waitForEvent(of: first) { simulator.currentStatistics().accepted >= 1_500 }
        #expect(quarter == .came, "the first run ended, or hung, before a quarter was recorded: \(first.stderr.suffix(1500))")
        first.kill9()
        #expect(first.process.terminationReason == .uncaughtSignal, "the kill found the first run over: \(first.stderr.suffix(1500))")
        let resumed = try CampaignProcess(["send", "--resume", "journal"] + SendProcessTests.credentials(), in: dir.path)
        #expect(resumed.wait(timeout: 90) == 0, "\(resumed.stderr)")
        simulator.stop()
        let accepted = Set(try H2SendTests.recorded(dir).map(\.token)).count
        #expect(accepted == 6_000 - 13)
        let report = try JSONValue.parse(Data(contentsOf: URL(fileURLWithPath: dir.file("report.json"))))
        #expect(report["runs"] == .number("2"))
        #expect(report["accepted"] == .number(String(accepted)), "the whole send, not the resume's share")
        #expect(report["failed_by_reason"]?["400 BadDeviceToken"] == .number("3") && report["failed_by_reason"]?["410 Unregistered"] == .number("10"))
        #expect((report["this_run"]?["accepted"]?.integerValue ?? 0) < Int64(accepted), "this run's share is below the whole")
        let status = try JSONValue.parse(try PlanProcessTests.run(["status", "journal", "--json"], in: dir).out)
        #expect(status["accepted"] == .number(String(accepted)) && status["runs"] == .number("2"))
        #expect(status["failed_by_reason"]?["400 BadDeviceToken"] == .number("3") && status["failed_by_reason"]?["410 Unregistered"] == .number("10"))
        let metrics = try String(contentsOfFile: dir.file("metrics.prom"), encoding: .utf8)
        #expect(metrics.contains("campaign_send_accepted_total{journal=\"journal\"} \(accepted)"), "the killed run's file is rewritten by the resume")
        #expect(metrics.contains("campaign_send_failed_total{journal=\"journal\"} 13") && metrics.contains("campaign_send_up{journal=\"journal\"} 0"))
        #expect(resumed.stderr.contains("the whole send (2 runs)"), "\(resumed.stderr)")
        // The page marks each run, and labels the kill instead of a silent drop.
        #expect(try PlanProcessTests.run(["status", "journal", "--html", "page.html"], in: dir).status == 0)
        let page = try String(contentsOfFile: dir.file("page.html"), encoding: .utf8)
        #expect(page.contains(">run 1<") && page.contains(">run 2 (resume)<") && page.contains(">killed (no end record)<"), "\(page.prefix(3000))")
        #expect(page.contains("Resent, by why") && page.contains(">429 TooManyRequests<"), "retried answers by kind over time")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.runOutcomes == [nil, .complete])
        #expect(state.runStartedAt.count == 2 && state.runStartedAt.allSatisfy { ($0 ?? 0) > 1_700_000_000 }, "each run's start time journaled")
        #expect(page.contains("UTC") && page.contains(", killed;") && page.contains(", complete"), "the runs with their times and ends")
        // The resume's time is its end record's, as the report's; the killed run's, its last journaled second.
        let resumeSeconds = try #require(state.runSeconds.last ?? nil)
        #expect(page.contains(", \(format1((resumeSeconds * 10).rounded() / 10)) s, complete"), "\(resumeSeconds) s")
        #expect(page.contains(", \(state.timeline[0].last?.second ?? -1) s, killed;"), "\(state.timeline[0].last?.second ?? -1)")
    }

    /// A default binary send of 200,000 to a gateway that reads 400 KB/s on
    /// each connection: the journal (and so `status`) shows notifications
    /// done once each connection's first window (1 MB, some 12,600
    /// notifications of 83 bytes: 2.5 s of that gateway's reading) is read,
    /// not once several megabytes of socket buffers have drained (a
    /// connection's quarter of the send, 50,000, fits in them). Judged by
    /// what the gateway had accepted on a connection when the journal first
    /// showed progress, not by the time: the plan's check and the connections
    /// take longer on a loaded machine.
    @Test(.timeLimit(.minutes(3))) func aSlowBinaryGatewayShowsProgressWithinTenSeconds() throws {
        let dir = TemporaryDirectory("slowgateway")
        var faults = FaultPlan()
        faults.readDelayMilliseconds = 40   // one TLS record (16 KB) per 40 ms
        _ = try SendProcessTests.plan(count: 200_000, into: dir.file("plan.ndjson"), seed: 41)
        let simulator = try SendProcessTests.simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let run = try CampaignProcess(["send", dir.file("plan.ndjson"), "--journal", dir.file("journal"), "--gateway",
                                       "127.0.0.1:\(simulator.port)"] + SendProcessTests.credentials(), in: dir.path)
        var mostOnAConnection = 0
        let progress = waitForEvent(of: run) {
            mostOnAConnection = simulator.currentStatistics().connections.map(\.accepted).max() ?? 0
            return ((try? Journal.read(directory: dir.file("journal")))?.doneCount ?? 0) > 0
        }
        #expect(progress == .came, "nothing done before the send ended, or in 120 s: \(run.stderr.suffix(800))")
        // 30,000 (2.5 MB): above a first window and what a connection reads
        // while the test looks (4,800 a second), below a connection's share.
        #expect(mostOnAConnection < 30_000, "the journal showed progress only once a connection had \(mostOnAConnection) accepted")
        let status = try PlanProcessTests.run(["status", "journal", "--json"], in: dir)
        let done = Int((try? JSONValue.parse(status.out))?["done"]?.integerValue ?? 0)
        #expect(done > 0 && done < 200_000, "status shows the progress mid-send: \(done) done")
        print("slow gateway: progress journaled once a connection had \(mostOnAConnection) accepted; status: \(done) done")
        kill(run.process.processIdentifier, SIGTERM)
        #expect(run.wait(timeout: 15) == 75, "\(run.stderr.suffix(800))")
    }

    @Test func everyCounterIsInTheMetricsFromTheFirstWrite() {
        let text = SendMetrics.text(journal: "j", counts: SendReport(), progress: SendProgress(read: 0, alreadyDone: 0, total: nil, settled: 0, failed: 0), seconds: 0)
        for series in ["accepted_total", "failed_total", "resends_total", "duplicates_risked_total", "connections_total", "drops_total", "in_flight", "pool_connections"] {
            #expect(text.contains("campaign_send_\(series){journal=\"j\"} 0"), "\(series)")
        }
    }

    @Test func theHelpSaysWhatTheToolIsToday() {
        let help = Campaign.helpMessage()
        #expect(help.contains("HTTP/2 provider API") && help.contains("legacy binary interface"), "\(help)")
        let sendHelp = Campaign.helpMessage(for: Send.self)
        #expect(sendHelp.contains("HTTP/2 410"), "--feedback-store is not status 8 only")
    }
}
