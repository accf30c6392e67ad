#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignIO
import CampaignTLS

/// One connection to a binary-interface gateway and the shards it owns, on
/// its own thread: the binary protocol's half of ``NotificationTransport``.
///
/// Packets go into one buffer that holds everything written on the current
/// connection; the ``UnprovenWindow`` lists the notifications in it and
/// decides what the gateway's answer (or silence) proves. A connection lost
/// without a response leaves the whole window unproven: it is sent again
/// (possible duplicates, counted) and proofs come more often from then on.
final class ConnectionWorker: GatewayConnectionWorker, @unchecked Sendable {
    let index: Int
    let queue: WorkQueue
    let shared: SendShared
    let settings: SendSettings
    let format: NotificationFormat

    private var queueEmpty = false
    private var inputFinished = false
    private var resends = ResendQueue()
    private var window = UnprovenWindow()
    private var marks: SentMarks
    private var strikes = DropStrikes()
    private let dialer: GatewayDialer
    private var bucket: SharedRate? { shared.rate }

    private var connection: TLSConnection?
    /// Every packet written, or to write, on this connection.
    private var sent: [UInt8] = []
    private var written = 0
    private var decoder = ErrorResponseDecoder()
    private var batchStartedAt: UInt64? = nil
    private var cadence: ProofCadence
    private var proofWrittenAt: UInt64? = nil
    private var nextProof: UInt32 = 0
    private var acceptedOnConnection = 0
    private var readBuffer = [UInt8](repeating: 0, count: 4096)
    private var lastWriteProgress: UInt64 = 0
    private var consecutiveStalls = 0

    init(index: Int, queue: WorkQueue, shared: SendShared, settings: SendSettings, format: NotificationFormat, shards: Int) {
        self.index = index
        self.queue = queue
        self.shared = shared
        self.settings = settings
        self.format = format
        marks = SentMarks(shards: shards)
        cadence = ProofCadence(settings: settings, reportsErrors: format.reportsErrors)
        dialer = GatewayDialer(settings: settings, shared: shared)
        queue.join()
        sent.reserveCapacity(settings.batchBytes * 4)
    }

    private var now: UInt64 { Deadline.now().nanoseconds }

    private var hasWork: Bool { !shared.isStopping && (!resends.isEmpty || !queueEmpty) }

    // MARK: - Main loop

    func run() {
        while !shared.cancellation.isCancelled {
            if connection == nil {
                // Whether the queue has frames, without taking any.
                let state = queue.state
                queueEmpty = state.empty
                inputFinished = inputFinished || state.finished
            }
            // Finished, with or without a connection: the simple format never
            // gets a response that closes its last connection, so waiting for
            // one to close first kept such a send running for ever.
            if !hasWork && window.notificationCount == 0 && (inputFinished || shared.isStopping) { break }
            if connection == nil {
                if !hasWork {   // (and the window is empty: it is emptied with its connection)
                    queue.waitForFrames(orAnyOf: [shared.cancellation, shared.halt])
                    continue
                }
                guard let ready = dialer.connect() else { if shared.isFinished { break } else { continue } }
                connection = ready
                acceptedOnConnection = 0
                lastWriteProgress = now
            }
            fillBatch()
            let workLeft = hasWork || (!inputFinished && !shared.isStopping)
            if !window.hasProof, window.notificationCount > 0, format.reportsErrors {
                if !workLeft || cadence.isDue(notifications: window.notificationCount, now: now)
                    || window.entries.count >= settings.maxWindow || shared.isStopping {
                    appendProof()
                }
            }
            pump(workLeft: workLeft)
        }
        // Nothing unproven (the simple format's last connection, written out):
        // a clean close, so the gateway reads every byte before the socket goes.
        if let connection { window.notificationCount == 0 ? connection.close() : connection.abort(); self.connection = nil }
        dialer.dropSpare()
        // No one takes from the queue any more: a plan reader waiting for room must not wait for ever.
        queue.leave()
        shared.workerFinished(sentBelow: marks.map)
    }

    // MARK: - Framing

    private func fillBatch() {
        guard !window.hasProof, connection != nil else { return }
        // A batch stops where a proof is due: with batches of hundreds of
        // frames, a cadence of 64 would otherwise not be kept.
        let every = cadence.notificationsPerProof ?? Int.max
        while sent.count - written < settings.batchBytes, window.entries.count < settings.maxWindow,
              window.notificationCount < every, !shared.isStopping {
            if let bucket, !bucket.take() { break }
            if let r = resends.popFirst() {
                let start = sent.count
                sent.append(contentsOf: r.packet)
                append(InFlight(seq: r.seq, shard: r.shard, ordinal: r.ordinal, identifier: r.identifier,
                                start: start, end: sent.count, attempts: r.attempts))
                continue
            }
            let room = settings.batchBytes - (sent.count - written)
            let limit = bucket != nil ? 1 : min(settings.maxWindow - window.entries.count, every - window.notificationCount)
            let (n, finished) = queue.take(maxBytes: room, maxFrames: limit, into: &sent) { frame, offset in
                append(InFlight(seq: frame.seq, shard: frame.shard, ordinal: frame.ordinal, identifier: UInt32(truncatingIfNeeded: frame.seq),
                                start: offset, end: offset + frame.count, attempts: 0))
            }
            if finished { inputFinished = true }
            queueEmpty = n == 0 || queue.isEmpty
            if n == 0 { break }
        }
    }

