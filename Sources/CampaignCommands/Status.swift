import ArgumentParser
import Foundation
import APNSWire
import CampaignJSON
import CampaignSend
import PlanStream
import LocalTime

/// `campaign status DIR…`: how far a send got, from its journal alone; over
/// several journals (the parts of one plan), one view of the whole.
struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Tell from journals how far a send (or every part of a parted plan) got, what remains, and what failed.",
        discussion: """
        One journal: its send in detail. Several, or --manifest: one table over \
        the parts of a plan made with `plan --parts`, each part complete, running, \
        stopped or not started, with the totals and the command that resumes \
        each stopped part.
        """
    )

    @Argument(help: "Journal directories: one send, or one per part.")
    var directories: [String] = []

    @Option(help: ArgumentHelp("The manifest.json of `plan --parts`: every part is listed, started or not.", valueName: "file"))
    var manifest: String?

    @Option(help: ArgumentHelp("Journal directories as a pattern, e.g. 'journals/*' (quoted: campaign expands it).", valueName: "glob"))
    var journals: String?

    @Flag(help: "Print JSON instead of text.")
    var json = false

    @Flag(help: "Print every notification that failed for good, as NDJSON: {\"seq\",\"token\",\"status\",\"reason\",\"attempts\"} (with \"part\" and \"journal\" over parts); a scheduled send's notifications skipped as too late follow, as {\"seq\",\"token\",\"outcome\":\"skipped\",\"moment\",\"reason\"}.")
    var failures = false

    @Option(help: ArgumentHelp("Write a self-contained HTML page of the send (rate over time, outcomes, connections and resends) here.", valueName: "file"))
    var html: String?

    func validate() throws {
        if directories.isEmpty && manifest == nil && journals == nil {
            throw ValidationError("Name a journal directory (or several), or --manifest FILE / --journals GLOB.")
        }
    }

    func run() throws {
        try reportingErrors(as: "status") {
            let named = directories + (try journals.map(Self.expand) ?? [])
            if manifest == nil && named.count == 1 {
                try single(JournalView(directory: named[0]))
            } else {
                try parts(PartsView(manifestPath: manifest, journals: named))
            }
        }
    }

    /// The directories a pattern names that hold a journal, sorted.
    static func expand(_ pattern: String) throws -> [String] {
        var g = glob_t()
        defer { globfree(&g) }
        let rc = glob(pattern, 0, nil, &g)
        guard rc == 0 || rc == GLOB_NOMATCH else { throw ValidationError("--journals \(pattern) cannot be expanded.") }
        var out: [String] = []
        for i in 0..<Int(g.gl_pathc) {
            guard let p = g.gl_pathv[i] else { continue }
            let path = String(cString: p)
            if access("\(path)/\(Journal.logName)", F_OK) == 0 { out.append(path) }
        }
        return out.sorted()
    }

    static func failureLine(_ f: SendFailure, part: Int? = nil, journal: String? = nil) -> String {
        line(token: f.token, part: part, journal: journal, [
            ("seq", .number(String(f.seq))), ("status", .number(String(f.status))), ("reason", .string(f.reason)),
            ("attempts", .number(String(f.attempts))),
        ])
    }

    static func skippedLine(_ k: SkippedNotification, part: Int? = nil, journal: String? = nil) -> String {
        line(token: k.token, part: part, journal: journal, [
            ("seq", .number(String(k.seq))), ("outcome", .string("skipped")), ("moment", .string(utcText(k.moment))), ("reason", .string(k.reason)),
        ])
    }

    /// One `--failures` line: part and journal (over parts), seq, token, then `members`.
    private static func line(token bytes: [UInt8], part: Int?, journal: String?, _ members: [(key: String, value: JSONValue)]) -> String {
        var token: [UInt8] = []
        HexEncoding.append(bytes, to: &token)
        var all: [(key: String, value: JSONValue)] = []
        if let part { all.append(("part", .number(String(part)))) }
        if let journal { all.append(("journal", .string(journal))) }
        all.append(members[0])
        all.append(("token", .string(String(decoding: token, as: UTF8.self))))
        all += members.dropFirst()
        return String(decoding: JSONValue.object(all).serialized(), as: UTF8.self)
    }

    private func single(_ view: JournalView) throws {
        let state = view.state, directory = view.directory
        if failures {
            for f in state.failures { print(Self.failureLine(f)) }
            for k in state.skipped { print(Self.skippedLine(k)) }
            return
        }
        if let html {
            try writeOutput(Array(StatusPage.html(journal: directory, state: state, outcome: view.outcomeText, running: view.running != nil).utf8), to: html)
            return
        }
        let byStatus = view.failedByStatus
        if json {
            print(String(decoding: view.json.serialized(), as: UTF8.self))
            return
        }
        print("journal: \(directory)")
        print("  outcome: \(view.outcomeText) (\(state.runs) run\(state.runs == 1 ? "" : "s"))")
        print("  plan: \(state.settings.planPath ?? "spooled in the journal"), \(state.planRecords.map { "\($0) records" } ?? "not read to its end yet")\(state.planIncomplete ? " (incomplete: no trailer)" : "")")
        print("  done: \(state.doneCount) (\(state.accepted) accepted, \(state.presumed) presumed, \(state.failures.count) failed\(state.skipped.isEmpty ? "" : ", \(state.skipped.count) skipped as too late"))")
        if !byStatus.isEmpty {
            print("  failed: " + view.failedByReason.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", "))
        }
        print("  remaining: \(view.remaining.map(String.init) ?? "unknown until the plan has been read to its end")")
        if let schedule = view.schedule {
            print("  scheduled: \(schedule.what); \(state.doneCount) final (\(state.skipped.count) skipped as too late), \(schedule.dueNow) due now, \(schedule.waiting) waiting")
            for (hour, n) in schedule.perHour.sorted(by: { $0.key < $1.key }) { print("    \(utcText(hour).prefix(16))Z \(n)") }
            if let next = schedule.nextMoment { print("  next moment: \(utcText(next))") }
        }
        // A plan header this version cannot read (none it wrote) is told in the binary interface's words, as it always was.
        let meaning = ((try? PlanHeader(json: state.planHeader))?.wire ?? .binary(.enhanced)).resentMeaning
        print("  resent: \(state.resends) (\(meaning.resent)), possible duplicates: \(state.duplicatesRisked) (\(meaning.duplicates))")
        if !state.resentByKind.isEmpty {
            print("  resent by why: " + state.resentByKind.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", "))
        }
        if let pool = view.pool {
            print("  connections: \(pool.open) in the pool at the last second (at most \(pool.peak))\(pool.roundTrip.map { ", round trip \(Self.milliseconds($0)) ms" } ?? "")")
        }
        if state.tornTail { print("  the last journal record was torn by a crash and is ignored") }
    }

    static func milliseconds(_ ms: Double) -> String { ms >= 10 ? String(Int(ms.rounded())) : String((ms * 10).rounded() / 10) }

    private func parts(_ view: PartsView) throws {
        if failures {
            for row in view.rows {
                guard let j = row.journal else { continue }
                for f in j.state.failures { print(Self.failureLine(f, part: row.part, journal: j.directory)) }
                for k in j.state.skipped { print(Self.skippedLine(k, part: row.part, journal: j.directory)) }
            }
            return
        }
        for warning in view.warnings { printError("campaign status: \(warning)") }
        if let html {
            try writeOutput(Array(StatusPage.html(parts: view).utf8), to: html)
            return
        }
        if json {
            print(String(decoding: view.json.serialized(), as: UTF8.self))
            return
        }
        print(view.text, terminator: "")
    }
}

