#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignIO
import CampaignJSON
import CampaignPlan
import CampaignTLS
import FeedbackStore

/// Why a send stopped before its end.
public enum SendFailureReason: Error, Sendable, CustomStringConvertible {
    /// A certificate, key or trust problem: retrying cannot help.
    case credentials(TLSError)
    /// The gateway could not be reached after repeated attempts.
    case unreachable(TLSError)
    /// The gateway keeps ending connections without accepting anything.
    case unproductive(connections: Int)

    public var description: String {
        switch self {
        case .credentials(let e): "\(e)"
        case .unreachable(let e): "Giving up after repeated connection failures: \(e)"
        case .unproductive(let n):
            "Giving up: the gateway ended \(n) connections in a row without accepting or refusing anything (is it an APNs gateway?)"
        }
    }
}

/// How a send ended.
public enum SendOutcome: String, Sendable {
    /// Every notification has a final outcome.
    case complete
    /// Stopped by a signal; `--resume` goes on.
    case interrupted
    /// The plan had no trailer (or was damaged): what it held was sent.
    case incompletePlan = "incomplete-plan"
    /// The gateway stayed unreachable; `--resume` goes on.
    case gaveUp = "gave-up"
    /// A credential or trust failure.
    case credentials
}

/// The counts of a send, for the terminal and `--report`.
public struct SendReport: Sendable {
    public var outcome: SendOutcome = .complete
    public var planRecords = 0
    /// Final before this run started (a resume).
    public var alreadyDone = 0
    public var accepted = 0
    public var presumed = 0
    public var failedByStatus: [UInt8: Int] = [:]
    public var resends = 0
    public var duplicatesRisked = 0
    public var reconnects = 0
    public var drops = 0
    public var shutdowns = 0
    public var seconds = 0.0
    public var message: String? = nil

    public var failed: Int { failedByStatus.values.reduce(0, +) }
    public var perSecond: Double { seconds > 0 ? Double(accepted + presumed + failed) / seconds : 0 }

    public var json: JSONValue {
        func n(_ v: Int) -> JSONValue { .number(String(v)) }
        return .object([
            ("outcome", .string(outcome.rawValue)),
            ("plan_records", n(planRecords)), ("already_done", n(alreadyDone)),
            ("accepted", n(accepted)), ("presumed", n(presumed)), ("failed", n(failed)),
            ("failed_by_status", .object(failedByStatus.sorted { $0.key < $1.key }.map { (String($0.key), n($0.value)) })),
            ("resends", n(resends)), ("duplicates_risked", n(duplicatesRisked)),
            ("reconnects", n(reconnects)), ("drops", n(drops)), ("shutdowns", n(shutdowns)),
            ("seconds", .number(format3(seconds))),
            ("notifications_per_second", n(Int(perSecond))),
        ])
    }

    public var text: String {
        var s = "send: \(outcome.rawValue): \(accepted) accepted"
        if presumed > 0 { s += ", \(presumed) presumed delivered (simple format: failures cannot be detected)" }
        s += ", \(failed) failed"
        if !failedByStatus.isEmpty {
            s += " (" + failedByStatus.sorted { $0.key < $1.key }.map { "status \($0.key) \(ErrorResponse.Status(rawValue: $0.key).meaning): \($0.value)" }.joined(separator: ", ") + ")"
        }
        if alreadyDone > 0 { s += ", \(alreadyDone) already done before this run" }
        s += "\n  \(resends) resent, \(duplicatesRisked) possible duplicates, \(reconnects) connections, \(drops) lost without a response, \(format3(seconds)) s, \(Int(perSecond))/s"
        if let message { s += "\n  \(message)" }
        return s
    }
}

func format3(_ x: Double) -> String {
    let ms = Int((x * 1000).rounded())
    let frac = String(ms % 1000)
    return "\(ms / 1000).\(String(repeating: "0", count: 3 - frac.count))\(frac)"
}

