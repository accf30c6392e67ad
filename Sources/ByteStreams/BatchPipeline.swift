#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Synchronization
import CampaignIO

/// Batches filled on a thread of its own and handed to one consumer in the
/// order they were filled, a few ahead at most: two stages of work overlap
/// on two cores. Batches are reused, so nothing is allocated per batch once
/// they are warm.
///
/// The filling thread stops after a batch `fill` says is the last, or at the
/// next batch after ``stop()``. It holds the pipeline, not the consumer, so
/// a consumer that gives up early frees what it owns.
public final class BatchPipeline<Batch: AnyObject>: @unchecked Sendable {
    private let filled = DispatchSemaphore(value: 0)
    // Made at 0 and raised: libdispatch traps when a semaphore is freed below
    // the value it was made with, as this one is after an early stop.
    private let emptied = DispatchSemaphore(value: 0)
    private let mutex = Lock()
    private var full: [(batch: Batch, last: Bool)] = []
    private var free: [Batch]
    private let stopping = Atomic<Bool>(false)
    private var lastHanded = false
    /// For a later stage: where its batches come from and go back to.
    private let upstream: BatchPipeline<Batch>?

    /// Starts filling at once. `fill` runs on the pipeline's thread, one
    /// batch at a time; it returns false for the last batch.
    public init(batches: [Batch], fill: @escaping @Sendable (Batch) -> Bool) {
        precondition(!batches.isEmpty)
        free = batches
        upstream = nil
        for _ in batches { emptied.signal() }
        // The thread holds the pipeline strongly until it ends.
        startDetachedThread { [self] in runFilling(fill) }
    }

    /// A later stage: takes each batch `upstream` hands out, in order, runs
    /// `work` on it on a thread of its own and hands it on. Batches given
    /// back to this stage go back to `upstream`, to be filled again.
    public init(after upstream: BatchPipeline<Batch>, work: @escaping @Sendable (Batch) -> Void) {
        free = []
        self.upstream = upstream
        startDetachedThread { [self] in
            while !stopping.load(ordering: .relaxed), let batch = upstream.next() {
                work(batch)
                let last = upstream.lastHanded
                locked { full.append((batch, last)) }
                filled.signal()
                if last { return }
            }
        }
    }

    private func locked<R>(_ body: () -> R) -> R {
        mutex.lock()
        defer { mutex.unlock() }
        return body()
    }

    /// The next filled batch, waiting for it; nil once the last was handed
    /// out, or after ``stop()``.
    public func next() -> Batch? {
        if lastHanded { return nil }
        filled.wait()
        guard let (batch, last) = locked({ full.isEmpty ? nil : full.removeFirst() }) else {
            lastHanded = true  // stopped
            return nil
        }
        lastHanded = last
        return batch
    }

    /// Gives a batch back to be filled again.
    public func recycle(_ batch: Batch) {
        if let upstream { return upstream.recycle(batch) }
        locked { free.append(batch) }
        emptied.signal()
    }

    /// Asks the pipeline's thread (and those of the stages before it) to
    /// end; each does at its next batch. A stage waiting for a batch from
    /// the stage before gets none.
    public func stop() {
        stopping.store(true, ordering: .relaxed)
        emptied.signal()
        if let upstream {
            upstream.stop()
            upstream.filled.signal()
        }
    }

    fileprivate func runFilling(_ fill: (Batch) -> Bool) {
        while true {
            emptied.wait()
            if stopping.load(ordering: .relaxed) { return }
            guard let batch = locked({ free.popLast() }) else { return }
            let more = fill(batch)
            locked { full.append((batch, !more)) }
            filled.signal()
            if !more { return }
        }
    }
}