/// One journal as `status` tells it.
struct JournalView {
    /// `waiting`: a scheduled send alive between runs (it holds the journal's lock).
    enum Phase: String { case complete, running, waiting, stopped, notStarted = "not started" }

    let directory: String
    let state: JournalState
    /// The pid of the send running on it, or waiting for its next run (0: alive, pid unknown).
    let running: Int32?
    /// Where the plan is, when the journal's remembered path is gone but a
    /// manifest's directory has the part (the plan moved to another machine).
    var movedPlan: String? = nil

    init(directory: String) throws {
        self.directory = directory
        var state = try Journal.read(directory: directory)
        let plan = state.settings.planPath ?? "\(directory)/\(Journal.spoolName)"
        if state.planRecords == nil, !plan.hasSuffix(".gz"), let records = try? PlanReader.checkComplete(path: plan), records >= 0 {
            // A plan's trailer (a file's, or a spool read to its end) holds its count before the send reads it through.
            state.planRecords = records
        }
        self.state = state
        // A scheduled send waiting for its next run holds the lock with an outcome journaled.
        running = state.outcome == .complete ? nil : Journal.runningSend(directory: directory)
    }

    var part: PlanPart? { (try? PlanHeader(json: state.planHeader))?.part }

    var phase: Phase {
        if state.outcome == .complete { return .complete }
        guard running != nil else { return .stopped }
        return state.outcome == nil ? .running : .waiting
    }

