import ArgumentParser
import APNSWire
import CampaignJSON
import CampaignSend

/// `campaign status DIR`: how far a send got, from its journal alone.
struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Tell from a journal how far a send got, what remains, and what failed."
    )

    @Argument(help: "The journal directory.")
    var directory: String

    @Flag(help: "Print JSON instead of text.")
    var json = false

    @Flag(help: "Print every notification that failed for good, as NDJSON: {\"seq\",\"token\",\"status\",\"reason\",\"attempts\"}.")
    var failures = false

    @Option(help: ArgumentHelp("Write a self-contained HTML page of the send (rate over time, outcomes, connections and resends) here.", valueName: "file"))
    var html: String?

    func run() throws {
        let state = try reportingErrors(as: "status") { try Journal.read(directory: directory) }
        if failures {
            for f in state.failures {
                var token: [UInt8] = []
                HexEncoding.append(f.token, to: &token)
                let line = JSONValue.object([
                    ("seq", .number(String(f.seq))), ("token", .string(String(decoding: token, as: UTF8.self))),
                    ("status", .number(String(f.status))), ("reason", .string(f.reason)), ("attempts", .number(String(f.attempts))),
                ])
                print(String(decoding: line.serialized(), as: UTF8.self))
            }
            return
        }
        var byStatus: [UInt8: Int] = [:]
        for f in state.failures { byStatus[f.status, default: 0] += 1 }
        let remaining = state.planRecords.map { max(0, $0 - state.doneCount) }
        let running = state.outcome == nil ? Journal.runningSend(directory: directory) : nil
        let outcome: String
        if let outcome_ = state.outcome {
            outcome = outcome_
        } else if let pid = running {
            outcome = pid > 0 ? "running (pid \(pid))" : "running"
        } else if state.settings.planPath == nil && state.planRecords == nil {
            outcome = "stopped while its plan was still coming from standard input; if the planner was stopped too, plan again into it: campaign plan JOB AUDIENCE | campaign send --resume \(directory) --replan (else: campaign send --resume \(directory))"
        } else {
            outcome = "stopped without finishing (crash or kill); resume with: campaign send --resume \(directory)"
        }
        if let html {
            try reportingErrors(as: "status") {
                try writeOutput(Array(StatusPage.html(journal: directory, state: state, outcome: outcome).utf8), to: html)
            }
            return
        }
        if json {
            func n(_ v: Int) -> JSONValue { .number(String(v)) }
            let value = JSONValue.object([
                ("outcome", state.outcome.map { .string($0) } ?? (running != nil ? .string("running") : .null)),
                ("pid", running.map { .number(String($0)) } ?? .null), ("runs", n(state.runs)),
                ("plan", state.settings.planPath.map { .string($0) } ?? .string("spooled")),
                ("plan_records", state.planRecords.map(n) ?? .null), ("plan_incomplete", .bool(state.planIncomplete)),
                ("done", n(state.doneCount)), ("accepted", n(state.accepted)), ("presumed", n(state.presumed)),
                ("failed", n(state.failures.count)),
                ("failed_by_status", .object(byStatus.sorted { $0.key < $1.key }.map { (String($0.key), n($0.value)) })),
                ("remaining", remaining.map(n) ?? .null), ("resends", n(state.resends)),
                ("duplicates_risked", n(state.duplicatesRisked)), ("torn_tail", .bool(state.tornTail)),
            ])
            print(String(decoding: value.serialized(), as: UTF8.self))
            return
        }
        print("journal: \(directory)")
        print("  outcome: \(outcome) (\(state.runs) run\(state.runs == 1 ? "" : "s"))")
        print("  plan: \(state.settings.planPath ?? "spooled in the journal"), \(state.planRecords.map { "\($0) records" } ?? "not read to its end yet")\(state.planIncomplete ? " (incomplete: no trailer)" : "")")
        print("  done: \(state.doneCount) (\(state.accepted) accepted, \(state.presumed) presumed, \(state.failures.count) failed)")
        if !byStatus.isEmpty {
            print("  failed by status: " + byStatus.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", "))
        }
        print("  remaining: \(remaining.map(String.init) ?? "unknown until the plan has been read to its end")")
        print("  resent: \(state.resends) (discarded by the gateway after a refusal or shutdown, or unproven on a lost connection), possible duplicates: \(state.duplicatesRisked) (sent again after a connection was lost while they were unproven)")
        if state.tornTail { print("  the last journal record was torn by a crash and is ignored") }
    }
}
