import Foundation
import CampaignJSON
import CampaignSend
import CampaignResults
import LocalTime
import PlanStream
import SendJournal

/// The parts of a plan and their journals, for `status` over several.
struct PartsView {
    struct Row {
        /// The part's index (nil: a journal of a plan that is not parted).
        var part: Int?
        var plan: String?
        var planRecords: Int?
        var journal: JournalView?
        /// A part cancelled before its send started (its directory holds only the cancel record).
        var cancelledBeforeStart: String?

        var phase: JournalView.Phase { journal?.phase ?? (cancelledBeforeStart != nil ? .cancelled : .notStarted) }
    }

    var manifest: PlanManifest?
    var manifestDirectory: String?
    var rows: [Row] = []
    var warnings: [String] = []
    /// Where the parts' journals are (`bcj` of `--journals 'bcj/*'`), for the
    /// command that starts a part not yet started; nil when unknown.
    var journalsDirectory: String?

    /// `cancelledBeforeStart`: directories `JOURNALS/NNN` holding only a cancel record (part NNN).
    /// `journalsPattern`: the `--journals` glob, whose directory is where a part not yet started gets its journal.
    init(manifestPath: String?, journals: [String], cancelledBeforeStart: [String] = [], journalsPattern: String? = nil) throws {
        let parents = Set((journals + cancelledBeforeStart).map { ($0 as NSString).deletingLastPathComponent })
        if parents.count == 1, let parent = parents.first, !parent.isEmpty {
            journalsDirectory = parent
        } else if let pattern = journalsPattern, case let parent = (pattern as NSString).deletingLastPathComponent,
                  !parent.isEmpty, !parent.contains(where: { "*?[".contains($0) }) {
            journalsDirectory = parent
        }
        if let manifestPath {
            let m = try PlanManifest.load(path: manifestPath)
            manifest = m
            let dir = (manifestPath as NSString).deletingLastPathComponent
            manifestDirectory = dir.isEmpty ? "." : dir
            rows = m.parts.map { Row(part: $0.part, plan: "\(manifestDirectory!)/\($0.file)", planRecords: $0.records) }
        }
        var seen = Set<Int>()
        for directory in journals {
            var view = try JournalView(directory: directory)
            let part = view.part
            if let m = manifest {
                guard let part, part.campaignHash == m.campaignHash, part.index < rows.count else {
                    warnings.append("\(directory) is not a journal of this manifest's parts (planning run \(m.campaignHash)); left out")
                    continue
                }
                if seen.contains(part.index) {
                    warnings.append("part \(part.index) has more than one journal; \(directory) is left out of the totals")
                    continue
                }
                seen.insert(part.index)
                if let path = view.state.settings.planPath, access(path, R_OK) != 0, let plan = rows[part.index].plan {
                    view.movedPlan = plan
                }
                rows[part.index].journal = view
            } else {
                rows.append(Row(part: part?.index, plan: view.state.settings.planPath, planRecords: view.state.planRecords, journal: view))
            }
        }
        for directory in cancelledBeforeStart {
            guard manifest != nil, let n = Int(directory.split(separator: "/").last ?? ""), rows.indices.contains(n), rows[n].journal == nil else { continue }
            rows[n].cancelledBeforeStart = directory
        }
        if manifest == nil {
            rows.sort { ($0.part ?? -1, $0.journal?.directory ?? "") < ($1.part ?? -1, $1.journal?.directory ?? "") }
            let hashes = Set(rows.compactMap { $0.journal?.part?.campaignHash })
            if hashes.count > 1 { warnings.append("these journals send parts of \(hashes.count) different planning runs (\(hashes.sorted().joined(separator: ", ")))") }
        }
    }

    func count(_ phase: JournalView.Phase) -> Int { rows.filter { $0.phase == phase }.count }

    struct Totals {
        var records = 0, recordsKnown = true, done = 0, accepted = 0, presumed = 0, failed = 0
        var resends = 0, duplicates = 0
        var remaining: Int? { recordsKnown ? max(0, records - done) : nil }
    }

