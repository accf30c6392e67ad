#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignIO
import CampaignTLS
import FeedbackStore

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
    private let mutex = Lock()
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

    /// Whether any connection of this run has ever been established.
    var hasConnected: Bool { mutex.lock(); defer { mutex.unlock() }; return counts.reconnects > 0 }

    private var lastAttemptLog: UInt64 = 0
    private var attemptsNotLogged = 0

    /// Logs a failed connection attempt, at most one line a second over all
    /// connections (with how many were not logged since).
    func logFailedAttempt(_ message: String) {
        let now = Deadline.now().nanoseconds
        mutex.lock()
        let due = lastAttemptLog == 0 || now - lastAttemptLog >= 1_000_000_000
        let skipped = attemptsNotLogged
        if due { lastAttemptLog = now; attemptsNotLogged = 0 } else { attemptsNotLogged += 1 }
        mutex.unlock()
        if due { logger(message + (skipped > 0 ? " (\(skipped) more failed attempts since the last line)" : "")) }
    }

    func count(resends: Int = 0, duplicatesRisked: Int = 0, drops: Int = 0, shutdowns: Int = 0) {
        mutex.lock()
        counts.resends += resends
        counts.duplicatesRisked += duplicatesRisked
        counts.drops += drops
        counts.shutdowns += shutdowns
        mutex.unlock()
    }

    private var malformedInARow = 0
    /// Requests refused as malformed in a row (HTTP/2) after which the send stops.
    static let malformedLimit = 100

    /// An HTTP/2 request refused as malformed; past ``malformedLimit`` in a row the send stops (exit 65).
    func malformedAnswer(_ what: String) {
        mutex.lock()
        malformedInARow += 1
        let n = malformedInARow
        mutex.unlock()
        if n >= Self.malformedLimit { fail(.malformedRequests(count: n, last: what)) }
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
        if outcome.accepted > 0 { malformedInARow = 0 }
        if outcome.accepted > 0 || outcome.failures.contains(where: { !$0.gaveUp }) {
            fruitless = 0
            gatewayHasAnswered = true
        }
        feedbackTokens += outcome.suppress
        counts.accepted += outcome.accepted
        counts.presumed += outcome.presumed
        for f in outcome.failures {
            counts.failedByStatus[f.status, default: 0] += 1
            if f.httpReason == nil, f.status == Int(ErrorResponse.Status.invalidToken.rawValue) { feedbackTokens.append((f.token, UInt32(time(nil)))) }
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
