import ArgumentParser
import Foundation
import APNSWire
import CampaignJSON
import CampaignSend
import PlanStream
import LocalTime
import SendJournal

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
            let named = directories + (try journals.map(StatusOutput.journals(matching:)) ?? [])
            if manifest == nil, named.count == 1, let line = StatusOutput.cancelledBeforeStart(directory: named[0], json: json) {
                print(line)   // a part cancelled before its send started: a cancel record, no journal
            } else if manifest == nil && named.count == 1 {
                try single(JournalView(directory: named[0]))
            } else {
                try parts(PartsView(manifestPath: manifest, journals: named,
                                    cancelledBeforeStart: journals.map(StatusOutput.cancelledBeforeStart(matching:)) ?? [], journalsPattern: journals))
            }
        }
    }

    private func single(_ view: JournalView) throws {
        let state = view.state, directory = view.directory
        if failures {
            let channels = state.planHeader["header"]?["broadcast"] == .bool(true)
            for f in state.failures { print(StatusOutput.failureLine(f, channels: channels)) }
            for k in state.skipped { print(StatusOutput.skippedLine(k, channels: channels)) }
            return
        }
        if let html {
            try writeOutput(Array(StatusPage.html(journal: directory, state: state, outcome: view.outcomeText, running: view.running != nil).utf8), to: html)
            return
        }
        if json {
            print(String(decoding: view.json.serialized(), as: UTF8.self))
            return
        }
        print(view.text, terminator: "")
    }

    private func parts(_ view: PartsView) throws {
        if failures {
            for row in view.rows {
                guard let j = row.journal else { continue }
                let channels = j.state.planHeader["header"]?["broadcast"] == .bool(true)
                for f in j.state.failures { print(StatusOutput.failureLine(f, part: row.part, journal: j.directory, channels: channels)) }
                for k in j.state.skipped { print(StatusOutput.skippedLine(k, part: row.part, journal: j.directory, channels: channels)) }
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
