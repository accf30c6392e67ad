import CampaignIO
import SendJournal

/// Where every final outcome of a send goes: the proofs a connection
/// reports (accepted, presumed delivered, failed) and the notifications a
/// rule skipped. ``SendShared`` keeps the run's counts and hands each
/// outcome to its sinks in their order (the ledger before the journal, so a
/// notification the journal holds as final is in the ledger); a new count or
/// record of outcomes is one sink: one file, and one line in the list
/// ``Sender`` gives ``SendShared/sinks``.
package protocol OutcomeSink: AnyObject {
    /// A proof's accepted, presumed and failed notifications.
    func proven(_ outcome: ProofOutcome) throws
    /// A notification skipped for good (too late, or at the frequencyCap).
    func skipped(_ notification: SkippedNotification) throws
}

/// The journal's records of outcomes: failures, broadcast ids, the final
/// ordinals of each shard, skips; then the fsync asked of the syncer's
/// thread (the caller does not wait for it).
package final class JournalOutcomes: OutcomeSink {
    package let journal: Journal
    package let syncer: JournalSyncer

    package init(journal: Journal, syncer: JournalSyncer) { (self.journal, self.syncer) = (journal, syncer) }

    package func proven(_ outcome: ProofOutcome) throws {
        for f in outcome.failures { try journal.append(.fail(f)) }
        for ids in outcome.answerIDs { try journal.append(.ids(ids)) }
        for (shard, ordinals) in outcome.acceptedOrdinals { try journal.recordDone(shard: Int(shard), ordinals: ordinals, presumed: false) }
        for (shard, ordinals) in outcome.presumedOrdinals { try journal.recordDone(shard: Int(shard), ordinals: ordinals, presumed: true) }
        try journal.flush()
        try syncer.request()
    }

    package func skipped(_ notification: SkippedNotification) throws {
        try journal.append(.skip(notification))
    }
}

extension VariantTally: OutcomeSink {
    package func proven(_ outcome: ProofOutcome) throws { count(outcome) }
    package func skipped(_ notification: SkippedNotification) throws { countSkip(shard: notification.shard, ordinal: notification.ordinal) }
}

extension LedgerRecorder: OutcomeSink {
    package func proven(_ outcome: ProofOutcome) throws { try accepted(outcome) }
    /// A skip reached nobody: nothing for the ledger.
    package func skipped(_ notification: SkippedNotification) throws {}
}
