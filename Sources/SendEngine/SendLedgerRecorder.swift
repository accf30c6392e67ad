#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import PlanStream
import SendLedger
import SendJournal
import GatewayClient

/// A send's part of the ledger (`send --ledger DIR`): every notification
/// accepted (or presumed delivered) is appended to this send's own segment
/// (`<host>-<journal id>.seg`) as its proof is journaled, before the journal's
/// records of it, with the same write(2) path: a killed send leaves both with
/// the kernel. A resume merges what the journal holds and the ledger lacks
/// (a power loss can lose the segment's last writes before their fsync).
///
/// A plan with a `frequencyCap` is held to it at the wire (``WireCap``): each
/// notification is claimed in the ledger before its bytes leave, checked
/// under the scope's claim lock against every other send's claims
/// (``LedgerClaims``), in every run, a resume's too; a device at the cap is
/// skipped, final, with the reason `frequency_capped`. Its acceptances are
/// then written as proofs, which do not count a second time.
package final class LedgerRecorder: @unchecked Sendable {
    package let directory: String
    package let writer: LedgerSegmentWriter
    package let campaign: String
    package let cap: FrequencyCap?
    /// The cap's claims (a plan with a frequencyCap).
    package let claims: LedgerClaims?
    private let lock = Lock()
    /// Per shard, by ordinal: the token hash of each record read so far.
    private var hashes: [[UInt64]]
    /// On resume: final ordinals that were not accepted (failed, skipped).
    private let notAccepted: Set<Int64>
    /// On resume: the devices the ledger shows this campaign reached.
    private var reached: LedgerView?
    /// Entries merged from the journal on resume.
    package private(set) var merged = 0
    private let clock: SendClock
    private let log: @Sendable (String) -> Void

    package init(directory: String, journalDirectory: String, header: PlanHeader, resumeState: JournalState?, clock: SendClock,
         log: @escaping @Sendable (String) -> Void) throws {
        self.directory = directory
        campaign = header.campaign
        cap = header.frequencyCap
        self.clock = clock
        self.log = log
        let writer = try LedgerSegmentWriter(directory: directory, name: LedgerFormat.segmentName(journalDirectory: journalDirectory),
                                             campaign: header.campaign, scope: header.frequencyCap?.scope ?? "")
        self.writer = writer
        claims = try header.frequencyCap.map {
            try LedgerClaims(directory: directory, cap: $0, campaign: header.campaign, writer: writer, shards: header.shards,
                             resumed: resumeState != nil)
        }
        hashes = Array(repeating: [], count: header.shards)
        var skip = Set<Int64>()
        if let state = resumeState {
            for f in state.failures { skip.insert(Int64(f.shard) << 32 | Int64(f.ordinal)) }
            for k in state.skipped { skip.insert(Int64(k.shard) << 32 | Int64(k.ordinal)) }
            if state.doneCount > 0 {
                reached = try LedgerReader.load(directory: directory, filter: .init(campaign: header.campaign, cap: nil, now: 0))
            }
        }
        notAccepted = skip
    }

    /// What a proof is written as: a proof where the notification was claimed first.
    private var acceptedKind: LedgerFormat.BlockKind { claims == nil ? .entries : .proofs }

    private var seconds: UInt32 { UInt32(clamping: Int64(clock.wallSeconds)) }

    /// A record read from the plan (in order of its shard's ordinals). One
    /// final in the journal and accepted there, but missing from the ledger, is appended now
    /// (as an entry that counts: its claim, if any, may have been lost with it).
    package func note(shard: Int, ordinal: Int32, token: UnsafeBufferPointer<UInt8>, alreadyDone: Bool) throws {
        let h = LedgerFormat.tokenHash(token)
        lock.lock()
        if hashes[shard].count == Int(ordinal) { hashes[shard].append(h) }
        lock.unlock()
        guard alreadyDone, let reached, !notAccepted.contains(Int64(shard) << 32 | Int64(ordinal)),
              reached.flags(h) & LedgerView.reachedBit == 0 else { return }
        try writer.append(hashes: [h], seconds: seconds)
        merged += 1
    }

    /// The token hash of record (`shard`, `ordinal`), read from the plan.
    package func hash(shard: Int32, ordinal: Int32) -> UInt64? {
        lock.lock()
        defer { lock.unlock() }
        let s = Int(shard), o = Int(ordinal)
        return s < hashes.count && o < hashes[s].count ? hashes[s][o] : nil
    }

    /// Appends the notifications a proof accepted (or presumed delivered).
    package func accepted(_ outcome: ProofOutcome) throws {
        guard !outcome.acceptedOrdinals.isEmpty || !outcome.presumedOrdinals.isEmpty else { return }
        var batch: [UInt64] = []
        lock.lock()
        for (shard, ordinals) in outcome.acceptedOrdinals { for o in ordinals where o < hashes[Int(shard)].count { batch.append(hashes[Int(shard)][o]) } }
        for (shard, ordinals) in outcome.presumedOrdinals { for o in ordinals where o < hashes[Int(shard)].count { batch.append(hashes[Int(shard)][o]) } }
        lock.unlock()
        try writer.append(hashes: batch, seconds: seconds, kind: acceptedKind)
    }

    package func sync() throws { try writer.sync() }

    /// The run is over: the segment closed and unlocked (the next run of a waiting send opens it again).
    package func close() { writer.close() }
}

extension LedgerRecorder {
    /// The recorder of a send with `--ledger` (none for a broadcast: its tokens are channels).
    package static func start(settings: SendSettings, journal: Journal, header: PlanHeader, resumeState: JournalState?,
                      shared: SendShared) throws -> LedgerRecorder? {
        guard let directory = settings.ledger else { return nil }
        if header.http2?.broadcast == true {
            shared.log("a broadcast is not recorded in the ledger (--ledger \(directory)): its tokens are channels, not devices")
            return nil
        }
        let recorder = try LedgerRecorder(directory: directory, journalDirectory: journal.directory, header: header,
                                          resumeState: resumeState, clock: shared.clock, log: { shared.log($0) })
        return recorder
    }

    /// At the end of a run: fsync the segment, and say what a resume merged.
    package func finish() throws {
        try sync()
        if let claims, claims.refused > 0 {
            log("ledger: \(claims.refused) device\(claims.refused == 1 ? " was" : "s were") at the frequencyCap (\(cap!.max) per \(cap!.perSeconds) s of scope \(cap!.scope)) when \(claims.refused == 1 ? "its notification was" : "their notifications were") about to be written, and skipped")
        }
        if merged > 0 { log("ledger: \(merged) notification\(merged == 1 ? "" : "s") the journal holds as accepted were missing from the ledger and were added") }
    }
}
