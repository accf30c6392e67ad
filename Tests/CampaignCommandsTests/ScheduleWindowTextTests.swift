import Foundation
import Testing
import CampaignTestSupport

/// A `deliverAt.window` is shown as given, to the second.
@Suite struct ScheduleWindowTextTests {
    @Test(arguments: [("\"90\"", "window 1 min 30 s,"), ("90", "window 1 min 30 s,"), ("\"45s\"", "window 45 s,"),
                      ("\"3h\"", "window 3 h,"), ("\"1h30m\"", "window 1 h 30 min,"), ("\"0\"", "window 0 s,"),
                      ("\"1d2h3m4s\"", "window 1 d 2 h 3 min 4 s,")])
    func validateShowsTheWindowExactly(_ window: String, _ shown: String) throws {
        let dir = TemporaryDirectory()
        try #"{"campaign":"w","format":"h2","topic":"com.example.campaign","deliverAt":{"localTime":"09:00","window":\#(window),"defaultTimeZone":"UTC"},"messages":{"en":{"alert":"Hi"}}}"#
            .write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let run = try PlanProcessTests.run(["validate", "job.json"], in: dir)
        #expect(run.status == 0, "\(run.err)")
        let out = String(decoding: run.out, as: UTF8.self)
        #expect(out.contains(shown), "\(out)")
    }
}
