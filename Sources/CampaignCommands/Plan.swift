import ArgumentParser
import Foundation
import AudienceIngest
import CampaignIO
import CampaignPayload
import CampaignPlan
import PlanStream
import FeedbackStore
import LocalTime
import ByteStreams

/// `campaign plan JOB [AUDIENCE]`: an audience to a localized, size-fitted plan stream.
struct Plan: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Turn an audience file into a plan: one ready-to-send payload per valid device.",
        discussion: """
        Reads CSV or NDJSON (gzip or not; - for standard input) and writes the plan \
        to standard output unless --out names a file. Every row ends as a plan \
        record or a line in the rejects file, with its line number and reason. \
        The summary goes to standard error, and as JSON to --summary.
        """
    )

    @Argument(help: "The job file (JSON).")
    var job: String

    @Argument(help: "The audience: CSV or NDJSON, gzip or not; - reads standard input.")
    var audience: String = "-"

    @Option(help: ArgumentHelp("Where to write the plan; - is standard output. With --parts: the directory for the parts.", valueName: "plan"))
    var out: String = "-"

    @Option(help: ArgumentHelp("Split the plan into N part files in the --out directory (part-000.plan …, manifest.json, rejects.ndjson, summary.json), part k holding the shards s with s mod N = k; each part is sent on its own (another machine, another time).", valueName: "N"))
    var parts: Int?

    @Option(help: ArgumentHelp("Where to write rejected rows (NDJSON). Default: PLAN.rejects.ndjson beside --out, or <campaign>.rejects.ndjson here when the plan goes to standard output.", valueName: "file"))
    var rejects: String?

    @Option(help: ArgumentHelp("Skip devices in this suppression store unless they registered again since.", valueName: "file"))
    var feedbackStore: String?

    @Option(help: "Number of shards to spread notifications over (a hash of the token).")
    var shards = 64

    @Option(help: ArgumentHelp("Payload limit in bytes, overriding the job's maxPayload.", valueName: "bytes"))
    var maxPayload: Int?

    @Option(help: ArgumentHelp("Also write the summary as JSON here (- for standard output).", valueName: "file"))
    var summary: String?

    @Option(help: ArgumentHelp("Audience format when neither the name nor the content tells: csv or ndjson.", valueName: "format"))
    var audienceFormat: String?

    @Option(help: ArgumentHelp("A CSV audience's field separator: , ; | or \\t for a tab.", valueName: "char"))
    var delimiter = ","

    @Option(help: ArgumentHelp("The app's send ledger (a directory; sends write it with send --ledger): drop devices this campaign already reached (already_sent) and those at the job's frequencyCap (frequency_capped), listed in the rejects.", valueName: "dir"))
    var ledger: String?

    @Flag(help: "With --ledger: send again to devices this campaign already reached (the frequencyCap still applies).")
    var allowRepeat = false

    @Option(help: ArgumentHelp("Exit 65 (the plan and summary still written) when more than this fraction of the rows was rejected (campaign rules' drops do not count).", valueName: "R"))
    var maxRejectRate = 0.5

    @Option(name: .customLong("column"), help: ArgumentHelp("Read NAME (token, lang, registered_at or a variable of the job) from the export's column SOURCE (NDJSON: a key, or a nested key as user.first_name). Repeatable; overrides the job's \"columns\".", valueName: "NAME=SOURCE"))
    var columnMappings: [String] = []

    /// `--column`s as a mapping.
    private var columnOverrides: ColumnMapping {
        var mapping = ColumnMapping()
        for m in columnMappings {
            let parts = m.split(separator: "=", maxSplits: 1)
            mapping.sources[String(parts[0])] = String(parts[1])
        }
        return mapping
    }

    func validate() throws {
        guard (1...65_536).contains(shards) else { throw ValidationError("--shards must be between 1 and 65536.") }
        if let m = maxPayload, !(1...5120).contains(m) { throw ValidationError("--max-payload must be between 1 and 5120 (the job's format may allow less).") }
        if job == "-" && audience == "-" { throw ValidationError("The job file cannot be read from standard input.") }
        if let f = audienceFormat, AudienceFormat(rawValue: f) == nil { throw ValidationError("--audience-format must be csv or ndjson.") }
        guard (0...1).contains(maxRejectRate) else { throw ValidationError("--max-reject-rate must be between 0 and 1.") }
        if rejects == "-" && out == "-" { throw ValidationError("--rejects - and the plan cannot both go to standard output: give --out PLAN or --rejects FILE.") }
        if let parts {
            guard (1...shards).contains(parts) else { throw ValidationError("--parts must be between 1 and --shards (\(shards)): a part is a set of whole shards.") }
            guard out != "-" else { throw ValidationError("--parts writes files into a directory: give --out DIR.") }
        }
        guard delimiterByte != nil else { throw ValidationError("--delimiter must be one of , ; | or \\t (a tab).") }
        if allowRepeat && ledger == nil { throw ValidationError("--allow-repeat goes with --ledger DIR: without a ledger nothing is dropped as already sent.") }
        for m in columnMappings {
            let parts = m.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw ValidationError("--column takes NAME=SOURCE (our name, then the export's column), not \"\(m)\".")
            }
        }
    }

    /// What names this planning run in every part's header: the job's
    /// bytes, the audience (its path, size and time of change; standard
    /// input is new each time), the options that shape records and the time.
    private func campaignHash(created: UInt32) throws -> String {
        var fields: [[UInt8]] = [try readWholeFile(job, limit: 16 << 20)]
        var info = stat()
        if audience != "-", stat(audience, &info) == 0 {
            let path = URL(fileURLWithPath: audience).standardizedFileURL.path
            fields.append(Array("\(path) \(info.st_size) \(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)".utf8))
        } else {
            fields.append(Array("stdin \(getpid())".utf8))
        }
        fields.append(Array("created \(created) shards \(shards) parts \(parts ?? 1) max \(maxPayload ?? 0) store \(feedbackStore ?? "")".utf8))
        return PlanManifest.campaignHash(of: fields)
    }

    /// The separator's byte: `\t` (as typed, or a real tab), or one of `,;|`.
    private var delimiterByte: UInt8? {
        switch delimiter {
        case "\\t", "\t", "tab": UInt8(ascii: "\t")
        case ",", ";", "|": delimiter.utf8.first
        default: nil
        }
    }

    func run() throws {
        try reportingErrors(as: "plan") {
            let jobFile = try CampaignJob.load(path: job)
            let store = try feedbackStore.map { try FeedbackStore.load(path: $0) }
            var options = PlanOptions(now: UInt32(Date().timeIntervalSince1970))
            options.shards = shards
            options.maxPayload = maxPayload
            options.expectedRows = AudienceFile.estimatedRows(audience) ?? 0
            options.columns = columnOverrides
            if let ledger {
                options.rules = try LedgerRules.load(directory: ledger, campaign: jobFile.campaign, cap: jobFile.frequencyCap,
                                                     allowRepeat: allowRepeat, now: options.now)
                let v = options.rules!.view
                if !v.corruptSegments.isEmpty {
                    printError("plan: warning: the ledger \(ledger) has damaged blocks (their checksum fails) in \(v.corruptSegments.joined(separator: ", ")): \(v.corruptEntries) entries there cannot be read, so devices they name may be planned past their rules")
                }
                if access(ledger, F_OK) != 0 {
                    printError("plan: warning: the ledger \(ledger) does not exist yet (no send has recorded there): every device is planned; check the path if this campaign's app has sent with --ledger before")
                }
                printError("plan: ledger \(ledger): \(v.segments) segment\(v.segments == 1 ? "" : "s"), \(v.entriesRead) entries read, \(v.devices) devices concerned"
                           + (v.segmentsSkipped > 0 ? ", \(v.segmentsSkipped) segment\(v.segmentsSkipped == 1 ? "" : "s") of other campaigns skipped (nothing of the scope in the window)" : "")
                           + (v.tornSegments > 0 ? " (\(v.tornSegments) with a torn tail, ignored from there)" : ""))
            } else if let cap = jobFile.frequencyCap {
                printError("plan: warning: the job's frequencyCap (\(cap.max) per \(cap.perSeconds) s, scope \(cap.scope)) is not applied without --ledger DIR")
            }
            if let parts {
                options.parts = parts
                options.campaignHash = try campaignHash(created: options.now)
                try PartsDirectory.prepare(out)
            }
            let planner = try Planner(job: jobFile, options: options, feedback: store)
            let reader = try AudienceFile.open(audience, format: audienceFormat.flatMap(AudienceFormat.init(rawValue:)), delimiter: delimiterByte!,
                                               columns: planner.columns)
            let rejectsPath = rejects ?? (parts != nil ? "\(out)/rejects.ndjson" : out == "-" ? "\(jobFile.campaign).rejects.ndjson" : "\(out).rejects.ndjson")
            let rejectsWriter = try RejectsWriter(path: rejectsPath)
            let partCount = parts ?? 1
            let writers = try (0..<partCount).map { k in
                try PlanWriter(path: parts == nil ? out : "\(out)/\(PlanPart.fileName(index: k, count: partCount))")
            }
            // The planner reads (tokenizes) on a thread of its own.
            // A holdout's devices go beside the rejects: PLAN.holdout.ndjson (holdout.ndjson in a parts directory).
            let holdoutPath = parts != nil ? "\(out)/holdout.ndjson" : out == "-" ? "\(jobFile.campaign).holdout.ndjson" : "\(out).holdout.ndjson"
            let holdoutWriter = try jobFile.variants.contains(where: \.holdout) ? HoldoutWriter(path: holdoutPath) : nil
            let result: PlanSummary
            do {
                result = try planner.run(reader: reader, plans: writers, rejects: rejectsWriter, holdout: holdoutWriter)
            } catch {
                // The last complete plan's holdout and rejects stay where they are; this run's rejects so far are kept aside.
                holdoutWriter?.abandon()
                if rejectsWriter.written > 0 {
                    try? rejectsWriter.flush()
                    printError("plan: the \(rejectsWriter.written) rejects read before the failure are in \(rejectsWriter.pendingPath)")
                } else {
                    rejectsWriter.abandon()
                }
                throw error
            }
            printError(result.text)
            if let perMinute = jobFile.throttlePerMinute, result.planned > 0 {
                let seconds = Int((Double(result.planned) * 60 / Double(perMinute)).rounded(.up))
                printError("  throttle: \(perMinute) a minute\(parts != nil ? " over every part" : ""): the \(result.planned) planned take about \(DeliverAt.durationText(seconds)) to send")
            }
            if result.rejectedTotal > 0 { printError("  rejects: \(rejectsPath)") }
            if let holdoutWriter { printError("  held out: \(holdoutWriter.path)") }
            if parts != nil {
                let manifest = PlanManifest(
                    campaign: jobFile.campaign, campaignHash: options.campaignHash, format: planner.header.wire.description,
                    shards: shards, created: options.now, rowsRead: result.rowsRead, rejected: result.rejectedTotal,
                    parts: writers.enumerated().map { k, w in
                        PlanManifest.Entry(part: k, file: PlanPart.fileName(index: k, count: partCount),
                                           records: w.records, crc32: w.trailer?.crc32 ?? "")
                    })
                try writeOutput(result.json.serialized() + [0x0A], to: "\(out)/summary.json")
                // Last: a directory with a manifest holds every part, complete.
                try SecureFile.write(manifest.json.serialized() + [0x0A], to: "\(out)/\(PlanManifest.fileName)", mode: SecureFile.publicMode)
                try SecureFile.syncDirectory(of: "\(out)/\(PlanManifest.fileName)")
                printError("  parts: \(partCount) in \(out) (\(writers.map { String($0.records) }.joined(separator: ", ")) records), manifest \(out)/\(PlanManifest.fileName)")
            }
            if let summary {
                try writeOutput(result.json.serialized() + [0x0A], to: summary)
            }
            if result.rowsRead > 0, Double(result.rejectedTotal - result.droppedByRules) > maxRejectRate * Double(result.rowsRead) {
                printError("campaign plan: \(result.rejectedTotal - result.droppedByRules) of \(result.rowsRead) rows were rejected, more than --max-reject-rate \(maxRejectRate) allows; see \(rejectsPath)")
                throw CampaignExit.incompletePlan
            }
        }
    }
}

/// The directory of `plan --parts`.
enum PartsDirectory {
    /// Creates `path` (0700: its parts hold tokens) or takes an empty one;
    /// refuses one that already holds a plan's parts, which journals may be
    /// sending from.
    static func prepare(_ path: String) throws {
        try SecureFile.makeDirectory(path, mode: 0o700)
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        if entries.contains(PlanManifest.fileName) || entries.contains(where: { $0.hasPrefix("part-") && $0.hasSuffix(".plan") }) {
            throw IOError(path: path, reason: "already holds the parts of a plan (\(PlanManifest.fileName), part-*.plan); plan into a new directory, or remove these first")
        }
    }
}
