import ArgumentParser
import Foundation
import AudienceIngest
import CampaignIO
import CampaignPayload
import CampaignPlan
import PlanStream
import FeedbackStore

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

    @Option(help: ArgumentHelp("Where to write the plan; - is standard output.", valueName: "plan"))
    var out: String = "-"

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

    @Option(help: ArgumentHelp("Exit 65 (the plan and summary still written) when more than this fraction of the rows was rejected.", valueName: "R"))
    var maxRejectRate = 0.5

    func validate() throws {
        guard (1...65_536).contains(shards) else { throw ValidationError("--shards must be between 1 and 65536.") }
        if let m = maxPayload, !(1...2048).contains(m) { throw ValidationError("--max-payload must be between 1 and 2048.") }
        if job == "-" && audience == "-" { throw ValidationError("The job file cannot be read from standard input.") }
        if let f = audienceFormat, AudienceFormat(rawValue: f) == nil { throw ValidationError("--audience-format must be csv or ndjson.") }
        guard (0...1).contains(maxRejectRate) else { throw ValidationError("--max-reject-rate must be between 0 and 1.") }
        if rejects == "-" && out == "-" { throw ValidationError("--rejects - and the plan cannot both go to standard output: give --out PLAN or --rejects FILE.") }
        guard delimiterByte != nil else { throw ValidationError("--delimiter must be one of , ; | or \\t (a tab).") }
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
            let planner = try Planner(job: jobFile, options: options, feedback: store)
            let reader = try AudienceFile.open(audience, format: audienceFormat.flatMap(AudienceFormat.init(rawValue:)), delimiter: delimiterByte!)
            let rejectsPath = rejects ?? (out == "-" ? "\(jobFile.campaign).rejects.ndjson" : "\(out).rejects.ndjson")
            let rejectsWriter = try RejectsWriter(path: rejectsPath)
            let writer = try PlanWriter(path: out)
            // The planner reads (tokenizes) on a thread of its own.
            let result = try planner.run(reader: reader, plan: writer, rejects: rejectsWriter)
            printError(result.text)
            if result.rejectedTotal > 0 { printError("  rejects: \(rejectsPath)") }
            if let summary {
                try writeOutput(result.json.serialized() + [0x0A], to: summary)
            }
            if result.rowsRead > 0, Double(result.rejectedTotal) > maxRejectRate * Double(result.rowsRead) {
                printError("campaign plan: \(result.rejectedTotal) of \(result.rowsRead) rows were rejected, more than --max-reject-rate \(maxRejectRate) allows; see \(rejectsPath)")
                throw CampaignExit.incompletePlan
            }
        }
    }
}