    var remaining: Int? { state.planRecords.map { max(0, $0 - state.doneCount) } }

    var failedByStatus: [Int: Int] {
        var out: [Int: Int] = [:]
        for f in state.failures { out[f.status, default: 0] += 1 }
        return out
    }

    /// By status and reason: "410 Unregistered", "8 invalid token".
    var failedByReason: [String: Int] {
        var out: [String: Int] = [:]
        for f in state.failures { out[f.cause.label, default: 0] += 1 }
        return out
    }

    /// The command that goes on with this send (nil when it is complete or running).
    /// The plan came from standard input and its spool was cut short with the planner.
    var planCut: Bool {
        state.settings.planPath == nil && state.planRecords == nil && state.outcome == .incompletePlan
    }

    var resumeCommand: String? {
        guard phase == .stopped else { return nil }
        if planCut {
            // The spool was cut with the planner: only the plan again can go on.
            return "campaign plan JOB AUDIENCE | campaign send --resume \(directory) --replan"
        }
        if let movedPlan { return "campaign send \(movedPlan) --resume \(directory)" }
        return "campaign send --resume \(directory)"
    }

    var outcomeText: String {
        let pid = running.map { $0 > 0 ? " (pid \($0))" : "" } ?? ""
        switch (phase, state.outcome) {
        case (.waiting, _):
            return "scheduled: waiting\(pid) for its next run" + (state.waitingUntil.map { " at \(utcText(Int64($0)))" } ?? "")
        case (.running, _):
            return "running\(pid)" + (state.waitingUntil.map { ", waiting with its connections open until \(utcText(Int64($0)))" } ?? "")
        case (.stopped, .scheduled?):
            if let until = state.waitingUntil {
                return "scheduled, but the send that was waiting to go on at \(utcText(Int64(until))) is gone (stopped or killed): nothing will be sent until it is resumed: \(resumeCommand ?? "")"
            }
            return "scheduled: no send is running; from cron: \(resumeCommand ?? "") --due-only (or without --due-only to wait for each moment)"
        case (.stopped, .incompletePlan?) where planCut:
            return "incomplete-plan: the plan from standard input was cut (its spool has no trailer), and nothing past the cut can be sent; plan again into it: \(resumeCommand ?? "")"
        case (_, let outcome?):
            return outcome.rawValue
        default:
            break
        }
        if state.settings.planPath == nil && state.planRecords == nil {
            return "stopped while its plan was still coming from standard input; if the planner was stopped too, plan again into it: campaign plan JOB AUDIENCE | campaign send --resume \(directory) --replan (else: campaign send --resume \(directory))"
        }
        return "stopped without finishing (crash or kill); resume with: \(resumeCommand ?? "campaign send --resume \(directory)")"
    }

