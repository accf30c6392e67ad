#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import PlanStream
import SendJournal
import GatewayClient

/// `campaign cancel`: stops a send for good. The cancel record is written
/// first (``JournalCancel``, durable); then a send that holds the journal
/// (sending, or waiting for its next wave) is told with SIGUSR1 and waited
/// for: it stops taking notifications, gives what is in flight the usual
/// grace, and journals `end` with outcome `cancelled`. A journal no send
/// holds gets that `end` record from `cancel` itself, under the lock.
/// Every later `send --resume` (`--due-only` too) refuses, exit 0.
public enum CampaignCancel {
    /// The signal that tells a running send to look at its journal's cancel record.
    public static let signal = SIGUSR1
    /// How long `cancel` waits for a running send to end (its stop takes at
    /// most the 5 s grace for in-flight answers, and a little more).
    public static let defaultWaitSeconds = 20.0

    /// What became of one journal.
    public enum Outcome: Equatable, Sendable {
        /// Cancelled now; `stopped`: the pid of the send that was running and ended.
        case cancelled(stopped: Int32?, accepted: Int, done: Int)
        /// A journal directory with no send started yet: marked, so its send refuses to start.
        case cancelledBeforeStart
        case alreadyCancelled(JournalCancel)
        /// Complete: nothing was left to cancel (no record written).
        case alreadyComplete
        /// The running send completed before the cancel reached it.
        case completedFirst
        /// The record is written, but the send (pid) had not ended within the wait.
        case stillRunning(pid: Int32)
    }

    public struct Result: Equatable, Sendable {
        public var directory: String
        public var outcome: Outcome

        /// One sentence for the operator.
        public var sentence: String {
            switch outcome {
            case .cancelled(let pid, let accepted, let done):
                return "cancelled the send in \(directory)" + (pid.map { $0 > 0 ? " (pid \($0) stopped)" : " (its send stopped)" } ?? "")
                    + ": \(accepted) accepted stay counted (\(done) final), nothing more will be sent"
            case .cancelledBeforeStart:
                return "cancelled \(directory) before its send started: `campaign send --journal \(directory)` will refuse to start"
            case .alreadyCancelled(let c):
                return "the send in \(directory) was already \(c.sentence); nothing to do"
            case .alreadyComplete:
                return "the send in \(directory) is complete: there was nothing left to cancel"
            case .completedFirst:
                return "the send in \(directory) completed before the cancel reached it: there was nothing left to cancel"
            case .stillRunning(let pid):
                return "the cancel of \(directory) is journaled, but its send (pid \(pid)) has not ended yet; no later run will send, and `campaign status \(directory)` tells when it has"
            }
        }
    }

    /// Cancels the journal in `directory`. `createIfMissing`: a part not
    /// started yet (its directory, or its log, absent) gets the record;
    /// otherwise a directory with no journal is an error.
    public static func cancel(directory: String, record: JournalCancel, createIfMissing: Bool = false,
                              waitSeconds: Double = defaultWaitSeconds) throws -> Result {
        func result(_ o: Outcome) -> Result { Result(directory: directory, outcome: o) }
        if let earlier = JournalCancel.read(directory: directory) { return result(.alreadyCancelled(earlier)) }
        guard access("\(directory)/\(Journal.logName)", F_OK) == 0 else {
            guard createIfMissing else { _ = try Journal.read(directory: directory); return result(.alreadyComplete) }   // throws: no journal
            try record.write(directory: directory)
            return result(.cancelledBeforeStart)
        }
        let before = try Journal.read(directory: directory)
        if before.outcome == .complete { return result(.alreadyComplete) }
        try record.write(directory: directory)
        if let state = try endUnderLock(directory: directory) { return try ended(state, stopped: nil) }
        // A send holds the journal: tell it, and wait for it to end. Only a
        // process seen holding the lock is signalled (a pid from another
        // machine sharing the directory could name anything here); any other
        // finds the record itself within a second (``CancelWatch``).
        let pid = Journal.runningSend(directory: directory) ?? 0
        if pid > 0, pid != getpid(), holdsOpen(pid: pid, path: "\(directory)/\(Journal.lockName)") { kill(pid, signal) }
        let clock = SystemClock.shared
        let giveUp = clock.now + UInt64(max(0, waitSeconds) * 1e9)
        while Journal.runningSend(directory: directory) != nil {
            // The send is another process: its lock's release wakes nothing here, so look every 50 ms (bounded).
            if clock.now > giveUp { return result(.stillRunning(pid: pid)) }
            _ = clock.sleep(seconds: 0.05, cancellation: nil)
        }
        // It ended: with `cancelled`, or (a race, another version) otherwise: then the end is written here.
        guard let state = try endUnderLock(directory: directory) else { return result(.stillRunning(pid: pid)) }
        return try ended(state, stopped: pid)

        /// A send that completed before the cancel reached it keeps no
        /// cancel record: it is complete, as `status` and a resume say.
        func ended(_ state: JournalState, stopped: Int32?) throws -> Result {
            guard state.outcome == .complete else { return result(.cancelled(stopped: stopped, accepted: state.accepted, done: state.doneCount)) }
            unlink(JournalCancel.path(directory))
            try SecureFile.syncDirectory(of: JournalCancel.path(directory))
            return result(.completedFirst)
        }
    }

