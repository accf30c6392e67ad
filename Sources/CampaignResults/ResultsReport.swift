import Foundation
import CampaignJSON

/// An experiment's results: each group's conversion with its interval, each
/// variant against the control (the holdout; without one, the first
/// variant), the test across all groups and the sample-ratio check. The
/// methods are named as statisticians' libraries name them (see ``Statistics``).
public struct ResultsReport {
    public struct GroupResult {
        public var group: ExperimentGroup
        /// converted / population, with its Wilson score interval.
        public var rate: Double?
        public var rateInterval: (low: Double, high: Double)?
        /// Against the control (nil for the control itself): the difference
        /// of rates with Newcombe's hybrid score interval, the relative lift,
        /// the pooled two-proportion z-test.
        public var difference: Double?
        public var differenceInterval: (low: Double, high: Double)?
        public var lift: Double?
        public var z: Double?
        public var pValue: Double?
    }

    public var campaign: String
    public var groups: [GroupResult]
    /// The group the others are compared with.
    public var control: String?
    public var confidence: Double
    public var windowSeconds: Int64
    public var event: String?
    public var events: EventCounts
    /// Pearson's chi-squared test of independence, groups × converted (no continuity correction).
    public var independence: (statistic: Double, degreesOfFreedom: Int, pValue: Double)?
    /// Chi-squared goodness of fit of each group's planned (or held-out) count against the job's weights.
    public var sampleRatio: (statistic: Double, degreesOfFreedom: Int, pValue: Double)?
    public var heldOutUnmeasured: Int
    public var notes: [String]

    /// Below this, the split is not what the job asked: results should not be trusted.
    public static let sampleRatioAlarm = 0.001

    public init(experiment: Experiment, events: EventCounts, windowSeconds: Int64, event: String?, confidence: Double) {
        campaign = experiment.campaign
        self.confidence = confidence
        self.windowSeconds = windowSeconds
        self.event = event
        self.events = events
        heldOutUnmeasured = experiment.heldOutUnmeasured
        notes = experiment.notes
        let all = experiment.devices.groups
        let controlIndex = all.firstIndex(where: \.holdout) ?? (all.count > 1 ? 0 : nil)
        control = controlIndex.map { all[$0].name }
        groups = all.enumerated().map { i, g in
            var r = GroupResult(group: g)
            r.rate = Statistics.proportion(successes: g.converted, trials: g.population)
            r.rateInterval = Statistics.wilson(successes: g.converted, trials: g.population, confidence: confidence)
            if let c = controlIndex, c != i {
                let base = all[c]
                if let n = Statistics.newcombe(successes1: g.converted, trials1: g.population, successes2: base.converted, trials2: base.population,
                                               confidence: confidence) {
                    r.difference = n.difference
                    r.differenceInterval = (n.low, n.high)
                }
                if let rate = r.rate, let baseRate = Statistics.proportion(successes: base.converted, trials: base.population) {
                    r.lift = Statistics.relativeLift(rate: rate, baseline: baseRate)
                }
                if let t = Statistics.twoProportionZTest(successes1: g.converted, trials1: g.population,
                                                         successes2: base.converted, trials2: base.population) {
                    (r.z, r.pValue) = (t.z, t.pValue)
                }
            }
            return r
        }
        let measured = all.filter { $0.population > 0 }
        independence = measured.count >= 2 ? Statistics.chiSquaredIndependence(measured.map { [$0.converted, $0.population - $0.converted] }) : nil
        sampleRatio = all.count >= 2 ? Statistics.goodnessOfFit(observed: all.map(\.planned), weights: all.map { Double($0.weight) }) : nil
    }

    public var sampleRatioMismatch: Bool { (sampleRatio?.pValue ?? 1) < Self.sampleRatioAlarm }

    // MARK: - JSON

