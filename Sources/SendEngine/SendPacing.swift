import CampaignIO
import SendJournal
import GatewayClient
/// `--rate` over all of a send's connections, however many there are: one
/// bucket they take from under a lock.
package final class SharedRate: @unchecked Sendable {
    private var bucket: TokenBucket
    private let mutex = Lock()
    private let clock: SendClock
    /// `--rate` (per process); nil without one.
    private let fixed: Double?
    /// A campaign's rate over its parts: this part's share, which changes as parts start and end.
    private let campaign: CampaignRate?
    /// `--rate` as a ceiling: never more in any second, whatever the bucket saved.
    private var ceiling: SecondCeiling?

    package init(perSecond: Int, clock: SendClock = SystemClock.shared) {
        bucket = TokenBucket(perSecond: Double(perSecond))
        self.clock = clock
        fixed = Double(perSecond)
        campaign = nil
        ceiling = SecondCeiling(limit: perSecond)
    }

    /// The lower of `--rate` (0: none) and the campaign's share.
    package init(perSecond: Int, campaign: CampaignRate, clock: SendClock = SystemClock.shared) {
        self.clock = clock
        fixed = perSecond > 0 ? Double(perSecond) : nil
        self.campaign = campaign
        let share = campaign.perSecond(now: Double(clock.now) / 1e9)
        bucket = TokenBucket(perSecond: min(fixed ?? .infinity, share))
        ceiling = perSecond > 0 ? SecondCeiling(limit: perSecond) : nil
    }

    /// Takes one notification's turn; false when it must wait.
    package func take() -> Bool {
        mutex.lock(); defer { mutex.unlock() }
        // The time is read under the lock: one read before it could be older
        // than another thread's last update.
        let now = clock.now
        if let campaign {
            let rate = min(fixed ?? .infinity, campaign.perSecond(now: Double(now) / 1e9))
            if rate != bucket.perSecond { bucket.change(perSecond: rate) }
        }
        if let ceiling, !ceiling.allows(now: now) { return false }
        guard bucket.take(now: now) else { return false }
        ceiling?.taken(at: now)
        return true
    }
}

/// At most `limit` in any second: the times of the last `limit` taken, in a
/// ring whose next slot holds the oldest. The bucket alone let a tenth more
/// through in a second after a pause (165 in the first second of `--rate 150`).
/// Rates above a million a second (out of any gateway's reach) keep the bucket only.
package struct SecondCeiling {
    private var times: [UInt64]
    private var next = 0

    package init?(limit: Int) {
        guard limit > 0, limit <= 1_000_000 else { return nil }
        times = [UInt64](repeating: 0, count: limit)
    }

    /// Whether one more at `now` (monotonic nanoseconds) keeps every second within the limit.
    package func allows(now: UInt64) -> Bool {
        let oldest = times[next]
        return oldest == 0 || now &- oldest >= 1_000_000_000
    }

    package mutating func taken(at now: UInt64) {
        times[next] = now
        next = next + 1 == times.count ? 0 : next + 1
    }
}

/// A token bucket: `perSecond`, with bursts of at most a tenth of a second's
/// worth (one at least). A bucket that held a second's worth let a send that
/// paused (connecting, a full window) catch up with a second's burst on top
/// of the second's rate: about 2N in one second for `--rate N`.
package struct TokenBucket {
    package private(set) var perSecond: Double
    /// The most taken at once: what `--rate` may exceed in any second.
    package private(set) var burst: Double
    private var allowance: Double = 0
    private var updatedAt: UInt64 = 0

    package init(perSecond: Double) {
        self.perSecond = perSecond
        burst = max(1, perSecond / 10)
    }

    /// A new rate from now on (a campaign's share when parts start or end); what is saved stays, within the new burst.
    package mutating func change(perSecond rate: Double) {
        perSecond = rate
        burst = max(1, rate / 10)
        allowance = min(allowance, burst)
    }

    /// Takes one token at monotonic time `now` (nanoseconds); false when none is left.
    package mutating func take(now: UInt64) -> Bool {
        // One to begin with, not a burst: parts that start at once would each begin a tenth over their share.
        if updatedAt == 0 { updatedAt = now; allowance = 1 }
        allowance = min(burst, allowance + Double(now - updatedAt) / 1e9 * perSecond)
        updatedAt = now
        guard allowance >= 1 else { return false }
        allowance -= 1
        return true
    }
}

