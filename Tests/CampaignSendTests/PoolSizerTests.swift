import Testing
@testable import CampaignSend

/// How the HTTP/2 pool decides to grow (``PoolSizer``), tick by tick.
@Suite struct PoolSizerTests {
    /// Drives a sizer with a pool whose rate is `rate(size)` and whose
    /// connections are held back `bound` of the time; returns the sizes it
    /// went through and the size it ended at.
    static func run(maximum: Int = 64, start: Int = 4, ticks: Int = 40, bound: Double = 1, roundTrip: Double = 150,
                    trouble: Bool = false, rate: (Int) -> Double) -> (sizes: [Int], final: Int) {
        var sizer = PoolSizer(maximum: maximum)
        var size = start, sizes = [start]
        for _ in 0..<ticks {
            let sample = PoolSample(size: size, productive: size, rate: rate(size), bound: bound, trouble: trouble,
                                    roundTripMilliseconds: roundTrip)
            let more = sizer.next(sample)
            #expect(more >= 0 && size + more <= maximum)
            if more > 0 { size += more; sizes.append(size) }
        }
        return (sizes, size)
    }

    @Test func farAwayAndWindowBoundItQuadruplesToTheMaximum() {
        // Every connection carries its window per round trip: the rate grows with the pool.
        let r = Self.run { Double($0) * 70 }
        #expect(r.sizes == [4, 16, 64])
    }

    @Test func itStopsWhereAStepNoLongerPays() {
        // The machine saturates at 16 connections' worth.
        let r = Self.run { Double(min($0, 16)) * 4000 }
        #expect(r.final <= 64 && r.sizes.contains(16), "\(r.sizes)")
        let settledAt = r.final
        #expect(Self.run { Double(min($0, 16)) * 4000 }.final == settledAt, "the same rates give the same pool")
        // Nearby (a short round trip), the first step doubles; one that paid
        // in full is followed by a quadrupling, and one that paid less than
        // 1.5 per doubling ends the growth.
        let near = Self.run(roundTrip: 0.2) { Double(min($0, 16)) * 4000 }
        #expect(near.sizes == [4, 8, 32], "\(near.sizes)")
    }

    @Test func onLoopbackWithoutGainItStaysAtItsStartOrOneStepMore() {
        let flat = Self.run(roundTrip: 0.2) { _ in 80_000 }
        #expect(flat.final <= 8, "\(flat.sizes)")
    }

    @Test func itNeverGrowsWhenTheServerDoesNotHoldConnectionsBackOrIsInTrouble() {
        #expect(Self.run(bound: 0.2) { Double($0) * 70 }.final == 4, "not held back: more connections would not carry more")
        #expect(Self.run(trouble: true) { Double($0) * 70 }.final == 4, "5xx, 429, resets: not the time to add load")
    }

    @Test func itNeverPassesItsMaximum() {
        #expect(Self.run(maximum: 10) { Double($0) * 70 }.sizes == [4, 10])
        #expect(Self.run(maximum: 4) { Double($0) * 70 }.sizes == [4])
    }

    @Test func newConnectionsAreAwaitedBeforeTheStepIsJudged() {
        var sizer = PoolSizer(maximum: 64)
        func sample(_ size: Int, productive: Int, rate: Double) -> PoolSample {
            PoolSample(size: size, productive: productive, rate: rate, bound: 1, roundTripMilliseconds: 150)
        }
        #expect(sizer.next(sample(4, productive: 4, rate: 280)) == 0)   // warming → measuring
        #expect(sizer.next(sample(4, productive: 4, rate: 280)) == 0)   // a first rate: confirm it
        #expect(sizer.next(sample(4, productive: 4, rate: 280)) == 12)  // 4 → 16
        // The new connections have not answered yet, and the rate is still
        // the old one: no verdict until they have.
        for _ in 0..<3 { #expect(sizer.next(sample(16, productive: 4, rate: 280)) == 0) }
        #expect(sizer.phase != .settled)
        #expect(sizer.next(sample(16, productive: 16, rate: 600)) == 0)   // all answer: measure next
        #expect(sizer.next(sample(16, productive: 16, rate: 1100)) == 48)   // it paid: 16 → 64
    }
}

/// Which connection sends a binary plan's shard.
@Suite struct BinaryShardMappingTests {
    @Test func binaryShardsOfAPartAreSpreadOverEveryConnection() {
        // Part k of 4 holds shards k, k+4, k+8, …: each part's shards reach all 4 connections.
        for part in 0..<4 {
            let shards = stride(from: part, to: 32, by: 4)
            #expect(Set(shards.map { BinaryTransport.connection(forShard: $0, parts: 4, connections: 4) }) == [0, 1, 2, 3])
            #expect(Set(shards.map { BinaryTransport.connection(forShard: $0, parts: 4, connections: 2) }) == [0, 1])
        }
        // A whole plan: shard by shard, round the connections.
        #expect((0..<8).map { BinaryTransport.connection(forShard: $0, parts: 1, connections: 4) } == [0, 1, 2, 3, 0, 1, 2, 3])
    }
}
