import Testing
@testable import SendEngine

/// How the HTTP/2 pool decides to grow (``PoolSizer``), tick by tick.
@Suite struct PoolSizerTests {
    /// Drives a sizer with a pool whose rate is `rate(size)` and whose
    /// connections are held back `bound` of the time; returns the sizes it
    /// went through and the size it ended at.
    /// `cpu`: the shares of the CPUs busy with `size` connections, the send's own and the machine's.
    static func run(maximum: Int = 64, start: Int = 4, ticks: Int = 40, bound: Double = 1, roundTrip: Double = 150,
                    trouble: Bool = false, cpu: ((Int) -> (own: Double, machine: Double))? = nil,
                    rate: (Int) -> Double) -> (sizes: [Int], final: Int) {
        var sizer = PoolSizer(maximum: maximum)
        var size = start, sizes = [start]
        for _ in 0..<ticks {
            let sample = PoolSample(size: size, productive: size, rate: rate(size), bound: bound, trouble: trouble,
                                    roundTripMilliseconds: roundTrip, cpuOwn: cpu?(size).own, cpuMachine: cpu?(size).machine)
            let change = sizer.next(sample)
            #expect(size + change >= 1 && size + change <= maximum)
            if change != 0 { size += change; sizes.append(size) }
        }
        return (sizes, size)
    }

    @Test func farAwayAndWindowBoundItGoesToTheMaximumInOneStep() {
        // Every connection carries its window per round trip: the rate grows
        // with the pool, and from far away the first step is to the maximum
        // (two judged quadruplings cost a third of a short campaign's time).
        let r = Self.run { Double($0) * 70 }
        #expect(r.sizes == [4, 64])
        #expect(Self.run(maximum: 40) { Double($0) * 70 }.sizes == [4, 40])
    }

    @Test func itStopsWhereAStepNoLongerPaysAndUndoesOneThatDidNotPayAtAll() {
        // The server serves no more than 4 connections' worth: the step to
        // 64 carried nothing more, so its 60 connections are retired.
        let r = Self.run { Double(min($0, 4)) * 4000 }
        #expect(r.sizes == [4, 64, 4], "\(r.sizes)")
        // Saturated at 16 connections' worth: the step paid (4×, 1.41 per
        // doubling) and the pool keeps its size.
        #expect(Self.run { Double(min($0, 16)) * 4000 }.sizes == [4, 64])
        // Nearby (a short round trip), the first step doubles; one that paid
        // in full is followed by a quadrupling, and one that paid less than
        // 1.5 per doubling ends the growth.
        let near = Self.run(roundTrip: 0.2) { Double(min($0, 16)) * 4000 }
        #expect(near.sizes == [4, 8, 32], "\(near.sizes)")
    }

    @Test func onLoopbackWithoutGainOneProbingStepIsUndone() {
        let flat = Self.run(roundTrip: 0.2) { _ in 80_000 }
        #expect(flat.sizes == [4, 8, 4], "\(flat.sizes)")
        // Fewer answers with more connections (two cores shared by more threads): undone too.
        #expect(Self.run(roundTrip: 0.2) { $0 > 4 ? 70_000 : 80_000 }.sizes == [4, 8, 4])
        // Nearby a doubling must pay half again: 30% more (a busy machine's noise) is undone too.
        #expect(Self.run(roundTrip: 0.2) { $0 > 4 ? 104_000 : 80_000 }.sizes == [4, 8, 4])
    }

    @Test func aRateStillRisingByItselfIsNoBaseline() {
        // A slow server's first ticks nearby: the same 4 connections carry
        // more each tick (warming up), then level off at 80,000/s, and more
        // connections carry no more. Judged against a warming tick's rate,
        // a doubling looked like a gain (a busy simulator grew such a pool to 64).
        var sizer = PoolSizer(maximum: 64)
        var size = 4, sizes = [4]
        for rate in [20_000.0, 30_000, 45_000, 70_000] + Array(repeating: 80_000, count: 12) {
            let change = sizer.next(PoolSample(size: size, productive: size, rate: rate, bound: 1, trouble: false, roundTripMilliseconds: 0.3))
            if change != 0 { size += change; sizes.append(size) }
        }
        #expect(sizes == [4, 8, 4], "one probing step, judged against the settled rate, and undone: \(sizes)")
    }

    @Test func itNeverGrowsWhenTheServerDoesNotHoldConnectionsBackOrIsInTrouble() {
        #expect(Self.run(bound: 0.2) { Double($0) * 70 }.final == 4, "not held back: more connections would not carry more")
        #expect(Self.run(trouble: true) { Double($0) * 70 }.final == 4, "5xx, 429, resets: not the time to add load")
    }

    @Test func aSendWithNoCPULeftDoesNotGrow() {
        #expect(Self.run(cpu: { _ in (own: 0.9, machine: 0.9) }) { Double($0) * 70 }.sizes == [4])
    }

    @Test func onABusyMachineARoundTripIsNoDistance() {
        // Loopback on a busy machine: a PING answered late passes for
        // distance and every connection is held back, but the machine's
        // CPUs are spent (here by the gateway beside the send): the pool
        // grows as nearby, by a doubling that must pay half again, undone when it does not.
        let busy = Self.run(roundTrip: 47, cpu: { _ in (own: 0.3, machine: 0.95) }) { $0 > 4 ? 100_000 : 80_000 }
        #expect(busy.sizes == [4, 8, 4], "\(busy.sizes)")
        // Far away on a busy machine, where more connections do carry more (each its window a round trip): it still grows.
        let farBusy = Self.run(maximum: 16, roundTrip: 100, cpu: { _ in (own: 0.1, machine: 1) }) { Double($0) * 70 }
        #expect(farBusy.sizes == [4, 8, 16], "\(farBusy.sizes)")
    }

