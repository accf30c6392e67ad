import Testing
import LocalTime

/// A window shown to the second, in the units it is made of.
@Suite struct DurationTextTests {
    @Test(arguments: [(90, "1 min 30 s"), (45, "45 s"), (0, "0 s"), (60, "1 min"), (10_800, "3 h"), (5400, "1 h 30 min"),
                      (3661, "1 h 1 min 1 s"), (7 * 86_400, "7 d"), (86_400 + 7200 + 180 + 4, "1 d 2 h 3 min 4 s")])
    func windowsReadExactly(_ seconds: Int, _ text: String) {
        #expect(DeliverAt.durationText(seconds) == text)
        let d = DeliverAt(localTime: TimeOfDay(text: "09:00")!, date: nil, windowSeconds: seconds, defaultZone: "UTC", late: .send)
        #expect(d.windowText == text)
    }
}
