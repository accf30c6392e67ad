#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import PlanStream
import SendEngine

extension Sender {
    /// Reads the plan on the calling thread, asks each record of `stages` in
    /// order, and queues (encoded) the ones they all pass; stops at a stage's
    /// `later`, at a stop or cancel, or when the plan ends. Returns the error
    /// that ended the reading, if any.
    func feed<Transport: NotificationTransport>(_ plan: PlanReader, stages: [any RecordStage], staging: StagedFrames,
                                                transport: Transport, reading: RunReading) -> Error? {
        var ordinals = [Int32](repeating: 0, count: plan.header.shards)
        plan.beforeRead = { _ = staging.handOverAll() }
        defer { plan.beforeRead = nil }
        let clock = shared.clock
        do {
            let (connections, parts) = (staging.queueCount, plan.header.part?.count ?? 1)
            var more = true
            var sinceCheck = 0
            while more {
                sinceCheck += 1
                if sinceCheck & 255 == 0, shared.isStopping || cancellation.isCancelled { break }
                var pushed = true
                more = try plan.nextView { record in
                    reading.records += 1
                    if reading.records & 1023 == 0 { published(read: reading.records, alreadyDone: reading.alreadyDone) }
                    var progress = RecordInProgress(ordinal: ordinals[record.shard])
                    ordinals[record.shard] += 1
                    for stage in stages {
                        switch try stage.admit(record, &progress) {
                        case .pass: continue
                        case .settled: return
                        case .later:
                            pushed = false
                            return
                        }
                    }
                    let queue = connections == 1 ? 0 : transport.queue(forShard: record.shard, parts: parts, queues: connections)
                    pushed = staging.append(to: queue, seq: record.seq, shard: Int32(record.shard), ordinal: progress.ordinal,
                                            moment: record.at ?? 0, zone: progress.zone) { bytes in
                        // Encoded as the reader releases it: a scheduled record's expiry counts from now.
                        transport.encode(record, sentAt: record.at == nil ? 0 : Int64(clock.wallSeconds), to: &bytes)
                    }
                }
                if !pushed { break }
            }
            if !staging.handOverAll() { logger("stopped before every notification read from the plan was queued") }
            published(read: reading.records, alreadyDone: reading.alreadyDone)
            return nil
        } catch {
            logger("the plan cannot be read further: \(error)")
            _ = staging.handOverAll()
            published(read: reading.records, alreadyDone: reading.alreadyDone)
            return error
        }
    }

    /// The run's report, from the books its outcomes reached (``SendShared``),
    /// what its reader counted and where its schedule stopped; and the run's
    /// last journal records (the end), the store and the ledger brought up to date.
    func finish<Transport: NotificationTransport>(plan: PlanReader, transport: Transport, reading: RunReading, gate: inout ScheduleGate,
                                                  readError: Error?, lastTickedSecond: Int, planFullyRead: Bool, pool: ConnectionPool, oneQueue: Bool,
                                                  started: UInt64, ledger: LedgerRecorder?) throws -> SendReport {
        let clock = shared.clock
        var report = SendReport()
        report.planRecords = reading.records
        report.alreadyDone = reading.alreadyDone
        report.waves = reading.waves
        if shared.failureReason == nil, shared.parkedNotifications > 0 {
            shared.fail(.notificationsParked(count: shared.parkedNotifications))
        }
        let pendingNote = transport.settle(shared)
        shared.syncer.stop()

        let counts = shared.report
        report.skipped = counts.skipped
        report.skippedFrequencyCapped = counts.skippedFrequencyCapped
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
        // The run's last, partial second (all of a run shorter than a
        // second) is journaled too, with what the run ended with: the page's
        // timeline ends at the run's counts, and `status` tells the
        // connections and the round trip the report does.
        let lastSecond = max(1, Int((Double(clock.now - started) / 1e9).rounded(.up)))
        if lastSecond > lastTickedSecond {
            try? journal.append(.tick(.init(second: lastSecond, counts: counts, open: oneQueue ? report.poolConnections : nil,
                                            roundTripMilliseconds: report.roundTripMilliseconds)))
        }
        report = report.with(shared.variants, planTotals: plan.trailer?.variants ?? planVariants)
        if !report.variants.isEmpty { try? journal.append(.variants(report.variants)) }

        // Read in this run and neither final nor skipped: pending for a reason below, or a defect.
        let unsettled = max(0, report.planRecords - report.alreadyDone - report.accepted - report.presumed - report.failed - report.skipped)
        if let failure = shared.failureReason {
            switch failure {
            case .credentials, .credentialRefused: report.outcome = .credentials
            case .unreachable, .unproductive, .speaksHTTP2, .serverTrouble, .notificationsParked, .accountState, .providerTokenRefused, .ledgerBusy: report.outcome = .gaveUp
            case .malformedRequests: report.outcome = .malformed
            }
            var notes = [pendingNote].compactMap { $0 }
            if report.outcome == .gaveUp {
                // What the stop left for the resume, so the operator knows its size.
                notes.append("\(unsettled) notification\(unsettled == 1 ? "" : "s")\(planFullyRead ? "" : " read so far") left pending"
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
        } else if planFullyRead, unsettled > 0 {
            // Every record read is final, skipped, or left for a reason
            // named above; one that is none of these is a defect, and a run
            // that ends 0 ("every notification has a final outcome") must not hide it.
            report.outcome = .gaveUp
            report.message = "\(unsettled) notification\(unsettled == 1 ? " was" : "s were") neither proven nor refused nor left for a reason in this run; `campaign send --resume \(journal.directory)` sends \(unsettled == 1 ? "it" : "them")"
        }
        try journal.append(.sent(below: Dictionary(uniqueKeysWithValues: shared.sentBelowByShard.map { (Int($0.key), Int($0.value)) })))
        try journal.append(.counters(resends: report.resends, duplicatesRisked: counts.duplicatesRisked - shared.duplicatesRiskedJournaled,
                                     reconnects: report.reconnects,
                                     resentByKind: report.resentByKind))
        // One measure of the run's time, for its end record and its report (`status` and the report agree to the millisecond).
        report.seconds = Double(clock.now - started) / 1e9
        try journal.append(.end(outcome: report.outcome, seconds: report.seconds))
        try journal.checkpoint()
        try updateFeedbackStore()
        try ledger?.finish()
        report.wholeSend = SendTotals(before: resumeState, run: report)
        return report
    }
}