/// State the workers share: counters, the journal, the stop flags.
final class SendShared: @unchecked Sendable {
    let journal: Journal
    let context: TLSContext
    let cancellation: CancellationPipe
    /// Cancelled once the send stops or gives up: every wait of a worker
    /// (its socket, a connection attempt, a backoff, a spare connection)
    /// watches it, so none outlasts a stop by more than a poll.
    let halt: CancellationPipe
    let maxConnectAttempts: Int
    let logger: @Sendable (String) -> Void
    /// fsyncs proofs off the connections' threads; started and stopped by ``Sender/run(plan:)``.
    let syncer: JournalSyncer
    private let mutex = PThreadMutex()
    private var counts = SendReport()
    var report: SendReport { mutex.lock(); defer { mutex.unlock() }; return counts }
    private var failure: SendFailureReason?
    private var stopping = false
    private var workersLeft: Int
    /// Connections the send runs.
    let connections: Int
    private var sentBelow: [Int32: Int32] = [:]
    var feedbackTokens: [([UInt8], UInt32)] = []
    private var journalError: Error?
    /// The connections' queues, abandoned as soon as the send stops or gives
    /// up, so the plan reader never waits for room that will not come.
    private var queues: [WorkQueue] = []

    init(journal: Journal, context: TLSContext, cancellation: CancellationPipe, workers: Int,
         maxConnectAttempts: Int, logger: @escaping @Sendable (String) -> Void) throws {
        self.journal = journal
        self.syncer = JournalSyncer(journal: journal)
        self.context = context
        self.cancellation = cancellation
        self.halt = try CancellationPipe()
        self.workersLeft = workers
        self.connections = workers
        self.maxConnectAttempts = maxConnectAttempts
        self.logger = logger
    }

    var isStopping: Bool { mutex.lock(); defer { mutex.unlock() }; return stopping || failure != nil }
    var isFinished: Bool { mutex.lock(); defer { mutex.unlock() }; return failure != nil }
    var failureReason: SendFailureReason? { mutex.lock(); defer { mutex.unlock() }; return failure }

    /// The queues to abandon when the send stops; set before the workers start.
    func attach(queues: [WorkQueue]) {
        mutex.lock()
        self.queues = queues
        let stopped = stopping || failure != nil
        mutex.unlock()
        if stopped { for q in queues { q.abandon() } }
    }

    /// Sets the stop flag (or failure) and wakes everything that waits: the
    /// workers through the stop bell, the plan reader through its queues.
    private func stop(_ change: () -> Void) {
        mutex.lock()
        change()
        let queues = self.queues
        mutex.unlock()
        halt.cancel()
        for q in queues { q.abandon() }
    }

    /// A graceful stop: no new notifications; prove what is in flight.
    func requestStop() {
        stop { stopping = true }
    }

    func fail(_ reason: SendFailureReason) {
        stop { if failure == nil { failure = reason } }
        if case .credentials = reason { cancellation.cancel() }
    }

    func log(_ message: String) { logger(message) }

    func connected() { mutex.lock(); counts.reconnects += 1; mutex.unlock() }

    func count(resends: Int = 0, duplicatesRisked: Int = 0, drops: Int = 0, shutdowns: Int = 0) {
        mutex.lock()
        counts.resends += resends
        counts.duplicatesRisked += duplicatesRisked
        counts.drops += drops
        counts.shutdowns += shutdowns
        mutex.unlock()
    }

    private var fruitless = 0
    private var gatewayHasAnswered = false

    /// Connections in a row, over all workers, that may end with nothing
    /// proven before the send gives up (resumable): enough for every worker
    /// to quarantine one notification that kills its connections.
    static func fruitlessLimit(connections: Int) -> Int { 5 * connections + 5 }

    /// A connection ended with nothing proven (no acceptance, no refusal):
    /// past ``fruitlessLimit(connections:)`` in a row the send gives up.
    /// Returns whether the gateway has ever accepted or refused anything in
    /// this run (without that, nothing can be blamed on a single notification).
    func connectionWasFruitless() -> Bool {
        mutex.lock()
        fruitless += 1
        let (inARow, answered) = (fruitless, gatewayHasAnswered)
        mutex.unlock()
        if inARow >= Self.fruitlessLimit(connections: connections) { fail(.unproductive(connections: inARow)) }
        return answered
    }

