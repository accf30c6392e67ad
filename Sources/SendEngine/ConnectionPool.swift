#if canImport(Glibc)
import Glibc
#endif
import CampaignIO

/// What one HTTP/2 connection tells the pool about itself: whether it has
/// had an answer, how its time was spent while work was waiting (limited
/// by the server's flow-control window, by its stream limit, or by
/// neither), and the shortest round trip it saw (a PING, or an answer).
/// A worker adds to its own tally and publishes it a few times a second.
package final class ConnectionGauge: @unchecked Sendable {
    package struct Tally {
        /// Nanoseconds with a connection open.
        package var open: UInt64 = 0
        /// Of them, with work waiting and no room in the server's window.
        package var windowBound: UInt64 = 0
        /// Of them, with work waiting and every stream the server allows open.
        package var streamBound: UInt64 = 0
        /// The shortest round trip seen, in nanoseconds.
        package var roundTrip: UInt64?
        /// The shortest PING round trip since the connection opened: the
        /// network's, before queues built up (answers, and PINGs on a busy
        /// machine, wait behind work; the first PING goes before any).
        package var pingRoundTrip: UInt64?
        /// Nanoseconds of CPU the connection's thread used.
        package var cpu: UInt64 = 0

        package mutating func add(_ other: Tally) {
            cpu += other.cpu
            open += other.open
            windowBound += other.windowBound
            streamBound += other.streamBound
            if let r = other.roundTrip { roundTrip = min(roundTrip ?? r, r) }
            if let r = other.pingRoundTrip { pingRoundTrip = min(pingRoundTrip ?? r, r) }
        }

        package init() {}
    }

    package init() {}

    private let mutex = Lock()
    private var tally = Tally()
    private var productive = false

    package func publish(_ local: inout Tally, productive: Bool) {
        mutex.lock()
        tally.add(local)
        self.productive = productive
        mutex.unlock()
        local = Tally()
    }

    /// The tally since the last call (which it resets), and whether the connection has had an answer.
    package func takeInterval() -> (Tally, productive: Bool) {
        mutex.lock(); defer { mutex.unlock() }
        let t = tally
        tally = Tally()
        return (t, productive)
    }
}

/// One second of the pool, as the sizer sees it.
package struct PoolSample: Equatable {
    /// Connections in the pool, and of them those that have had an answer.
    package var size: Int
    package var productive: Int
    /// Notifications answered (accepted or final) per second over the last second.
    package var rate: Double
    /// The share of the pool's open time spent with work waiting on the
    /// server's window or stream limit: more connections would carry more.
    package var bound: Double
    /// The server is in trouble (5xx, 429, resets): not the time to add load.
    package var trouble = false
    /// `--rate` is what limits the send.
    package var rateCapped = false
    /// The shortest PING round trip any connection has measured since it
    /// opened, in milliseconds: the distance, not the load.
    package var roundTripMilliseconds: Double?
    /// Over the last tick, shares (0…1) of the CPUs the send may run on:
    /// the send's own, and the machine's (the send's included). Nil when
    /// not known (no `/proc/stat`).
    package var cpuOwn: Double?
    package var cpuMachine: Double?
    /// Of ``cpuOwn``, the connections' threads' (what grows with them; the
    /// plan reader's and the start's does not). Nil: all of ``cpuOwn``.
    package var cpuConnections: Double?
}

