#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import LocalTime

/// Releases a scheduled plan's records when their moments come. The plan is
/// in order of moment, so the reader only ever waits for the record in front
/// of it: a wait up to ``holdOpenSeconds`` keeps the connections open; a
/// longer one (or any, with `--due-only`) ends the run with the moment named.
struct ScheduleGate {
    enum Verdict {
        /// Due: send it.
        case send
        /// Not due, and the run ends here; the record stays pending.
        case later
        /// In its device's quiet hours: left pending for a later run.
        case deferred
        /// Too late (`late: skip`): record it as skipped, at `now`.
        case skip(now: Int64)
    }

    let schedule: DeliverySchedule?
    let dueOnly: Bool
    let holdOpenSeconds: Double
    /// The moment the run stopped in front of, if it did.
    private(set) var stoppedAt: Int64?
    /// Quiet hours: records held back, and the earliest their quiet hours end.
    private(set) var deferred = 0
    private var deferredUntil: Int64?
    /// A moment released after a wait, not yet journaled.
    private var pendingWave: Int64?
    private var zones: [String: ZoneRules?] = [:]
    private let database = ZoneDatabase()

    init(schedule: DeliverySchedule?, dueOnly: Bool, holdOpenSeconds: Double) {
        (self.schedule, self.dueOnly, self.holdOpenSeconds) = (schedule, dueOnly, holdOpenSeconds)
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
    /// staged first, waking on `halt`) when it is due within the hold.
    mutating func admit(at: Int64, timeZone: UnsafeRawBufferPointer?, handOver: () -> Void, halt: CancellationPipe) -> Verdict {
        guard stoppedAt == nil else { return .later }
        var now = wallClockSeconds()
        if Double(at) > now {
            guard !dueOnly, Double(at) - now <= holdOpenSeconds else {
                stoppedAt = at
                return .later
            }
            handOver()
            // Clocks may be stepped while waiting: wait again until the wall clock says so.
            while Double(at) > now {
                guard sleep(until: .after(seconds: Double(at) - now), cancellation: halt) else {
                    stoppedAt = at
                    return .later
                }
                now = wallClockSeconds()
            }
            pendingWave = at
        }
        switch schedule {
        case .deliverAt(let d)?:
            if d.late == .skip, Int64(now) > at + Int64(d.windowSeconds) { return .skip(now: Int64(now)) }
        case .quietHours(let q)?:
            guard let timeZone else { break }
            let name = String(decoding: timeZone, as: UTF8.self)
            let zone: ZoneRules?
            if let known = zones[name] {
                zone = known
            } else {
                if case .zone(let z) = database.zone(named: name) { zone = z } else { zone = nil }
                zones[name] = zone
            }
            // A zone this machine's tz database does not know: the planner
            // knew it, and its moment was chosen outside the quiet hours.
            guard let zone else { break }
            let allowed = q.nextAllowed(in: zone, atOrAfter: Int64(now))
            if allowed > Int64(now) {
                deferred += 1
                deferredUntil = min(deferredUntil ?? allowed, allowed)
                return .deferred
            }
        case nil:
            break
        }
        return .send
    }

    /// The moment just released after a wait, once.
    mutating func takeWave() -> Int64? {
        defer { pendingWave = nil }
        return pendingWave
    }
}
