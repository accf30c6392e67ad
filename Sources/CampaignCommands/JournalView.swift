import Foundation
import CampaignJSON
import CampaignSend
import CampaignResults
import LocalTime
import PlanStream
import SendJournal

/// One journal as `status` tells it.
struct JournalView {
    /// `waiting`: a scheduled send alive between runs (it holds the journal's lock).
    /// `cancelled`: `campaign cancel`'s record and no send holding the journal (one still stopping is running).
    enum Phase: String { case complete, running, waiting, stopped, cancelled, notStarted = "not started" }

    let directory: String
    let state: JournalState
    /// The pid of the send running on it, or waiting for its next run (0: alive, pid unknown).
    let running: Int32?
    /// Where the plan is, when the journal's remembered path is gone but a
    /// manifest's directory has the part (the plan moved to another machine).
    var movedPlan: String? = nil

    /// The schedule, scanned from the plan when first asked (see ``ScheduleView/scan(state:directory:now:)``).
    private let scheduleScan: ComputedOnce<ScheduleView?>
    var schedule: ScheduleView? { scheduleScan.wrappedValue }
    private let variantScan: ComputedOnce<[VariantCounts]>
    /// A plan with variants: each one's counts, summed from the plan's records
    /// and the journal's outcomes (so they add up to the totals, after a kill
    /// -9 too); the journal's last variants record when the plan cannot be read.
    var variants: [VariantCounts] { variantScan.wrappedValue }

    /// `lockHolder`: who holds a journal's lock (``Journal/runningSend(directory:)``; a test's sequence of answers).
    init(directory: String, lockHolder: (String) -> Int32? = Journal.runningSend(directory:)) throws {
        self.directory = directory
        // Who holds the lock is asked before the journal is read, so that a
        // send ending between the two is told by its end record, not as
        // stopped with a command that would resume it.
        let holderBefore = lockHolder(directory)
        var state = try Journal.read(directory: directory)
        let plan = state.settings.planPath ?? "\(directory)/\(Journal.spoolName)"
        if state.planRecords == nil, !plan.hasSuffix(".gz"), let records = try? PlanReader.checkComplete(path: plan), records >= 0 {
            // A plan's trailer (a file's, or a spool read to its end) holds its count before the send reads it through.
            state.planRecords = records
        }
        self.state = state
        switch state.outcome {
        case .complete?: running = nil
        // It held the lock before the journal told it unended: it was running as the journal was read.
        case nil where holderBefore != nil: running = holderBefore
        // A scheduled send waiting for its next run holds the lock with an outcome journaled; one that
        // ended let go of it. A send that started after the first look holds it now.
        default: running = lockHolder(directory)
        }
        scheduleScan = ComputedOnce { [state] in ScheduleView.scan(state: state, directory: directory, now: Int64(wallClockSeconds())) }
        variantScan = ComputedOnce { [state] in Self.variantBooks(state: state, directory: directory) }
    }

    var part: PlanPart? { (try? PlanHeader(json: state.planHeader))?.part }

    var phase: Phase {
        if state.outcome == .complete { return .complete }
        guard running != nil else { return state.cancel != nil ? .cancelled : .stopped }
        return state.outcome == nil ? .running : .waiting
    }

    var remaining: Int? { state.planRecords.map { max(0, $0 - state.doneCount) } }

    var failedByStatus: [Int: Int] { state.failures.countedByStatus }

