#if canImport(Glibc)
import Glibc
#endif

/// The project's one lock: a pthread mutex in memory of its own, so its
/// address never changes (as NIO's `NIOLock` keeps it). A `pthread_mutex_t`
/// stored as a Swift property and passed with `&` has no such promise: an
/// inout access may go through a temporary copy, and a mutex must never be
/// copied. A pthread mutex, not `Synchronization.Mutex`, because
/// ThreadSanitizer sees its ordering (it cannot see the futex under `Mutex`).
public final class Lock: @unchecked Sendable {
    fileprivate let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    @inline(__always)
    public func lock() { pthread_mutex_lock(mutex) }

    @inline(__always)
    public func unlock() { pthread_mutex_unlock(mutex) }

    @inline(__always)
    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// A condition variable, waited on with a ``Lock`` held; stable in memory
/// like the lock.
public final class Condition: @unchecked Sendable {
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    public init() {
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deinitialize(count: 1)
        condition.deallocate()
    }

    /// Releases `lock`, waits for a signal, takes `lock` again. Callers
    /// re-check their condition in a loop (wake-ups may be spurious).
    public func wait(_ lock: Lock) { pthread_cond_wait(condition, lock.mutex) }

    /// As ``wait(_:)``, for at most `seconds`; false when the time ran out.
    @discardableResult
    public func wait(_ lock: Lock, seconds: Double) -> Bool {
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        let nanoseconds = Int(deadline.tv_nsec) + Int(seconds * 1e9)
        deadline.tv_sec += nanoseconds / 1_000_000_000
        deadline.tv_nsec = nanoseconds % 1_000_000_000
        return pthread_cond_timedwait(condition, lock.mutex, &deadline) == 0
    }

    public func signal() { pthread_cond_signal(condition) }
    public func broadcast() { pthread_cond_broadcast(condition) }
}
