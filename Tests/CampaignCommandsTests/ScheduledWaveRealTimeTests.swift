import Foundation
import Testing
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import LocalTime
import SendJournal

/// The one scheduled test that holds the sender to its moments tightly: each
/// notification within 2 s of its moment, a moment already past within 3 s
/// of the send's start. (It was 1 s: the second added is the send, the
/// simulator and the test runner sharing two cores even in a quiet phase.) It is timing, not only correctness, so `make test` runs this
/// suite in a phase of its own with few other tests beside it; every other
/// scheduled test (``ScheduledSendTests``) waits for events and allows
/// ``ScheduledSendTests/lateOnALoadedMachine``.
@Suite(.ownThreads) struct ScheduledWaveRealTimeTests {
    typealias Campaign = ScheduledSendTests.Campaign

    @Test(.timeLimit(.minutes(3))) func wavesAMinuteApartGoAtTheirMomentsAndPastOnesAtOnce() throws {
        // Zones 5 min ahead (already past), UTC (in 4 s), 1 min behind (a minute later).
        let w1 = ScheduledSendTests.soon(4)
        let campaign = try Campaign(base: w1, groups: [(5, 10), (0, 10), (-1, 10)])
        let simulator = try startHTTP2Simulator(in: campaign.dir)
        defer { simulator.stop() }
        let started = ScheduledSendTests.nowMilliseconds()
        // A 20 s hold: the minute to the second wave closes the connections and opens them again before it.
        let send = try campaign.send(simulator, ["--hold-open", "20"])
        #expect(send.wait(timeout: 150) == 0, "\(send.stderr)")
        // Tight (see above): within 2 s of each moment, within 3 s of the start for those already past.
        try campaign.expectEachOnceOnTime(started: started, late: 2000, pastLate: 3000)
        #expect(send.stderr.contains("waiting until \(utcText(w1 + 60))"), "\(send.stderr)")
        let state = try Journal.read(directory: campaign.dir.file("journal"))
        #expect(state.outcome == .complete)
        #expect(state.runs == 2, "the first run ended before the minute's wait, the second sent the last wave")
        #expect(state.waves.joined().map(\.moment) == [Int(w1), Int(w1 + 60)])
        let page = try PlanProcessTests.run(["status", "journal", "--html", "page.html"], in: campaign.dir)
        #expect(page.status == 0)
        let html = try String(contentsOfFile: campaign.dir.file("page.html"), encoding: .utf8)
        #expect(html.contains("Schedule") && html.contains("wave "))
    }
}