    /// By status and reason: "410 Unregistered", "8 invalid token".
    var failedByReason: [String: Int] { state.failures.countedByReason }

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
        case (.cancelled, _):
            return state.cancel.map { $0.sentence + ": nothing more is sent" } ?? "cancelled"
        case (.running, _) where state.cancel != nil:
            return "running\(pid), \(state.cancel!.sentence): stopping"
        case (.waiting, _):
            return "scheduled: waiting\(pid) for its next run" + (state.waitingUntil.map { " at \(utcText(Int64($0)))" } ?? "")
        case (.running, _):
            return "running\(pid)" + (state.waitingUntil.map { ", waiting until \(utcText(Int64($0)))" } ?? "")
        case (.stopped, .scheduled?):
            if let until = state.waitingUntil {
                return "scheduled, but the send that was waiting to go on at \(utcText(Int64(until))) is gone (stopped or killed): nothing will be sent until it is resumed: \(resumeCommand ?? "")"
            }
            return "scheduled: no send is running; from cron: \(resumeCommand ?? "") --due-only (or without --due-only to wait for each moment)"
        case (.stopped, .interrupted?) where state.waitingUntil != nil:
            return "interrupted while waiting to go on at \(utcText(Int64(state.waitingUntil!))): nothing will be sent until it is resumed: \(resumeCommand ?? "")"
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
        return "stopped without finishing (killed, crashed, or stopped at once by a second signal); resume with: \(resumeCommand ?? "campaign send --resume \(directory)")"
    }

    /// `status DIR`'s text: the send in detail, one line each.
    var text: String {
        var out = ""
        out += "journal: \(directory)\n"
        out += "  outcome: \(outcomeText) (\(state.runs) run\(state.runs == 1 ? "" : "s"))\n"
        out += "  plan: \(state.settings.planPath ?? "spooled in the journal"), \(state.planRecords.map { "\($0) records" } ?? "not read to its end yet")\(state.planIncomplete ? " (incomplete: no trailer)" : "")\n"
        if state.planHeader["header"]?["broadcast"] == .bool(true) {
            out += "  broadcast: Live Activity updates to channels of \(state.planHeader["header"]?["topic"]?.stringValue ?? "?") (one request per channel)\n"
        }
        out += "  done: \(state.doneCount) (\(state.accepted) accepted, \(state.presumed) presumed, \(state.failures.count) failed\(state.skipped.isEmpty ? "" : ", \(Self.skippedText(state.skipped))"))\n"
        if !state.failures.isEmpty {
            out += "  failed: " + failedByReason.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "\n"
        }
        out += "  remaining: \(remaining.map(String.init) ?? "unknown until the plan has been read to its end")\n"
        if let schedule, phase == .cancelled {
            // Cancelled: what was not final will never go; no moment is next.
            let skipped = Self.skippedText(state.skipped)
            out += "  scheduled: \(schedule.what); \(state.doneCount) final\(skipped.isEmpty ? "" : " (\(skipped))"), \(schedule.dueNow + schedule.waiting) never to be sent (cancelled)\n"
        } else if let schedule {
            let skipped = Self.skippedText(state.skipped)
            out += "  scheduled: \(schedule.what); \(state.doneCount) final\(skipped.isEmpty ? "" : " (\(skipped))"), \(schedule.dueNow) due now, \(schedule.waiting) waiting\(schedule.quietHeld > 0 ? " (\(schedule.quietHeld) of them held back by their quiet hours)" : "")\n"
            for (hour, n) in schedule.perHour.sorted(by: { $0.key < $1.key }) { out += "    \(utcText(hour).prefix(16))Z \(n)\n" }
            if let next = schedule.nextMoment { out += "  next moment: \(utcText(next))\n" }
        }
        let meaning = ((try? PlanHeader(json: state.planHeader))?.wire ?? .toldForAnUnreadableHeader).resentMeaning
        out += "  resent: \(state.resends) (\(meaning.resent)), possible duplicates: \(state.duplicatesRisked) (\(meaning.duplicates))\n"
        if !state.resentByKind.isEmpty {
            out += "  resent by why: " + state.resentByKind.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "\n"
        }
        // The connections opened over every run (`--json` `reconnects`), beside HTTP/2's pool.
        if let pool {
            out += "  connections: \(pool.open) in the pool at the last second (at most \(pool.peak)), \(state.reconnects) opened\(pool.roundTrip.map { ", round trip \(StatusOutput.milliseconds($0)) ms" } ?? "")\n"
        } else if state.reconnects > 0 {
            out += "  connections: \(state.reconnects) opened\n"
        }
        if !variants.isEmpty { out += "  variants: " + VariantCounts.text(variants) + "\n" }
        if state.tornTail { out += "  the last journal record was torn by a crash and is ignored\n" }
        return out
    }

    var json: JSONValue {
        func n(_ v: Int) -> JSONValue { .number(String(v)) }
        return .object([
            // A run with no end record and no process: killed (or crashed).
            ("outcome", .string(phase == .cancelled ? "cancelled" : state.outcome?.rawValue ?? (running != nil ? "running" : "killed"))),
            ("phase", .string(phase.rawValue)),
            ("cancelled_by", state.cancel.map { .string($0.by) } ?? .null),
            ("cancelled_at", state.cancel.map { .string(utcText(Int64($0.at))) } ?? .null),
            ("cancel_reason", state.cancel?.reason.map { .string($0) } ?? .null),
            ("pid", running.map { .number(String($0)) } ?? .null), ("resume", resumeCommand.map { .string($0) } ?? .null),
            // A cancelled send waits for nothing, whatever its last run was waiting for.
            ("waiting_until", phase == .cancelled ? .null : state.waitingUntil.map { .string(utcText(Int64($0))) } ?? .null), ("runs", n(state.runs)),
            ("plan", state.settings.planPath.map { .string($0) } ?? .string("spooled")),
            ("plan_records", state.planRecords.map(n) ?? .null), ("plan_incomplete", .bool(state.planIncomplete || planCut)),
            ("done", n(state.doneCount)), ("accepted", n(state.accepted)), ("presumed", n(state.presumed)),
            ("failed", n(state.failures.count)),
            ("failed_by_status", .object(failedByStatus.sorted { $0.key < $1.key }.map { (String($0.key), n($0.value)) })),
            ("failed_by_reason", .object(failedByReason.sorted { $0.key < $1.key }.map { ($0.key, n($0.value)) })),
            ("remaining", remaining.map(n) ?? .null), ("resends", n(state.resends)),
            ("resent_by_kind", .object(state.resentByKind.sorted { $0.key < $1.key }.map { ($0.key, n($0.value)) })), ("reconnects", n(state.reconnects)),
            ("duplicates_risked", n(state.duplicatesRisked)), ("torn_tail", .bool(state.tornTail)),
        ] + poolMembers + (schedule == nil ? skippedMembers : scheduleMembers) + (variants.isEmpty ? [] : [("variants", VariantCounts.json(variants))]))
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

extension JournalView {
    /// "3 skipped as too late", "2 skipped at their frequencyCap as they were about to go", or both.
    static func skippedText(_ skipped: [SkippedNotification]) -> String {
        let capped = skipped.filter { $0.rule != nil }.count, late = skipped.count - capped
        return [late > 0 ? "\(late) skipped as too late" : nil, capped > 0 ? "\(capped) skipped at their frequencyCap as they were about to go" : nil]
            .compactMap { $0 }.joined(separator: ", ")
    }
}

extension JournalView {
    static func variantBooks(state: JournalState, directory: String) -> [VariantCounts] {
        guard let header = try? PlanHeader(json: state.planHeader), !header.variants.isEmpty,
              let plan = try? SendSession.planReader(state: state, directory: directory),
              let groups = try? ExperimentLoader.variantBooks(journal: directory, plan: plan) else { return state.variants }
        return groups.filter { !$0.holdout }.map { VariantCounts(name: $0.name, planned: $0.planned, accepted: $0.accepted, failed: $0.failed, skipped: $0.skipped) }
    }
}

extension JournalView {
    /// An unscheduled send's skips: those a campaign rule stopped at release (its frequencyCap);
    /// always given, so a script reads 0 rather than a missing key.
    var skippedMembers: [(String, JSONValue)] {
        return [("skipped", .number(String(state.skipped.count))),
                ("skipped_frequency_capped", .number(String(state.skipped.filter { $0.rule != nil }.count)))]
    }
}
