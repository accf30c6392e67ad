import Foundation
import Testing
import CampaignIO
import CampaignJSON
import CampaignTestSupport
@testable import CampaignSend
import GatewaySimulator
@testable import SendJournal
@testable import SendEngine

@Suite struct SendSessionTests {
    @Test func theProgressLineCountsAgainstThePlansTotal() {
        let known = SendProgress(read: 1000, alreadyDone: 100, total: 10_000, settled: 900, failed: 3)
        #expect(known.line(seconds: 1) == "sent 900 of 9900 (900/s), 3 failed, ETA 10 s")
        let unknown = SendProgress(read: 1000, alreadyDone: 0, total: nil, settled: 500, failed: 0)
        #expect(unknown.line(seconds: 2) == "sent 500 of 1000 read so far (250/s), 0 failed, ETA 2 s")
        #expect(SendProgress(read: 0, alreadyDone: 0, total: 5, settled: 0, failed: 0).line(seconds: 1) == "sent 0 of 5 (0/s), 0 failed")
    }

    /// A plan file's total is known from its trailer before a record is sent,
    /// and the session then sends it whole.
    @Test func aSessionKnowsAPlanFilesTotalAndSendsIt() throws {
        let harness = try SendHarness(faults: .init())
        let tokens = try makePlan(count: 300, in: harness.dir)
        do {   // the session (and its journal's lock) ends with this scope
            let session = try SendSession(.new(plan: harness.dir.file("plan.ndjson"), journal: harness.dir.file("journal"),
                                               settings: harness.settings(connections: 2)))
            #expect(session.planTotal == 300)
            let sender = try session.makeSender(context: TestCertificates.clientContext(), cancellation: CancellationPipe(), logger: { _ in })
            #expect(sender.planTotal == 300)
            let report = try session.run(sender)
            #expect(report.outcome == .complete && report.accepted == tokens.count)
            #expect(sender.progress().settled == 300 && sender.progress().read == 300)
            #expect(sender.progress().taken == 300 && sender.progress().inFlight == 0, "every record taken by a connection, none left in flight")
        }
        // A resume of that journal knows the total too (the journal read the plan through).
        let resumed = try SendSession(.resume(journal: harness.dir.file("journal"), replan: false, adjust: { _ in }))
        #expect(resumed.planTotal == 300)
        #expect(resumed.notes.contains { $0.contains("already complete") })
    }

    /// Under `--rate`, what waits in the connections' queues for its turn is
    /// not in flight (a stop said it was proving 2,000 of them).
    @Test(.timeLimit(.minutes(1))) func whatWaitsForItsTurnUnderARateIsNotInFlight() throws {
        let harness = try SendHarness(faults: .init())
        _ = try makePlan(count: 2_000, in: harness.dir)
        var settings = harness.settings(connections: 2)
        settings.rate = 100
        let session = try SendSession(.new(plan: harness.dir.file("plan.ndjson"), journal: harness.dir.file("journal"), settings: settings))
        let sender = try session.makeSender(context: TestCertificates.clientContext(), cancellation: CancellationPipe(), logger: { _ in })
        let box = UncheckedBox((session, sender))
        let run = BackgroundTask { () -> Bool in (try? box.value.0.run(box.value.1)) != nil }
        #expect(eventually(within: 30) { sender.progress().settled >= 50 })
        let progress = sender.progress()
        sender.requestStop()
        #expect(try run.value(timeout: 30) == true)
        #expect(progress.read - progress.settled >= 1_000, "most of the plan was read and waits: \(progress)")
        #expect(progress.inFlight <= 200, "at 100/s, what was taken and not yet proven: \(progress)")
    }

