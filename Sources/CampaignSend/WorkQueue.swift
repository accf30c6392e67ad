#if canImport(Glibc)
import Glibc
#endif
import CampaignTLS

/// One notification to send.
struct WorkItem: Sendable {
    var seq: UInt64
    var shard: Int32
    /// Its index among its shard's records: what the journal counts.
    var ordinal: Int32
    var token: [UInt8]
    var payload: [UInt8]
}

/// A bounded queue from the plan reader to one connection. The reader blocks
/// when it is full (backpressure); the connection is woken through a pipe it
/// polls together with its socket.
final class WorkQueue: @unchecked Sendable {
    private var items: [WorkItem] = []
    private var head = 0
    private var closed = false
    private let capacity: Int
    private var mutex = pthread_mutex_t()
    private var notFull = pthread_cond_t()
    let doorbell: CancellationPipe

    init(capacity: Int) throws {
        self.capacity = capacity
        doorbell = try CancellationPipe()
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&notFull, nil)
        items.reserveCapacity(capacity)
    }

    deinit {
        pthread_mutex_destroy(&mutex)
        pthread_cond_destroy(&notFull)
    }

    /// Adds an item, waiting while the queue is full. False when cancelled.
    func push(_ item: WorkItem, cancellation: CancellationPipe) -> Bool {
        pthread_mutex_lock(&mutex)
        while items.count - head >= capacity {
            if cancellation.isCancelled { pthread_mutex_unlock(&mutex); return false }
            var deadline = timespec()
            clock_gettime(CLOCK_REALTIME, &deadline)
            deadline.tv_nsec += 50_000_000
            if deadline.tv_nsec >= 1_000_000_000 { deadline.tv_sec += 1; deadline.tv_nsec -= 1_000_000_000 }
            pthread_cond_timedwait(&notFull, &mutex, &deadline)
        }
        let wasEmpty = items.count == head
        items.append(item)
        pthread_mutex_unlock(&mutex)
        if wasEmpty { doorbell.ring() }
        return true
    }

    /// Takes up to `max` items without waiting; `finished` when closed and drained.
    func take(max: Int, into out: inout [WorkItem]) -> (taken: Int, finished: Bool) {
        pthread_mutex_lock(&mutex)
        let n = min(max, items.count - head)
        if n > 0 {
            out.append(contentsOf: items[head..<(head + n)])
            head += n
            if head > 4096 && head * 2 > items.count {
                items.removeFirst(head)
                head = 0
            }
            pthread_cond_signal(&notFull)
        }
        let finished = closed && items.count == head
        if items.count == head { doorbell.drain() }
        pthread_mutex_unlock(&mutex)
        return (n, finished)
    }

    /// No more items will come.
    func close() {
        pthread_mutex_lock(&mutex)
        closed = true
        pthread_mutex_unlock(&mutex)
        doorbell.ring()
    }
}
