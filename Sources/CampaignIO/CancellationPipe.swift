import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A pipe whose read end every blocking wait also polls, so one call to
/// ``cancel()`` wakes every thread that waits on a socket: the way the
/// simulator stops and the sender reacts to signals without sleeping or
/// timing out.
public final class CancellationPipe: @unchecked Sendable {
    let readFD: Int32
    private let writeFD: Int32
    /// Set with the first cancel(): checking it costs no system call, which
    /// matters in loops that ask once per notification.
    private let cancelled = Atomic<Bool>(false)

    public init() throws(IOError) {
        var fds: [Int32] = [0, 0]
        try syscall("pipe") { pipe(&fds) }
        readFD = fds[0]
        writeFD = fds[1]
        for fd in fds {
            let flags = fcntl(fd, F_GETFL)
            _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
    }

    deinit {
        close(readFD)
        close(writeFD)
    }

    /// Wakes every waiter, now and later. Safe to call from a signal handler's
    /// thread, and more than once.
    public func cancel() {
        cancelled.store(true, ordering: .releasing)
        signalPipe()
    }

    private func signalPipe() {
        var byte: UInt8 = 1
        _ = write(writeFD, &byte, 1)
    }

    /// Wakes waiters, like ``cancel()``; a pipe used as a doorbell is rung
    /// many times and ``drain()``ed between rings.
    public func ring() { signalPipe() }

    /// Empties the pipe, so a doorbell can be rung again.
    public func drain() {
        var sink = [UInt8](repeating: 0, count: 64)
        while read(readFD, &sink, sink.count) > 0 {}
    }

    /// The descriptor to poll for readability.
    public var pollDescriptor: Int32 { readFD }

    /// Whether ``cancel()`` has been called.
    public var isCancelled: Bool {
        cancelled.load(ordering: .acquiring)
    }
}

/// A point in time on the monotonic clock.
public struct Deadline: Sendable, Comparable {
    public var nanoseconds: UInt64

    public init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }

    /// Never passes.
    public static let distantFuture = Deadline(nanoseconds: .max)

    public static func now() -> Deadline {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Deadline(nanoseconds: UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec))
    }

    public static func after(seconds: Double) -> Deadline {
        Deadline(nanoseconds: now().nanoseconds + UInt64(max(0, seconds) * 1e9))
    }

    public static func after(milliseconds: Int) -> Deadline {
        Deadline(nanoseconds: now().nanoseconds + UInt64(max(0, milliseconds)) * 1_000_000)
    }

    /// Milliseconds left, rounded up, for poll(2); 0 once passed.
    var pollTimeout: Int32 {
        if nanoseconds == .max { return -1 }
        let now = Deadline.now().nanoseconds
        guard nanoseconds > now else { return 0 }
        return Int32(min(Int64(Int32.max), Int64((nanoseconds - now + 999_999) / 1_000_000)))
    }

    public static func < (a: Deadline, b: Deadline) -> Bool { a.nanoseconds < b.nanoseconds }
}

/// What a wait on a socket ended with.
public enum WaitResult: Sendable {
    case ready
    case cancelled
    case timedOut
}

/// Waits until `fd` is readable or writable, the pipe is cancelled, or the
/// deadline passes.
public func waitFor(fd: Int32, events: Int16, cancellation: CancellationPipe?, deadline: Deadline?) -> WaitResult {
    var fds = [pollfd(fd: fd, events: events, revents: 0)]
    if let cancellation { fds.append(pollfd(fd: cancellation.readFD, events: Int16(POLLIN), revents: 0)) }
    // On an error other than EINTR, the caller's next I/O call reports it.
    guard let n = try? syscall("poll", { poll(&fds, nfds_t(fds.count), deadline?.pollTimeout ?? -1) }) else { return .ready }
    if fds.count > 1, fds[1].revents != 0 { return .cancelled }
    return n == 0 ? .timedOut : .ready
}

/// Sleeps until the deadline or cancellation, whichever comes first. Returns
/// false when cancelled.
public func sleep(until deadline: Deadline, cancellation: CancellationPipe?) -> Bool {
    guard let cancellation else {
        var fds = pollfd()
        while Deadline.now() < deadline { _ = poll(&fds, 0, deadline.pollTimeout) }
        return true
    }
    var fds = [pollfd(fd: cancellation.readFD, events: Int16(POLLIN), revents: 0)]
    while true {
        let n = poll(&fds, 1, deadline.pollTimeout)
        if n > 0 { return false }
        if n == 0 || Deadline.now() >= deadline { return true }
    }
}
