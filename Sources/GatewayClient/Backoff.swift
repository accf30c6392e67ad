/// How long a notification waits before it goes again after the gateway's
/// trouble (HTTP/2: 429, 5xx, REFUSED_STREAM, a reset; binary: status 1,
/// 255 and undefined codes): `base` (``SendSettings/retryBackoffSeconds``,
/// 250 ms) doubling to 30 s, each drawn between half and one and a half times
/// that (so notifications refused together do not come back together). A
/// server's `retry-after` can only lengthen the wait, never shorten it: one
/// that says 0 (or less) on every 429 would otherwise get every notification
/// again at once, as fast as it can answer (105,978 requests in 20 s for
/// 3,000 notifications).
public enum RetryBackoff {
    public static let firstSeconds = 0.25
    public static let maximumSeconds = 30.0
    public static let jitter: ClosedRange<Double> = 0.5...1.5

    /// The backoff before jitter, `retries` answers in (0 is taken as 1: a
    /// reset does not count a retry, and still waits the first step).
    public static func baseSeconds(retries: Int, base: Double = firstSeconds) -> Double {
        min(maximumSeconds, base * Double(1 << min(max(retries, 1) - 1, 16)))
    }

    /// The wait: the backoff times `jitter`, or the server's `retry-after`
    /// when that is longer (already capped at ``H2Answer/maxRetryAfterSeconds``).
    public static func seconds(retries: Int, base: Double = firstSeconds, retryAfterSeconds: Int? = nil,
                               jitter: Double = Double.random(in: jitter)) -> Double {
        max(baseSeconds(retries: retries, base: base) * jitter, Double(max(0, retryAfterSeconds ?? 0)))
    }

    /// The shortest wait before a retry, whatever the server says and however the jitter falls.
    public static func shortestSeconds(retries: Int, base: Double = firstSeconds) -> Double {
        baseSeconds(retries: retries, base: base) * jitter.lowerBound
    }
}

/// Delays between failed connection attempts: 100 ms doubling to 30 s, each
/// drawn between half and one and a half times that (so that connections
/// that failed together do not come back together).
package struct ReconnectBackoff {
    private(set) var failures = 0

    package init() {}

    package mutating func succeeded() { failures = 0 }

    /// Counts a failure; returns the seconds to wait before the next attempt.
    package mutating func failed() -> Double {
        failures += 1
        let base = min(30.0, 0.1 * Double(1 << min(failures - 1, 9)))
        return base * Double.random(in: 0.5...1.5)
    }
}