    @Test func metricsAreInThePrometheusTextFormat() {
        var counts = SendReport()
        counts.accepted = 900
        counts.failedByStatus = [8: 3, 1: 1]
        counts.failedByReason = ["8 invalid token": 3, "1 processing error": 1]
        counts.resends = 7
        counts.reconnects = 2
        let text = SendMetrics.text(journal: "out/\"j\"", counts: counts,
                                    progress: SendProgress(read: 1000, alreadyDone: 0, total: 2000, settled: 904, failed: 4), seconds: 2)
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines.contains(#"campaign_send_accepted_total{journal="out/\"j\""} 900"#))
        // Issue 24: the total from the first write, and each failure by status and reason.
        #expect(lines.contains(#"campaign_send_failed_total{journal="out/\"j\""} 4"#))
        #expect(lines.contains(#"campaign_send_failed_by_reason_total{journal="out/\"j\"",status="1",reason="processing error"} 1"#))
        #expect(lines.contains(#"campaign_send_failed_by_reason_total{journal="out/\"j\"",status="8",reason="invalid token"} 3"#))
        #expect(lines.contains(#"campaign_send_in_flight{journal="out/\"j\""} 96"#))
        #expect(lines.contains(#"campaign_send_rate{journal="out/\"j\""} 452"#))
        #expect(lines.contains("# TYPE campaign_send_resends_total counter"))
        // Every sample line is NAME{LABELS} VALUE, and every name has its TYPE.
        for line in lines where !line.hasPrefix("#") {
            let name = String(line.prefix { $0 != "{" })
            #expect(lines.contains { $0.hasPrefix("# TYPE \(name) ") }, "\(line)")
            #expect(Int(line.split(separator: " ").last ?? "") != nil, "\(line)")
        }
    }

    /// Between the runs of a scheduled send: connections open 10 s before the
    /// next moment (no earlier than the hold allows), at the moment when it
    /// ends quiet hours, and a run that made nothing final waits at least 1 s.
    @Test func aWaitingSendWakesBeforeItsNextMoment() {
        var report = SendReport()
        report.accepted = 5
        #expect(ScheduledRunWait.wake(after: report, next: 1_000, holdOpenSeconds: 60, now: 900) == 990)
        #expect(ScheduledRunWait.wake(after: report, next: 1_000, holdOpenSeconds: 4, now: 900) == 996)
        report.nextMomentEndsQuietHours = true
        #expect(ScheduledRunWait.wake(after: report, next: 1_000, holdOpenSeconds: 60, now: 900) == 1_000)
        let empty = SendReport()
        #expect(ScheduledRunWait.wake(after: empty, next: 1_000, holdOpenSeconds: 60, now: 995) == 996)
        #expect(ScheduledRunWait.wake(after: empty, next: 1_000, holdOpenSeconds: 60, now: 900) == 990)
    }

    @Test func theReportAndTheSimulatorSayWhatResendsAndStatusFiveAre() {
        var report = SendReport()
        report.resends = 12
        report.wire = .binary(.enhanced)
        #expect(report.text.contains("resent: discarded by the gateway after a refusal or shutdown"))
        #expect(!SendReport().text.contains("discarded by the gateway"))
        var connection = ConnectionStatistics(connection: 1)
        connection.rejected = [5: 3, 8: 1]
        let statistics = SimulatorStatistics(connections: [connection])
        #expect(statistics.summary.contains("status 5 (invalid token size, most of them senders' proofs of acceptance, refused on purpose): 3"))
        #expect(statistics.summary.contains("status 8 (invalid token): 1"))
    }

    /// A spool cut mid-record (plan | send killed twice) names --replan.
    @Test func aCutSpoolNamesReplan() throws {
        let harness = try SendHarness(faults: .init())
        _ = try makePlan(count: 20, in: harness.dir)
        let lines = try String(contentsOfFile: harness.dir.file("plan.ndjson"), encoding: .utf8).split(separator: "\n")
        var settings = harness.settings(connections: 1)
        settings.planPath = nil
        do { _ = try Journal.create(directory: harness.dir.file("j"), settings: settings, planHeader: try JSONValue.parse(String(lines[0]))) }
        let cut = lines.prefix(6).joined(separator: "\n") + "\n" + String(lines[6].prefix(25))
        try cut.write(toFile: harness.dir.file("j/\(Journal.spoolName)"), atomically: true, encoding: .utf8)
        do {
            _ = try SendSession(.resume(journal: harness.dir.file("j"), replan: false, adjust: { _ in }))
            Issue.record("a cut spool was resumed")
        } catch {
            #expect("\(error)".contains("--replan"), "\(error)")
        }
    }
}

extension SendSessionTests {
    /// `plan | send` killed between a replan's new spool and the journal
    /// learning its header: the next `--replan` goes on with the complete
    /// spool (its header differs from the journal's only in its times).
    @Test func aKillBetweenReplacingTheSpoolAndJournalingItsHeaderStillResumes() throws {
        let harness = try SendHarness(faults: .init())
        _ = try makePlan(count: 20, in: harness.dir)
        let plan = try String(contentsOfFile: harness.dir.file("plan.ndjson"), encoding: .utf8)
        let header = String(plan.prefix { $0 != "\n" })
        let created = try #require(header.range(of: #""created":[0-9]+"#, options: .regularExpression))
        let earlier = header.replacingCharacters(in: created, with: #""created":1000"#)
        #expect(earlier != header)
        var settings = harness.settings(connections: 1)
        settings.planPath = nil
        do { _ = try Journal.create(directory: harness.dir.file("j"), settings: settings, planHeader: try JSONValue.parse(earlier)) }
        try plan.write(toFile: harness.dir.file("j/\(Journal.spoolName)"), atomically: true, encoding: .utf8)
        let session = try SendSession(.resume(journal: harness.dir.file("j"), replan: true, adjust: { _ in }))
        #expect(session.planTotal == nil || session.planTotal == 20)
        #expect(try Journal.read(directory: harness.dir.file("j")).planHeader == JSONValue.parse(header), "the journal now names the spool's header")
    }
}

/// A binary window holds about two seconds of what the gateway reads.
@Suite struct WindowByteLimitTests {
    @Test func theWindowFollowsTheGatewaysPace() {
        var limit = WindowByteLimit()
        #expect(limit.bytes == 1 << 20, "a megabyte before anything is measured")
        limit.proven(written: 1 << 20, seconds: 2.5)             // a gateway reading 400 KB/s
        #expect(limit.bytes == Int(Double(1 << 20) / 2.5 * 2))
        limit.proven(written: 200 << 20, seconds: 1)             // loopback
        #expect(limit.bytes == WindowByteLimit.maximum)
        limit.proven(written: 300 << 10, seconds: 60)            // a gateway that barely reads
        #expect(limit.bytes == WindowByteLimit.minimum)
        let before = limit.bytes
        limit.proven(written: 1000, seconds: 5)                  // too small to measure
        #expect(limit.bytes == before)
    }
}
