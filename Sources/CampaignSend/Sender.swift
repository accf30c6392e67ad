#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignIO
import CampaignJSON
import PlanStream
import Synchronization
import CampaignTLS
import FeedbackStore
import LocalTime
import SendJournal
import SendEngine

/// Sends a plan: reads it on the calling thread, spreads its shards over
/// connections, and journals every proof.
public final class Sender: @unchecked Sendable {
    public let settings: SendSettings
    public let journal: Journal
    public let cancellation: CancellationPipe
    let shared: SendShared
    let resumeState: JournalState?
    let logger: @Sendable (String) -> Void

    /// - Parameters:
    ///   - resumeState: the replayed journal when resuming; its final notifications are skipped.
    ///   - maxConnectAttempts: consecutive failed connection attempts before giving up.
    public init(settings: SendSettings, journal: Journal, context: TLSContext, resumeState: JournalState? = nil,
                maxConnectAttempts: Int = 8, campaignRate: CampaignRate? = nil, cancellation: CancellationPipe,
                logger: @escaping @Sendable (String) -> Void = { _ in }) throws {
        self.settings = settings
        self.journal = journal
        self.cancellation = cancellation
        self.resumeState = resumeState
        self.logger = logger
        shared = try SendShared(journal: journal, context: context, cancellation: cancellation,
                                workers: settings.connections, rate: settings.rate, campaignRate: campaignRate,
                                maxConnectAttempts: maxConnectAttempts, logger: logger)
    }

    /// Seconds between merges of new suppressions into the store while a run sends.
    static let storeMergeSeconds = 30
    /// How many of the run's suppressions are in the store (``mergeSuppressions()``), under `storeMutex`.
    var mergedSuppressions = 0
    let storeMutex = Lock()

    /// Stop taking new notifications, prove what is in flight, then return. Safe from any thread.
    public func requestStop() { shared.requestStop() }

    /// Live counts, for a progress line.
    public func progress() -> SendProgress {
        let r = shared.report
        readMutex.lock()
        defer { readMutex.unlock() }
        return SendProgress(read: _recordsRead, alreadyDone: _alreadyDone, total: planTotal,
                            settled: r.accepted + r.presumed + r.failed, failed: r.failed,
                            taken: shared.taken)
    }

    /// The counts so far (accepted, failed by status, resends, possible
    /// duplicates, connections), for metrics.
    public func counts() -> SendReport { shared.report.with(shared.variants, planTotals: planVariants) }

    /// The whole send so far: what the journal held when this run started, and this run's counts.
    public func wholeSendCounts() -> SendTotals {
        var run = shared.report
        run.duplicatesRisked += duplicatesRiskedBeforeThisRun
        return SendTotals(before: resumeState, run: run)
    }

    /// The plan's record count when known before reading it (a plan file's
    /// trailer, a journal that read the plan through): progress is measured against it.
    public var planTotal: Int?
    /// The plan's records per header variant, from its trailer (a plan file, or a spool read whole).
    public var planVariants: [Int]?

    func published(read: Int, alreadyDone: Int) {
        readMutex.lock()
        _recordsRead = read
        _alreadyDone = alreadyDone
        readMutex.unlock()
    }
    private var _recordsRead = 0
    private var _alreadyDone = 0
    private let readMutex = Lock()

    /// On resume: checks that `scan` (a first pass over the plan) is the plan the
    /// journal began with, counts the notifications that were handed to a
    /// connection before the stop but never proven (they will be sent again:
    /// possible duplicates), and journals that count at once.
    public static func prepareResume(state: JournalState, scan: PlanReader, journal: Journal) throws -> Int {
        let risked = try checkResume(state: state, scan: scan, journal: journal)
        try journal.append(.counters(resends: 0, duplicatesRisked: risked, reconnects: 0))
        try journal.checkpoint()
        return risked
    }

    /// ``prepareResume(state:scan:journal:)`` without journaling anything:
    /// whether `scan` is the journal's plan (else it throws), and how many
    /// notifications a resume would send again as possible duplicates.
    public static func checkResume(state: JournalState, scan: PlanReader, journal: Journal) throws -> Int {
        if let mine = scan.header.part, let theirs = (try? PlanHeader(json: state.planHeader))?.part, mine != theirs {
            throw JournalError(path: journal.directory, reason: .otherPart(plan: mine, journal: theirs))
        }
        guard scan.header.json == state.planHeader else {
            throw JournalError(path: journal.directory, reason: .otherPlan)
        }
        var ordinals = [Int](repeating: 0, count: scan.header.shards)
        var risked = 0
        // A run that ended (its end record written) counted each notification
        // it left unanswered or unproven, once: over HTTP/2 those open on a
        // lost connection as it lost them, the rest it handed over answered
        // as not processed (403, 429, 5xx, refused streams); over the binary
        // interface a lost connection's window as it was lost, and at its end
        // what was written and unproven. Only a run that was killed leaves
        // some uncounted (those it counted before the kill are journaled).
        let countedByTheLastRun = state.outcome != nil
        while let record = try scan.next() {
            let ordinal = ordinals[record.shard]
            ordinals[record.shard] += 1
            if !countedByTheLastRun, ordinal < (state.sentBelow[record.shard] ?? 0), !(state.done[record.shard]?.contains(ordinal) ?? false) {
                risked += 1
            }
        }
        if let expected = state.planChecksum, scan.trailer?.crc32 != expected {
            throw JournalError(path: journal.directory, reason: .planChanged(checksum: scan.trailer?.crc32, journal: expected))
        }
        return risked
    }

