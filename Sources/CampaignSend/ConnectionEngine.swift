#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import CampaignIO
import CampaignTLS
import LocalTime

/// A wire protocol's side of one connection: the turns of ``ConnectionEngine/run(_:)``.
protocol WireConnection: AnyObject {
    /// A connection to the gateway is open.
    var isConnected: Bool { get }
    /// Something can be sent now (a retry or resend, or the queue's frames).
    var hasWork: Bool { get }
    /// When the next notification waiting out a backoff falls due: an idle wait wakes then.
    var nextRetryDue: UInt64? { get }
    /// Starts a turn; false when this connection's work is over (everything
    /// taken is final, or a stop whose grace has run out).
    func beginTurn() -> Bool
    /// Opens a connection through the engine's dialer; false when none could be.
    func connect() -> Bool
    /// Frames what may go now.
    func frame()
    /// Writes, waits once (``ConnectionEngine/wait(on:events:watchQueue:timeout:)``),
    /// reads, turns what came into outcomes, and checks the connection is alive.
    func pump()
    /// The loop is over: closes the connection; what is unanswered stays pending.
    func end()
}

/// What every connection of a send does, whatever its wire protocol: it
/// runs the one connection loop (``run(_:)``), takes work from its queue,
/// dials (with backoff) through its ``GatewayDialer``, journals what may
/// reach the gateway before it can (write-ahead), waits on its socket
/// together with the stop, the halt and the queue's doorbell, counts
/// connections that went silent, and at the end leaves its queue and
/// reports how far each shard was handed over. ``ConnectionWorker``
/// (binary) and ``H2ConnectionWorker`` are the wire protocols it runs.
final class ConnectionEngine {
    let index: Int
    let queue: WorkQueue
    let shared: SendShared
    let settings: SendSettings
    let dialer: GatewayDialer
    /// How far each shard has been handed to this connection (for the journal's write-ahead).
    private(set) var marks: SentMarks
    /// The queue had nothing the last time it was looked at.
    var queueEmpty = false
    /// The queue is closed and empty: no work will ever come again.
    private(set) var inputFinished = false
    /// Connections in a row that went silent (no answer between them).
    private var silentInARow = 0
    /// The pool no longer needs this connection: it takes no new work,
    /// finishes what it holds, and closes (set from the pool's thread).
    private let retiring = Atomic<Bool>(false)

    func retire() { retiring.store(true, ordering: .releasing) }
    var isRetiring: Bool { retiring.load(ordering: .acquiring) }

    /// A scheduled plan whose rule may hold a due record back (quiet hours,
    /// `late: skip`): asked again as frames are taken to be written.
    let release: WireRelease?

    init(index: Int, queue: WorkQueue, shared: SendShared, settings: SendSettings, shards: Int, release: WireRelease? = nil) {
        self.index = index
        self.release = release
        self.queue = queue
        self.shared = shared
        self.settings = settings
        marks = SentMarks(shards: shards)
        dialer = GatewayDialer(settings: settings, shared: shared)
        queue.join()
    }

    var now: UInt64 { Deadline.now().nanoseconds }

    /// `--rate`, over every connection; nil without a limit.
    var rate: SharedRate? { shared.rate }

    func log(_ message: String) { shared.log("connection \(index + 1): \(message)") }

    // MARK: - The loop

    /// The connection's life, whatever the protocol: until the stop, each
    /// turn looks at the queue while no connection is open, ends when the
    /// protocol's work is over, waits for work (or the next retry) with
    /// nothing to do, dials when there is, frames and pumps.
    func run(_ wire: some WireConnection) {
        while !shared.cancellation.isCancelled {
            if !wire.isConnected { lookAtQueue() }
            guard wire.beginTurn() else { break }
            if !wire.isConnected {
                if !wire.hasWork {
                    waitForWork(until: wire.nextRetryDue)
                    continue
                }
                guard wire.connect() else { if shared.isFinished { break } else { continue } }
            }
            wire.frame()
            wire.pump()
        }
        wire.end()
        finish()
    }

    // MARK: - Work

    /// Looks at the queue without taking anything.
    func lookAtQueue() {
        let state = queue.state
        queueEmpty = state.empty
        inputFinished = inputFinished || state.finished
    }

