import Foundation
import CampaignIO
import PlanStream
import CampaignTLS
import SendJournal
import ByteStreams
import SendEngine

/// A send from its first step to its report: a new send (its journal
/// created, a plan from standard input spooled into it) or a resume (the
/// journal replayed, the plan checked against it, `--replan` respooled), then
/// the ``Sender``. What `campaign send` does, for tests to drive in-process;
/// the command only parses arguments, loads credentials and maps the
/// outcome to an exit code.
public final class SendSession {
    /// How a send begins.
    public enum Start {
        /// A new send of the plan at `plan` (`-`: standard input) with a journal in `journal`.
        case new(plan: String, journal: String, settings: SendSettings)
        /// The send whose journal is in `journal`; `replan` reads the plan again
        /// from standard input; `plan` names the plan file where it is now
        /// (moved, or on another machine), checked against the journal;
        /// `adjust` overrides what the journal remembers (credentials,
        /// gateway, tuning).
        case resume(journal: String, replan: Bool, plan: String? = nil, adjust: (inout SendSettings) -> Void)
    }

    public let settings: SendSettings
    public let journal: Journal
    /// A resume of a send that is complete: there is nothing to run.
    public private(set) var isAlreadyComplete = false
    /// Notes for the operator (already complete, plan respooled), in order.
    public private(set) var notes: [String] = []
    /// The plan's record count, when known before sending (a plan file's trailer, or a journal that read it through).
    public private(set) var planTotal: Int?
    /// The plan's records per variant (its trailer), when known before it is read.
    public private(set) var planVariants: [Int]?
    private var plan: PlanReader
    /// A scheduled plan on standard input, read only as far as its header:
    /// ``readInputToEnd(cancellation:)`` reads the rest into the spool.
    private var unreadInput: ByteSource?
    private let state: JournalState?
    private let carried: Int

    /// - Parameter prepare: called once the plan's header is known and before
    ///   a new journal is created (or a resume goes on): it may complete the
    ///   settings for the plan's format (the gateway of `--environment`) and
    ///   check credentials, so a wrong one leaves no journal behind.
    public init(_ start: Start, prepare: (PlanHeader, inout SendSettings) throws -> Void = { _, _ in }) throws {
        switch start {
        case .new(let planPath, let directory, var settings):
            try CancelledJournal.refuse(directory: directory)
            if planPath == "-" {
                try SecureFile.makeDirectory(directory, mode: 0o700)   // the spool goes in it
                settings.planPath = nil
                let spool = "\(directory)/\(Journal.spoolName)"
                let input = try SpoolingSource(source: FileSource(path: "-"), spoolPath: spool)
                plan = try PlanReader(source: input, path: "standard input")
                try prepare(plan.header, &settings)
                if plan.header.schedule != nil { unreadInput = input }
            } else {
                settings.planPath = URL(fileURLWithPath: planPath).standardizedFileURL.path
                // A plan file whose planner failed is refused whole, before anything is sent.
                let trailer = try PlanReader.completeTrailer(path: planPath)
                planTotal = trailer?.records
                planVariants = trailer?.variants
                plan = try PlanReader(path: planPath)
                try prepare(plan.header, &settings)
                // Only for a plan that can be sent: a refused one leaves no directory behind.
                try SecureFile.makeDirectory(directory, mode: 0o700)
            }
            journal = try Journal.create(directory: directory, settings: settings, planHeader: plan.header.json)
            self.settings = settings
            state = nil
            carried = 0
        case .resume(let directory, let replan, let movedPlan, let adjust):
            try CancelledJournal.refuse(directory: directory)
            var (opened, replayed) = try Journal.resume(directory: directory)
            let scanned: Int?
            if let movedPlan {
                guard replayed.settings.planPath != nil else {
                    throw JournalError(path: directory, reason: .planWasSpooled)
                }
                replayed.settings.planPath = URL(fileURLWithPath: movedPlan).standardizedFileURL.path
            }
            if replan {
                let checked = try Respool.respool(from: FileSource(path: "-"), journal: opened, state: &replayed)
                notes.append("the plan on standard input matches the \(checked) spooled records; it replaces the spool")
            }
            var settings = replayed.settings
            adjust(&settings)
            try prepare(try Self.openPlan(state: replayed, journal: opened).header, &settings)
            if replayed.outcome == .complete {
                // Nothing to do, and nothing journaled: cron may ask every few minutes all day.
                isAlreadyComplete = true
                // Still the journal's plan (a plan file changed since, or another one named, is refused).
                _ = try Sender.checkResume(state: replayed, scan: Self.openPlan(state: replayed, journal: opened), journal: opened)
                (plan, carried, scanned) = (try Self.openPlan(state: replayed, journal: opened), 0, nil)
                notes.append("the send in \(directory) is already complete; nothing to do.")
            } else {
                (plan, carried, scanned) = try Self.begin(journal: opened, state: replayed, settings: settings, replan: replan)
            }
            journal = opened
            state = replayed
            planTotal = replayed.planRecords ?? scanned
            planVariants = Self.planVariants(settings: settings, journal: opened)
            self.settings = settings
        }
    }

