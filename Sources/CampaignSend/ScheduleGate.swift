#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import LocalTime
import GatewayClient
import SendEngine

/// Releases a scheduled plan's records when their moments come. The plan is
/// in order of moment, so the reader only ever waits for the record in front
/// of it: a wait up to ``holdOpenSeconds`` keeps the connections open; a
/// longer one (or any, with `--due-only`) ends the run with the moment named.
struct ScheduleGate {
    enum Verdict {
        /// Due: send it (its zone's number in ``zones``, or -1).
        case send(zone: Int32)
        /// Not due, and the run ends here; the record stays pending.
        case later
        /// In its device's quiet hours: left pending for a later run.
        case deferred
        /// Too late (`late: skip`): record it as skipped, at `now`.
        case skip(now: Int64)
    }

    let rule: ReleaseRule?
    let dueOnly: Bool
    let holdOpenSeconds: Double
    /// The zones met, shared with the connections (``WireRelease``).
    let zones: ZoneRegistry
    /// The moment the run stopped in front of, if it did.
    private(set) var stoppedAt: Int64?
    /// Quiet hours: records held back, and the earliest their quiet hours end.
    private(set) var deferred = 0
    private var deferredUntil: Int64?
    /// A moment released after a wait, not yet journaled.
    private var pendingWave: Int64?

    /// Where the gate reads the time and waits (``SystemClock`` but in tests).
    let clock: SendClock

    init(schedule: DeliverySchedule?, dueOnly: Bool, holdOpenSeconds: Double, zones: ZoneRegistry = ZoneRegistry(),
         clock: SendClock = SystemClock.shared) {
        rule = schedule.map { ReleaseRule(schedule: $0) }
        (self.dueOnly, self.holdOpenSeconds, self.zones, self.clock) = (dueOnly, holdOpenSeconds, zones, clock)
    }

    /// Records held back later, as a connection took them (``WireRelease``).
    mutating func noteDeferred(count: Int, until: Int64) {
        deferred += count
        deferredUntil = min(deferredUntil ?? until, until)
    }

    /// Whether the next moment is the end of a device's quiet hours: a later
    /// run must start at it, not before (the plan holds that record earlier,
    /// where a run does not wait).
    var nextMomentEndsQuietHours: Bool {
        guard let q = deferredUntil else { return false }
        return stoppedAt.map { q <= $0 } ?? true
    }

    /// When the rest is due: the moment the run stopped at, or the earliest end of a quiet spell.
    var nextMoment: Int64? {
        switch (stoppedAt, deferredUntil) {
        case (let a?, let b?): min(a, b)
        case (let a, let b): a ?? b
        }
    }

    /// What to do with a record of moment `at`; waits (handing over what is
    /// staged first, and telling `handOver` the moment it waits for; waking
    /// on `halt`) when it is due within the hold.
    mutating func admit(at: Int64, timeZone: UnsafeRawBufferPointer?, handOver: (Int64) -> Void, halt: CancellationPipe) -> Verdict {
        guard stoppedAt == nil else { return .later }
        var now = clock.wallSeconds
        if Double(at) > now {
            guard !dueOnly, Double(at) - now <= holdOpenSeconds else {
                stoppedAt = at
                return .later
            }
            handOver(at)
            // Clocks may be stepped while waiting: wait again until the wall clock says so.
            while Double(at) > now {
                guard clock.sleep(seconds: Double(at) - now, cancellation: halt) else {
                    stoppedAt = at
                    return .later
                }
                now = clock.wallSeconds
            }
            pendingWave = at
        }
        guard let rule else { return .send(zone: -1) }
        let zone = timeZone.map { zones.number(of: $0) } ?? -1
        switch rule.verdict(at: at, zone: zones.rules(of: zone), now: now) {
        case .send: return .send(zone: zone)
        case .skip: return .skip(now: Int64(now))
        case .deferred(let until):
            noteDeferred(count: 1, until: until)
            return .deferred
        }
    }

    /// The moment just released after a wait, once.
    mutating func takeWave() -> Int64? {
        defer { pendingWave = nil }
        return pendingWave
    }
}