/// Per shard, the ordinals below which notifications have been handed to a
/// connection (they may have reached the gateway), and which shards moved
/// since the journal last heard of them. Arrays by shard, not dictionaries:
/// this is updated for every notification.
package struct SentMarks {
    // Set only in this module; usable from inline for `handed`, called once per notification from the workers' modules.
    @usableFromInline package internal(set) var below: [Int32]
    @usableFromInline package internal(set) var unmarked: [Int32] = []
    @usableFromInline var isUnmarked: [Bool]

    package init(shards: Int) {
        below = [Int32](repeating: 0, count: shards)
        isUnmarked = [Bool](repeating: false, count: shards)
    }

    @inlinable
    package mutating func handed(shard: Int32, ordinal: Int32) {
        let s = Int(shard)
        guard below[s] <= ordinal else { return }
        below[s] = ordinal + 1
        if !isUnmarked[s] {
            isUnmarked[s] = true
            unmarked.append(shard)
        }
    }

    /// The journal has heard of every shard that moved.
    package mutating func markedAll() {
        for shard in unmarked { isUnmarked[Int(shard)] = false }
        unmarked.removeAll(keepingCapacity: true)
    }

    /// The marks of every shard that has one.
    package var map: [Int32: Int32] {
        var map: [Int32: Int32] = [:]
        for (shard, n) in below.enumerated() where n > 0 { map[Int32(shard)] = n }
        return map
    }
}

/// When a connection proves what it has written: after `--checkpoint-every`
/// notifications, after `--checkpoint-seconds` (so progress, the journal and
/// `status` advance while a long send runs, and a kill costs at most that
/// much in resends), sooner after a connection was lost without an answer.
/// Only formats with error responses can prove anything.
package struct ProofCadence {
    private let every: Int?
    private let period: UInt64?
    private var adaptiveEvery: Int? = nil
    /// When the first notification of the current window was taken.
    @usableFromInline var windowStartedAt: UInt64? = nil

    package init(settings: SendSettings, reportsErrors: Bool) {
        every = reportsErrors && settings.checkpointEvery > 0 ? settings.checkpointEvery : nil
        period = reportsErrors && settings.checkpointMilliseconds > 0 ? UInt64(settings.checkpointMilliseconds) * 1_000_000 : nil
    }

    /// Notifications a window may hold before its proof; nil for no count limit.
    package var notificationsPerProof: Int? { [every, adaptiveEvery].compactMap { $0 }.min() }

    @inlinable
    package mutating func windowStarted(at now: @autoclosure () -> UInt64) {
        // The clock is read once a window, not once a notification: a read
        // per notification costs 1.5% of a loopback send's CPU.
        if windowStartedAt == nil { windowStartedAt = now() }
    }

    package mutating func windowEnded() { windowStartedAt = nil }

    /// Whether a window of `notifications` is due its proof at `now`.
    package func isDue(notifications: Int, now: UInt64) -> Bool {
        guard notifications > 0 else { return false }
        if let limit = notificationsPerProof, notifications >= limit { return true }
        if let period, let start = windowStartedAt, now &- start >= period { return true }
        return false
    }

    /// Milliseconds until the time-based proof is due (for a poll's timeout), if one will be.
    package func millisecondsUntilDue(now: UInt64) -> Int32? {
        guard let period, let start = windowStartedAt else { return nil }
        let due = start + period
        return due <= now ? 0 : Int32(min(1000, (due - now) / 1_000_000 + 1))
    }

    /// A connection was lost with `risked` notifications written unproven:
    /// prove more often from now on (half as many, never below 64).
    package mutating func connectionLost(risked: Int) {
        guard risked > 0 else { return }
        adaptiveEvery = max(64, min(adaptiveEvery ?? Int.max, max(1, risked / 2)))
    }
}

/// How many bytes a binary connection writes before its proof of
/// acceptance: about ``targetSeconds`` of what the gateway was last seen to
/// read, so that a proof's answer (the only news of progress) never waits
/// behind minutes of data in the socket buffers of a slow gateway.
package struct WindowByteLimit {
    /// Before anything was measured: on loopback one early proof (a
    /// reconnect) more; from a gateway reading 400 KB/s, news in 3 s.
    package static let first = 1 << 20
    package static let minimum = 256 << 10
    package static let maximum = 256 << 20
    /// How much of the gateway's reading a window may hold.
    package static let targetSeconds = 2.0

    package private(set) var bytes = WindowByteLimit.first

    /// A proof was answered `seconds` after the connection's first write,
    /// for `written` bytes: the gateway read them at that pace. Windows too
    /// small to measure (under ``minimum``) change nothing.
    package mutating func proven(written: Int, seconds: Double) {
        guard written >= Self.minimum, seconds > 0 else { return }
        let paced = Double(written) / seconds * Self.targetSeconds
        bytes = Int(min(Double(Self.maximum), max(Double(Self.minimum), paced)))
    }

    package init() {}
}