    /// Takes the journal's lock and, unless its last run ended complete or
    /// cancelled, journals `end` `cancelled` (fsynced). Nil when a send holds it.
    package static func endUnderLock(directory: String) throws -> JournalState? {
        let journal: Journal, state: JournalState
        do { (journal, state) = try Journal.resume(directory: directory) } catch let e as JournalError where e.isBusy { return nil }
        if state.outcome != .complete && state.outcome != .cancelled {
            try journal.append(.end(outcome: .cancelled))
            try journal.checkpoint()
        }
        return state
    }

    /// Whether process `pid` has `path` open (one of its /proc/PID/fd links to it).
    package static func holdsOpen(pid: Int32, path: String) -> Bool {
        guard let resolved = realpath(path, nil) else { return false }
        let target = String(cString: resolved)
        free(resolved)
        guard let fds = opendir("/proc/\(pid)/fd") else { return false }
        defer { closedir(fds) }
        var link = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        while let entry = readdir(fds) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            let n = readlink("/proc/\(pid)/fd/\(name)", &link, link.count - 1)
            if n > 0, String(decoding: link[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) == target { return true }
        }
        return false
    }

    /// The journal directories of a plan's parts: those `glob` matches that
    /// hold a journal or a cancel record, and (when `glob` ends in `/*`, as
    /// `deploy/parallel.sh`'s `JOURNAL_DIR/*` does) `DIR/NNN` for each part
    /// of `manifest` none of them sends. `true`: a part not started.
    public static func partDirectories(manifest path: String, glob pattern: String) throws -> (directories: [(String, Bool)], unplaced: [Int]) {
        let manifest = try PlanManifest.load(path: path)
        var found: [(String, Bool)] = []
        var seen = Set<Int>()
        for dir in matches(pattern) {
            if let part = (try? Journal.read(directory: dir)).flatMap({ try? PlanHeader(json: $0.planHeader) })?.part {
                guard part.campaignHash == manifest.campaignHash else { continue }
                seen.insert(part.index)
                found.append((dir, false))
            } else if JournalCancel.exists(directory: dir), let n = Int(dir.split(separator: "/").last ?? "") {
                seen.insert(n)
                found.append((dir, true))
            }
        }
        var unplaced: [Int] = []
        for entry in manifest.parts where !seen.contains(entry.part) {
            let path = "\(pattern.dropLast(2))/\(String(format: "%03d", entry.part))"
            // Never a directory holding a journal of something else (another planning run's part).
            if pattern.hasSuffix("/*"), access("\(path)/\(Journal.logName)", F_OK) != 0 {
                found.append((path, true))
            } else {
                unplaced.append(entry.part)
            }
        }
        return (found.sorted { $0.0 < $1.0 }, unplaced)
    }

    /// Directories `pattern` names that hold a journal or a cancel record, sorted.
    package static func matches(_ pattern: String) -> [String] {
        var g = glob_t()
        defer { globfree(&g) }
        guard glob(pattern, 0, nil, &g) == 0 else { return [] }
        return (0..<Int(g.gl_pathc)).compactMap { i in g.gl_pathv[i].map { String(cString: $0) } }
            .filter { access("\($0)/\(Journal.logName)", F_OK) == 0 || JournalCancel.exists(directory: $0) }.sorted()
    }
}

extension CampaignCancel {
    /// The message of a run that ended `cancelled`.
    public static func endedMessage(directory: String) -> String {
        "\(JournalCancel.read(directory: directory)?.sentence ?? "cancelled"): nothing more is sent; what was sent stays counted"
    }

    /// A scheduled send's run ended `scheduled`, or its wait between runs
    /// ended by a signal: when the journal was cancelled, journals `end`
    /// `cancelled` (fsynced) and returns the run's message; nil otherwise.
    public static func endWaitIfCancelled(journal: Journal) throws -> String? {
        guard JournalCancel.exists(directory: journal.directory) else { return nil }
        try journal.append(.end(outcome: .cancelled))
        try journal.checkpoint()
        return endedMessage(directory: journal.directory)
    }
}
