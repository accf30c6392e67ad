/// Disjoint, sorted half-open ranges of integers: the ordinals of a shard's
/// notifications that are final.
public struct OrdinalRanges: Equatable, Sendable {
    public private(set) var ranges: [Range<Int>] = []

    public init() {}

    public var count: Int { ranges.reduce(0) { $0 + $1.count } }

    public func contains(_ value: Int) -> Bool {
        var lo = 0, hi = ranges.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if ranges[mid].upperBound <= value { lo = mid + 1 } else { hi = mid }
        }
        return lo < ranges.count && ranges[lo].contains(value)
    }

    public mutating func insert(_ range: Range<Int>) {
        guard !range.isEmpty else { return }
        var lo = 0
        while lo < ranges.count, ranges[lo].upperBound < range.lowerBound { lo += 1 }
        var merged = range
        var hi = lo
        while hi < ranges.count, ranges[hi].lowerBound <= merged.upperBound {
            merged = min(merged.lowerBound, ranges[hi].lowerBound)..<max(merged.upperBound, ranges[hi].upperBound)
            hi += 1
        }
        ranges.replaceSubrange(lo..<hi, with: [merged])
    }

    /// Collapses a list of values into ranges.
    public static func ranges(of values: [Int]) -> [Range<Int>] {
        var out: [Range<Int>] = []
        for v in values.sorted() {
            if let last = out.last, last.upperBound == v { out[out.count - 1] = last.lowerBound..<(v + 1) }
            else if let last = out.last, last.contains(v) { continue }
            else { out.append(v..<(v + 1)) }
        }
        return out
    }
}
