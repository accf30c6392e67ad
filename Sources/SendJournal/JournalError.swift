import PlanStream

/// A journal that cannot be used.
public struct JournalError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What is wrong; tests match these, the sentence is ``description``'s.
    public enum Reason: Equatable, Sendable {
        /// The lock file cannot be opened (the system's words).
        case lockUnavailable(String)
        /// Another send holds the journal (its pid when known): a temporary failure, not a bad input.
        case busy(pid: Int32?)
        /// A new send was pointed at a directory that already holds a journal.
        case alreadyExists
        /// A resume could not cut a record torn by a crash (the system's words).
        case cannotCutTornRecord(String)
        /// No journal log can be read there (the reading error's words).
        case noJournal(String)
        /// A record before the last fails its checksum: corruption, not a torn write.
        case damagedRecord(offset: Int)
        case noStartRecord
        /// The send stopped before writing its start record.
        case empty
        /// A resume named a plan file, but the send read its plan from standard input.
        case planWasSpooled
        /// A resume found the spool of a plan from standard input cut (`planError`: the plan reader's words).
        case spoolCut(planError: String)
        /// A scheduled plan from standard input was cut before its first run, after this many records.
        case scheduledSpoolCut(records: Int)
        /// The journal's plan file is not where it was.
        case planMissing(plan: String)
        /// `--replan`, but the send read its plan from this file.
        case replanOfAPlanFile(plan: String)
        /// A resume's plan is another part than the journal's (or of another planning run).
        case otherPart(plan: PlanPart, journal: PlanPart)
        /// A resume's plan has another header than the journal's.
        case otherPlan
        /// A resume's plan has another checksum than the one the journal read through.
        case planChanged(checksum: String?, journal: String)
        /// `--replan`: the plan on standard input has another header (beyond its times).
        case replanOtherHeader
        /// `--replan`: the plan on standard input ends at this record, before the spool does.
        case replanShorter(records: Int)
        /// `--replan`: this record of the plan on standard input differs from the spooled one.
        case replanRecordDiffers(seq: UInt64)
        /// `--replan`: the plan on standard input has no trailer either.
        case replanWithoutTrailer
    }

    public var path: String
    public var reason: Reason

    public init(path: String, reason: Reason) {
        (self.path, self.reason) = (path, reason)
    }

    /// Another send holds the journal: a temporary failure, not a bad input.
    public var isBusy: Bool {
        if case .busy = reason { return true }
        return false
    }

    public var description: String { "\(path): \(sentence)." }

    /// The reason in words, after the path. (`path` is the journal's
    /// directory where a sentence names the command that goes on.)
    private var sentence: String {
        let replan = "plan again into the resume, `campaign plan JOB AUDIENCE | campaign send --resume \(path) --replan`"
        switch reason {
        case .lockUnavailable(let why): return "cannot be opened: \(why)"
        case .busy(let pid): return "another send\(pid.map { " (pid \($0))" } ?? "") is using this journal"
        case .alreadyExists: return "already holds a journal: use --resume \(path), or another directory"
        case .cannotCutTornRecord(let why): return "cannot cut its torn last record: \(why)"
        case .noJournal(let why): return "holds no journal (\(why))"
        case .damagedRecord(let offset): return "record at byte \(offset) is damaged (checksum mismatch) before the end of the journal"
        case .noStartRecord: return "does not start with a start record"
        case .empty: return "is empty: the send stopped before its start record, so nothing was sent; remove the directory and start the send again"
        case .planWasSpooled:
            return "this send read its plan from standard input (spooled in the journal); resume it without naming a plan"
        case .spoolCut(let planError):
            return "\(planError) The plan came from standard input and its spool was cut (the planner was stopped too): \(replan)"
        case .scheduledSpoolCut(let records):
            return "the scheduled plan this send read from standard input was cut after \(records) records (its spool has no trailer): \(replan)"
        case .planMissing(let plan):
            return "its plan \(plan) is not there; if it moved (another machine, another directory), name it where it is now: campaign send PLAN --resume \(path)"
        case .replanOfAPlanFile(let plan): return "the send read its plan from \(plan), not standard input: resume without --replan"
        case .otherPart(let mine, let theirs):
            let what = mine.campaignHash != theirs.campaignHash
                ? "the plan is part \(mine.index) of planning run \(mine.campaignHash), but this journal sends part \(theirs.index) of run \(theirs.campaignHash) (another campaign, or the same one planned again)"
                : "the plan is part \(mine.index) of \(mine.count), but this journal sends part \(theirs.index) of \(theirs.count)"
            return "\(what); refusing to resume"
        case .otherPlan: return "the plan is not the one this journal was started with (its header differs); refusing to resume"
        case .planChanged(let checksum, let journal):
            return "the plan has changed since the send started (checksum \(checksum ?? "missing"), journal \(journal)); refusing to resume"
        case .replanOtherHeader: return "the plan on standard input is for another job or settings (its header differs beyond its times); refusing to resume"
        case .replanShorter(let records): return "the plan on standard input ends at record \(records) but the spool holds more\(Self.ledgerHint); refusing to resume"
        case .replanRecordDiffers(let seq):
            return "record \(seq) of the plan on standard input differs from the spooled one (another audience?)\(Self.ledgerHint); refusing to resume"
        case .replanWithoutTrailer: return "the plan on standard input has no trailer either (was it cut short too?); refusing to resume"
        }
    }

    /// A replan that differs from the spool: the usual cause when the plan named a ledger.
    package static let ledgerHint = "; if the plan was made with --ledger, plan again without it: run again, it drops the devices this send already reached (the send's own --ledger still holds the rules)"
}
