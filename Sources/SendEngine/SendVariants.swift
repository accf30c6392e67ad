import CampaignIO
import CampaignJSON
import PlanStream
import SendJournal

/// The variant of every record a send has read, by shard and ordinal (one
/// byte a record), and each variant's counts.
///
/// The plan reader writes a record's variant before the record is queued,
/// so any proof or failure about it finds it; the proofs' thread looks
/// variants up under the lock. A shard's bytes grow under the lock too, so
/// a lookup never sees them move; writes below a shard's capacity take no lock.
package final class VariantTally: @unchecked Sendable {
    package let names: [String]
    /// Header index → index in ``names`` (holdouts have none, and no records).
    package let indexOfHeaderVariant: [Int]
    private let lock = Lock()
    private var shards: [UnsafeMutablePointer<UInt8>?]
    private var capacities: [Int]
    private var planned: [Int]
    private var accepted: [Int]
    private var failed: [Int]
    private var skipped: [Int]

    /// Nil for a plan without variants.
    package init?(header: PlanHeader) {
        guard !header.variants.isEmpty else { return nil }
        var names: [String] = [], index: [Int] = []
        for v in header.variants {
            index.append(v.holdout ? -1 : names.count)
            if !v.holdout { names.append(v.name) }
        }
        self.names = names
        indexOfHeaderVariant = index
        shards = Array(repeating: nil, count: header.shards)
        capacities = Array(repeating: 0, count: header.shards)
        planned = Array(repeating: 0, count: names.count)
        accepted = planned
        failed = planned
        skipped = planned
    }

    deinit { for p in shards { p?.deallocate() } }

    /// The plan reader's thread: record (`shard`, `ordinal`) is of variant `v` (an index in ``names``).
    @inline(__always)
    package func set(shard: Int, ordinal: Int, variant v: Int) {
        if ordinal >= capacities[shard] { grow(shard: shard, toHold: ordinal) }
        shards[shard]![ordinal] = UInt8(truncatingIfNeeded: v)
    }

    private func grow(shard: Int, toHold ordinal: Int) {
        lock.lock()
        defer { lock.unlock() }
        let capacity = max(1024, capacities[shard] * 2, ordinal + 1)
        let bytes = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity)
        if let old = shards[shard] {
            bytes.update(from: old, count: capacities[shard])
            old.deallocate()
        }
        shards[shard] = bytes
        capacities[shard] = capacity
    }

    private func variant(shard: Int, ordinal: Int) -> Int? {
        guard shard >= 0, shard < shards.count, ordinal >= 0, ordinal < capacities[shard], let bytes = shards[shard] else { return nil }
        return Int(bytes[ordinal])
    }

    /// A proof's accepted, presumed and failed records.
    package func count(_ outcome: ProofOutcome) {
        lock.lock()
        defer { lock.unlock() }
        for (shard, ordinals) in outcome.acceptedOrdinals {
            for o in ordinals { if let v = variant(shard: Int(shard), ordinal: o) { accepted[v] += 1 } }
        }
        for (shard, ordinals) in outcome.presumedOrdinals {
            for o in ordinals { if let v = variant(shard: Int(shard), ordinal: o) { accepted[v] += 1 } }
        }
        for f in outcome.failures {
            if let v = variant(shard: f.shard, ordinal: f.ordinal) { failed[v] += 1 }
        }
    }

    /// A record skipped (late, or by a rule at release).
    package func countSkip(shard: Int, ordinal: Int) {
        lock.lock()
        defer { lock.unlock() }
        if let v = variant(shard: shard, ordinal: ordinal) { skipped[v] += 1 }
    }

    /// The plan reader's counts: planned records read, and those a
    /// previous run finished, accepted, failed or skipped (a resume).
    package func add(planned p: [Int], acceptedBefore a: [Int], failedBefore f: [Int], skippedBefore k: [Int]) {
        lock.lock()
        defer { lock.unlock() }
        for i in names.indices {
            planned[i] += p[i]
            accepted[i] += a[i]
            failed[i] += f[i]
            skipped[i] += k[i]
        }
    }

    package var counts: [VariantCounts] {
        lock.lock()
        defer { lock.unlock() }
        return names.indices.map { VariantCounts(name: names[$0], planned: planned[$0], accepted: accepted[$0], failed: failed[$0], skipped: skipped[$0]) }
    }
}

extension SendReport {
    /// These counts with `tally`'s per variant (unchanged without one).
    /// `planTotals` (the plan trailer's records per header variant, when
    /// known) are each variant's planned, so they add up to the plan's
    /// records whether or not this run read it all (a scheduled run stops at
    /// its next moment; a stopped one wherever it was).
    package func with(_ tally: VariantTally?, planTotals: [Int]? = nil) -> SendReport {
        guard let tally else { return self }
        var r = self
        r.variants = tally.counts
        if let planTotals {
            for (h, v) in tally.indexOfHeaderVariant.enumerated() where v >= 0 && h < planTotals.count {
                r.variants[v].planned = planTotals[h]
            }
        }
        return r
    }
}

/// The plan reader's side of a tally: counts kept locally and handed over now and then.
package struct VariantReading {
    package let tally: VariantTally
    package var planned: [Int]
    package var acceptedBefore: [Int]
    package var failedBefore: [Int]
    package var skippedBefore: [Int]
    /// A resume: the records a previous run finished; those it failed or skipped, as shard << 32 | ordinal.
    package let done: [Int: OrdinalRanges]
    package let failedKeys: Set<Int>
    package let skippedKeys: Set<Int>
    private var sincePublished = 0

    package init(tally: VariantTally, before: JournalState?) {
        self.tally = tally
        planned = Array(repeating: 0, count: tally.names.count)
        acceptedBefore = planned
        failedBefore = planned
        skippedBefore = planned
        done = before?.done ?? [:]
        failedKeys = Set((before?.failures ?? []).map { $0.shard << 32 | $0.ordinal })
        skippedKeys = Set((before?.skipped ?? []).map { $0.shard << 32 | $0.ordinal })
    }

    /// A record read (and, every 1024, the counts handed over).
    package mutating func read(shard: Int, ordinal: Int, headerVariant: Int) {
        guard headerVariant >= 0 else { return }
        let v = tally.indexOfHeaderVariant[headerVariant]
        guard v >= 0 else { return }
        planned[v] += 1
        sincePublished += 1
        if sincePublished == 1024 { publish() }
        if !done.isEmpty, done[shard]?.contains(ordinal) == true {
            let key = shard << 32 | ordinal
            if failedKeys.contains(key) { failedBefore[v] += 1 } else if skippedKeys.contains(key) { skippedBefore[v] += 1 } else { acceptedBefore[v] += 1 }
        } else {
            tally.set(shard: shard, ordinal: ordinal, variant: v)
        }
    }

    /// Hands the counts so far to the tally.
    package mutating func publish() {
        sincePublished = 0
        tally.add(planned: planned, acceptedBefore: acceptedBefore, failedBefore: failedBefore, skippedBefore: skippedBefore)
        for i in planned.indices { planned[i] = 0; acceptedBefore[i] = 0; failedBefore[i] = 0; skippedBefore[i] = 0 }
    }
}