    var totals: Totals {
        var t = Totals()
        for row in rows {
            if let r = row.planRecords ?? row.journal?.state.planRecords { t.records += r } else { t.recordsKnown = false }
            guard let s = row.journal?.state else { continue }
            t.done += s.doneCount
            t.accepted += s.accepted
            t.presumed += s.presumed
            t.failed += s.failures.count
            t.resends += s.resends
            t.duplicates += s.duplicatesRisked
        }
        return t
    }

    /// What to run for a part that is not complete: resume it, or start it
    /// (a command to which the other parts' gateway and credentials are added).
    func command(for row: Row) -> String? {
        switch row.phase {
        case .stopped: return row.journal?.resumeCommand
        case .notStarted:
            guard let plan = row.plan, let part = row.part else { return nil }
            return "campaign send \(plan) --journal \(journalsDirectory ?? "JOURNALS")/\(String(format: "%03d", part))"
        case .complete, .running, .waiting, .cancelled: return nil
        }
    }

    /// ``command(for:)`` as the text says it: a part to start needs what the others were given.
    func commandText(for row: Row) -> String? {
        command(for: row).map { row.phase == .notStarted ? "\($0) (with the gateway and credentials of the other parts)" : $0 }
    }

    /// The campaign's rate (a minute) the parts keep to: the lowest any
    /// sending part's latest run was given (`--rate-total`, else the plan's
    /// throttle), as the sends themselves keep to it; the lowest of any part's
    /// when none is sending; nil when there is none.
    var campaignRatePerMinute: Int? {
        let sending = rows.filter { $0.phase == .running || $0.phase == .waiting }.compactMap { $0.journal.flatMap(Self.ratePerMinute) }
        return sending.min() ?? ratesGivenPerMinute.min()
    }

    /// Every campaign rate (a minute) the parts' latest runs were given, lowest first: more than one
    /// when a part was sent or resumed with its own `--rate-total`.
    var ratesGivenPerMinute: [Int] {
        Set(rows.compactMap { $0.journal.flatMap(Self.ratePerMinute) }).sorted()
    }

    /// The rate a part's latest run was given (a resume may be given its own).
    private static func ratePerMinute(_ journal: JournalView) -> Int? {
        (journal.state.latestRunSettings ?? journal.state.settings).rateTotal.map { $0 * 60 }
            ?? (try? PlanHeader(json: journal.state.planHeader))?.throttlePerMinute
    }

    /// The parts' notifications made final in their last journaled second, summed over the parts running.
    var rateNow: Int {
        rows.filter { $0.phase == .running }.reduce(0) { sum, row in
            guard let ticks = row.journal?.state.timeline.last, ticks.count >= 2 else { return sum }
            let (a, b) = (ticks[ticks.count - 2], ticks[ticks.count - 1])
            let seconds = max(1, b.second - a.second)
            return sum + max(0, (b.accepted + b.failed) - (a.accepted + a.failed)) / seconds
        }
    }

    /// When the remaining notifications end at the campaign's rate (UNIX seconds), from `now`.
    func expectedEnd(now: Int64) -> Int64? {
        // Nothing left, or nothing sending: no end to expect.
        guard let perMinute = campaignRatePerMinute, let remaining = totals.remaining, remaining > 0,
              rows.contains(where: { $0.phase == .running || $0.phase == .waiting }) else { return nil }
        return now + Int64((Double(remaining) * 60 / Double(perMinute)).rounded(.up))
    }

    /// A plan with variants: each one's counts, every part's journal together (in the order first met).
    var variants: [VariantCounts] {
        var sum: [VariantCounts] = []
        for row in rows {
            for v in variantCounts(of: row) {
                if let i = sum.firstIndex(where: { $0.name == v.name }) {
                    sum[i].planned += v.planned
                    sum[i].accepted += v.accepted
                    sum[i].failed += v.failed
                    sum[i].skipped += v.skipped
                } else {
                    sum.append(v)
                }
            }
        }
        return sum
    }