    @Test func aStepAddsNoMoreConnectionsThanTheSendsCPUCarries() {
        // Nearby, each connection costing 6% of the CPUs: the second step
        // (a quadrupling after a doubling that paid in full) stops at what
        // 85% carries (8 × 0.85 / 0.48 = 14), and at 14 no step of a
        // quarter more is left.
        let alone = Self.run(roundTrip: 0.2, cpu: { n in (own: 0.06 * Double(n), machine: 0.06 * Double(n)) }) { Double($0) * 5_200 }
        #expect(alone.sizes == [4, 8, 14], "\(alone.sizes)")
        // Far away, the first step stops there too.
        let far = Self.run(roundTrip: 50, cpu: { n in (own: 0.06 * Double(n), machine: 0.06 * Double(n)) }) { Double($0) * 5_200 }
        #expect(far.sizes == [4, 14], "\(far.sizes)")
        // A send whose own share is too small to extrapolate from (large payloads, far away) goes to the maximum as before.
        #expect(Self.run(cpu: { n in (own: 0.001 * Double(n), machine: 0.1) }) { Double($0) * 70 }.sizes == [4, 64])
    }

    /// The plan reader's burst at the start (or the journal's work) does
    /// not grow with the connections: only the connections' threads' share
    /// is extrapolated. Others' work on the machine is left to the scheduler.
    @Test func onlyTheConnectionsShareOfTheCPUIsExtrapolated() {
        var sizer = PoolSizer(maximum: 64)
        var sample = PoolSample(size: 4, productive: 4, rate: 400, bound: 1, roundTripMilliseconds: 50,
                                cpuOwn: 0.4, cpuMachine: 0.6, cpuConnections: 0.05)
        // 4 × (0.85 − 0.35) / 0.05 = 40 (against 4 × 0.85 / 0.4 = 8 for the whole send's share).
        #expect(sizer.next(sample) == 36)
        sample.cpuConnections = nil
        var whole = PoolSizer(maximum: 64)
        #expect(whole.next(sample) == 4)
    }

    @Test func itNeverPassesItsMaximum() {
        #expect(Self.run(maximum: 10) { Double($0) * 70 }.sizes == [4, 10])
        #expect(Self.run(maximum: 4) { Double($0) * 70 }.sizes == [4])
    }

    @Test func newConnectionsAreAwaitedBeforeTheStepIsJudged() {
        var sizer = PoolSizer(maximum: 64)
        func sample(_ size: Int, productive: Int, rate: Double, roundTrip: Double = 150) -> PoolSample {
            PoolSample(size: size, productive: productive, rate: rate, bound: 1, roundTripMilliseconds: roundTrip)
        }
        // Far and held back from the first answer: 4 → 64 at once.
        #expect(sizer.next(sample(4, productive: 1, rate: 280)) == 60)
        // The new connections have not answered yet, and the rate is still
        // the old one: no verdict until they have.
        for _ in 0..<3 { #expect(sizer.next(sample(64, productive: 4, rate: 280)) == 0) }
        #expect(sizer.phase != .settled)
        #expect(sizer.next(sample(64, productive: 64, rate: 600)) == 0)   // all answer: measure next
        #expect(sizer.next(sample(64, productive: 64, rate: 1000)) == 0)   // it paid (1.38 per doubling): kept
        #expect(sizer.phase == .settled)
        // Nearby, a first step waits for a second tick to agree.
        var near = PoolSizer(maximum: 64)
        #expect(near.next(sample(4, productive: 4, rate: 80_000, roundTrip: 0.3)) == 0)
        #expect(near.next(sample(4, productive: 4, rate: 80_000, roundTrip: 0.3)) == 0)
        #expect(near.next(sample(4, productive: 4, rate: 80_000, roundTrip: 0.3)) == 4)
    }

    @Test func aStepStillRampingUpIsGivenTimeBeforeItIsUndone() {
        var sizer = PoolSizer(maximum: 64)
        func sample(_ size: Int, rate: Double) -> PoolSample {
            PoolSample(size: size, productive: size, rate: rate, bound: 1, roundTripMilliseconds: 150)
        }
        #expect(sizer.next(sample(4, rate: 10_000)) == 60)   // 4 → 64
        _ = sizer.next(sample(64, rate: 10_000))   // all answer
        // Their windows are still growing: the first measurement falls short, the next do not.
        #expect(sizer.next(sample(64, rate: 11_000)) == 0)
        #expect(sizer.next(sample(64, rate: 12_000)) == 0)
        #expect(sizer.next(sample(64, rate: 20_000)) == 0, "not undone")
        #expect(sizer.phase == .settled, "kept at 64: it paid, though less than 1.5 per doubling")
        // A step that never pays is undone after the doubt.
        var flat = PoolSizer(maximum: 64)
        #expect(flat.next(sample(4, rate: 10_000)) == 60)
        _ = flat.next(sample(64, rate: 10_000))
        #expect(flat.next(sample(64, rate: 10_000)) == 0)
        #expect(flat.next(sample(64, rate: 10_500)) == 0)
        #expect(flat.next(sample(64, rate: 10_200)) == -60)
        #expect(flat.phase == .settled)
    }
}