    /// Journals a proof: final ordinals per shard, failures; then fsync.
    func record(_ outcome: ProofOutcome) {
        mutex.lock()
        defer { mutex.unlock() }
        if outcome.accepted > 0 || outcome.failures.contains(where: { !$0.gaveUp }) {
            fruitless = 0
            gatewayHasAnswered = true
        }
        counts.accepted += outcome.accepted
        counts.presumed += outcome.presumed
        for f in outcome.failures {
            counts.failedByStatus[f.status, default: 0] += 1
            if f.status == ErrorResponse.Status.invalidToken.rawValue { feedbackTokens.append((f.token, UInt32(time(nil)))) }
        }
        do {
            for f in outcome.failures { try journal.append(.fail(f)) }
            for (shard, ordinals) in outcome.acceptedOrdinals { try journal.recordDone(shard: Int(shard), ordinals: ordinals, presumed: false) }
            for (shard, ordinals) in outcome.presumedOrdinals { try journal.recordDone(shard: Int(shard), ordinals: ordinals, presumed: true) }
            try journal.flush()
            try syncer.request()
        } catch {
            journalError = error
            logger("cannot write the journal: \(error)")
            stopping = true
            halt.cancel()
            for q in queues { q.abandon() }
        }
    }

    /// Journals (without fsync: it must survive a killed process, not a power loss)
    /// how far each shard has been handed to a connection.
    func markSent(shards: [Int32], below: [Int32]) {
        mutex.lock()
        defer { mutex.unlock() }
        do {
            try journal.appendSent(shards: shards, below: below)
        } catch {
            journalError = error
            stopping = true
            halt.cancel()
            for q in queues { q.abandon() }
        }
    }

    func workerFinished(sentBelow below: [Int32: Int32]) {
        mutex.lock()
        for (k, v) in below where (sentBelow[k] ?? 0) < v { sentBelow[k] = v }
        workersLeft -= 1
        mutex.unlock()
    }

    var sentBelowByShard: [Int32: Int32] { mutex.lock(); defer { mutex.unlock() }; return sentBelow }
    var journalFailure: Error? {
        mutex.lock()
        defer { mutex.unlock() }
        return journalError ?? syncer.error
    }
}

/// The frames the plan reader has encoded, per connection, until each batch
/// is handed to its connection's queue.
final class StagedFrames {
    private var batches: [FrameBatch]
    private let queues: [WorkQueue]
    private let cancellation: CancellationPipe

    init(queues: [WorkQueue], cancellation: CancellationPipe) {
        self.queues = queues
        self.cancellation = cancellation
        batches = queues.map { _ in
            var b = FrameBatch()
            b.bytes.reserveCapacity(FrameBatch.handOverFrames * 320)
            b.frames.reserveCapacity(FrameBatch.handOverFrames)
            return b
        }
    }

    /// Encodes a frame for connection `queue`; hands the batch over when it
    /// is full. False when cancelled while waiting for room.
    @inline(__always)
    func append(to queue: Int, seq: UInt64, shard: Int32, ordinal: Int32, encode: (inout [UInt8]) -> Void) -> Bool {
        batches[queue].append(seq: seq, shard: shard, ordinal: ordinal, encode: encode)
        guard batches[queue].isFull else { return true }
        return queues[queue].push(&batches[queue], cancellation: cancellation)
    }

    /// Hands every non-empty batch over. False when cancelled while waiting.
    func handOverAll() -> Bool {
        for i in batches.indices where !batches[i].isEmpty {
            if !queues[i].push(&batches[i], cancellation: cancellation) { return false }
        }
        return true
    }
}

/// Sends a plan: reads it on the calling thread, spreads its shards over
/// connections, and journals every proof.
public final class Sender: @unchecked Sendable {
    public let settings: SendSettings
    public let journal: Journal
    public let cancellation: CancellationPipe
    private let shared: SendShared
    private let resumeState: JournalState?
    private let logger: @Sendable (String) -> Void

