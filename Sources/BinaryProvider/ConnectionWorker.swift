#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignIO
import CampaignTLS
import SendJournal
import GatewayClient
import SendEngine

/// One connection to a binary-interface gateway and the shards it owns, on
/// its own thread: the binary protocol around a ``ConnectionEngine``.
///
/// Packets go into the engine's outbound buffer, which holds everything
/// written on the current connection (one window: the gateway closes it once
/// it answers the proof); the ``UnprovenWindow`` lists the notifications in it and
/// decides what the gateway's answer (or silence) proves. A connection lost
/// without a response leaves the whole window unproven: it is sent again
/// (possible duplicates, counted) and proofs come more often from then on.
/// Nothing the gateway does for its own reasons (status 1, 255, undefined
/// codes, lost connections) makes a notification final: it is sent again
/// after a backoff, or left pending for `--resume`.
package final class ConnectionWorker: GatewayConnectionWorker, @unchecked Sendable {
    package let engine: ConnectionEngine
    package let format: NotificationFormat
    private var index: Int { engine.index }
    private var shared: SendShared { engine.shared }
    private var settings: SendSettings { engine.settings }

    private var resends = ResendQueue()
    /// Notifications refused for the gateway's own trouble (status 1, 255,
    /// undefined codes), each waiting out its backoff before it joins ``resends``.
    private var waiting: [(due: UInt64, resend: Resend)] = []
    /// Connections in a row whose first notification the gateway failed for its own trouble.
    private var refusedFirstInARow = 0
    private var window = UnprovenWindow()
    /// What one take from the queue handed over, kept between batches: a
    /// fresh array would grow (and reallocate) through every batch.
    private var takenScratch: [InFlight] = []
    private var strikes = DropStrikes()

    private var decoder = ErrorResponseDecoder()
    private var cadence: ProofCadence
    /// Whether the window takes more, or waits for its proof's answer (``BinaryWindowState``).
    private var windowState = BinaryWindowState()
    private var nextProof: UInt32 = 0
    private var acceptedOnConnection = 0
    /// The simple format (command 0) has no answers: what a gateway reads is
    /// presumed delivered once written. But a peer that speaks at all is no
    /// binary gateway (an HTTP/2 server's SETTINGS, a web server's page), and
    /// such a server would otherwise have every notification presumed, and
    /// the send end 0. So a new connection's written notifications are held,
    /// as the enhanced format's are until their proof, until it has kept
    /// quiet ``simpleQuietSeconds`` (from then on, presumed as written).
    private var presumesFrom: UInt64 = 0
    /// This connection kept quiet through its first ``simpleQuietSeconds``: it presumes as it writes.
    private var quietProven = false
    /// The peer sent bytes that are no error response: it is no binary gateway.
    private var peerSpokeNonsense = false
    /// Bytes have come on this connection (its first are an HTTP/2 server's SETTINGS when it is one).
    private var heardOnConnection = false
    /// How long a simple-format connection must stay silent before what it
    /// wrote is presumed: an HTTP/2 server sends its SETTINGS at once (with
    /// its handshake's last flight, or a round trip after our first bytes).
    package static let simpleQuietSeconds = 0.5
    /// The pause before the next dial the last response asked for (``closed()``).
    private var pauseAfterClose: Double?
    /// What a window may hold before its proof, paced to the gateway's reading.
    private var windowBytes = WindowByteLimit()
    /// Every packet written, or to write, on this connection (the engine's).
    private var sent: [UInt8] { engine.outbound }
    private var written: Int { engine.written }

    package init(engine: ConnectionEngine, format: NotificationFormat) {
        self.engine = engine
        self.format = format
        cadence = ProofCadence(settings: engine.settings, reportsErrors: format.reportsErrors)
    }

    private var now: UInt64 { engine.now }

    /// A binary pool has a fixed size: nothing retires it.
    package func retire() {}

    package var hasWork: Bool { !shared.isStopping && (!resends.isEmpty || !engine.queueEmpty) }
    /// Work may still come: some is here, or the queue is open.
    private var workLeft: Bool { hasWork || (!engine.inputFinished && !shared.isStopping) }

    // MARK: - The engine's turns

    /// When the first notification waiting out its backoff falls due (the
    /// discarded and the unproven go at once: they were never refused).
    package var nextRetryDue: UInt64? { waiting.lazy.map(\.due).min() }

    package func beginTurn() -> Bool {
        let t = now
        if !waiting.isEmpty, waiting.contains(where: { $0.due <= t }) {
            resends.pushFront(waiting.filter { $0.due <= t }.map(\.resend))
            waiting.removeAll { $0.due <= t }
        }
        // Finished, with or without a connection: the simple format never
        // gets a response that closes its last connection, so waiting for
        // one to close first kept such a send running for ever. (Without a
        // connection the window is empty: it is emptied with its connection.)
        // A stop leaves what waits out a backoff pending for the resume.
        if !hasWork && window.notificationCount == 0 && ((engine.inputFinished && waiting.isEmpty) || shared.isStopping) { return false }
        if shared.isStopping && shared.stopGraceIsOver {
            // No proof within the stop's grace: what was written stays
            // pending for the resume (possible duplicates, counted by
            // ``end()``); a gateway that never answers must not hold a stop
            // for the proof's 60 s.
            engine.log("\(window.notificationCount) notification\(window.notificationCount == 1 ? "" : "s") still unproven \(Int(SendShared.stopGraceSeconds)) s after the stop; left for --resume")
            return false
        }
        return true
    }

    package func opened(_ link: ConnectionLink) -> Bool {
        acceptedOnConnection = 0
        quietProven = false
        peerSpokeNonsense = false
        heardOnConnection = false
        presumesFrom = now + UInt64(Self.simpleQuietSeconds * 1e9)
        return true
    }

    package func frame() -> WireVerdict {
        fillBatch()
        if windowState.takesMore, window.notificationCount > 0, format.reportsErrors {
            if !workLeft || cadence.isDue(notifications: window.notificationCount, now: now)
                || window.entries.count >= settings.maxWindow || shared.isStopping || sent.count >= windowBytes.bytes {
                appendProof()
            }
        }
        return .keep
    }

    /// A batch goes at once when a proof ends it, or when nothing more will come.
    package var moreCanJoin: Bool { windowState.takesMore && workLeft }

    package var watchesQueue: Bool {
        !engine.inputFinished && engine.queueEmpty && windowState.takesMore && sent.count - written < settings.batchBytes
    }

    package var nextWakeUp: UInt64? {
        let proofDue = windowState.takesMore ? cadence.millisecondsUntilDue(now: now).map { now + UInt64($0) * 1_000_000 } : nil
        let quietEnds = format == .simple && !quietProven && window.notificationCount > 0 ? presumesFrom : nil
        return [proofDue, nextRetryDue, quietEnds].compactMap { $0 }.min()
    }

    package func waited(since: UInt64) {}

    /// Nothing unproven (the simple format's last connection, written out):
    /// a clean close, so the gateway reads every byte before the socket goes.
    /// What is unproven stays pending for the resume, and what of it was
    /// written is counted here as possible duplicates (the simple format's
    /// written were presumed): a run that ends has counted everything it
    /// risked, and a resume counts only what a killed run left.
    package func end() -> Bool {
        guard window.notificationCount > 0 else { return true }
        if format != .simple || !quietProven {
            shared.count(duplicatesRisked: window.lost(written: written).risked)
        }
        return false
    }

    package func closing() { resetWindow() }

    package func closed() -> AfterClose {
        defer { pauseAfterClose = nil }
        return pauseAfterClose.map { .pause(seconds: $0) } ?? .dial
    }

    // MARK: - Framing

    private func fillBatch() {
        guard windowState.takesMore, engine.isConnected else { return }
        // A batch stops where a proof is due: with batches of hundreds of
        // frames, a cadence of 64 would otherwise not be kept.
        let every = cadence.notificationsPerProof ?? Int.max
        while sent.count - written < settings.batchBytes, window.entries.count < settings.maxWindow,
              window.notificationCount < every, !shared.isStopping,
              !format.reportsErrors || sent.count < windowBytes.bytes {
            if let rate = engine.rate, !rate.take() { break }
            if let r = resends.popFirst() {
                // Asked the schedule's verdict again, as its first try was when taken.
                if r.moment != 0, !r.packet.withUnsafeBufferPointer({ engine.mayGoAgain(r.frame, packet: $0) }) { continue }
                let (start, end) = engine.withOutbound { sent in
                    let start = sent.count
                    sent.append(contentsOf: r.packet)
                    return (start, sent.count)
                }
                append(InFlight(seq: r.seq, shard: r.shard, ordinal: r.ordinal, identifier: r.identifier,
                                start: start, end: end, attempts: r.attempts, moment: r.moment, zone: r.zone, risked: r.risked))
                continue
            }
            let room = settings.batchBytes - (sent.count - written)
            let limit = engine.rate != nil ? 1 : min(settings.maxWindow - window.entries.count, every - window.notificationCount)
            var taken = takenScratch
            takenScratch = []
            taken.removeAll(keepingCapacity: true)
            let n = engine.withOutbound { sent in
                engine.take(maxBytes: room, maxFrames: limit, into: &sent) { frame, offset in
                    taken.append(InFlight(seq: frame.seq, shard: frame.shard, ordinal: frame.ordinal, identifier: UInt32(truncatingIfNeeded: frame.seq),
                                          start: offset, end: offset + frame.count, attempts: 0, moment: frame.moment, zone: frame.zone))
                }
            }
            for entry in taken { append(entry) }
            takenScratch = taken
            if n == 0 { break }
        }
    }

    @inline(__always)
    private func append(_ entry: InFlight) {
        cadence.windowStarted(at: now)
        window.append(entry)
        engine.handed(shard: entry.shard, ordinal: entry.ordinal)
    }

    /// A proof of acceptance after the window (see ``NotificationEncoder/appendProof(identifier:format:to:)``),
    /// with an identifier no plan record has: the high bit set, the worker's index, a counter.
    private func appendProof() {
        nextProof &+= 1
        let identifier = 0x8000_0000 | UInt32(index & 0x7F) << 24 | (nextProof & 0x00FF_FFFF)
        let (start, end, appended) = engine.withOutbound { sent in
            let start = sent.count
            let appended = NotificationEncoder.appendProof(identifier: identifier, format: format, to: &sent)
            return (start, sent.count, appended)
        }
        guard appended else { return }
        window.appendProof(identifier: identifier, start: start, end: end)
        windowState.proofFramed()
        // The gateway closes this connection once it answers the proof: open
        // the next one meanwhile, so the handshake (6 ms, two RSA signatures)
        // overlaps the wait instead of following it.
        if hasWork || (!engine.inputFinished && !shared.isStopping) { engine.dialer.openSpare() }
    }

    // MARK: - What the engine read and wrote

    package func checkTimers() -> WireVerdict {
        // Written before the connection had kept quiet long enough, and all of it on the wire: presumed now.
        if format == .simple, !quietProven, now >= presumesFrom, window.notificationCount > 0, written == sent.count, engine.isConnected {
            presumeWritten()
        }
        return switch windowState.timer(at: now, stallSeconds: settings.stallSeconds) {
        case .none: .keep
        case .silent(let seconds): .silent("no answer to the proof of acceptance within \(format1(seconds)) s")
        }
    }

    package func lostSilently() { connectionLost(countStrike: false) }

    package func lost() { connectionLost() }

    /// The simple format presumes what was written accepted, once its
    /// connection has kept quiet (``simpleQuietSeconds``): its window ends
    /// there. The enhanced one keeps its bytes until the proof's answer says
    /// what to send again.
    package func wroteAll() -> Bool {
        windowState.wroteAll(at: now)
        guard format == .simple, quietProven || now >= presumesFrom else { return false }
        presumeWritten()
        return true
    }

    /// The simple format's window, all written on a connection that kept quiet: presumed delivered.
    private func presumeWritten() {
        quietProven = true
        shared.record(window.presumed())
        resetWindow()
    }

    package func received(_ bytes: ArraySlice<UInt8>) -> WireVerdict {
        let first = !heardOnConnection
        heardOnConnection = true
        decoder.append(bytes)
        do {
            guard let response = try decoder.next() else { return .keep }
            return handle(response)
        } catch {
            peerSpokeNonsense = true
            connectionLost()
            if first, Self.isHTTP2Settings(bytes) {
                // The HTTP/2 API's port: no binary gateway will answer there, however often it is dialled.
                shared.fail(.speaksHTTP2(gateway: "\(settings.gatewayHost):\(settings.gatewayPort)"))
            } else {
                engine.log("\(error) Treating the connection as lost.")
            }
            return .lost
        }
    }

    /// An HTTP/2 server's first frame: SETTINGS (type 4) on stream 0, its
    /// length a multiple of 6, unacknowledged (RFC 9113, 6.5). An error
    /// response starts with command 8, so no gateway's answer looks like it.
    package static func isHTTP2Settings(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard bytes.count >= 9 else { return false }
        let b = Array(bytes.prefix(9))
        let length = Int(b[0]) << 16 | Int(b[1]) << 8 | Int(b[2])
        return length % 6 == 0 && b[3] == 4 && b[4] == 0 && b[5] & 0x7F == 0 && b[6] == 0 && b[7] == 0 && b[8] == 0
    }

    // MARK: - Outcomes

    /// The gateway's error response: the window decides what it proves, and
    /// the gateway closes the connection after it.
    private func handle(_ response: ErrorResponse) -> WireVerdict {
        guard let resolution = window.resolve(response, packets: sent, format: format) else {
            engine.log("an error response (status \(response.status)) names identifier \(response.identifier), which was never sent on it; treating the connection as lost")
            connectionLost()
            return .lost
        }
        for (seq, status) in resolution.refusedAsMalformed {
            engine.log("the gateway refused plan record \(seq) with status \(status): a bug in the plan or the encoder; it will not be sent again")
        }
        if response.identifier & 0x8000_0000 != 0, let first = engine.firstWriteAt {
            // Our proof's answer: everything before it was read in this time.
            windowBytes.proven(written: sent.count, seconds: Double(now &- first) / 1e9)
        }
        acceptedOnConnection += resolution.outcome.accepted
        requeue(resolution.resend)
        retryLater(resolution.retryLater, status: response.status)
        if resolution.wasShutdown { shared.count(shutdowns: 1) }
        var outcome = resolution.outcome
        // Status 8 (invalid token) is the binary interface's unregistered
        // device: suppressed from now on, as a 410 is over HTTP/2.
        for i in outcome.failures.indices where outcome.failures[i].cause == .binary(.invalidToken) {
            outcome.failures[i].unregisteredAt = UInt32(engine.clock.wallSeconds)
        }
        shared.record(outcome)
        if resolution.outcome.accepted > 0 { strikes.clear(); engine.dialer.productive() }
        // After the record: what it accepted ends the last streak of trouble, this starts the next.
        if !resolution.retryLater.isEmpty {
            shared.serverTrouble("status \(response.status.rawValue) (\(response.status.meaning))", limitSeconds: settings.outageLimitSeconds)
        }
        if resolution.retryLater.isEmpty || acceptedOnConnection > 0 {
            refusedFirstInARow = 0
        } else if !shared.isStopping {
            // The gateway failed the first thing it read on this connection:
            // pause before the next, longer each time in a row (as a retry's
            // backoff), so a gateway that answers status 1 to everything is
            // not redialled, and sent a batch, at handshake speed.
            refusedFirstInARow += 1
            pauseAfterClose = RetryBackoff.seconds(retries: refusedFirstInARow, base: settings.retryBackoffSeconds)
        }
        return .close
    }

    /// Refused for the gateway's own trouble: again after a backoff that grows with each refusal, never final.
    private func retryLater(_ refused: [Resend], status: ErrorResponse.Status) {
        guard !refused.isEmpty else { return }
        for r in refused {
            let seconds = RetryBackoff.seconds(retries: Int(r.attempts), base: settings.retryBackoffSeconds)
            waiting.append((now + UInt64(seconds * 1e9), r))
        }
        shared.count(resends: refused.count, kind: "status \(status.rawValue) \(status.meaning)")
    }

    private func requeue(_ fresh: [Resend]) {
        resends.pushFront(fresh)
        if !fresh.isEmpty { shared.count(resends: fresh.count, kind: "discarded or unproven on their connection") }
    }

    /// The connection ended without an error response: nothing in the window
    /// is proven. (The engine closes it.)
    private func connectionLost(countStrike: Bool = true) {
        var (lost, wasWritten, risked) = window.lost(written: written)
        if format == .simple && quietProven && !peerSpokeNonsense {
            // A connection that kept quiet, closed later (as a gateway does
            // after a notification it refuses): what was written to it is
            // presumed, as it would have been once the batch was all on the
            // wire; the unwritten, and one cut short, go again.
            let presumed = window.presumed(written: written)
            if presumed.presumed > 0 { shared.record(presumed) }
            requeue(lost.filter { $0.end > written }.map { Resend($0, packets: sent) })
            risked = 0
        } else {
            // Anything else, a simple-format connection lost before it kept
            // quiet long enough, or one that spoke nonsense, too: nothing in
            // it is proven, and all of it goes again.
            let fruitless = countStrike && acceptedOnConnection == 0
            let gatewayHasAnswered = fruitless ? shared.connectionWasFruitless() : true
            if fruitless, gatewayHasAnswered, let first = lost.first, strikes.strike(first.seq) {
                // The same notification heads every lost connection: it may be
                // what kills them, or the gateway may be failing. Not sent again
                // in this run (it must not loop for ever), not final either: the
                // run ends with 69 and `--resume` sends it. It stays counted as
                // a possible duplicate, since the resume sends it again.
                shared.parked()
                engine.log("plan record \(first.seq) was at the head of \(DropStrikes.parkAfter) lost connections in a row; it is not sent again in this run (resume to send it)")
                lost.removeFirst()
            } else {
                cadence.connectionLost(risked: wasWritten)
            }
            requeue(lost.map { Resend($0, packets: sent) })
        }
        shared.count(duplicatesRisked: risked, drops: 1)
    }

    private func resetWindow() {
        window.removeAll()
        cadence.windowEnded()
        windowState.reset()
        decoder = ErrorResponseDecoder()
    }
}