    var json: JSONValue {
        func n(_ v: Int) -> JSONValue { .number(String(v)) }
        return .object([
            // A run with no end record and no process: killed (or crashed).
            ("outcome", .string(state.outcome?.rawValue ?? (running != nil ? "running" : "killed"))), ("phase", .string(phase.rawValue)),
            ("pid", running.map { .number(String($0)) } ?? .null), ("resume", resumeCommand.map { .string($0) } ?? .null),
            ("waiting_until", state.waitingUntil.map { .string(utcText(Int64($0))) } ?? .null), ("runs", n(state.runs)),
            ("plan", state.settings.planPath.map { .string($0) } ?? .string("spooled")),
            ("plan_records", state.planRecords.map(n) ?? .null), ("plan_incomplete", .bool(state.planIncomplete || planCut)),
            ("done", n(state.doneCount)), ("accepted", n(state.accepted)), ("presumed", n(state.presumed)),
            ("failed", n(state.failures.count)),
            ("failed_by_status", .object(failedByStatus.sorted { $0.key < $1.key }.map { (String($0.key), n($0.value)) })),
            ("failed_by_reason", .object(failedByReason.sorted { $0.key < $1.key }.map { ($0.key, n($0.value)) })),
            ("remaining", remaining.map(n) ?? .null), ("resends", n(state.resends)),
            ("resent_by_kind", .object(state.resentByKind.sorted { $0.key < $1.key }.map { ($0.key, n($0.value)) })), ("reconnects", n(state.reconnects)),
            ("duplicates_risked", n(state.duplicatesRisked)), ("torn_tail", .bool(state.tornTail)),
        ] + poolMembers + scheduleMembers)
    }

    private var scheduleMembers: [(String, JSONValue)] {
        guard let s = schedule else { return [] }
        func n(_ v: Int) -> JSONValue { .number(String(v)) }
        return [("skipped", n(state.skipped.count)), ("due_now", n(s.dueNow)), ("waiting", n(s.waiting)),
                ("scheduled_per_hour", .object(s.perHour.sorted { $0.key < $1.key }.map { (utcText($0.key), n($0.value)) })),
                ("next_moment", s.nextMoment.map { .string(utcText($0)) } ?? .null)]
    }

    /// A scheduled send: what is not final yet, by when it is due (from a
    /// pass over the plan; nil when the plan is not scheduled or cannot be read).
    struct ScheduleView {
        var what: String
        var dueNow = 0
        var waiting = 0
        var perHour: [Int64: Int] = [:]
        var nextMoment: Int64?
    }

    var schedule: ScheduleView? {
        guard let header = try? PlanHeader(json: state.planHeader), let schedule = header.schedule,
              let plan = try? SendSession.planReader(state: state, directory: directory) else { return nil }
        var view = ScheduleView(what: "")
        switch schedule {
        case .deliverAt(let d):
            view.what = "at \(d.localTime) local" + (d.date.map { " on \($0)" } ?? "") + ", window \(d.windowText), late: \(d.late.rawValue)"
        case .quietHours(let q):
            view.what = "quiet hours \(q.from) to \(q.to) local"
        }
        let now = Int64(wallClockSeconds())
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

    private var poolMembers: [(String, JSONValue)] {
        guard let pool else { return [("pool_connections", .null), ("pool_connections_peak", .null), ("round_trip_ms", .null)] }
        let roundTrip: JSONValue = pool.roundTrip.map { .number(String(($0 * 10).rounded() / 10)) } ?? .null
        return [("pool_connections", .number(String(pool.open))), ("pool_connections_peak", .number(String(pool.peak))), ("round_trip_ms", roundTrip)]
    }

    /// HTTP/2: the connections in the pool at the last journaled second, the
    /// most at any second (of every run), and the last round trip measured.
    var pool: (open: Int, peak: Int, roundTrip: Double?)? {
        let ticks = state.timeline.joined().filter { $0.open != nil }
        guard let last = ticks.last, let open = last.open else { return nil }
        return (open, ticks.compactMap(\.open).max() ?? open, ticks.last { $0.roundTripMilliseconds != nil }?.roundTripMilliseconds)
    }
}

/// The parts of a plan and their journals, for `status` over several.
struct PartsView {
    struct Row {
        /// The part's index (nil: a journal of a plan that is not parted).
        var part: Int?
        var plan: String?
        var planRecords: Int?
        var journal: JournalView?