    /// A part's counts by variant: its journal's, or for a part not started
    /// its plan's records, planned and nothing more (none for a plan without variants).
    func variantCounts(of row: Row) -> [VariantCounts] {
        row.journal?.variants ?? row.plan.flatMap { path in
            (try? PlanReader(path: path)).flatMap { plan in
                plan.header.variants.isEmpty ? [] : try? ExperimentLoader.variantBooks(journal: nil, plan: plan)
            }?.filter { !$0.holdout }.map { VariantCounts(name: $0.name, planned: $0.planned) }
        } ?? []
    }

    var text: String {
        var out = ""
        let t = totals
        if let m = manifest {
            out += "campaign \(m.campaign) (planning run \(m.campaignHash)): \(m.parts.count) parts, \(m.records) records planned of \(m.rowsRead) rows\n"
        }
        let header = ["part", "state", "records", "done", "accepted", "failed", "remaining", "journal"]
        var table = [header]
        for row in rows {
            let s = row.journal?.state
            let records = row.planRecords ?? s?.planRecords
            table.append([
                row.part.map { String(format: "%03d", $0) } ?? "-",
                row.journal.map { $0.phase == .running ? ($0.running.map { $0 > 0 ? "running (pid \($0))" : "running" } ?? "running") : $0.phase.rawValue } ?? row.phase.rawValue,
                records.map(String.init) ?? "?",
                String(s?.doneCount ?? 0), String(s?.accepted ?? 0), String(s?.failures.count ?? 0),
                records.map { String(max(0, $0 - (s?.doneCount ?? 0))) } ?? "?",
                row.journal?.directory ?? row.cancelledBeforeStart ?? "-",
            ])
        }
        let widths = header.indices.map { c in table.map { $0[c].count }.max() ?? 0 }
        for line in table {
            out += "  " + line.enumerated().map { c, v in c == line.count - 1 ? v : v.padding(toLength: widths[c], withPad: " ", startingAt: 0) }.joined(separator: "  ") + "\n"
        }
        // Journals that are no plan's parts (several sends named together) are journals, not parts.
        let word = manifest != nil || rows.allSatisfy({ $0.part != nil }) ? "parts" : "journals"
        out += "\(word): \(count(.complete)) complete, \(count(.running)) running, \(count(.waiting) > 0 ? "\(count(.waiting)) waiting, " : "")\(count(.stopped)) stopped, \(count(.cancelled) > 0 ? "\(count(.cancelled)) cancelled, " : "")\(count(.notStarted)) not started\n"
        out += "done: \(t.done) of \(t.recordsKnown ? String(t.records) : "?") (\(t.accepted) accepted, \(t.presumed) presumed, \(t.failed) failed); remaining: \(t.remaining.map(String.init) ?? "unknown")\n"
        out += "resent: \(t.resends), possible duplicates: \(t.duplicates)\n"
        if let perMinute = campaignRatePerMinute {
            let end = expectedEnd(now: Int64(Date().timeIntervalSince1970))
            let given = ratesGivenPerMinute
            out += "campaign rate: \(perMinute) a minute over every part (\(perMinute / 60)/s"
                + (given.count > 1 ? "; the parts were given \(given.map(String.init).joined(separator: ", ")) a minute, and those sending keep to the lowest of theirs" : "")
                + "); now \(rateNow)/s"
                + (end.map { "; the \(t.remaining!) remaining end about \(utcText($0))" } ?? ((t.remaining ?? 0) > 0 ? "; no part is sending" : "")) + "\n"
        }
        if !variants.isEmpty { out += "variants: " + VariantCounts.text(variants) + "\n" }
        let commands = rows.compactMap { row in commandText(for: row).map { (row, $0) } }
        if !commands.isEmpty {
            out += "to finish:\n"
            for (row, command) in commands {
                out += "  \(row.part.map { "part \(String(format: "%03d", $0))" } ?? row.journal?.directory ?? "?") (\(row.phase.rawValue)): \(command)\n"
            }
        }
        return out
    }

