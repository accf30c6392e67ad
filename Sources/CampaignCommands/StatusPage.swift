#if canImport(Glibc)
import Glibc
#endif
import Foundation
import APNSWire
import CampaignSend
import PlanStream
import GatewayClient
import LocalTime
import SendJournal

/// `campaign status DIR --html FILE`: one self-contained page (inline CSS and
/// SVG; no script, no network) with the send's rate over time, its outcomes
/// by status, its connections and resends, and the summary.
enum StatusPage {
    static func html(journal directory: String, state: JournalState, outcome: String, running: Bool = false) -> String {
        let failedByReason = state.failures.countedByReason
        let remaining = state.planRecords.map { String(max(0, $0 - state.doneCount)) } ?? "unknown"
        // What the send is: its campaign, protocol and gateway, from the plan's header and the settings.
        let header = try? PlanHeader(json: state.planHeader)
        let wire = header?.wire ?? .toldForAnUnreadableHeader
        let gateway = "\(state.settings.gatewayHost):\(state.settings.gatewayPort)"
        let environment = ["api.push.apple.com": " (production)", "api.sandbox.push.apple.com": " (sandbox)",
                           "gateway.push.apple.com": " (production)", "gateway.sandbox.push.apple.com": " (sandbox)"][state.settings.gatewayHost] ?? ""
        var what: [(String, String)] = [
            ("Campaign", header?.campaign ?? "(unknown)"),
            ("Protocol", header.map { $0.wire.pageName.full } ?? "binary interface (? format)"),
        ]
        if let fields = header?.http2, fields.broadcast {
            what.append(("Broadcast", "Live Activity updates to channels of \(fields.topic ?? "?") (one request per channel)"))
        } else if let fields = header?.http2 {
            what.append(("Topic · push type", "\(fields.topic ?? "(the certificate's)") · \(fields.pushType)"))
        }
        switch header?.schedule {
        case .deliverAt(let d)?:
            what.append(("Schedule", "\(d.localTime) on each device's clock" + (d.date.map { ", \($0)" } ?? "") + "; window \(d.windowText), late: \(d.late.rawValue); \(state.skipped.count) skipped as too late"))
        case .quietHours(let q)?:
            what.append(("Schedule", "quiet hours \(q.from)–\(q.to) on each device's clock"))
        case nil: break
        }
        what.append(("Gateway", gateway + environment + (state.settings.proxy.map { " through \($0)" } ?? "")))
        what.append(("Journal", directory))
        let summary: [(String, String)] = what + [
            ("Outcome", outcome), ("Runs", runsText(state)),
            ("Plan", "\(state.settings.planPath ?? "spooled in the journal") · \(state.planRecords.map { "\($0) records" } ?? "not read to its end")"),
            ("Accepted", String(state.accepted)), ("Presumed delivered", String(state.presumed)),
            ("Failed", String(state.failures.count)), ("Remaining", remaining),
            ("Resent", String(state.resends)), ("Possible duplicates", String(state.duplicatesRisked)),
            ("Connections", String(state.reconnects)),
        ]
        var page = """
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8"><title>campaign \(escape(header?.campaign ?? directory)): send</title>
        <style>
        body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:900px;color:#222}
        h1{font-size:20px}h2{font-size:16px;margin-top:2em}
        table{border-collapse:collapse}td{padding:2px 12px 2px 0}td:first-child{color:#666}
        svg{background:#fafafa;border:1px solid #ddd}.axis{stroke:#999;stroke-width:1}.label{font-size:11px;fill:#555}
        </style></head><body>
        <h1>\(escape(header?.campaign ?? "campaign send")) · \(wire.pageName.short) · \(state.planRecords.map { "\($0) notifications" } ?? "plan not read to its end")</h1>
        <table>
        """
        for (name, value) in summary { page += "<tr><td>\(escape(name))</td><td>\(escape(value))</td></tr>\n" }
        page += "</table>\n"
        page += "<h2>\(wire.rateChartHeading)</h2>\n"
            + rateChart(state.timeline, outcomes: state.runOutcomes, running: running, waves: state.waves, runStartedAt: state.runStartedAt, woke: state.runWoke)
        page += "<h2>Outcomes</h2>\n" + outcomeBars(accepted: state.accepted, presumed: state.presumed, skipped: state.skipped.count, failed: failedByReason)
        page += variantsTable(JournalView.variantBooks(state: state, directory: directory))
        page += "<h2>Connections opened and notifications resent over time (cumulative, per run; each on its own scale)</h2>\n" + countsChart(state.timeline)
        if wire.chartsResendsByKind, let chart = resentByKindChart(state.timeline) {
            page += "<h2>Resent, by why (cumulative, per run): answers that ask for a retry, refused streams, lost connections</h2>\n" + chart
        }
        if state.timeline.joined().contains(where: { $0.open != nil }) {
            page += "<h2>Connections in use (HTTP/2: the pool grows with the distance) and the round trip measured (ms)</h2>\n" + poolChart(state.timeline)
        }
        page += "<p class=\"label\">\(wire.resentNote)</p>\n"
        page += "</body></html>\n"
        return page
    }

    /// "2: 2026-11-26 02:30:01 UTC, 4 s, killed; 02:30:06 UTC, 5 s, complete" (times where the journal has them).
    static func runsText(_ state: JournalState) -> String {
        var runs: [String] = []
        var lastDay = ""
        for i in 0..<state.runs {
            var parts: [String] = []
            if i < state.runStartedAt.count, let at = state.runStartedAt[i] {
                var t = time_t(at)
                var tm = tm()
                gmtime_r(&t, &tm)
                let day = String(format: "%04d-%02d-%02d", Int(tm.tm_year) + 1900, Int(tm.tm_mon) + 1, Int(tm.tm_mday))
                parts.append((day == lastDay ? "" : day + " ") + String(format: "%02d:%02d:%02d UTC", Int(tm.tm_hour), Int(tm.tm_min), Int(tm.tm_sec)))
                lastDay = day
            }
            // An ended run's own time (its end record's); a killed run's last journaled second, as the send's time counts them.
            if i < state.runSeconds.count, let seconds = state.runSeconds[i] {
                parts.append("\(format1((seconds * 10).rounded() / 10)) s")
            } else if i < state.timeline.count, let last = state.timeline[i].last {
                parts.append("\(last.second) s")
            }
            let ended = i < state.runOutcomes.count ? state.runOutcomes[i]?.rawValue : nil
            parts.append(ended ?? (i == state.runs - 1 && state.outcome == nil ? "running or killed" : "killed"))
            runs.append(parts.joined(separator: ", "))
        }
        return "\(state.runs)" + (runs.isEmpty ? "" : ": " + runs.joined(separator: "; "))
    }

    /// The parts of a plan: a table of them, their outcomes together, and each part's rate.
    static func html(parts view: PartsView) -> String {
        let t = view.totals
        let title = view.manifest.map { "campaign \($0.campaign) · \($0.parts.count) parts" } ?? "campaign send · \(view.rows.count) journals"
        let failedByReason = view.rows.flatMap { $0.journal?.state.failures ?? [] }.countedByReason
        var page = """
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8"><title>\(escape(title))</title>
        <style>
        body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:900px;color:#222}
        h1{font-size:20px}h2{font-size:16px;margin-top:2em}
        table{border-collapse:collapse}td,th{padding:2px 12px 2px 0;text-align:left}th{color:#666;font-weight:normal}
        svg{background:#fafafa;border:1px solid #ddd}.axis{stroke:#999;stroke-width:1}.label{font-size:11px;fill:#555}
        .complete{color:#2a9a4a}.stopped{color:#c03030}.running{color:#2a7ab0}.cancelled{color:#8a5a00}
        </style></head><body>
        <h1>\(escape(title))</h1>
        <p>\(view.count(.complete)) complete, \(view.count(.running)) running, \(view.count(.stopped)) stopped, \(view.count(.cancelled) > 0 ? "\(view.count(.cancelled)) cancelled, " : "")\(view.count(.notStarted)) not started ·
        done \(t.done) of \(t.recordsKnown ? String(t.records) : "?") (\(t.accepted) accepted, \(t.presumed) presumed, \(t.failed) failed) ·
        resent \(t.resends), possible duplicates \(t.duplicates)</p>
        <table><tr><th>part</th><th>state</th><th>records</th><th>done</th><th>failed</th><th>journal</th><th>to finish</th></tr>

        """
        for row in view.rows {
            let s = row.journal?.state
            page += "<tr><td>\(row.part.map(String.init) ?? "-")</td><td class=\"\(row.phase == .notStarted ? "" : row.phase.rawValue)\">\(escape(row.phase.rawValue))</td>"
            page += "<td>\((row.planRecords ?? s?.planRecords).map(String.init) ?? "?")</td><td>\(s?.doneCount ?? 0)</td><td>\(s?.failures.count ?? 0)</td>"
            page += "<td>\(escape(row.journal?.directory ?? "-"))</td><td><code>\(escape(view.command(for: row) ?? ""))</code></td></tr>\n"
        }
        page += "</table>\n<h2>Outcomes, all parts</h2>\n" + outcomeBars(accepted: t.accepted, presumed: t.presumed, failed: failedByReason)
        page += variantsTable(view.variants)
        for row in view.rows {
            guard let j = row.journal else { continue }
            page += "<h2>Part \(row.part.map(String.init) ?? "-") · \(escape(j.directory)): notifications made final per second</h2>\n" + rateChart(j.state.timeline)
        }
        return page + "</body></html>\n"
    }

    static let width = 860.0, height = 220.0, margin = 40.0

    /// The runs' per-second rates, one run after another along the time axis,
    /// each run's start marked and its end labelled with how it ended
    /// (`outcomes`: per run, nil for one killed or still running; `running`:
    /// the last run is still going).
    /// A scheduled send's waves (per run: each moment released after a wait,
    /// and when) are marked where they began, by their moment in UTC.
    static func rateChart(_ timeline: [[JournalRecord.Tick]], outcomes: [SendOutcome?] = [], running: Bool = false,
                          waves: [[(moment: Int, at: Int)]] = [], runStartedAt: [Int?] = [], woke: [Bool] = []) -> String {
        var points: [(x: Double, y: Double)] = []
        var markers: [(x: Double, label: String)] = []
        var offset = 0
        for (i, run) in timeline.enumerated() {
            var previous = 0
            if !run.isEmpty { points.append((Double(offset), 0)) }   // each run starts from nothing
            // A scheduled send's own next run (it waited for its moment) is no resume.
            if timeline.count > 1 { markers.append((Double(offset), i == 0 ? "run 1" : "run \(i + 1) (\(i < woke.count && woke[i] ? "next wave" : "resume"))")) }
            if i < waves.count, i < runStartedAt.count, let start = runStartedAt[i] {
                for wave in waves[i] { markers.append((Double(offset + max(0, wave.at - start)), "wave \(utcText(Int64(wave.moment)).dropFirst(11).prefix(5))Z")) }
            }
            for tick in run {
                points.append((Double(offset + tick.second), Double(max(0, tick.accepted + tick.failed - previous))))
                previous = tick.accepted + tick.failed
            }
            offset += (run.last?.second ?? 0) + 1
            let last = i == timeline.count - 1
            let ended = i < outcomes.count ? outcomes[i] : nil
            if let ended, ended != .complete {
                markers.append((Double(offset), "stopped: \(ended.rawValue)"))
            } else if ended == nil, !(last && running), !run.isEmpty {
                markers.append((Double(offset), "killed (no end record)"))
            }
        }
        return lineChart([("#2a7ab0", points)], emptyText: "no timeline (runs shorter than a second, or a journal from before timelines)",
                         markers: markers)
    }

    static func countsChart(_ timeline: [[JournalRecord.Tick]]) -> String {
        var connections: [(x: Double, y: Double)] = [], resent: [(x: Double, y: Double)] = []
        var offset = 0
        for run in timeline {
            if !run.isEmpty {
                connections.append((Double(offset), 0))
                resent.append((Double(offset), 0))
            }
            for tick in run {
                connections.append((Double(offset + tick.second), Double(tick.connections)))
                resent.append((Double(offset + tick.second), Double(tick.resent)))
            }
            offset += (run.last?.second ?? 0) + 1
        }
        // Each on its own axis: a few connections beside thousands of resends would draw flat.
        return lineChart([("#b05a2a", connections)], emptyText: "no timeline", legend: [("#b05a2a", "connections opened")])
            + lineChart([("#6a2ab0", resent)], emptyText: "no timeline", legend: [("#6a2ab0", "resent")])
    }

    /// Resent notifications by why (429, 500, 503, REFUSED_STREAM, lost
    /// connection), cumulative per run, a line each; nil when none was recorded.
    static func resentByKindChart(_ timeline: [[JournalRecord.Tick]]) -> String? {
        let kinds = Set(timeline.joined().flatMap(\.resentByKind.keys)).sorted()
        guard !kinds.isEmpty else { return nil }
        let palette = ["#c03030", "#d08020", "#6a2ab0", "#2a7ab0", "#2a8a4a", "#8a2a6a", "#777"]
        var series: [(color: String, points: [(x: Double, y: Double)])] = kinds.indices.map { (palette[$0 % palette.count], []) }
        var offset = 0
        for run in timeline {
            for (k, kind) in kinds.enumerated() {
                if !run.isEmpty { series[k].points.append((Double(offset), 0)) }
                for tick in run { series[k].points.append((Double(offset + tick.second), Double(tick.resentByKind[kind] ?? 0))) }
            }
            offset += (run.last?.second ?? 0) + 1
        }
        return lineChart(series, emptyText: "nothing resent", legend: kinds.enumerated().map { (palette[$0.offset % palette.count], $0.element) })
    }

    static func poolChart(_ timeline: [[JournalRecord.Tick]]) -> String {
        var open: [(x: Double, y: Double)] = [], roundTrip: [(x: Double, y: Double)] = []
        var offset = 0
        for run in timeline {
            for tick in run {
                if let n = tick.open { open.append((Double(offset + tick.second), Double(n))) }
                if let ms = tick.roundTripMilliseconds { roundTrip.append((Double(offset + tick.second), ms)) }
            }
            offset += (run.last?.second ?? 0) + 1
        }
        return lineChart([("#2a8a4a", open)], emptyText: "no pool recorded", legend: [("#2a8a4a", "connections in use")])
            + lineChart([("#8a2a6a", roundTrip)], emptyText: "no round trip measured", legend: [("#8a2a6a", "round trip, ms")])
    }

    static func lineChart(_ series: [(color: String, points: [(x: Double, y: Double)])], emptyText: String,
                          legend: [(String, String)] = [], markers: [(x: Double, label: String)] = []) -> String {
        let all = series.flatMap(\.points)
        guard let maxX = all.map(\.x).max(), maxX > 0 else { return "<p class=\"label\">\(escape(emptyText))</p>\n" }
        let maxY = max(1, all.map(\.y).max() ?? 1)
        func sx(_ x: Double) -> Double { margin + x / maxX * (width - 2 * margin) }
        func sy(_ y: Double) -> Double { height - margin + 10 - y / maxY * (height - 1.5 * margin) }
        var svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\" role=\"img\">\n"
        svg += "<line class=\"axis\" x1=\"\(margin)\" y1=\"\(sy(0))\" x2=\"\(width - margin)\" y2=\"\(sy(0))\"/>"
        svg += "<line class=\"axis\" x1=\"\(margin)\" y1=\"\(sy(0))\" x2=\"\(margin)\" y2=\"\(sy(maxY))\"/>\n"
        svg += "<text class=\"label\" x=\"4\" y=\"\(sy(maxY) + 4)\">\(format1((maxY * 10).rounded() / 10))</text><text class=\"label\" x=\"4\" y=\"\(sy(0))\">0</text>"
        svg += "<text class=\"label\" x=\"\(width - margin - 30)\" y=\"\(height - 8)\">\(Int(maxX)) s</text>\n"
        for (color, points) in series where !points.isEmpty {
            if points.count == 1, let only = points.first {
                // A line through one point draws nothing: a dot (a round trip measured in one second only).
                svg += "<circle cx=\"\(format(sx(only.x)))\" cy=\"\(format(sy(only.y)))\" r=\"3\" fill=\"\(color)\"/>\n"
                continue
            }
            let path = points.map { "\(format(sx($0.x))),\(format(sy($0.y)))" }.joined(separator: " ")
            svg += "<polyline fill=\"none\" stroke=\"\(color)\" stroke-width=\"2\" points=\"\(path)\"/>\n"
        }
        for (i, marker) in markers.enumerated() {
            let x = format(sx(marker.x))
            svg += "<line x1=\"\(x)\" y1=\"\(sy(0))\" x2=\"\(x)\" y2=\"\(sy(maxY))\" stroke=\"#999\" stroke-dasharray=\"4 3\"/>"
            svg += "<text class=\"label\" x=\"\(format(sx(marker.x) + 3))\" y=\"\(format(sy(maxY) + 12 + Double(i % 3) * 12))\">\(escape(marker.label))</text>\n"
        }
        // Each entry as wide as its words (about 6.5 px a character at 11 px), so long reasons do not overlap.
        var legendX = margin + 10
        for (color, name) in legend {
            svg += "<rect x=\"\(format(legendX))\" y=\"8\" width=\"10\" height=\"10\" fill=\"\(color)\"/><text class=\"label\" x=\"\(format(legendX + 16))\" y=\"17\">\(escape(name))</text>\n"
            legendX += 16 + max(60, Double(name.count) * 6.5 + 14)
        }
        return svg + "</svg>\n"
    }

    /// `failed`: by status and reason ("410 Unregistered", "8 invalid token").
    static func outcomeBars(accepted: Int, presumed: Int, skipped: Int = 0, failed: [String: Int]) -> String {
        var bars: [(String, Int, String)] = [("accepted", accepted, "#2a9a4a")]
        if presumed > 0 { bars.append(("presumed delivered", presumed, "#8aa")) }
        if skipped > 0 { bars.append(("skipped as too late", skipped, "#b08a30")) }
        for (label, count) in failed.sorted(by: { $0.key < $1.key }) {
            bars.append((label, count, "#c03030"))
        }
        let maxCount = max(1, bars.map(\.1).max() ?? 1)
        let rowHeight = 24.0
        var svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(Double(bars.count) * rowHeight + 10))\" role=\"img\">\n"
        for (i, (name, count, color)) in bars.enumerated() {
            let y = Double(i) * rowHeight + 6
            let w = max(1, Double(count) / Double(maxCount) * (width - 320))
            svg += "<text class=\"label\" x=\"8\" y=\"\(y + 13)\">\(escape(name))</text>"
            svg += "<rect x=\"220\" y=\"\(y)\" width=\"\(format(w))\" height=\"16\" fill=\"\(color)\"/>"
            svg += "<text class=\"label\" x=\"\(format(226 + w))\" y=\"\(y + 13)\">\(count)</text>\n"
        }
        return svg + "</svg>\n"
    }

    /// A plan with variants: each one's planned, accepted and failed (empty without).
    static func variantsTable(_ variants: [VariantCounts]) -> String {
        guard !variants.isEmpty else { return "" }
        var out = "<h2>Variants</h2>\n<table><tr><th>variant</th><th>planned</th><th>accepted</th><th>failed</th></tr>\n"
        for v in variants { out += "<tr><td>\(escape(v.name))</td><td>\(v.planned)</td><td>\(v.accepted)</td><td>\(v.failed)</td></tr>\n" }
        return out + "</table>\n"
    }

    static func format(_ x: Double) -> String { String(Double(Int(x * 10)) / 10) }

    static func escape(_ text: String) -> String {
        var out = ""
        for c in text {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default: out.append(c)
            }
        }
        return out
    }
}