    /// Every number to full precision (the shortest text that reads back as the same double); null where undefined.
    public var json: JSONValue {
        func n(_ v: Int) -> JSONValue { .number(String(v)) }
        func d(_ v: Double?) -> JSONValue { v.map { $0.isFinite ? .number(String(describing: $0)) : .null } ?? .null }
        func pair(_ v: (low: Double, high: Double)?) -> JSONValue { v.map { .array([d($0.low), d($0.high)]) } ?? .null }
        let byName: [(key: String, value: JSONValue)] = groups.map { r in
            let g = r.group
            return (g.name, .object([
                ("holdout", .bool(g.holdout)), ("weight", n(g.weight)),
                ("population", n(g.population)), ("planned", n(g.planned)),
                ("accepted", n(g.accepted)), ("failed", n(g.failed)), ("skipped", n(g.skipped)), ("pending", n(g.pending)),
                ("converted", n(g.converted)),
                ("rate", d(r.rate)), ("rate_ci", pair(r.rateInterval)),
                ("diff", d(r.difference)), ("diff_ci", pair(r.differenceInterval)),
                ("lift", d(r.lift)), ("z", d(r.z)), ("p_value", d(r.pValue)),
            ]))
        }
        // Typed up front: the literal below took over a second to type-check without it.
        let fields: [(String, JSONValue)] = [
            ("campaign", .string(campaign)),
            ("control", control.map { .string($0) } ?? .null),
            ("confidence", d(confidence)),
            ("window_seconds", .number(String(windowSeconds))),
            ("event", event.map { .string($0) } ?? .null),
            ("groups", .object(byName)),
            ("chi2", d(independence?.statistic)), ("chi2_df", independence.map { n($0.degreesOfFreedom) } ?? .null),
            ("chi2_p_value", d(independence?.pValue)),
            ("srm_chi2", d(sampleRatio?.statistic)), ("srm_df", sampleRatio.map { n($0.degreesOfFreedom) } ?? .null),
            ("srm_p_value", d(sampleRatio?.pValue)), ("srm_mismatch", .bool(sampleRatioMismatch)),
            ("held_out_unmeasured", n(heldOutUnmeasured)),
            ("events_read", n(events.read)), ("events_counted", n(events.counted)),
            ("events_unknown_device", n(events.unknownDevice)), ("events_not_reached", n(events.notReached)),
            ("events_before_moment", n(events.beforeMoment)), ("events_outside_window", n(events.outsideWindow)),
            ("events_other_event", n(events.otherEvent)), ("events_rejected", n(events.rejected)),
            ("notes", .array(notes.map { .string($0) })),
        ]
        return .object(fields)
    }

    // MARK: - Text

    public static func percent(_ v: Double?, digits: Int = 2) -> String {
        guard let v, v.isFinite else { return "-" }
        return String(format: "%.\(digits)f%%", v * 100)
    }

    public static func points(_ v: Double?) -> String {
        guard let v, v.isFinite else { return "-" }
        return String(format: "%+.2f", v * 100)
    }

    public static func pText(_ p: Double?) -> String {
        guard let p, p.isFinite else { return "-" }
        if p < 0.0001 { return "< 0.0001" }
        return String(format: "%.4f", p)
    }

    /// "p = 0.0123", "p < 0.0001".
    public static func pSaid(_ p: Double?) -> String {
        let t = pText(p)
        return t.hasPrefix("<") ? "p \(t)" : "p = \(t)"
    }

    public var level: String {
        let pct = confidence * 100
        return pct == pct.rounded() ? "\(Int(pct))%" : String(format: "%g%%", pct)
    }

    /// One sentence per variant, in plain words.
    public var verdicts: [String] {
        guard let control else { return [] }
        return groups.filter { $0.group.name != control }.map { r in
            let name = r.group.name
            guard let p = r.pValue, let diff = r.difference else {
                if r.group.population == 0 { return "\(name): no device reached, nothing to compare." }
                return "\(name): no comparison with \(control) (a group with no devices, or no conversion anywhere)."
            }
            let by = String(format: "%.2f", abs(diff) * 100)
            let lift = r.lift.map { String(format: " (%+.1f%%)", $0 * 100) } ?? ""
            if p < 1 - confidence {
                return "\(name): converted \(diff > 0 ? "more" : "less") than \(control), by \(by) percentage points\(lift); \(Self.pSaid(p)), significant at \(level)."
            }
            return "\(name): no difference from \(control) shown at \(level) (\(Self.points(diff)) points, \(Self.pSaid(p)))."
        }
    }

