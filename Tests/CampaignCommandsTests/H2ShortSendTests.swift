import Foundation
import Testing
import CampaignIO
import CampaignJSON
import CampaignTestSupport

extension H2SendTests {
    /// A send over before its first second still reports the round trip it
    /// measured (the PING each connection sends as it opens), in the report and in `status`.
    @Test(.timeLimit(.minutes(2))) func aSendShorterThanASecondStillTellsItsRoundTrip() throws {
        let dir = TemporaryDirectory("h2short")
        _ = try Self.plan(count: 50, in: dir)
        let simulator = try Self.simulator(in: dir)
        defer { simulator.stop() }
        let run = try Self.send(dir, simulator, ["--report", "report.json"])
        #expect(run.wait(timeout: 60) == 0, "\(run.stderr)")
        let report = try JSONValue.parse(String(contentsOfFile: dir.file("report.json"), encoding: .utf8))
        let roundTrip = report["round_trip_ms"]?.doubleValue
        #expect(roundTrip.map { $0 > 0 && $0 < 1000 } == true, "round trip \(roundTrip.map { "\($0)" } ?? "null") in \(report["seconds"]?.doubleValue ?? 0) s")
    }
}
