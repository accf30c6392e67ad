import Foundation

/// How much of the machine's CPU went unused, sampled from `/proc/stat` four
/// times a second on a thread of its own, for tests that judge a rate.
///
/// A rate a send holds to is a ceiling the product promises whatever the
/// machine does; reaching that rate is only a promise while the machine has
/// CPU to spare. A test that finds a window below the rate asks this sampler
/// whether the machine had room in that window: if it did, the shortfall is
/// the product's; if other work took every core, it is the machine's.
public final class MachineIdleSampler: @unchecked Sendable {
    public struct Sample: Sendable {
        /// When it was taken, UNIX milliseconds (the clock the simulator's record uses).
        public let unixMs: Int64
        /// Jiffies of every core so far: idle (with waiting for I/O), and in all.
        public let idle: UInt64, total: UInt64
    }

    private let condition = NSCondition()
    private var stopped = false
    private var finished = false
    private var samples: [Sample] = []

    public init(intervalSeconds: Double = 0.25) {
        let thread = Thread { [self] in
            condition.lock()
            while !stopped {
                if let sample = Self.sample() { samples.append(sample) }
                _ = condition.wait(until: Date(timeIntervalSinceNow: intervalSeconds))
            }
            if let sample = Self.sample() { samples.append(sample) }
            finished = true
            condition.broadcast()
            condition.unlock()
        }
        thread.name = "idle sampler"
        thread.start()
    }

    /// Ends the sampling (waits for the last sample, 5 s at most).
    public func stop() {
        condition.lock()
        defer { condition.unlock() }
        stopped = true
        condition.broadcast()
        let deadline = Date(timeIntervalSinceNow: 5)
        while !finished, condition.wait(until: deadline) {}
    }

    /// The share of the machine's CPU time left idle between `fromMs` and
    /// `toMs` (UNIX milliseconds), from the samples nearest inside them; nil
    /// when fewer than two samples fall in the window (or `/proc/stat` is absent).
    public func idleFraction(fromMs: Int64, toMs: Int64) -> Double? {
        condition.lock()
        defer { condition.unlock() }
        let inside = samples.filter { $0.unixMs >= fromMs && $0.unixMs <= toMs }
        guard let first = inside.first, let last = inside.last, last.total > first.total else { return nil }
        return Double(last.idle - first.idle) / Double(last.total - first.total)
    }

    /// The first line of `/proc/stat`: `cpu user nice system idle iowait irq softirq steal …`.
    private static func sample() -> Sample? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = text.split(separator: "\n").first, line.hasPrefix("cpu ") else { return nil }
        let fields = line.split(separator: " ").dropFirst().prefix(8).compactMap { UInt64($0) }
        guard fields.count >= 5 else { return nil }
        let now = Int64((Date().timeIntervalSince1970 * 1000).rounded())
        return Sample(unixMs: now, idle: fields[3] + fields[4], total: fields.reduce(0, +))
    }
}
