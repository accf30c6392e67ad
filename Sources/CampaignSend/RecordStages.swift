import CampaignIO
import PlanStream
import LocalTime
import SendJournal
import SendEngine

/// What one stage of the plan reader says of a record.
enum RecordVerdict {
    /// Nothing against it: the next stage asks (after the last, it is queued).
    case pass
    /// Taken care of here (already final, skipped, deferred): not queued.
    case settled
    /// Not now, and the run reads no further (a scheduled moment beyond the hold).
    case later
}

/// A record as it goes through the stages: its ordinal in its shard, and
/// what the stages found out for the connection (its zone's number).
struct RecordInProgress {
    let ordinal: Int32
    var zone: Int32 = -1
}

/// One stage of a run's record chain (``Sender/feed(_:stages:staging:transport:counts:)``):
/// every record of every run passes the stages in order, and one that every
/// stage passes is queued. A new rule is a new stage: one file, and one line
/// in the list ``Sender`` builds. (The connection asks the rest as it takes
/// a frame to write it: ``WireRelease``, ``WireCap``.)
protocol RecordStage: AnyObject {
    func admit(_ record: PlanReader.RecordView, _ progress: inout RecordInProgress) throws -> RecordVerdict
}

/// What a run's reader counted: records read, those an earlier run finished, waves released.
final class RunReading {
    var records = 0
    var alreadyDone = 0
    var waves = 0
}

/// Each record's variant, noted as it is read so a proof about it finds it
/// (and counted: planned, and what an earlier run made of it).
final class VariantStage: RecordStage {
    private var reading: VariantReading

    init?(tally: VariantTally?, before: JournalState?) {
        guard let tally else { return nil }
        reading = VariantReading(tally: tally, before: before)
    }

    func admit(_ record: PlanReader.RecordView, _ progress: inout RecordInProgress) throws -> RecordVerdict {
        reading.read(shard: record.shard, ordinal: Int(progress.ordinal), headerVariant: record.variant)
        return .pass
    }

    /// Hands the last counts to the tally (the run read what it will).
    func publish() { reading.publish() }
}

/// What an earlier run made final is not sent again. The ledger is told of
/// every record (its token's hash, for the proofs to come; one the journal
/// holds as accepted and the ledger lacks, appended now).
final class ResumeStage: RecordStage {
    private let state: JournalState?
    private let ledger: LedgerRecorder?
    private let reading: RunReading

    /// Nil for a first run without a ledger: nothing to ask of a record.
    init?(state: JournalState?, ledger: LedgerRecorder?, reading: RunReading) {
        guard state != nil || ledger != nil else { return nil }
        (self.state, self.ledger, self.reading) = (state, ledger, reading)
    }

    func admit(_ record: PlanReader.RecordView, _ progress: inout RecordInProgress) throws -> RecordVerdict {
        let isDone = state?.done[record.shard]?.contains(Int(progress.ordinal)) ?? false
        try ledger?.note(shard: record.shard, ordinal: progress.ordinal, token: record.token, alreadyDone: isDone)
        guard isDone else { return .pass }
        reading.alreadyDone += 1
        return .settled
    }
}

/// A scheduled record waits for its moment (with the connections open, up
/// to the hold; beyond it the run ends `scheduled`), and is then released,
/// deferred to the end of its device's quiet hours, or skipped as too late.
final class ScheduleStage: RecordStage {
    private(set) var gate: ScheduleGate
    private let staging: StagedFrames
    private let shared: SendShared
    private let reading: RunReading
    private let logger: @Sendable (String) -> Void

    init(gate: ScheduleGate, staging: StagedFrames, shared: SendShared, reading: RunReading, logger: @escaping @Sendable (String) -> Void) {
        (self.gate, self.staging, self.shared, self.reading, self.logger) = (gate, staging, shared, reading, logger)
    }

    func admit(_ record: PlanReader.RecordView, _ progress: inout RecordInProgress) throws -> RecordVerdict {
        guard let at = record.at else { return .pass }
        let (journal, clock, logger, staging, shared) = (shared.journal, shared.clock, logger, staging, shared)
        switch gate.admit(at: at, timeZone: record.timeZone, handOver: { moment in
            _ = staging.handOverAll()
            // A wait is said, and journaled for `status`; "connections open" only
            // once some are (the connections dial when the first wave is released).
            if Double(moment) - clock.wallSeconds >= 2 {
                logger("waiting until \(utcText(moment)) for the next notifications\(shared.hasConnected ? " (connections open)" : "")")
                do { try journal.append(.wait(untilUnixSeconds: Int(moment))); try journal.checkpoint() } catch { shared.journalFailed(error) }
            }
        }, halt: shared.halt) {
        case .send(let zone): progress.zone = zone
        case .later: return .later
        case .deferred: return .settled
        case .skip(let now):
            shared.recordSkip(SkippedNotification(seq: record.seq, shard: record.shard, ordinal: Int(progress.ordinal),
                                                  token: Array(record.token), moment: at, skippedAt: now))
            return .settled
        }
        if let wave = gate.takeWave() {
            try? journal.append(.wave(moment: Int(wave), unixSeconds: Int(clock.wallSeconds)))
            reading.waves += 1
        }
        return .pass
    }
}
