import ArgumentParser
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

    func run() throws {
        let state = try reportingErrors(as: "status") { try Journal.read(directory: directory) }
        var byStatus: [UInt8: Int] = [:]
        for f in state.failures { byStatus[f.status, default: 0] += 1 }
        let remaining = state.planRecords.map { max(0, $0 - state.doneCount) }
        let outcome = state.outcome ?? "stopped without finishing (crash or kill); resume with: campaign send --resume \(directory)"
        if json {
            func n(_ v: Int) -> JSONValue { .number(String(v)) }
            let value = JSONValue.object([
                ("outcome", state.outcome.map { .string($0) } ?? .null), ("runs", n(state.runs)),
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
        print("  resent: \(state.resends), possible duplicates: \(state.duplicatesRisked)")
        if state.tornTail { print("  the last journal record was torn by a crash and is ignored") }
    }
}
