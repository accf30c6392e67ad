#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import PlanStream
import SendLedger

/// A send's part of the ledger (`send --ledger DIR`): every notification
/// accepted (or presumed delivered) is appended to this send's own segment
/// (`<host>-<journal id>.seg`) as its proof is journaled, before the journal's
/// records of it, with the same write(2) path: a killed send leaves both with
/// the kernel. A resume merges what the journal holds and the ledger lacks
/// (a power loss can lose the segment's last writes before their fsync).
///
/// A plan with a `frequencyCap` asks the ledger again as each notification
/// is released (scheduled or not, in every run, a resume's too): a device
/// that reached the cap since the plan was made (another campaign of the
/// scope sent meanwhile) is skipped, final, with the reason `frequency_capped`.
final class LedgerRecorder: @unchecked Sendable {
    let directory: String
    let writer: LedgerSegmentWriter
    let campaign: String
    let cap: FrequencyCap?
    private let lock = Lock()
    /// Per shard, by ordinal: the token hash of each record read so far.
    private var hashes: [[UInt64]]
    /// On resume: final ordinals that were not accepted (failed, skipped).
    private let notAccepted: Set<Int64>
    private let resumeState: JournalState?
    /// On resume: the devices the ledger shows this campaign reached.
    private var reached: LedgerView?
    /// Entries merged from the journal on resume.
    private(set) var merged = 0
    /// A plan with a cap: the ledger as last read, and when.
    private var capView: LedgerView?
    /// A scheduled plan reads the ledger again each wave and once a minute
    /// (its run may last hours); another, once a run, at its first record.
    private let rereadEveryMinute: Bool
    private var capViewAt: Int64 = 0
    private let log: @Sendable (String) -> Void

    init(directory: String, journalDirectory: String, header: PlanHeader, resumeState: JournalState?,
         log: @escaping @Sendable (String) -> Void) throws {
        self.directory = directory
        campaign = header.campaign
        cap = header.frequencyCap
        rereadEveryMinute = header.schedule != nil
        self.log = log
        writer = try LedgerSegmentWriter(directory: directory, name: LedgerFormat.segmentName(journalDirectory: journalDirectory),
                                         campaign: header.campaign, scope: header.frequencyCap?.scope ?? "")
        hashes = Array(repeating: [], count: header.shards)
        self.resumeState = resumeState
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

    /// A record read from the plan (in order of its shard's ordinals). One
    /// final in the journal and accepted there, but missing from the ledger, is appended now.
    func note(shard: Int, ordinal: Int32, token: UnsafeBufferPointer<UInt8>, alreadyDone: Bool) throws {
        let h = LedgerFormat.tokenHash(token)
        lock.lock()
        if hashes[shard].count == Int(ordinal) { hashes[shard].append(h) }
        lock.unlock()
        guard alreadyDone, let reached, !notAccepted.contains(Int64(shard) << 32 | Int64(ordinal)),
              reached.flags(h) & LedgerView.reachedBit == 0 else { return }
        try writer.append(hashes: [h], seconds: UInt32(clamping: time(nil)))
        merged += 1
    }

    /// Appends the notifications a proof accepted (or presumed delivered).
    func accepted(_ outcome: ProofOutcome) throws {
        guard !outcome.acceptedOrdinals.isEmpty || !outcome.presumedOrdinals.isEmpty else { return }
        var batch: [UInt64] = []
        lock.lock()
        for (shard, ordinals) in outcome.acceptedOrdinals { for o in ordinals where o < hashes[Int(shard)].count { batch.append(hashes[Int(shard)][o]) } }
        for (shard, ordinals) in outcome.presumedOrdinals { for o in ordinals where o < hashes[Int(shard)].count { batch.append(hashes[Int(shard)][o]) } }
        lock.unlock()
        try writer.append(hashes: batch, seconds: UInt32(clamping: time(nil)))
    }

    /// Whether a record may go at `now` under the cap: the ledger is read at
    /// the run's first record, and again when `fresh` (a new wave) or, for a
    /// scheduled plan, once a minute.
    func capAllows(token: UnsafeBufferPointer<UInt8>, now: Int64, fresh: Bool) -> Bool {
        guard let cap else { return true }
        if capView == nil || fresh || (rereadEveryMinute && now - capViewAt >= 60) {
            do {
                capView = try LedgerReader.load(directory: directory, filter: .init(campaign: "", cap: cap, now: UInt32(clamping: now)))
                capViewAt = now
            } catch {
                log("cannot read the ledger to check the frequencyCap at release: \(error); sending as planned")
                capView = LedgerView()
                capViewAt = now
            }
        }
        return Int(capView!.flags(LedgerFormat.tokenHash(token)) & 0x7F) < cap.max
    }

    func sync() throws { try writer.sync() }

    /// The run is over: the segment closed and unlocked (the next run of a waiting send opens it again).
    func close() { writer.close() }
}

extension LedgerRecorder {
    /// The recorder of a send with `--ledger` (none for a broadcast: its tokens are channels), attached to `shared`.
    static func start(settings: SendSettings, journal: Journal, header: PlanHeader, resumeState: JournalState?,
                      shared: SendShared) throws -> LedgerRecorder? {
        guard let directory = settings.ledger else { return nil }
        if header.http2?.broadcast == true {
            shared.log("a broadcast is not recorded in the ledger (--ledger \(directory)): its tokens are channels, not devices")
            return nil
        }
        let recorder = try LedgerRecorder(directory: directory, journalDirectory: journal.directory, header: header,
                                          resumeState: resumeState, log: { shared.log($0) })
        shared.ledger = recorder
        return recorder
    }

    /// A record released now (any record of any run: a resume's, an
    /// unscheduled plan's): skipped (journaled, final, reason
    /// `frequency_capped`) when the ledger shows its device at the cap.
    func skipsAtRelease(_ record: PlanReader.RecordView, ordinal: Int32, freshWave: Bool, shared: SendShared) -> Bool {
        guard cap != nil else { return false }
        let now = Int64(time(nil))
        guard !capAllows(token: record.token, now: now, fresh: freshWave) else { return false }
        var skipped = SkippedNotification(seq: record.seq, shard: record.shard, ordinal: Int(ordinal),
                                          token: Array(record.token), moment: record.at ?? now, skippedAt: now)
        skipped.rule = "frequency_capped"
        shared.recordSkip(skipped)
        return true
    }

    /// At the end of a run: fsync the segment, and say what a resume merged.
    func finish() throws {
        try sync()
        if merged > 0 { log("ledger: \(merged) notification\(merged == 1 ? "" : "s") the journal holds as accepted were missing from the ledger and were added") }
    }
}
