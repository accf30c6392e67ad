#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Synchronization

/// Reads rows on a thread of its own, in batches, while the caller plans the
/// rows read before: on two cores, tokenizing and planning overlap.
///
/// Rows, records and errors come out exactly as the wrapped reader gives
/// them, in order; an error comes after every row read before it. Row
/// buffers travel between the threads by swapping, so nothing is copied or
/// allocated per row once the batches are warm.
public final class PrefetchingAudienceReader: AudienceReader, @unchecked Sendable {
    /// A copy of the wrapped reader's schema, as of the batch being consumed
    /// (the wrapped one changes on the reading thread).
    public let schema = AudienceSchema()

    private final class Batch: @unchecked Sendable {
        var rows: [AudienceRow]
        var records: [AudienceRecord?]
        var count = 0
        var schemaNames: [String] = []
        var failure: Error?
        var ended = false

        init(size: Int) {
            rows = Array(repeating: AudienceRow(), count: size)
            records = Array(repeating: nil, count: size)
        }
    }

    /// What the reading thread shares with the reader. The thread holds this,
    /// not the reader, so a reader dropped early is freed and tells it to stop.
    private final class Pipeline: @unchecked Sendable {
        let inner: AudienceReader
        let filled = DispatchSemaphore(value: 0)
        let emptied: DispatchSemaphore
        // A pthread mutex rather than Synchronization.Mutex: ThreadSanitizer
        // understands the former (the latter is futex-based on Linux).
        private var mutex = pthread_mutex_t()
        private var full: [Batch] = []
        private var free: [Batch] = []
        let stopping = Atomic<Bool>(false)

        func withQueues<R>(_ body: (inout [Batch], inout [Batch]) -> R) -> R {
            pthread_mutex_lock(&mutex)
            defer { pthread_mutex_unlock(&mutex) }
            return body(&full, &free)
        }

        deinit { pthread_mutex_destroy(&mutex) }

        init(inner: AudienceReader, batchRows: Int, batches: Int) {
            self.inner = inner
            // Made at 0 and raised: libdispatch traps when a semaphore is freed
            // below the value it was made with, as this one is after an early stop.
            emptied = DispatchSemaphore(value: 0)
            pthread_mutex_init(&mutex, nil)
            free = (0..<batches).map { _ in Batch(size: batchRows) }
            for _ in 0..<batches { emptied.signal() }
        }

        func produce() {
            var schemaCount = -1
            while true {
                emptied.wait()
                if stopping.load(ordering: .relaxed) { return }
                guard let batch = withQueues({ _, free in free.popLast() }) else { return }
                batch.count = 0
                batch.failure = nil
                do {
                    while batch.count < batch.rows.count {
                        guard let record = try inner.next(into: &batch.rows[batch.count]) else {
                            batch.ended = true
                            break
                        }
                        batch.records[batch.count] = record
                        batch.count += 1
                    }
                } catch {
                    batch.failure = error
                    batch.ended = true
                }
                if inner.schema.count != schemaCount {
                    schemaCount = inner.schema.count
                    batch.schemaNames = inner.schema.names
                } else {
                    batch.schemaNames = []
                }
                withQueues { full, _ in full.insert(batch, at: 0) }
                filled.signal()
                if batch.ended { return }
            }
        }
    }

    private let pipeline: Pipeline
    private var current: Batch?
    private var position = 0
    private var done = false

    /// Starts reading `inner` at once, `batches` batches of `batchRows` rows ahead at most.
    public init(_ inner: AudienceReader, batchRows: Int = 512, batches: Int = 4) {
        pipeline = Pipeline(inner: inner, batchRows: batchRows, batches: batches)
        let pipeline = self.pipeline
        Thread { pipeline.produce() }.start()
    }

    deinit {
        // A caller that stops early: the reading thread ends at its next batch.
        pipeline.stopping.store(true, ordering: .relaxed)
        pipeline.emptied.signal()
    }

    public func next(into row: inout AudienceRow) throws -> AudienceRecord? {
        while true {
            if let batch = current {
                if position < batch.count {
                    swap(&row, &batch.rows[position])
                    let record = batch.records[position]!
                    batch.records[position] = nil
                    position += 1
                    return record
                }
                current = nil
                if let failure = batch.failure {
                    done = true
                    throw failure
                }
                if batch.ended {
                    done = true
                    return nil
                }
                pipeline.withQueues { _, free in free.append(batch) }
                pipeline.emptied.signal()
            }
            if done { return nil }
            pipeline.filled.wait()
            let batch = pipeline.withQueues { full, _ in full.removeLast() }
            for name in batch.schemaNames { schema.add(name) }
            current = batch
            position = 0
        }
    }
}

/// A thread, without Foundation.
private final class Thread: @unchecked Sendable {
    private let body: () -> Void

    init(_ body: @escaping () -> Void) { self.body = body }

    func start() {
        var handle = pthread_t()
        let box = Unmanaged.passRetained(self).toOpaque()
        let result = pthread_create(&handle, nil, { raw in
            let thread = Unmanaged<Thread>.fromOpaque(raw!).takeRetainedValue()
            thread.body()
            return nil
        }, box)
        precondition(result == 0, "cannot start a reading thread")
        pthread_detach(handle)
    }
}
