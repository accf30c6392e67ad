#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import CampaignIO
import CampaignTLS
import LocalTime
import SendJournal
import GatewayClient

/// What every connection of a send does, whatever its wire protocol: it
/// runs the one connection loop (``run(_:)``), takes work from its queue,
/// dials (with backoff) through its ``GatewayDialer``, owns the link (reads,
/// writes in batches on the rate and the batch delay, waits on it together
/// with the stop, the halt and the queue's doorbell, closes it), journals
/// what may reach the gateway before it can (write-ahead), notices a link
/// that stopped reading or answering, and at the end leaves its queue and
/// reports how far each shard was handed over. A ``WireConnection`` only
/// encodes, decodes and decides.
package final class ConnectionEngine {
    package let index: Int
    package let queue: WorkQueue
    package let shared: SendShared
    package let settings: SendSettings
    package let dialer: LinkDialer
    package let clock: SendClock
    /// How far each shard has been handed to this connection (for the journal's write-ahead).
    /// Usable from inline for ``handed(shard:ordinal:)``, called once per notification from the workers' modules.
    @usableFromInline package internal(set) var marks: SentMarks
    /// The queue had nothing the last time it was looked at.
    package var queueEmpty = false
    /// The queue is closed and empty: no work will ever come again.
    package private(set) var inputFinished = false
    /// Connections in a row that went silent (no answer between them).
    private var silentInARow = 0
    /// The pool no longer needs this connection: it takes no new work,
    /// finishes what it holds, and closes (set from the pool's thread).
    private let retiring = Atomic<Bool>(false)
    package private(set) var state = ConnectionState.closed
    private var readBuffer = [UInt8](repeating: 0, count: 65_536)
    /// A turn's wait has seen ``inputFinished`` (see ``pump(_:)``).
    private var endSeenByAWait = false

    package func retire() { retiring.store(true, ordering: .releasing) }
    package var isRetiring: Bool { retiring.load(ordering: .acquiring) }

    /// A scheduled plan whose rule may hold a due record back (quiet hours,
    /// `late: skip`): asked again as frames are taken to be written.
    package let release: WireRelease?
    /// A plan with a frequencyCap and a ledger: claimed as frames are taken to be written.
    package let cap: WireCap?

    package init(index: Int, queue: WorkQueue, shared: SendShared, settings: SendSettings, shards: Int, release: WireRelease? = nil,
         cap: WireCap? = nil, dialer: LinkDialer? = nil) {
        self.index = index
        self.release = release
        self.cap = cap
        self.queue = queue
        self.shared = shared
        self.settings = settings
        self.clock = shared.clock
        marks = SentMarks(shards: shards)
        self.dialer = dialer ?? GatewayDialer(settings: settings, shared: shared)
        queue.join()
    }

    package var now: UInt64 { clock.now }

    /// `--rate`, over every connection; nil without a limit.
    package var rate: SharedRate? { shared.rate }

    package func log(_ message: String) { shared.log("connection \(index + 1): \(message)") }

    // MARK: - The open connection

    /// What exists while the connection is open; nil when closed.
    private var open: ConnectionState.OpenConnection? {
        switch state {
        case .open(let c): c
        case .closed: nil
        }
    }

    package var isConnected: Bool { open != nil }

    /// The open connection's link, if any.
    package var link: ConnectionLink? { open?.link }

    /// The connection's bytes, written and to write (empty when closed).
    package var outbound: [UInt8] { open?.outbound ?? [] }

    /// How many of ``outbound`` have been written.
    package var written: Int { open?.written ?? 0 }

    /// When this connection's first bytes were written.
    package var firstWriteAt: UInt64? { open?.firstWriteAt }

    /// Appends to the bytes to write (nothing when closed).
    package func withOutbound<T, E: Error>(_ body: (inout [UInt8]) throws(E) -> T) throws(E) -> T {
        switch state {
        case .open(var c):
            state = .closed   // keeps the buffer uniquely referenced while it grows
            defer { state = .open(c) }
            return try body(&c.outbound)
        case .closed:
            var none: [UInt8] = []
            return try body(&none)
        }
    }

    /// Forgets the bytes written so far (a protocol that keeps none, or a window that ended).
    private func dropWritten() {
        changeOpen { c in
            if c.written == c.outbound.count { c.outbound.removeAll(keepingCapacity: true) } else { c.outbound.removeFirst(c.written) }
            c.written = 0
            if c.outbound.isEmpty { c.batchStartedAt = nil }
        }
    }

    /// Closes the link (cleanly: the peer reads every byte first), or aborts it.
    private func close(abort: Bool) {
        guard var c = open else { return }
        abort ? c.link.abort() : c.link.close()
        state = .closed
        // The buffer's memory serves the next connection: growing a window's
        // megabytes anew on each (a binary connection lasts one window) cost
        // page faults that halved a loaded machine's send rate.
        c.outbound.removeAll(keepingCapacity: true)
        spareOutbound = c.outbound
    }

    /// The last connection's outbound buffer, emptied, for the next.
    private var spareOutbound: [UInt8] = []

    /// Dials; the protocol accepts the link or refuses it.
    private func connect(_ wire: some WireConnection) -> Bool {
        guard let link = dialer.connect() else { return false }
        let t = now
        var outbound = spareOutbound
        spareOutbound = []
        if outbound.capacity == 0 { outbound.reserveCapacity(settings.batchBytes * 4) }
        state = .open(.init(link: link, outbound: outbound, lastWriteProgress: t, lastReadAt: t))
        guard wire.opened(link) else {
            close(abort: true)
            return false
        }
        return true
    }

    // MARK: - The loop

    /// The connection's life, whatever the protocol: until the stop, each
    /// turn looks at the queue while no connection is open, ends when the
    /// protocol's work is over, waits for work (or the next retry) with
    /// nothing to do, dials when there is, frames and pumps.
    package func run(_ wire: some WireConnection) {
        while !shared.cancellation.isCancelled {
            if !isConnected { lookAtQueue() }
            guard wire.beginTurn() else { break }
            if !isConnected {
                if !wire.hasWork {
                    waitForWork(until: wire.nextRetryDue)
                    continue
                }
                guard connect(wire) else { if shared.isFinished { break } else { continue } }
            }
            let framed = wire.frame()
            guard framed == .keep else { carryOut(framed, wire); continue }
            pump(wire)
        }
        let clean = wire.end()
        if isConnected { wire.closing() }
        close(abort: !clean)
        finish()
    }

    /// Does what the protocol decided about its connection.
    private func carryOut(_ verdict: WireVerdict, _ wire: some WireConnection) {
        switch verdict {
        case .keep:
            break
        case .close:
            answered()
            closeLink(wire, abort: false)
        case .lost:
            closeLink(wire, abort: true)
        case .silent(let what):
            silent(what, wire)
        }
    }

    /// Closes the open connection: the protocol lets go of it first, and
    /// says what comes before the next dial.
    private func closeLink(_ wire: some WireConnection, abort: Bool) {
        guard isConnected else { return }
        wire.closing()
        close(abort: abort)
        switch wire.closed() {
        case .dial: break
        case .backOff: dialer.backOffAfterFruitlessConnection()
        case .pause(let seconds): _ = clock.sleep(seconds: seconds, cancellation: shared.halt)
        }
    }

    /// One turn's I/O: decides whether the unwritten bytes go now (a full
    /// batch, the batch delay passed, nothing more can join them, a stop),
    /// waits once on the link, the stop and (when the protocol wants more)
    /// the queue, reads, writes, and runs the protocol's timers.
    private func pump(_ wire: some WireConnection) {
        // No copy of the open state outlives this look at it: a second
        // reference to its buffer would make the protocol's next change of
        // it copy megabytes (copy on write).
        guard let (fd, unwritten, started) = lookAtOpen() else { return }
        let t = now
        if unwritten > 0, started == nil { changeOpen { $0.batchStartedAt = t } }
        let due = (started ?? (unwritten > 0 ? t : nil)).map { $0 + UInt64(settings.batchDelayMilliseconds) * 1_000_000 }
        let writeNow = unwritten > 0 && (unwritten >= settings.batchBytes || !wire.moreCanJoin || shared.isStopping
                                         || (due.map { t >= $0 } ?? false))
        var timeout: Int32 = 1000
        if unwritten > 0, !writeNow, let due { timeout = Self.milliseconds(until: due, from: t) }
        if rate != nil && wire.hasWork { timeout = min(timeout, 5) }
        if let wake = wire.nextWakeUp { timeout = min(timeout, Self.milliseconds(until: wake, from: t)) }
        // The turn's take learned that no work will come: the protocol may
        // have nothing left, and the next turn ends the loop (else it waited
        // a second on a link with nothing in flight, and the send with it).
        if inputFinished && !endSeenByAWait {
            endSeenByAWait = true
            timeout = 0
        }
        let readable = wait(on: fd, events: Int16(POLLIN) | (writeNow ? Int16(POLLOUT) : 0),
                            watchQueue: wire.watchesQueue, timeout: timeout)
        wire.waited(since: t)
        if readable || writeNow {
            read(wire)
            guard isConnected else { return }
        }
        if writeNow {
            write(wire)
            guard let stalledFor = writeStalledFor else { return }
            if stalledFor > settings.stallSeconds {
                silent("nothing could be written for \(format1(settings.stallSeconds)) s: the gateway is not reading", wire)
                return
            }
        }
        carryOut(wire.checkTimers(), wire)
    }

    /// The open connection's descriptor, unwritten bytes and batch start; nil when closed.
    private func lookAtOpen() -> (fd: Int32, unwritten: Int, batchStartedAt: UInt64?)? {
        guard let c = open else { return nil }
        return (c.link.pollDescriptor, c.outbound.count - c.written, c.batchStartedAt)
    }

    /// Changes the open connection's state in place (its buffer stays uniquely referenced).
    private func changeOpen(_ change: (inout ConnectionState.OpenConnection) -> Void) {
        switch state {
        case .open(var c):
            state = .closed
            change(&c)
            state = .open(c)
        case .closed:
            break
        }
    }

    /// Seconds since a write last moved bytes while some wait; nil when closed or all is written.
    private var writeStalledFor: Double? {
        guard let c = open, c.written < c.outbound.count else { return nil }
        return Double(now - c.lastWriteProgress) / 1e9
    }

    /// Reads what has arrived, at most ``readsPerTurn`` reads, so a peer
    /// that floods bytes cannot keep the loop from its stop and time checks.
    private func read(_ wire: some WireConnection) {
        for _ in 0..<Self.readsPerTurn {
            guard let link else { return }
            let result: TLSConnection.IOResult
            do { result = try readBuffer.withUnsafeMutableBytes { buffer throws(TLSError) in try link.tryRead(into: buffer) } } catch {
                wire.lost()
                closeLink(wire, abort: true)
                return
            }
            switch result {
            case .bytes(let n):
                let t = now
                changeOpen { $0.lastReadAt = t }
                let verdict = wire.received(readBuffer[0..<n])
                guard verdict == .keep else { carryOut(verdict, wire); return }
            case .wantRead, .wantWrite:
                return
            case .closed:
                wire.lost()
                closeLink(wire, abort: true)
                return
            }
        }
    }

    package static let readsPerTurn = 32

    /// Writes what it can of the unwritten bytes; the journal first learns
    /// what they may deliver (write-ahead).
    private func write(_ wire: some WireConnection) {
        guard isConnected else { return }
        guard journalHandedOver() else {
            // The journal broke (the send stops): what is unwritten never reached the gateway.
            wire.lostSilently()
            closeLink(wire, abort: true)
            return
        }
        var failed = false, all = false
        changeOpen { c in
            let before = c.written
            guard (try? c.link.writeAvailable(c.outbound, from: &c.written)) == true else { failed = true; return }
            if c.written > before {
                c.lastWriteProgress = now
                if c.firstWriteAt == nil { c.firstWriteAt = c.lastWriteProgress }
            }
            all = c.written == c.outbound.count
            if all { c.batchStartedAt = nil }
        }
        if failed {
            wire.lost()
            closeLink(wire, abort: true)
        } else if all, wire.wroteAll() {
            dropWritten()
        }
    }

    /// When bytes were last read on the open connection.
    package var lastReadAt: UInt64? { open?.lastReadAt }

    // MARK: - Work

    /// Looks at the queue without taking anything.
    package func lookAtQueue() {
        let state = queue.state
        queueEmpty = state.empty
        inputFinished = inputFinished || state.finished
    }

    /// Whether a notification taken before may go again now (see
    /// ``WireRelease/holds(_:packet:now:)``): a retry inside its device's
    /// quiet hours stays pending for a later run, one past its window is
    /// journaled as skipped, as a first try would be.
    package func mayGoAgain(_ frame: QueuedFrame, packet: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let release, frame.moment != 0 else { return true }
        let now = clock.wallSeconds
        guard let held = release.holds(frame, packet: packet, now: now) else { return true }
        shared.heldAtTheWire([held], now: Int64(now))
        return false
    }

    /// Takes whole frames from the queue into `out` (see ``WorkQueue/take(maxBytes:maxFrames:into:taken:)``); how many.
    /// A scheduled frame its ``release`` holds back is not taken: it is
    /// journaled as skipped, or left pending until its quiet hours end; one
    /// whose device is at the plan's ``cap`` is journaled as skipped.
    package func take(maxBytes: Int, maxFrames: Int, into out: inout [UInt8], taken: (QueuedFrame, Int) -> Void) -> Int {
        let n: Int, finished: Bool
        if release != nil || cap != nil {
            let now = clock.wallSeconds
            var held: [WireRelease.Held] = []
            var capped: [WireCap.Capped] = []
            if let cap, !cap.begin(now: Int64(now), shared: shared) {
                cap.end(now: Int64(now), capped: [], shared: shared)
                return 0
            }
            (n, finished) = queue.take(maxBytes: maxBytes, maxFrames: maxFrames, into: &out, admit: { [release, cap] frame, bytes in
                if let release, !release.admit(frame, bytes: bytes, now: now, held: &held) { return false }
                if let cap, !cap.admit(frame, bytes: bytes, capped: &capped) { return false }
                return true
            }, taken: taken)
            // The claims are in the ledger before any byte of what was taken is written.
            cap?.end(now: Int64(now), capped: capped, shared: shared)
            if !held.isEmpty { shared.heldAtTheWire(held, now: Int64(now)) }
        } else {
            (n, finished) = queue.take(maxBytes: maxBytes, maxFrames: maxFrames, into: &out, taken: taken)
        }
        if finished { inputFinished = true }
        queueEmpty = n == 0 || queue.isEmpty
        if n > 0 { shared.took(n) }
        return n
    }

    /// With no connection and nothing to send now: sleeps until `due` (a
    /// retry's time), new frames, the stop or the halt.
    package func waitForWork(until due: UInt64?) {
        if let due, !inputFinished, !isRetiring {
            // Frames that come meanwhile need not wait for the retry (a
            // backoff may be 30 s): they wake the wait, as without one.
            queue.waitForFrames(orAnyOf: [shared.cancellation, shared.halt], timeout: Self.milliseconds(until: due, from: now), clock: clock)
        } else if let due {
            _ = clock.sleep(seconds: Double(Int64(due) - Int64(now)) / 1e9, cancellation: shared.halt)
        } else {
            queue.waitForFrames(orAnyOf: [shared.cancellation, shared.halt], clock: clock)
        }
    }

    /// A notification was handed to the connection.
    @inlinable
    package func handed(shard: Int32, ordinal: Int32) { marks.handed(shard: shard, ordinal: ordinal) }

    /// Write-ahead: the journal learns what may reach the gateway before it
    /// can, so a resume after a crash knows which notifications may be
    /// duplicates. False when the journal could not learn it: then nothing
    /// may be written (the gateway would accept what the resume sends again, uncounted).
    package func journalHandedOver() -> Bool {
        guard !marks.unmarked.isEmpty else { return true }
        guard shared.markSent(shards: marks.unmarked, below: marks.below) else { return false }
        marks.markedAll()
        return true
    }

    // MARK: - Waiting

    /// The poll timeout, in milliseconds (at most a second), until monotonic time `due`.
    package static func milliseconds(until due: UInt64, from t: UInt64) -> Int32 {
        Int32(max(0, min(1000, (Int64(due) - Int64(t)) / 1_000_000 + 1)))
    }

    /// Waits until the socket is ready for `events`, the send stops or
    /// halts, `timeout` passes, or (with `watchQueue`) frames arrive;
    /// whether the socket is ready. When frames arrived before the wait
    /// could begin, it does not wait.
    private func wait(on socket: Int32, events: Int16, watchQueue: Bool, timeout: Int32) -> Bool {
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
        clock.poll(&fds, count: watch ? 4 : 3, milliseconds: timeout)
        return fds[0].revents != 0
    }

    // MARK: - Silence

    /// The connection went silent (it neither read nor answered): it is
    /// dropped, and three in a row, with no answer between them, end the
    /// send (resumable) rather than retrying for ever.
    private func silent(_ what: String, _ wire: some WireConnection) {
        wire.lostSilently()
        silentInARow += 1
        log("\(what); reconnecting")
        if silentInARow >= 3 {
            shared.fail(.unreachable(TLSError(.timedOut(operation: "waiting for a gateway that stopped reading or answering (3 connections in a row)"))))
        }
        closeLink(wire, abort: true)
    }

    /// The gateway answered: silence starts counting again.
    private func answered() { silentInARow = 0 }

    // MARK: - End

    /// No one takes from the queue any more (a plan reader waiting for room
    /// must not wait for ever); the journal learns how far each shard went.
    package func finish() {
        dialer.dropSpare()
        queue.leave()
        shared.workerFinished(sentBelow: marks.map)
    }
}