    /// The next run of this send, on the same journal (still locked): what
    /// a scheduled send does when its next moment comes.
    public func nextRun() throws -> SendSession {
        try SendSession(continuing: journal, settings: settings)
    }

    private init(continuing journal: Journal, settings: SendSettings) throws {
        try journal.append(.woke)
        let replayed = try Journal.read(directory: journal.directory)
        let scanned: Int?
        (plan, carried, scanned) = try Self.begin(journal: journal, state: replayed, settings: settings, replan: false)
        self.journal = journal
        self.state = replayed
        self.settings = settings
        planTotal = replayed.planRecords ?? scanned
        planVariants = Self.planVariants(settings: settings, journal: journal)
    }

    /// A resume's plan variants: the plan file's trailer, or the spool's once it is whole.
    private static func planVariants(settings: SendSettings, journal: Journal) -> [Int]? {
        (try? PlanReader.completeTrailer(path: settings.planPath ?? journal.spoolPath))??.variants
    }

    /// A resumed run's first steps: the plan checked against the journal,
    /// the possible duplicates counted, the run's start record; and the
    /// plan's record count when that check read it to its trailer.
    private static func begin(journal: Journal, state: JournalState, settings: SendSettings, replan: Bool) throws -> (PlanReader, Int, Int?) {
        let carried: Int, scanned: Int?
        let scan = try Self.openPlan(state: state, journal: journal)
        do {
            carried = try Sender.prepareResume(state: state, scan: scan, journal: journal)
            scanned = scan.trailer?.records
        } catch let error as PlanError where state.settings.planPath == nil && !replan {
            // The spool ends where a kill cut `plan | send`: say what goes on.
            throw JournalError(path: journal.directory, reason: .spoolCut(planError: "\(error)"))
        }
        // A scheduled plan from standard input is spooled whole before its
        // first run: a spool without its trailer was cut before that run
        // could send anything, and its later moments are not in it.
        if state.settings.planPath == nil, scan.header.schedule != nil, !scan.isComplete {
            throw JournalError(path: journal.directory, reason: .scheduledSpoolCut(records: scan.recordsRead))
        }
        let plan = try Self.openPlan(state: state, journal: journal)
        try journal.append(.start(settings: settings, planHeader: plan.header.json))
        try journal.checkpoint()
        return (plan, carried, scanned)
    }

    /// A scheduled plan from standard input (`plan | send`) is read to its
    /// end into the journal's spool before anything is sent: its runs wait
    /// for their moments, and meanwhile the planner upstream must neither
    /// block on a full pipe nor die on a closed one. Every run then reads the
    /// spool, so the spool is the whole plan. Nil to go on (also for any other
    /// plan); a report to end with when the plan was cut (nothing sent, exit
    /// 65: a cut scheduled plan lacks its later moments) or `cancellation`
    /// stopped the reading (75).
    public func readInputToEnd(cancellation: CancellationPipe) throws -> SendReport? {
        guard let input = unreadInput else { return nil }
        unreadInput = nil
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var report = SendReport()
        while true {
            if case .cancelled = waitFor(fd: 0, events: Int16(POLLIN), cancellation: cancellation, deadline: nil) {
                report.outcome = .interrupted
                report.message = "stopped while reading the scheduled plan from standard input, before sending anything; plan again into `campaign send --resume \(journal.directory) --replan`"
                try journal.append(.end(outcome: report.outcome))
                return report
            }
            if try buffer.withUnsafeMutableBytes({ try input.read(into: $0) }) == 0 { break }
        }
        let spooled = try PlanReader(source: journal.openSpool(), path: journal.spoolPath)
        var damage: String?
        do { while try spooled.next() != nil {} } catch { damage = "\(error)" }
        guard damage == nil, spooled.isComplete else {
            report.outcome = .incompletePlan
            report.message = "the scheduled plan on standard input was cut after \(spooled.recordsRead) records (\(damage ?? "no trailer: was the planner stopped?")); nothing was sent, as its later moments are missing: plan again into `campaign send --resume \(journal.directory) --replan`"
            try journal.append(.end(outcome: report.outcome))
            return report
        }
        plan = try PlanReader(source: journal.openSpool(), path: journal.spoolPath)
        planTotal = spooled.recordsRead
        planVariants = spooled.trailer?.variants
        return nil
    }

