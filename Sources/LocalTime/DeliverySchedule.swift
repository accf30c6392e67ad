/// When a scheduled campaign may reach each device, by the device's own clock.
public enum DeliverySchedule: Sendable, Equatable {
    /// The job's `deliverAt`: one local time of day, on one date, in every zone.
    case deliverAt(DeliverAt)
    /// The job's `quietHours`: as soon as possible, but never inside them.
    case quietHours(QuietHours)

    /// The zone a row without a usable one is given.
    public var defaultZone: String {
        switch self {
        case .deliverAt(let d): d.defaultZone
        case .quietHours(let q): q.defaultZone
        }
    }
}

/// What a send does with a notification whose moment passed more than the window ago.
public enum LatePolicy: String, Sendable, Equatable, CaseIterable {
    /// Send it at once.
    case send
    /// Record it as skipped: final, not failed.
    case skip
}

/// `"deliverAt": {"localTime": "09:00", "date": "2026-12-01", "window": "3h", "defaultTimeZone": "America/New_York", "late": "send"}`.
public struct DeliverAt: Sendable, Equatable {
    public var localTime: TimeOfDay
    /// nil: the first day on which `localTime` has not yet come in the
    /// audience's zone furthest ahead of UTC (see ``defaultDate(zones:now:)``).
    public var date: CivilDate?
    /// How late a notification may still go, in seconds.
    public var windowSeconds: Int
    public var defaultZone: String
    public var late: LatePolicy

    public init(localTime: TimeOfDay, date: CivilDate?, windowSeconds: Int, defaultZone: String, late: LatePolicy) {
        (self.localTime, self.date, self.windowSeconds, self.defaultZone, self.late) = (localTime, date, windowSeconds, defaultZone, late)
    }

    /// The window as people read it, to the second: `3 h`, `1 h 30 min`,
    /// `1 min 30 s`, `45 s`.
    public var windowText: String { Self.durationText(windowSeconds) }

    /// `seconds` in days, hours, minutes and seconds, each only when not zero (`0 s` for none).
    public static func durationText(_ seconds: Int) -> String {
        let parts = [(seconds / 86_400, "d"), (seconds % 86_400 / 3600, "h"), (seconds % 3600 / 60, "min"), (seconds % 60, "s")]
            .filter { $0.0 != 0 }.map { "\($0.0) \($0.1)" }
        return parts.isEmpty ? "0 s" : parts.joined(separator: " ")
    }

    /// The instant `localTime` comes on `date` in `zone` (a time a
    /// spring-forward skips is taken one hour later on the clock; one a
    /// fall-back repeats, the first time).
    public func moment(in zone: ZoneRules, on date: CivilDate) -> Int64 {
        zone.utc(atLocal: Int64(date.daysSinceEpoch) * 86_400 + Int64(localTime.seconds))
    }

    /// When `date`'s moment comes across every zone on earth: first at
    /// UTC+14:00, last at UTC−12:00.
    public func moments(on date: CivilDate) -> ClosedRange<Int64> {
        moment(in: ZoneRules(name: "+14:00", fixedOffset: 14 * 3600), on: date)...moment(in: ZoneRules(name: "-12:00", fixedOffset: -12 * 3600), on: date)
    }

    /// The first date on which `localTime` is still to come, at `now`, in the
    /// zone of `zones` whose clock is furthest ahead (where it comes first):
    /// so at plan time no device's moment has passed.
    public func defaultDate(zones: [ZoneRules], now: Int64) -> CivilDate {
        let ahead = zones.max { $0.offset(atUTC: now) < $1.offset(atUTC: now) } ?? ZoneRules(name: "UTC", fixedOffset: 0)
        let today = CivilDate(daysSinceEpoch: Int(floorDivide(ahead.local(atUTC: now), 86_400)))
        return moment(in: ahead, on: today) > now ? today : today.adding(days: 1)
    }
}

/// `"quietHours": {"from": "21:00", "to": "08:00", "defaultTimeZone": "Europe/Berlin"}`:
/// from 21:00 until 08:00 on each device's clock nothing is sent to it.
public struct QuietHours: Sendable, Equatable {
    public var from: TimeOfDay
    public var to: TimeOfDay
    public var defaultZone: String

    public init(from: TimeOfDay, to: TimeOfDay, defaultZone: String) {
        (self.from, self.to, self.defaultZone) = (from, to, defaultZone)
    }

    /// Whether a clock reading `secondOfDay` is inside the quiet hours (they may run over midnight).
    public func contains(secondOfDay s: Int) -> Bool {
        if from == to { return false }
        return from < to ? (s >= from.seconds && s < to.seconds) : (s >= from.seconds || s < to.seconds)
    }

    /// The first instant at or after `utc` outside the quiet hours in `zone`.
    public func nextAllowed(in zone: ZoneRules, atOrAfter utc: Int64) -> Int64 {
        let local = zone.local(atUTC: utc)
        let day = floorDivide(local, 86_400)
        guard contains(secondOfDay: Int(local - day * 86_400)) else { return utc }
        var end = day * 86_400 + Int64(to.seconds)
        if end <= local { end += 86_400 }
        // `to` may itself be skipped by a spring-forward: the zone reads it
        // as the instant the clock jumps past it.
        return max(utc, zone.utc(atLocal: end))
    }
}