    @inline(__always)
    private func append(_ entry: InFlight) {
        if batchStartedAt == nil { batchStartedAt = now }
        cadence.windowStarted(at: batchStartedAt!)
        window.append(entry)
        marks.handed(shard: entry.shard, ordinal: entry.ordinal)
    }

    /// A proof of acceptance after the window (see ``NotificationEncoder/appendProof(identifier:format:to:)``),
    /// with an identifier no plan record has: the high bit set, the worker's index, a counter.
    private func appendProof() {
        nextProof &+= 1
        let identifier = 0x8000_0000 | UInt32(index & 0x7F) << 24 | (nextProof & 0x00FF_FFFF)
        let start = sent.count
        guard NotificationEncoder.appendProof(identifier: identifier, format: format, to: &sent) else { return }
        if batchStartedAt == nil { batchStartedAt = now }
        window.appendProof(identifier: identifier, start: start, end: sent.count)
        proofWrittenAt = nil
        // The gateway closes this connection once it answers the proof: open
        // the next one meanwhile, so the handshake (6 ms, two RSA signatures)
        // overlaps the wait instead of following it.
        if hasWork || (!inputFinished && !shared.isStopping) { dialer.openSpare() }
    }

    // MARK: - I/O

    private func pump(workLeft: Bool) {
        guard let connection else { return }
        let unwritten = sent.count - written
        let delay = UInt64(settings.batchDelayMilliseconds) * 1_000_000
        let dueAt = batchStartedAt.map { $0 + delay }
        let t = now
        let wantWrite = unwritten > 0 && (unwritten >= settings.batchBytes || window.hasProof || !workLeft
                                          || (dueAt.map { t >= $0 } ?? false) || shared.isStopping)
        var timeout: Int32 = 1000
        if unwritten > 0 && !wantWrite, let dueAt { timeout = Int32(max(0, min(1000, (Int64(dueAt) - Int64(t)) / 1_000_000 + 1))) }
        if bucket != nil && hasWork { timeout = min(timeout, 5) }
        if !window.hasProof, let due = cadence.millisecondsUntilDue(now: t) { timeout = min(timeout, due) }
        var fds = [pollfd(fd: connection.socket.fd, events: Int16(POLLIN) | (wantWrite ? Int16(POLLOUT) : 0), revents: 0),
                   pollfd(fd: shared.cancellation.pollDescriptor, events: Int16(POLLIN), revents: 0),
                   // Once stopping, halt stays readable: watching it would turn
                   // the wait for the last proof into a busy loop (poll skips -1).
                   pollfd(fd: shared.isStopping ? -1 : shared.halt.pollDescriptor, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: queue.doorbell.pollDescriptor, events: Int16(POLLIN), revents: 0)]
        var watchQueue = !inputFinished && queueEmpty && !window.hasProof && unwritten < settings.batchBytes
        if watchQueue && !queue.prepareToSleep() {
            // Frames arrived meanwhile: no need to wait for them.
            watchQueue = false
            queueEmpty = false
            if !wantWrite { timeout = 0 }
        }
        _ = poll(&fds, watchQueue ? 4 : 3, timeout)
        if fds[0].revents != 0 || wantWrite {
            if !readResponses() { return }
        }
        if wantWrite, self.connection != nil {
            writeSome()
            if self.connection != nil, written < sent.count,
               Double(now - lastWriteProgress) / 1e9 > settings.stallSeconds {
                gatewaySilent("nothing could be written for \(format1(settings.stallSeconds)) s: the gateway is not reading")
                return
            }
        }
        if window.hasProof, let at = proofWrittenAt, Double(now - at) / 1e9 > settings.stallSeconds {
            gatewaySilent("no answer to the proof of acceptance within \(format1(settings.stallSeconds)) s")
        }
    }

    /// The gateway neither reads nor answers. Three connections like that in a
    /// row (with no response between them) end the send, resumable, rather than
    /// retrying for ever.
    private func gatewaySilent(_ what: String) {
        consecutiveStalls += 1
        shared.log("connection \(index + 1): \(what); reconnecting")
        connectionLost(countStrike: false)
        if consecutiveStalls >= 3 {
            shared.fail(.unreachable(TLSError(.timedOut(operation: "waiting for a gateway that stopped reading or answering (3 connections in a row)"))))
        }
    }

