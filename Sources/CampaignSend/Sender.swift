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
                            queued: _staging?.handedOver.load(ordering: .relaxed) ?? 0)
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

    private func published(read: Int, alreadyDone: Int) {
        readMutex.lock()
        _recordsRead = read
        _alreadyDone = alreadyDone
        readMutex.unlock()
    }
    private var _recordsRead = 0
    private var _alreadyDone = 0
    private var _staging: StagedFrames?
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
        // Over HTTP/2 a run that ended (its end record written) counted each
        // notification it left open on a lost connection, once; the rest it
        // handed over were answered as not processed (403, 429, 5xx, refused
        // streams). Only a run that was killed leaves some uncounted.
        // A binary run that ended because the rest was scheduled later had
        // every notification it sent proven; the ones it held back were never sent.
        let countedByTheLastRun = state.outcome != nil && (scan.header.wire.anEndedRunCountedItsUnanswered || state.outcome == .scheduled)
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
        let clock = shared.clock
        let started = clock.now
        // The run's wall-clock start, for the page (its ticks count seconds from here).
        try journal.append(.clock(unixSeconds: Int(clock.wallSeconds)))
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
        var gate = ScheduleGate(schedule: plan.header.schedule, dueOnly: dueOnly, holdOpenSeconds: holdOpenSeconds, clock: shared.clock)
        // Quiet hours and `late: skip` are asked again as each frame is taken to be written.
        let release = gate.rule.flatMap { $0.checksWhenDue ? WireRelease(rule: $0, zones: gate.zones, token: transport.tokenInFrame) : nil }
        // The frequencyCap likewise, claimed in the ledger as each frame is taken.
        let cap = ledger.flatMap { recorder in recorder.claims.map { WireCap(recorder: recorder, claims: $0, token: transport.tokenInFrame) } }
        let pool = ConnectionPool(maximum: oneQueue ? max(settings.connections, settings.maxConnections ?? 0) : settings.connections) { [shared, settings] index in
            transport.makeWorker(engine: ConnectionEngine(index: index, queue: queues[oneQueue ? 0 : index], shared: shared,
                                                          settings: settings, shards: plan.header.shards, release: release, cap: cap))
        }
        let growable = pool.maximum > settings.connections
        shared.syncer.start()
        defer { shared.syncer.stop() }
        // The run's timeline: its counts journaled once a second, for `status
        // --html`; and, twice a second, whether the pool should grow.
        let tickerStop = try CancellationPipe()
        let outageLimit = settings.outageLimitSeconds
        let rateLimit = settings.rate
        let ticker = startThread { [shared, self] in
            var tick = 0
            var answeredBefore = 0
            var sizer = PoolSizer(maximum: pool.maximum)
            var secondsRoundTrip: UInt64?
            let every = PoolSizer.tickSeconds
            while clock.sleep(seconds: Double(tick + 1) * every - Double(clock.now - started) / 1e9, cancellation: tickerStop) {
                tick += 1
                let c = shared.report
                let answered = c.accepted + c.presumed + c.failed
                var (sample, roundTrip) = pool.sample()
                sample.rate = Double(answered - answeredBefore) / every
                answeredBefore = answered
                sample.trouble = shared.inTrouble
                sample.rateCapped = rateLimit > 0 && sample.rate >= 0.9 * Double(rateLimit)
                if let r = roundTrip { secondsRoundTrip = min(secondsRoundTrip ?? r, r) }
                if growable, !shared.isStopping {
                    let change = sizer.next(sample)
                    if change < 0 {
                        pool.retire(-change)
                        shared.poolResized(to: pool.size)
                        logger("connections: \(sample.size) → \(pool.size) (the last step did not raise the rate: \(Int(sample.rate))/s; the connections it added finish what they hold and close)")
                    } else if change > 0, case let added = pool.add(change), added > 0 {
                        shared.poolResized(to: pool.size)
                        logger("connections: \(sample.size) → \(pool.size) (\(Int(sample.rate))/s, \(Int(sample.bound * 100))% of the time held back by the server's window or stream limit\(roundTrip.map { ", round trip \(Int((Double($0) / 1e6).rounded())) ms" } ?? ""))")
                    }
                }
                guard tick % Int((1 / every).rounded()) == 0 else { continue }
                let second = Int((Double(tick) * every).rounded())
                shared.checkOutage(limitSeconds: outageLimit)
                // 410s reach the store while the send runs, not only at its end
                // (they are journaled too, and any later run merges them all).
                if second % Self.storeMergeSeconds == 0 { mergeSuppressions() }
                let milliseconds = secondsRoundTrip.map { Double($0) / 1e6 }
                secondsRoundTrip = nil
                if let milliseconds { shared.noteRoundTrip(milliseconds: milliseconds) }
                try? shared.journal.append(.tick(.init(second: second, counts: c, open: oneQueue ? min(pool.size, c.reconnects) : nil,
                                                        roundTripMilliseconds: milliseconds)))
                if let tally = shared.variants { try? shared.journal.append(.variants(tally.counts)) }
            }
            // A send shorter than a second still tells its round trip: what its last, partial second measured.
            if let r = pool.sample().roundTrip { secondsRoundTrip = min(secondsRoundTrip ?? r, r) }
            if shared.roundTripMilliseconds == nil, let r = secondsRoundTrip { shared.noteRoundTrip(milliseconds: Double(r) / 1e6) }
        }
        var tickerRunning = true
        func stopTicker() {
            guard tickerRunning else { return }
            tickerRunning = false
            tickerStop.cancel()
            pthread_join(ticker, nil)
        }
        defer { stopTicker() }
        pool.add(settings.connections)

        var report = SendReport()
        var ordinals = [Int32](repeating: 0, count: plan.header.shards)
        var reading = shared.variants.map { VariantReading(tally: $0, before: resumeState) }
        var readError: Error? = nil
        // Frames are handed to each connection in batches; a batch goes early
        // when the plan reader is about to wait for input, so a slow upstream
        // never holds back what was already read.
        let staging = StagedFrames(queues: queues, cancellation: cancellation)
        readMutex.withLock { _staging = staging }
        plan.beforeRead = { _ = staging.handOverAll() }
        defer { plan.beforeRead = nil }
        do {
            let (connections, parts) = (queues.count, plan.header.part?.count ?? 1)
            var more = true
            var sinceCheck = 0
            while more {
                sinceCheck += 1
                if sinceCheck & 255 == 0, shared.isStopping || cancellation.isCancelled { break }
                var pushed = true
                more = try plan.nextView { record in
                    report.planRecords += 1
                    if report.planRecords & 1023 == 0 { published(read: report.planRecords, alreadyDone: report.alreadyDone) }
                    let ordinal = ordinals[record.shard]
                    ordinals[record.shard] += 1
                    if reading != nil { reading!.read(shard: record.shard, ordinal: Int(ordinal), headerVariant: record.variant) }
                    let isDone = resumeState?.done[record.shard]?.contains(Int(ordinal)) ?? false
                    try ledger?.note(shard: record.shard, ordinal: ordinal, token: record.token, alreadyDone: isDone)
                    if isDone {
                        report.alreadyDone += 1
                        return
                    }
                    var zone: Int32 = -1
                    if let at = record.at {
                        switch gate.admit(at: at, timeZone: record.timeZone, handOver: { moment in
                            _ = staging.handOverAll()
                            // A wait with the connections open is said, and journaled for `status`.
                            if Double(moment) - clock.wallSeconds >= 2 {
                                logger("waiting until \(utcText(moment)) for the next notifications (connections open)")
                                do { try journal.append(.wait(untilUnixSeconds: Int(moment))); try journal.checkpoint() } catch { shared.journalFailed(error) }
                            }
                        }, halt: shared.halt) {
                        case .send(let z): zone = z
                        case .later:
                            pushed = false
                            return
                        case .deferred:
                            return
                        case .skip(let now):
                            shared.recordSkip(SkippedNotification(seq: record.seq, shard: record.shard, ordinal: Int(ordinal),
                                                                  token: Array(record.token), moment: at, skippedAt: now))
                            return
                        }
                        if let wave = gate.takeWave() {
                            try? journal.append(.wave(moment: Int(wave), unixSeconds: Int(clock.wallSeconds)))
                            report.waves += 1
                        }
                    }
                    let queue = connections == 1 ? 0 : transport.queue(forShard: record.shard, parts: parts, queues: connections)
                    pushed = staging.append(to: queue, seq: record.seq, shard: Int32(record.shard), ordinal: ordinal,
                                            moment: record.at ?? 0, zone: zone) { bytes in
                        // Encoded as the reader releases it: a scheduled record's expiry counts from now.
                        transport.encode(record, sentAt: record.at == nil ? 0 : Int64(clock.wallSeconds), to: &bytes)
                    }
                }
                if !pushed { break }
            }
            if !staging.handOverAll() { logger("stopped before every notification read from the plan was queued") }
        } catch {
            readError = error
            logger("the plan cannot be read further: \(error)")
            _ = staging.handOverAll()
        }
        published(read: report.planRecords, alreadyDone: report.alreadyDone)
        reading?.publish()
        for q in queues { q.close() }
        let planFullyRead = !shared.isStopping && !cancellation.isCancelled && readError == nil && gate.stoppedAt == nil
        if planFullyRead {
            try journal.append(.plan(records: report.planRecords, crc32: plan.trailer?.crc32, incomplete: !plan.isComplete))
        }
        pool.joinAll()
        stopTicker()   // before the run's last records: no tick after its end
        if shared.failureReason == nil, shared.parkedNotifications > 0 {
            shared.fail(.notificationsParked(count: shared.parkedNotifications))
        }
        let pendingNote = transport.settle(shared)
        shared.syncer.stop()

        let counts = shared.report
        report.skipped = counts.skipped
        let (heldAtTheWire, quietUntil) = shared.deferredAtTheWire
        if let until = quietUntil { gate.noteDeferred(count: heldAtTheWire, until: until) }
        report.wire = plan.header.wire
        report.accepted = counts.accepted
        report.presumed = counts.presumed
        report.failedByStatus = counts.failedByStatus
        report.failedByReason = counts.failedByReason
        report.resentByKind = counts.resentByKind
        report.resends = counts.resends
        report.duplicatesRisked = counts.duplicatesRisked + duplicatesRiskedBeforeThisRun
        report.reconnects = counts.reconnects
        report.drops = counts.drops
        report.shutdowns = counts.shutdowns
        report.poolConnections = min(pool.size, counts.reconnects)   // a worker that never connected is no connection
        report.planTotal = planFullyRead ? report.planRecords : planTotal
        report.roundTripMilliseconds = shared.roundTripMilliseconds
        // A run shorter than its first journaled second still tells `status`
        // the connections it opened and the round trip it measured.
        if oneQueue, Double(clock.now - started) / 1e9 < 1 {
            try? journal.append(.tick(.init(second: 1, counts: counts, open: report.poolConnections,
                                            roundTripMilliseconds: report.roundTripMilliseconds)))
        }
        report = report.with(shared.variants, planTotals: plan.trailer?.variants ?? planVariants)
        if !report.variants.isEmpty { try? journal.append(.variants(report.variants)) }

        if let failure = shared.failureReason {
            switch failure {
            case .credentials, .credentialRefused: report.outcome = .credentials
            case .unreachable, .unproductive, .serverTrouble, .notificationsParked, .accountState, .providerTokenRefused: report.outcome = .gaveUp
            case .malformedRequests: report.outcome = .malformed
            }
            var notes = [pendingNote].compactMap { $0 }
            if report.outcome == .gaveUp {
                // What the stop left for the resume, so the operator knows its size.
                let pending = max(0, report.planRecords - report.alreadyDone - report.accepted - report.presumed - report.failed - report.skipped)
                notes.append("\(pending) notification\(pending == 1 ? "" : "s")\(planFullyRead ? "" : " read so far") left pending"
                             + (planFullyRead ? "" : ", and the rest of the plan"))
            }
            report.message = failure.sentence(journal: journal.directory) + (notes.isEmpty ? "" : " (" + notes.joined(separator: "; ") + ")")
        } else if shared.journalFailure != nil || cancellation.isCancelled || shared.isStopping {
            report.outcome = shared.journalFailure == nil ? stoppedAs() : .interrupted
        } else if let next = gate.nextMoment, readError == nil {
            report.outcome = .scheduled
            report.nextMoment = next
            report.deferred = gate.deferred
            report.nextMomentEndsQuietHours = gate.nextMomentEndsQuietHours
        } else if readError != nil || !plan.isComplete {
            report.outcome = .incompletePlan
            report.message = readError.map { "\($0)" } ?? (settings.planPath == nil
                ? "the plan has no trailer: it was cut short upstream; everything it held was sent (if the planner was killed, plan again into `campaign send --resume DIR --replan`)"
                : "the plan has no trailer: it was cut short upstream; everything it held was sent")
        }
        try journal.append(.sent(below: Dictionary(uniqueKeysWithValues: shared.sentBelowByShard.map { (Int($0.key), Int($0.value)) })))
        try journal.append(.counters(resends: report.resends, duplicatesRisked: counts.duplicatesRisked, reconnects: report.reconnects,
                                     resentByKind: report.resentByKind))
        try journal.append(.end(outcome: report.outcome))
        try journal.checkpoint()
        try updateFeedbackStore()
        try ledger?.finish()
        report.seconds = Double(clock.now - started) / 1e9
        report.wholeSend = SendTotals(before: resumeState, run: report)
        return report
    }
}
