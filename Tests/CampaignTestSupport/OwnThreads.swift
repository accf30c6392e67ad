import Foundation
import Testing

/// A task executor whose jobs each run on a thread of their own: an idle
/// thread of the pool if there is one, a new thread otherwise.
///
/// Swift Testing runs test functions on the concurrency runtime's cooperative
/// pool, which has one thread per core. A synchronous test that waits (for a
/// child process to exit, for a wall-clock moment, on a semaphore) holds one
/// of those threads for as long as it waits, so on a 2-core machine two such
/// tests stall every other test, even the 1 ms ones, and those queued count
/// the wait against their time limits. Under ``Trait/ownThreads`` a suite's
/// tests run here instead: they may block as they always did, the cooperative
/// threads stay free, and how many tests run at once is Swift Testing's
/// parallelization width alone (`SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH`,
/// set by `make test`).
public final class OwnThreadsExecutor: TaskExecutor, @unchecked Sendable {
    public static let shared = OwnThreadsExecutor()

    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    /// Threads waiting for a job.
    private var idle = 0
    /// Threads started so far (they wait for the next job when idle; never more than the most jobs at once).
    public private(set) var threads = 0

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        let spawn = idle < jobs.count
        if spawn { threads += 1 } else { condition.signal() }
        let number = threads   // read under the lock (ThreadSanitizer saw the name read it after)
        condition.unlock()
        if spawn {
            let thread = Thread { [self] in work() }
            thread.name = "test \(number)"
            thread.stackSize = 8 << 20
            thread.start()
        }
    }

    /// Whether the calling thread is one of the pool's.
    public static var isCurrent: Bool { Thread.current.threadDictionary[marker] != nil }
    private static let marker = "campaign.OwnThreadsExecutor"

    private func work() {
        Thread.current.threadDictionary[Self.marker] = true
        condition.lock()
        while true {
            while jobs.isEmpty {
                idle += 1
                condition.wait()
                idle -= 1
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
            condition.lock()
        }
    }
}

/// Runs a suite's tests (and their cases) on ``OwnThreadsExecutor``: see there.
public struct OwnThreadsTrait: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?,
                             performing function: @Sendable () async throws -> Void) async throws {
        try await withTaskExecutorPreference(OwnThreadsExecutor.shared) {
            try await function()
        }
    }
}

extension Trait where Self == OwnThreadsTrait {
    /// The suite's tests wait (for processes, clocks, semaphores) on threads of
    /// their own, not on the cooperative pool's one thread per core.
    public static var ownThreads: Self { Self() }
}