    /// Takes whole frames from the queue into `out` (see ``WorkQueue/take(maxBytes:maxFrames:into:taken:)``); how many.
    /// A scheduled frame its ``release`` holds back is not taken: it is
    /// journaled as skipped, or left pending until its quiet hours end.
    func take(maxBytes: Int, maxFrames: Int, into out: inout [UInt8], taken: (QueuedFrame, Int) -> Void) -> Int {
        let n: Int, finished: Bool
        if let release {
            let now = wallClockSeconds()
            var held: [WireRelease.Held] = []
            (n, finished) = queue.take(maxBytes: maxBytes, maxFrames: maxFrames, into: &out,
                                       admit: { release.admit($0, bytes: $1, now: now, held: &held) }, taken: taken)
            if !held.isEmpty { shared.heldAtTheWire(held, now: Int64(now)) }
        } else {
            (n, finished) = queue.take(maxBytes: maxBytes, maxFrames: maxFrames, into: &out, taken: taken)
        }
        if finished { inputFinished = true }
        queueEmpty = n == 0 || queue.isEmpty
        return n
    }

    /// With no connection and nothing to send now: sleeps until `due` (a
    /// retry's time), new frames, the stop or the halt.
    func waitForWork(until due: UInt64?) {
        if let due, !inputFinished, !isRetiring {
            // Frames that come meanwhile need not wait for the retry (a
            // backoff may be 30 s): they wake the wait, as without one.
            queue.waitForFrames(orAnyOf: [shared.cancellation, shared.halt], timeout: Self.milliseconds(until: due, from: now))
        } else if let due {
            _ = sleep(until: Deadline(nanoseconds: due), cancellation: shared.halt)
        } else {
            queue.waitForFrames(orAnyOf: [shared.cancellation, shared.halt])
        }
    }

    /// A notification was handed to the connection.
    @inline(__always)
    func handed(shard: Int32, ordinal: Int32) { marks.handed(shard: shard, ordinal: ordinal) }

    /// Write-ahead: the journal learns what may reach the gateway before it
    /// can, so a resume after a crash knows which notifications may be duplicates.
    func journalHandedOver() {
        guard !marks.unmarked.isEmpty else { return }
        shared.markSent(shards: marks.unmarked, below: marks.below)
        marks.markedAll()
    }

    // MARK: - Waiting

    /// The poll timeout, in milliseconds (at most a second), until monotonic time `due`.
    static func milliseconds(until due: UInt64, from t: UInt64) -> Int32 {
        Int32(max(0, min(1000, (Int64(due) - Int64(t)) / 1_000_000 + 1)))
    }

    /// Waits until the socket is ready for `events`, the send stops or
    /// halts, `timeout` passes, or (with `watchQueue`) frames arrive;
    /// whether the socket is ready. When frames arrived before the wait
    /// could begin, it does not wait.
    func wait(on socket: Int32, events: Int16, watchQueue: Bool, timeout: Int32) -> Bool {
        var timeout = timeout
        var fds = [pollfd(fd: socket, events: events, revents: 0),
                   pollfd(fd: shared.cancellation.pollDescriptor, events: Int16(POLLIN), revents: 0),
                   // Once stopping, halt stays readable: watching it would turn
                   // the wait for the last answers into a busy loop (poll skips -1).
                   pollfd(fd: shared.isStopping ? -1 : shared.halt.pollDescriptor, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: queue.doorbell.pollDescriptor, events: Int16(POLLIN), revents: 0)]
        var watch = watchQueue
        if watch && !queue.prepareToSleep() {
            // Frames arrived meanwhile: no need to wait for them.
            watch = false
            queueEmpty = false
            timeout = 0
        }
        _ = poll(&fds, watch ? 4 : 3, timeout)
        return fds[0].revents != 0
    }

    // MARK: - Silence

    /// A connection went silent (it neither read nor answered): three in a
    /// row, with no answer between them, end the send (resumable) rather
    /// than retrying for ever. True when this one ended it.
    func wentSilent(_ what: String, giving sentence: String) -> Bool {
        silentInARow += 1
        log("\(what); reconnecting")
        guard silentInARow >= 3 else { return false }
        shared.fail(.unreachable(TLSError(.timedOut(operation: sentence))))
        return true
    }

    /// The gateway answered: silence starts counting again.
    func answered() { silentInARow = 0 }

    // MARK: - End

    /// No one takes from the queue any more (a plan reader waiting for room
    /// must not wait for ever); the journal learns how far each shard went.
    func finish() {
        dialer.dropSpare()
        queue.leave()
        shared.workerFinished(sentBelow: marks.map)
    }
}