    /// - Parameters:
    ///   - resumeState: the replayed journal when resuming; its final notifications are skipped.
    ///   - maxConnectAttempts: consecutive failed connection attempts before giving up.
    public init(settings: SendSettings, journal: Journal, context: TLSContext, resumeState: JournalState? = nil,
                maxConnectAttempts: Int = 8, cancellation: CancellationPipe,
                logger: @escaping @Sendable (String) -> Void = { _ in }) throws {
        self.settings = settings
        self.journal = journal
        self.cancellation = cancellation
        self.resumeState = resumeState
        self.logger = logger
        shared = try SendShared(journal: journal, context: context, cancellation: cancellation,
                                workers: settings.connections, maxConnectAttempts: maxConnectAttempts, logger: logger)
    }

    /// Stop taking new notifications, prove what is in flight, then return. Safe from any thread.
    public func requestStop() { shared.requestStop() }

    /// Live counts, for a progress line.
    public func progress() -> (read: Int, settled: Int, failed: Int) {
        let r = shared.report
        return (recordsRead, r.accepted + r.presumed + r.failed, r.failed)
    }

    private var recordsRead: Int {
        get { readMutex.lock(); defer { readMutex.unlock() }; return _recordsRead }
        set { readMutex.lock(); _recordsRead = newValue; readMutex.unlock() }
    }
    private var _recordsRead = 0
    private let readMutex = PThreadMutex()

    /// On resume: checks that `scan` (a first pass over the plan) is the plan the
    /// journal began with, counts the notifications that were handed to a
    /// connection before the stop but never proven (they will be sent again:
    /// possible duplicates), and journals that count at once.
    public static func prepareResume(state: JournalState, scan: PlanReader, journal: Journal) throws -> Int {
        guard scan.header.json == state.planHeader else {
            throw JournalError(path: journal.directory, reason: "the plan is not the one this journal was started with (its header differs); refusing to resume")
        }
        var ordinals = [Int](repeating: 0, count: scan.header.shards)
        var risked = 0
        while let record = try scan.next() {
            let ordinal = ordinals[record.shard]
            ordinals[record.shard] += 1
            if ordinal < (state.sentBelow[record.shard] ?? 0), !(state.done[record.shard]?.contains(ordinal) ?? false) {
                risked += 1
            }
        }
        if let expected = state.planChecksum, scan.trailer?.crc32 != expected {
            throw JournalError(path: journal.directory, reason: "the plan has changed since the send started (checksum \(scan.trailer?.crc32 ?? "missing"), journal \(expected)); refusing to resume")
        }
        try journal.append(.counters(resends: 0, duplicatesRisked: risked, reconnects: 0))
        try journal.checkpoint()
        return risked
    }

    /// Possible duplicates carried over from an earlier, interrupted run.
    public var duplicatesRiskedBeforeThisRun = 0

    /// Frames each connection's queue holds before the plan reader waits.
    /// Tests lower it to reach the full-queue paths with small plans.
    public var queueCapacity = 8192

    /// Sends every record of `plan` not already final in the journal, over
    /// the transport its format names.
    public func run(plan: PlanReader) throws -> SendReport {
        try run(plan: plan, transport: BinaryTransport(header: plan.header))
    }

