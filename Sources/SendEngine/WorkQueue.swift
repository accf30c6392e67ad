#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import GatewayClient

/// A frame waiting in a queue: where its bytes are, and what it is.
package struct QueuedFrame {
    package var seq: UInt64
    package var shard: Int32
    package var ordinal: Int32
    package var start: Int
    package var count: Int
    /// A scheduled notification's moment (UNIX seconds), 0 for any other:
    /// whether it may still go is decided again when it is taken to be written.
    package var moment: Int64 = 0
    /// Quiet hours: its device's zone in the send's ``ZoneRegistry``, or -1.
    package var zone: Int32 = -1

    @inlinable
    package init(seq: UInt64, shard: Int32, ordinal: Int32, start: Int, count: Int, moment: Int64 = 0, zone: Int32 = -1) {
        (self.seq, self.shard, self.ordinal, self.start, self.count, self.moment, self.zone) = (seq, shard, ordinal, start, count, moment, zone)
    }
}

/// Frames the plan reader has encoded for one connection and not yet queued.
///
/// The reader fills one of these per connection and hands it over whole: one
/// lock, and at most one wake-up, per batch instead of per notification (the
/// per-notification lock was the send's busiest system call: 111,000 futex
/// calls for a million notifications).
package struct FrameBatch {
    package var bytes: [UInt8] = []
    package var frames: [QueuedFrame] = []

    /// Frames a batch collects before it is handed over.
    package static let handOverFrames = 256

    package var isEmpty: Bool { frames.isEmpty }
    package var isFull: Bool { frames.count >= Self.handOverFrames }

    /// Encodes one frame at the end of the batch (inlinable: the plan reader,
    /// in another module, calls it for every record).
    @inlinable
    package mutating func append(seq: UInt64, shard: Int32, ordinal: Int32, moment: Int64 = 0, zone: Int32 = -1, encode: (inout [UInt8]) -> Void) {
        let start = bytes.count
        encode(&bytes)
        frames.append(QueuedFrame(seq: seq, shard: shard, ordinal: ordinal, start: start, count: bytes.count - start,
                                  moment: moment, zone: zone))
    }

    package mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        frames.removeAll(keepingCapacity: true)
    }
}

