import CampaignSend
import SendJournal
import SendEngine

/// What a send's journal says of each notification, by shard and ordinal:
/// proven (accepted or presumed) and the second it was proven, refused for
/// good, or skipped. The second is the run's clock record plus the last
/// once-a-second tick journaled before the proof, so it is never later than
/// the truth and at most a second earlier.
struct JournalOutcomes {
    /// The first run's start (UNIX seconds): an unscheduled held-out device's moment.
    private(set) var firstStart: Int64?
    private(set) var proven: [Int: [ProvenRange]] = [:]
    private(set) var failed: [Int: Set<Int>] = [:]
    private(set) var skipped: [Int: Set<Int>] = [:]

    struct ProvenRange {
        var ordinals: Range<Int>
        var at: Int64
    }

    init(directory: String) throws {
        var runStart: Int64? = nil
        var lastTick = 0
        var proven: [Int: [ProvenRange]] = [:]
        try Journal.forEachRecord(directory: directory) { record in
            switch record {
            case .start:
                runStart = nil
                lastTick = 0
            case .clock(let seconds):
                if runStart == nil { runStart = Int64(seconds) }
                if firstStart == nil { firstStart = Int64(seconds) }
            case .tick(let tick):
                lastTick = tick.second
            case .done(let shard, let ranges), .presumed(let shard, let ranges):
                // A journal without a clock record (none is written before the
                // run's first): its proofs have no second, and are left unmeasured.
                guard let start = runStart else { return }
                for r in ranges { proven[shard, default: []].append(ProvenRange(ordinals: r, at: start + Int64(lastTick))) }
            case .fail(let f):
                failed[f.shard, default: []].insert(f.ordinal)
            case .skip(let k):
                skipped[k.shard, default: []].insert(k.ordinal)
            default:
                break
            }
        }
        for (shard, ranges) in proven { self.proven[shard] = ranges.sorted { $0.ordinals.lowerBound < $1.ordinals.lowerBound } }
    }

    enum Outcome: Equatable {
        case accepted(at: Int64)
        case failed
        case skipped
        case pending
    }

    /// Looks up ordinals of each shard in increasing order, as a plan holds them.
    struct Cursor {
        private var next: [Int: Int] = [:]

        mutating func outcome(shard: Int, ordinal: Int, in outcomes: JournalOutcomes) -> Outcome {
            if outcomes.failed[shard]?.contains(ordinal) == true { return .failed }
            if outcomes.skipped[shard]?.contains(ordinal) == true { return .skipped }
            guard let ranges = outcomes.proven[shard] else { return .pending }
            var i = next[shard] ?? 0
            while i < ranges.count, ranges[i].ordinals.upperBound <= ordinal { i += 1 }
            next[shard] = i
            // A notification proven twice (sent again after a kill) keeps its first second.
            var at: Int64? = nil
            var j = i
            while j < ranges.count, ranges[j].ordinals.lowerBound <= ordinal {
                if ranges[j].ordinals.contains(ordinal) { at = min(at ?? .max, ranges[j].at) }
                j += 1
            }
            return at.map { .accepted(at: $0) } ?? .pending
        }
    }
}
