/// Which variant a device is in: a pure function of the campaign name and
/// the token's bytes, the same in every plan, part and machine.
///
/// `h` = FNV-1a-64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3)
/// over the campaign name's UTF-8 bytes, one 0x00 byte, then the token's
/// bytes; `x` = the high 64 bits of `h × total` (total: the weights' sum),
/// so `x` is in [0, total) with a bias below total / 2^64; the variant is
/// the first, in job order, whose running sum of weights exceeds `x`.
public struct VariantAssigner: Sendable {
    /// FNV-1a's state after the campaign name and the separator.
    private let seed: UInt64
    private let total: UInt64
    /// Running sums of the weights, in job order.
    private let bounds: [UInt64]

    public init(campaign: String, weights: [Int]) {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for b in campaign.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        h = (h ^ 0) &* 0x100_0000_01B3
        seed = h
        var sum: UInt64 = 0
        bounds = weights.map { sum += UInt64($0); return sum }
        total = sum
    }

    /// The index of `token`'s variant.
    @inline(__always)
    public func variant(of token: UnsafeBufferPointer<UInt8>) -> Int {
        var h = seed
        for b in token { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        let x = h.multipliedFullWidth(by: total).high
        var i = 0
        while bounds[i] <= x { i += 1 }
        return i
    }

    public func variant(of token: [UInt8]) -> Int { token.withUnsafeBufferPointer { variant(of: $0) } }
}
