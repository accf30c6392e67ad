import CampaignJSON
import CampaignSend
import LocalTime
import PlanStream
import SendJournal
import SendEngine

/// A scheduled send: what is not final yet, by when it is due (from a
/// pass over the plan; nil when the plan is not scheduled or cannot be read).
struct ScheduleView {
    var what: String
    var dueNow = 0
    var waiting = 0
    /// Of `waiting`, those due by their moment but held back now by their device's quiet hours.
    var quietHeld = 0
    var perHour: [Int64: Int] = [:]
    var nextMoment: Int64?

    /// Reads the plan through once: what is not final in `state` yet, due
    /// at `now` (UNIX seconds) or waiting, by hour.
    static func scan(state: JournalState, directory: String, now: Int64) -> ScheduleView? {
        guard let header = try? PlanHeader(json: state.planHeader), let schedule = header.schedule,
              let plan = try? SendSession.planReader(state: state, directory: directory) else { return nil }
        var view = ScheduleView(what: "")
        switch schedule {
        case .deliverAt(let d):
            view.what = "at \(d.localTime) local" + (d.date.map { " on \($0)" } ?? "") + ", window \(d.windowText), late: \(d.late.rawValue)"
        case .quietHours(let q):
            view.what = "quiet hours \(q.from) to \(q.to) local"
        }
        // Quiet hours are asked again as the send would: a record due by its
        // moment waits while its device is inside them.
        let rule = ReleaseRule(schedule: schedule)
        let zones = ZoneRegistry()
        var ordinals = [Int](repeating: 0, count: header.shards)
        do {
            while try plan.nextView({ record in
                let ordinal = ordinals[record.shard]
                ordinals[record.shard] += 1
                if state.done[record.shard]?.contains(ordinal) == true { return }
                guard var at = record.at else { return }
                if at <= now, let tz = record.timeZone,
                   case .deferred(let until) = rule.verdict(at: at, zone: zones.rules(of: zones.number(of: tz)), now: Double(now)) {
                    at = until
                    view.quietHeld += 1
                }
                if at <= now {
                    view.dueNow += 1
                } else {
                    view.waiting += 1
                    view.perHour[at - at % 3600, default: 0] += 1
                    view.nextMoment = min(view.nextMoment ?? at, at)
                }
            }) {}
        } catch {
            return view
        }
        return view
    }
}

extension JournalView {
    /// The JSON members of a scheduled send (none for a plan without a schedule).
    var scheduleMembers: [(String, JSONValue)] {
        guard let s = schedule else { return [] }
        func n(_ v: Int) -> JSONValue { .number(String(v)) }
        let skipped: [(String, JSONValue)] = [("skipped", n(state.skipped.count)),
                                              ("skipped_frequency_capped", n(state.skipped.filter { $0.rule != nil }.count))]
        // Cancelled: nothing is due or waiting any more; what was not final is counted as never to be sent.
        if phase == .cancelled {
            return skipped + [("due_now", n(0)), ("waiting", n(0)), ("deferred_for_quiet_hours", n(0)), ("never_sent_cancelled", n(s.dueNow + s.waiting)),
                              ("scheduled_per_hour", .object([])), ("next_moment", .null)]
        }
        return skipped + [("due_now", n(s.dueNow)), ("waiting", n(s.waiting)), ("deferred_for_quiet_hours", n(s.quietHeld)),
                          ("scheduled_per_hour", .object(s.perHour.sorted { $0.key < $1.key }.map { (utcText($0.key), n($0.value)) })),
                          ("next_moment", s.nextMoment.map { .string(utcText($0)) } ?? .null)]
    }
}

/// A value computed when first asked, then kept: the schedule scan reads a
/// whole plan, and a view's text and JSON both ask for it.
final class ComputedOnce<Value> {
    private var value: Value?
    private let compute: () -> Value

    init(_ compute: @escaping () -> Value) { self.compute = compute }

    var wrappedValue: Value {
        if let value { return value }
        let computed = compute()
        value = computed
        return computed
    }
}