    /// What a resume of a send already complete reports (`--report`, for the
    /// cron job that reads it): nothing done by this run, the whole send as its journal holds it.
    public var alreadyCompleteReport: SendReport? {
        guard isAlreadyComplete, let state else { return nil }
        var report = Self.report(of: state, outcome: .complete)
        report.planTotal = planTotal ?? state.doneCount
        report.wire = plan.header.wire
        report.message = "already complete; nothing to do"
        return report
    }

    /// What a run that sends nothing reports: nothing this run, the whole send as `state` holds it.
    public static func report(of state: JournalState, outcome: SendOutcome) -> SendReport {
        var report = SendReport()
        report.outcome = outcome
        report.planTotal = state.planRecords
        report.alreadyDone = state.doneCount
        var whole = SendTotals(before: state, run: SendReport())
        whole.runs = state.runs
        report.wholeSend = whole
        return report
    }

    /// What a run of a cancelled journal reports (`--report`): the send as far
    /// as it went, outcome cancelled; zeros for a part cancelled before it started.
    public static func cancelledReport(directory: String) -> SendReport {
        guard let state = try? Journal.read(directory: directory) else {
            var report = SendReport()
            report.outcome = .cancelled
            return report
        }
        return report(of: state, outcome: .cancelled)
    }

    /// The sender for this session; `run()` it (``Sender/run(plan:)``
    /// with this session's plan) and stop it from a signal's thread.
    public func makeSender(context: TLSContext, cancellation: CancellationPipe,
                           logger: @escaping @Sendable (String) -> Void) throws -> Sender {
        // A campaign's rate over its parts: --rate-total, else the job's throttle.
        let total = settings.rateTotal.map(Double.init) ?? plan.header.throttlePerMinute.map { Double($0) / 60 }
        let campaignRate = total.map { CampaignRate(totalPerSecond: $0, journal: journal.directory, part: plan.header.part) }
        let sender = try Sender(settings: settings, journal: journal, context: context, resumeState: state,
                                campaignRate: campaignRate, cancellation: cancellation, logger: logger)
        sender.duplicatesRiskedBeforeThisRun = carried
        sender.planTotal = planTotal
        sender.planVariants = planVariants
        return sender
    }

    /// Sends the plan with `sender` (made by ``makeSender(context:cancellation:logger:)``).
    public func run(_ sender: Sender) throws -> SendReport {
        try sender.run(plan: plan)
    }

    /// The plan of the journal in `directory`, for reading alone (`status`): its file, or the spool.
    public static func planReader(state: JournalState, directory: String) throws -> PlanReader {
        if let path = state.settings.planPath { return try PlanReader(path: path) }
        let spool = "\(directory)/\(Journal.spoolName)"
        return try PlanReader(source: FileSource(path: spool), path: spool)
    }

    /// The plan a journal was started with: from its path, or the journal's spool.
    static func openPlan(state: JournalState, journal: Journal) throws -> PlanReader {
        if let path = state.settings.planPath {
            guard access(path, F_OK) == 0 else {
                throw JournalError(path: journal.directory, reason: .planMissing(plan: path))
            }
            return try PlanReader(path: path)
        }
        return try PlanReader(source: journal.openSpool(), path: journal.spoolPath)
    }
}
