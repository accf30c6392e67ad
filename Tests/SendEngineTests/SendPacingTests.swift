import Testing
import CampaignTestSupport
@testable import SendEngine

/// `--rate N` over any second of a send: the bucket spreads it (bursts of a
/// tenth of a second's worth at most, however the send paused before: a
/// bucket of a second's worth let about 2N through), and the ceiling holds
/// every second, from any moment, to N.
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

    /// Parts of a campaign start at once, each with a bucket of its share:
    /// none begins with a burst, so their first second holds the campaign's rate.
    @Test func bucketsStartedAtOnceHoldTheirRateFromTheirFirstSecond() {
        var buckets = (0..<3).map { _ in TokenBucket(perSecond: 1000.0 / 3) }
        var first = 0
        for k in buckets.indices { while buckets[k].take(now: 1_000_000_000) { first += 1 } }
        #expect(first == 3, "one each at once, not a tenth of a second's worth")
        let second = buckets.indices.reduce(0) { sum, k in sum + Self.drain(&buckets[k], from: 1_000_000_001, seconds: 1) }
        #expect(first + second <= 1003, "\(first + second) in the first second of 1000 a second over three")
    }

    @Test func aSlowRateGoesOneAtATime() {
        var bucket = TokenBucket(perSecond: 2)
        let first = bucket.take(now: 1_000_000_000)
        let second = bucket.take(now: 1_000_000_001)
        let third = bucket.take(now: 1_500_000_001)
        #expect(first && !second && third, "a burst of one, then one each half second")
    }

    /// Takes as fast as it can for `seconds`, in steps of `step` ns, pausing
    /// from `pauseFrom` for `pauseSeconds`; the moment of each notification taken.
    static func drain(_ rate: SharedRate, clock: ManualClock, seconds: Double, step: UInt64,
                      pauseFrom: Double = .infinity, pauseSeconds: Double = 0) -> [UInt64] {
        var taken: [UInt64] = []
        let start = clock.now
        var paused = false
        while clock.now < start + UInt64(seconds * 1e9) {
            if !paused, Double(clock.now - start) / 1e9 >= pauseFrom {
                paused = true
                clock.advance(nanoseconds: UInt64(pauseSeconds * 1e9))
            }
            while rate.take() { taken.append(clock.now) }
            clock.advance(nanoseconds: step)
        }
        return taken
    }

    /// The most taken in any second (each window starting at a take).
    static func busiestSecond(_ moments: [UInt64]) -> Int {
        var most = 0, j = 0
        for i in moments.indices {
            while j < moments.count, moments[j] - moments[i] < 1_000_000_000 { j += 1 }
            most = max(most, j - i)
        }
        return most
    }

    @Test(arguments: [(150, UInt64(1_000_000)), (150, 7_000_000), (4000, 1_000_000), (20, 3_000_000)])
    func noSecondFromAnyMomentGoesOverTheRate(rate perSecond: Int, step: UInt64) {
        let clock = ManualClock()
        let rate = SharedRate(perSecond: perSecond, clock: clock)
        let moments = Self.drain(rate, clock: clock, seconds: 10, step: step, pauseFrom: 4, pauseSeconds: 2.5)
        let busiest = Self.busiestSecond(moments)
        #expect(busiest <= perSecond, "\(busiest) in one second for --rate \(perSecond)")
        let first = moments.prefix { $0 - moments[0] < 1_000_000_000 }.count
        #expect(first <= perSecond, "the first second: \(first)")
        // 10 s less the 2.5 s pause: the rate itself still goes.
        #expect(Double(moments.count) >= Double(perSecond) * 7.5 * 0.95, "\(moments.count) in 7.5 s of sending")
    }

    @Test func theCeilingCountsTheLastLimitTaken() {
        var ceiling = SecondCeiling(limit: 3)!
        let s: UInt64 = 1_000_000_000
        for t in [s, s + 1, s + 2] {
            #expect(ceiling.allows(now: t))
            ceiling.taken(at: t)
        }
        #expect(!ceiling.allows(now: 2 * s - 1), "a fourth within the second of the first")
        #expect(ceiling.allows(now: 2 * s), "a second after the first")
        ceiling.taken(at: 2 * s)
        #expect(!ceiling.allows(now: 2 * s), "the second, third and fourth are within the second before it")
        #expect(SecondCeiling(limit: 0) == nil && SecondCeiling(limit: 2_000_000) == nil)
    }
}
