import Testing
import CampaignIO
import LocalTime
@testable import CampaignSend

/// The plan reader's gate on a test clock (``TestClock``): a wave 30 s or a
/// quiet night ahead is decided in microseconds, and the time it waited is
/// the test clock's, not the wall's.
@Suite struct ScheduleGateClockTests {
    /// 2023-11-14 22:13:20 UTC, where the test clock starts.
    static let start = Int64(TestClock.wallStart)

    static func deliverAt(late: LatePolicy = .send, window: Int = 0) -> DeliverySchedule {
        .deliverAt(DeliverAt(localTime: TimeOfDay(text: "09:00")!, date: nil, windowSeconds: window, defaultZone: "UTC", late: late))
    }

    func admit(_ gate: inout ScheduleGate, at: Int64, zone: String? = nil, halt: CancellationPipe, handedOver: inout [Int64]) -> ScheduleGate.Verdict {
        var moments: [Int64] = []
        let verdict: ScheduleGate.Verdict
        if let zone {
            verdict = Array(zone.utf8).withUnsafeBytes { gate.admit(at: at, timeZone: $0, handOver: { moments.append($0) }, halt: halt) }
        } else {
            verdict = gate.admit(at: at, timeZone: nil, handOver: { moments.append($0) }, halt: halt)
        }
        handedOver += moments
        return verdict
    }

    @Test func aMomentWithinTheHoldIsWaitedForOnTheClockThenSentAsAWave() throws {
        let clock = TestClock(), halt = try CancellationPipe()
        var gate = ScheduleGate(schedule: Self.deliverAt(), dueOnly: false, holdOpenSeconds: 60, clock: clock)
        var handed: [Int64] = []
        let real = ContinuousClock().measure {
            guard case .send = admit(&gate, at: Self.start + 30, halt: halt, handedOver: &handed) else { Issue.record("not sent"); return }
        }
        #expect(clock.elapsedSeconds >= 30 && clock.elapsedSeconds < 31, "waited \(clock.elapsedSeconds) s of the test clock")
        #expect(real < .seconds(1))
        #expect(handed == [Self.start + 30], "what was staged is handed over before the wait, naming its moment")
        #expect(gate.takeWave() == Self.start + 30)
        #expect(gate.takeWave() == nil, "a wave is journaled once")
        #expect(gate.nextMoment == nil)
    }

    @Test func aMomentBeyondTheHoldOrWithDueOnlyEndsTheRunWithoutWaiting() throws {
        let halt = try CancellationPipe()
        for (dueOnly, hold) in [(false, 10.0), (true, 3600.0)] {
            let clock = TestClock()
            var gate = ScheduleGate(schedule: Self.deliverAt(), dueOnly: dueOnly, holdOpenSeconds: hold, clock: clock)
            var handed: [Int64] = []
            guard case .later = admit(&gate, at: Self.start + 30, halt: halt, handedOver: &handed) else { Issue.record("not later"); continue }
            #expect(clock.elapsedSeconds == 0, "no wait")
            #expect(gate.nextMoment == Self.start + 30 && handed.isEmpty)
            // Once stopped, every later record stays pending too, due or not.
            guard case .later = admit(&gate, at: Self.start - 5, halt: halt, handedOver: &handed) else { Issue.record("a stopped gate sent"); continue }
        }
    }

    @Test func theStopEndsTheWaitAndTheRecordStaysPending() throws {
        let clock = TestClock(), halt = try CancellationPipe()
        halt.cancel()
        var gate = ScheduleGate(schedule: Self.deliverAt(), dueOnly: false, holdOpenSeconds: 60, clock: clock)
        var handed: [Int64] = []
        guard case .later = admit(&gate, at: Self.start + 30, halt: halt, handedOver: &handed) else { Issue.record("sent after a stop"); return }
        #expect(clock.elapsedSeconds < 1 && gate.nextMoment == Self.start + 30 && gate.takeWave() == nil)
    }

    @Test func lateSkipIsDecidedToTheFractionOfItsWindow() throws {
        let clock = TestClock(), halt = try CancellationPipe()
        var gate = ScheduleGate(schedule: Self.deliverAt(late: .skip, window: 30), dueOnly: false, holdOpenSeconds: 60, clock: clock)
        var handed: [Int64] = []
        guard case .send = admit(&gate, at: Self.start - 30, halt: halt, handedOver: &handed) else { Issue.record("the window's last second skipped"); return }
        clock.advance(nanoseconds: 1_000_000)   // 1 ms past the window
        guard case .skip(let at) = admit(&gate, at: Self.start - 30, halt: halt, handedOver: &handed) else { Issue.record("not skipped"); return }
        #expect(at == Self.start)
    }

    @Test func quietHoursDeferToTheirEndInTheDevicesZone() throws {
        let clock = TestClock(), halt = try CancellationPipe()
        let quiet = DeliverySchedule.quietHours(QuietHours(from: TimeOfDay(text: "21:00")!, to: TimeOfDay(text: "08:00")!, defaultZone: "UTC"))
        var gate = ScheduleGate(schedule: quiet, dueOnly: false, holdOpenSeconds: 60, clock: clock)
        var handed: [Int64] = []
        // 23:13:20 in +01:00: inside the quiet hours, until 08:00 there (07:00 UTC the next day).
        guard case .deferred = admit(&gate, at: Self.start, zone: "+01:00", halt: halt, handedOver: &handed) else { Issue.record("not deferred"); return }
        let end = Self.start - 80_000 + 86_400 + 7 * 3600
        #expect(gate.nextMoment == end && gate.nextMomentEndsQuietHours && gate.deferred == 1)
        // 10:13:20 in -12:00: outside them, sent.
        guard case .send = admit(&gate, at: Self.start, zone: "-12:00", halt: halt, handedOver: &handed) else { Issue.record("not sent"); return }
        #expect(clock.elapsedSeconds == 0)
    }
}
