import Foundation

/// `campaign results --html FILE`: one self-contained page (inline CSS and
/// SVG; no script, nothing fetched): each group's rate as a bar with its
/// interval drawn, each variant's difference from the control around a zero
/// line, the verdicts, the checks and the table, readable without the text.
public enum ResultsPage {
    public static func html(_ report: ResultsReport) -> String {
        var out = """
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8"><title>\(escape(report.campaign)): results</title>
        <style>
        body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222;padding:0 1em}
        h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
        table{border-collapse:collapse}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:right}
        td:first-child,th:first-child{text-align:left}.warn{background:#fde8e8;border:1px solid #c33;padding:.5em 1em}
        svg text{font:12px system-ui,sans-serif}
        </style></head><body>
        <h1>\(escape(report.campaign)): conversions within \(ResultsReport.durationText(report.windowSeconds)) of each device's moment</h1>
        <p>\(escape(report.event.map { "Event “\($0)”" } ?? "Any event")); intervals at \(report.level); compared with \(escape(report.control ?? "nothing (one group)")).</p>

        """
        if report.sampleRatioMismatch {
            out += "<p class=\"warn\">The split is not what the job asked (sample ratio \(ResultsReport.pSaid(report.sampleRatio?.pValue))): do not trust these results.</p>\n"
        }
        out += "<h2>Conversion rate by group</h2>\n" + rateChart(report)
        if report.groups.contains(where: { $0.difference != nil }) {
            out += "<h2>Difference from \(escape(report.control ?? "")) (percentage points)</h2>\n" + differenceChart(report)
        }
        out += "<h2>Verdicts</h2>\n<ul>\n" + report.verdicts.map { "<li>\(escape($0))</li>\n" }.joined() + "</ul>\n"
        out += "<h2>Table</h2>\n<table><tr><th>group</th><th>population</th><th>converted</th><th>rate</th><th>\(report.level) interval</th><th>difference</th><th>lift</th><th>p-value</th></tr>\n"
        for r in report.groups {
            let interval = r.rateInterval.map { "\(ResultsReport.percent($0.low)) – \(ResultsReport.percent($0.high))" } ?? "-"
            let diff = r.differenceInterval.map { "\(ResultsReport.points(r.difference)) (\(ResultsReport.points($0.low)) to \(ResultsReport.points($0.high)))" } ?? "-"
            out += "<tr><td>\(escape(r.group.name))\(r.group.holdout ? " (holdout)" : "")</td><td>\(r.group.population)</td><td>\(r.group.converted)</td>"
                + "<td>\(ResultsReport.percent(r.rate))</td><td>\(interval)</td><td>\(diff)</td><td>\(r.lift.map { String(format: "%+.1f%%", $0 * 100) } ?? "-")</td>"
                + "<td>\(ResultsReport.pText(r.pValue))</td></tr>\n"
        }
        out += "</table>\n<h2>Checks</h2>\n<ul>\n"
        if let x = report.independence {
            out += "<li>Across all groups (Pearson's chi-squared, \(x.degreesOfFreedom) df): \(String(format: "%.3f", x.statistic)), \(ResultsReport.pSaid(x.pValue))</li>\n"
        }
        if let s = report.sampleRatio {
            out += "<li>Sample ratio against the job's weights (chi-squared, \(s.degreesOfFreedom) df): \(String(format: "%.3f", s.statistic)), \(ResultsReport.pSaid(s.pValue))</li>\n"
        }
        let e = report.events
        out += "<li>Events: \(e.read) read, \(e.counted) counted, \(e.unknownDevice) of devices not in the campaign, \(e.notReached) of devices not reached, "
            + "\(e.beforeMoment) before the moment, \(e.outsideWindow) after the window, \(e.otherEvent) of other events, \(e.rejected) unreadable</li>\n</ul>\n"
        return out + "</body></html>\n"
    }

