/// A send's counts in the Prometheus text exposition format, for
/// node_exporter's textfile collector (or any scraper of such a file):
/// counters for what has become final, gauges for what is in flight.
import SendJournal
import SendEngine

public enum SendMetrics {
    /// The file's text for `counts` and `progress` after `seconds` of
    /// sending; every series is labelled with the journal directory.
    /// `running` false: the run's last write (it ended or stopped): `up` 0,
    /// nothing in flight any more (what is not final waits for `--resume`).
    /// The counters count the whole send (`totals`: every run; a resume adds
    /// to what was there), the gauges this run.
    public static func text(journal: String, counts: SendReport, totals: SendTotals? = nil, progress: SendProgress, seconds: Double,
                            running: Bool = true) -> String {
        let whole = totals ?? counts.totals
        let label = "journal=\"\(escaped(journal))\""
        var out = ""
        func metric(_ name: String, _ type: String, _ help: String, _ samples: [(labels: String, value: String)]) {
            out += "# HELP campaign_send_\(name) \(help)\n# TYPE campaign_send_\(name) \(type)\n"
            for sample in samples { out += "campaign_send_\(name){\(label)\(sample.labels)} \(sample.value)\n" }
        }
        metric("accepted_total", "counter", "Notifications proven accepted by the gateway.", [("", String(whole.accepted))])
        metric("presumed_total", "counter", "Notifications written in the simple format, presumed delivered.", [("", String(whole.presumed))])
        // Every counter from the first write (0 before anything happened), so
        // that an alert on failures can be written before the first one.
        metric("failed_total", "counter", "Notifications refused for good (all reasons).", [("", String(whole.failed))])
        metric("failed_by_reason_total", "counter", "Notifications refused for good, by status and reason.",
               SendReport.split(whole.failedByReason).map { (",status=\"\($0.status)\",reason=\"\(escaped($0.reason))\"", String($0.count)) })
        metric("skipped_total", "counter", "Notifications skipped for good: a scheduled one more than the job's window after its moment (late: skip), or one whose device was at the job's frequencyCap as it was about to be written.",
               [("", String(whole.skipped))])
        metric("resends_total", "counter", "Notifications sent again (discarded after a refusal, or unproven on a lost connection).", [("", String(whole.resends))])
        metric("resent_by_kind_total", "counter", "Notifications sent again, by why (HTTP/2: 429, 500, 503, REFUSED_STREAM, lost connection).",
               whole.resentByKind.sorted { $0.key < $1.key }.map { (",kind=\"\(escaped($0.key))\"", String($0.value)) })
        metric("duplicates_risked_total", "counter", "Notifications that may have been delivered twice.", [("", String(whole.duplicatesRisked))])
        metric("connections_total", "counter", "Connections established to the gateway.", [("", String(whole.reconnects))])
        metric("drops_total", "counter", "Connections lost without a response.", [("", String(counts.drops))])
        metric("up", "gauge", "1 while a send runs on this journal, 0 once it ended or stopped.", [("", running ? "1" : "0")])
        let inFlight = running ? progress.inFlight : 0
        metric("in_flight", "gauge", "Notifications handed to a connection and not yet final (none while a scheduled send waits).", [("", String(inFlight))])
        let rate = seconds > 0 ? Double(progress.settled) / seconds : 0
        metric("rate", "gauge", "Notifications made final per second, averaged over this run so far (a scheduled run's wait for its moment included; the report's notifications_per_second is over every run's sending).", [("", String(Int(rate)))])
        metric("pool_connections", "gauge", "Connections open in the pool, 0 until the first opens (HTTP/2: it grows with the distance to the gateway).",
               [("", String(counts.poolConnections))])
        if let ms = counts.roundTripMilliseconds {
            metric("round_trip_seconds", "gauge", "The shortest round trip to the gateway in the last second measured.", [("", String(ms / 1000))])
        }
        if !counts.variants.isEmpty {
            // Every run's, as the journal's variants record counts them.
            func perVariant(_ value: (VariantCounts) -> Int) -> [(labels: String, value: String)] {
                counts.variants.map { (",variant=\"\(escaped($0.name))\"", String(value($0))) }
            }
            metric("variant_planned", "gauge", "Plan records, by variant (those read so far while a plan on standard input is read).", perVariant(\.planned))
            metric("variant_accepted_total", "counter", "Notifications accepted (or presumed delivered), by variant.", perVariant(\.accepted))
            metric("variant_failed_total", "counter", "Notifications refused for good, by variant.", perVariant(\.failed))
            metric("variant_skipped_total", "counter", "Notifications skipped for good (too late, or at the frequencyCap), by variant.", perVariant(\.skipped))
        }
        if let total = progress.total {
            metric("plan_records", "gauge", "Records in the plan.", [("", String(total))])
        }
        return out
    }

    /// A label value as the format wants it: backslash, quote and newline escaped.
    static func escaped(_ value: String) -> String {
        var out = ""
        for c in value {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
        return out
    }
}