/// A bounded queue of encoded frames from the plan reader to the connections
/// that take from it: one per connection for the binary interface, one for
/// all of them over HTTP/2.
///
/// Frames live in one byte arena, so queueing a notification allocates
/// nothing, and the connection copies whole frames out into its batch. The
/// reader blocks while the queue is full and is woken only once the
/// connection has drained it to half (backpressure without a wake-up per
/// frame); the connection is woken through a pipe it polls with its socket.
package final class WorkQueue: @unchecked Sendable {
    private var bytes: [UInt8] = []
    private var frames: [QueuedFrame] = []
    private var head = 0
    private var closed = false
    /// Set by the connection just before it sleeps on the doorbell: the only
    /// time a push needs to ring it (a ring is a system call and a wake-up).
    private var waiterSleeping = false
    /// The doorbell has been rung and not drained: only then does a take
    /// need the system call that empties it.
    private var rung = false
    /// The reader is waiting for room.
    private var producerWaiting = false
    /// Nothing pushed from now on would be taken: the connection has stopped,
    /// or the send is stopping or has given up.
    private var abandoned = false
    private let capacity: Int
    private let mutex = Lock()
    private let notFull = Condition()
    package let doorbell: CancellationPipe

    package init(capacity: Int) throws {
        self.capacity = capacity
        doorbell = try CancellationPipe()
        frames.reserveCapacity(capacity * 2)
        bytes.reserveCapacity(capacity * 256)
    }

    /// Moves every frame of `batch` into the queue (leaving `batch` empty),
    /// waiting while the queue is full. False when cancelled or abandoned
    /// (before or during the wait); the batch is then left as it was.
    ///
    /// The wait ends on room, on ``abandon()`` (which broadcasts), and on
    /// `cancellation`, which a signal may set without touching this queue's
    /// condition: for that one the wait wakes every 50 ms to look.
    package func push(_ batch: inout FrameBatch, cancellation: CancellationPipe) -> Bool {
        guard !batch.isEmpty else { return true }
        mutex.lock()
        while !abandoned, frames.count - head >= capacity {
            if cancellation.isCancelled { mutex.unlock(); return false }
            producerWaiting = true
            notFull.wait(mutex, seconds: 0.05)
            producerWaiting = false
        }
        if abandoned { mutex.unlock(); return false }
        if head >= capacity / 2 { compact() }
        let offset = bytes.count
        bytes.append(contentsOf: batch.bytes)
        for var frame in batch.frames {
            frame.start += offset
            frames.append(frame)
        }
        if waiterSleeping {
            // Rung under the lock, so a take that drains the pipe (under the
            // lock) never misses a byte and leaves the doorbell ringing.
            waiterSleeping = false
            rung = true
            doorbell.ring()
        }
        mutex.unlock()
        batch.removeAll()
        return true
    }

    /// Drops what has been taken, so the arena does not grow.
    private func compact() {
        if head == frames.count {
            frames.removeAll(keepingCapacity: true)
            bytes.removeAll(keepingCapacity: true)
        } else {
            let offset = frames[head].start
            frames.removeFirst(head)
            bytes.removeFirst(offset)
            for i in frames.indices { frames[i].start -= offset }
        }
        head = 0
    }

    /// Appends whole frames to `out` until `maxBytes` or `maxFrames` would be
    /// passed, calling `taken` with each frame and its offset in `out`.
    /// `finished` when the queue is closed and empty.
    /// `admit`, when given, sees each frame first (under the queue's lock: it
    /// must be quick and touch no queue); a frame it refuses is taken from
    /// the queue without being appended or counted.
    package func take(maxBytes: Int, maxFrames: Int, into out: inout [UInt8], admit: ((QueuedFrame, UnsafeBufferPointer<UInt8>) -> Bool)? = nil,
              taken: (QueuedFrame, Int) -> Void) -> (count: Int, finished: Bool) {
        mutex.lock()
        var n = 0
        var budget = maxBytes
        while head < frames.count, n < maxFrames {
            let frame = frames[head]
            if let admit, !bytes.withUnsafeBufferPointer({ admit(frame, UnsafeBufferPointer(rebasing: $0[frame.start..<(frame.start + frame.count)])) }) {
                head += 1
                continue
            }
            if n > 0 && frame.count > budget { break }
            let offset = out.count
            bytes.withUnsafeBufferPointer { out.append(contentsOf: UnsafeBufferPointer(rebasing: $0[frame.start..<(frame.start + frame.count)])) }
            taken(frame, offset)
            budget -= frame.count
            head += 1
            n += 1
        }
        if producerWaiting, frames.count - head <= capacity / 2 { notFull.signal() }
        let empty = frames.count == head
        // The doorbell is silenced only once the queue is empty: connections
        // that share a queue all sleep on it, and one that takes a few
        // frames must not leave the others asleep beside the rest. Once the
        // queue is closed it rings for good: a connection asleep on it must
        // wake to learn that no work will come, even if another drained the
        // bell between the close's ring and its poll looking.
        if rung, empty, !closed {
            rung = false
            doorbell.drain()
        }
        let finished = closed && empty
        mutex.unlock()
        return (n, finished)
    }

    /// Called before sleeping on the doorbell: true when the sleep may begin
    /// (nothing waiting), and then the next push rings.
    package func prepareToSleep() -> Bool {
        mutex.lock()
        defer { mutex.unlock() }
        guard frames.count == head, !closed else { return false }
        waiterSleeping = true
        return true
    }

    /// Sleeps until a frame is pushed, the queue closes, one of `pipes` is
    /// readable, or `timeout` milliseconds (at most a second) pass on
    /// `clock`; at once when frames are waiting.
    package func waitForFrames(orAnyOf pipes: [CancellationPipe], timeout: Int32 = 1000, clock: SendClock = SystemClock.shared) {
        guard prepareToSleep() else { return }
        var fds = ([doorbell] + pipes).map { pollfd(fd: $0.pollDescriptor, events: Int16(POLLIN), revents: 0) }
        clock.poll(&fds, count: fds.count, milliseconds: max(0, min(1000, timeout)))
    }

    /// Whether no frame is waiting, and whether none ever will again.
    package var state: (empty: Bool, finished: Bool) {
        mutex.lock()
        defer { mutex.unlock() }
        let empty = frames.count == head
        return (empty, closed && empty)
    }

    package var isEmpty: Bool { state.empty }

    /// No frame will be taken any more: the connection has stopped, or the
    /// send is stopping or giving up. Wakes a reader waiting for room; every
    /// push from now on returns false, so the reader never waits for a
    /// connection that is gone (before this, a full queue held it for ever).
    package func abandon() {
        mutex.lock()
        abandoned = true
        consumers = 0
        notFull.broadcast()
        mutex.unlock()
    }

    private var consumers = 0

    /// A connection starts taking from this queue.
    package func join() {
        mutex.lock(); consumers += 1; mutex.unlock()
    }

    /// A connection stops taking from this queue; when the last one has
    /// left, the queue is abandoned (see ``abandon()``).
    package func leave() {
        mutex.lock()
        consumers -= 1
        let last = consumers <= 0
        mutex.unlock()
        if last { abandon() }
    }

    /// No more frames will come.
    package func close() {
        mutex.lock()
        closed = true
        waiterSleeping = false
        rung = true
        doorbell.ring()
        mutex.unlock()
    }
}