        var phase: JournalView.Phase { journal?.phase ?? .notStarted }
    }

    var manifest: PlanManifest?
    var manifestDirectory: String?
    var rows: [Row] = []
    var warnings: [String] = []

    init(manifestPath: String?, journals: [String]) throws {
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

    /// What to run for a part that is not complete: resume it, or start it.
    func command(for row: Row) -> String? {
        switch row.phase {
        case .stopped: return row.journal?.resumeCommand
        case .notStarted:
            guard let plan = row.plan, let part = row.part else { return nil }
            return "campaign send \(plan) --journal JOURNALS/\(String(format: "%03d", part)) (with the gateway and credentials of the other parts)"
        case .complete, .running, .waiting: return nil
        }
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
                row.journal.map { $0.phase == .running ? ($0.running.map { $0 > 0 ? "running (pid \($0))" : "running" } ?? "running") : $0.phase.rawValue } ?? "not started",
                records.map(String.init) ?? "?",
                String(s?.doneCount ?? 0), String(s?.accepted ?? 0), String(s?.failures.count ?? 0),
                records.map { String(max(0, $0 - (s?.doneCount ?? 0))) } ?? "?",
                row.journal?.directory ?? "-",
            ])
        }
        let widths = header.indices.map { c in table.map { $0[c].count }.max() ?? 0 }
        for line in table {
            out += "  " + line.enumerated().map { c, v in c == line.count - 1 ? v : v.padding(toLength: widths[c], withPad: " ", startingAt: 0) }.joined(separator: "  ") + "\n"
        }
        out += "parts: \(count(.complete)) complete, \(count(.running)) running, \(count(.waiting) > 0 ? "\(count(.waiting)) waiting, " : "")\(count(.stopped)) stopped, \(count(.notStarted)) not started\n"
        out += "done: \(t.done) of \(t.recordsKnown ? String(t.records) : "?") (\(t.accepted) accepted, \(t.presumed) presumed, \(t.failed) failed); remaining: \(t.remaining.map(String.init) ?? "unknown")\n"
        out += "resent: \(t.resends), possible duplicates: \(t.duplicates)\n"
        let commands = rows.compactMap { row in command(for: row).map { (row, $0) } }
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
            ("stopped", n(count(.stopped))), ("not_started", n(count(.notStarted))),
            ("records", t.recordsKnown ? n(t.records) : .null), ("done", n(t.done)), ("accepted", n(t.accepted)),
            ("presumed", n(t.presumed)), ("failed", n(t.failed)), ("remaining", t.remaining.map(n) ?? .null),
            ("resends", n(t.resends)), ("duplicates_risked", n(t.duplicates)),
            ("part_status", .array(rows.map { row in
                var m: [(key: String, value: JSONValue)] = [
                    ("part", row.part.map(n) ?? .null), ("state", .string(row.phase.rawValue)),
                    ("plan", row.plan.map { .string($0) } ?? .null),
                    ("plan_records", (row.planRecords ?? row.journal?.state.planRecords).map(n) ?? .null),
                    ("journal", row.journal.map { .string($0.directory) } ?? .null),
                    ("command", command(for: row).map { .string($0) } ?? .null),
                ]
                // The journal's own fields after these (its "plan" is where it remembers the plan).
                if let j = row.journal, case .object(let detail) = j.json {
                    m += detail.filter { d in !m.contains { $0.key == d.key } }
                }
                return .object(m)
            })),
        ]
        return .object(members)
    }
}