    var json: JSONValue {
        func n(_ v: Int) -> JSONValue { .number(String(v)) }
        let t = totals
        var members: [(key: String, value: JSONValue)] = []
        if let m = manifest {
            members += [("campaign", .string(m.campaign)), ("campaign_hash", .string(m.campaignHash))]
        }
        members += [
            ("parts", n(rows.count)), ("complete", n(count(.complete))), ("running", n(count(.running))), ("waiting", n(count(.waiting))),
            ("stopped", n(count(.stopped))), ("cancelled", n(count(.cancelled))), ("not_started", n(count(.notStarted))),
            ("campaign_rate_per_minute", campaignRatePerMinute.map(n) ?? .null),
            ("campaign_rates_given_per_minute", .array(ratesGivenPerMinute.map(n))), ("rate_now_per_second", n(rateNow)),
            ("expected_end", expectedEnd(now: Int64(Date().timeIntervalSince1970)).map { .string(utcText($0)) } ?? .null),
            ("records", t.recordsKnown ? n(t.records) : .null), ("done", n(t.done)), ("accepted", n(t.accepted)),
            ("presumed", n(t.presumed)), ("failed", n(t.failed)), ("remaining", t.remaining.map(n) ?? .null),
            ("resends", n(t.resends)), ("duplicates_risked", n(t.duplicates)),
        ]
        if !variants.isEmpty { members.append(("variants", VariantCounts.json(variants))) }
        members += [
            ("part_status", .array(Self.sameKeys(rows.map { row in
                var m: [(key: String, value: JSONValue)] = [
                    ("part", row.part.map(n) ?? .null), ("state", .string(row.phase.rawValue)),
                    ("plan", row.plan.map { .string($0) } ?? .null),
                    ("plan_records", (row.planRecords ?? row.journal?.state.planRecords).map(n) ?? .null),
                    ("journal", (row.journal?.directory ?? row.cancelledBeforeStart).map { .string($0) } ?? .null),
                    ("command", command(for: row).map { .string($0) } ?? .null),
                ]
                // The journal's own fields after these (its "plan" is where it remembers the plan).
                if let j = row.journal, case .object(let detail) = j.json {
                    m += detail.filter { d in !m.contains { $0.key == d.key } }
                } else {
                    // The keys a journal's part has, so that a script reads every part alike.
                    if let directory = row.cancelledBeforeStart, let c = JournalCancel.read(directory: directory) {
                        m += [("outcome", .string("cancelled")), ("phase", .string(row.phase.rawValue)), ("cancelled_by", .string(c.by)),
                              ("cancelled_at", .string(utcText(Int64(c.at)))), ("cancel_reason", c.reason.map { .string($0) } ?? .null)]
                    } else {
                        m += [("outcome", .null), ("phase", .string(row.phase.rawValue))]
                    }
                    m += [("pid", .null), ("runs", n(0))]
                    // Nothing sent yet: its plan's records remain (as the totals count them), its variants planned.
                    let records = row.planRecords
                    m += [("done", n(0)), ("accepted", n(0)), ("presumed", n(0)), ("failed", n(0)),
                          ("remaining", records.map(n) ?? .null), ("resends", n(0)), ("duplicates_risked", n(0))]
                    let variants = variantCounts(of: row)
                    if !variants.isEmpty { m.append(("variants", VariantCounts.json(variants))) }
                }
                return m
            }).map { .object($0) })),
        ]
        return .object(members)
    }

    /// Every part with every key any part has (null where it has no value:
    /// a part not started has no resume, no reconnects), in the order first
    /// met, so that a script reads each part alike.
    static func sameKeys(_ parts: [[(key: String, value: JSONValue)]]) -> [[(key: String, value: JSONValue)]] {
        var keys: [String] = []
        var known = Set<String>()
        for part in parts { for (key, _) in part where known.insert(key).inserted { keys.append(key) } }
        return parts.map { part in
            let values = Dictionary(part.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
            return keys.map { ($0, values[$0] ?? .null) }
        }
    }
}
