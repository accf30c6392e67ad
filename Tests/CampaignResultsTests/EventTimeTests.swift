import Testing
@testable import CampaignResults

/// An event's time as exports write it: RFC 3339 with any offset, or UNIX
/// seconds, to the second below; anything else is unreadable (nil).
@Suite struct EventTimeTests {
    static func parse(_ text: String) -> Int64? {
        Array(text.utf8).withUnsafeBufferPointer { EventTime.parse($0) }
    }

    @Test(arguments: [
        ("2026-11-28T09:15:02Z", 1_795_857_302), ("2026-11-28t09:15:02z", 1_795_857_302), ("2026-11-28 09:15:02Z", 1_795_857_302),
        ("2026-11-28T10:15:02+01:00", 1_795_857_302), ("2026-11-28T04:45:02.999-04:30", 1_795_857_302),
        ("1795857302", 1_795_857_302), ("1795857302.75", 1_795_857_302), ("  1795857302 ", 1_795_857_302),
        ("2024-02-29T00:00:00Z", 1_709_164_800), ("1970-01-01T00:00:00Z", 0),
    ] as [(String, Int64)])
    func readableTimes(text: String, seconds: Int64) {
        #expect(Self.parse(text) == seconds, "\(text)")
    }

    @Test(arguments: ["", "yesterday", "2026-11-28", "2026-11-28T09:15:02", "2026-02-30T00:00:00Z", "2026-11-28T24:00:00Z",
                      "2026-11-28T09:15:02+0100", "1795857302.", "-5", "17643213020000000", "2026-11-28T09:15:02Zjunk"])
    func unreadableTimes(text: String) {
        #expect(Self.parse(text) == nil, "\(text)")
    }

    @Test func columnsAreMappedByName() throws {
        let c = try EventColumns(parsing: "token=device_id, time=ts")
        #expect(c.token == "device_id" && c.time == "ts" && c.event == "event")
        #expect(throws: ResultsError.self) { try EventColumns(parsing: "device=x") }
        #expect(throws: ResultsError.self) { try EventColumns(parsing: "token=") }
    }
}
