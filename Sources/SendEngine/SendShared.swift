#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import APNSWire
import CampaignIO
import CampaignTLS
import FeedbackStore
import SendJournal
import GatewayClient

/// State the workers share: counters, the journal, the stop flags.
package final class SendShared: @unchecked Sendable {
    package let journal: Journal
    package let context: TLSContext
    package let cancellation: CancellationPipe
    /// Cancelled once the send stops or gives up: every wait of a worker
    /// (its socket, a connection attempt, a backoff, a spare connection)
    /// watches it, so none outlasts a stop by more than a poll.
    package let halt: CancellationPipe
    package let maxConnectAttempts: Int
    package let logger: @Sendable (String) -> Void
    /// fsyncs proofs off the connections' threads; started and stopped by ``Sender/run(plan:)``.
    package let syncer: JournalSyncer
    private let mutex = Lock()
    private var counts = SendReport()
    /// A plan with variants: each record's, and their counts (set before the workers start).
    package var variants: VariantTally?
    /// The counts so far; the pool counts only connections opened (none before the first).
    package var report: SendReport {
        mutex.lock(); defer { mutex.unlock() }
        var r = counts
        r.poolConnections = min(r.poolConnections, r.reconnects)
        return r
    }
    /// Running, stopping, failed or with a broken journal; under the mutex.
    private var state = SendRunState.running
    /// Connections the send runs (the pool may grow; see ``ConnectionPool``).
    private var poolSize: Int
    package var connections: Int { mutex.lock(); defer { mutex.unlock() }; return poolSize }
    package func poolResized(to n: Int) { mutex.lock(); poolSize = n; counts.poolConnections = n; mutex.unlock() }
    /// `--rate`, over every connection; nil without a limit.
    package let rate: SharedRate?
    private let takenCount = Atomic<Int>(0)
    /// Notifications the connections have taken from their queues in this run
    /// (to write; a retry is not taken again): in flight until final.
    package var taken: Int { takenCount.load(ordering: .relaxed) }
    package func took(_ n: Int) { takenCount.add(n, ordering: .relaxed) }
    private var sentBelow: [Int32: Int32] = [:]
    /// Where each outcome goes after the run's counts, in order (``OutcomeSink``); the journal's alone until a run sets them
    /// (before its connections start).
    package var sinks: [any OutcomeSink] = []
    /// Suppressions answered in this run (410, binary status 8), in order; under the mutex.
    private var feedbackTokens: [([UInt8], UInt32)] = []

    /// The suppressions answered since `cursor` (moved past them).
    package func suppressions(after cursor: inout Int) -> [([UInt8], UInt32)] {
        mutex.lock(); defer { mutex.unlock() }
        let new = Array(feedbackTokens[min(cursor, feedbackTokens.count)...])
        cursor = feedbackTokens.count
        return new
    }
    /// The connections' queues, abandoned as soon as the send stops or gives
    /// up, so the plan reader never waits for room that will not come.
    private var queues: [WorkQueue] = []

    /// Where the connections read the time and wait (``SystemClock`` but in tests).
    package let clock: SendClock

    package init(journal: Journal, context: TLSContext, cancellation: CancellationPipe, workers: Int, rate: Int = 0,
         campaignRate: CampaignRate? = nil, maxConnectAttempts: Int, clock: SendClock = SystemClock.shared,
         logger: @escaping @Sendable (String) -> Void) throws {
        self.journal = journal
        self.clock = clock
        self.syncer = JournalSyncer(journal: journal)
        self.context = context
        self.cancellation = cancellation
        self.halt = try CancellationPipe()
        self.poolSize = workers
        counts.poolConnections = workers
        self.rate = campaignRate.map { SharedRate(perSecond: rate, campaign: $0, clock: clock) }
            ?? (rate > 0 ? SharedRate(perSecond: rate, clock: clock) : nil)
        self.maxConnectAttempts = maxConnectAttempts
        self.logger = logger
        sinks = [JournalOutcomes(journal: journal, syncer: syncer)]
    }

    package var runState: SendRunState { mutex.lock(); defer { mutex.unlock() }; return state }
    package var isStopping: Bool { runState.since != nil }
    /// Failed, or the journal is broken: no connection is worth opening.
    package var isFinished: Bool { switch runState { case .failed, .journalBroken: true; case .running, .stopping: false } }
    package var failureReason: SendFailureReason? { if case .failed(let reason, _) = runState { reason } else { nil } }

    /// The queues to abandon when the send stops; set before the workers start.
    package func attach(queues: [WorkQueue]) {
        mutex.lock()
        self.queues = queues
        let stopped = state.since != nil
        mutex.unlock()
        if stopped { for q in queues { q.abandon() } }
    }

    /// Moves the run state on (``SendRunState/next(_:at:)``) and wakes
    /// everything that waits: the workers through the stop bell, the plan
    /// reader through its queues.
    private func stop(_ event: SendRunState.Event) {
        mutex.lock()
        state = state.next(event, at: clock.now)
        let queues = self.queues
        mutex.unlock()
        halt.cancel()
        for q in queues { q.abandon() }
    }

    /// A graceful stop: no new notifications; prove what is in flight.
    package func requestStop() { stop(.stopRequested) }

    /// How long, after a stop or a failure, a connection waits for answers
    /// to what it has in flight before leaving them pending (possible
    /// duplicates): the first signal must end a send within 10 s whatever
    /// the server does.
    package static let stopGraceSeconds = 5.0

    /// Whether the grace for in-flight answers after a stop or failure has run out.
    package var stopGraceIsOver: Bool {
        guard let at = runState.since else { return false }
        return Double(clock.now &- min(clock.now, at)) / 1e9 >= Self.stopGraceSeconds
    }

    package func fail(_ reason: SendFailureReason) {
        stop(.failed(reason))
        if case .credentials = reason { cancellation.cancel() }
    }

    package func log(_ message: String) { logger(message) }

    package func connected() { mutex.lock(); counts.reconnects += 1; mutex.unlock() }

    /// Whether any connection of this run has ever been established.
    package var hasConnected: Bool { mutex.lock(); defer { mutex.unlock() }; return counts.reconnects > 0 }

    private var lastAttemptLog: UInt64 = 0
    private var attemptsNotLogged = 0

    /// Logs a failed connection attempt, at most one line a second over all
    /// connections (with how many were not logged since).
    package func logFailedAttempt(_ message: String) {
        let now = clock.now
        mutex.lock()
        let due = lastAttemptLog == 0 || now &- min(now, lastAttemptLog) >= 1_000_000_000
        let skipped = attemptsNotLogged
        if due { lastAttemptLog = now; attemptsNotLogged = 0 } else { attemptsNotLogged += 1 }
        mutex.unlock()
        if due { logger(message + (skipped > 0 ? " (\(skipped) more failed attempts since the last line)" : "")) }
    }

    /// `kind`: why the resends were sent again, for the report and metrics ("503 ServiceUnavailable", "lost connection").
    package func count(resends: Int = 0, kind: String? = nil, duplicatesRisked: Int = 0, drops: Int = 0, shutdowns: Int = 0) {
        mutex.lock()
        defer { mutex.unlock() }
        counts.resends += resends
        if resends > 0, let kind { counts.resentByKind[kind, default: 0] += resends }
        counts.duplicatesRisked += duplicatesRisked
        counts.drops += drops
        counts.shutdowns += shutdowns
        if duplicatesRisked > 0 { journalRisk(duplicatesRisked) }
    }

    /// Possible duplicates this run has journaled as it counted them (its end's
    /// counters hold only the rest).
    package var duplicatesRiskedJournaled: Int { mutex.lock(); defer { mutex.unlock() }; return riskJournaled }
    private var riskJournaled = 0

    /// A possible duplicate is journaled as it is counted, and handed to the
    /// kernel before what was risked can go again: a killed run's count is
    /// not lost with it (a resume counts only what was written and unproven
    /// at the kill; the copies a lost connection made earlier were already
    /// answered). Under the mutex; connection losses are rare, so one write each.
    private func journalRisk(_ n: Int) {
        do {
            try journal.append(.counters(resends: 0, duplicatesRisked: n, reconnects: 0))
            try journal.flush()
            riskJournaled += n
        } catch {
            journalBroke(error)
        }
    }

    // MARK: - Server trouble

    private var troubleSince: UInt64?
    private var troubleLast: UInt64 = 0
    private var troubleCount = 0
    private var troubleWhat = ""
    private var parkedCount = 0

    /// The gateway failed us without saying anything about a notification (a
    /// 5xx or 429, a reset, a refused stream, a lost, silent or fruitless
    /// connection; binary status 1, 255 or an undefined code): the
    /// notification is retried, never final. When such
    /// trouble has lasted ``SendSettings/outageLimitSeconds`` with nothing
    /// accepted or finally refused in between, the send stops with 69 and
    /// leaves the rest for `--resume`.
    package func serverTrouble(_ what: String, limitSeconds: Double) {
        mutex.lock()
        let now = clock.now
        if troubleSince == nil { troubleSince = now; troubleCount = 0 }
        troubleCount += 1
        troubleLast = now
        troubleWhat = what
        mutex.unlock()
        checkOutage(limitSeconds: limitSeconds)
    }

    /// Stops the send when trouble has lasted the limit (called on each
    /// trouble and once a second): a streak is still going while its last
    /// trouble is more recent than the longest wait between two of them.
    package func checkOutage(limitSeconds: Double) {
        mutex.lock()
        // Read under the lock: another thread may have moved troubleLast past a `now` taken before it.
        let now = clock.now
        guard let since = troubleSince else { mutex.unlock(); return }
        let lasted = Double(now &- min(now, since)) / 1e9
        let live = Double(now &- min(now, troubleLast)) / 1e9 <= limitSeconds + Double(H2Answer.maxRetryAfterSeconds) + 30
        let (count, what) = (troubleCount, troubleWhat)
        mutex.unlock()
        if lasted >= limitSeconds && live {
            fail(.serverTrouble(seconds: Int(lasted.rounded()), count: count, last: what))
        }
    }

    /// Whether the gateway is failing now (a streak of trouble with nothing accepted since it began).
    package var inTrouble: Bool { mutex.lock(); defer { mutex.unlock() }; return troubleSince != nil }

    private var roundTrips: [Double] = []

    /// A second's shortest round trip over the connections.
    package func noteRoundTrip(milliseconds: Double) {
        mutex.lock()
        roundTrips.append(milliseconds)
        counts.roundTripMilliseconds = milliseconds   // the live counts (metrics) show the latest
        mutex.unlock()
    }

    /// The median of the seconds' shortest round trips; nil when none was measured.
    package var roundTripMilliseconds: Double? {
        mutex.lock(); defer { mutex.unlock() }
        guard !roundTrips.isEmpty else { return nil }
        return roundTrips.sorted()[roundTrips.count / 2]
    }

    /// A notification that was on too many lost connections (HTTP/2: open on
    /// 3; binary: at the head of 5 in a row): not sent again in this run,
    /// left pending (a possible duplicate already); the run ends with 69.
    package func parked() {
        mutex.lock(); parkedCount += 1; mutex.unlock()
    }

    package var parkedNotifications: Int { mutex.lock(); defer { mutex.unlock() }; return parkedCount }

    private var fruitless = 0
    private var gatewayHasAnswered = false

    /// Connections in a row, over all workers, that may end with nothing
    /// proven before the send gives up (resumable): enough for every worker
    /// to park one notification that kills its connections.
    package static func fruitlessLimit(connections: Int) -> Int { 5 * connections + 5 }

    /// A connection ended with nothing proven (no acceptance, no refusal):
    /// past ``fruitlessLimit(connections:)`` in a row the send gives up.
    /// Returns whether the gateway has ever accepted or refused anything in
    /// this run (without that, nothing can be blamed on a single notification).
    package func connectionWasFruitless() -> Bool {
        mutex.lock()
        fruitless += 1
        let (inARow, answered, size) = (fruitless, gatewayHasAnswered, poolSize)
        mutex.unlock()
        if inARow >= Self.fruitlessLimit(connections: size) { fail(.unproductive(connections: inARow)) }
        return answered
    }

    /// Journals a proof: final ordinals per shard, failures; then fsync.
    /// 429 TooManyProviderTokenUpdates answers since anything was accepted or refused.
    private var tokenRefusals = 0
    /// A few in a row happen when connections open at once; past this, the token is refused for good (20 minutes).
    package static let tokenRefusalsToStop = 6

    /// One more 429 TooManyProviderTokenUpdates; whether the send should stop for it.
    package func tokenRefused() -> Bool {
        mutex.lock()
        defer { mutex.unlock() }
        tokenRefusals += 1
        return tokenRefusals >= Self.tokenRefusalsToStop
    }

    package func record(_ outcome: ProofOutcome) {
        mutex.lock()
        defer { mutex.unlock() }
        // (The simple format's presumed: its connection kept quiet for a while, as a gateway does.)
        if outcome.accepted > 0 || outcome.presumed > 0 || outcome.failures.contains(where: { !$0.gaveUp }) {
            fruitless = 0
            gatewayHasAnswered = true
            troubleSince = nil
            tokenRefusals = 0
        }
        counts.accepted += outcome.accepted
        counts.presumed += outcome.presumed
        let failures = outcome.failures
        for i in failures.indices {
            counts.failedByStatus[failures[i].status, default: 0] += 1
            counts.failedByReason[failures[i].cause.label, default: 0] += 1
            // Journaled with the failure, so the store gets it even after a kill (a resume merges the journal's).
            if let at = failures[i].unregisteredAt { feedbackTokens.append((failures[i].token, at)) }
        }
        do {
            for sink in sinks { try sink.proven(outcome) }
        } catch {
            journalBroke(error)
        }
    }

    /// Journals (without fsync: it must survive a killed process, not a power loss)
    /// how far each shard has been handed to a connection.
    package func markSent(shards: [Int32], below: [Int32]) -> Bool {
        mutex.lock()
        defer { mutex.unlock() }
        do {
            try journal.appendSent(shards: shards, below: below)
            return true
        } catch {
            journalBroke(error)
            return false
        }
    }

    /// The plan reader could not journal: the send stops, as for any journal failure.
    package func journalFailed(_ error: Error) {
        mutex.lock()
        journalBroke(error)
        mutex.unlock()
    }

    /// The one way into a broken journal (every path: proofs, write-ahead,
    /// the plan reader): the send stops, and the grace for what is in flight starts.
    private func journalBroke(_ error: Error) {
        if case .journalBroken = state {} else { logger("cannot write the journal: \(error)") }
        state = state.next(.journalBroke(error), at: clock.now)
        halt.cancel()
        for q in queues { q.abandon() }
    }

    package func workerFinished(sentBelow below: [Int32: Int32]) {
        mutex.lock()
        for (k, v) in below where (sentBelow[k] ?? 0) < v { sentBelow[k] = v }
        mutex.unlock()
    }

    package var sentBelowByShard: [Int32: Int32] { mutex.lock(); defer { mutex.unlock() }; return sentBelow }
    package var journalFailure: Error? {
        mutex.lock()
        defer { mutex.unlock() }
        if case .journalBroken(let error, _) = state { return error }
        return syncer.error
    }

    // MARK: - Scheduled notifications

    /// Quiet hours: notifications a connection held back as it took them, and the earliest their hours end.
    private var wireDeferred = 0
    private var wireDeferredUntil: Int64?

    /// A scheduled notification too late to go (`late: skip`): journaled as skipped, final.
    package func recordSkip(_ skipped: SkippedNotification) {
        mutex.lock()
        defer { mutex.unlock() }
        counts.skipped += 1
        if skipped.rule != nil { counts.skippedFrequencyCapped += 1 }
        do {
            for sink in sinks { try sink.skipped(skipped) }
        } catch {
            journalBroke(error)
        }
    }

    /// Frames a connection's ``WireRelease`` did not let go at `now`.
    package func heldAtTheWire(_ held: [WireRelease.Held], now: Int64) {
        for h in held {
            switch h.verdict {
            case .skip:
                recordSkip(SkippedNotification(seq: h.frame.seq, shard: Int(h.frame.shard), ordinal: Int(h.frame.ordinal),
                                               token: h.token, moment: h.frame.moment, skippedAt: now))
            case .deferred(let until):
                mutex.lock()
                wireDeferred += 1
                wireDeferredUntil = min(wireDeferredUntil ?? until, until)
                mutex.unlock()
            case .send:
                break
            }
        }
    }

    /// Notifications held back by their quiet hours as they were taken, and when the first of those hours ends.
    package var deferredAtTheWire: (count: Int, until: Int64?) {
        mutex.lock(); defer { mutex.unlock() }
        return (wireDeferred, wireDeferredUntil)
    }
}