    /// Horizontal bars from 0, one per group, with the interval as a whisker.
    static func rateChart(_ report: ResultsReport) -> String {
        let rows = report.groups
        let top = max(0.0001, rows.compactMap { $0.rateInterval?.high ?? $0.rate }.max() ?? 0.0001) * 1.1
        let (left, width, rowHeight) = (150.0, 520.0, 30.0)
        let height = Double(rows.count) * rowHeight + 30
        func x(_ v: Double) -> Double { left + v / top * width }
        var svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(left + width + 80))\" height=\"\(Int(height))\" role=\"img\" aria-label=\"conversion rate by group\">\n"
        for (i, r) in rows.enumerated() {
            let y = Double(i) * rowHeight + 8
            svg += "<text x=\"\(Int(left - 8))\" y=\"\(Int(y + 15))\" text-anchor=\"end\">\(escape(r.group.name))</text>\n"
            if let rate = r.rate {
                let fill = r.group.holdout ? "#9aa5b1" : "#3b7dd8"
                svg += "<rect x=\"\(f(left))\" y=\"\(f(y + 3))\" width=\"\(f(x(rate) - left))\" height=\"16\" fill=\"\(fill)\"/>\n"
                if let ci = r.rateInterval {
                    svg += "<line x1=\"\(f(x(ci.low)))\" x2=\"\(f(x(ci.high)))\" y1=\"\(f(y + 11))\" y2=\"\(f(y + 11))\" stroke=\"#111\" stroke-width=\"1.5\"/>"
                        + "<line x1=\"\(f(x(ci.low)))\" x2=\"\(f(x(ci.low)))\" y1=\"\(f(y + 5))\" y2=\"\(f(y + 17))\" stroke=\"#111\"/>"
                        + "<line x1=\"\(f(x(ci.high)))\" x2=\"\(f(x(ci.high)))\" y1=\"\(f(y + 5))\" y2=\"\(f(y + 17))\" stroke=\"#111\"/>\n"
                }
                svg += "<text x=\"\(f(x(r.rateInterval?.high ?? rate) + 6))\" y=\"\(Int(y + 15))\">\(ResultsReport.percent(rate))</text>\n"
            } else {
                svg += "<text x=\"\(f(left + 4))\" y=\"\(Int(y + 15))\">no devices measured</text>\n"
            }
        }
        svg += "<line x1=\"\(f(left))\" x2=\"\(f(left))\" y1=\"0\" y2=\"\(f(height - 22))\" stroke=\"#555\"/>"
        svg += "<text x=\"\(f(left))\" y=\"\(f(height - 6))\" text-anchor=\"middle\">0%</text><text x=\"\(f(left + width))\" y=\"\(f(height - 6))\" text-anchor=\"middle\">\(ResultsReport.percent(top, digits: 1))</text>\n"
        return svg + "</svg>\n"
    }

    /// Each variant's difference from the control with its interval, around a zero line.
    static func differenceChart(_ report: ResultsReport) -> String {
        let rows = report.groups.filter { $0.difference != nil }
        let extent = max(0.0001, rows.flatMap { [abs($0.differenceInterval?.low ?? 0), abs($0.differenceInterval?.high ?? 0), abs($0.difference ?? 0)] }.max() ?? 0) * 1.15
        let (left, width, rowHeight) = (150.0, 520.0, 30.0)
        let height = Double(rows.count) * rowHeight + 30
        func x(_ v: Double) -> Double { left + (v + extent) / (2 * extent) * width }
        var svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(left + width + 80))\" height=\"\(Int(height))\" role=\"img\" aria-label=\"difference from the control\">\n"
        svg += "<line x1=\"\(f(x(0)))\" x2=\"\(f(x(0)))\" y1=\"0\" y2=\"\(f(height - 22))\" stroke=\"#555\" stroke-dasharray=\"4 3\"/>\n"
        for (i, r) in rows.enumerated() {
            let y = Double(i) * rowHeight + 8
            svg += "<text x=\"\(Int(left - 8))\" y=\"\(Int(y + 15))\" text-anchor=\"end\">\(escape(r.group.name))</text>\n"
            let d = r.difference!
            let significant = (r.pValue ?? 1) < 1 - report.confidence
            let color = !significant ? "#777" : d > 0 ? "#1a7f37" : "#c33"
            if let ci = r.differenceInterval {
                svg += "<line x1=\"\(f(x(ci.low)))\" x2=\"\(f(x(ci.high)))\" y1=\"\(f(y + 11))\" y2=\"\(f(y + 11))\" stroke=\"\(color)\" stroke-width=\"3\"/>\n"
            }
            svg += "<circle cx=\"\(f(x(d)))\" cy=\"\(f(y + 11))\" r=\"5\" fill=\"\(color)\"/>"
            svg += "<text x=\"\(f(x(r.differenceInterval?.high ?? d) + 8))\" y=\"\(Int(y + 15))\">\(ResultsReport.points(d)) pts, \(ResultsReport.pSaid(r.pValue))</text>\n"
        }
        svg += "<text x=\"\(f(left))\" y=\"\(f(height - 6))\" text-anchor=\"middle\">\(ResultsReport.points(-extent))</text>"
            + "<text x=\"\(f(x(0)))\" y=\"\(f(height - 6))\" text-anchor=\"middle\">0</text>"
            + "<text x=\"\(f(left + width))\" y=\"\(f(height - 6))\" text-anchor=\"middle\">\(ResultsReport.points(extent))</text>\n"
        return svg + "</svg>\n"
    }

    private static func f(_ v: Double) -> String { String(format: "%.1f", v) }

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
