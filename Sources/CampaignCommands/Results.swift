import ArgumentParser
import Foundation
import CampaignIO
import CampaignPayload
import CampaignResults

/// `campaign results`: what each variant did against its holdout, from the
/// app's own events (APNs tells a sender nothing of opens).
struct Results: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure each variant's conversions against the holdout, from the app's event exports.",
        discussion: """
        Who was in which group comes from the plan's records and the journal \
        (a variant's devices accepted) and the holdout file (its devices held \
        out). A device converts when it has an event within --window after its \
        moment: when its notification was accepted, or for a held-out device \
        the moment it would have had. Events: CSV or NDJSON, gzip or not, one \
        event a line (token, event name, time as RFC 3339 or UNIX seconds). \
        Methods: Wilson score intervals; Newcombe's hybrid score interval for \
        the difference; the pooled two-proportion z-test; Pearson's chi-squared \
        across groups; a chi-squared sample-ratio check against the job's weights.
        """
    )

    @Argument(help: "The send's journal directory (or use --manifest and --journals for parts).")
    var journal: String?

    @Option(name: .customLong("events"), help: ArgumentHelp("An event export (CSV or NDJSON, gzip or not); repeat for several.", valueName: "file"))
    var events: [String] = []

    @Option(help: ArgumentHelp("The manifest.json of `plan --parts`.", valueName: "file"))
    var manifest: String?

    @Option(help: ArgumentHelp("The parts' journal directories as a pattern, e.g. 'journals/*' (quoted: campaign expands it).", valueName: "glob"))
    var journals: String?

    @Option(help: ArgumentHelp("The send's plan, when it is no longer where the journal remembers it.", valueName: "file"))
    var plan: String?

    @Option(help: ArgumentHelp("The holdout file (default: PLAN.holdout.ndjson beside the plan, <campaign>.holdout.ndjson for a piped plan, DIR/holdout.ndjson for parts).", valueName: "file"))
    var holdout: String?

    @Option(help: ArgumentHelp("Count only events of this name (default: any event).", valueName: "name"))
    var event: String?

    @Option(help: ArgumentHelp("How long after its moment a device's events count: 72h, 3d, 90m, or seconds.", valueName: "duration"))
    var window = "72h"

    @Option(help: ArgumentHelp("Where the token, event name and time are: token=NAME,event=NAME,time=NAME (defaults token, event, time).", valueName: "map"))
    var columns: String?

    @Option(help: ArgumentHelp("The confidence of the intervals, between 0 and 1.", valueName: "level"))
    var confidence = 0.95

    @Option(help: ArgumentHelp("Where unreadable event lines are listed, by file and line (created 0600 when the first comes).", valueName: "file"))
    var rejects = "results.rejects.ndjson"

    @Flag(help: "Print JSON instead of text.")
    var json = false

    @Option(help: ArgumentHelp("Write a self-contained HTML page of the results here.", valueName: "file"))
    var html: String?

    func validate() throws {
        if events.isEmpty { throw ValidationError("Give the app's events with --events FILE (repeat for several).") }
        if (journal == nil) == (manifest == nil) {
            throw ValidationError("Name the send's journal directory, or its parts with --manifest FILE and --journals GLOB.")
        }
        if manifest != nil, journals == nil { throw ValidationError("--manifest goes with --journals GLOB (the parts' journals).") }
        guard let seconds = CampaignJob.duration(window), seconds > 0 else {
            throw ValidationError("--window must be a duration such as 72h, 3d or 90m, not \"\(window)\".")
        }
        _ = seconds
        if !(confidence > 0 && confidence < 1) { throw ValidationError("--confidence must be between 0 and 1 (such as 0.95).") }
        if let columns {
            do { _ = try EventColumns(parsing: columns) } catch { throw ValidationError("\(error)") }
        }
        if plan != nil, manifest != nil { throw ValidationError("--plan names one send's plan; with --manifest, the parts are the manifest's.") }
    }

    func run() throws {
        try reportingErrors(as: "results") {
            let columns = try columns.map(EventColumns.init(parsing:)) ?? EventColumns()
            let now = Int64(Date().timeIntervalSince1970)
            let experiment: Experiment
            if let manifest, let journals {
                let matched = try StatusOutput.journals(matching: journals)
                guard !matched.isEmpty else {
                    throw ResultsError(.unreadable, "--journals '\(journals)' matches no journal: name the parts' journal directories (quoted, as 'journals/*').")
                }
                experiment = try ExperimentLoader.load(manifest: manifest, journals: matched, holdout: holdout, now: now)
            } else {
                experiment = try ExperimentLoader.load(journal: journal!, plan: plan, holdout: holdout, now: now)
            }
            let windowSeconds = Int64(CampaignJob.duration(window)!)
            let tally = EventTally(devices: experiment.devices, windowSeconds: windowSeconds, event: event, rejectsPath: rejects)
            for path in events { try tally.read(path: path, columns: columns) }
            let rejectsFile = try tally.finish()
            let report = ResultsReport(experiment: experiment, events: tally.counts, windowSeconds: windowSeconds, event: event, confidence: confidence)
            if json {
                print(String(decoding: report.json.serialized(), as: UTF8.self))
            } else {
                print(report.text, terminator: "")
            }
            if let rejectsFile { printError("results: \(tally.counts.rejected) unreadable event line\(tally.counts.rejected == 1 ? "" : "s") listed in \(rejectsFile)") }
            if let event, tally.counts.otherEvent > 0, tally.counts.otherEvent + tally.counts.rejected == tally.counts.read {
                printError("results: warning: no event is named \"\(event)\" (all \(tally.counts.otherEvent) readable events have other names): check --event, or --columns event=NAME")
            }
            let pending = experiment.devices.groups.reduce(0) { $0 + $1.pending }
            if pending > 0 {
                printError("results: warning: \(pending) notification\(pending == 1 ? " is" : "s are") not final yet (the send stopped, or waits): their devices are not measured, the holdout's all are; resume the send for a fair comparison")
            }
            if report.sampleRatioMismatch {
                printError("results: warning: the split is not what the job asked (sample ratio \(ResultsReport.pSaid(report.sampleRatio?.pValue))): do not trust these results")
            }
            if let html { try writeOutput(Array(ResultsPage.html(report).utf8), to: html) }
        }
    }
}