/// Decides, twice a second, how many connections to add: the pool grows
/// while connections are held back by the server's window or stream limit
/// with work waiting, and each step raised the rate by at least ``gain``.
/// A step doubles the pool, or quadruples it when the connections are nearly
/// always held back and the last step paid almost in full (or, for the first
/// step, the round trip is long: far away with a backlog, every connection
/// adds its window's worth per round trip). After a step that raised the
/// rate less than ``gain``, the connections it added are retired (they
/// finish what they hold and close: on loopback more connections only share
/// the same cores) and the pool grows no more; after a quadrupling that paid
/// less than ``quadruplingGain`` per doubling it keeps its size and grows no
/// more. It never closes a connection to open another: Apple treats rapid
/// connecting and disconnecting as abuse.
///
/// More connections cannot help a send that has no CPU left (each costs
/// TLS records, HTTP/2 frames and a thread's wake-ups): the pool does not
/// grow while the send uses ``cpuCeiling`` of the CPUs it may run on, and a
/// step adds no more connections than that share would carry, extrapolated
/// from what its connections' threads used. On a machine so busy that its
/// PINGs wait in its queues, the round trip is no distance: the pool grows
/// as nearby, a doubling at a time, each paying half again.
///
/// From far away each HTTP/2 connection carries about one window (65,535
/// bytes) per round trip, so the connections a send needs grow with the
/// distance and the payload size; on loopback one probing step is undone.
package struct PoolSizer {
    package let maximum: Int

    /// A step being judged: the rate before it, how it multiplied the pool, how many it added.
    package struct Step: Equatable {
        package var baseline: Double
        /// The pool's size after the step over its size before.
        package var growth: Double
        package var added: Int
    }

    package enum Phase: Equatable {
        /// Waiting (at most ``readyTicks``) for every connection to have an answer.
        case warming(ticks: Int, step: Step?)
        /// Every connection answers: this tick's rate judges `step` (nil: none to judge).
        case measuring(step: Step?)
        /// The step's first measurement fell short; new connections may
        /// still be ramping up (a window grows a round trip at a time), so
        /// the best of a few more ticks decides before anything is undone.
        case doubting(step: Step, ticks: Int, best: Double)
        /// No step is being judged and the last tick could have made one:
        /// one more tick must agree before the pool grows (a rate taken as
        /// connections warm up, or a single noisy tick, is no baseline).
        case confirming(rate: Double)
        /// The pool keeps its size.
        case settled
    }

    package private(set) var phase = Phase.warming(ticks: 0, step: nil)
    /// How much the last step raised the rate, per doubling.
    private var lastGain: Double?
    /// A doubling must raise the rate by this factor to be followed by another step.
    package static let gain = 1.25
    /// The same when the round trip is short (under ``farMilliseconds``):
    /// there the window is no limit, more connections only help a server
    /// that serves each connection slowly, and a busy machine's noisy rates
    /// must not pass for that.
    package static let nearGain = 1.5
    /// After a quadrupling, the gain per doubling the next step needs.
    package static let quadruplingGain = 1.5
    /// Share of connection time held back by the server above which more connections are tried.
    package static let boundShare = 0.5
    /// A round trip from which a window-bound pool's first step is a quadrupling, at once.
    package static let farMilliseconds = 40.0
    /// A rate this much above the last tick's is still rising: no baseline yet.
    package static let settledWithin = 1.15
    /// Ticks to wait for new connections to answer before measuring anyway.
    package static let readyTicks = 6
    /// Ticks a step that fell short is given before it is undone.
    package static let doubtTicks = 3
    /// The share of its CPUs the send may use and still grow (up to which a
    /// step's new connections may load them), and the share of the machine's
    /// busy beyond which its PINGs say nothing of the distance.
    package static let cpuCeiling = 0.85
    /// Seconds between two decisions: a new connection answers within
    /// about two round trips, and half a second is enough to measure a rate.
    package static let tickSeconds = 0.5

    package init(maximum: Int) { self.maximum = maximum }

    /// Connections to add now (positive), or to retire (negative: the
    /// connections of a step that did not raise the rate at all, once).
    package mutating func next(_ s: PoolSample) -> Int {
        switch phase {
        case .settled:
            return 0
        case .warming(let ticks, let step):
            // The first connections, far away and held back as soon as one
            // answers: the distance is known (the first PING goes at once),
            // and waiting for every one to answer costs a tick of a short campaign.
            if step == nil, lastGain == nil, s.productive > 0, Self.isFar(s), s.bound >= 0.9 {
                return consider(s)
            }
            if s.productive >= s.size || ticks + 1 >= Self.readyTicks {
                phase = .measuring(step: step)
            } else {
                phase = .warming(ticks: ticks + 1, step: step)
            }
            return 0
        case .measuring(let step):
            guard let step else { return consider(s) }
            if s.rate < step.baseline * Self.required(s) {
                phase = .doubting(step: step, ticks: 1, best: s.rate)
                return 0
            }
            return judged(step, rate: s.rate, s)
        case .doubting(let step, let ticks, let best):
            let best = max(best, s.rate)
            if best >= step.baseline * Self.required(s) { return judged(step, rate: best, s) }
            guard ticks + 1 >= Self.doubtTicks else {
                phase = .doubting(step: step, ticks: ticks + 1, best: best)
                return 0
            }
            // More connections carried no more (on loopback they only share
            // the same cores): back to the size that did as well, for good.
            phase = .settled
            return -step.added
        case .confirming(let rate):
            guard mayGrow(s) else {
                phase = .measuring(step: nil)
                return 0
            }
            // Still rising by itself: the connections are warming up (a slow
            // server's first seconds), and a step judged against this rate
            // would take the warming for its gain (on loopback, a busy
            // simulator grew the pool from 4 to 64 so). Wait for it to settle.
            if s.rate > rate * Self.settledWithin {
                phase = .confirming(rate: s.rate)
                return 0
            }
            return self.step(s, baseline: max(rate, s.rate))
        }
    }

    /// A step raised the rate by at least ``gain``: perhaps another.
    private mutating func judged(_ step: Step, rate: Double, _ s: PoolSample) -> Int {
        // Per doubling: a quadrupling that doubled the rate paid as a
        // doubling that paid 1.41, which says the pool is past the point
        // where connections carry their share: enough.
        let ratio = rate / max(step.baseline, 1)
        let doublings = log2(step.growth)
        let perDoubling = doublings > 1 ? pow(ratio, 1 / doublings) : ratio
        if doublings > 1 && perDoubling < Self.quadruplingGain {
            phase = .settled
            return 0
        }
        lastGain = perDoubling
        return consider(s)
    }

    /// No step to judge: grow if the pool is held back, after a second tick
    /// agrees (at once when far away and always held back).
    private mutating func consider(_ s: PoolSample) -> Int {
        guard mayGrow(s) else {
            phase = .measuring(step: nil)   // not now; perhaps in a later tick
            return 0
        }
        if lastGain == nil, Self.isFar(s), s.bound >= 0.9 {
            return step(s, baseline: s.rate)
        }
        if lastGain != nil { return step(s, baseline: s.rate) }
        phase = .confirming(rate: s.rate)
        return 0
    }

    /// What a step must raise the rate by (see ``gain``, ``nearGain``).
    package static func required(_ s: PoolSample) -> Double {
        isFar(s) ? gain : nearGain
    }

    private func mayGrow(_ s: PoolSample) -> Bool {
        s.size < maximum && s.bound >= Self.boundShare && !s.trouble && !s.rateCapped && !Self.cpuIsSpent(s)
    }

    /// The send uses ``cpuCeiling`` or more of the CPUs it may run on.
    package static func cpuIsSpent(_ s: PoolSample) -> Bool { (s.cpuOwn ?? 0) >= cpuCeiling }

    /// The PING round trip says the gateway is far away (``farMilliseconds``
    /// or more), and the machine is not so busy that the PINGs waited in its
    /// queues (a loaded machine answering its own loopback PING 47 ms late
    /// is no distance: its pool grew to the maximum so).
    package static func isFar(_ s: PoolSample) -> Bool {
        (s.roundTripMilliseconds ?? 0) >= farMilliseconds && (s.cpuMachine ?? 0) < cpuCeiling
    }

    /// The connections the send's CPU would carry: the connections' work
    /// grows with them, the rest of the send's (reading the plan, the
    /// journal) stays as it is. (Others' work is left to the scheduler: a
    /// window-bound send far away needs little CPU, and a step that does not
    /// pay is undone.) Nil when the connections' share is unknown or too
    /// small to extrapolate from.
    package static func connectionsTheCPUCarries(_ s: PoolSample) -> Int? {
        guard let own = s.cpuOwn, case let connections = min(own, s.cpuConnections ?? own), connections >= 0.02 else { return nil }
        let fixed = own - connections
        return Int(Double(s.size) * max(0, cpuCeiling - fixed) / connections + 1e-9)
    }

    /// Grows the pool from `s.size`, judged next against `baseline`.
    private mutating func step(_ s: PoolSample, baseline: Double) -> Int {
        // Far away and always held back: each connection is carrying its
        // window per round trip, so more connections carry more, as the
        // last step showed or as the distance says.
        let far = Self.isFar(s)
        var factor = ((lastGain ?? 0) >= 1.7 || (lastGain == nil && far)) && s.bound >= 0.9 ? 4 : 2
        // The first step from far away goes straight to the maximum: a
        // campaign of a few hundred thousand lasts seconds there, and two
        // quadruplings, each awaited and judged, cost a third of them (a
        // step that carries nothing more is undone as any other).
        if lastGain == nil, far, s.bound >= 0.9 { factor = max(factor, (maximum + s.size - 1) / s.size) }
        let target = min(s.size * factor, maximum, Self.connectionsTheCPUCarries(s) ?? .max)
        // Less than a quarter more is no step worth judging: the CPU is nearly spent.
        guard target * 4 >= s.size * 5 else {
            phase = .measuring(step: nil)
            return 0
        }
        let added = target - s.size
        phase = .warming(ticks: 0, step: Step(baseline: baseline, growth: Double(target) / Double(s.size), added: added))
        return added
    }
}