    private func writeSome() {
        guard let connection else { return }
        if !marks.unmarked.isEmpty {
            // Write-ahead: the journal learns what may reach the gateway before it can,
            // so a resume after a crash knows which notifications may be duplicates.
            shared.markSent(shards: marks.unmarked, below: marks.below)
            marks.markedAll()
        }
        let before = written
        guard (try? connection.writeAvailable(sent, from: &written)) == true else {
            connectionLost()
            return
        }
        if written > before { lastWriteProgress = now }
        guard written == sent.count else { return }
        batchStartedAt = nil
        if window.hasProof, proofWrittenAt == nil { proofWrittenAt = now }
        if format == .simple {
            shared.record(window.presumed())
            resetWindow()
        }
    }

    /// Reads whatever the gateway sent. False when the connection ended.
    private func readResponses() -> Bool {
        guard let connection else { return false }
        while true {
            let result: TLSConnection.IOResult
            do {
                result = try readBuffer.withUnsafeMutableBytes { try connection.tryRead(into: $0) }
            } catch {
                connectionLost()
                return false
            }
            switch result {
            case .bytes(let n):
                decoder.append(readBuffer[0..<n])
                do {
                    if let response = try decoder.next() {
                        handle(response)
                        return false
                    }
                } catch {
                    shared.log("connection \(index + 1): \(error) Treating the connection as lost.")
                    connectionLost()
                    return false
                }
            case .wantRead, .wantWrite:
                return true
            case .closed:
                connectionLost()
                return false
            }
        }
    }

    // MARK: - Outcomes

    /// The gateway's error response: the window decides what it proves.
    private func handle(_ response: ErrorResponse) {
        consecutiveStalls = 0
        guard let resolution = window.resolve(response, packets: sent, format: format) else {
            shared.log("connection \(index + 1): an error response (status \(response.status)) names identifier \(response.identifier), which was never sent on it; treating the connection as lost")
            connectionLost()
            return
        }
        for (seq, status) in resolution.refusedAsMalformed {
            shared.log("connection \(index + 1): the gateway refused plan record \(seq) with status \(status): a bug in the plan or the encoder; it will not be sent again")
        }
        acceptedOnConnection += resolution.outcome.accepted
        requeue(resolution.resend)
        if resolution.wasShutdown { shared.count(shutdowns: 1) }
        shared.record(resolution.outcome)
        if resolution.outcome.accepted > 0 { strikes.clear(); dialer.productive() }
        closeConnection(abort: false)
    }

    private func requeue(_ fresh: [Resend]) {
        resends.pushFront(fresh)
        if !fresh.isEmpty { shared.count(resends: fresh.count) }
    }

    /// The connection ended without an error response: nothing in the window is proven.
    private func connectionLost(countStrike: Bool = true) {
        var (lost, risked) = window.lost(written: written)
        if format == .simple {
            // Written notifications were presumed already; only unwritten ones go again.
            requeue(lost.filter { $0.start >= written }.map { Resend($0, packets: sent) })
            risked = 0
        } else {
            let fruitless = countStrike && acceptedOnConnection == 0
            let gatewayHasAnswered = fruitless ? shared.connectionWasFruitless() : true
            if fruitless, gatewayHasAnswered, let first = lost.first, strikes.strike(first.seq) {
                // The same notification heads every lost connection: quarantine it.
                var outcome = ProofOutcome()
                let token = sent[NotificationEncoder.deviceTokenRange(inPacket: sent[first.start..<first.end], format: format)]
                outcome.fail(first, status: .unknown, token: Array(token), gaveUp: true, attempts: DropStrikes.quarantineAfter)
                shared.record(outcome)
                shared.log("connection \(index + 1): plan record \(first.seq) was at the head of \(DropStrikes.quarantineAfter) lost connections in a row; quarantined")
                lost.removeFirst()
                risked = max(0, risked - 1)
            } else {
                cadence.connectionLost(risked: risked)
            }
            requeue(lost.map { Resend($0, packets: sent) })
        }
        shared.count(duplicatesRisked: risked, drops: 1)
        closeConnection(abort: true)
    }

    private func resetWindow() {
        window.removeAll()
        cadence.windowEnded()
        sent.removeAll(keepingCapacity: true)
        written = 0
        proofWrittenAt = nil
        batchStartedAt = nil
        decoder = ErrorResponseDecoder()
    }

    private func closeConnection(abort: Bool) {
        if let connection { abort ? connection.abort() : connection.close() }
        connection = nil
        resetWindow()
    }
}
