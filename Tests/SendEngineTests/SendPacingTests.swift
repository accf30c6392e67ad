import Testing
@testable import SendEngine

/// `--rate N` over any second of a send: N and a tenth at most, however the
/// send paused before (a bucket of a second's worth let about 2N through).
@Suite struct SendPacingTests {
    /// Takes as fast as it can from `start` (ns) for `seconds` of bucket time, in steps of 1 ms; how many it got.
    static func drain(_ bucket: inout TokenBucket, from start: UInt64, seconds: Double) -> Int {
        var taken = 0
        var now = start
        while now < start + UInt64(seconds * 1e9) {
            while bucket.take(now: now) { taken += 1 }
            now += 1_000_000
        }
        return taken
    }

    @Test(arguments: [4000.0, 500, 20])
    func noSecondGoesOverTheRateByMoreThanATenth(rate: Double) {
        var bucket = TokenBucket(perSecond: rate)
        let first = Self.drain(&bucket, from: 1_000_000_000, seconds: 1)
        #expect(Double(first) <= rate * 1.1 + 1, "first second: \(first) for --rate \(Int(rate))")
        #expect(Double(first) >= rate * 0.95, "and the rate itself goes: \(first)")
        // A pause of 5 s (connecting, a full window) is not caught up afterwards.
        let after = Self.drain(&bucket, from: 7_000_000_000, seconds: 1)
        #expect(Double(after) <= rate * 1.1 + 1, "the second after a pause: \(after) for --rate \(Int(rate))")
    }

    @Test func aSlowRateGoesOneAtATime() {
        var bucket = TokenBucket(perSecond: 2)
        let first = bucket.take(now: 1_000_000_000)
        let second = bucket.take(now: 1_000_000_001)
        let third = bucket.take(now: 1_500_000_001)
        #expect(first && !second && third, "a burst of one, then one each half second")
    }
}