    public var text: String {
        var out = "campaign \(campaign): conversions within \(Self.durationText(windowSeconds)) of each device's moment, \(event.map { "event \"\($0)\"" } ?? "any event"), \(level) intervals\n"
        let header = ["group", "population", "converted", "rate (\(level) CI)"]
            + (control.map { ["vs \($0): points (\(level) CI)", "lift", "p-value"] } ?? [])
        var rows: [[String]] = [header]
        for r in groups {
            let g = r.group
            let interval = r.rateInterval.map { "\(Self.percent($0.low))–\(Self.percent($0.high))" } ?? "-"
            let diff = r.difference.map { _ in "\(Self.points(r.difference)) (\(Self.points(r.differenceInterval?.low)) to \(Self.points(r.differenceInterval?.high)))" }
                ?? (g.name == control ? "(control)" : "-")
            let compared = r.pValue == nil ? (g.name == control ? "(control)" : "-") : diff
            rows.append([g.name + (g.holdout ? " (holdout)" : ""), String(g.population), String(g.converted), "\(Self.percent(r.rate)) (\(interval))"]
                        + (control == nil ? [] : [compared, r.pValue == nil ? "-" : r.lift.map { String(format: "%+.1f%%", $0 * 100) } ?? "-", Self.pText(r.pValue)]))
        }
        let widths = header.indices.map { c in rows.map { $0[c].count }.max() ?? 0 }
        for row in rows {
            out += "  " + row.enumerated().map { c, v in c == 0 ? v.padding(toLength: widths[c], withPad: " ", startingAt: 0)
                                                            : String(repeating: " ", count: widths[c] - v.count) + v }.joined(separator: "  ") + "\n"
        }
        for v in verdicts { out += "  \(v)\n" }
        if let x = independence {
            out += "  across all groups: chi-squared \(String(format: "%.3f", x.statistic)) (\(x.degreesOfFreedom) df), \(Self.pSaid(x.pValue))\n"
        }
        if let s = sampleRatio {
            let said = sampleRatioMismatch
                ? "WARNING: the split is not what the job asked (sample ratio mismatch): do not trust these results"
                : "the split is as the job asked"
            out += "  sample ratio: chi-squared \(String(format: "%.3f", s.statistic)) (\(s.degreesOfFreedom) df) against the weights \(groups.map { "\($0.group.name) \($0.group.weight)" }.joined(separator: ", ")), \(Self.pSaid(s.pValue)): \(said)\n"
        }
        let reached = groups.filter { !$0.group.holdout }
        out += "  sent: " + reached.map { "\($0.group.name) \($0.group.planned) planned, \($0.group.accepted) accepted, \($0.group.failed) failed, \($0.group.skipped) skipped, \($0.group.pending) not final" }.joined(separator: "; ") + "\n"
        if heldOutUnmeasured > 0 {
            out += "  held out but not measured: \(heldOutUnmeasured) (their part never started, or their moment is still to come)\n"
        }
        out += "  events: \(events.read) read, \(events.counted) counted, \(events.unknownDevice) of devices not in the campaign, \(events.notReached) of devices not reached, \(events.beforeMoment) before the moment, \(events.outsideWindow) after the window, \(events.otherEvent) of other events, \(events.rejected) unreadable\n"
        for note in notes { out += "  note: \(note)\n" }
        return out
    }

    public static func durationText(_ seconds: Int64) -> String {
        if seconds % 3600 == 0 { return "\(seconds / 3600) h" }
        if seconds % 60 == 0 { return "\(seconds / 60) min" }
        return "\(seconds) s"
    }
}
