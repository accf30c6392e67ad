import ArgumentParser
import Foundation
import CampaignIO
import CampaignPayload
import LocalTime
import SendLedger

/// `campaign ledger`: the send ledger's upkeep.
struct Ledger: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Prune or describe a send ledger (the directory send --ledger records accepted notifications in, and plan --ledger reads).",
        discussion: """
        A ledger is a directory of segments, one per send (<host>-<journal id>.seg), \
        16 bytes per accepted notification. See README.md, "Campaign rules".
        """,
        subcommands: [LedgerPrune.self, LedgerStats.self]
    )
}

struct LedgerPrune: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prune",
        abstract: "Rewrite every segment without entries older than a duration (atomically: a new file renamed over it); a segment left empty is removed."
    )

    @Argument(help: "The ledger directory.")
    var directory: String

    @Option(help: ArgumentHelp("Drop entries older than this: 90d, 36h, or seconds.", valueName: "duration"))
    var olderThan: String

    func validate() throws {
        guard let s = CampaignJob.duration(olderThan), s > 0 else { throw ValidationError("--older-than must be a duration such as 90d, 36h or 3600.") }
        _ = s
    }

    func run() throws {
        try reportingErrors(as: "ledger prune") {
            let cutoff = UInt32(clamping: Int(Date().timeIntervalSince1970) - CampaignJob.duration(olderThan)!)
            let r = try LedgerMaintenance.prune(directory: directory, olderThan: cutoff)
            printError("ledger prune: \(r.segments) segments, \(r.rewritten) rewritten, \(r.removed) removed (no entry left), \(r.busy) in use by a send (left for the next prune); \(r.entriesDropped) entries dropped, \(r.entriesKept) kept")
        }
    }
}

struct LedgerStats: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "stats", abstract: "Segments, bytes, entries, and per campaign its scope, entries and time span.")

    @Argument(help: "The ledger directory.")
    var directory: String

    func run() throws {
        try reportingErrors(as: "ledger stats") {
            let s = try LedgerMaintenance.stats(directory: directory)
            var lines = ["\(directory): \(s.segments) segments, \(s.bytes) bytes, \(s.entries) entries\(s.claims > 0 ? " and \(s.claims) claims" : "") (\(LedgerFormat.entryBytes) bytes each)"
                         + (s.tornSegments > 0 ? ", \(s.tornSegments) with a torn tail (ignored from there)" : "")
                         + (s.corruptSegments.isEmpty ? "" : "; damaged blocks (checksum fails) in \(s.corruptSegments.joined(separator: ", ")): \(s.corruptEntries) entries unreadable")]
            for c in s.campaigns.values.sorted(by: { $0.name < $1.name }) {
                let span = c.entries == 0 ? "" : " \(utcText(Int64(c.oldest))) … \(utcText(Int64(c.newest)))"
                lines.append("  \(c.name)\(c.scope.isEmpty ? "" : " (scope \(c.scope))"): \(c.entries) entries\(c.claims > 0 ? ", \(c.claims) claims (written before sending, proven or not)" : "")\(span)")
            }
            print(lines.joined(separator: "\n"))
        }
    }
}
