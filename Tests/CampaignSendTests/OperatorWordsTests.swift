import Testing
import CampaignJSON
@testable import CampaignSend
@testable import SendJournal
import GatewayClient
@testable import SendEngine

/// Numbers as the operator reads them: a wait below a second is not
/// "0.0 s", a rate below one a second is not "0/s".
@Suite struct OperatorWordsTests {
    @Test(arguments: [(0.05, "50 ms"), (0.1, "100 ms"), (0.999, "999 ms"), (0.0004, "1 ms"), (1, "1 s"), (1.5, "1.5 s"), (30, "30 s"), (0, "0 s")])
    func aWaitIsSaidInItsUnit(seconds: Double, text: String) {
        #expect(waitText(seconds) == text)
    }

    @Test(arguments: [(0.25, "0.25/s"), (0.5, "0.5/s"), (0.004, "under 0.01/s"), (4.46, "4.5/s"), (12.7, "12/s"), (48_000, "48000/s"), (0, "0/s")])
    func aRateBelowOneASecondIsNotZero(perSecond: Double, text: String) {
        #expect(rateText(perSecond) == text)
    }

    /// The report's rate is a number with two decimals: two notifications over three seconds are not 0 a second.
    @Test func theReportsRateOfASlowSendIsNotZero() {
        var report = SendReport()
        report.accepted = 2
        report.seconds = 3
        #expect(report.json["notifications_per_second"]?.doubleValue == 0.67)
        report.accepted = 48_000
        #expect(report.json["notifications_per_second"]?.doubleValue == 16_000)
    }

    /// The report's top level is the whole send: its seconds are every run's
    /// (the earlier runs' from their journaled timelines), and its rate is over them.
    @Test func theWholeSendsSecondsAndRateCountEveryRun() {
        var before = JournalState(settings: SendSettings(gatewayHost: "127.0.0.1", gatewayPort: 1, certificate: "c.pem"), planHeader: .null)
        before.runs = 1
        before.accepted = 859
        before.timeline = [[JournalRecord.Tick(second: 1, accepted: 200, failed: 0, resent: 0, connections: 4),
                            JournalRecord.Tick(second: 4, accepted: 859, failed: 0, resent: 0, connections: 4)]]
        var run = SendReport()
        run.accepted = 1141
        run.seconds = 6
        run.wholeSend = SendTotals(before: before, run: run)
        #expect(run.json["seconds"]?.doubleValue == 10 && run.json["notifications_per_second"]?.doubleValue == 200, "\(run.json)")
        #expect(run.json["this_run"]?["seconds"]?.doubleValue == 6 && run.json["this_run"]?["notifications_per_second"]?.doubleValue == 190.17)
    }

    /// The summary names why notifications were skipped, and only the reasons that happened.
    @Test func theSummarySaysWhyNotificationsWereSkipped() {
        var report = SendReport()
        report.skipped = 71
        #expect(report.text.contains("71 skipped (71 too late)") && !report.text.contains("frequencyCap"), "\(report.text)")
        report.skippedFrequencyCapped = 20
        #expect(report.text.contains("71 skipped (51 too late, 20 at their frequencyCap as they were about to go)"), "\(report.text)")
        report.skippedFrequencyCapped = 71
        #expect(report.text.contains("71 skipped (71 at their frequencyCap") && !report.text.contains("too late"), "\(report.text)")
    }

    /// After a resume, the whole send's line counts what was skipped too (a trial: a capped
    /// campaign's resume said "1275 accepted, 0 failed" beside 1,719 skipped).
    @Test func theWholeSendsLineCountsTheSkipped() {
        var before = JournalState(settings: SendSettings(gatewayHost: "127.0.0.1", gatewayPort: 1, certificate: "c.pem"), planHeader: .null)
        before.runs = 1
        before.accepted = 894
        var run = SendReport()
        run.accepted = 381
        run.skipped = 1_719
        run.skippedFrequencyCapped = 1_719
        run.wholeSend = SendTotals(before: before, run: run)
        #expect(run.text.contains("the whole send (2 runs): 1275 accepted, 0 failed, 1719 skipped (1719 at their frequencyCap)"), "\(run.text)")
        run.skipped = 0
        run.skippedFrequencyCapped = 0
        run.wholeSend = SendTotals(before: before, run: run)
        #expect(run.text.contains("the whole send (2 runs): 1275 accepted, 0 failed, 0 resent"), "nothing skipped, nothing said: \(run.text)")
    }

    /// A cancelled scheduled send has no next notifications to announce.
    @Test func aCancelledSendNamesNoNextMoment() {
        var report = SendReport()
        report.nextMoment = 1_800_000_000
        report.outcome = .scheduled
        #expect(report.text.contains("scheduled: the next notifications are due at"))
        report.outcome = .cancelled
        #expect(!report.text.contains("next notifications"), "\(report.text)")
        #expect(report.json["next_moment"] == .null)
    }

    /// A stop the operator resumes names the command whole, with its journal.
    @Test func aStopSaysTheWholeResumeCommand() {
        let trouble = SendFailureReason.serverTrouble(seconds: 6, count: 15, last: "status 503 ServiceUnavailable")
        #expect(trouble.sentence(journal: "out/spring").hasSuffix("resume later with `campaign send --resume out/spring`"), "\(trouble.sentence(journal: "out/spring"))")
        #expect(SendFailureReason.notificationsParked(count: 2).sentence(journal: "out/spring").contains("`campaign send --resume out/spring` to send them"))
    }

    @Test func oneConnectionIsNotConnections() {
        var report = SendReport()
        report.reconnects = 1
        #expect(report.text.contains(" 1 connection,"), "\(report.text)")
        report.reconnects = 3
        #expect(report.text.contains(" 3 connections,"), "\(report.text)")
    }
}