    /// Possible duplicates carried over from an earlier, interrupted run.
    public var duplicatesRiskedBeforeThisRun = 0

    /// A scheduled plan: send only what is due now, then end with outcome
    /// `scheduled` (`send --due-only`, for cron).
    public var dueOnly = false
    /// The outcome of a run that stopped when asked (`cancelled` once the journal was cancelled).
    public var stoppedAs: @Sendable () -> SendOutcome = { .interrupted }
    /// A scheduled plan: the longest wait for the next moment with the
    /// connections open; a later moment ends the run (`scheduled`) and the
    /// caller starts the next one when it comes.
    public lazy var holdOpenSeconds: Double = settings.holdOpenSeconds

    /// Frames each connection's queue holds before the plan reader waits.
    /// Tests lower it to reach the full-queue paths with small plans.
    public var queueCapacity = 8192

    /// Sends every record of `plan` not already final in the journal, over
    /// the transport its header names.
    public func run(plan: PlanReader) throws -> SendReport {
        try run(plan: plan, transport: makeTransport(for: plan.header, settings: settings, journalDirectory: journal.directory))
    }

    func run<Transport: NotificationTransport>(plan: PlanReader, transport: Transport) throws -> SendReport {
        let started = shared.clock.now
        // The run's wall-clock start, for the page (its ticks count seconds from here).
        try journal.append(.clock(unixSeconds: Int(shared.clock.wallSeconds)))
        let ledger = try LedgerRecorder.start(settings: settings, journal: journal, header: plan.header, resumeState: resumeState, shared: shared)
        // However the run ends: a waiting scheduled send's next run locks the segment again (it hung on its own lock).
        defer { ledger?.close() }
        if let warning = transport.warning { logger("warning: \(warning)") }
        // One queue that every connection takes from (HTTP/2: streams stand
        // alone), and then the pool may grow; or one queue per connection.
        let oneQueue = transport.sharesOneQueue
        let queues = try (0..<(oneQueue ? 1 : settings.connections)).map { _ in
            try WorkQueue(capacity: queueCapacity * (oneQueue ? settings.connections : 1))
        }
        shared.attach(queues: queues)
        shared.variants = VariantTally(header: plan.header)
        // Every outcome's books after the run's counts: the variants', the ledger (before the journal), the journal.
        let sinks: [(any OutcomeSink)?] = [shared.variants, ledger, JournalOutcomes(journal: journal, syncer: shared.syncer)]
        shared.sinks = sinks.compactMap { $0 }
        let gate = ScheduleGate(schedule: plan.header.schedule, dueOnly: dueOnly, holdOpenSeconds: holdOpenSeconds, clock: shared.clock)
        // What a connection asks again as it takes each frame to write it: quiet hours and `late: skip`; the frequencyCap, claimed.
        let release = gate.rule.flatMap { $0.checksWhenDue ? WireRelease(rule: $0, zones: gate.zones, token: transport.tokenInFrame) : nil }
        let cap = ledger.flatMap { recorder in recorder.claims.map { WireCap(recorder: recorder, claims: $0, token: transport.tokenInFrame) } }
        let pool = ConnectionPool(maximum: oneQueue ? max(settings.connections, settings.maxConnections ?? 0) : settings.connections) { [shared, settings] index in
            transport.makeWorker(engine: ConnectionEngine(index: index, queue: queues[oneQueue ? 0 : index], shared: shared,
                                                          settings: settings, shards: plan.header.shards, release: release, cap: cap))
        }
        shared.syncer.start()
        defer { shared.syncer.stop() }
        let ticker = try SendTicker(shared: shared, pool: pool, settings: settings, oneQueue: oneQueue, started: started,
                                    logger: logger, mergeSuppressions: { [self] in mergeSuppressions() })
        defer { ticker.finish() }
        pool.add(settings.connections)

        // Frames are handed to each connection in batches; a batch goes early
        // when the plan reader is about to wait for input, so a slow upstream
        // never holds back what was already read.
        let staging = StagedFrames(queues: queues, cancellation: cancellation)
        let reading = RunReading()
        let variants = VariantStage(tally: shared.variants, before: resumeState)
        let schedule = ScheduleStage(gate: gate, staging: staging, shared: shared, reading: reading, logger: logger)
        // The record chain: every record of every run, in this order.
        let chain: [(any RecordStage)?] = [variants, ResumeStage(state: resumeState, ledger: ledger, reading: reading), schedule]
        let stages = chain.compactMap { $0 }
        let readError = feed(plan, stages: stages, staging: staging, transport: transport, reading: reading)
        variants?.publish()
        for q in queues { q.close() }
        var gateAtEnd = schedule.gate
        let planFullyRead = !shared.isStopping && !cancellation.isCancelled && readError == nil && gateAtEnd.stoppedAt == nil
        if planFullyRead {
            try journal.append(.plan(records: reading.records, crc32: plan.trailer?.crc32, incomplete: !plan.isComplete))
        }
        pool.joinAll()
        ticker.finish()   // before the run's last records: no tick after its end
        return try finish(plan: plan, transport: transport, reading: reading, gate: &gateAtEnd, readError: readError, lastTickedSecond: ticker.lastJournaledSecond,
                          planFullyRead: planFullyRead, pool: pool, oneQueue: oneQueue, started: started, ledger: ledger)
    }
}