    func run<Transport: NotificationTransport>(plan: PlanReader, transport: Transport) throws -> SendReport {
        let started = Deadline.now()
        if plan.header.format == .simple {
            logger("warning: the simple format (command 0) has no error responses: failures cannot be detected, and sent notifications are only presumed delivered")
        }
        let queues = try (0..<settings.connections).map { _ in try WorkQueue(capacity: queueCapacity) }
        shared.attach(queues: queues)
        let workers = (0..<settings.connections).map {
            transport.makeWorker(index: $0, queue: queues[$0], shared: shared, settings: settings)
        }
        shared.syncer.start()
        defer { shared.syncer.stop() }
        var threads: [pthread_t] = []
        for worker in workers {
            threads.append(startThread { worker.run() })
        }

        var report = SendReport()
        var ordinals = [Int32](repeating: 0, count: plan.header.shards)
        var readError: Error? = nil
        // Frames are handed to each connection in batches; a batch goes early
        // when the plan reader is about to wait for input, so a slow upstream
        // never holds back what was already read.
        let staging = StagedFrames(queues: queues, cancellation: cancellation)
        plan.beforeRead = { _ = staging.handOverAll() }
        defer { plan.beforeRead = nil }
        do {
            let connections = settings.connections
            var more = true
            var sinceCheck = 0
            while more {
                sinceCheck += 1
                if sinceCheck & 255 == 0, shared.isStopping || cancellation.isCancelled { break }
                var pushed = true
                more = try plan.nextView { record in
                    report.planRecords += 1
                    if report.planRecords & 1023 == 0 { recordsRead = report.planRecords }
                    let ordinal = ordinals[record.shard]
                    ordinals[record.shard] += 1
                    if let done = resumeState?.done[record.shard], done.contains(Int(ordinal)) {
                        report.alreadyDone += 1
                        return
                    }
                    pushed = staging.append(to: record.shard % connections, seq: record.seq, shard: Int32(record.shard), ordinal: ordinal) { bytes in
                        transport.encode(record, to: &bytes)
                    }
                }
                if !pushed { break }
            }
            if !staging.handOverAll() { logger("stopped before every read notification was queued") }
        } catch {
            readError = error
            logger("the plan cannot be read further: \(error)")
            _ = staging.handOverAll()
        }
        recordsRead = report.planRecords
        for q in queues { q.close() }
        let planFullyRead = !shared.isStopping && !cancellation.isCancelled && readError == nil
        if planFullyRead {
            try journal.append(.plan(records: report.planRecords, crc32: plan.trailer?.crc32, incomplete: !plan.isComplete))
        }
        for t in threads { pthread_join(t, nil) }
        shared.syncer.stop()

        let counts = shared.report
        report.accepted = counts.accepted
        report.presumed = counts.presumed
        report.failedByStatus = counts.failedByStatus
        report.resends = counts.resends
        report.duplicatesRisked = counts.duplicatesRisked + duplicatesRiskedBeforeThisRun
        report.reconnects = counts.reconnects
        report.drops = counts.drops
        report.shutdowns = counts.shutdowns

        if let failure = shared.failureReason {
            switch failure {
            case .credentials: report.outcome = .credentials
            case .unreachable, .unproductive: report.outcome = .gaveUp
            }
            report.message = failure.description
        } else if shared.journalFailure != nil || cancellation.isCancelled || shared.isStopping {
            report.outcome = .interrupted
        } else if readError != nil || !plan.isComplete {
            report.outcome = .incompletePlan
            report.message = readError.map { "\($0)" } ?? (settings.planPath == nil
                ? "the plan has no trailer: it was cut short upstream; everything it held was sent (if the planner was killed, plan again into `campaign send --resume DIR --replan`)"
                : "the plan has no trailer: it was cut short upstream; everything it held was sent")
        }
        try journal.append(.sent(below: Dictionary(uniqueKeysWithValues: shared.sentBelowByShard.map { (Int($0.key), Int($0.value)) })))
        try journal.append(.counters(resends: report.resends, duplicatesRisked: counts.duplicatesRisked, reconnects: report.reconnects))
        try journal.append(.end(outcome: report.outcome.rawValue))
        try journal.checkpoint()
        try updateFeedbackStore()
        report.seconds = Double(Deadline.now().nanoseconds - started.nanoseconds) / 1e9
        return report
    }

    private func updateFeedbackStore() throws {
        guard let path = settings.feedbackStore, !shared.feedbackTokens.isEmpty else { return }
        var store = try FeedbackStore.load(path: path)
        for (token, ts) in shared.feedbackTokens { store.record(token: token, timestamp: ts) }
        try store.save(path: path)
    }

}

func format1(_ x: Double) -> String {
    x == x.rounded() ? String(Int(x)) : String(Double(Int(x * 10)) / 10)
}
