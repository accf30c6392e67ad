#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import LocalTime

/// Whether a scheduled notification may go now, by its job's rule: one
/// decision, asked twice — by the plan reader's ``ScheduleGate`` when it
/// reads the record, and again by a connection when it takes the record
/// to write it (``WireRelease``): a record read ahead (a queue of
/// thousands under `--rate 1`) may have been due when read and be inside
/// its device's quiet hours, or past its window, by the time it is written.
public struct ReleaseRule: Sendable {
    public enum Verdict: Equatable, Sendable {
        /// Send it.
        case send
        /// In its device's quiet hours until `until`: left pending for a later run.
        case deferred(until: Int64)
        /// Too late (`late: skip`): recorded as skipped.
        case skip
    }

    public let schedule: DeliverySchedule

    public init(schedule: DeliverySchedule) { self.schedule = schedule }

    /// Whether the rule can say anything but ``Verdict/send`` once a record is due.
    package var checksWhenDue: Bool {
        switch schedule {
        case .deliverAt(let d): d.late == .skip
        case .quietHours: true
        }
    }

    /// The verdict at `now` for a record of moment `at` (already due) whose
    /// device is in `zone` (nil: no zone, or one this machine does not know:
    /// the planner knew it and chose its moment outside the quiet hours).
    public func verdict(at: Int64, zone: ZoneRules?, now: Double) -> Verdict {
        switch schedule {
        case .deliverAt(let d):
            // To the fraction: a window of 30 s ends 30 s after the moment, not up to a second later.
            if d.late == .skip, now > Double(at + Int64(d.windowSeconds)) { return .skip }
        case .quietHours(let q):
            guard let zone else { return .send }
            let second = Int64(now.rounded(.down))
            let allowed = q.nextAllowed(in: zone, atOrAfter: second)
            if allowed > second { return .deferred(until: allowed) }
        }
        return .send
    }
}

/// The zones of a scheduled plan's records as the send meets them, numbered
/// so a queued frame carries a number, not a name; read by every connection
/// (and by `status`, which asks the same rule).
public final class ZoneRegistry: @unchecked Sendable {
    private let database = ZoneDatabase()
    private var numbers: [String: Int32] = [:]
    private var rules: [ZoneRules?] = []
    private let lock = Lock()

    public init() {}

    /// The number of the zone named by `text` (registered on first sight).
    public func number(of text: UnsafeRawBufferPointer) -> Int32 {
        let name = String(decoding: text, as: UTF8.self)
        lock.lock()
        defer { lock.unlock() }
        if let n = numbers[name] { return n }
        let zone: ZoneRules? = if case .zone(let z) = database.zone(named: name) { z } else { nil }
        rules.append(zone)
        numbers[name] = Int32(rules.count - 1)
        return Int32(rules.count - 1)
    }

    /// The rules of zone `number` (nil for -1, or a zone this machine does not know).
    public func rules(of number: Int32) -> ZoneRules? {
        guard number >= 0 else { return nil }
        lock.lock()
        defer { lock.unlock() }
        return Int(number) < rules.count ? rules[Int(number)] : nil
    }
}

/// The second asking of a ``ReleaseRule``: as a connection takes scheduled
/// frames from its queue to write them. What may not go is not written:
/// a late one is journaled as skipped, one inside its quiet hours stays
/// pending, and the run ends `scheduled` with the end of those hours as its
/// next moment (``SendShared/heldAtTheWire``).
package final class WireRelease: Sendable {
    package let rule: ReleaseRule
    package let zones: ZoneRegistry
    /// The device token inside an encoded frame (the transport's layout).
    package let token: @Sendable (UnsafeBufferPointer<UInt8>) -> [UInt8]

    package init(rule: ReleaseRule, zones: ZoneRegistry, token: @escaping @Sendable (UnsafeBufferPointer<UInt8>) -> [UInt8]) {
        (self.rule, self.zones, self.token) = (rule, zones, token)
    }

    /// A frame that may not go now.
    package struct Held {
        package var frame: QueuedFrame
        package var token: [UInt8]
        package var verdict: ReleaseRule.Verdict
    }

    /// Whether `frame` (its bytes `bytes`) may be written at `now`; if not, it is added to `held`.
    package func admit(_ frame: QueuedFrame, bytes: UnsafeBufferPointer<UInt8>, now: Double, held: inout [Held]) -> Bool {
        guard let h = holds(frame, packet: bytes, now: now) else { return true }
        held.append(h)
        return false
    }

    /// Nil when `frame` (its bytes `packet`) may go at `now`, else why not: asked
    /// as it is taken, and again before it goes again (a retry after a 429 or
    /// 5xx, a binary replay, a connection lost with it).
    package func holds(_ frame: QueuedFrame, packet: UnsafeBufferPointer<UInt8>, now: Double) -> Held? {
        guard frame.moment != 0 else { return nil }
        let verdict = rule.verdict(at: frame.moment, zone: zones.rules(of: frame.zone), now: now)
        return verdict == .send ? nil : Held(frame: frame, token: token(packet), verdict: verdict)
    }
}