/// The send's connections, each a worker on a thread of its own; more can
/// be added while it runs, up to ``maximum``.
package final class ConnectionPool: @unchecked Sendable {
    package let maximum: Int
    private let make: (Int) -> any GatewayConnectionWorker
    private let mutex = Lock()
    private var threads: [pthread_t] = []
    private var workers: [any GatewayConnectionWorker] = []
    /// Of `workers`, how many (the last ones) have been retired.
    private var retired = 0
    private var closed = false

    package init(maximum: Int, make: @escaping (Int) -> any GatewayConnectionWorker) {
        self.maximum = maximum
        self.make = make
    }

    /// Connections in the pool (not counting retired ones finishing their work).
    package var size: Int { mutex.lock(); defer { mutex.unlock() }; return workers.count - retired }

    /// Starts `n` more connections (fewer at the maximum, none once the
    /// pool is closed); returns how many it started.
    @discardableResult
    package func add(_ n: Int) -> Int {
        mutex.lock(); defer { mutex.unlock() }
        var started = 0
        // Under the lock, so `joinAll` never misses a thread.
        while started < n, !closed, workers.count - retired < maximum {
            let worker = make(workers.count)
            workers.append(worker)
            threads.append(startThread { worker.run() })
            started += 1
        }
        return started
    }

    /// Retires the `n` newest connections: they take no new work, finish
    /// what they hold, and close. Only ever the connections of a step that
    /// did not pay, once: no connection is closed to open another.
    package func retire(_ n: Int) {
        mutex.lock(); defer { mutex.unlock() }
        let active = workers.count - retired
        let k = min(n, active - 1)
        guard k > 0 else { return }
        for worker in workers[(active - k)..<active] { worker.retire() }
        retired += k
        // Retired workers are the last ones only while nothing is added after
        // them: a pool that retires has settled and never grows again.
    }

    /// What the connections' gauges (HTTP/2) say since the last call: the
    /// pool's sample without its rate and CPU shares, the shortest round
    /// trip seen, and the CPU seconds the connections' threads used.
    package func sample() -> (PoolSample, roundTrip: UInt64?, cpuSeconds: Double) {
        mutex.lock()
        let active = workers.count - retired
        let gauges = workers[..<active].compactMap(\.gauge)
        let size = active
        mutex.unlock()
        var sample = PoolSample(size: size, productive: 0, rate: 0, bound: 0)
        var tally = ConnectionGauge.Tally()
        for gauge in gauges {
            let (t, productive) = gauge.takeInterval()
            tally.add(t)
            if productive { sample.productive += 1 }
        }
        if tally.open > 0 { sample.bound = Double(tally.windowBound + tally.streamBound) / Double(tally.open) }
        sample.roundTripMilliseconds = tally.pingRoundTrip.map { Double($0) / 1e6 }
        return (sample, tally.roundTrip, Double(tally.cpu) / 1e9)
    }

    /// Waits for every connection to end (those added meanwhile too), then closes the pool.
    package func joinAll() {
        while true {
            mutex.lock()
            let pending = threads
            threads = []
            if pending.isEmpty { closed = true }
            mutex.unlock()
            if pending.isEmpty { return }
            for t in pending { pthread_join(t, nil) }
        }
    }
}
