import CampaignIO
import SendLedger
import SendJournal

/// A plan's `frequencyCap`, asked as a connection takes frames to write them
/// (beside ``WireRelease``): under the scope's claim lock, each device below
/// the cap is claimed in the ledger before its bytes can leave, and one at
/// the cap is not written but skipped, final, as `frequency_capped`. Asked
/// of every frame of every run (a resume's, a next wave's), so a campaign of
/// the scope that went out meanwhile, or goes out at the same moment, is seen.
package final class WireCap: Sendable {
    package let claims: LedgerClaims
    package let recorder: LedgerRecorder
    /// The device token inside an encoded frame (the transport's layout).
    package let token: @Sendable (UnsafeBufferPointer<UInt8>) -> [UInt8]

    package init(recorder: LedgerRecorder, claims: LedgerClaims, token: @escaping @Sendable (UnsafeBufferPointer<UInt8>) -> [UInt8]) {
        (self.recorder, self.claims, self.token) = (recorder, claims, token)
    }

    /// A frame kept back at the cap.
    package struct Capped {
        package var frame: QueuedFrame
        package var token: [UInt8]
    }

    /// Takes the claim lock and reads what other sends claimed meanwhile;
    /// false when it could not (stopping, or the lock held elsewhere too
    /// long: then the send stops, resumable): nothing may be taken, as
    /// nothing may go out unclaimed. ``end(now:capped:shared:)`` follows either way.
    package func begin(now: Int64, shared: SendShared) -> Bool {
        switch claims.begin(now: now, stopped: { shared.isStopping }) {
        case .locked: return true
        case .notLocked(let waited):
            if !shared.isStopping { shared.fail(.ledgerBusy(lock: claims.lockPath, seconds: waited)) }
            return false
        }
    }

    /// Whether `frame` may be written; if not, it is added to `capped`.
    package func admit(_ frame: QueuedFrame, bytes: UnsafeBufferPointer<UInt8>, capped: inout [Capped]) -> Bool {
        // The hash the plan reader noted for the record (every record is noted before it is queued).
        let hash = recorder.hash(shard: frame.shard, ordinal: frame.ordinal) ?? LedgerFormat.tokenHash(token(bytes))
        if claims.admit(hash: hash, shard: frame.shard, ordinal: frame.ordinal) { return true }
        capped.append(Capped(frame: frame, token: token(bytes)))
        return false
    }

    /// Writes the claims of the frames taken (before any is written) and lets the lock go;
    /// journals the ones kept back as skipped.
    package func end(now: Int64, capped: [Capped], shared: SendShared) {
        do { try claims.end(now: now) } catch { shared.journalFailed(error) }
        for c in capped {
            var skipped = SkippedNotification(seq: c.frame.seq, shard: Int(c.frame.shard), ordinal: Int(c.frame.ordinal),
                                              token: c.token, moment: c.frame.moment != 0 ? c.frame.moment : now, skippedAt: now)
            skipped.rule = "frequency_capped"
            shared.recordSkip(skipped)
        }
    }
}
