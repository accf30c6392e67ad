import ArgumentParser
import Foundation
import CampaignSend
import SendJournal

/// `campaign cancel JOURNAL…`: a campaign stopped for good (the logic is
/// ``CampaignCancel``).
struct Cancel: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Cancel a send for good: a running or waiting send stops within seconds, and no later run (--resume, --due-only) sends anything.",
        discussion: """
        Journals who cancelled and when (the journal's `cancel` file, fsynced), \
        then tells the send that holds the journal (SIGUSR1) and waits for it \
        to end with outcome `cancelled`; what it sent stays counted. With \
        --manifest and --journals, every part of the plan, including parts not \
        started yet (their directory JOURNALS/NNN gets the record, so their send \
        refuses to start). Exit codes: 0 cancelled, already cancelled, or \
        complete (nothing left to cancel); 66 no journal; 75 journaled, but \
        the send had not ended within the wait.
        """
    )

    @Argument(help: "Journal directories.")
    var directories: [String] = []

    @Option(help: ArgumentHelp("The manifest.json of `plan --parts`: cancel every part.", valueName: "file"))
    var manifest: String?

    @Option(help: ArgumentHelp("With --manifest: the parts' journal directories as a pattern, e.g. 'journals/*' (quoted).", valueName: "glob"))
    var journals: String?

    @Option(help: ArgumentHelp("Who cancels, as the record keeps it (default: user@host (pid N)).", valueName: "name"))
    var by: String?

    @Option(help: ArgumentHelp("Why, kept in the record and shown by status.", valueName: "text"))
    var reason: String?

    @Option(help: ArgumentHelp("How long to wait for a running send to end (default 20).", valueName: "s"))
    var wait: Double?

    func validate() throws {
        if directories.isEmpty && manifest == nil { throw ValidationError("Name a journal directory (or several), or --manifest FILE --journals GLOB.") }
        if (manifest == nil) != (journals == nil) { throw ValidationError("--manifest and --journals go together.") }
        if let s = wait, !(0...3600).contains(s) { throw ValidationError("--wait must be between 0 and 3600 seconds.") }
    }

    func run() throws {
        try reportingErrors(as: "cancel") {
            let record = JournalCancel(by: by ?? JournalCancel.defaultBy(), at: Int(time(nil)), reason: reason)
            var targets = directories.map { ($0, false) }
            var unplaced = 0
            if let manifest, let journals {
                let parts = try CampaignCancel.partDirectories(manifest: manifest, glob: journals)
                targets += parts.directories
                unplaced = parts.unplaced.count
                for part in parts.unplaced {
                    printError("campaign cancel: part \(String(format: "%03d", part)) has no journal among \(journals), and no directory for it can be made there (the pattern does not end in /*, or DIR/\(String(format: "%03d", part)) holds another journal): cancel it by name when it has one")
                }
            }
            var stillRunning = false
            for (directory, notStarted) in targets {
                let result = try CampaignCancel.cancel(directory: directory, record: record, createIfMissing: notStarted,
                                                       waitSeconds: wait ?? CampaignCancel.defaultWaitSeconds)
                if case .stillRunning = result.outcome { stillRunning = true }
                printError("campaign cancel: \(result.sentence)")
            }
            if stillRunning { throw CampaignExit.interrupted }
            // A part left uncancelled can still be started: not a success to a script.
            if unplaced > 0 {
                printError("campaign cancel: \(unplaced) part\(unplaced == 1 ? " is" : "s are") not cancelled and may still be sent")
                throw CampaignExit.cannotCreate
            }
        }
    }
}
